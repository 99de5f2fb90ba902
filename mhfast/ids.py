"""Token ids from Python values, checked before they become tensors: a float id would otherwise be truncated
(5.5 read as 5, ``True`` as 1) and an int beyond 64 bits would be torch's "Overflow when unpacking long long",
which names nothing. The sampler's inputs (``sampler.problem``), scoring's token rows (``scoring.text``) and the
fairseq CMLM's source ids (``models.fairseq_cmlm``) all read ids through here; it imports nothing of mhfast, so
every layer may use it.

Example:
    >>> from mhfast.ids import id_row
    >>> id_row([2, 5, 3], vocab_size=12).tolist()
    [2, 5, 3]
"""
from __future__ import annotations

import operator
from collections.abc import Mapping, Set
from typing import Any, Sequence

import torch

INT64_MAX = 2 ** 63 - 1


def long_tensor(values: Sequence[Any], what: str, low: int = 0, high: int = INT64_MAX, space: str = "") -> torch.Tensor:
    """Long[N] of Python ints, each checked to lie in [``low``, ``high``) first. The ValueError reads ``"<what> <v>
    is outside <space>[low, high)"`` (``space``: e.g. ``"the vocabulary "``).

    Example:
        >>> long_tensor([3, 2 ** 70], "token id", 0, 12, "the vocabulary ")
        Traceback (most recent call last):
        ...
        ValueError: token id 1180591620717411303424 is outside the vocabulary [0, 12)
    """
    bad = next((v for v in values if not low <= v < high), None)
    if bad is not None:
        raise ValueError(f"{what} {bad} is outside {space}[{low}, {high})")
    return torch.tensor(list(values), dtype=torch.long)


def id_row(ids: Any, name: str = "ids", vocab_size: int | None = None, what: str = "token id",
           space: str = "the vocabulary ") -> torch.Tensor:
    """Long[T] of a 1-D sequence of int token ids (a list, numpy's ints included, or an integer tensor); anything
    else is a TypeError naming ``name``, never a silent conversion. Each id is checked to lie in [0,
    ``vocab_size``) (or in int64's range); that ValueError reads ``"<what> <v> is outside <space>[0, V)"``.

    Example:
        >>> id_row([2, 0.5])
        Traceback (most recent call last):
        ...
        TypeError: ids must be a 1-D sequence of int token ids, got 0.5
        >>> id_row([2, 12], vocab_size=12)
        Traceback (most recent call last):
        ...
        ValueError: token id 12 is outside the vocabulary [0, 12)
    """
    if isinstance(ids, torch.Tensor):
        if ids.dtype not in (torch.int32, torch.int64) or ids.dim() != 1:
            raise TypeError(f"{name} must be a 1-D int64 or int32 tensor of token ids, got {ids.dtype} of shape "
                            f"{tuple(ids.shape)}")
        values = ids.tolist()
    else:
        # a set or a dict has no order of its own: its ids had been read in hash order, a row no one wrote
        if isinstance(ids, (str, bytes, Set, Mapping)) or not hasattr(ids, "__iter__"):
            raise TypeError(f"{name} must be a 1-D sequence of int token ids, got {type(ids).__name__}")
        values = []
        for v in ids:
            try:
                if isinstance(v, bool) or (isinstance(v, torch.Tensor) and v.dtype == torch.bool):
                    raise TypeError  # (torch.tensor(True) is an index: operator.index had read it as id 1)
                values.append(operator.index(v))  # an int, or numpy's; never a float
            except TypeError:
                raise TypeError(f"{name} must be a 1-D sequence of int token ids, got {v!r}") from None
    high, space = (INT64_MAX, "") if vocab_size is None else (int(vocab_size), space)
    return long_tensor(values, what, 0, high, space)
