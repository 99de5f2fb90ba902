"""Propose: each moving chain draws a token for its position from its cached conditional (no model call).

At a state X and position i, X and X' masked at i are the same sequence, so the proposal distribution
``q(. | X without i)`` is the chain's cached row i (the LM head applied to one row), with the special ids (and
tokens outside an AllowedTokens mask) never proposed, the proposal temperature, top_p and the uniform_mix share
applied; the reverse probability ``q(X_i | X' without i)`` is read from the same row.

Example:
    >>> import mhfast
    >>> from mhfast.models.tabular import TabularMLM
    >>> mhfast.sample(TabularMLM.random(3, 2, seed=0), 2, chains=2, epochs=2, burn_in=0).tokens.shape
    torch.Size([1, 2, 2])
"""
from __future__ import annotations

import torch

from ...runtime import rng
from ..state import ChainState
from ..step import StepContext
from .site_types import SiteDraw


def can_fuse_propose(ctx: StepContext, state: ChainState) -> bool:
    """Whether :func:`propose_sites` runs as one ``mh_propose_site`` op: the cache holds V-wide logits
    (not features, which need the model's output layer), no AllowedTokens mask applies (it
    depends on the input and the position; the op blocks one id set for every row) and the proposal
    is the plain nucleus (uniform_mix = 0: a uniform share goes through ``propose``)."""
    allowed = ctx.terms.allowed if ctx.terms is not None else None
    return (not ctx.runner.use_features and allowed is None and state.cache.shape[2] == ctx.runner.vocab_size
            and ctx.uniform_mix == 0.0)


def propose_sites(ctx: StepContext, state: ChainState, *, chains: torch.Tensor, pos: torch.Tensor, epoch: int,
                  step: int) -> SiteDraw:
    """The proposals of the chains ``chains`` at ``pos`` (Long[A] each) from their cached rows.

    When the cache holds logits and no AllowedTokens mask applies, one fused op (``mh_propose_site``: gather,
    special ids at -inf, RNG, propose) and ``logits`` None (the caller reads the few rows it needs from the
    cache). Otherwise (a feature cache needs the model's output layer; an AllowedTokens mask is per input and
    position) the same numbers from the unfused ops, and ``logits`` the rows' logits.
    """
    runner, be = ctx.runner, ctx.backend
    if can_fuse_propose(ctx, state):
        return SiteDraw(*be.mh_propose_site(state.cache, state.tokens, state.rng_keys, chains, pos, runner.special,
                                            epoch, step, rng.PROPOSE, ctx.proposal_temperature, ctx.top_p), None)
    logits = runner.to_logits(state.cache[chains, pos])  # proposal = cached conditional of row i
    current = state.tokens[chains, pos]
    u = rng.uniforms_from_keys(state.rng_keys[chains], epoch, step, rng.PROPOSE, op=be.counter_uniforms)
    proposed, logq_f, logq_r = be.propose(ctx.proposal_logits(logits, state.term_index[chains], pos), current,
                                          ctx.proposal_temperature, ctx.top_p, u, ctx.uniform_mix)
    return SiteDraw(proposed, logq_f, logq_r, proposed != current, logits)
