"""Which proposals change their chain: the one host sync of a dynamic step.

A proposal X' = X is accepted with probability 1 and needs no model row; the step reads which chains changed
(one device -> host copy) so that it forwards the rows of those only. With the proposal memo the same read also
says which of them the memo knows (:func:`misses_then_hits`).

Example:
    >>> changed_chains(torch.tensor([True, False, True]))[1].tolist()
    [0, 2]
"""
from __future__ import annotations

import bisect

import torch

from .site_types import Picked


def changed_chains(changed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices of the step's chains whose proposal differs from their state (of any mask's True entries): the
    one host sync of a step (the caller then knows how many rows to forward). Returns ``(device, CPU)`` copies."""
    if changed.device.type == "cpu":  # no copies to make (each would still be a dispatched call)
        index = changed.nonzero().squeeze(1)
        return index, index
    index_host = changed.cpu().nonzero().squeeze(1)
    return index_host.to(changed.device), index_host


def changed_picked(changed: torch.Tensor) -> Picked:
    """:class:`Picked` of the changed proposals (``changed`` Bool[A]), without a memo: no hits."""
    return Picked(*changed_chains(changed), hits=0)


def misses_then_hits(order: torch.Tensor) -> Picked:
    """The changed proposals, the memo's misses first and its hits last, from the memo's ``order`` mask (misses
    then hits, ``2A`` entries): it goes through :func:`changed_chains` (the step's one host sync), so hit ``j``
    comes back as ``A + j``. The host side is a list (sorted indices: one bisection), so a step without hits makes
    no torch call more than without the memo.

    Example:
        >>> misses_then_hits(torch.tensor([True, False, False, False, True, False]))
        Picked(index=tensor([0, 1]), index_host=tensor([0, 1]), hits=1)
    """
    A = order.shape[0] // 2
    both, both_host = changed_chains(order)
    flat = both_host.tolist()  # (a fraction of a microsecond here, where any torch op costs a few)
    h = len(flat) - bisect.bisect_left(flat, A)
    if h == 0:
        return Picked(both, both_host, 0)
    index_host = both_host.remainder(A)
    return Picked(index_host if both is both_host else both.remainder(A), index_host, h)
