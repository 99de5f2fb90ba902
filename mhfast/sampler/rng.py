"""Counter-based random numbers: every uniform is a pure function of its coordinates.

A chain's randomness is ``uniform(seed, input, chain, epoch, step, stream, lane)`` computed by
a vectorized splitmix64-style integer hash on int64 tensors. Nothing is consumed from a
stateful generator, so a chain draws the same numbers whatever else shares its batch, however
the work is split into sub-batches (``max_tokens_per_batch``), and on either backend.

Example:
    >>> import torch
    >>> from mhfast.sampler.rng import uniforms, PROPOSE
    >>> u = uniforms(0, torch.tensor([0, 0]), torch.tensor([0, 1]), 3, torch.tensor([2, 2]), PROPOSE)
    >>> bool(((u > 0) & (u < 1)).all())
    True
"""
from __future__ import annotations

import torch

from ..reference import _U64, _absorb, _i64, _mix_int, counter_uniforms

# Stream ids keep the numbers of different decisions independent.
PROPOSE = 1  #: inverse-CDF uniform of a proposal (lane = slot inside a block)
ACCEPT = 2  #: Metropolis-Hastings accept/reject uniform
ORDER = 3  #: random sort keys of the epoch's position order (lane = position)


def chain_keys(seed: int, inputs: torch.Tensor, chains: torch.Tensor) -> torch.Tensor:
    """The hash state after (seed, input, chain): Long, broadcast of ``inputs`` and ``chains``.

    A chain's key is fixed for the whole run, so the sampler computes it once and every draw
    only absorbs (epoch, step, stream, lane): :func:`uniforms_from_keys`.
    """
    h = _i64(_mix_int(((seed % (1 << 64)) + 0x9E3779B97F4A7C15) & _U64))
    h = torch.full((), h, dtype=torch.int64, device=inputs.device)
    return _absorb(_absorb(h, inputs), chains)


def uniforms(seed: int, inputs: torch.Tensor, chains: torch.Tensor, epoch: int, step: int, stream: int,
             lane: int | torch.Tensor = 0, op=counter_uniforms) -> torch.Tensor:
    """float32 uniforms in the open interval (0, 1), broadcast over the counter tensors.

    Uses the top 23 bits of the hash: ``(k + 0.5) / 2**23`` is exact in float32, so the
    result is never 0 (log(u) is finite) and never 1.
    """
    return uniforms_from_keys(chain_keys(seed, inputs, chains), epoch, step, stream, lane, op)


def uniforms_from_keys(keys: torch.Tensor, epoch: int, step: int, stream: int, lane: int | torch.Tensor = 0,
                       op=counter_uniforms) -> torch.Tensor:
    """:func:`uniforms` from precomputed :func:`chain_keys` (same numbers, one op call).

    ``op`` is the backend's ``counter_uniforms`` (compiled: one kernel; reference: the PyTorch
    twin); a tensor ``lane`` is broadcast against ``keys``.

    Example:
        >>> i, c = torch.tensor([0, 1]), torch.tensor([2, 2])
        >>> torch.equal(uniforms_from_keys(chain_keys(7, i, c), 3, 4, ACCEPT), uniforms(7, i, c, 3, 4, ACCEPT))
        True
    """
    if isinstance(lane, torch.Tensor):
        keys, lane = torch.broadcast_tensors(keys, lane.to(torch.int64))
        return op(keys.contiguous(), epoch, step, stream, lane.contiguous())
    if lane == 0:
        return op(keys, epoch, step, stream, None)
    return op(keys, epoch, step, stream, torch.full_like(keys, int(lane)))


def seed_from_generator(generator: torch.Generator) -> int:
    """Draw one int64 seed from a torch.Generator (the ``generator=`` argument of sample)."""
    return int(torch.randint(-(2**63), 2**63 - 1, (), generator=generator, dtype=torch.int64))
