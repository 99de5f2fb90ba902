"""The temperature ladder of parallel tempering (:mod:`mhfast.sampler.tempering`): its option, its default, and how
it tunes itself during burn-in.

A ladder is K inverse temperatures ``beta_0 > beta_1 > ... > beta_{K-1} > 0`` per input; rung 0 is the target
(``beta_0 = 1 / target_temperature``), the others are auxiliary. Option ``tempering``:

* ``K`` (an int >= 2): K rungs, geometric from the target temperature up to a hot end (:data:`HOT_START` times the
  target to begin with), **tuned during burn-in** (:func:`retuned`) and fixed after it;
* a list of K >= 2 temperatures, increasing, the first equal to ``target_temperature``: used as given (no tuning).

Tuning (Syed, Bouchard-Cote, Deligiannidis & Doucet, JRSS-B 2022, section 5; Pigeons.jl) runs in *rounds* of
doubling length during burn-in (:func:`tuning_ends`: rounds end after burn-in epochs 2, 4, 8, ... and the last
round runs to the end of burn-in, so it is never shorter than the one before it). Each round's estimates come from
that round's swaps only, made at that round's ladder:

1. **The hot end first** (the first rounds, all but the last :data:`EQUALISING_ROUNDS`): while the hottest
   replica's MH acceptance rate (of proposals that change its state) is below :data:`HOT_ACCEPT` and still rose
   by more than :data:`HOT_GAIN` with the last doubling, its temperature doubles and the rungs are spread
   geometrically over the new range (the old rejection rates say nothing about it). That rate is measured from
   the proposals tested at the hottest rung since the hot end last moved (not reset at a round's end: the first
   rounds are 2 sweeps long, and a few chains of a few sites test fewer than :data:`HOT_MIN_TESTS` proposals in
   one of them, but may in two). The first round in which it does not double, having measured that rate from at
   least :data:`HOT_MIN_TESTS` tested proposals, settles the hot end for good (:func:`heated` with ``settled``).
2. **Then equalising rounds** (every round after the hot end settled, at least :data:`EQUALISING_ROUNDS`): the
   rejection rate r_k of swaps between rungs k and k+1 estimates the increment of the *communication barrier*
   Lambda over [beta_{k+1}, beta_k]; interpolating the cumulative sums linearly in beta gives Lambda(beta), and
   the rungs move to equal steps of Lambda (:func:`retuned`; equal rejection between all neighbours, the
   optimum of the non-reversible scheme). Repeated over rounds whose estimates grow more precise (each round
   is twice as long), the ladder converges to equal steps.

The ladder made from the last round's estimates is fixed after burn-in.

Example:
    >>> [round(t, 9) for t in geometric(1.0, 8.0, 4).tolist()]           # temperatures
    [1.0, 2.0, 4.0, 8.0]
    >>> check_tempering([1, 2, 4]), check_tempering(3), check_tempering(None)
    ([1.0, 2.0, 4.0], 3, None)
    >>> import torch
    >>> b = torch.tensor([[1.0, 0.5, 0.25]])
    >>> [round(x, 4) for x in retuned(b, torch.tensor([[0.9, 0.1]]))[0].tolist()]   # the cold pair rejected most:
    [1.0, 0.7222, 0.25]
    >>> tuning_ends(300), heating_rounds(len(tuning_ends(300)))   # 5 rounds may move the hot end, then 3 equalise
    ([2, 4, 8, 16, 32, 64, 128, 300], 5)
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from .scalars import MAX_SIZE, as_int, as_real

#: the hot end to begin with, as a multiple of the target temperature (then measured, see the module doc)
HOT_START = 8.0
#: the hottest replica mixes when this share of its proposals that change its state is accepted
HOT_ACCEPT = 0.5
#: ... or when doubling its temperature raised that share by less than this factor
HOT_GAIN = 1.05
#: a round decides about the hot end only from at least this many tested proposals at the hottest rung since the
#: hot end last moved (fewer: the round neither doubles nor settles it, and the count goes on into the next round)
HOT_MIN_TESTS = 100
#: the hot end is never taken above this multiple of the target temperature
HOT_MAX = 2.0 ** 16
#: the last rounds of burn-in only equalise (the hot end settled before them), at least this many where burn-in has
#: more than this many rounds (and one where it has fewer)
EQUALISING_ROUNDS = 3
#: the floor of a measured rejection rate in the barrier's interpolation (keeps it strictly increasing)
MIN_REJECTION = 1e-3


class LadderError(ValueError):
    """A bad ``tempering`` value (the option spec adds the option's name)."""


def check_tempering(v: Any) -> Any:
    """None, an int K >= 2 or a list of K >= 2 increasing positive finite temperatures (floats); else LadderError."""
    if v is None:
        return None
    if isinstance(v, (torch.Tensor, np.ndarray)):  # an array as a list (0-d: its number)
        v = v.tolist()
    if isinstance(v, bool):
        raise LadderError(f"must be None, an int >= 2 or a list of temperatures, got {v!r}")
    k = as_int(v)
    if k is not None:
        if k < 2:
            raise LadderError(f"needs at least 2 rungs (the target and one hotter), got {v}")
        if k > MAX_SIZE:  # (beyond, the memory check's float arithmetic overflowed: a traceback, not this error)
            raise LadderError(f"must be an int in [2, {MAX_SIZE}] (rungs), got {v}")
        return k
    if not isinstance(v, (list, tuple)):
        raise LadderError(f"must be None, an int >= 2 or a list of temperatures, got {type(v).__name__}")
    # numbers only (float() had read True as 1.0 and "2.5" as 2.5); a 0-d tensor or array is its number
    temps = [as_real(t.item() if isinstance(t, (torch.Tensor, np.ndarray)) and t.ndim == 0 else t) for t in v]
    if any(t is None for t in temps):
        raise LadderError(f"must be a list of numbers (temperatures), got {v!r}")
    if len(temps) < 2:
        raise LadderError(f"needs at least 2 temperatures (the target and one hotter), got {temps}")
    if not all(math.isfinite(t) and t > 0 for t in temps):
        raise LadderError(f"temperatures must be finite and > 0, got {temps}")
    if any(b <= a for a, b in zip(temps, temps[1:])):
        raise LadderError(f"temperatures must be strictly increasing (target first), got {temps}")
    return temps


def rungs(v: Any) -> int:
    """The number of rungs K of a checked ``tempering`` value (1: no tempering)."""
    return 1 if v is None else (v if isinstance(v, int) else len(v))  # (checked: an int is a Python int)


def geometric(cold: float, hot: float, k: int) -> torch.Tensor:
    """``k`` temperatures from ``cold`` to ``hot`` in equal ratios (float64)."""
    return cold * (hot / cold) ** (torch.arange(k, dtype=torch.float64) / (k - 1))


def initial_betas(tempering: Any, target_temperature: float, num_inputs: int) -> torch.Tensor:
    """f64[B, K] inverse temperatures of every input's ladder at the start (rung 0: the target)."""
    if isinstance(tempering, int):
        temps = geometric(target_temperature, target_temperature * HOT_START, tempering)
    else:
        temps = torch.tensor(tempering, dtype=torch.float64)
    betas = 1.0 / temps
    betas[0] = 1.0 / target_temperature  # exactly the epoch's beta
    return betas.expand(num_inputs, -1).clone()


def retuned(betas: torch.Tensor, rejection: torch.Tensor) -> torch.Tensor:
    """f64[B, K] ladders with equal communication-barrier steps between rungs, ends kept (module doc).

    ``betas`` f64[B, K] (decreasing), ``rejection`` f64[B, K-1]: the mean swap rejection probability of each
    adjacent pair (NaN: not measured, then that input keeps its ladder)."""
    out = betas.clone()
    K = betas.shape[1]
    for b in range(betas.shape[0]):
        r = rejection[b]
        if bool(torch.isnan(r).any()):
            continue
        # Lambda from the hot end (beta_{K-1}, Lambda 0) to the target (beta_0, Lambda total): increasing in beta
        x = betas[b].flip(0)
        lam = torch.cat([torch.zeros(1, dtype=torch.float64), torch.cumsum(r.clamp(min=MIN_REJECTION).flip(0), 0)])
        goal = lam[-1] * torch.arange(K, dtype=torch.float64) / (K - 1)
        out[b] = _interp(goal, lam, x).flip(0)
        out[b, 0], out[b, -1] = betas[b, 0], betas[b, -1]
    return out


def _interp(x: torch.Tensor, xp: torch.Tensor, fp: torch.Tensor) -> torch.Tensor:
    """Piecewise-linear interpolation (numpy.interp) of increasing ``xp`` -> ``fp`` at ``x``."""
    i = torch.searchsorted(xp, x, right=True).clamp(1, xp.numel() - 1)
    x0, x1, f0, f1 = xp[i - 1], xp[i], fp[i - 1], fp[i]
    return f0 + (f1 - f0) * (x - x0) / (x1 - x0)


def barrier(rejection: torch.Tensor) -> torch.Tensor:
    """f64[B]: the communication barrier Lambda estimated from the pairs' rejection rates (their sum); about
    ``2 Lambda + 1`` rungs make swaps succeed half of the time (Syed et al. 2022, section 5.3)."""
    return rejection.sum(dim=1)


#: a post-burn-in swap rate below this between two adjacent rungs: too few rungs there (:func:`sparse_ladder`)
SPARSE_SWAP = 0.05
#: ... measured from at least this many proposed swaps (a short run's few swaps say nothing)
SPARSE_MIN_SWAPS = 20


def sparse_ladder(swap_rate: torch.Tensor, proposed: torch.Tensor | None = None) -> str | None:
    """What to tell the user when some adjacent rungs (nearly) never swapped after burn-in, or None.

    ``swap_rate`` f64[B, K-1] is the result's (NaN: no swap proposed); ``proposed`` [B, K-1] the swaps it is of
    (pairs with fewer than :data:`SPARSE_MIN_SWAPS` are not judged). Such a pair cuts the ladder: the target
    replicas then receive little or nothing from the hot ones, and tempering pays K times the rows for plain MH's
    chains. Its rejection of ~1 only bounds the barrier from below, so the advice is a lower bound too.

    Example:
        >>> sparse_ladder(torch.tensor([[0.06, 0.0, 0.24]], dtype=torch.float64))
        'tempering: swaps between rungs 1 and 2 succeeded 0.00 of the time after burn-in (input 0), under 0.05: too few rungs for the barrier there (Lambda >= 2.7, from the rejection rates): use about 2 Lambda + 1 = 7 rungs or more, or a ladder with rungs closer there'
        >>> sparse_ladder(torch.tensor([[0.6, 0.5]], dtype=torch.float64)) is None
        True
        >>> sparse_ladder(torch.tensor([[0.0]], dtype=torch.float64), proposed=torch.tensor([[6.0]])) is None  # few
        True
    """
    judged = torch.ones_like(swap_rate, dtype=torch.bool) if proposed is None else proposed >= SPARSE_MIN_SWAPS
    low = ((swap_rate < SPARSE_SWAP) & judged).nonzero()  # (NaN compares False: pairs never proposed are not flagged)
    if low.shape[0] == 0:
        return None
    b, k = (int(v) for v in low[0])
    lam = float(barrier(1 - swap_rate[b:b + 1].nan_to_num(nan=1.0))[0])
    return (f"tempering: swaps between rungs {k} and {k + 1} succeeded {float(swap_rate[b, k]):.2f} of the time after "
            f"burn-in (input {b}), under {SPARSE_SWAP}: too few rungs for the barrier there (Lambda >= {lam:.1f}, from "
            f"the rejection rates): use about 2 Lambda + 1 = {int(2 * lam + 1.999)} rungs or more, or a ladder with "
            "rungs closer there")


def tuning_ends(burn_in: int) -> list[int]:
    """The burn-in epoch counts after which the ladder is retuned: 2, 4, 8, ... while the next power of two fits
    in burn-in, then ``burn_in`` itself (so the last round is at least as long as the one before it)."""
    ends, n = [], 2
    while 2 * n <= burn_in:
        ends.append(n)
        n *= 2
    return ends + [burn_in] if burn_in >= 1 else []


def heating_rounds(rounds: int) -> int:
    """How many of the first ``rounds`` tuning rounds may move the hot end (the rest only equalise; a lone round
    equalises)."""
    return max(rounds - EQUALISING_ROUNDS, min(rounds - 1, 1))


def heated(betas: torch.Tensor, hot_acceptance: torch.Tensor, previous: torch.Tensor,
           settled: torch.Tensor) -> torch.Tensor:
    """Bool[B]: the inputs whose hot end doubles (module doc): not ``settled`` (Bool[B]: it stopped doubling in
    an earlier round, or heating is over), their hottest replica's acceptance ``hot_acceptance`` f64[B] is below
    HOT_ACCEPT and (``previous``: the same before the last doubling, NaN: none) still rising, and the hot end is
    below HOT_MAX times the target."""
    rising = torch.isnan(previous) | (hot_acceptance > HOT_GAIN * previous)
    room = betas[:, 0] / betas[:, -1] * 2 <= HOT_MAX
    return ~settled & (hot_acceptance < HOT_ACCEPT) & rising & room


def doubled(betas: torch.Tensor) -> torch.Tensor:
    """f64[K]: a ladder ``betas`` f64[K] with its hot end's temperature doubled, the rungs geometric between
    (rung 0 kept exactly)."""
    out = 1 / geometric(1 / float(betas[0]), 2 / float(betas[-1]), betas.numel())
    out[0] = betas[0]
    return out
