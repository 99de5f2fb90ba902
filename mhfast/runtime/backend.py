"""The ops the sampler uses, from the compiled core or the pure-PyTorch reference.

The algorithm code calls ``backend.masked_copies(...)`` etc. and never knows which one runs;
with the same seed both draw the same random numbers and give the same chains (the reference is the
specification), up to float32 rounding: the compiled propose sums the nucleus (``top_p`` < 1) in another
order, so a token whose cumulative mass lies within rounding of ``top_p`` can be kept by one and not the
other (measured: 2 of 600 rows at V=50,000, none at V=33), and the proposal's log q then differs by ~1e-3.

Example:
    >>> from mhfast.runtime.backend import get_backend
    >>> get_backend("reference").name
    'reference'
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import torch


@dataclass(frozen=True)
class Backend:
    name: str
    masked_copies: Callable
    gather_energies: Callable
    propose: Callable
    mh_accept_: Callable
    counter_uniforms: Callable
    mh_propose_site: Callable  #: the propose phase of a single-site MH step, fused
    mh_commit_site_: Callable  #: the accept + commit phase of a single-site MH step, fused
    mh_site_rows: Callable  #: X' and its model rows for single-site moves, fused
    mh_memo_lookup_: Callable  #: the proposal memo's lookup, in place (mhfast.sampler.memo)
    mh_memo_store_: Callable  #: the terms of the step's misses into the proposal memo, in place


def get_backend(name: str, where: str = "mhfast.sample") -> Backend:
    """``"compiled"`` -> :mod:`mhfast.ops` with ``validate=False`` (the sampler builds its own,
    valid indices, and value checks would cost a device->host sync on CUDA);
    ``"reference"`` -> :mod:`mhfast.reference`; anything else is a ValueError naming ``where``'s backend."""
    if name == "compiled":
        from .. import ops

        return Backend(
            "compiled",
            functools.partial(ops.masked_copies, validate=False),
            functools.partial(ops.gather_energies, validate=False),
            functools.partial(ops.propose, validate=False),
            functools.partial(ops.mh_accept_, validate=False),
            functools.partial(ops.counter_uniforms, validate=False),
            functools.partial(ops.mh_propose_site, validate=False),
            functools.partial(ops.mh_commit_site_, validate=False),
            # The op whose wrapper only passes its arguments on: its overload directly (one Python layer less,
            # ~0.7 us per call; it runs in every step, bench/bench_floor.py --compare memo)
            torch.ops.mhfast.mh_site_rows.default,
            functools.partial(ops.mh_memo_lookup_, validate=False),
            functools.partial(ops.mh_memo_store_, validate=False),
        )
    if name == "reference":
        from .. import reference

        return Backend("reference", reference.masked_copies, reference.gather_energies, reference.propose,
                       reference.mh_accept_, reference.counter_uniforms, reference.mh_propose_site,
                       reference.mh_commit_site_, reference.mh_site_rows, reference.mh_memo_lookup_,
                       reference.mh_memo_store_)
    raise ValueError(f"{where}: backend must be 'compiled' or 'reference', got {name!r}")
