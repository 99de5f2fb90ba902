"""Single-site Metropolis-Hastings (paper, Algorithm 1, with the cached inner loop of :mod:`..moves`).

Each epoch visits every free position of every chain once, in the epoch's order (section 4);
step k moves the chains that have a k-th free position. One step is four phases, each a call with
named values (:mod:`mhfast.sampler.moves.site_types`):

1. propose (:mod:`..moves.site_propose`): each chain draws X'_i from its cached row i;
2. pick (the memo's first hook, :mod:`..memo`): the proposals X' != X meet the MH test, those the memo
   knows last; X' = X is accepted with probability 1 and costs nothing more;
3. score (:mod:`..moves.site_score`): the terms of X' from the model rows (or the memo), plus extra terms;
4. accept and commit (:mod:`..moves.site_commit`): the MH test and the new state in one fused op.

With option ``delayed`` (:mod:`..moves.delayed`) phases 3 and 4 are delayed acceptance's two stages: the window's
rows and a surrogate test first, the other rows and the correcting test (through the same commit op) for the
survivors only.

With ``capture="static"`` / ``"cuda-graph"`` the step is the static-shape one of :mod:`..graphed`.

Example:
    >>> import mhfast
    >>> from mhfast.models.tabular import TabularMLM
    >>> mhfast.sample(TabularMLM.random(3, 2, seed=0), 2, sampler="mh", chains=2, epochs=2, burn_in=0).tokens.shape
    torch.Size([1, 2, 2])
"""
from __future__ import annotations

import torch

from ..graphed import StaticSiteSteps
from ..memo import NO_MEMO, NoMemo, ProposalMemo, chain_groups
from ..moves.delayed import DelayedAcceptance, delayed_acceptance, delayed_commit
from ..moves.early_rejection import complete_partial
from ..moves.site_commit import commit_sites, refresh_remembered_rows
from ..moves.site_propose import propose_sites
from ..moves.site_score import score_sites, tested_sites
from ..moves.site_types import SiteMove
from ..schedules import Epoch, active_chains, epoch_order
from ..state import ChainState, rescore
from ..step import NO_STEP, StepContext, StepInfo
from ..subset import select_chains
from .base import Capabilities


class SingleSiteMH:
    """``init`` scores the start and builds the per-position cache; ``step`` is one position per chain."""

    name = "mh"
    capabilities = Capabilities(capture=True, memo=True, delayed=True, user_surrogate=True, influence=True)

    def __init__(self, ctx: StepContext):
        self.ctx = ctx
        self._active: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._static: StaticSiteSteps | None = None  # capture="static"/"cuda-graph": the static-shape steps
        self.memo: ProposalMemo | NoMemo = NO_MEMO  # the evaluated proposals per input (ctx.memo_slots > 0)
        #: option delayed resolved (capture none: options.py checks it; the memo supplies it numbers); None: off
        self.delayed: DelayedAcceptance | None = delayed_acceptance(ctx)

    def init(self, state: ChainState) -> ChainState:
        self._active = active_chains(state.num_free_host, state.tokens.device)
        state = rescore(state, self.ctx.runner, self.ctx.backend, keep_cache=True, terms=self.ctx.terms)
        if self.ctx.memo_slots:  # (resolved by the capabilities' memo rule: never with capture)
            group = chain_groups(state.inputs, state.energy_mask, state.ctx_index)
            self.memo = ProposalMemo(group, self.ctx.memo_slots, state.tokens.shape[1], state.tokens.device,
                                     self.ctx.backend, rows_like=state.cache)
        if self.ctx.config.capture == "none":
            return state
        self._static = StaticSiteSteps(self.ctx, state, graphs=self.ctx.config.capture == "cuda-graph")
        return self._static.state_of(state)

    def sweep(self, state: ChainState, epoch: Epoch) -> list[SiteMove]:
        order = epoch_order(state.rng_keys, state.free, epoch.index, self.ctx.config.order,
                            self.ctx.backend.counter_uniforms)
        return [SiteMove(k, act, act_host, order[act, k]) for k, (act, act_host) in enumerate(self._active)]

    def restrict(self, state: ChainState, keep: torch.Tensor) -> ChainState:
        """Only the chains ``keep`` go on (inputs that left the batch), with the moves they had: their steps, memo
        tables and (capture) static buffers carried over, nothing rescored."""
        state = select_chains(state, keep)
        self._active = active_chains(state.num_free_host, state.tokens.device)
        self.memo = self.memo.select(keep)
        if self._static is not None:
            self._static = StaticSiteSteps(self.ctx, state, graphs=self._static.graphs, has_pad=self._static.has_pad)
            state = self._static.state_of(state)
        return state

    def step(self, state: ChainState, epoch: Epoch, move: SiteMove) -> tuple[ChainState, StepInfo]:
        """propose -> pick (memo) -> score (model rows, memo, extra terms) -> accept and commit.

        The input state is consumed (its cache is updated in place). ``epoch.beta`` None: force accept (energies
        are still computed, so the cache stays valid)."""
        if self._static is not None:
            return self._static.step(state, move.chains, move.chains_host, move.pos, epoch.beta, epoch.index,
                                     move.index)
        da = self.delayed if self.delayed is not None and self.delayed.acts(epoch) else None
        on = None if da is None else da.acts_on(state, move.chains_host)
        if on is None:
            return self._step(state, epoch, move, da)
        # delayed="auto" on some inputs only (the long ones): the others' chains take plain MH's step, the same
        # numbers they draw alone (every random number is keyed by its chain, the memo's tables by their input)
        state, info = self._step(state, epoch, _some(move, ~on), None)
        if bool(on.any()):
            state, more = self._step(state, epoch, _some(move, on), da)
            info = info + more
        return state, info

    def _step(self, state: ChainState, epoch: Epoch, move: SiteMove, da: DelayedAcceptance | None
              ) -> tuple[ChainState, StepInfo]:
        """The dynamic step of the chains of ``move``, with delayed acceptance ``da`` (None: plain MH's test)."""
        A = move.chains.shape[0]
        if A == 0:
            return state, NO_STEP
        if state.counts is not None:
            state.counts.proposed(move.chains_host)
            state.counts.proposed_at(move.chains, move.pos)
        draw = propose_sites(self.ctx, state, chains=move.chains, pos=move.pos, epoch=epoch.index, step=move.index)
        picked = self.memo.pick(state.tokens, move, draw)
        if picked.index_host.shape[0] == 0:  # X' = X everywhere: accepted with probability 1, nothing to compute
            return state, StepInfo(A, A, 0, scored=True)
        tested = tested_sites(state, move, draw, picked)
        if da is not None:  # (not forced acceptance, not too cold)
            state, accepted = delayed_commit(self.ctx, state, tested, da, self.memo, beta=epoch.beta,
                                             epoch=epoch.index, step=move.index)
        else:
            # a plain epoch (forced-accept, or colder than delayed_min_temperature) reads the remembered terms:
            # early rejection's partial ones are completed first
            if self.delayed is not None and self.delayed.early:
                complete_partial(self.ctx, state, tested, self.memo)
            scored = score_sites(self.ctx, state, tested, self.memo)
            state, accepted = commit_sites(self.ctx, state, tested, scored, beta=epoch.beta, epoch=epoch.index,
                                           step=move.index)
            refresh_remembered_rows(self.ctx, state, tested, accepted, self.memo)
        novel = accepted.sum()
        return state, StepInfo(A, A - picked.index_host.shape[0] + novel, novel, scored=True)


def _some(move: SiteMove, keep: torch.Tensor) -> SiteMove:
    """The chains of ``move`` where ``keep`` (CPU Bool[A]) is true, in their order, at the same step."""
    idx = keep.nonzero().squeeze(1)
    return SiteMove(move.index, move.chains.index_select(0, idx.to(move.chains.device)),
                    move.chains_host.index_select(0, idx), move.pos.index_select(0, idx.to(move.pos.device)))
