"""The Metropolis-Hastings sampler family of the paper: :func:`sample` and its parts (docs/architecture.md).

Layers, top down: ``api`` (arguments -> ``options.SamplerConfig`` and ``problem.Problem``; the result,
``result``), ``driver`` (epochs, burn-in, best states, statistics; ``adaptive`` for until_rhat / min_ess),
``kernels`` (one module per transition family: ``mh``, ``gibbs``, ``block_mh``, ``block_gibbs``), built from
``moves`` (propose, score, accept and commit; the proposal ``memo``; the static step of ``static_step`` and
``graphed`` for capture=), on ``state`` (the chains, their energies and caches) and ``schedules`` (orders, block
sizes, temperatures). The model runner, the ops backend and the counter RNG they use are
:mod:`mhfast.runtime`'s.
"""
from .api import SampleResult, sample

__all__ = ["sample", "SampleResult"]
