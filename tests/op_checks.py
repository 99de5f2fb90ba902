"""Helpers of the op tests: run one call on the compiled op, its typed wrapper and the reference,
and compare or expect the same error from all of them.

Example:
    >>> import torch
    >>> raises_everywhere("masked_copies", (torch.zeros(2, 3).long(), torch.tensor([2]),
    ...                   torch.tensor([0]), 0), "seq_index")
"""
from __future__ import annotations

import re

import pytest
import torch

import mhfast.ops as ops
import mhfast.reference as reference


def callables(op: str, raw: bool = True):
    """(name, function) pairs: the typed wrapper, the reference, and the raw torch.ops op."""
    out = [("ops", getattr(ops, op)), ("reference", getattr(reference, op))]
    if raw:
        out.append(("torch.ops", getattr(torch.ops.mhfast, op)))
    return out


def raises_everywhere(op: str, args: tuple, match: str, raw: bool = True) -> None:
    """Every implementation of ``op`` raises ValueError/TypeError naming ``match`` on ``args``.

    Arguments are cloned per call so in-place ops cannot leak state between implementations.
    ``raw=False`` leaves out torch.ops.mhfast.* (value-range checks that only the CPU kernels and
    the Python wrappers make: the CUDA kernels skip them to avoid a device sync).
    """
    for name, fn in callables(op, raw):
        cloned = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
        try:
            fn(*cloned)
        except (ValueError, TypeError) as e:
            assert re.search(match, str(e)), f"{name}.{op}: error {e!r} does not name {match!r}"
        else:
            pytest.fail(f"{name}.{op} accepted bad input (expected an error naming {match!r})")
