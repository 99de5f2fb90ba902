"""The proposal memo: the energy terms of proposals the chains of an input have evaluated, kept per input.

At a state X, single-site MH proposes X' = X with position i set to b, from the cached conditional
q(. | X without i), and needs the energy terms of X' (``T_e - 1`` masked rows) for the MH test. Those terms are a
function of the sequence X' (and of the input: its context and its energy positions), so any chain of the same
input that proposes a sequence evaluated before can meet the MH test without a model call. The memo keeps them:
one table per input (the chains with the same input, context and energy positions), keyed by the whole sequence
X'. It is exact: it hands back the numbers computed for this X' (the same numbers, not an approximation; with a
model whose rows do not depend on the rest of their batch, the chains equal those without the memo bit for bit,
tests/test_proposal_memo.py).

Where it pays: once chains sit near a mode, most proposals are either X itself (free: no rows) or rejected, and
a rejected chain draws from the same conditional at its next visit of position i, so it often proposes the same
X' again; chains started from one sequence sit in the same states and propose what another chain has already
evaluated, often in the very same step (the chains visit the positions in the same order). A proposal equal to
one evaluated earlier in the step is answered from that one's rows. From a real antibody (AntiBERTy, T=32)
a table per input answers about half of the state-changing proposals; a memo per chain (its first version) about
a quarter (bench/RESULTS.md).

The table of an input has ``slots x chains-of-the-input`` entries (rounded up to whole buckets of
:data:`WAYS`), least recently used first out; it holds the sequences (L tokens) and their raw and local terms,
not the model's output rows (``T x D`` per entry). A remembered proposal that is *accepted* therefore forwards
its rows then, for the state's cache (:func:`mhfast.sampler.moves.single_site_mh`).

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

from ..op_types import MemoTable
from .backend import Backend, get_backend

WAYS = 8  #: entries per bucket of a table: a lookup compares at most this many hashes


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

    Per step: ``lookup`` before the model call (it reserves entries for the misses, and keeps the step's proposals
    and entries), ``store`` once the misses' terms are known, ``terms`` for the hits (one op each for the first two:
    ``mh_memo_lookup_``, ``mh_memo_store_`` of ``backend``, the compiled ops by default); ``hits`` counts the
    proposals answered from the memo (the caller adds them: it knows their number on the host).
    """

    def __init__(self, group: torch.Tensor, slots: int, length: int, device: torch.device | str,
                 backend: Backend | None = None):
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
        self.step = -1  # the step counter of the stamps (lookup advances it)
        self._chains = self._slot = torch.zeros(0, dtype=torch.long, device=device)  # the last lookup's
        self.hits = 0

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
        out._chains = out._slot = self._chains[:0]
        return out

    def terms(self, sel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The remembered ``(raw f32[n, T], local f32[n, T])`` terms of this step's hits ``sel`` (proposal indices)."""
        g = self.group.index_select(0, self._chains.index_select(0, sel))
        slot = self._slot.index_select(0, sel)
        return self.raw[g, slot], self.local[g, slot]
