"""Block Metropolis-Hastings (paper, section 4.1): propose a block of positions from one masked row,
exact MH ratio; block sizes follow ``block_schedule`` (default: appendix D's shrinking schedule).

Example:
    >>> import mhfast
    >>> from mhfast.models.tabular import TabularMLM
    >>> r = mhfast.sample(TabularMLM.random(3, 3, seed=0), 3, sampler="block-mh", block_schedule=2,
    ...                   chains=2, epochs=2, burn_in=0)
    >>> r.tokens.shape
    torch.Size([1, 2, 3])
"""
from __future__ import annotations

import warnings
from typing import Any

import torch

from ..moves.block import block_move
from ..moves.delayed import DelayedAcceptance, delayed_acceptance
from ..schedules import (BlockSizeRuns, BlockStep, Epoch, block_step_plan, epoch_order, oversized_block,
                         steps_per_epoch, uses_single_site)
from ..state import ChainState, rescore
from ..step import StepContext, StepInfo
from .base import Capabilities
from ..subset import select_chains

RESCORE = "rescore"


def _warn_oversized(requested: list[torch.Tensor], num_free: torch.Tensor) -> bool:
    """A warning (not silence) when ``block_schedule`` asks for more positions than an input has free: that input's
    blocks are clamped to all of its free positions. Clamping stays, since one size must serve a batch of inputs of
    different lengths; the default schedule never asks for more than an input has. Returns whether it warned."""
    over = oversized_block(requested, num_free)
    if over is not None:
        warnings.warn(f"mhfast.sample: block_schedule gives blocks of {over[0]} positions, more than an input's "
                      f"{over[1]} free positions: that input's blocks are clamped to its free positions (all of "
                      "them proposed at once)", stacklevel=4)
    return over is not None


class BlockMH:
    """Block moves; one-position blocks are cached single-site moves (so the cache is kept when any occur)."""

    name = "block-mh"
    gibbs = False
    # no static step, no memo (block moves forward all T_e rows of X'); delayed acceptance (moves.block_delayed)
    capabilities = Capabilities(blocks=True, delayed=True)

    def __init__(self, ctx: StepContext):
        self.ctx = ctx
        self._sizes: BlockSizeRuns | None = None
        self._single_site = False
        self._warned = False  #: a callable block_schedule's oversize warning given (once per run)
        self._plans: list[BlockStep] = []
        self._plans_for: torch.Tensor | None = None  # the block sizes ``_plans`` were made for
        #: option delayed resolved (None: off); block Gibbs accepts every proposal, so it has none
        self.delayed: DelayedAcceptance | None = delayed_acceptance(ctx)

    def init(self, state: ChainState) -> ChainState:
        cfg = self.ctx.config
        # Block sizes per epoch, on the host copy of the free counts (no device sync in the loop).
        n = state.num_free_host
        self._sizes = BlockSizeRuns(cfg.block_schedule, cfg.epochs, n)
        _warn_oversized(self._sizes.requested, n)  # a callable's: at its first oversized epoch (_plans_of)
        # A callable's sizes are known only as epochs are reached: keep the cache for one-position blocks in case
        # (a run without them makes the same moves either way; the cache costs memory, [chains, T, d or V] as in
        # single-site MH, not results).
        self._single_site = not self.gibbs and (callable(cfg.block_schedule)
                                                or any(uses_single_site(n, s) for s in self._sizes.sizes))
        if self.gibbs:
            return state
        return rescore(state, self.ctx.runner, self.ctx.backend, keep_cache=self._single_site, terms=self.ctx.terms)

    def _plans_of(self, state: ChainState, epoch: int) -> list[BlockStep]:
        sizes = self._sizes.at(epoch)
        if callable(self.ctx.config.block_schedule) and not self._warned:  # each epoch: 4 then 9 of 4 free clamp alike
            self._warned = _warn_oversized([self._sizes.requested_at(epoch)], state.num_free_host)
        if self._plans_for is None or not torch.equal(sizes, self._plans_for):  # sizes repeat across epochs
            self._plans_for = sizes
            n = state.num_free_host
            self._plans = [block_step_plan(n, sizes, k, self._single_site, state.tokens.device)
                           for k in range(steps_per_epoch(n, sizes))]
        return self._plans

    def sweep(self, state: ChainState, epoch: Epoch) -> list[Any]:
        order = epoch_order(state.rng_keys, state.free, epoch.index, self.ctx.config.order,
                            self.ctx.backend.counter_uniforms)
        moves: list[Any] = [(k, plan, order) for k, plan in enumerate(self._plans_of(state, epoch.index))]
        return moves + [RESCORE] if self.gibbs else moves

    def restrict(self, state: ChainState, keep: torch.Tensor) -> ChainState:
        """Only the chains ``keep`` go on (inputs that left the batch), with the block sizes they had (and the
        cache, kept when any chain of the run makes one-position moves)."""
        host = keep.cpu()
        self._sizes = self._sizes.select(host)
        self._plans_for = None  # plans are per chain set: made again for the kept chains
        return select_chains(state, keep)

    def step(self, state: ChainState, epoch: Epoch, move: Any) -> tuple[ChainState, StepInfo]:
        if move == RESCORE:  # block Gibbs: energies once per epoch, for the statistics
            return rescore(state, self.ctx.runner, self.ctx.backend), StepInfo(0, 0, 0, scored=True)
        k, plan, order = move
        beta = None if self.gibbs else epoch.beta
        delayed = self.delayed if self.delayed is not None and self.delayed.acts(epoch) else None
        return block_move(self.ctx, state, plan, order, beta, epoch.index, k, gibbs=self.gibbs, delayed=delayed)
