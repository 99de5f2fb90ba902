"""Per-epoch schedules: position orders, block sizes (appendix D), target temperature (section 8) and
forced acceptance (appendix F).

:func:`epoch_schedule` turns the options into one :class:`Epoch` record per epoch; kernels read the
record instead of branching on options (annealing and forced acceptance are schedules).

Every schedule is a function of the chain's own coordinates only (its input's free-position
count, its RNG counters), so a chain behaves the same alone or inside any batch.

Example:
    >>> import torch
    >>> block_sizes(None, 0, 33, torch.tensor([20, 3, 1])).tolist()   # default: max(2, n//4) -> 1
    [5, 2, 1]
    >>> block_sizes(None, 32, 33, torch.tensor([20, 3])).tolist()
    [1, 1]
    >>> target_temperature(1.0, 0.02, 0.05, 10)
    0.8
    >>> target_temperature(0.02, 0.0, 0.05, 10)    # a fixed temperature is used as given
    0.02
    >>> from mhfast.sampler.options import config_from_kwargs
    >>> cfg = config_from_kwargs(dict(epochs=3, burn_in=1, target_temperature=0.5, force_accept_epochs=1))
    >>> [(e.beta, e.post_burn_in) for e in epoch_schedule(cfg)]
    [(None, False), (2.0, True), (2.0, True)]
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Callable, Sequence, Union

import torch

from ..runtime import rng
from .scalars import MAX_SIZE, as_int

BlockSchedule = Union[None, int, Sequence[int], Callable[[int], int]]


def epoch_order(rng_keys: torch.Tensor, free: torch.Tensor, epoch: int, order: str,
                uniforms_op: Callable = rng.counter_uniforms) -> torch.Tensor:
    """Positions of each chain in visiting order, free positions first: Long[M, T].

    ``"random"`` (paper, section 4): a fresh random permutation per chain and epoch, from sort keys
    ``uniform(seed, input, chain, epoch, 0, ORDER, lane=position)``; keys are tied to absolute positions, so
    padding width does not change the order. Nearly uniform: the keys have 23 random bits, and two equal keys
    (about 1.5% of chain-epochs at T = 512) keep the lower position first. Either way the order never depends on
    the state, so each sweep still leaves the target invariant.
    ``"left-to-right"``: increasing position.
    """
    M, T = free.shape
    pos = torch.arange(T, device=free.device).expand(M, T)
    if order == "random":
        keys = rng.uniforms_from_keys(rng_keys[:, None], epoch, 0, rng.ORDER, pos, uniforms_op)
    else:
        keys = pos.float()
    # Fixed positions sort after every free one (keys of free positions are < T).
    keys = torch.where(free, keys, keys.new_full((), float(T + 1)))
    return torch.sort(keys, dim=1, stable=True).indices


def block_sizes(schedule: BlockSchedule, epoch: int, epochs: int, num_free: torch.Tensor) -> torch.Tensor:
    """Block size of each chain in ``epoch``: Long[M], clamped to [1, num_free] (:func:`clamp_to_free`).

    Example:
        >>> block_sizes(4, 0, 3, torch.tensor([10, 3])).tolist()   # 3 free positions: one block of 3
        [4, 3]
    """
    return clamp_to_free(requested_block_sizes(schedule, epoch, epochs, num_free), num_free)


def clamp_to_free(sizes: torch.Tensor, num_free: torch.Tensor) -> torch.Tensor:
    """Block sizes clamped to [1, num_free]: a chain with fewer free positions than its block proposes them all
    at once (a batch mixes lengths, so one size cannot fit every input; :func:`oversized_block` finds the cases)."""
    return torch.minimum(sizes, torch.clamp(num_free, min=1))


def oversized_block(sizes: Sequence[torch.Tensor], num_free: torch.Tensor) -> tuple[int, int] | None:
    """``(size, free positions)`` of the first chain whose requested block (per epoch, :func:`requested_block_sizes`)
    is larger than its free positions (>= 1), or None when every block fits.

    Example:
        >>> oversized_block([torch.tensor([4, 4]), torch.tensor([2, 2])], torch.tensor([10, 3]))
        (4, 3)
    """
    for requested in sizes:
        over = (requested > num_free) & (num_free >= 1)
        if bool(over.any()):
            i = int(over.nonzero()[0, 0])
            return int(requested[i]), int(num_free[i])
    return None


def requested_block_sizes(schedule: BlockSchedule, epoch: int, epochs: int, num_free: torch.Tensor) -> torch.Tensor:
    """Block size of each chain in ``epoch`` as the schedule gives it (Long[M], before :func:`clamp_to_free`).

    Default (``None``, appendix D: large blocks first for fast mixing, then smaller ones,
    eventually 1): linear shrink from ``b0 = max(2, n // 4)`` at epoch 0 to 1 at the last epoch,
    rounded, where ``n`` is the chain's number of free positions (``b0 = 1`` when ``n = 1``), so
    every input with at least 2 free positions starts with blocks of 2 or more. An int is a
    constant size; a list/tuple gives one size per epoch; a callable maps the epoch index to a size.
    """
    if schedule is None:
        b0 = torch.minimum(torch.clamp(num_free // 4, min=2), torch.clamp(num_free, min=1))
        if epochs <= 1:
            sizes = b0
        else:
            span = epochs - 1
            # integer rounding of 1 + (b0 - 1) * (span - epoch) / span
            sizes = 1 + ((b0 - 1) * (span - epoch) + span // 2) // span
    else:
        if callable(schedule):
            b = schedule(epoch)
        elif isinstance(schedule, int):
            b = schedule
        else:
            b = schedule[epoch]
        n = as_int(b)  # numpy's ints too (a callable may index an array)
        if n is None or not 1 <= n <= MAX_SIZE:
            raise ValueError(f"mhfast.sample: block_schedule must give ints in [1, {MAX_SIZE}], got {b!r} at epoch "
                             f"{epoch}")
        sizes = torch.full_like(num_free, n)
    return sizes


class BlockSizeRuns:
    """The block sizes of every epoch of a run, held as runs of consecutive epochs with the same sizes: the
    requested sizes (:func:`requested_block_sizes`, Long[M] per run) and the same clamped to the free positions.

    Why runs and not one tensor per epoch: a run may ask for up to ``options.MAX_EPOCHS`` epochs, and the sizes
    change only a few times (the default schedule at most ``max(2, n // 4)`` times per chain, an int never), so a
    list per epoch would hold 2**31 tensors. The default schedule is non-increasing in the epoch for every chain,
    so the epochs of equal sizes are intervals, found by bisection (a few evaluations per run); a list is
    compressed as given. A callable is called once per epoch as the run reaches it (:meth:`at`), not for every
    epoch up to the cap at the start: a run with ``until_rhat`` and a large ``epochs`` cap calls it only for the
    epochs it runs, and its values are checked then.

    Example:
        >>> runs = BlockSizeRuns(None, 2 ** 31 - 1, torch.tensor([20, 3]))
        >>> runs.starts
        [0, 268435456, 805306368, 1073741824, 1342177279, 1879048191]
        >>> [r.tolist() for r in runs.sizes], runs.at(2 ** 31 - 2).tolist()
        ([[5, 2], [4, 2], [3, 2], [3, 1], [2, 1], [1, 1]], [1, 1])
    """

    def __init__(self, schedule: BlockSchedule, epochs: int, num_free: torch.Tensor) -> None:
        self.starts: list[int] = []
        self.requested: list[torch.Tensor] = []
        self.sizes: list[torch.Tensor] = []
        #: a callable schedule and the chains' free counts, kept to evaluate its epochs as they are reached
        self._callable: tuple[Callable[[int], int], int, torch.Tensor] | None = None
        self._evaluated = 0  #: epochs of the callable evaluated so far
        if callable(schedule):
            self._callable = (schedule, epochs, num_free)
            return
        if schedule is None or isinstance(schedule, int):
            e = 0
            while e < epochs:
                current = requested_block_sizes(schedule, e, epochs, num_free)
                lo, hi = e, epochs - 1  # the last epoch of these sizes: each chain's size never grows
                while lo < hi:
                    mid = (lo + hi + 1) // 2
                    if torch.equal(requested_block_sizes(schedule, mid, epochs, num_free), current):
                        lo = mid
                    else:
                        hi = mid - 1
                self._add(e, current, num_free)
                e = lo + 1
        else:
            for e in range(epochs):
                self._add(e, requested_block_sizes(schedule, e, epochs, num_free), num_free)

    def _add(self, epoch: int, requested: torch.Tensor, num_free: torch.Tensor) -> None:
        """``requested`` as the sizes from ``epoch`` on (a new run only where they differ from the last run's)."""
        if not self.requested or not torch.equal(requested, self.requested[-1]):
            self.starts.append(epoch)
            self.requested.append(requested)
            self.sizes.append(clamp_to_free(requested, num_free))

    def at(self, epoch: int) -> torch.Tensor:
        """The clamped block sizes of ``epoch`` (Long[M]); a callable schedule is evaluated up to ``epoch`` here."""
        if self._callable is not None:
            schedule, epochs, num_free = self._callable
            for e in range(self._evaluated, epoch + 1):
                self._add(e, requested_block_sizes(schedule, e, epochs, num_free), num_free)
            self._evaluated = max(self._evaluated, epoch + 1)
        return self.sizes[bisect.bisect_right(self.starts, epoch) - 1]

    def requested_at(self, epoch: int) -> torch.Tensor:
        """The requested (unclamped) block sizes of ``epoch`` (Long[M]), for the oversize warning."""
        self.at(epoch)
        return self.requested[bisect.bisect_right(self.starts, epoch) - 1]

    def select(self, keep: torch.Tensor) -> "BlockSizeRuns":
        """The same runs for the chains ``keep`` only (host indices)."""
        out = object.__new__(BlockSizeRuns)
        out.starts = list(self.starts)
        out.requested = [r.index_select(0, keep) for r in self.requested]
        out.sizes = [r.index_select(0, keep) for r in self.sizes]
        out._evaluated = self._evaluated
        out._callable = None
        if self._callable is not None:
            schedule, epochs, num_free = self._callable
            out._callable = (schedule, epochs, num_free.index_select(0, keep))
        return out


@dataclass
class BlockStep:
    """Who moves at one step of a block epoch, and with which entries of their position order.

    Built on the host from host copies of ``num_free`` and the block sizes, so a step needs no
    device->host sync to know its chains (and the plans of an epoch are reused while the sizes
    repeat). A chain whose block has a single position (block size 1, or the last, partial
    block of its epoch) comes first, among the ``num_single`` single-site chains: block MH with
    ``|I| = 1`` *is* single-site MH, so it moves from the single-site cache with no proposal
    forward. The other chains make block moves. Column ``c`` of a chain means the position
    ``order[chain, c]`` of the epoch order.
    """

    chains: torch.Tensor  #: Long[A] moving chains: the single-site ones, then the block ones
    chains_host: torch.Tensor  #: CPU copy of ``chains``
    num_single: int  #: how many of ``chains`` make single-site moves
    entry: torch.Tensor  #: Long[N] index into ``chains`` of each proposed position (ascending)
    entry_chain: torch.Tensor  #: Long[N] ``chains[entry]``
    entry_slot: torch.Tensor  #: Long[N] slot inside the block (lane of the proposal uniform)
    entry_col: torch.Tensor  #: Long[N] column of the position in the epoch order
    block_row_host: torch.Tensor  #: CPU Long[N - num_single] ``entry - num_single`` of the block entries
    width: int  #: K, the most positions in one block of this step (>= 1)


def block_step_plan(num_free: torch.Tensor, sizes: torch.Tensor, step: int, single_site: bool,
                    device: torch.device | None = None) -> BlockStep:
    """The :class:`BlockStep` of block ``step`` (successive chunks of each chain's order).

    ``num_free`` and ``sizes`` are CPU Long[M]; ``single_site=False`` sends every chain through
    the block path (block Gibbs, or block MH without a cache).

    Example:
        >>> p = block_step_plan(torch.tensor([5, 4, 2]), torch.tensor([2, 2, 2]), 2, True)
        >>> p.chains.tolist(), p.num_single, p.entry_col.tolist()   # chain 0: its 5th position alone
        ([0], 1, [4])
        >>> p = block_step_plan(torch.tensor([5, 4, 2]), torch.tensor([2, 2, 2]), 1, True)
        >>> p.chains.tolist(), p.entry.tolist(), p.entry_slot.tolist(), p.entry_col.tolist()
        ([0, 1], [0, 0, 1, 1], [0, 1, 0, 1], [2, 3, 2, 3])
    """
    count = torch.minimum((num_free - step * sizes).clamp(min=0), sizes)  # positions in this block
    is_single = (count == 1) if single_site else torch.zeros_like(count, dtype=torch.bool)
    chains = torch.cat([is_single.nonzero().squeeze(1), ((count >= 1) & ~is_single).nonzero().squeeze(1)])
    per_chain = count.index_select(0, chains)
    entry = torch.repeat_interleave(torch.arange(chains.numel()), per_chain)
    first = torch.cumsum(per_chain, 0) - per_chain
    slot = torch.arange(entry.numel()) - first.index_select(0, entry)
    entry_chain = chains.index_select(0, entry)
    col = step * sizes.index_select(0, entry_chain) + slot
    num_single = int(is_single.sum())
    parts = [chains, entry, entry_chain, slot, col]
    on_device = torch.cat(parts).to(device).split([t.numel() for t in parts])  # one host->device copy
    return BlockStep(on_device[0], chains, num_single, *on_device[1:], entry[num_single:] - num_single,
                     int(per_chain.max()) if per_chain.numel() else 1)


def uses_single_site(num_free: torch.Tensor, sizes: torch.Tensor) -> bool:
    """Whether some chain has a one-position block in an epoch with these sizes (CPU tensors)."""
    return bool(((num_free > 0) & ((sizes == 1) | (num_free % sizes == 1))).any())


def steps_per_epoch(num_free: torch.Tensor, sizes: torch.Tensor) -> int:
    """Steps of an epoch: the most any chain needs (chains with fewer free positions idle)."""
    if num_free.numel() == 0:
        return 0
    return int(((num_free + sizes - 1) // sizes).max())


def target_temperature(start: float, anneal: float, minimum: float, epoch: int) -> float:
    """Target temperature of an epoch (paper, section 8): ``start`` as given when ``anneal`` is 0;
    else the linear anneal ``max(minimum, start - anneal * epoch)`` (the floor is reached only
    through the explicit ``minimum``, i.e. ``min_target_temperature``)."""
    if anneal == 0:
        return start
    return max(minimum, start - anneal * epoch)


@dataclass(frozen=True)
class Epoch:
    """The schedule of one epoch, as the kernels and the driver read it."""

    index: int  #: epoch number, 0-based (an RNG counter)
    target_temperature: float  #: tau of the target exp(-E / tau) (section 8)
    beta: float | None  #: 1 / tau, or None: accept every proposal (forced-accept epochs, appendix F)
    post_burn_in: bool  #: best-state tracking and recording are on


class EpochSchedule(Sequence[Epoch]):
    """The :class:`Epoch` records of a run, each computed when it is read: a run may ask for up to
    ``options.MAX_EPOCHS`` epochs and stop long before (``until_rhat``, ``min_ess``, a ``progress`` that raises),
    so no list of them is built (2**31 records would take about 200 GB)."""

    def __init__(self, cfg) -> None:
        self.epochs, self.burn_in, self.force_accept = int(cfg.epochs), int(cfg.burn_in), int(cfg.force_accept_epochs)
        self.temperature = (float(cfg.target_temperature), float(cfg.anneal), float(cfg.min_target_temperature))

    def __len__(self) -> int:
        return self.epochs

    def __getitem__(self, e):  # an int (a slice gives a list)
        if isinstance(e, slice):
            return [self[i] for i in range(*e.indices(self.epochs))]
        e = int(e)
        e += self.epochs if e < 0 else 0
        if not 0 <= e < self.epochs:
            raise IndexError(f"epoch {e} of {self.epochs}")
        tau = target_temperature(*self.temperature, e)
        return Epoch(e, tau, None if e < self.force_accept else 1.0 / tau, e >= self.burn_in)


def epoch_schedule(cfg) -> EpochSchedule:
    """One :class:`Epoch` per epoch from the options (a :class:`~mhfast.sampler.options.SamplerConfig`), computed
    as the run reads it (:class:`EpochSchedule`)."""
    return EpochSchedule(cfg)


def active_chains(num_free: torch.Tensor, device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(device, CPU) indices of the chains in step k of a single-site epoch: those with a k-th free
    position (fixed for the run, so computed once from the CPU ``num_free``)."""
    out = []
    for k in range(int(num_free.max()) if num_free.numel() else 0):
        host = (num_free > k).nonzero().squeeze(1)
        out.append((host.to(device), host))
    return out
