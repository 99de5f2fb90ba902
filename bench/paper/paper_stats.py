"""Statistics of the paper's experiments: bootstrap CIs over sentences, paired bootstrap, rank correlation, verdicts.

Every experiment of ``bench/paper/paper_experiments.py`` scores a handful to a few hundred sentences, so each number
it prints comes with a 95% confidence interval from the bootstrap over sentences (resample the sentences with
replacement, recompute the statistic; Koehn 2004, as sacreBLEU's ``--confidence``), and every A-vs-B finding
with a *paired* bootstrap (the same resampled sentences for A and B; the CI and p-value of the difference).
A finding holds or fails only when its CI excludes the other outcome (:func:`verdict`).

Corpus BLEU / chrF are not means of sentence scores, so a resample is scored from the SUM of the per-sentence
sufficient statistics (n-gram matches and counts, lengths) that sacreBLEU itself sums: one extraction, then
one cheap score per resample. A run of several chains and epochs is summarised as the paper does, the mean
over chains (and epochs) of each one's corpus score: :func:`averaged_score` bootstraps that mean, with one
resample of sentences shared by all chains and epochs.

Example::

    >>> hyps = ["a cat sat on the mat", "the dog ran in a park"] * 10
    >>> refs = ["a cat sat on the mat", "a dog ran in the park"] * 10
    >>> est = corpus_score(hyps, refs, "chrf", resamples=200)
    >>> est.n, round(est.value, 1), est.low <= est.value <= est.high
    (20, 78.4, True)
"""
from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np
from sacrebleu.metrics import BLEU, CHRF

RESAMPLES = 1000   #: bootstrap resamples (sacreBLEU's default)
SEED = 12345       #: bootstrap seed: the same sentences are drawn on every run (reproducible CIs)
#: Fewer sentences than this: no verdict. A percentile bootstrap over a handful of sentences has few distinct
#: resamples and is known to give too-narrow intervals, so its CI cannot carry a finding.
MIN_SENTENCES = 10
METRICS = {"bleu": BLEU, "chrf": CHRF}


@dataclasses.dataclass(frozen=True)
class Estimate:
    """A statistic on the observed sentences, its 95% bootstrap CI and the number of sentences ``n``.

    >>> Estimate(22.914, 20.1, 25.0, 8).text()
    '22.91 [20.10, 25.00]'
    """

    value: float
    low: float
    high: float
    n: int

    def text(self, digits: int = 2) -> str:
        f = (lambda x: "nan" if not math.isfinite(x) else f"{x:.{digits}f}")
        return f"{f(self.value)} [{f(self.low)}, {f(self.high)}]"


@dataclasses.dataclass(frozen=True)
class Comparison:
    """A paired difference A - B over the same sentences: its estimate/CI and the two-sided p-value."""

    diff: Estimate
    p_value: float

    def text(self, digits: int = 2) -> str:
        return f"{self.diff.text(digits)}, p = {self.p_value:.3f}"


def _metric(metric: str):
    if metric not in METRICS:
        raise ValueError(f"metric: expected one of {sorted(METRICS)}, got {metric!r}")
    return METRICS[metric]()


def sentence_stats(hyps: Sequence[str], refs: Sequence[str], metric: str = "bleu") -> np.ndarray:
    """sacreBLEU's per-sentence sufficient statistics: float64[n, k] (their column sums give the corpus score).

    >>> sentence_stats(["a b"], ["a b"], "bleu").shape
    (1, 10)
    """
    if len(hyps) != len(refs):
        raise ValueError(f"hyps and refs differ in length ({len(hyps)} vs {len(refs)})")
    if not hyps:
        raise ValueError("hyps: no sentences to score")
    m = _metric(metric)
    return np.asarray(m._extract_corpus_statistics(list(hyps), [list(refs)]), dtype=np.float64)


def score_from_stats(metric: str, sums: np.ndarray) -> np.ndarray:
    """Corpus score of each row of summed statistics ``sums[..., k]`` -> float64[...]."""
    m = _metric(metric)
    flat = sums.reshape(-1, sums.shape[-1])
    # sacreBLEU's BLEU takes ints (it formats counts); chrF takes floats. Sums of counts are exact in float64.
    cast = (lambda row: [int(round(x)) for x in row]) if metric == "bleu" else (lambda row: list(row))
    out = np.array([m._compute_score_from_stats(cast(row)).score for row in flat], dtype=np.float64)
    return out.reshape(sums.shape[:-1])


def resample_counts(n: int, resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray:
    """How often each of ``n`` sentences is drawn in each bootstrap resample: int64[resamples, n].

    >>> resample_counts(5, 3).sum(axis=1).tolist()
    [5, 5, 5]
    """
    if n < 1 or resamples < 1:
        raise ValueError(f"n and resamples must be >= 1 (got {n}, {resamples})")
    idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    counts = np.zeros((resamples, n), dtype=np.int64)
    np.add.at(counts, (np.arange(resamples)[:, None], idx), 1)
    return counts


def interval(value: float, draws: np.ndarray, n: int) -> Estimate:
    draws = draws[np.isfinite(draws)]
    if draws.size == 0:
        return Estimate(value, float("nan"), float("nan"), n)
    low, high = np.percentile(draws, [2.5, 97.5])
    return Estimate(float(value), float(low), float(high), n)


def averaged_draws(stats: np.ndarray, metric: str, counts: np.ndarray) -> tuple[float, np.ndarray]:
    """``stats[G, n, k]`` (G = chains x epochs): the mean over G of the corpus score, and its resampled values."""
    if stats.ndim == 2:
        stats = stats[None]
    value = float(score_from_stats(metric, stats.sum(axis=1)).mean())
    sums = np.einsum("rn,gnk->rgk", counts.astype(np.float64), stats)
    return value, score_from_stats(metric, sums).mean(axis=1)


def averaged_score(stats: np.ndarray, metric: str = "bleu", resamples: int = RESAMPLES,
                   seed: int = SEED) -> Estimate:
    """Mean over groups (chains, epochs) of the corpus score, with its bootstrap CI over sentences.

    ``stats``: float64[G, n, k] or [n, k] from :func:`sentence_stats` (one group per chain and epoch).
    """
    counts = resample_counts(stats.shape[-2], resamples, seed)
    value, draws = averaged_draws(stats, metric, counts)
    return interval(value, draws, stats.shape[-2])


def corpus_score(hyps: Sequence[str], refs: Sequence[str], metric: str = "bleu", resamples: int = RESAMPLES,
                 seed: int = SEED) -> Estimate:
    """sacreBLEU corpus BLEU/chrF of one hypothesis per sentence, with its bootstrap CI over sentences."""
    return averaged_score(sentence_stats(hyps, refs, metric), metric, resamples, seed)


def paired(value: float, draws: np.ndarray, n: int) -> Comparison:
    """CI of the difference, and the two-sided p-value of "no difference": how often a resampled difference,
    centred on the resamples' mean (the null: the shift is noise), lies at least as far from 0 as the observed."""
    ok = draws[np.isfinite(draws)]
    if ok.size == 0:
        return Comparison(interval(value, draws, n), float("nan"))
    extreme = np.abs(ok - ok.mean()) >= abs(value)
    return Comparison(interval(value, ok, n), float((extreme.sum() + 1) / (ok.size + 1)))


def paired_bootstrap(stats_a: np.ndarray, stats_b: np.ndarray, metric: str = "bleu",
                     resamples: int = RESAMPLES, seed: int = SEED) -> Comparison:
    """Paired bootstrap of (averaged) corpus score A - B over the SAME sentences (each [G, n, k] or [n, k])."""
    if stats_a.shape[-2] != stats_b.shape[-2]:
        raise ValueError(f"A and B score different sentences ({stats_a.shape[-2]} vs {stats_b.shape[-2]})")
    counts = resample_counts(stats_a.shape[-2], resamples, seed)
    va, da = averaged_draws(stats_a, metric, counts)
    vb, db = averaged_draws(stats_b, metric, counts)
    return paired(va - vb, da - db, stats_a.shape[-2])


def mean_ci(values: Sequence[float], resamples: int = RESAMPLES, seed: int = SEED) -> Estimate:
    """Mean of per-sentence values (e.g. a sentence's mean energy over chains), bootstrap CI over sentences.

    >>> mean_ci([1.0, 2.0, 3.0]).value
    2.0
    """
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError("values: expected a non-empty 1-d sequence")
    counts = resample_counts(x.size, resamples, seed)
    return interval(float(x.mean()), counts @ x / x.size, x.size)


def paired_mean(a: Sequence[float], b: Sequence[float], resamples: int = RESAMPLES, seed: int = SEED) -> Comparison:
    """Paired bootstrap of mean(a) - mean(b) over the same sentences (a[i], b[i] belong to sentence i)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise ValueError(f"a and b: expected two non-empty 1-d sequences of one length (got {a.shape}, {b.shape})")
    d = a - b
    counts = resample_counts(d.size, resamples, seed)
    return paired(float(d.mean()), counts @ d / d.size, d.size)


def ranks(x: Sequence[float]) -> np.ndarray:
    """Ranks from 1, ties sharing their average rank.

    >>> ranks([10, 30, 20, 20]).tolist()
    [1.0, 4.0, 2.5, 2.5]
    """
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    r = np.empty(x.size, dtype=np.float64)
    r[order] = np.arange(1, x.size + 1)
    for v in np.unique(x):
        tie = x == v
        r[tie] = r[tie].mean()
    return r


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman rank correlation (Pearson of average ranks); nan when either side is constant or n < 2.

    >>> spearman([1, 2, 3], [30, 20, 10])
    -1.0
    """
    if len(x) != len(y):
        raise ValueError(f"x and y differ in length ({len(x)} vs {len(y)})")
    if len(x) < 2:
        return float("nan")
    rx, ry = ranks(x), ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    den = math.sqrt(float((rx * rx).sum() * (ry * ry).sum()))
    return float((rx * ry).sum() / den) if den > 0 else float("nan")


def within_sentence_correlation(groups: Sequence[tuple[Sequence[float], Sequence[float]]],
                                resamples: int = RESAMPLES, seed: int = SEED) -> Estimate:
    """Mean over sentences of Spearman(x, y) among that sentence's candidates, bootstrap CI over sentences.

    ``groups[i] = (x, y)`` for sentence i (e.g. x = -energy, y = sentence chrF of each distinct candidate).
    Sentences whose candidates do not vary (correlation undefined) are left out; ``n`` counts the rest.
    """
    rhos = [spearman(x, y) for x, y in groups]
    kept = [r for r in rhos if math.isfinite(r)]
    if not kept:
        return Estimate(float("nan"), float("nan"), float("nan"), 0)
    return mean_ci(kept, resamples, seed)


def verdict(diff: Estimate, n_text: str) -> str:
    """A claim "diff > 0" judged by its 95% CI: holds (CI above 0), fails (CI below 0), else inconclusive;
    always inconclusive below :data:`MIN_SENTENCES` sentences (``diff.n``).

    >>> verdict(Estimate(1.0, 0.2, 1.8, 30), "30 sentences"), verdict(Estimate(1.0, -0.2, 1.8, 30), "30 sentences")
    ('**holds**', '**inconclusive at n = 30 sentences**')
    >>> verdict(Estimate(1.0, 0.2, 1.8, 4), "4 sentences")
    '**inconclusive at n = 4 sentences** (CI above 0, but fewer than 10 sentences)'
    """
    if not (math.isfinite(diff.low) and math.isfinite(diff.high)):
        return f"**inconclusive at n = {n_text}** (no CI)"
    if diff.n < MIN_SENTENCES:
        side = "above" if diff.low > 0 else "below" if diff.high < 0 else "across"
        return f"**inconclusive at n = {n_text}** (CI {side} 0, but fewer than {MIN_SENTENCES} sentences)"
    if diff.low > 0:
        return "**holds**"
    if diff.high < 0:
        return "**fails**"
    return f"**inconclusive at n = {n_text}**"
