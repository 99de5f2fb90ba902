"""Counter-based random numbers: every uniform is a pure function of its coordinates.

A chain's randomness is ``uniform(seed, input, chain, epoch, step, stream, lane)`` computed by
a vectorized splitmix64-style integer hash on int64 tensors. Nothing is consumed from a
stateful generator, so a chain draws the same numbers whatever else shares its batch, however
the work is split into sub-batches (``max_tokens_per_batch``), and on either backend.

Example:
    >>> import torch
    >>> from mhfast.runtime.rng import uniforms, PROPOSE
    >>> u = uniforms(0, torch.tensor([0, 0]), torch.tensor([0, 1]), epoch=3, step=2, stream=PROPOSE)
    >>> bool(((u > 0) & (u < 1)).all())
    True
"""
from __future__ import annotations

import torch

from ..counter_hash import GOLDEN, U64, absorb, golden_times, i64, mix_int, shr
from ..reference import counter_uniforms

# Stream ids keep the numbers of different decisions independent.
PROPOSE = 1  #: inverse-CDF uniform of a proposal (lane = slot inside a block)
ACCEPT = 2  #: Metropolis-Hastings accept/reject uniform
ORDER = 3  #: random sort keys of the epoch's position order (lane = position)
PROJECT = 4  #: the traces' random projections (key: projection index; lane = position * V + token)
START = 5  #: dispersed starts (option ``start``): a chain's random or sampled token (lane = position)
DELAYED_FIRST = 6  #: delayed acceptance (option ``delayed``): the first (surrogate) stage's uniform
DELAYED_SECOND = 7  #: delayed acceptance: the second (correcting) stage's uniform
SWAP = 8  #: parallel tempering: the swap test of a pair of replicas (key: the colder replica's; step 0)
DELAYED_MIDDLE = 9  #: delayed acceptance, option ``cascade:K``: the middle (window) stage's uniform


def chain_keys(seed: int, inputs: torch.Tensor, chains: torch.Tensor) -> torch.Tensor:
    """The hash state after (seed, input, chain): Long, broadcast of ``inputs`` and ``chains``.

    A chain's key is fixed for the whole run, so the sampler computes it once and every draw
    only absorbs (epoch, step, stream, lane): :func:`uniforms_from_keys`.
    """
    # int(): a numpy seed (np.int64(1)) took numpy's modulo and overflowed converting 2**64 to a C long
    h = i64(mix_int(((int(seed) % (1 << 64)) + 0x9E3779B97F4A7C15) & U64))
    h = torch.full((), h, dtype=torch.int64, device=inputs.device)
    return absorb(absorb(h, inputs), chains)


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
    """Draw one int64 seed from a torch.Generator (the ``generator=`` argument of sample), on the generator's own
    device: a CUDA generator drawing on the CPU is torch's "Expected a 'cpu' device type for generator".

    >>> seed_from_generator(torch.Generator().manual_seed(0)) == seed_from_generator(torch.Generator().manual_seed(0))
    True
    """
    return int(torch.randint(-(2**63), 2**63 - 1, (), generator=generator, dtype=torch.int64,
                             device=generator.device))


# The inverses of splitmix64's two multipliers modulo 2^64 (both odd), for :func:`_unmix`.
_M1_INV = i64(pow(0xBF58476D1CE4E5B9, -1, 1 << 64))
_M2_INV = i64(pow(0x94D049BB133111EB, -1, 1 << 64))


def _unxorshift(y: torch.Tensor, k: int) -> torch.Tensor:
    """The x with ``x ^ (x >>> k) == y`` (logical shift): y ^ (y >>> k) ^ (y >>> 2k) ^ ..."""
    x, shifted = y, y
    for _ in range(1, 64 // k + 1):
        shifted = shr(shifted, k)
        x = x ^ shifted
    return x


def _unmix(x: torch.Tensor) -> torch.Tensor:
    """The inverse of the hash's finalizer (:func:`mhfast.counter_hash.mix`): ``_unmix(_mix(x)) == x``."""
    x = _unxorshift(x, 31) * _M2_INV
    x = _unxorshift(x, 27) * _M1_INV
    return _unxorshift(x, 30)


def counters_into_keys(keys: torch.Tensor, epoch: int | torch.Tensor, step: int | torch.Tensor) -> torch.Tensor:
    """Keys that draw, with epoch = step = 0, the numbers ``keys`` draw at (``epoch``, ``step``):
    ``counter_uniforms(counters_into_keys(k, e, s), 0, 0, stream, lane) == counter_uniforms(k, e, s, stream, lane)``
    bit for bit, for every stream and lane (and so for every op that takes keys, epoch and step).

    Why: the ops take epoch and step as integers, which a captured CUDA graph would freeze; with the counters
    folded into a device buffer of keys (``epoch``/``step`` may be 0-d device tensors), one graph captured at
    epoch = step = 0 replays any step, drawing the same numbers, so the chains stay the same. How: a draw
    absorbs ``h -> mix(h + (c + 1) * G)`` per counter (csrc/counter_hash.h) and ``mix`` is a bijection, so
    ``k' = unmix(mix(k + (epoch + 1) * G) + step * G) - G`` gives ``absorb(absorb(k', 0), 0) ==
    absorb(absorb(k, epoch), step)``.

    Example:
        >>> from mhfast.reference import counter_uniforms
        >>> keys = chain_keys(3, torch.tensor([0, 1]), torch.tensor([2, 2]))
        >>> torch.equal(counter_uniforms(counters_into_keys(keys, 5, 7), 0, 0, ACCEPT),
        ...             counter_uniforms(keys, 5, 7, ACCEPT))
        True
    """
    return _unmix(absorb(keys, epoch) + golden_times(step)) - GOLDEN
