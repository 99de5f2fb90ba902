"""Influence-ranked windows for delayed acceptance (option ``delayed="influence:K"``; docs/delayed.md).

``window:K``'s first stage forwards the rows of X' at the energy positions within K of the proposed position i.
``influence:K`` forwards as many rows, at the positions whose terms change MOST when position i changes: on
AntiBERTy a change near the end of the CDR3 moves the terms of residues 11-14 positions away more than those of
its neighbours (bench/RESULTS.md, "Delayed acceptance"). The ranking is learnt per input and position during
burn-in, from the survivors of stage 1, whose exact terms delayed acceptance has anyway (forwarded, or remembered
by the memo; stage 1 then runs ``window:K``),
by the mean ``|E_j(X') - E_j(X)|`` of each energy position j over the proposals at i, and frozen at the end of
burn-in. From then on the window of each (input, i) is a fixed set, so the surrogate ``E~_i`` is a fixed function
of the state and each position's two-stage kernel stays reversible with respect to the exact target (the
tempering ladder is tuned in burn-in the same way). A position never proposed at in burn-in (or a run without
burn-in) keeps the distance window; ties go to the nearest.

Memory: ``B T^2`` floats for B inputs of T tokens (the sums of burn-in; early rejection keeps them all run),
and as many int16 ranks once ranked.

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
    g = the positions forwarded in stage 1 for a proposal at i, i itself excluded).

    ``learn_until=None`` (early rejection, option ``delayed="early:K"``): the sums grow for the whole run and the
    sets are re-ranked at the start of every epoch (:meth:`update`). Early rejection's kernel is plain MH whatever
    the sets are (they change which rows are forwarded first, never a decision), so nothing needs freezing there.
    ``by_value``: rank by the mean term of X' itself instead of its change (what early rejection's bound leaves
    out is the sum of X''s terms outside the set, so the set should hold the largest)."""

    def __init__(self, k: int, learn_until: int | None, by_value: bool = False):
        self.k, self.learn_until = k, learn_until  #: K, and the first epoch that uses the frozen sets (burn-in)
        self.by_value = by_value
        self.sums: torch.Tensor | None = None  #: f32[G, T, T] sum of |term change| per (input, proposed, j)
        self.counts: torch.Tensor | None = None  #: f32[G, T] proposals observed per (input, proposed)
        self.sets: torch.Tensor | None = None  #: Bool[G, T, T] once frozen
        self.rank: torch.Tensor | None = None  #: int16/32 [G, T, T] each position's rank at (input, proposed)
        self.size: torch.Tensor | None = None  #: Long[G, T, 1] the rows of ``sets`` at (input, proposed)
        self.ranked_at: int | None = None  #: (learn_until None) the epoch the sets were last ranked at
        #: Long[G] the run's input ids (sorted) at first use: row g of the tables is input ids[g]. Ids may be global
        #: (option input_ids: a piece of a long list), so they index no table directly; inputs only leave the batch
        self.ids: torch.Tensor | None = None

    def _rows(self, inputs: torch.Tensor) -> torch.Tensor:
        """Long[n]: the table row of each input id in ``inputs`` (the ids are taken from the first call's)."""
        if self.ids is None:
            self.ids = torch.unique(inputs)
        return torch.searchsorted(self.ids, inputs)

    def learning(self, epoch: int) -> bool:
        """Whether ``epoch`` still learns (burn-in, or the whole run with ``learn_until=None``)."""
        return self.learn_until is None or (self.sets is None and epoch < self.learn_until)

    def update(self, state: ChainState, epoch: int) -> None:
        """At a step of ``epoch``: freezes the sets once burn-in is over, or (``learn_until=None``) re-ranks them at
        the first step of each epoch from everything observed so far (one argsort of [G, T, T]: no host sync)."""
        if self.learn_until is None:
            if self.ranked_at != epoch and self.sums is not None:
                self._rank(state)
                self.ranked_at = epoch
        elif self.sets is None and not self.learning(epoch):
            self.freeze(state)

    def observe(self, state: ChainState, proposal: SiteProposal, new_raw: torch.Tensor, new_local: torch.Tensor
                ) -> None:
        """Adds the exact term changes of proposals (``proposal``'s rows; X' terms ``new_raw``/``new_local``
        f32[n, T], of the run's energy) to the sums of their (input, position); ``by_value``: the terms of X'."""
        if proposal.ch.numel() == 0:
            return
        T = state.tokens.shape[1]
        rows = self._rows(state.inputs)
        G = self.ids.shape[0]  # (from the first use: the inputs that left the batch since keep their rows, unread)
        if self.sums is None:
            self.sums = torch.zeros(G, T, T, device=state.tokens.device)
            self.counts = torch.zeros(G, T, device=state.tokens.device)
        new = new_raw if state.energy == "raw" else new_local
        if self.by_value:  # (a term of X' may be inf: p = 0; capped so that the mean stays a rank)
            change = new.float().abs().nan_to_num(posinf=1e30)
        else:
            old = (state.raw_terms if state.energy == "raw" else state.local_terms).index_select(0, proposal.ch)
            change = (new.float() - old.float()).abs()
        change = change * state.energy_mask.index_select(0, proposal.ch)
        at = rows.index_select(0, proposal.ch) * T + proposal.pos
        self.sums.view(G * T, T).index_add_(0, at, change)
        self.counts.view(G * T).index_add_(0, at, torch.ones_like(at, dtype=self.counts.dtype))

    def freeze(self, state: ChainState) -> None:
        """Ranks and freezes the sets: at each (input g, position i) the ``r`` energy positions j != i of highest
        mean change, ``r`` = the energy positions within K of i but i (the distance window's rows)."""
        self._rank(state)
        self.sums = self.counts = None

    def _rank(self, state: ChainState) -> None:
        """The sets from the sums so far (kept)."""
        T, dev = state.tokens.shape[1], state.tokens.device
        rows = self._rows(state.inputs)
        G = self.ids.shape[0]
        energy = torch.zeros(G, T, dtype=torch.bool, device=dev).index_copy_(0, rows, state.energy_mask)
        at = torch.arange(T, device=dev)
        dist = (at[None, :] - at[:, None]).abs()
        window = ((dist <= self.k) & (dist > 0))[None] & energy[:, None, :]  # [G, T, T]
        mean = torch.zeros(G, T, T, device=dev) if self.sums is None else \
            self.sums / self.counts.clamp(min=1)[..., None]
        score = mean.double() - dist.double() * 1e-9  # ties (and positions never proposed at: all 0): the nearest
        score = score.masked_fill(~(energy[:, None, :] & (dist > 0)[None]), -float("inf"))
        rank = score.argsort(dim=2, descending=True).argsort(dim=2)
        # (kept for widened sets: int16 where T allows, so B T^2 ranks take a quarter of int64's memory)
        self.rank = rank.to(torch.int16 if T < 2**15 else torch.int32)
        self.size = window.sum(2, keepdim=True)  # [G, T, 1]: the distance window's rows at each position
        self.sets = self.rank < self.size

    def near(self, state: ChainState, proposal: SiteProposal, widen: int = 1) -> torch.Tensor:
        """Bool[n, T]: each proposal's frozen set with its own position (the ``near`` of a window); ``widen``:
        the top ``widen`` times as many positions of the same ranking (so the sets nest)."""
        at = (self._rows(state.inputs).index_select(0, proposal.ch), proposal.pos)
        sets = self.sets[at] if widen == 1 else self.rank[at] < widen * self.size[at]
        return sets.scatter(1, proposal.pos[:, None], True)


def influence_ranked(delayed: Any) -> bool:
    """Whether option ``delayed`` ranks its stage-1 positions: ``"influence:K"`` (by influence in burn-in) or
    ``"early:K"`` (early rejection: by the terms of X', all run long).

    Example:
        >>> [influence_ranked(d) for d in ("influence:2", "early:2", "window:2", None)]
        [True, True, False, False]
    """
    return isinstance(delayed, str) and delayed.startswith(("influence:", "early:"))


def early_rejection(delayed: Any) -> bool:
    """Whether option ``delayed`` is ``"early:K"``: exact early rejection (:mod:`.delayed`), not a surrogate.

    Example:
        >>> early_rejection("early:2"), early_rejection("influence:2"), early_rejection(len)
        (True, False, False)
    """
    return isinstance(delayed, str) and delayed.startswith("early:")
