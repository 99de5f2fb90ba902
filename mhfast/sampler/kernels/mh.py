"""Single-site Metropolis-Hastings (paper, Algorithm 1, with the cached inner loop of :mod:`..moves`).

Each epoch visits every free position of every chain once, in the epoch's order (section 4);
step k moves the chains that have a k-th free position.

Example:
    >>> import mhfast
    >>> from mhfast.models.tabular import TabularMLM
    >>> mhfast.sample(TabularMLM.random(3, 2, seed=0), 2, sampler="mh", chains=2, epochs=2, burn_in=0).tokens.shape
    torch.Size([1, 2, 2])
"""
from __future__ import annotations

from typing import Any

import torch

from ..graphed import StaticSiteSteps
from ..memo import ProposalMemo, chain_groups
from ..moves import single_site_mh
from ..schedules import Epoch, active_chains, epoch_order
from ..state import ChainState, rescore
from ..step import StepContext, StepInfo
from ..subset import select_chains


class SingleSiteMH:
    """``init`` scores the start and builds the per-position cache; ``step`` is one position per chain."""

    name = "mh"
    supports_extra_energy = True
    hastings = True
    always_accepts = False
    uses_blocks = False

    def __init__(self, ctx: StepContext):
        self.ctx = ctx
        self._active: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._static: StaticSiteSteps | None = None  # capture="static"/"cuda-graph": the static-shape steps
        self.memo: ProposalMemo | None = None  # the evaluated proposals per input (option memo; capture none)

    def init(self, state: ChainState) -> ChainState:
        self._active = active_chains(state.num_free_host, state.tokens.device)
        state = rescore(state, self.ctx.runner, self.ctx.backend, keep_cache=True, terms=self.ctx.terms)
        capture = self.ctx.config.capture
        if capture == "none":
            if self.ctx.memo_slots:
                group = chain_groups(state.inputs, state.energy_mask, state.ctx_index)
                self.memo = ProposalMemo(group, self.ctx.memo_slots, state.tokens.shape[1], state.tokens.device,
                                         self.ctx.backend)
            return state
        self._static = StaticSiteSteps(self.ctx, state, graphs=capture == "cuda-graph")
        return self._static.state_of(state)

    def sweep(self, state: ChainState, epoch: Epoch) -> list[Any]:
        order = epoch_order(state.rng_keys, state.free, epoch.index, self.ctx.config.order,
                            self.ctx.backend.counter_uniforms)
        return [(k, act, act_host, order[act, k]) for k, (act, act_host) in enumerate(self._active)]

    def restrict(self, state: ChainState, keep: torch.Tensor) -> ChainState:
        """Only the chains ``keep`` go on (inputs that left the batch), with the moves they had: their steps, memo
        tables and (capture) static buffers carried over, nothing rescored."""
        state = select_chains(state, keep)
        self._active = active_chains(state.num_free_host, state.tokens.device)
        if self.memo is not None:
            self.memo = self.memo.select(keep)
        if self._static is not None:
            self._static = StaticSiteSteps(self.ctx, state, graphs=self._static.graphs, has_pad=self._static.has_pad)
            state = self._static.state_of(state)
        return state

    def step(self, state: ChainState, epoch: Epoch, move: Any) -> tuple[ChainState, StepInfo]:
        k, act, act_host, pos = move
        if self._static is None:
            return single_site_mh(self.ctx, state, act, act_host, pos, epoch.beta, epoch.index, k, self.memo)
        return self._static.step(state, act, act_host, pos, epoch.beta, epoch.index, k)
