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


_U64 = (1 << 64) - 1


def _mix_int(x: int) -> int:
    """:func:`_mix` on a Python int (unsigned 64-bit arithmetic)."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _U64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _U64
    return x ^ (x >> 31)


def _absorb(h: torch.Tensor, c: torch.Tensor | int) -> torch.Tensor:
    """One counter into the hash state: mix(h + GOLDEN * (c + 1)), a Python int counter folded on the host."""
    if isinstance(c, torch.Tensor):
        return _mix(h + (c.to(torch.int64) + 1) * _GOLDEN)
    return _mix(h + _i64(((int(c) + 1) * 0x9E3779B97F4A7C15) & _U64))


def chain_keys(seed: int, inputs: torch.Tensor, chains: torch.Tensor) -> torch.Tensor:
    """The hash state after (seed, input, chain): Long, broadcast of ``inputs`` and ``chains``.

    A chain's key is fixed for the whole run, so the sampler computes it once and every draw
    only absorbs (epoch, step, stream, lane): :func:`uniforms_from_keys`.
    """
    h = _i64(_mix_int(((seed % (1 << 64)) + 0x9E3779B97F4A7C15) & _U64))
    h = torch.full((), h, dtype=torch.int64, device=inputs.device)
    return _absorb(_absorb(h, inputs), chains)


def _to_uniform(h: torch.Tensor) -> torch.Tensor:
    # top 23 bits: (k + 0.5) / 2**23 is exact in float32, never 0 (log(u) is finite) and never 1
    k = _shr(h, 64 - 23)
    return ((k.double() + 0.5) * (1.0 / (1 << 23))).float()


def uniforms(seed: int, inputs: torch.Tensor, chains: torch.Tensor, epoch: int | torch.Tensor,
             step: int | torch.Tensor, stream: int, lane: int | torch.Tensor = 0) -> torch.Tensor:
    """float32 uniforms in the open interval (0, 1), broadcast over the counter tensors.

    Uses the top 23 bits of the hash: ``(k + 0.5) / 2**23`` is exact in float32, so the
    result is never 0 (log(u) is finite) and never 1.
    """
    return uniforms_from_keys(chain_keys(seed, inputs, chains), epoch, step, stream, lane)


def uniforms_from_keys(keys: torch.Tensor, epoch: int | torch.Tensor, step: int | torch.Tensor, stream: int,
                       lane: int | torch.Tensor = 0) -> torch.Tensor:
    """:func:`uniforms` from precomputed :func:`chain_keys` (same numbers, fewer operations).

    Example:
        >>> i, c = torch.tensor([0, 1]), torch.tensor([2, 2])
        >>> torch.equal(uniforms_from_keys(chain_keys(7, i, c), 3, 4, ACCEPT), uniforms(7, i, c, 3, 4, ACCEPT))
        True
    """
    h = keys
    for counter in (epoch, step, stream, lane):
        h = _absorb(h, counter)
    return _to_uniform(h)


def seed_from_generator(generator: torch.Generator) -> int:
    """Draw one int64 seed from a torch.Generator (the ``generator=`` argument of sample)."""
    return int(torch.randint(-(2**63), 2**63 - 1, (), generator=generator, dtype=torch.int64))
