"""Influence-ranked windows for delayed acceptance (option ``delayed="influence:K"``; docs/delayed.md).

``window:K``'s first stage forwards the rows of X' at the energy positions within K of the proposed position i.
``influence:K`` forwards as many rows, at the positions whose terms change MOST when position i changes: on
AntiBERTy a change near the end of the CDR3 moves the terms of residues 11-14 positions away more than those of
its neighbours (bench/RESULTS.md, "Delayed acceptance"). The ranking is learnt per input and position during
burn-in, from the proposals whose exact terms delayed acceptance forwards anyway (stage 1 then runs ``window:K``),
by the mean ``|E_j(X') - E_j(X)|`` of each energy position j over the proposals at i, and frozen at the end of
burn-in. From then on the window of each (input, i) is a fixed set, so the surrogate ``E~_i`` is a fixed function
of the state and each position's two-stage kernel stays reversible with respect to the exact target (the
tempering ladder is tuned in burn-in the same way). A position never proposed at in burn-in (or a run without
burn-in) keeps the distance window; ties go to the nearest.

Memory: ``B T^2`` floats for B inputs of T tokens (the sums of burn-in).

Example:
    >>> import mhfast
    >>> from mhfast.models.tabular import TabularMLM
    >>> r = mhfast.sample(TabularMLM.random(3, 6, seed=0), 6, chains=3, epochs=4, burn_in=2, delayed="influence:1")
    >>> r.delayed_passed <= r.delayed_tested
    True
"""
from __future__ import annotations

from typing import Any

import torch

from ...op_types import SiteProposal
from ..state import ChainState


class InfluenceWindows:
    """The influence-ranked windows of a run: burn-in's sums, then the frozen sets (Bool[G, T, T]: row i of input
    g = the positions forwarded in stage 1 for a proposal at i, i itself excluded)."""

    def __init__(self, k: int, learn_until: int):
        self.k, self.learn_until = k, learn_until  #: K, and the first epoch that uses the frozen sets (burn-in)
        self.sums: torch.Tensor | None = None  #: f32[G, T, T] sum of |term change| per (input, proposed, j)
        self.counts: torch.Tensor | None = None  #: f32[G, T] proposals observed per (input, proposed)
        self.sets: torch.Tensor | None = None  #: Bool[G, T, T] once frozen

    def learning(self, epoch: int) -> bool:
        """Whether ``epoch`` is still burn-in (the sets not frozen yet)."""
        return self.sets is None and epoch < self.learn_until

    def observe(self, state: ChainState, proposal: SiteProposal, new_raw: torch.Tensor, new_local: torch.Tensor
                ) -> None:
        """Adds the exact term changes of proposals (``proposal``'s rows; X' terms ``new_raw``/``new_local``
        f32[n, T], of the run's energy) to the sums of their (input, position)."""
        if proposal.ch.numel() == 0:
            return
        G, T = int(state.inputs.max()) + 1, state.tokens.shape[1]
        if self.sums is None:
            self.sums = torch.zeros(G, T, T, device=state.tokens.device)
            self.counts = torch.zeros(G, T, device=state.tokens.device)
        old = (state.raw_terms if state.energy == "raw" else state.local_terms).index_select(0, proposal.ch)
        new = new_raw if state.energy == "raw" else new_local
        change = (new.float() - old.float()).abs() * state.energy_mask.index_select(0, proposal.ch)
        at = state.inputs.index_select(0, proposal.ch) * T + proposal.pos
        self.sums.view(G * T, T).index_add_(0, at, change)
        self.counts.view(G * T).index_add_(0, at, torch.ones_like(at, dtype=self.counts.dtype))

    def freeze(self, state: ChainState) -> None:
        """Ranks and freezes the sets: at each (input g, position i) the ``r`` energy positions j != i of highest
        mean change, ``r`` = the energy positions within K of i but i (the distance window's rows)."""
        T, dev = state.tokens.shape[1], state.tokens.device
        G = self.sums.shape[0] if self.sums is not None else int(state.inputs.max()) + 1
        energy = torch.zeros(G, T, dtype=torch.bool, device=dev).index_copy_(0, state.inputs, state.energy_mask)
        at = torch.arange(T, device=dev)
        dist = (at[None, :] - at[:, None]).abs()
        window = ((dist <= self.k) & (dist > 0))[None] & energy[:, None, :]  # [G, T, T]
        mean = torch.zeros(G, T, T, device=dev) if self.sums is None else \
            self.sums / self.counts.clamp(min=1)[..., None]
        score = mean.double() - dist.double() * 1e-9  # ties (and positions never proposed at: all 0): the nearest
        score = score.masked_fill(~(energy[:, None, :] & (dist > 0)[None]), -float("inf"))
        rank = score.argsort(dim=2, descending=True).argsort(dim=2)
        self.sets = rank < window.sum(2, keepdim=True)
        self.sums = self.counts = None

    def near(self, state: ChainState, proposal: SiteProposal) -> torch.Tensor:
        """Bool[n, T]: each proposal's frozen set with its own position (the ``near`` of a window)."""
        sets = self.sets[state.inputs.index_select(0, proposal.ch), proposal.pos]
        return sets.scatter(1, proposal.pos[:, None], True)


def influence_ranked(delayed: Any) -> bool:
    """Whether option ``delayed`` is ``"influence:K"`` (the window's positions ranked by influence in burn-in).

    Example:
        >>> influence_ranked("influence:2"), influence_ranked("window:2"), influence_ranked(None)
        (True, False, False)
    """
    return isinstance(delayed, str) and delayed.startswith("influence:")
