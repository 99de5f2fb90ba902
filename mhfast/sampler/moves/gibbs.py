"""Degenerate Gibbs's move (Wang & Cho; paper, section 6): draw X_i from the MLM conditional and take it.

Example:
    >>> import mhfast
    >>> from mhfast.models.tabular import TabularMLM
    >>> float(mhfast.sample(TabularMLM.random(3, 2, seed=0), 2, sampler="gibbs", chains=2, epochs=2,
    ...                     burn_in=0).acceptance_rate[0])
    1.0
"""
from __future__ import annotations

import dataclasses

import torch

from ...runtime import rng
from ..state import ChainState
from ..step import StepContext, StepInfo
from .accept import accept
from .site_types import SiteMove


def single_site_gibbs(ctx: StepContext, state: ChainState, move: SiteMove, epoch: int) -> tuple[ChainState, StepInfo]:
    """One degenerate-Gibbs step of the chains of ``move``: sample X_i from the MLM conditional, accept.

    The state changes every step, so there is no cache: one fresh masked row per chain and step;
    the energies are left stale (``scored=False``) until the kernel rescores at the epoch's end.
    """
    runner, be = ctx.runner, ctx.backend
    act, act_host, pos, step = move.chains, move.chains_host, move.pos, move.index
    A = act.shape[0]
    if A == 0:
        return state, StepInfo(0, 0, 0, scored=False)
    rows = be.masked_copies(state.tokens, act, pos, runner.mask_id)
    logits = runner.to_logits(runner.outputs(rows, pos, state.ctx_of(act)))
    cur = state.tokens[act, pos]
    u = rng.uniforms_from_keys(state.rng_keys[act], epoch, step, rng.PROPOSE,
                               op=ctx.backend.counter_uniforms)
    prop, logq_f, _ = be.propose(ctx.proposal_logits(logits, state.term_index[act], pos), cur,
                                 ctx.proposal_temperature, ctx.top_p, u, ctx.uniform_mix)
    zeros = torch.zeros(A, device=state.tokens.device)
    tokens, _ = accept(ctx, state, act, pos, prop, zeros, logq_f, logq_f, None, epoch, step)
    changed = prop != cur
    if state.counts is not None:
        state.counts.proposed(act_host)
        state.counts.taken(act, changed)
        state.counts.proposed_at(act, pos)
        state.counts.taken_at(act, pos, changed=changed)
    return dataclasses.replace(state, tokens=tokens), StepInfo(A, A, changed.sum(), scored=False)
