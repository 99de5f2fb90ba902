"""The bundles the fused single-site MH ops take, so that a step passes four named things, not 25 tensors.

These NamedTuples are the Python face of the fused ops (:func:`mhfast.ops.mh_commit_site_`, the proposal
memo's :func:`mhfast.ops.mh_memo_lookup_` / :func:`mhfast.ops.mh_memo_store_`) and of their pure-PyTorch twins
in :mod:`mhfast.reference`; the compiled schema receives each bundle as one tensor list and the C++ side unpacks
it in one place. Being tuples, they cost nothing to build and unpack, and ``bundle._replace(...)`` gives a
changed copy.

Shapes: ``M`` chain rows (inputs x chains, the sampler's flat state), ``T`` positions, ``D`` the cache's row
width, ``n`` moving chains in a step, ``R`` model rows forwarded in a step.

Example:
    >>> import torch
    >>> p = SiteProposal(ch=torch.tensor([0]), pos=torch.tensor([1]), proposed=torch.tensor([2]),
    ...                  logq_forward=torch.zeros(1), logq_reverse=torch.zeros(1))
    >>> p.pos.tolist(), len(p)
    ([1], 5)
"""
from __future__ import annotations

from typing import NamedTuple

import torch


class ChainRows(NamedTuple):
    """The state a fused step reads and updates: one row per chain (``M`` rows)."""

    tokens: torch.Tensor  #: Long[M, T]
    raw_terms: torch.Tensor  #: f32[M, T] per-position -logit terms
    local_terms: torch.Tensor  #: f32[M, T] per-position -log p terms
    e_raw: torch.Tensor  #: f32[M] (summed in float64, stored as float32)
    e_local: torch.Tensor  #: f32[M] (summed in float64, stored as float32)
    target: torch.Tensor  #: f32[M] the energy the MH test reads (one of the two, plus extra terms)
    cache: torch.Tensor  #: [M, T, D] per-position model outputs, written in place
    keys: torch.Tensor  #: Long[M] the chains' counter-RNG keys


class SiteProposal(NamedTuple):
    """One single-site proposal per moving chain (``n`` of them, distinct chains)."""

    ch: torch.Tensor  #: Long[n] chain rows that move
    pos: torch.Tensor  #: Long[n] the proposed position of each
    proposed: torch.Tensor  #: Long[n] the proposed token
    logq_forward: torch.Tensor  #: f32[n] log q(X' | X)
    logq_reverse: torch.Tensor  #: f32[n] log q(X | X')


class SiteTerms(NamedTuple):
    """The proposed states X' scored: their term rows and energies."""

    raw: torch.Tensor  #: f32[n, T]
    local: torch.Tensor  #: f32[n, T]
    e_raw: torch.Tensor  #: f32[n]
    e_local: torch.Tensor  #: f32[n]
    target: torch.Tensor  #: f32[n] the MH test's energy of X'


class SiteRows(NamedTuple):
    """X''s model rows, for the cache of the chains that accept: row ``r`` belongs to proposal ``seq[r]`` and
    position ``q[r]``; ``outputs`` are the rows as the model's sub-batches (chunks ``[R_k, D]``)."""

    seq: torch.Tensor  #: Long[R]
    q: torch.Tensor  #: Long[R]
    outputs: list[torch.Tensor]


class MemoTable(NamedTuple):
    """The proposal memo's tables (:mod:`mhfast.sampler.memo`), updated in place by lookup and store."""

    stamp: torch.Tensor
    hashes: torch.Tensor
    stored: torch.Tensor
    raw: torch.Tensor
    local: torch.Tensor
    group: torch.Tensor


def commit_site_op_args(chains: ChainRows, proposal: SiteProposal, terms: SiteTerms, rows: SiteRows,
                        beta: float | torch.Tensor | None, epoch: int, step: int, stream: int) -> tuple:
    """The compiled ``torch.ops.mhfast.mh_commit_site_``'s arguments for :func:`mhfast.ops.mh_commit_site_`'s bundles: the
    four bundles as they come, then beta as the schema has it (``float? beta, Tensor? beta_rows``: a float, a
    per-row tensor, or neither for "accept every proposal")."""
    per_row = isinstance(beta, torch.Tensor)
    return (*chains, *proposal, *terms, rows.seq, rows.q, list(rows.outputs),
            None if beta is None or per_row else float(beta), beta if per_row else None,
            int(epoch), int(step), int(stream))


def memo_lookup_op_args(table: MemoTable, tokens: torch.Tensor, act: torch.Tensor, pos: torch.Tensor,
                        proposed: torch.Tensor, changed: torch.Tensor, ways: int, step: int) -> tuple:
    """The compiled ``torch.ops.mhfast.mh_memo_lookup_``'s arguments for :func:`mhfast.ops.mh_memo_lookup_`'s."""
    return (table.stamp, table.hashes, table.stored, tokens, table.group, act, pos, proposed, changed, ways, step)


def memo_store_op_args(table: MemoTable, act: torch.Tensor, slot: torch.Tensor, sel: torch.Tensor,
                       raw_new: torch.Tensor, local_new: torch.Tensor, num_misses: int, step: int) -> tuple:
    """The compiled ``torch.ops.mhfast.mh_memo_store_``'s arguments for :func:`mhfast.ops.mh_memo_store_`'s."""
    return (table.stamp, table.raw, table.local, table.group, act, slot, sel, raw_new, local_new, num_misses, step)
