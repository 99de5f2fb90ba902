"""The proposal memo: the energy terms of proposals the chains of an input have evaluated, kept per input.

At a state X, single-site MH proposes X' = X with position i set to b, from the cached conditional
q(. | X without i), and needs the energy terms of X' (``T_e - 1`` masked rows) for the MH test. Those terms are a
function of the sequence X' (and of the input: its context and its energy positions), so any chain of the same
input that proposes a sequence evaluated before can meet the MH test without a model call. The memo keeps them:
one table per input (the chains with the same input, context and energy positions), keyed by the whole sequence
X'. It is exact: it hands back the numbers computed for this X' (the same numbers, not an approximation; with a
model whose rows do not depend on the rest of their batch, the chains equal those without the memo bit for bit,
tests/sampler/test_proposal_memo.py).

Where it pays: once chains sit near a mode, most proposals are either X itself (free: no rows) or rejected, and
a rejected chain draws from the same conditional at its next visit of position i, so it often proposes the same
X' again; chains started from one sequence sit in the same states and propose what another chain has already
evaluated, often in the very same step (the chains visit the positions in the same order). A proposal equal to
one evaluated earlier in the step is answered from that one's rows. From a real antibody (AntiBERTy, T=32)
a table per input answers about half of the state-changing proposals; a memo per chain (its first version) about
a quarter (bench/RESULTS.md).

The table of an input has ``slots x chains-of-the-input`` entries (rounded up to whole buckets of
:data:`WAYS`), least recently used first out; it holds the sequences (L tokens), their raw and local terms and,
where they fit in :data:`ROWS_BUDGET_BYTES`, the model's output rows of each X' (``L x D`` per entry: the rows a
chain's cache holds, :meth:`ProposalMemo.keep_rows`). A remembered proposal that is *accepted* needs its rows
for the state's cache (its next proposals are drawn from them): they are copied from the memo, or, where the
rows did not fit, forwarded then (:func:`mhfast.sampler.moves.site_commit.refresh_remembered_rows`). Chains that
step back and forth between a few sequences (near a mode, infilling: a third of the rows of AntiBERTy
infilling went to such refreshes, bench/RESULTS.md) then forward nothing for a return to a remembered one.

The step sees the memo through two hooks, :meth:`ProposalMemo.pick` (before any model row: which of the step's
proposals meet the MH test, those it knows last) and :meth:`ProposalMemo.completed` (once the misses' rows are
scored: store their terms, hand back every tested proposal's); :data:`NO_MEMO` has the same hooks and remembers
nothing, so a step without the memo runs the same code.

It is on by default where it can act (option ``memo="auto"``: 8 entries per chain for single-site MH with
capture none and no extra energy terms; ``memo=0`` turns it off). Its lookup and its store are one compiled op
each (``mh_memo_lookup_`` before the step's host sync, ``mh_memo_store_`` once the misses' terms are known; CPU
and CUDA kernels sharing csrc/memo_table.h, pure PyTorch twins in :mod:`mhfast.reference`).

Example:
    >>> tokens, group = torch.tensor([[1, 2, 3], [1, 2, 3]]), torch.tensor([0, 0])    # two chains, one input
    >>> memo = ProposalMemo(group, slots=2, length=3, device="cpu")
    >>> ch, pos, prop, changed = torch.tensor([0, 1]), torch.tensor([1, 1]), torch.tensor([4, 4]), torch.ones(2).bool()
    >>> memo.lookup(tokens, ch, pos, prop, changed).tolist()    # chain 0 misses; chain 1, same X': a hit on its entry
    [True, False, False, True]
    >>> memo.store(torch.tensor([0]), torch.ones(1, 3), 2 * torch.ones(1, 3), num_misses=1)   # proposal 0's terms
    >>> memo.terms(torch.tensor([1]))[1].tolist()    # proposal 1's (a hit)
    [[2.0, 2.0, 2.0]]
"""
from __future__ import annotations

import torch

from ..op_types import MemoTable, SiteRows
from ..runtime.backend import Backend, get_backend
from .moves.changed import changed_picked, misses_then_hits
from .moves.site_types import Picked, SiteDraw, SiteMove

WAYS = 8  #: entries per bucket of a table: a lookup compares at most this many hashes
#: the most memory the memo's copies of model rows may take (all tables together); where ``G x S x L x D``
#: cache-sized rows would take more, the memo keeps terms only and an accepted remembered X' forwards its rows
ROWS_BUDGET_BYTES = 256 * 2**20


def chain_groups(inputs: torch.Tensor, energy_mask: torch.Tensor, ctx_index: torch.Tensor | None) -> torch.Tensor:
    """Long[M]: the memo table of each chain, one per distinct (input, context, energy positions): the chains whose
    proposals have the same energy terms whenever they are the same sequence.

    Example:
        >>> chain_groups(torch.tensor([0, 0, 1]), torch.ones(3, 2, dtype=torch.bool), None).tolist()
        [0, 0, 1]
    """
    key = [inputs[:, None], energy_mask.long()]
    if ctx_index is not None:
        key.append(ctx_index[:, None])
    return torch.unique(torch.cat(key, dim=1), dim=0, return_inverse=True)[1]


class ProposalMemo:
    """The chains' evaluated proposals per input, with their energy terms (see the module doc).

    The step's hooks are :meth:`pick` and :meth:`completed`; under them, per step: ``lookup`` before the model
    call (it reserves entries for the misses, and keeps the step's proposals and entries), ``store`` once the
    misses' terms are known, ``terms`` for the hits (one op each for the first two: ``mh_memo_lookup_``,
    ``mh_memo_store_`` of ``backend``, the compiled ops by default); ``hits`` counts the proposals answered from
    the memo.
    """

    def __init__(self, group: torch.Tensor, slots: int, length: int, device: torch.device | str,
                 backend: Backend | None = None, rows_like: torch.Tensor | None = None):
        if slots < 1:
            raise ValueError(f"ProposalMemo: slots must be >= 1, got {slots}")
        self.backend = backend if backend is not None else get_backend("compiled")
        self.group = group.to(device=device, dtype=torch.long)
        counts = torch.bincount(group.cpu())
        G, per_group = counts.numel(), int(counts.max()) * slots
        S = -(-per_group // WAYS) * WAYS
        self.stamp = torch.full((G, S), -1, dtype=torch.long, device=device)  # -1: empty
        self.hashes = torch.zeros(G, S, dtype=torch.long, device=device)
        self.stored = torch.zeros(G, S, length, dtype=torch.long, device=device)
        self.raw = torch.zeros(G, S, length, device=device)
        self.local = torch.zeros(G, S, length, device=device)
        #: [G, S + 1, L, D] each entry's model rows (the cache rows of its X'), like ``rows_like`` (the state's
        #: cache [M, L, D]); slot S takes the writes of misses without an entry (slot -1). None: not kept
        self.rows = None
        if rows_like is not None and G * (S + 1) * length * rows_like.shape[2] * rows_like.element_size() <= \
                ROWS_BUDGET_BYTES:
            self.rows = rows_like.new_zeros(G, S + 1, length, rows_like.shape[2])
        self.step = -1  # the step counter of the stamps (lookup advances it)
        self._chains = self._slot = torch.zeros(0, dtype=torch.long, device=device)  # the last lookup's
        self.hits = 0

    def pick(self, tokens: torch.Tensor, move: SiteMove, draw: SiteDraw) -> Picked:
        """Before any model row: the proposals of ``move`` that change their chain (they meet the MH test), those
        whose X' the memo knows last (their terms need no rows). Makes the step's one host sync."""
        return misses_then_hits(self.lookup(tokens, move.chains, move.pos, draw.proposed, draw.changed))

    def completed(self, picked: Picked, raw: torch.Tensor, local: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """After the misses' rows: their terms ``raw``/``local`` (f32[misses, T]) into the memo, and the terms of
        every picked proposal (the misses', then the hits' remembered ones)."""
        m = picked.misses
        if picked.hits == 0:  # (no slicing: each slice would be one more dispatched op in every step)
            self.store(picked.index, raw, local, m)
            return raw, local
        if m:  # first: a hit may be a miss of this very step (the same X' proposed by two chains)
            self.store(picked.index[:m], raw, local, m)
        raw_h, local_h = self.terms(picked.index[m:])
        self.hits += picked.hits
        return torch.cat([raw, raw_h]), torch.cat([local, local_h])

    def lookup(self, tokens: torch.Tensor, chains: torch.Tensor, pos: torch.Tensor, proposed: torch.Tensor,
               changed: torch.Tensor) -> torch.Tensor:
        """Whether the memo holds X' = ``tokens[chains[j]]`` with ``proposed[j]`` at ``pos[j]``: ``order`` Bool[2n],
        ``changed & ~hit`` then ``changed & hit`` (see :func:`mhfast.reference.mh_memo_lookup_`). The step's
        proposals and their entries are kept for :meth:`store` and :meth:`terms`, which name proposals by their
        index ``j`` here."""
        self.step += 1
        order, self._slot = self.backend.mh_memo_lookup_(self.table, tokens, chains, pos, proposed, changed, WAYS,
                                                         self.step)
        self._chains = chains
        return order

    def store(self, sel: torch.Tensor, raw_new: torch.Tensor, local_new: torch.Tensor, num_misses: int) -> None:
        """The terms of this step's proposals ``sel[:num_misses]`` (misses) into the entries their lookup reserved.
        In place, no host sync; call it before reading any hit's :meth:`terms` (a hit may be an earlier miss of the
        same step)."""
        self.backend.mh_memo_store_(self.table, self._chains, self._slot, sel, raw_new, local_new, num_misses,
                                    self.step)

    def keep_rows(self, sel: torch.Tensor, base: torch.Tensor | None, rows: SiteRows) -> None:
        """The model rows of this step's proposals ``sel`` (Long[n], the lookup's numbering) into their entries:
        ``base`` ([n, L, D] the rows of their X, whose row at the proposed position X' shares; None: keep the
        entries' rows) with the forwarded ``rows`` over it (row ``r``: proposal ``sel[rows.seq[r]]`` at position
        ``rows.q[r]``). Written whether or not the terms are then stored: an entry whose terms were not stored
        is never read. No-op where the rows are not kept; no host sync.

        Example:
            >>> tokens = torch.tensor([[1, 2, 3]])
            >>> memo = ProposalMemo(torch.tensor([0]), slots=1, length=3, device="cpu", rows_like=torch.zeros(1, 3, 2))
            >>> _ = memo.lookup(tokens, torch.tensor([0]), torch.tensor([1]), torch.tensor([4]), torch.ones(1).bool())
            >>> rows = SiteRows(torch.tensor([0, 0]), torch.tensor([0, 2]), [torch.full((2, 2), 7.0)])
            >>> memo.keep_rows(torch.tensor([0]), torch.ones(1, 3, 2), rows)
            >>> memo.rows_of(torch.tensor([0]))[0, :, 0].tolist()    # rows 0 and 2 of X' forwarded, row 1 X's
            [7.0, 1.0, 7.0]
        """
        if self.rows is None:
            return
        g, slot = self._entries(sel)  # (slot -1, no entry: the spare last slot, never read)
        if base is not None:
            self.rows.index_put_((g, slot), base.to(self.rows.dtype))
        if rows.outputs and rows.seq.numel():
            out = rows.outputs[0] if len(rows.outputs) == 1 else torch.cat(rows.outputs)
            self.rows.index_put_((g.index_select(0, rows.seq), slot.index_select(0, rows.seq), rows.q),
                                 out.to(self.rows.dtype))

    def complete(self, sel: torch.Tensor, raw: torch.Tensor, local: torch.Tensor) -> None:
        """The full terms of this step's hits ``sel`` into their entries, which held partial ones (early rejection
        stores a proposal it stopped with NaN where it forwarded no row: :mod:`.moves.delayed`). In place."""
        g, slot = self._entries(sel)
        self.raw.index_put_((g, slot), raw)
        self.local.index_put_((g, slot), local)

    def rows_of(self, sel: torch.Tensor) -> torch.Tensor | None:
        """The remembered model rows ``[n, L, D]`` of this step's hits ``sel``; None where the rows are not kept."""
        if self.rows is None:
            return None
        return self.rows[self._entries(sel)]

    def read_by_hits(self, picked: Picked) -> torch.Tensor:
        """Bool[misses]: the misses of this step whose entry a hit of this same step reads (two chains proposed
        the same X', the first a miss that reserved the entry). Delayed acceptance stores a miss's terms only if
        it forwarded all its rows; these must, whatever their first stage says, or the hit would read an entry
        never filled. Call it after :meth:`lookup`, before :meth:`store` (a hit's entry still reserved, stamp <
        0, is one of this step's misses; a ready one was stamped with the step).

        Example:
            >>> tokens, group = torch.tensor([[1, 2, 3], [1, 2, 3], [1, 2, 3]]), torch.tensor([0, 0, 0])
            >>> memo = ProposalMemo(group, slots=2, length=3, device="cpu")
            >>> pos, prop, changed = torch.tensor([1, 1, 2]), torch.tensor([4, 4, 5]), torch.ones(3).bool()
            >>> picked = misses_then_hits(memo.lookup(tokens, torch.tensor([0, 1, 2]), pos, prop, changed))
            >>> picked.index.tolist(), picked.hits, memo.read_by_hits(picked).tolist()   # chain 1 reads 0's entry
            ([0, 2, 1], 1, [True, False])
        """
        m = picked.misses
        group, slot = self._entries(picked.index)
        g_h, s_h = group[m:], slot[m:]
        pending = torch.zeros_like(self.stamp, dtype=torch.bool)
        pending.index_put_((g_h, s_h), self.stamp[g_h, s_h] < 0)  # (all hits of one entry agree: one value)
        s_m = slot[:m]
        return pending[group[:m], s_m.clamp(min=0)] & (s_m >= 0)

    @property
    def table(self) -> MemoTable:
        """The tables as the memo ops take them (:class:`mhfast.op_types.MemoTable`; the same tensors)."""
        return MemoTable(self.stamp, self.hashes, self.stored, self.raw, self.local, self.group)

    def select(self, keep: torch.Tensor) -> "ProposalMemo":
        """The memo of the chains ``keep`` (Long[M'], whole groups: inputs leave the batch with all their chains)
        only: their groups' tables as they are, renumbered, so those chains meet the same entries as before."""
        kept, group = torch.unique(self.group.index_select(0, keep.to(self.group.device)), return_inverse=True)
        out = object.__new__(ProposalMemo)
        out.backend, out.group, out.step, out.hits = self.backend, group, self.step, self.hits
        for name in ("stamp", "hashes", "stored", "raw", "local"):
            setattr(out, name, getattr(self, name).index_select(0, kept))
        out.rows = self.rows.index_select(0, kept) if self.rows is not None else None
        out._chains = out._slot = self._chains[:0]
        return out

    def terms(self, sel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The remembered ``(raw f32[n, T], local f32[n, T])`` terms of this step's hits ``sel`` (proposal indices)."""
        g, slot = self._entries(sel)
        return self.raw[g, slot], self.local[g, slot]

    def _entries(self, sel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(table Long[n], slot Long[n])``: the entries the last lookup gave this step's proposals ``sel``."""
        return self.group.index_select(0, self._chains.index_select(0, sel)), self._slot.index_select(0, sel)


class NoMemo:
    """The memo that remembers nothing (option memo 0, or where the memo cannot act): the same hooks as
    :class:`ProposalMemo`, so the step has one path.

    Example:
        >>> NO_MEMO.pick(None, None, SiteDraw(*[None] * 3, torch.tensor([False, True]), None)).index.tolist()
        [1]
    """

    hits = 0
    rows = None  #: no model rows kept

    def pick(self, tokens: torch.Tensor, move: SiteMove, draw: SiteDraw) -> Picked:
        """The proposals that change their chain; none known."""
        return changed_picked(draw.changed)

    def completed(self, picked: Picked, raw: torch.Tensor, local: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The terms as the model rows gave them."""
        return raw, local

    def keep_rows(self, *args) -> None:
        """Nothing kept."""

    def store(self, sel: torch.Tensor, raw_new: torch.Tensor, local_new: torch.Tensor, num_misses: int) -> None:
        """Nothing to remember."""

    def select(self, keep: torch.Tensor) -> "NoMemo":
        return self


NO_MEMO = NoMemo()
