"""The proposal memo: the energy terms of proposals a chain rejected, kept while its state stays the same.

At a state X, single-site MH proposes X' = X with position i set to b, from the cached conditional
q(. | X without i). Once a chain is near a mode most proposals are either X itself (free: no rows) or
rejected, and the chain then stays at X, so the next visit of position i draws from the very same
conditional: it often proposes the same b again. The energy of that X' was computed the first time
(``T_e - 1`` masked rows); the memo keeps it, so a repeated proposal meets the MH test without a model
call. It is exact: E(X') is a function of X', and the memo hands back the value computed for this X'
(the same numbers, not an approximation; with a model whose rows do not depend on the rest of their
batch, the chains equal those without the memo bit for bit, tests/test_proposal_memo.py).

Per chain the memo holds up to ``slots`` entries ``(key = i * V + b, raw terms [T], local terms [T])``
of proposals rejected from the current state, first in first out. A chain that accepts a move forgets
them all (they were proposals from a state it has left). Only terms are kept, not the model's output
rows (which would cost ``T x D`` per entry): a repeated proposal that is *accepted* still needs its rows
for the state's cache, and forwards them then (:func:`mhfast.sampler.moves.single_site_mh`); those are
rare, since a repeat is a proposal the test rejected before.

How much it saves depends on how long chains stay put: from a real antibody (AntiBERTy, T=32) 38% of
the proposals that change the state were repeats with 8 slots; from random residues at T=16 over 33
epochs, 9.6%; during a burn-in from random starts almost none (bench/RESULTS.md).

It is on by default where it can act (option ``memo="auto"``: 8 slots for single-site MH with capture none and no
extra energy terms; ``memo=0`` turns it off). Its lookup and its bookkeeping are one compiled op each
(``mh_memo_lookup`` before the step's host sync, ``mh_memo_update_`` after the MH test; CPU and CUDA kernels, pure
PyTorch twins in :mod:`mhfast.reference`): ~0.01-0.02 ms per step on a 2-core AMD EPYC with a free model
(bench/ab_memo_floor.py). A first version made of ~30 torch ops cost ~0.18 ms per step, which is why it was opt-in
before the two ops existed.

Example:
    >>> memo = ProposalMemo(num_chains=2, slots=2, length=3, vocab_size=5, device="cpu")
    >>> ch, pos, prop, changed = torch.tensor([0, 1]), torch.tensor([1, 2]), torch.tensor([4, 3]), torch.ones(2).bool()
    >>> memo.lookup(ch, pos, prop, changed)[0].tolist()    # misses [True, True], then hits [False, False]
    [True, True, False, False]
    >>> terms = torch.ones(2, 3)
    >>> memo.remember(ch, pos, prop, terms, 2 * terms, accepted=torch.tensor([False, True]), num_misses=2)
    >>> order, slot = memo.lookup(ch, pos, prop, changed)
    >>> order.tolist(), memo.terms(ch[:1], slot[:1])[1].tolist()    # chain 1 accepted: it forgot
    ([False, True, True, False], [[2.0, 2.0, 2.0]])
"""
from __future__ import annotations

import torch

from .backend import Backend, get_backend


class ProposalMemo:
    """Each chain's rejected proposals from its current state, with their energy terms (see the module doc).

    ``lookup`` before the model call, ``remember`` after the MH test (one op each: ``mh_memo_lookup``,
    ``mh_memo_update_`` of ``backend``, the compiled ops by default); ``hits`` counts the proposals answered
    from the memo (the caller adds them: it knows their number on the host).
    """

    def __init__(self, num_chains: int, slots: int, length: int, vocab_size: int, device: torch.device | str,
                 backend: Backend | None = None):
        if slots < 1:
            raise ValueError(f"ProposalMemo: slots must be >= 1, got {slots}")
        self.slots, self.vocab_size = slots, vocab_size
        self.backend = backend if backend is not None else get_backend("compiled")
        self.keys = torch.full((num_chains, slots), -1, dtype=torch.long, device=device)  # -1: empty
        self.raw = torch.zeros(num_chains, slots, length, device=device)
        self.local = torch.zeros(num_chains, slots, length, device=device)
        self.next = torch.zeros(num_chains, dtype=torch.long, device=device)  # the slot the next entry takes
        self.hits = 0

    def lookup(self, chains: torch.Tensor, pos: torch.Tensor, proposed: torch.Tensor, changed: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Whether chain ``chains[j]`` rejected ``proposed[j]`` at ``pos[j]`` from its current state, and in which
        slot: ``(order Bool[2n], slot Long[n])``, ``order`` being ``changed & ~hit`` then ``changed & hit`` (see
        :func:`mhfast.reference.mh_memo_lookup`; ``slot`` is meaningless where there is no hit)."""
        return self.backend.mh_memo_lookup(self.keys, chains, pos, proposed, changed, self.vocab_size)

    def terms(self, chains: torch.Tensor, slot: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The remembered ``(raw f32[n, T], local f32[n, T])`` terms of the entries ``(chains[j], slot[j])``."""
        return self.raw[chains, slot], self.local[chains, slot]

    def remember(self, chains: torch.Tensor, pos: torch.Tensor, proposed: torch.Tensor, raw_new: torch.Tensor,
                 local_new: torch.Tensor, accepted: torch.Tensor, num_misses: int) -> None:
        """After the MH test of the distinct ``chains`` (the memo's misses first, ``num_misses`` of them): accepted
        chains forget every entry (their state changed); rejected misses are stored (overwriting the oldest entry
        once all slots are full). In place, no host sync."""
        self.backend.mh_memo_update_(self.keys, self.raw, self.local, self.next, chains, pos, proposed, raw_new,
                                     local_new, accepted, num_misses, self.vocab_size)
