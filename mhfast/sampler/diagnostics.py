"""Convergence diagnostics of the traces, computed by ArviZ's array functions (arviz-stats), not by hand.

For each input and traced summary (:mod:`mhfast.sampler.traces`: ``e_raw``, ``e_local``, the extra terms,
``proj_j``) over the post-burn-in draws of its C chains:

* ``rhat``: rank-normalized split R-hat, the larger of the bulk (rank-normalized) and the tail (folded)
  version (Vehtari, Gelman, Simpson, Carpenter & Bürkner 2021; ``arviz_stats.base.array_stats.rhat``,
  ``method="rank"``, what ``arviz.summary`` reports as ``r_hat``);
* ``ess_bulk``: bulk effective sample size (rank-normalized split chains; ``method="bulk"``);
* ``ess_tail``: tail ESS, the smaller ESS of the 5% and 95% quantile indicators (``method="tail"``,
  ``prob=(0.05, 0.95)``: Vehtari et al.'s definition, ArviZ 0.x's default; ArviZ 1.x's ``azs.ess(...,
  method="tail")`` and ``azs.summary`` take them from ``rcParams["stats.ci_prob"]`` instead, 0.89 in
  arviz-stats 0.8: the 11% and 89% quantiles; ``azs.ess(data, method="tail", prob=(0.05, 0.95))`` gives ours,
  as tests/sampler/test_to_arviz.py checks);
* ``mcse_mean``: Monte Carlo standard error of the mean, ``sd / sqrt(ESS_mean)`` (``array_stats.mcse``).

Before any of them, each summary's values closer than :data:`TIE_RTOL` of its magnitude are made equal
(:func:`merge_rounding_ties`). The traced summaries are functions of a discrete state, so a chain that stays or comes
back to a state repeats a value exactly: rank normalization gives those draws one tied rank. But an energy is
recomputed whenever a state is rescored, and on a GPU its float32 rounding depends on the batch the row was in:
the same state came back with energies up to 3.6e-6 apart. Those differences broke the ties and were ranked as if
the chain had moved. On an H200 (bench/CUDA_NOTES.md, fourth run) they doubled the bulk-ESS of E_local of a tempered
run, to 111.9 from the 48.7 that the same chains gave on the CPU, and lowered its R-hat, to 1.041 from 1.064.

Thresholds are ArviZ's (and the paper above's): R-hat below :data:`RHAT_GOOD` = 1.01, and bulk and tail ESS of
at least :data:`ESS_PER_CHAIN` = 100 per chain (400 for 4 chains). A value ArviZ cannot compute is NaN (fewer
than 4 draws per chain; R-hat of a summary that never changes in any chain) and never counts as converged. So are
the ESS and MCSE of a summary that takes one value in every draw of every chain: ArviZ reports the number of draws
and 0 there, by which chains that never moved from a common start would meet ``min_ess`` at once.

arviz-stats (numpy + scipy only) is an optional dependency: ``pip install "mhfast[diagnostics]"``; without it
these functions raise an ImportError that names the extra.

Example:
    >>> import numpy as np
    >>> draws = np.random.default_rng(0).normal(size=(4, 200, 1))     # [chains, draws, summaries]
    >>> d = diagnose(draws, ["x"])
    >>> sorted(d), round(d["rhat"]["x"], 2) < RHAT_GOOD
    (['ess_bulk', 'ess_tail', 'mcse_mean', 'rhat'], True)
"""
from __future__ import annotations

import math
import warnings
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

EXTRA = "mhfast[diagnostics]"  #: the optional extra that brings arviz-stats
RHAT_GOOD = 1.01  #: ArviZ's (Vehtari et al. 2021's) R-hat threshold
ESS_PER_CHAIN = 100  #: ArviZ's recommended bulk and tail ESS per chain
TAIL_PROB = (0.05, 0.95)  #: the quantiles of tail-ESS
MIN_DRAWS = 4  #: ArviZ's fewest draws per chain for any of these diagnostics
#: values of a summary closer than this x its magnitude (at least 1) are one value: 2**-18, 32 to 64 float32
#: ulps of that magnitude (7.6e-3 at 2000), 10x the largest batch-rounding difference of one state's energy seen on a
#: GPU, and below the gaps between the energies of different states that matter: a summary whose states all lie
#: within a few tolerances of each other far from 0 (0.005 apart at -2000, a review's constructed case) has some of
#: them merged, and its tail ESS is then lower than ArviZ's (57 against 92 there). On continuous float32 traces
#: around -2000 (AR(1), sd 5, 25-1000 draws) a later review measured the merge moving tail ESS by up to 10%, bulk ESS
#: by 0.8% and R-hat by 0.1% against ArviZ's: within tail ESS's own noise; discrete traces are not moved
TIE_RTOL = 2.0 ** -18
#: the quantile of a summary's |values| that sets its magnitude for :data:`TIE_RTOL` (not the largest: one huge draw
#: would widen the tolerance for all); the floor of 1 stays, so variation only below ~4e-6 reads as none
MAGNITUDE_QUANTILE = 0.9
STATS = ("rhat", "ess_bulk", "ess_tail", "mcse_mean")


def array_stats() -> Any:
    """``arviz_stats.base.array_stats``, or an ImportError naming the extra that installs it."""
    try:
        from arviz_stats.base import array_stats as stats
    except ImportError as e:
        raise ImportError(f"convergence diagnostics need arviz-stats: pip install \"{EXTRA}\" (or pip install "
                          f"arviz-stats); {e}") from None
    return stats


def check_available(what: str) -> None:
    """A ValueError naming ``what`` (an option) when arviz-stats is not installed."""
    try:
        array_stats()
    except ImportError as e:
        raise ValueError(f"{what} {e}") from None


def merge_rounding_ties(values: np.ndarray, rtol: float = TIE_RTOL) -> np.ndarray:
    """``values`` with each value replaced by the smallest of its group: the sorted values are cut into groups that
    each span at most ``tol = rtol * max(1, m)`` from their smallest (``m``: the :data:`MAGNITUDE_QUANTILE` quantile
    of the values' magnitudes), a new group starting at the first
    value further than that from the current group's smallest. So float rounding cannot break a tie (module doc),
    and no value moves by more than ``tol`` however densely the values lie (merging every pair of neighbours
    within ``tol`` instead, a chain of them, had shifted values by 9.4 at tol 7.7e-3 in 20,000 continuous draws
    around -2000). Exact ties, values further apart and values that are not finite (NaN: the draws after an input
    left the batch) are left as they are.

    Example:
        >>> merge_rounding_ties(np.array([[2.0, 2.0000031, 5.0], [2.0000012, 7.0, np.nan]])).tolist()
        [[2.0, 2.0, 5.0], [2.0, 7.0, nan]]
    """
    out = np.array(values, dtype=np.float64)  # a copy
    finite = np.isfinite(out)
    flat = out[finite]
    if flat.size < 2:
        return out
    if not (math.isfinite(rtol) and rtol >= 0):  # (a negative one had never returned)
        raise ValueError(f"merge_rounding_ties: rtol must be a finite number >= 0, got {rtol!r}")
    # the summary's magnitude, robust to a few huge draws: its largest |value| had let one draw of 5e7 merge every
    # other value into one, and chains that had not mixed read R-hat 1.0000 (a review)
    tol = rtol * max(1.0, float(np.quantile(np.abs(flat), MAGNITUDE_QUANTILE)))
    order = np.argsort(flat, kind="stable")
    ranked = flat[order]
    starts = np.concatenate([[True], np.diff(ranked) > tol])  # runs of neighbours within tol
    first = np.flatnonzero(starts)
    last = np.append(first[1:], ranked.size) - 1
    for i, end in zip(first.tolist(), last.tolist()):  # runs wider than tol (rare: dense values) are cut greedily
        while ranked[end] - ranked[i] > tol:
            i = _next_group(ranked, i, tol)
            starts[i] = True
    flat[order] = ranked[starts][np.cumsum(starts) - 1]
    out[finite] = flat
    return out


def _next_group(ranked: np.ndarray, i: int, tol: float) -> int:
    """The first index j > i of the sorted ``ranked`` with ``ranked[j] - ranked[i] > tol``, where one exists: found
    by a search for ``ranked[i] + tol``, then moved to agree with the difference the caller tests (the sum rounds:
    0.4999998 + 2**-18 reached 0.5000036, a value more than 2**-18 above it, and the search ran past the array, an
    IndexError in the diagnostics: a review)."""
    j = int(np.searchsorted(ranked, ranked[i] + tol, side="right"))
    while j > i + 1 and ranked[j - 1] - ranked[i] > tol:
        j -= 1
    while j < ranked.size and ranked[j] - ranked[i] <= tol:
        j += 1
    return j


def merge_ties(draws: np.ndarray) -> np.ndarray:
    """float64 ``draws`` [C chains, D draws, S summaries] with each summary's rounding ties merged
    (:func:`merge_rounding_ties` over all its chains and draws). Merging twice changes nothing: the groups' smallest
    values, which is all that is left, lie more than the tolerance apart. So a caller that asks several questions of
    the same draws (:mod:`mhfast.sampler.adaptive`: which summaries vary, then one diagnostic at a time) merges once
    and passes ``ties_merged=True``.

    Example:
        >>> merge_ties(np.array([[[2.0], [2.0000031]], [[5.0], [2.0000012]]]))[..., 0].tolist()
        [[2.0, 2.0], [5.0, 2.0]]
    """
    x = np.asarray(draws, dtype=np.float64)
    if x.shape[2] == 0:
        return x.copy()
    return np.stack([merge_rounding_ties(x[:, :, s]) for s in range(x.shape[2])], axis=2)


def diagnose(draws: np.ndarray, names: Sequence[str], stats: Sequence[str] = STATS,
             ties_merged: bool = False) -> dict[str, dict[str, float]]:
    """``{stat: {summary name: value}}`` of ``draws`` (array [C chains, D draws, S summaries]) for the ``stats``
    among :data:`STATS`, by ArviZ's array functions, each summary's rounding ties merged first (see the module
    doc) unless ``ties_merged`` says :func:`merge_ties` did that already."""
    a = array_stats()
    shape = np.shape(draws)
    if len(shape) != 3:
        raise ValueError(f"diagnose: draws must be an array [chains, draws, summaries], got shape {shape}")
    if len(names) != shape[2]:
        raise ValueError(f"diagnose: names has {len(names)} entries, draws {shape[2]} summaries (its last axis)")
    unknown = [s for s in stats if s not in STATS]
    if unknown:
        raise ValueError(f"diagnose: stats {unknown} are not among {list(STATS)}")
    x = np.asarray(draws, dtype=np.float64) if ties_merged else merge_ties(draws)
    x = np.ascontiguousarray(np.moveaxis(x, 2, 0))  # [S, C, D]
    funcs = {"rhat": lambda: a.rhat(x, chain_axis=-2, draw_axis=-1, method="rank"),
             "ess_bulk": lambda: a.ess(x, chain_axis=-2, draw_axis=-1, method="bulk"),
             "ess_tail": lambda: a.ess(x, chain_axis=-2, draw_axis=-1, method="tail", prob=TAIL_PROB),
             "mcse_mean": lambda: a.mcse(x, chain_axis=-2, draw_axis=-1, method="mean")}
    # one value in every draw: no variance to measure (module doc); NaN, never ArviZ's "as many as the draws"
    constant = (x == x[:, :1, :1]).all(axis=(1, 2)) if x.size else np.zeros(x.shape[0], dtype=bool)
    out = {}
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # 0/0 of a constant summary: NaN, reported as such
        for stat in stats:
            values = np.atleast_1d(np.asarray(funcs[stat](), dtype=np.float64))
            if stat != "rhat":
                values = np.where(constant, np.nan, values)
            out[stat] = {name: float(v) for name, v in zip(names, values)}
    return out


def varying(draws: np.ndarray, ties_merged: bool = False) -> np.ndarray:
    """Bool[S]: which summaries of ``draws`` [C chains, D draws, S summaries] take more than one value (rounding
    ties merged first, as :func:`diagnose` does, unless ``ties_merged``).

    Example:
        >>> varying(np.array([[[1.0, 2.0], [1.0, 3.0]], [[1.0, 2.0], [1.0, 2.0]]])).tolist()
        [False, True]
    """
    x = np.asarray(draws, dtype=np.float64) if ties_merged else merge_ties(draws)
    if x.shape[0] * x.shape[1] == 0:
        return np.zeros(x.shape[2], dtype=bool)
    return (x != x[:1, :1, :]).any(axis=(0, 1))


def meets(diag: Mapping[str, Mapping[str, float]], until_rhat: float | None, min_ess: float | None) -> bool:
    """Whether EVERY summary meets the criteria of the diagnostics in ``diag``: R-hat < ``until_rhat``, bulk and
    tail ESS >= ``min_ess`` (a criterion that is None is not asked; NaN never meets one). Only the statistics
    ``diag`` holds are judged: a criterion whose statistics it lacks passes (:mod:`.adaptive` asks one statistic
    at a time), so a caller judging all at once gives ``diag`` every one of :func:`needed_stats`.

    Example:
        >>> meets({"rhat": {"a": 1.005, "b": 1.2}}, 1.01, None), meets({"rhat": {"a": 1.005}}, 1.01, None)
        (False, True)
    """
    for stat, values in diag.items():
        if stat == "rhat" and until_rhat is not None and not all(v < until_rhat for v in values.values()):
            return False  # (NaN < x is False)
        if stat in ("ess_bulk", "ess_tail") and min_ess is not None and not all(v >= min_ess
                                                                               for v in values.values()):
            return False
    return True


def needed_stats(until_rhat: float | None, min_ess: float | None) -> tuple[str, ...]:
    """The diagnostics a convergence check computes (no more: each costs ~1 ms per summary per 1,000 draws)."""
    return (("rhat",) if until_rhat is not None else ()) + (("ess_bulk", "ess_tail") if min_ess is not None else ())


def summary_rows(draws: np.ndarray, names: Sequence[str], diag: Mapping[str, Mapping[str, float]]) -> list[dict]:
    """One row per summary in the spirit of ``arviz.summary``: mean, sd, mcse_mean, ess_bulk, ess_tail, r_hat."""
    x = np.asarray(draws, dtype=np.float64)
    rows = []
    for s, name in enumerate(names):
        v = x[:, :, s]
        rows.append({"name": name, "mean": float(v.mean()) if v.size else float("nan"),
                     "sd": float(v.std(ddof=1)) if v.size > 1 else float("nan"),
                     "mcse_mean": diag["mcse_mean"][name], "ess_bulk": diag["ess_bulk"][name],
                     "ess_tail": diag["ess_tail"][name], "r_hat": diag["rhat"][name]})
    return rows


def verdict_line(label: str, diag: Mapping[str, Mapping[str, float]], draws: int, chains: int, epochs: int,
                 converged: bool | None) -> str:
    """One line per input: the worst R-hat and ESS over its summaries (and which summary), draws, epochs and,
    with until_rhat / min_ess, whether it converged.

    Example:
        >>> d = {"rhat": {"e_raw": 1.002, "proj_0": 1.04}, "ess_bulk": {"e_raw": 900.0, "proj_0": 350.0},
        ...      "ess_tail": {"e_raw": 800.0, "proj_0": 420.0}}
        >>> verdict_line("input 1", d, 200, 4, 210, False)
        'input 1: max r_hat 1.040 (proj_0)  min ess_bulk 350 (proj_0)  min ess_tail 420 (proj_0)  draws 200 x 4 chains  epochs 210  converged no'
    """
    (rn, rv), (bn, bv), (tn, tv) = (worst_item(diag["rhat"].items(), largest=True),
                                    worst_item(diag["ess_bulk"].items(), largest=False),
                                    worst_item(diag["ess_tail"].items(), largest=False))
    conv = "" if converged is None else f"  converged {'yes' if converged else 'no'}"
    return (f"{label}: max r_hat {format_rhat(rv)} ({rn})  min ess_bulk {bv:.0f} ({bn})  min ess_tail {tv:.0f} ({tn})  "
            f"draws {draws} x {chains} chains  epochs {epochs}{conv}")


def worst_item(items: Iterable[tuple[Any, float]], largest: bool) -> tuple[Any, float]:
    """The worst ``(key, value)`` pair: the largest value (R-hat, ``largest=True``) or the smallest (ESS), where a
    NaN (a figure ArviZ could not compute) is worse than any number, so a summary that cannot be judged is never
    hidden behind one that can.

    Example:
        >>> worst_item({"e_raw": 1.02, "proj_0": float("nan"), "e_local": 1.5}.items(), largest=True)
        ('proj_0', nan)
        >>> worst_item([(0, 300.0), (1, 20.0)], largest=False)
        (1, 20.0)
    """
    bad = float("inf") if largest else float("-inf")
    return (max if largest else min)(items, key=lambda kv: bad if kv[1] != kv[1] else kv[1])


def format_rhat(value: float) -> str:
    """R-hat with 3 decimals, or 3 significant digits when huge (chains that never meet: 6.5e+15), or nan.

    Example:
        >>> format_rhat(1.0049), format_rhat(6.47e15), format_rhat(float("nan"))
        ('1.005', '6.47e+15', 'nan')
    """
    return f"{value:.3f}" if value < 100 or value != value else f"{value:.3g}"


def format_table(rows_per_input: Sequence[tuple[str, Sequence[dict]]], chains: int) -> str:
    """The rows of :func:`summary_rows` of each input as one fixed-width table; ``!`` marks an R-hat at or
    above :data:`RHAT_GOOD` or an ESS below :data:`ESS_PER_CHAIN` x ``chains`` (ArviZ's thresholds)."""
    min_ess = ESS_PER_CHAIN * chains
    head = f"{'input':<10} {'summary':<12} {'mean':>11} {'sd':>9} {'mcse_mean':>9} {'ess_bulk':>9} " \
           f"{'ess_tail':>9} {'r_hat':>7}"
    lines = [head]
    for label, rows in rows_per_input:
        for r in rows:
            flag = lambda ok: " " if ok else "!"  # noqa: E731
            lines.append(f"{label:<10} {r['name']:<12} {r['mean']:>11.4g} {r['sd']:>9.3g} {r['mcse_mean']:>9.3g} "
                         f"{r['ess_bulk']:>8.0f}{flag(r['ess_bulk'] >= min_ess)} "
                         f"{r['ess_tail']:>8.0f}{flag(r['ess_tail'] >= min_ess)} "
                         f"{format_rhat(r['r_hat']):>6}{flag(r['r_hat'] < RHAT_GOOD)}")
    lines.append(f"! = r_hat >= {RHAT_GOOD} or ess < {min_ess} ({ESS_PER_CHAIN} per chain x {chains} chains; "
                 "ArviZ's thresholds)")
    if any(math.isnan(r[k]) for _, rows in rows_per_input for r in rows for k in ("ess_bulk", "ess_tail", "r_hat")):
        # (the table had flagged nan! without a word on why: a review)
        lines.append(f"nan = not computable: fewer than {MIN_DRAWS} draws per chain, a summary with one value in "
                     "every draw (chains that never moved), or NaN draws")
    return "\n".join(lines)
