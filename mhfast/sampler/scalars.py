"""Option values that are numbers of any kind: Python's and numpy's ints and floats, never bools.

Why: ``chains=np.int64(4)`` (a value read from an array) was refused with "must be an int >= 1, got
np.int64(4)", which reads as a contradiction. The checks take any ``numbers.Integral`` / ``numbers.Real`` and
keep the plain Python value, so what is stored (and written to a run's fingerprint) is an ``int`` or ``float``.

Example:
    >>> import numpy as np
    >>> from mhfast.sampler.scalars import as_int, as_real
    >>> as_int(np.int64(4)), as_int(True), as_int(2.0), as_real(np.float32(0.5)), as_real("1")
    (4, None, None, 0.5, None)
    >>> as_int(np.timedelta64(2)), as_real(10 ** 400), type(as_real(np.float64(0.5))).__name__
    (None, inf, 'float')
"""
from __future__ import annotations

import math
import numbers
from typing import Any

#: the largest block size and sub-batch token budget (the option spec, the block schedules, the scorers): far
#: beyond any input, and products with a model's width and bytes per value stay inside int64 (2**63 was a
#: RuntimeError / OverflowError deep in the step or the runner)
MAX_SIZE = 2 ** 40


def as_int(v: Any) -> int | None:
    """``v`` as a Python int if it is an integer of any kind but bool (bool is an int in Python) or a numpy
    timedelta (numpy registers it as an integer), else None."""
    if not isinstance(v, numbers.Integral) or isinstance(v, bool):
        return None
    return int(v) if getattr(getattr(v, "dtype", None), "kind", "i") in "iu" else None


def as_real(v: Any) -> float | None:
    """``v`` as a Python float if it is a real number of any kind but bool (ints included), else None."""
    if not isinstance(v, numbers.Real) or isinstance(v, bool) or getattr(getattr(v, "dtype", None), "kind", "f") == "m":
        return None
    try:
        return float(v)
    except OverflowError:  # an int beyond float's range: infinite, which every finite check then refuses
        return math.inf if v > 0 else -math.inf
