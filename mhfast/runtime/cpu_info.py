"""What this CPU is, read at run time: its feature flags and the size of one core's L2 cache.

The machines mhfast runs on differ (an Intel Xeon with AMX-BF16 and 2 MiB of L2 per core, an AMD EPYC with
AVX512-BF16, no AMX and 1 MiB, AVX2-only EPYCs), so nothing here is assumed: the flags come from
``/proc/cpuinfo``, the cache from sysfs (or glibc's ``sysconf``), each with a fallback when unreadable.
Used by :mod:`mhfast.runtime.precision` (is a bf16 forward native here?) and by
:func:`mhfast.runtime.runner.default_max_tokens` (how large a CPU sub-batch keeps its activations in cache).

Example:
    >>> l2_bytes() >= 64 * 1024
    True
    >>> isinstance(flags(), frozenset)
    True
"""
from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Iterable

#: L2 bytes assumed when neither sysfs nor sysconf says (the Intel Xeon the sub-batch rule was first measured on)
FALLBACK_L2 = 2 << 20
_SANE_L2 = (64 << 10, 64 << 20)  # anything outside is a misread, not a cache


@functools.lru_cache(maxsize=None)
def flags() -> frozenset[str]:
    """The CPU's feature flags (``avx512_bf16``, ``amx_bf16``, ...; on Arm ``bf16``, ``asimdhp``, ...) from
    /proc/cpuinfo; empty if unreadable."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return parse_flags(f)
    except (OSError, UnicodeDecodeError):
        return frozenset()


def parse_flags(lines: Iterable[str]) -> frozenset[str]:
    """The feature flags of the first processor listed in /proc/cpuinfo's ``lines``: its ``flags`` line (x86) or
    its ``Features`` line (aarch64, where an x86-only reading found none and took a Graviton's BF16 for missing).

    >>> sorted(parse_flags(["processor : 0", "flags : fpu avx2", "flags : other"]))
    ['avx2', 'fpu']
    >>> sorted(parse_flags(["processor : 0", "Features : fp asimd bf16"]))
    ['asimd', 'bf16', 'fp']
    """
    for line in lines:
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def parse_size(text: str) -> int | None:
    """Bytes of a sysfs cache size (``"1024K"``, ``"2M"``, ``"524288"``), None if it is not one.

    >>> parse_size("1024K"), parse_size("2M"), parse_size("n/a")
    (1048576, 2097152, None)
    """
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    digits = text[:-1] if scale > 1 else text
    return int(digits) * scale if digits.isdigit() else None


def read_l2(cache_dir: str | os.PathLike = "/sys/devices/system/cpu/cpu0/cache") -> int | None:
    """Bytes of the level-2 data (or unified) cache described under ``cache_dir`` (sysfs layout), else None."""
    for index in sorted(Path(cache_dir).glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = parse_size((index / "size").read_text())
        except OSError:
            continue
        if level == "2" and kind in ("Unified", "Data") and size is not None:
            return size
    return None


@functools.lru_cache(maxsize=None)
def name() -> str:
    """The CPU's model name (/proc/cpuinfo's ``model name``; else the architecture, ``aarch64``): what a resumed
    run compares with the run it continues (:mod:`mhfast.files.journal`), as other kernels round otherwise."""
    import platform

    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return " ".join(value.split())
    except (OSError, UnicodeDecodeError):
        pass
    return platform.machine() or "unknown"


@functools.lru_cache(maxsize=None)
def l2_bytes() -> int:
    """One core's L2 cache in bytes: sysfs, else ``sysconf(SC_LEVEL2_CACHE_SIZE)``, else :data:`FALLBACK_L2`."""
    size = read_l2()
    if size is None:
        try:
            size = int(os.sysconf("SC_LEVEL2_CACHE_SIZE")) or None
        except (ValueError, OSError, AttributeError):
            size = None
    if size is None or not _SANE_L2[0] <= size <= _SANE_L2[1]:
        return FALLBACK_L2
    return size
