"""Block moves: block MH and degenerate block Gibbs (paper, section 4.1 "Block MH sampling", 7.3).

For a block I of positions, X masked at every position of I is forwarded once (one row,
logits at |I| positions) and each X'_i, i in I, is drawn independently from
``q(X'_i | X without I)`` (temperature, top_p and the uniform_mix share apply per position, so
each factor is the exact mixture probability). The reverse proposal
``prod_i q(X_i | X' without I)`` uses the same row, because X' without I = X without I, so
the MH ratio is exact: ``log q_reverse = sum_i log q(X_i)``, ``log q_forward = sum_i log q(X'_i)``.
The energy of X' needs its ``T_e`` masked rows (nothing of the current state's rows can be
reused once two or more positions change); the current energy is kept per chain.
A block of one position (block size 1 at the end of the default schedule, or the last,
partial block of an epoch) is a single-site MH move, and is made exactly like one: proposal
from the single-site cache (no proposal forward) and ``T_e - 1`` rows of X'. For that, block
MH keeps the cache valid: an accepted block move stores the ``T_e`` rows of X' it computed
(no extra model rows).
:func:`evaluate_and_accept` scores X' of any block (every energy position a model row but a one-position
block's own, read from the cache), then runs the MH test and keeps the cache the current state's.
Block Gibbs uses the same proposal and always accepts (with proposal temperature -> 0 this
is Mask-Predict-like iterative refinement).

Example:
    >>> import mhfast
    >>> from mhfast.models.tabular import TabularMLM
    >>> r = mhfast.sample(TabularMLM.random(3, 3, seed=0), 3, sampler="block-mh", block_schedule=2,
    ...                   chains=2, epochs=2, burn_in=0, backend="reference")
    >>> r.tokens.shape
    torch.Size([1, 2, 3])
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import torch

from ...runtime import rng
from ...runtime.runner import sum_terms
from ..schedules import BlockStep
from ..state import ChainState
from ..step import StepContext, StepInfo
from .accept import accept
from .block_delayed import BlockProposals, block_delayed_accept, forward_terms
from .changed import changed_chains
from .delayed import DelayedAcceptance


def _block_logits(ctx: StepContext, state: ChainState, plan: BlockStep, pos: torch.Tensor) -> torch.Tensor:
    """Proposal logits of every entry of the plan: the cached row for one-position blocks, else one
    forward of X masked at the whole block (several positions read from one row with the row hooks)."""
    runner = ctx.runner
    act, nS = plan.chains, plan.num_single
    parts = []
    if nS:  # |I| = 1: q(. | X without i) is the cached row i, as in single-site MH
        assert state.cache is not None, "one-position block moves need the single-site cache"
        parts.append(runner.to_logits(state.cache[plan.entry_chain[:nS], pos[:nS]]))
    if act.shape[0] > nS:  # X masked at every position of its block: one row per chain
        rows = state.tokens.index_select(0, act[nS:])
        block_row = plan.entry[nS:] - nS
        rows[block_row, pos[nS:]] = runner.mask_id
        parts.append(runner.to_logits(runner.outputs_at(rows, block_row, pos[nS:], state.ctx_of(act[nS:]),
                                                        row_index_host=plan.block_row_host)))
    return parts[0] if len(parts) == 1 else torch.cat(parts)


class BlockDraw(NamedTuple):
    """The proposals of one block step, one row per moving chain (``A``), ``plan.width`` slots (-1: unused)."""

    positions: torch.Tensor  #: Long[A, K] the block's positions
    proposed: torch.Tensor  #: Long[A, K] the proposed tokens
    logq_forward: torch.Tensor  #: f32[A] sum over the block of log q(X'_i)
    logq_reverse: torch.Tensor  #: f32[A] sum over the block of log q(X_i)
    changed: torch.Tensor  #: Bool[A] X' != X
    logits: torch.Tensor  #: [entries, V] the proposal rows (the single-site ones first)


def propose_blocks(ctx: StepContext, state: ChainState, plan: BlockStep, order: torch.Tensor, epoch: int,
                   step: int) -> BlockDraw:
    """Each chain of ``plan`` proposes its block (columns of ``order``, Long[M, T]) from one row, per position."""
    be, dev, A = ctx.backend, state.tokens.device, plan.chains.shape[0]
    r, slot = plan.entry, plan.entry_slot
    pos = order[plan.entry_chain, plan.entry_col]
    if state.counts is not None:
        state.counts.proposed_at(plan.entry_chain, pos)
    cur = state.tokens[plan.entry_chain, pos]
    logits = _block_logits(ctx, state, plan, pos)
    u = rng.uniforms_from_keys(state.rng_keys[plan.entry_chain], epoch, step, rng.PROPOSE, slot,
                               be.counter_uniforms)
    prop, logq_f, logq_r = be.propose(ctx.proposal_logits(logits, state.term_index[plan.entry_chain], pos), cur,
                                      ctx.proposal_temperature, ctx.top_p, u, ctx.uniform_mix)
    # Sum over the block in float64 (order-independent, so batch-independent).
    lf = torch.zeros(A, dtype=torch.float64, device=dev).index_add_(0, r, logq_f.double()).float()
    lr = torch.zeros(A, dtype=torch.float64, device=dev).index_add_(0, r, logq_r.double()).float()
    diff = torch.zeros(A, dtype=torch.long, device=dev).index_add_(0, r, (prop != cur).long())
    positions = torch.full((A, plan.width), -1, dtype=torch.long, device=dev)
    positions[r, slot] = pos
    proposed = torch.full_like(positions, -1)
    proposed[r, slot] = prop
    return BlockDraw(positions, proposed, lf, lr, diff > 0, logits)


def block_move(ctx: StepContext, state: ChainState, plan: BlockStep, order: torch.Tensor, beta: Any,
               epoch: int, step: int, gibbs: bool, delayed: DelayedAcceptance | None = None
               ) -> tuple[ChainState, StepInfo]:
    """One block step: the chains and columns of ``order`` (Long[M, T]) given by ``plan``.

    ``gibbs=True``: accept always and skip the energy of X' (block Gibbs; ``scored=False``).
    ``beta=None`` (force-accept epochs): accept always but keep energies (and the cache) exact.
    ``delayed``: delayed acceptance's window and counters (:mod:`.block_delayed`; not on forced-accept epochs).
    """
    act, A = plan.chains, plan.chains.shape[0]
    if A == 0:
        return state, StepInfo(0, 0, 0, scored=not gibbs)
    if state.counts is not None:
        state.counts.proposed(plan.chains_host)
    draw = propose_blocks(ctx, state, plan, order, epoch, step)
    picked, picked_host = changed_chains(draw.changed)
    ch_host = plan.chains_host.index_select(0, picked_host)
    n = ch_host.shape[0]
    if n == 0:  # X' = X: accepted with probability 1
        return state, StepInfo(A, A, 0, scored=not gibbs)
    ch = act.index_select(0, picked)
    pos_ch, prop_ch = draw.positions.index_select(0, picked), draw.proposed.index_select(0, picked)
    lf_ch = draw.logq_forward.index_select(0, picked)
    if gibbs:
        return _take_blocks(ctx, state, ch, pos_ch, prop_ch, lf_ch, epoch, step), StepInfo(A, A, n, scored=False)
    n_single = int((picked_host < plan.num_single).sum())  # single-site chains come first in act: a prefix of ch
    delayed = None if beta is None else delayed
    args = (ch, ch_host, pos_ch, prop_ch, lf_ch, draw.logq_reverse.index_select(0, picked),
            draw.logits.index_select(0, picked[:n_single]))
    on = None if delayed is None else delayed.acts_on(state, ch_host)
    if on is None:
        test = evaluate_and_accept if delayed is None else functools.partial(delayed_evaluate, delayed)
        state, accepted = test(ctx, state, *args, beta, epoch, step)
    else:  # delayed="auto" on the long inputs only: the others' chains take plain MH's test, as they would alone
        accepted = torch.zeros(n, dtype=torch.bool, device=ch.device)
        for part, test in ((~on, evaluate_and_accept), (on, functools.partial(delayed_evaluate, delayed))):
            idx = part.nonzero().squeeze(1)
            if idx.numel():
                state, taken = test(ctx, state, *_rows(args, idx, n_single), beta, epoch, step)
                accepted = accepted.index_copy(0, idx.to(ch.device), taken)
    k = accepted.sum()
    return state, StepInfo(A, A - n + k, k, scored=True)


def _rows(args: tuple, idx: torch.Tensor, n_single: int) -> tuple:
    """The test's arguments (chains, host chains, positions, proposed, logq forward and reverse, the single-site
    proposals' logits) of the tested proposals ``idx`` (CPU Long, increasing): single-site ones stay a prefix."""
    dev = args[0].device
    ch, ch_host, *rest, logits = args
    single = idx[idx < n_single]
    return (ch.index_select(0, idx.to(dev)), ch_host.index_select(0, idx),
            *(v.index_select(0, idx.to(dev)) for v in rest), logits.index_select(0, single.to(dev)))


def _take_blocks(ctx: StepContext, state: ChainState, ch: torch.Tensor, positions: torch.Tensor,
                 proposed: torch.Tensor, logq_forward: torch.Tensor, epoch: int, step: int) -> ChainState:
    """Block Gibbs: the chains ``ch`` take their proposals (no energies: ``scored=False`` until the epoch's end)."""
    zeros = torch.zeros(ch.shape[0], device=state.tokens.device)
    tokens, _ = accept(ctx, state, ch, positions, proposed, zeros, logq_forward, logq_forward, None, epoch, step)
    if state.counts is not None:
        state.counts.taken(ch)
        state.counts.taken_at(ch, positions, proposed=proposed, current=state.tokens)
    return dataclasses.replace(state, tokens=tokens)


def _commit(state: ChainState, tokens: torch.Tensor, chains: torch.Tensor, accepted: torch.Tensor,
            raw_new: torch.Tensor, local_new: torch.Tensor, extra: tuple | None) -> ChainState:
    """The state with the accepted chains' new tokens, energy terms and extra-term values (no host sync)."""
    keep = accepted[:, None]
    pick = lambda new, old: old.index_copy(0, chains, torch.where(  # noqa: E731
        keep if new.dim() == 2 else accepted, new, old.index_select(0, chains)))
    more = {} if extra is None else dict(term_values=pick(extra[0], state.term_values), e_extra=pick(extra[1],
                                                                                                      state.e_extra))
    return dataclasses.replace(
        state, tokens=tokens, raw_terms=pick(raw_new, state.raw_terms), local_terms=pick(local_new, state.local_terms),
        e_raw=pick(sum_terms(raw_new), state.e_raw), e_local=pick(sum_terms(local_new), state.e_local), **more)


def _score_proposals(ctx: StepContext, state: ChainState, ch: torch.Tensor, ch_host: torch.Tensor,
                     x_new: torch.Tensor, positions: torch.Tensor, proposed: torch.Tensor,
                     known_logits: torch.Tensor):
    """Energy terms of X' for the chains ``ch``: ``(raw f32[n,T], local f32[n,T], (seq, q, outputs))``.

    The first ``len(known_logits)`` chains make single-site moves: their term at ``positions[:, 0]``
    comes from the cached row; every other energy position of X' is one forwarded masked row.
    """
    nk = known_logits.shape[0]
    p_known, w_known = positions[:nk, 0], proposed[:nk, 0]
    need = state.energy_mask.index_select(0, ch)
    need[torch.arange(nk, device=ch.device), p_known] = False
    num_rows = int(state.num_energy_host.index_select(0, ch_host).sum()) - nk  # host counts: no sync
    return forward_terms(ctx, state, ch, x_new, need, num_rows, p_known, w_known, known_logits)


def _x_new(state: ChainState, ch: torch.Tensor, positions: torch.Tensor, proposed: torch.Tensor) -> torch.Tensor:
    """X' of the chains ``ch``: unused slots (-1) repeat slot 0, so the scatter never writes two different values
    to one cell."""
    valid = positions >= 0
    return state.tokens.index_select(0, ch).scatter_(1, torch.where(valid, positions, positions[:, :1]),
                                                     torch.where(valid, proposed, proposed[:, :1]))


def _extra_of(ctx: StepContext, state: ChainState, ch: torch.Tensor, x_new: torch.Tensor) -> tuple | None:
    """(values, weighted) of the extra energy terms of X', batched over the chains; None without extra terms."""
    if ctx.terms is None or not ctx.terms.terms:
        return None
    values = ctx.terms.evaluate(x_new, state.term_index.index_select(0, ch))
    return values, ctx.terms.weighted(values)


def delayed_evaluate(da: DelayedAcceptance, ctx: StepContext, state: ChainState, ch: torch.Tensor,
                     ch_host: torch.Tensor, positions: torch.Tensor, proposed: torch.Tensor,
                     logq_forward: torch.Tensor, logq_reverse: torch.Tensor, known_logits: torch.Tensor, beta: Any,
                     epoch: int, step: int) -> tuple[ChainState, torch.Tensor]:
    """:func:`evaluate_and_accept` with delayed acceptance's two stages (:mod:`.block_delayed`)."""
    x_new = _x_new(state, ch, positions, proposed)
    extra = _extra_of(ctx, state, ch, x_new)
    p = BlockProposals(ch, ch_host, positions, proposed, logq_forward, logq_reverse, known_logits, x_new)
    tokens, accepted, done = block_delayed_accept(ctx, state, da, p, extra, beta=beta, epoch=epoch, step=step)
    new_state = state
    if done is not None:
        surv, taken, raw, local, extra_s = done
        new_state = _commit(state, tokens, ch.index_select(0, surv), taken, raw, local, extra_s)
    if state.counts is not None:
        state.counts.tested(ch, accepted)
        state.counts.tested_at(ch, positions, accepted, proposed=proposed, current=state.tokens)
    return new_state, accepted


def evaluate_and_accept(ctx: StepContext, state: ChainState, ch: torch.Tensor, ch_host: torch.Tensor,
                        positions: torch.Tensor, proposed: torch.Tensor, logq_forward: torch.Tensor,
                        logq_reverse: torch.Tensor, known_logits: torch.Tensor, beta: float | None, epoch: int,
                        step: int) -> tuple[ChainState, torch.Tensor]:
    """The MH test of proposals X' != X of the chains ``ch`` (single-site and block moves alike).

    ``positions``/``proposed``: Long[n, K] (-1: unused slot). See :func:`_score_proposals` for
    ``known_logits``. With a cache, accepted chains store the new rows: the cache stays the
    current state's. Returns the new state and ``accepted`` (Bool[n]).
    """
    x_new = _x_new(state, ch, positions, proposed)
    raw_new, local_new, (seq, q, outputs) = _score_proposals(ctx, state, ch, ch_host, x_new, positions, proposed,
                                                             known_logits)
    target_new = sum_terms(raw_new if state.energy == "raw" else local_new)
    extra = _extra_of(ctx, state, ch, x_new)
    if extra is not None:
        target_new = target_new + extra[1]
    tokens, accepted = accept(ctx, state, ch, positions, proposed, target_new, logq_forward, logq_reverse, beta,
                              epoch, step)
    new_state = _commit(state, tokens, ch, accepted, raw_new, local_new, extra)
    if outputs is not None:  # accepted chains: the rows of X' become the cache (a known row is unchanged)
        m_rows = ch.index_select(0, seq)
        old = state.cache[m_rows, q]
        state.cache[m_rows, q] = torch.where(accepted.index_select(0, seq)[:, None], outputs.to(old.dtype), old)
    if state.counts is not None:
        state.counts.tested(ch, accepted)
        state.counts.tested_at(ch, positions, accepted, proposed=proposed, current=state.tokens)
    return new_state, accepted
