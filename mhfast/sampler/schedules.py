"""Per-epoch schedules: position orders, block sizes (appendix D) and target temperature (section 8).

Every schedule is a function of the chain's own coordinates only (its input's free-position
count, its RNG counters), so a chain behaves the same alone or inside any batch.

Example:
    >>> import torch
    >>> block_sizes(None, 0, 33, torch.tensor([20, 3])).tolist()   # default: max(1, n//4) -> 1
    [5, 1]
    >>> block_sizes(None, 32, 33, torch.tensor([20, 3])).tolist()
    [1, 1]
    >>> target_temperature(1.0, 0.02, 0.05, 10)
    0.8
"""
from __future__ import annotations

from typing import Callable, Sequence, Union

import torch

from . import rng

BlockSchedule = Union[None, int, Sequence[int], Callable[[int], int]]


def epoch_order(seed: int, free: torch.Tensor, inputs: torch.Tensor, chains: torch.Tensor, epoch: int,
                order: str) -> torch.Tensor:
    """Positions of each chain in visiting order, free positions first: Long[M, T].

    ``"random"`` (paper, section 4): a fresh uniformly random permutation per chain and epoch,
    from sort keys ``uniform(seed, input, chain, epoch, 0, ORDER, lane=position)``; keys are
    tied to absolute positions, so padding width does not change the order.
    ``"left-to-right"``: increasing position.
    """
    M, T = free.shape
    pos = torch.arange(T, device=free.device).expand(M, T)
    if order == "random":
        keys = rng.uniforms(seed, inputs[:, None], chains[:, None], epoch, 0, rng.ORDER, pos)
    else:
        keys = pos.float()
    # Fixed positions sort after every free one (keys of free positions are < T).
    keys = torch.where(free, keys, keys.new_full((), float(T + 1)))
    return torch.sort(keys, dim=1, stable=True).indices


def block_sizes(schedule: BlockSchedule, epoch: int, epochs: int, num_free: torch.Tensor) -> torch.Tensor:
    """Block size of each chain in ``epoch``: Long[M], clamped to [1, num_free].

    Default (``None``, appendix D: large blocks first for fast mixing, then smaller ones):
    linear shrink from ``b0 = max(1, n // 4)`` at epoch 0 to 1 at the last epoch, rounded,
    where ``n`` is the chain's number of free positions. An int is a constant size; a
    list/tuple gives one size per epoch; a callable maps the epoch index to a size.
    """
    if schedule is None:
        b0 = torch.clamp(num_free // 4, min=1)
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
        if isinstance(b, bool) or not isinstance(b, int) or b < 1:
            raise ValueError(f"mhfast.sample: block_schedule must give ints >= 1, got {b!r} at epoch {epoch}")
        sizes = torch.full_like(num_free, b)
    return torch.minimum(sizes, torch.clamp(num_free, min=1))


def block_positions(order: torch.Tensor, num_free: torch.Tensor, sizes: torch.Tensor, step: int) -> torch.Tensor:
    """Positions of block ``step`` of each chain (successive chunks of its order): Long[M, K], -1 unused."""
    K = int(sizes.max()) if sizes.numel() else 1
    slot = torch.arange(K, device=order.device)
    idx = step * sizes[:, None] + slot  # index into the chain's order
    valid = (slot < sizes[:, None]) & (idx < num_free[:, None])
    pos = order.gather(1, idx.clamp(max=order.shape[1] - 1))
    return torch.where(valid, pos, torch.full_like(pos, -1))


def steps_per_epoch(num_free: torch.Tensor, sizes: torch.Tensor) -> int:
    """Steps of an epoch: the most any chain needs (chains with fewer free positions idle)."""
    if num_free.numel() == 0:
        return 0
    return int(((num_free + sizes - 1) // sizes).max())


def target_temperature(start: float, anneal: float, minimum: float, epoch: int) -> float:
    """Linearly annealed target temperature (paper, section 8): max(minimum, start - anneal * epoch)."""
    return max(minimum, start - anneal * epoch)
