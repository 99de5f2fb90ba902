"""``python3 -m mhfast ...`` runs the command line (:mod:`mhfast.cli`)."""
from .cli import entry

entry()
