"""Per position tallies of every chain: proposals, accepted proposals, and how often the token changed.

A chain whose energy trace looks fine can still be stuck at a few positions (an antibody's framework residue
that every proposal there is rejected at); the chain-level counts of :class:`~mhfast.sampler.state.ChainCounts`
average that away. :class:`SiteCounts` keeps the same three counts per (chain, position), filed the same way: a
move hands over references to index tensors it already has (chains, positions, the MH test's outcome), with no
op and no host sync, and they are folded into the totals in a few batched ``index_add_`` calls when the driver
asks for a snapshot (once per epoch) or when too many are pending.

Definitions (the paper's section 6 convention, as the chain-level counts): every position of a proposal counts
one proposal (a block of k positions: one at each); a proposal is accepted unless an MH test rejected it (a
proposal equal to the state is accepted without a test); a position *changed* when an accepted proposal put a
different token there (in a block, only the positions whose proposed token differs).

Example:
    >>> c = SiteCounts(num_chains=2, length=3, device="cpu")
    >>> c.proposed(torch.tensor([0, 1]), torch.tensor([2, 0]))
    >>> c.tested(torch.tensor([1]), torch.tensor([0]), accepted=torch.tensor([False]))
    >>> c.snapshot()[:, 1].tolist()    # chain 1: (proposals, accepted, changed) at positions 0, 1, 2
    [[1, 0, 0], [0, 0, 0], [0, 0, 0]]
"""
from __future__ import annotations

import torch


class SiteCounts:
    """Cumulative (proposals, accepted, changed) per chain and position, Long[3, M, T] (see the module doc)."""

    #: pending entries above which they are reduced at once (bounded memory, as ChainCounts)
    MAX_PENDING = 1 << 20

    def __init__(self, num_chains: int, length: int, device: torch.device | str):
        self.num_chains, self.length = int(num_chains), int(length)
        self.device = torch.device(device)
        self._totals = torch.zeros(3, num_chains * length, dtype=torch.long)
        # (chains Long[n], positions Long[n] or Long[n, K] with -1 for an unused slot)
        self._proposed: list[tuple[torch.Tensor, torch.Tensor]] = []
        # (chains, positions, accepted Bool[n] or None (taken), tested Bool[n] or None (all), differs Bool[n(, K)] or
        # None): decided at reduce time, so that filing stays one list append per step (no op in the step)
        self._decided: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None,
                                  torch.Tensor | None]] = []
        self._pending = 0

    def proposed(self, chains: torch.Tensor, positions: torch.Tensor) -> None:
        """One proposal at each ``positions[j]`` (Long[n], or Long[n, K] for blocks, -1 unused) of ``chains[j]``."""
        self._file(self._proposed, (chains, positions), chains.shape[0])

    def tested(self, chains: torch.Tensor, positions: torch.Tensor, accepted: torch.Tensor,
               where: torch.Tensor | None = None, proposed: torch.Tensor | None = None,
               current: torch.Tensor | None = None) -> None:
        """MH tests of proposals X' != X: a rejection counts at every position of the proposal, an acceptance
        changes the positions whose proposed token differs from the state's (``proposed`` Long[n, K] and the
        state's tokens ``current`` Long[M, T]; None: a single-site proposal, which differs by construction).
        ``where`` (Bool[n]; None: all) marks the chains that really proposed X' != X (the static step tests
        every chain)."""
        # a block's differences are taken now: ``current`` is the state before the step (later ones replace it)
        differs = None if proposed is None else self._differs(chains, positions, proposed, current)
        self._file(self._decided, (chains, positions, accepted, where, differs), chains.shape[0])

    def taken(self, chains: torch.Tensor, positions: torch.Tensor, changed: torch.Tensor | None = None,
              proposed: torch.Tensor | None = None, current: torch.Tensor | None = None) -> None:
        """Proposals accepted without a test (Gibbs moves): ``changed`` (Bool[n]; None: all) or, for blocks, the
        positions whose ``proposed`` token differs from ``current``'s."""
        differs = changed if proposed is None else self._differs(chains, positions, proposed, current)
        self._file(self._decided, (chains, positions, None, None, differs), chains.shape[0])

    @staticmethod
    def _differs(chains: torch.Tensor, positions: torch.Tensor, proposed: torch.Tensor, current: torch.Tensor
                 ) -> torch.Tensor:
        held = current.index_select(0, chains).gather(1, positions.clamp(min=0))
        return (proposed != held) & (positions >= 0)

    def _file(self, pending: list, entry: tuple, size: int) -> None:
        pending.append(entry)
        self._pending += size
        if self._pending > self.MAX_PENDING:
            self._reduce()

    def _flat(self, chains: torch.Tensor, positions: torch.Tensor, weight: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """(flat index ``chain * T + position``, weight) of every slot, unused slots (-1) weighted 0 (no boolean
        indexing: no host sync); a per-chain weight spreads over the chain's slots."""
        if positions.dim() == 1:
            positions = positions[:, None]
        if weight.dim() == 1:
            weight = weight[:, None]
        weight = weight.expand(positions.shape).long() * (positions >= 0)
        index = chains[:, None] * self.length + positions.clamp(min=0)
        return index.reshape(-1), weight.reshape(-1)

    def _reduce(self) -> None:
        """Fold the pending entries into the totals: single-site entries concatenated (a few ops for all of them),
        block entries (several positions, their own widths) one by one; one host copy."""
        if not self._pending:
            return
        delta = torch.zeros(3, self.num_chains * self.length, dtype=torch.long, device=self.device)
        for chains, positions in self._batched(self._proposed, 2):
            index, weight = self._flat(chains, positions, torch.ones_like(chains))
            delta[0].index_add_(0, index, weight)
            delta[1].index_add_(0, index, weight)  # accepted unless a test rejected it (below)
        for entry in self._batched(self._decided, 5):
            self._decide(delta, *entry)
        self._totals += delta.cpu()
        self._proposed, self._decided, self._pending = [], [], 0

    @staticmethod
    def _batched(entries: list[tuple], width: int) -> list[tuple]:
        """The entries with one position each and the same fields given, concatenated into one entry per such
        group; entries with several positions (blocks) as they are."""
        groups: dict[tuple, list[tuple]] = {}
        out = []
        for e in entries:
            if e[1].dim() == 2:
                out.append(e)
            else:
                groups.setdefault(tuple(x is None for x in e), []).append(e)
        for es in groups.values():
            out.append(tuple(None if es[0][i] is None else torch.cat([e[i] for e in es]) for i in range(width)))
        return out

    def _decide(self, delta: torch.Tensor, chains: torch.Tensor, positions: torch.Tensor,
                accepted: torch.Tensor | None, tested: torch.Tensor | None, differs: torch.Tensor | None) -> None:
        """One (possibly concatenated) entry of decided proposals into ``delta``'s accepted and changed rows."""
        changed = torch.ones_like(chains, dtype=torch.bool)  # taken (Gibbs): accepted without a test
        if accepted is not None:  # an MH test: a rejection counts at every position of its proposal
            changed = accepted if tested is None else accepted & tested
            index, weight = self._flat(chains, positions, ~accepted if tested is None else ~accepted & tested)
            delta[1].index_add_(0, index, -weight)
        if differs is not None:  # a block's positions that got another token (a Gibbs move's changed)
            changed = (changed[:, None] if differs.dim() == 2 else changed) & differs
        index, weight = self._flat(chains, positions, changed)
        delta[2].index_add_(0, index, weight)

    def snapshot(self) -> torch.Tensor:
        """CPU Long[3, M, T]: each chain's (proposals, accepted, changed) per position so far."""
        self._reduce()
        return self._totals.view(3, self.num_chains, self.length).clone()

    def select(self, keep: torch.Tensor) -> "SiteCounts":
        """The tallies of the chains ``keep`` (Long[M'], CPU or device) only, as a new object."""
        out = SiteCounts(keep.numel(), self.length, self.device)
        out._totals = self.snapshot()[:, keep.cpu()].reshape(3, -1).clone()
        return out
