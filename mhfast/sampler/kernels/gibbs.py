"""Degenerate Gibbs (Wang & Cho; paper, section 6): the MLM conditional as proposal, always accepted.

It does not sample the MLM's energy (the conditionals need not be consistent; appendix C shows
the failure); it is here as the paper's baseline. Energies are computed once per epoch, at its
end, for the statistics and the best-state tracking only.

Example:
    >>> import mhfast
    >>> from mhfast.models.tabular import TabularMLM
    >>> r = mhfast.sample(TabularMLM.random(3, 2, seed=0), 2, sampler="gibbs", chains=2, epochs=2, burn_in=0)
    >>> float(r.acceptance_rate[0])
    1.0
"""
from __future__ import annotations

from typing import Any

import torch

from ..moves.gibbs import single_site_gibbs
from ..moves.site_types import SiteMove
from ..schedules import Epoch, active_chains, epoch_order
from ..state import ChainState, rescore
from ..step import StepContext, StepInfo
from ..subset import select_chains
from .base import Capabilities

RESCORE = "rescore"  #: the last move of a Gibbs epoch: energies for the statistics


class DegenerateGibbs:
    name = "gibbs"
    # always accepts: it cannot honour energy terms, nor a proposal other than the MLM conditional (uniform_mix 0)
    capabilities = Capabilities(extra_energy=False, hastings=False, always_accepts=True)

    def __init__(self, ctx: StepContext):
        self.ctx = ctx
        self._active: list[tuple[torch.Tensor, torch.Tensor]] = []

    def init(self, state: ChainState) -> ChainState:
        self._active = active_chains(state.num_free_host, state.tokens.device)
        return state

    def sweep(self, state: ChainState, epoch: Epoch) -> list[Any]:
        order = epoch_order(state.rng_keys, state.free, epoch.index, self.ctx.config.order,
                            self.ctx.backend.counter_uniforms)
        return [SiteMove(k, act, act_host, order[act, k]) for k, (act, act_host) in enumerate(self._active)] + [
            RESCORE]

    def restrict(self, state: ChainState, keep: torch.Tensor) -> ChainState:
        """Only the chains ``keep`` go on (inputs that left the batch), with the moves they had."""
        state = select_chains(state, keep)
        self._active = active_chains(state.num_free_host, state.tokens.device)
        return state

    def step(self, state: ChainState, epoch: Epoch, move: Any) -> tuple[ChainState, StepInfo]:
        if move == RESCORE:  # one T_e-row pass per epoch
            return rescore(state, self.ctx.runner, self.ctx.backend), StepInfo(0, 0, 0, scored=True)
        return single_site_gibbs(self.ctx, state, move, epoch.index)
