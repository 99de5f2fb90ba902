"""The counter hash every random number of mhfast comes from (the Python side of csrc/counter_hash.h).

A hash state is an int64 (the bits of a uint64): a chain's key absorbs each counter ``c`` as
``h = mix(h + GOLDEN * (c + 1))`` (splitmix64's finalizer, wrapping uint64 arithmetic on int64 bits), and a
uniform is ``(k + 0.5) / 2**23`` for the state's top 23 bits ``k``. The pure-PyTorch ops
(:func:`mhfast.reference.counter_uniforms`) and the sampler's keys (:mod:`mhfast.runtime.rng`) both build on these
functions; the compiled ops compute the same numbers in C++.

Example:
    >>> import torch
    >>> h = absorb(torch.tensor([0, 1]), 3)
    >>> u = to_uniform(h)
    >>> bool(((u > 0) & (u < 1)).all()), mix_int(0) == 0
    (True, True)
"""
from __future__ import annotations

import torch


def i64(x: int) -> int:
    """An unsigned 64-bit constant as the signed int64 with the same bits."""
    return x - (1 << 64) if x >= (1 << 63) else x


GOLDEN = i64(0x9E3779B97F4A7C15)
M1 = i64(0xBF58476D1CE4E5B9)
M2 = i64(0x94D049BB133111EB)


def shr(x: torch.Tensor, k: int) -> torch.Tensor:
    """Logical right shift on int64 (torch's >> is arithmetic): clear the sign-extended bits."""
    return (x >> k) & ((1 << (64 - k)) - 1)


def mix(x: torch.Tensor) -> torch.Tensor:
    """splitmix64's finalizer; int64 multiplication wraps modulo 2**64 like uint64."""
    x = (x ^ shr(x, 30)) * M1
    x = (x ^ shr(x, 27)) * M2
    return x ^ shr(x, 31)


U64 = (1 << 64) - 1


def mix_int(x: int) -> int:
    """:func:`mix` on a Python int (unsigned 64-bit arithmetic)."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & U64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & U64
    return x ^ (x >> 31)


def golden_times(c: torch.Tensor | int, plus: int = 0) -> torch.Tensor | int:
    """``(c + plus) * GOLDEN`` modulo 2**64 as int64: a tensor (widened to int64 first) on its device, a Python
    int folded on the host."""
    if isinstance(c, torch.Tensor):
        return (c.to(torch.int64) + plus) * GOLDEN
    return i64(((int(c) + plus) * 0x9E3779B97F4A7C15) & U64)


def absorb(h: torch.Tensor, c: torch.Tensor | int) -> torch.Tensor:
    """One counter into the hash state: mix(h + GOLDEN * (c + 1)), a Python int counter folded on the host."""
    return mix(h + golden_times(c, 1))


def to_uniform(h: torch.Tensor) -> torch.Tensor:
    """The float32 uniform in (0, 1) of a hash state."""
    # top 23 bits: (k + 0.5) / 2**23 is exact in float32, never 0 (log(u) is finite) and never 1
    k = shr(h, 64 - 23)
    return ((k.double() + 0.5) * (1.0 / (1 << 23))).float()
