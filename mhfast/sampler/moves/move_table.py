"""The context table of delayed acceptance (option ``delayed="table:K"``; docs/delayed.md, "Context tables").

``influence:K``'s first stage forwards K-window's worth of rows of X' and takes every other term as unchanged. But
a chain near a mode proposes the same few moves (position i, token a -> b) again and again, and whenever a
proposal's other rows are forwarded the sampler sees exactly how much each other term j moved. The *context table*
keeps, per input g, move (i, a, b) and other energy position j **with its token** x_j, the mean change of term j
seen in burn-in (from the forwarded proposals' exact terms, the run's energy), and is frozen at the end of burn-in.
From then on a proposal whose move the table knows (at least one of its cells) forwards NO row in stage 1: its
surrogate change is its own term's change (the cached row i) plus the table's changes at the cells it knows (0 at
the others). A move it does not know keeps ``influence:K``'s window.

Why the chain keeps the exact target: once frozen, dE~ is a fixed function of (X, X'), and antisymmetric, because
an entry is stored once per unordered pair {a, b} with the sign of the move (a < b: +, else -): the reverse move
from X' (b -> a at i) sees the same tokens at every j != i and reads the same entry with the other sign. That is all
stage 2's formula needs (docs/delayed.md, "Why the target is exact"); the table need not be an energy.

Measured offline first (bench/delayed_movetable.py, AntiBERTy infilling, leave one seed out): on the proposals the
memo would not already know, rows per accepted change 1.84x fewer than exact MH against ``influence:2``'s 1.42x
(the ceiling 2.31x); in the sampler: bench/RESULTS.md, "Context tables".

Memory: 6 int64 and one float per observed cell during burn-in (consolidated as it grows), then one int64 key and
one float per distinct cell.

Example:
    >>> import mhfast
    >>> from mhfast.models.tabular import TabularMLM
    >>> r = mhfast.sample(TabularMLM.random(3, 6, seed=0), 6, chains=3, epochs=6, burn_in=3, delayed="table:1")
    >>> r.delayed_passed <= r.delayed_tested
    True
"""
from __future__ import annotations

import torch

from ...op_types import SiteProposal
from ..state import ChainState

#: consolidate the burn-in's observed cells (sum duplicates) once this many are pending: bounds burn-in's memory
CONSOLIDATE_AT = 1 << 20
#: the combined key of a cell must fit in an int64 (63 bits; one spare)
KEY_BITS = 62


def table_kind(delayed: object) -> bool:
    """Whether option ``delayed`` is ``"table:K"``.

    Example:
        >>> table_kind("table:2"), table_kind("influence:2"), table_kind(len)
        (True, False, False)
    """
    return isinstance(delayed, str) and delayed.startswith("table:")


class ContextTable:
    """Burn-in's observed term changes per (input, position, move, other position, its token), then frozen.

    Cells are rows ``(g, i, j, lo, hi, x_j)`` with ``lo < hi`` the move's two tokens; the value is the change of
    term j for the move ``lo -> hi`` (a move ``hi -> lo`` adds its change negated)."""

    def __init__(self, learn_until: int):
        self.learn_until = learn_until  #: the first epoch that uses the frozen table (burn-in's length)
        self._cells: list[torch.Tensor] = []  #: Long[c, 6] observed cells (pending)
        self._values: list[torch.Tensor] = []  #: f64[c] their signed changes
        self._counts: list[torch.Tensor] = []  #: f64[c] how many observations each row sums
        self._pending = 0
        self.frozen = False
        self.vocab: torch.Tensor | None = None  #: Long[V'] the tokens the table's cells name, sorted
        self.keys: torch.Tensor | None = None  #: Long[N] the cells' combined keys, sorted
        self.means: torch.Tensor | None = None  #: f32[N] each cell's mean change
        self.shape: tuple[int, int, int] = (0, 0, 0)  #: (G, T, V') that the keys encode

    def learning(self, epoch: int) -> bool:
        """Whether ``epoch`` still observes (burn-in, before the table froze)."""
        return not self.frozen and epoch < self.learn_until

    def update(self, state: ChainState, epoch: int) -> None:
        """Freezes the table at the first step after burn-in (once)."""
        if not self.frozen and epoch >= self.learn_until:
            self.freeze(state)

    def observe(self, state: ChainState, proposal: SiteProposal, new_raw: torch.Tensor, new_local: torch.Tensor
                ) -> None:
        """Adds the exact term changes of forwarded proposals (terms of X' ``new_raw``/``new_local`` f32[n, T], the
        run's energy read) at every energy position j != i whose term is finite on both sides."""
        n, T = new_raw.shape
        if n == 0:
            return
        new = (new_raw if state.energy == "raw" else new_local).double()
        old = (state.raw_terms if state.energy == "raw" else state.local_terms).index_select(0, proposal.ch).double()
        change = new - old
        ok = state.energy_mask.index_select(0, proposal.ch) & torch.isfinite(change)
        ok.scatter_(1, proposal.pos[:, None], False)
        row, j = ok.nonzero(as_tuple=True)
        cells, sign = self._cells_of(state, proposal, row, j)
        self._cells.append(cells)
        self._values.append(sign * change[row, j])
        self._counts.append(torch.ones_like(sign))
        self._pending += int(row.numel())
        if self._pending > CONSOLIDATE_AT:
            self._consolidate()

    @staticmethod
    def _cells_of(state: ChainState, proposal: SiteProposal, row: torch.Tensor, j: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(Long[c, 6] cells, f64[c] signs)`` of the (proposal ``row``, position ``j``) pairs."""
        ch = proposal.ch.index_select(0, row)
        a = state.tokens.index_select(0, ch).gather(1, proposal.pos.index_select(0, row)[:, None])[:, 0]
        b = proposal.proposed.index_select(0, row)
        x_j = state.tokens.index_select(0, ch).gather(1, j[:, None])[:, 0]
        cells = torch.stack([state.inputs.index_select(0, ch), proposal.pos.index_select(0, row), j,
                             torch.minimum(a, b), torch.maximum(a, b), x_j], 1)
        return cells, torch.where(a < b, 1.0, -1.0).double()

    def _consolidate(self) -> None:
        """Sums the pending rows of equal cells (the same means, less memory)."""
        if not self._cells:
            return
        cells, inverse = torch.cat(self._cells).unique(dim=0, return_inverse=True)
        values = torch.zeros(cells.shape[0], dtype=torch.float64, device=cells.device)
        counts = torch.zeros_like(values)
        values.index_add_(0, inverse, torch.cat(self._values))
        counts.index_add_(0, inverse, torch.cat(self._counts))
        self._cells, self._values, self._counts, self._pending = [cells], [values], [counts], cells.shape[0]

    def freeze(self, state: ChainState) -> None:
        """The means of burn-in's cells under combined int64 keys, sorted; burn-in's rows are dropped. A table
        whose keys would not fit in 62 bits stays empty (every move then takes ``influence:K``'s window)."""
        self.frozen = True
        self._consolidate()
        if not self._cells:
            return
        cells, values, counts = self._cells[0], self._values[0], self._counts[0]
        self._cells = self._values = self._counts = []
        G, T = int(cells[:, 0].max()) + 1, state.tokens.shape[1]
        vocab = torch.cat([cells[:, 3], cells[:, 4], cells[:, 5]]).unique()
        if (G * T * T).bit_length() + 3 * max(int(vocab.numel()), 2).bit_length() > KEY_BITS:
            return
        self.vocab, self.shape = vocab, (G, T, int(vocab.numel()))
        ids = torch.searchsorted(vocab, cells[:, 3:].contiguous())
        keys = self._key(cells[:, 0], cells[:, 1], cells[:, 2], ids)
        order = keys.argsort()
        self.keys, self.means = keys[order], (values / counts)[order].float()

    def _key(self, g: torch.Tensor, i: torch.Tensor, j: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        G, T, V = self.shape
        return (((((g * T + i) * T + j) * V + ids[:, 0]) * V + ids[:, 1]) * V + ids[:, 2])

    def predict(self, state: ChainState, proposal: SiteProposal) -> tuple[torch.Tensor, torch.Tensor]:
        """``(shift f32[n], known Bool[n])``: each proposal's predicted change of the run's model energy outside
        its own position (the sum of the table's cells it matches) and whether it matched any cell."""
        n = proposal.ch.numel()
        dev = state.tokens.device
        if self.keys is None or n == 0:
            return torch.zeros(n, device=dev), torch.zeros(n, dtype=torch.bool, device=dev)
        ok = state.energy_mask.index_select(0, proposal.ch).clone()
        ok.scatter_(1, proposal.pos[:, None], False)
        row, j = ok.nonzero(as_tuple=True)
        cells, sign = self._cells_of(state, proposal, row, j)
        ids = torch.searchsorted(self.vocab, cells[:, 3:].contiguous()).clamp(max=self.vocab.numel() - 1)
        named = (self.vocab[ids] == cells[:, 3:]).all(1) & (cells[:, 0] < self.shape[0])
        keys = self._key(cells[:, 0].clamp(max=self.shape[0] - 1), cells[:, 1], cells[:, 2], ids)
        at = torch.searchsorted(self.keys, keys).clamp(max=self.keys.numel() - 1)
        hit = named & (self.keys[at] == keys)
        value = torch.where(hit, self.means[at] * sign.float(), torch.zeros((), device=dev))
        shift = torch.zeros(n, device=dev).index_add_(0, row, value)
        known = torch.zeros(n, dtype=torch.bool, device=dev).index_fill_(0, row[hit], True)
        return shift, known
