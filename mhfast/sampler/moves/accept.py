"""The MH test on a set of chains with the unfused ``mh_accept_`` op (block moves, and the always-accepting
Gibbs moves with ``beta=None``); single-site MH uses the fused op of :mod:`.site_commit`.

Example:
    >>> import mhfast
    >>> from mhfast.models.tabular import TabularMLM
    >>> r = mhfast.sample(TabularMLM.random(3, 3, seed=0), 3, sampler="block-mh", chains=2, epochs=2, burn_in=0)
    >>> r.tokens.shape
    torch.Size([1, 2, 3])
"""
from __future__ import annotations

import torch

from ...runtime import rng
from ..state import ChainState
from ..step import StepContext


def beta_rows(beta: float | torch.Tensor, chains: torch.Tensor, device: torch.device) -> torch.Tensor:
    """f32[n] the inverse temperature of each of the ``chains``: ``beta`` one number for all, or a tensor [M] of
    one per chain row (read at ``chains``); rounded to float32 either way, as the ops do.

    Example:
        >>> beta_rows(torch.tensor([0.5, 2.0], dtype=torch.float64), torch.tensor([1, 0]), "cpu").tolist()
        [2.0, 0.5]
    """
    if isinstance(beta, torch.Tensor):
        return beta.index_select(0, chains).float()
    return torch.full((chains.shape[0],), float(beta), device=device)


def accept(ctx: StepContext, state: ChainState, chains: torch.Tensor, positions: torch.Tensor,
           proposed: torch.Tensor, energy_proposed: torch.Tensor, logq_forward: torch.Tensor,
           logq_reverse: torch.Tensor, beta: float | torch.Tensor | None, epoch: int, step: int,
           stream: int = rng.ACCEPT) -> tuple[torch.Tensor, torch.Tensor]:
    """mh_accept_ on the chains ``chains``: returns ``(new tokens Long[M, T], accepted Bool[n])``.

    ``beta``: one inverse temperature for every chain, or a tensor [M] of one per chain row (read at ``chains``,
    rounded to float32 as a number is). ``beta=None`` accepts always: the same op with beta = 0 and logq_reverse =
    logq_forward, so log_alpha = 0 > log(u) for every u in (0, 1). ``stream``: the uniforms' counter stream
    (delayed acceptance's second stage has its own).
    """
    n = chains.shape[0]
    dev = state.tokens.device
    tokens = state.tokens.index_select(0, chains)
    energy = state.target.index_select(0, chains)
    if beta is None:
        beta_t = torch.zeros(n, device=dev)
        energy_proposed = energy.clone()
        logq_reverse = logq_forward
    else:
        beta_t = beta_rows(beta, chains, dev)
    u = rng.uniforms_from_keys(state.rng_keys[chains], epoch, step, stream,
                               op=ctx.backend.counter_uniforms)
    accepted = ctx.backend.mh_accept_(tokens, positions, proposed, energy, energy_proposed, logq_forward,
                                      logq_reverse, beta_t, u)
    return state.tokens.index_copy(0, chains, tokens), accepted
