"""Degenerate block Gibbs (paper, section 7.3): block MH's proposal, always accepted.

Example:
    >>> import mhfast
    >>> from mhfast.models.tabular import TabularMLM
    >>> r = mhfast.sample(TabularMLM.random(3, 3, seed=0), 3, sampler="block-gibbs", chains=2, epochs=2, burn_in=0)
    >>> float(r.acceptance_rate[1])
    1.0
"""
from __future__ import annotations

from .base import Capabilities
from .block_mh import BlockMH


class BlockGibbs(BlockMH):
    """No energies of X' (accepted anyway); energies recomputed once per epoch for the statistics."""

    name = "block-gibbs"
    gibbs = True
    # always accepts: it cannot honour energy terms, nor a proposal other than block MH's (uniform_mix must be 0)
    capabilities = Capabilities(extra_energy=False, hastings=False, always_accepts=True, blocks=True)
