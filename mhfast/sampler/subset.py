"""Some of the chains of a state: :func:`select_chains` keeps them (inputs leaving the batch when they converged),
:func:`merge_chains` writes them back into a state of all chains (what the result reports).

Every per-chain field of :class:`~mhfast.sampler.state.ChainState` has the chains on its first dimension, and a
chain's moves depend only on its own fields and random numbers (:mod:`mhfast.runtime.rng`), so the kept chains
go on exactly as they would have in the whole batch (with a model whose rows do not depend on the rest of their
batch, bit for bit; tests/sampler/test_convergence.py).

Example:
    >>> import torch
    >>> from mhfast.sampler.state import ChainState
    >>> s = ChainState.create(torch.tensor([[1, 2], [3, 4], [5, 6]]), torch.ones(3, 2, dtype=torch.bool),
    ...                       torch.ones(3, 2, dtype=torch.bool), torch.tensor([0, 1, 2]), torch.zeros(3).long(),
    ...                       None, "raw", 0)
    >>> part = select_chains(s, torch.tensor([0, 2]))
    >>> part.tokens.tolist(), part.num_free_host.tolist()
    ([[1, 2], [5, 6]], [2, 2])
    >>> merge_chains(s, select_chains(s, torch.tensor([2])), torch.tensor([0])).tokens.tolist()
    [[5, 6], [3, 4], [5, 6]]
"""
from __future__ import annotations

import dataclasses

import torch

from .state import ChainState

#: the fields a step or the best-state tracking changes: what :func:`merge_chains` writes back
CHANGING = ("tokens", "raw_terms", "local_terms", "e_raw", "e_local", "best_energy", "best_tokens", "term_values",
            "e_extra")


def _per_chain_fields(state: ChainState) -> list[str]:
    M = state.tokens.shape[0]
    return [f.name for f in dataclasses.fields(state)
            if isinstance(getattr(state, f.name), torch.Tensor) and getattr(state, f.name).dim() >= 1
            and getattr(state, f.name).shape[0] == M]


def select_chains(state: ChainState, keep: torch.Tensor) -> ChainState:
    """The state of the chains ``keep`` (Long[M'], indices into ``state``'s chains) only: every per-chain tensor
    (the cache included) indexed, the host counts too, the proposal counts carried over (:meth:`ChainCounts.select`)."""
    fields = {name: getattr(state, name).index_select(0, keep.to(getattr(state, name).device))
              for name in _per_chain_fields(state)}  # the host counts with a host index: no sync
    if state.counts is not None:
        fields["counts"] = state.counts.select(keep.cpu())
    return dataclasses.replace(state, **fields)


def merge_chains(full: ChainState, part: ChainState, rows: torch.Tensor) -> ChainState:
    """``full`` with the :data:`CHANGING` fields of its chains ``rows`` taken from ``part`` (whose chain j is chain
    ``rows[j]`` of ``full``); no cache, no counts (a state to read, not to step)."""
    dev = rows.to(full.tokens.device)
    fields = {name: getattr(full, name).index_copy(0, dev, getattr(part, name)) for name in CHANGING}
    return dataclasses.replace(full, cache=None, counts=None, **fields)
