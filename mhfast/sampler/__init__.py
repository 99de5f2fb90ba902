"""The Metropolis-Hastings sampler family of the paper: :func:`sample` and its parts.

Modules: ``api`` (arguments, result), ``rng`` (counter-based randomness), ``backend``
(compiled or reference ops), ``runner`` (model calls), ``state`` (chains, energies, caches),
``single_site`` (MH, degenerate Gibbs), ``block`` (block MH / Gibbs), ``schedules``.
"""
from .api import SampleResult, sample

__all__ = ["sample", "SampleResult"]
