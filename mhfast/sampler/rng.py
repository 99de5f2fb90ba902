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

# Stream ids keep the numbers of different decisions independent.
PROPOSE = 1  #: inverse-CDF uniform of a proposal (lane = slot inside a block)
ACCEPT = 2  #: Metropolis-Hastings accept/reject uniform
ORDER = 3  #: random sort keys of the epoch's position order (lane = position)


def _i64(x: int) -> int:
    """An unsigned 64-bit constant as the signed int64 with the same bits."""
    return x - (1 << 64) if x >= (1 << 63) else x


_GOLDEN = _i64(0x9E3779B97F4A7C15)
_M1 = _i64(0xBF58476D1CE4E5B9)
_M2 = _i64(0x94D049BB133111EB)


def _shr(x: torch.Tensor, k: int) -> torch.Tensor:
    """Logical right shift on int64 (torch's >> is arithmetic): clear the sign-extended bits."""
    return (x >> k) & ((1 << (64 - k)) - 1)


def _mix(x: torch.Tensor) -> torch.Tensor:
    """splitmix64's finalizer; int64 multiplication wraps modulo 2**64 like uint64."""
    x = (x ^ _shr(x, 30)) * _M1
    x = (x ^ _shr(x, 27)) * _M2
    return x ^ _shr(x, 31)


def hash_counters(seed: int, *counters: torch.Tensor | int) -> torch.Tensor:
    """Chain the counters through splitmix64: h = mix(h + GOLDEN * (c + 1)) for each counter."""
    tensors = [c for c in counters if isinstance(c, torch.Tensor)]
    device = tensors[0].device if tensors else None
    h = torch.full((), _i64(seed % (1 << 64)), dtype=torch.int64, device=device)
    h = _mix(h + _GOLDEN)
    for c in counters:
        c = torch.as_tensor(c, dtype=torch.int64, device=device)
        h = _mix(h + (c + 1) * _GOLDEN)
    return h


def uniforms(seed: int, inputs: torch.Tensor, chains: torch.Tensor, epoch: int | torch.Tensor,
             step: int | torch.Tensor, stream: int, lane: int | torch.Tensor = 0) -> torch.Tensor:
    """float32 uniforms in the open interval (0, 1), broadcast over the counter tensors.

    Uses the top 23 bits of the hash: ``(k + 0.5) / 2**23`` is exact in float32, so the
    result is never 0 (log(u) is finite) and never 1.
    """
    h = hash_counters(seed, inputs, chains, epoch, step, stream, lane)
    k = _shr(h, 64 - 23)
    return ((k.double() + 0.5) * (1.0 / (1 << 23))).float()


def seed_from_generator(generator: torch.Generator) -> int:
    """Draw one int64 seed from a torch.Generator (the ``generator=`` argument of sample)."""
    return int(torch.randint(-(2**63), 2**63 - 1, (), generator=generator, dtype=torch.int64))
