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

It is off by default (option ``memo=0``): its lookup and bookkeeping are ~30 small torch ops per step, ~0.18 ms
on a 2-core AMD EPYC (bench/ab_memo_floor.py), more than the rest of a 5-chain step with a free model. It pays
where a row costs more than that and chains repeat proposals: a real model near a mode. (Fusing the lookup into
``mh_propose_site`` and the bookkeeping into ``mh_commit_site_`` would make it cheap enough to be the default.)

Example:
    >>> memo = ProposalMemo(num_chains=2, slots=2, length=3, vocab_size=5, device="cpu")
    >>> ch, pos, prop = torch.tensor([0, 1]), torch.tensor([1, 2]), torch.tensor([4, 3])
    >>> memo.lookup(ch, pos, prop)[0].tolist()
    [False, False]
    >>> terms = torch.ones(2, 3)
    >>> memo.remember(ch, pos, prop, terms, 2 * terms, accepted=torch.tensor([False, True]),
    ...               hit=torch.tensor([False, False]))
    >>> hit, slot = memo.lookup(ch, pos, prop)
    >>> hit.tolist(), memo.terms(ch[:1], slot[:1])[1].tolist()    # chain 1 accepted: it forgot
    ([True, False], [[2.0, 2.0, 2.0]])
"""
from __future__ import annotations

import torch


class ProposalMemo:
    """Each chain's rejected proposals from its current state, with their energy terms (see the module doc).

    ``lookup`` before the model call, ``remember`` after the MH test; ``hits`` counts the proposals
    answered from the memo (the caller adds them: it knows their number on the host).
    """

    def __init__(self, num_chains: int, slots: int, length: int, vocab_size: int, device: torch.device | str):
        if slots < 1:
            raise ValueError(f"ProposalMemo: slots must be >= 1, got {slots}")
        self.slots, self.vocab_size = slots, vocab_size
        self.keys = torch.full((num_chains, slots), -1, dtype=torch.long, device=device)  # -1: empty
        self.raw = torch.zeros(num_chains, slots, length, device=device)
        self.local = torch.zeros(num_chains, slots, length, device=device)
        self.next = torch.zeros(num_chains, dtype=torch.long, device=device)  # the slot the next entry takes
        self.hits = 0

    def _key(self, pos: torch.Tensor, proposed: torch.Tensor) -> torch.Tensor:
        return pos * self.vocab_size + proposed

    def lookup(self, chains: torch.Tensor, pos: torch.Tensor, proposed: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Whether chain ``chains[j]`` rejected ``proposed[j]`` at ``pos[j]`` from its current state, and in
        which slot: ``(hit Bool[n], slot Long[n])`` (slot is meaningless where hit is False)."""
        eq = self.keys.index_select(0, chains) == self._key(pos, proposed)[:, None]
        return eq.any(dim=1), eq.to(torch.uint8).argmax(dim=1)

    def terms(self, chains: torch.Tensor, slot: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The remembered ``(raw f32[n, T], local f32[n, T])`` terms of the entries ``(chains[j], slot[j])``."""
        return self.raw[chains, slot], self.local[chains, slot]

    def remember(self, chains: torch.Tensor, pos: torch.Tensor, proposed: torch.Tensor, raw_new: torch.Tensor,
                 local_new: torch.Tensor, accepted: torch.Tensor, hit: torch.Tensor) -> None:
        """After the MH test of the distinct ``chains``: accepted chains forget every entry (their state
        changed); rejected proposals that were not in the memo are stored (overwriting the oldest entry
        once all slots are full). No host sync: the writes are masked, not selected."""
        store = ~accepted & ~hit
        slot = torch.where(accepted, 0, self.next.index_select(0, chains))
        keys = torch.where(accepted[:, None], -1, self.keys.index_select(0, chains))
        old = keys.gather(1, slot[:, None]).squeeze(1)
        keys.scatter_(1, slot[:, None], torch.where(store, self._key(pos, proposed), old)[:, None])
        self.keys.index_copy_(0, chains, keys)
        write = store[:, None]
        self.raw[chains, slot] = torch.where(write, raw_new, self.raw[chains, slot])
        self.local[chains, slot] = torch.where(write, local_new, self.local[chains, slot])
        self.next.index_copy_(0, chains, torch.where(store, (slot + 1) % self.slots, slot))
