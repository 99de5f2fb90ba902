"""Subcommands of the ``mhfast`` CLI, one module each (see :mod:`mhfast.cli` for the contract)."""
