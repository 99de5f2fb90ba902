"""A user's surrogate for delayed acceptance (option ``delayed=<callable>``, API only; docs/delayed.md).

The callable is called as ``surrogate(tokens, pos)`` on ``tokens: Long[n, T]`` (the model's token ids, frame and
padding included, like an extra energy term) and ``pos: Long[n]`` (the proposed position of each row) and returns
``E~_pos(tokens)``: ``f32[n]`` (any float dtype, any shape of n numbers) on any device. It must be a FIXED function
of the sequence and the position (no state, no randomness, nothing learned during the run): that is what keeps
each position's two-stage kernel reversible with respect to the exact target (docs/delayed.md). Stage 1 then tests
dE~ = E~_i(X') - E~_i(X), one call per step on X and X' of every tested proposal together (2 n rows), so dE~ is
antisymmetric by construction (swapping X and X' negates it). Its values are checked: one host read per step.

Example:
    >>> import torch
    >>> hamming_to_zero = lambda tokens, pos: (tokens != 0).sum(1).float()
    >>> old, new = torch.tensor([[0, 1, 0]]), torch.tensor([[0, 1, 2]])
    >>> surrogate_delta(hamming_to_zero, old, new, torch.tensor([2])).tolist()
    [1.0]
"""
from __future__ import annotations

from typing import Any, Callable

import torch


def _bad(what: str) -> ValueError:
    return ValueError(f"mhfast.sample: delayed: the surrogate {what}")


def surrogate_delta(surrogate: Callable[..., Any], old: torch.Tensor, new: torch.Tensor, pos: torch.Tensor
                    ) -> torch.Tensor:
    """f32[n] on ``old``'s device: ``surrogate(new, pos) - surrogate(old, pos)``, from one call on both, checked
    (a tensor of 2 n finite numbers; else a ValueError naming ``delayed``)."""
    n = old.shape[0]
    if n == 0:
        return torch.zeros(0, device=old.device)
    values = surrogate(torch.cat([old, new]), torch.cat([pos, pos]))
    # any real dtype: an int32 had been refused where int64 was taken
    if not isinstance(values, torch.Tensor) or values.dtype == torch.bool or values.is_complex():
        raise _bad(f"must return a float tensor of one energy per row, got {type(values).__name__}"
                   + (f" of dtype {values.dtype}" if isinstance(values, torch.Tensor) else ""))
    if values.is_meta:
        raise _bad("returned a tensor on the meta device, which holds no values")
    if values.numel() != 2 * n or sum(size != 1 for size in values.shape) > 1:
        # (an [N, 2] tensor of N = n had been flattened: its energies paired with other chains' rows)
        raise _bad(f"returned {tuple(values.shape)} for {2 * n} rows: it must return one energy per row (f32[N] "
                   "for tokens Long[N, T])")
    # the difference in the surrogate's own precision where it is finer than fp32 (float64), then fp32
    values = values.reshape(2 * n).to(device=old.device, dtype=torch.promote_types(values.dtype, torch.float32))
    if not bool(torch.isfinite(values.float()).all()):  # (the one host read: a NaN would silently reject every
        # proposal; a float64 beyond fp32's range would be inf in the kernel's sums)
        raise _bad("returned a value that is not finite (NaN or inf); its energies must be finite numbers")
    return (values[n:] - values[:n]).float()


def user_surrogate(delayed: Any) -> Callable[..., Any] | None:
    """The user's surrogate of option ``delayed`` (a callable), or None (a named surrogate, or off).

    Example:
        >>> user_surrogate("window:2") is None, user_surrogate(len) is len
        (True, True)
    """
    return delayed if callable(delayed) else None
