"""Sampler kernels: one module per transition family of the paper, and the registry the driver uses.

A new sampler = a new module here with a class that has ``name``, ``init``, ``sweep`` and ``step``
(:class:`~mhfast.sampler.kernels.base.Kernel`) plus one line in :data:`KERNELS`; the option spec
(``sampler=`` choices), the CLI flags and the docs pick it up from the registry.

Example:
    >>> sorted(KERNELS)
    ['block-gibbs', 'block-mh', 'gibbs', 'mh']
"""
from __future__ import annotations

from .block_gibbs import BlockGibbs
from .block_mh import BlockMH
from .gibbs import DegenerateGibbs
from .mh import SingleSiteMH

KERNELS = {
    "mh": SingleSiteMH,
    "gibbs": DegenerateGibbs,
    "block-mh": BlockMH,
    "block-gibbs": BlockGibbs,
}
