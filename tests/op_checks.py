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
from mhfast import op_types


# The ops whose Python face takes bundles (mhfast.op_types): their arguments as the raw torch.ops op takes them.
RAW_ARGS = {"mh_commit_site_": op_types.commit_site_op_args, "mh_memo_lookup_": op_types.memo_lookup_op_args,
            "mh_memo_store_": op_types.memo_store_op_args}


def callables(op: str, raw: bool = True):
    """(name, function) pairs: the typed wrapper, the reference, and the raw torch.ops op."""
    out = [("ops", getattr(ops, op)), ("reference", getattr(reference, op))]
    if raw:
        fn = getattr(torch.ops.mhfast, op)
        out.append(("torch.ops", (lambda *a: fn(*RAW_ARGS[op](*a))) if op in RAW_ARGS else fn))
    return out


def mapped(a, f):
    """One argument with ``f`` applied to each tensor, also inside bundles and lists."""
    if isinstance(a, torch.Tensor):
        return f(a)
    if isinstance(a, tuple) and hasattr(a, "_fields"):
        return type(a)(*(mapped(x, f) for x in a))
    if isinstance(a, list):
        return [mapped(x, f) for x in a]
    return a


def cloned(a):
    """A copy of one argument: tensors cloned, also inside bundles and lists (in-place ops write nothing back)."""
    return mapped(a, torch.Tensor.clone)


def raises_everywhere(op: str, args: tuple, match: str, raw: bool = True) -> None:
    """Every implementation of ``op`` raises ValueError/TypeError naming ``match`` on ``args``.

    Arguments are cloned per call so in-place ops cannot leak state between implementations.
    ``raw=False`` leaves out torch.ops.mhfast.* (value-range checks that only the CPU kernels and
    the Python wrappers make: the CUDA kernels skip them to avoid a device sync).
    """
    for name, fn in callables(op, raw):
        try:
            fn(*(cloned(a) for a in args))
        except (ValueError, TypeError) as e:
            assert re.search(match, str(e)), f"{name}.{op}: error {e!r} does not name {match!r}"
        else:
            pytest.fail(f"{name}.{op} accepted bad input (expected an error naming {match!r})")


def raises_aliased(op: str, make_args, match: str) -> None:
    """Every implementation of ``op`` (the typed wrapper, the reference, the raw op) raises a ValueError naming
    ``match`` on the arguments ``make_args()`` returns, made anew for each call and passed uncloned: what is
    checked is that they share memory (cloning, as :func:`raises_everywhere` does, would part them)."""
    for name, fn in callables(op):
        with pytest.raises(ValueError, match=match):
            fn(*make_args())

