"""Delayed acceptance for block MH (option ``delayed="window:K"`` with ``sampler="block-mh"``; docs/delayed.md).

A block move changes the positions B of a block at once and needs every energy row of X' (``T_e`` rows; a
one-position block ``T_e - 1``, its own term read from the cache). With delayed acceptance:

1. **surrogate**: forward only the rows of X' at the energy positions within K of any position of B (B itself
   included: its terms change), take every other term as the state's, add the extra energy terms of X' exactly,
   and test ``min(1, exp(-beta dE~) q(X | X') / q(X' | X))`` (stream :data:`~mhfast.runtime.rng.DELAYED_FIRST`).
   dE~ = E~_B(X') - E~_B(X) for E~_B(x) = the window's terms (+ extra terms): the window depends on B only, which
   the block schedule draws independently of the state, and X, X' differ on B only, so stage 1 is MH for the
   fixed target exp(-beta E~_B);
2. **correction**, survivors only: forward their other rows and accept with ``min(1, exp(-beta (dE - dE~)))``
   through the same ``mh_accept_`` op as the plain block move, given the shifted target ``E(X) + dE - dE~`` and
   equal proposal terms (stream :data:`~mhfast.runtime.rng.DELAYED_SECOND`).

Example:
    >>> import mhfast
    >>> from mhfast.models.tabular import TabularMLM
    >>> r = mhfast.sample(TabularMLM.random(3, 8, seed=0), 8, sampler="block-mh", block_schedule=2, chains=3,
    ...                   epochs=3, burn_in=0, delayed="window:1")
    >>> 0 < r.delayed_passed <= r.delayed_tested
    True
"""
from __future__ import annotations

from typing import Any, NamedTuple

import torch

from ...op_types import SiteProposal
from ...runtime import rng
from ...runtime.runner import sum_terms
from ..state import ChainState
from ..step import StepContext
from .accept import accept
from .changed import changed_chains
from .delayed import DelayedAcceptance, first_stage


class BlockProposals(NamedTuple):
    """The block proposals X' != X of one step (``n`` chains), as :func:`.block.evaluate_and_accept` takes them."""

    ch: torch.Tensor  #: Long[n]
    ch_host: torch.Tensor  #: CPU Long[n]
    positions: torch.Tensor  #: Long[n, K] (-1: unused slot)
    proposed: torch.Tensor  #: Long[n, K]
    logq_forward: torch.Tensor  #: f32[n]
    logq_reverse: torch.Tensor  #: f32[n]
    known_logits: torch.Tensor  #: [nk, V] the cached rows of the first nk chains (one-position blocks)
    x_new: torch.Tensor  #: Long[n, T] X'


class BlockTerms(NamedTuple):
    """Terms of X' for some of the proposals, from the rows of ``need`` (the rest the state's)."""

    raw: torch.Tensor  #: f32[n, T]
    local: torch.Tensor  #: f32[n, T]
    rows: tuple  #: (seq, q, outputs) the forwarded rows (None, None, None: none)


def block_window(state: ChainState, positions: torch.Tensor, k: int) -> torch.Tensor:
    """Bool[n, T]: the positions within ``k`` of any position of each block (unused slots -1 ignored).

    Example:
        >>> from types import SimpleNamespace
        >>> s = SimpleNamespace(tokens=torch.zeros(1, 6, dtype=torch.long))
        >>> block_window(s, torch.tensor([[1, 4, -1]]), 0).int().tolist()
        [[0, 1, 0, 0, 1, 0]]
    """
    at = torch.arange(state.tokens.shape[1], device=positions.device)
    near = ((at[None, None, :] - positions[:, :, None]).abs() <= k) & (positions >= 0)[:, :, None]
    return near.any(1)


def forward_terms(ctx: StepContext, state: ChainState, ch: torch.Tensor, x_new: torch.Tensor, need: torch.Tensor,
                  num_rows: int, known_pos: torch.Tensor, known_tokens: torch.Tensor, known_logits: torch.Tensor
                  ) -> BlockTerms:
    """The terms of the sequences ``x_new`` (Long[n, T], of the chains ``ch``): the rows of ``need`` (Bool[n, T];
    ``num_rows`` of them) forwarded, the state's terms elsewhere; the first ``len(known_logits)`` of them
    one-position blocks whose own term (at ``known_pos``, token ``known_tokens``) is read from the cached row.
    The one scorer of block proposals: plain block MH and both stages of its delayed acceptance."""
    runner, be = ctx.runner, ctx.backend
    raw = state.raw_terms.index_select(0, ch)
    local = state.local_terms.index_select(0, ch)
    seq = q = outputs = None
    if num_rows:
        seq, q = torch.nonzero_static(need, size=num_rows).unbind(1)
        rows = be.masked_copies(x_new, seq, q, runner.mask_id)
        ci = state.ctx_of(ch.index_select(0, seq)) if state.ctx_index is not None else None
        r, l, outputs = runner.score_rows(be, rows, q, x_new[seq, q], ci, keep_outputs=state.cache is not None)
        raw[seq, q] = r
        local[seq, q] = l
    nk = known_logits.shape[0]
    if nk:  # one-position blocks: the cached row read at the proposed token
        at = torch.arange(nk, device=ch.device)
        r_i, l_i = runner.terms_from_logits(be, known_logits, known_tokens)
        raw[at, known_pos] = r_i
        local[at, known_pos] = l_i
    return BlockTerms(raw, local, (seq, q, outputs))


def block_terms(ctx: StepContext, state: ChainState, p: BlockProposals, sel: torch.Tensor, need: torch.Tensor,
                num_rows: int, known: int) -> BlockTerms:
    """The terms of X' for the proposals ``sel`` (the first ``known`` of them one-position blocks whose own term
    is read from the cached row), forwarding the rows of ``need`` (Bool[len(sel), T]; ``num_rows`` of them)."""
    first = sel[:known]
    return forward_terms(ctx, state, p.ch.index_select(0, sel), p.x_new.index_select(0, sel), need, num_rows,
                         p.positions.index_select(0, first)[:, 0], p.proposed.index_select(0, first)[:, 0],
                         p.known_logits.index_select(0, first))


def _store_rows(state: ChainState, chains: torch.Tensor, taken: torch.Tensor, rows: tuple) -> None:
    """The rows ``(seq, q, outputs)`` (numbered as ``chains``) of the chains that ``taken`` into the cache."""
    seq, q, outputs = rows
    if outputs is None or state.cache is None:
        return
    m_rows = chains.index_select(0, seq)
    old = state.cache[m_rows, q]
    state.cache[m_rows, q] = torch.where(taken.index_select(0, seq)[:, None], outputs.to(old.dtype), old)


def _block_first(ctx: StepContext, state: ChainState, p: BlockProposals, near: torch.Tensor, extra: Any, *,
                 beta: Any, epoch: int, step: int) -> tuple[BlockTerms, torch.Tensor, torch.Tensor]:
    """Stage 1 of every proposal: ``(window terms, surrogate model energy f32[n], passed Bool[n])``."""
    n, nk = p.ch.shape[0], p.known_logits.shape[0]
    need = state.energy_mask.index_select(0, p.ch) & near
    if nk:  # a one-position block's own term comes from its cached row, not a forwarded one
        need[torch.arange(nk, device=need.device), p.positions[:nk, 0]] = False
    every = torch.arange(n, device=p.ch.device)
    terms = block_terms(ctx, state, p, every, need, int(need.sum()), nk)
    surrogate = sum_terms(terms.raw if state.energy == "raw" else terms.local)
    target = surrogate if extra is None else surrogate + extra[1]
    proposal = SiteProposal(p.ch, p.positions[:, 0], p.proposed[:, 0], p.logq_forward, p.logq_reverse)
    passed = first_stage(ctx, state, proposal, target, beta=beta, epoch=epoch, step=step)
    return terms, surrogate, passed


def block_delayed_accept(ctx: StepContext, state: ChainState, da: DelayedAcceptance, p: BlockProposals, extra: Any,
                         *, beta: Any, epoch: int, step: int) -> tuple[ChainState, torch.Tensor, Any]:
    """Both stages on the block proposals ``p``: ``(state with new tokens, accepted Bool[n], (raw, local, extra)
    of the survivors, with their indices)``. The caller commits the terms (:func:`.block._commit`); the cache
    rows of the accepted chains are written here."""
    near = block_window(state, p.positions, da.window)
    first, surrogate, passed = _block_first(ctx, state, p, near, extra, beta=beta, epoch=epoch, step=step)
    surv, surv_host = changed_chains(passed)  # a host read: which proposals forward the rest
    n = p.ch.shape[0]
    accepted = torch.zeros(n, dtype=torch.bool, device=p.ch.device)
    tokens = state.tokens
    done = None
    if surv_host.shape[0]:
        ch = p.ch.index_select(0, surv)
        need = state.energy_mask.index_select(0, ch) & ~near.index_select(0, surv)
        second = block_terms(ctx, state, p, surv, need, int(need.sum()), 0)
        keep = near.index_select(0, surv)
        raw = torch.where(keep, first.raw.index_select(0, surv), second.raw)
        local = torch.where(keep, first.local.index_select(0, surv), second.local)
        exact = sum_terms(raw if state.energy == "raw" else local)
        # accept() tests beta (E(X) - target') + logq_r - logq_f: target' = E(X) + (dE - dE~) and equal proposal
        # terms make it stage 2's test (the extra terms, exact in both stages, cancel)
        shifted = state.target.index_select(0, ch) + (exact - surrogate.index_select(0, surv))
        logq = p.logq_forward.index_select(0, surv)
        tokens, taken = accept(ctx, state, ch, p.positions.index_select(0, surv), p.proposed.index_select(0, surv),
                               shifted, logq, logq, beta, epoch, step, stream=rng.DELAYED_SECOND)
        accepted = accepted.index_copy(0, surv, taken)
        _store_rows(state, p.ch, accepted, first.rows)
        _store_rows(state, ch, taken, second.rows)
        sur_extra = None if extra is None else tuple(v.index_select(0, surv) for v in extra)
        done = (surv, taken, raw, local, sur_extra)
    _count(da, state, p, near, surv_host, accepted)
    return tokens, accepted, done


def _count(da: DelayedAcceptance, state: ChainState, p: BlockProposals, near: torch.Tensor,
           surv_host: torch.Tensor, accepted: torch.Tensor) -> None:
    """The run's delayed-acceptance counters: rows saved = the stage-1 rejections' rows outside the window."""
    outer = (state.energy_mask.index_select(0, p.ch) & ~near).sum(1).cpu()
    rejected = torch.ones(p.ch_host.shape[0], dtype=torch.bool)
    rejected[surv_host] = False
    da.tested += int(p.ch_host.shape[0])
    da.passed += int(surv_host.shape[0])
    da.rows_saved += int(outer[rejected].sum())
    da.accepted = da.accepted + accepted.sum()
