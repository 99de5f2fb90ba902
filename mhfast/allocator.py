"""Keep freed CPU memory in the process, so that a model call's large activations do not page-fault every call.

A CPU forward allocates its activations anew in every call: for a BERT layer over 31 rows of 34 tokens the
feed-forward block's intermediate alone is 4.3 MB in bf16 (8.6 MB in fp32). glibc's malloc serves
allocations above its mmap threshold (128 KB, raised on the fly to at most 32 MB) with fresh ``mmap``
pages and gives them back on free, and it trims freed memory at the top of its heap back to the system:
either way the next call touches pages the kernel must map and zero again. Measured on AntiBERTy
through the sampler's runner (one thread, T=32, an Intel Xeon): 10,000-310,000 minor page faults per
model call, and removing them makes a row 1.07-1.09x cheaper in fp32 and 1.13-1.19x in bf16 at 31-496 rows
per call, and ``mhfast.sample``'s fp32 steady state 1.07x faster (T=32, 5 chains); bf16 sampling and the bundled
translation model showed no clear change, glibc's adaptive threshold catching most of their faults already
(``bench/HISTORY.md``: the retired bench/ab_malloc.py). The numbers computed are the same (only where memory comes
from changes), so chains are bit-identical.

:func:`tune_cpu_allocator` raises glibc's mmap threshold to 1 GiB (32 MiB where the C library refuses more)
and its trim threshold to 2 GiB, through ``mallopt``. The settings are process-wide and permanent, and
the process then keeps the memory it freed (its resident size stays at its peak): what a long
sampling run wants, not something a library should impose on its host, so ``mhfast.sample`` does not call
it; the ``mhfast`` command does, at start, unless ``MHFAST_TUNE_MALLOC=0``. The same effect from outside
a process: ``MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=2147483647`` in its environment,
or a caching allocator (jemalloc, tcmalloc) through ``LD_PRELOAD``.

Example:
    >>> import mhfast
    >>> mhfast.tune_cpu_allocator()  # on Linux with glibc; False elsewhere
    True
"""
from __future__ import annotations

import ctypes
import platform
import sys

M_TRIM_THRESHOLD = -1  #: glibc's mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 1 << 30  #: allocations below this come from the heap, not fresh mmap pages
MMAP_THRESHOLD_FALLBACK = 32 << 20  #: the most older glibc versions accept (HEAP_MAX_SIZE / 2 on 64-bit)
TRIM_THRESHOLD = (1 << 31) - 1  #: freed memory at the top of the heap kept up to this (mallopt takes an int)

_applied: bool | None = None


def tune_cpu_allocator() -> bool:
    """Raise glibc malloc's mmap and trim thresholds for this process (see the module docstring); returns
    whether they are set. Idempotent; False, and nothing changed, where the C library is not glibc (musl,
    macOS, Windows) or refuses the values.

    Example:
        >>> tune_cpu_allocator() == tune_cpu_allocator()
        True
    """
    global _applied
    if _applied is None:
        _applied = _apply()
    return _applied


def _apply() -> bool:
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the running process's symbols: glibc's own (no library search)
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if not (mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) or mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_FALLBACK)):
        return False
    return bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
