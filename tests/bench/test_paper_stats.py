"""bench/paper/paper_stats.py on synthetic data with known answers (fast: no model).

Example:
    python3 -m pytest -q tests/bench/test_paper_stats.py
"""
from __future__ import annotations

import dataclasses
import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import sacrebleu

ROOT = Path(__file__).resolve().parents[2]


def _load():
    if "paper_stats" in sys.modules:
        return sys.modules["paper_stats"]
    spec = importlib.util.spec_from_file_location("paper_stats", ROOT / "bench" / "paper" / "paper_stats.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["paper_stats"] = module
    spec.loader.exec_module(module)
    return module


ps = _load()
WORDS = "a the cat dog man woman sits runs on in red blue street park".split()


def _corpus(rng: np.random.Generator, n: int, noise: float) -> tuple[list[str], list[str]]:
    """References of 6-12 random words; hypotheses = references with each word replaced w.p. ``noise``."""
    refs, hyps = [], []
    for _ in range(n):
        ref = list(rng.choice(WORDS, size=int(rng.integers(6, 13))))
        hyp = [w if rng.random() >= noise else str(rng.choice(WORDS)) for w in ref]
        refs.append(" ".join(ref))
        hyps.append(" ".join(hyp))
    return hyps, refs


@pytest.mark.parametrize("metric", ["bleu", "chrf"])
def test_summed_sentence_stats_give_sacrebleus_corpus_score(metric):
    hyps, refs = _corpus(np.random.default_rng(0), 40, 0.3)
    stats = ps.sentence_stats(hyps, refs, metric)
    want = (sacrebleu.corpus_bleu if metric == "bleu" else sacrebleu.corpus_chrf)(hyps, [refs]).score
    assert ps.score_from_stats(metric, stats.sum(axis=0)) == pytest.approx(want, abs=1e-9)
    est = ps.corpus_score(hyps, refs, metric, resamples=200)
    assert est.value == pytest.approx(want, abs=1e-9) and est.n == 40
    assert est.low < est.value < est.high


def test_bootstrap_resamples_are_fixed_by_the_seed():
    hyps, refs = _corpus(np.random.default_rng(1), 20, 0.3)
    a, b = (ps.corpus_score(hyps, refs, resamples=100) for _ in range(2))
    assert a == b
    assert ps.corpus_score(hyps, refs, resamples=100, seed=7) != a


def test_ci_narrows_with_more_sentences():
    rng = np.random.default_rng(2)
    small = ps.corpus_score(*_corpus(rng, 10, 0.3), resamples=300)
    large = ps.corpus_score(*_corpus(rng, 160, 0.3), resamples=300)
    assert (large.high - large.low) < 0.6 * (small.high - small.low)


def test_averaged_score_is_the_mean_of_the_groups_corpus_scores():
    rng = np.random.default_rng(3)
    hyp1, refs = _corpus(rng, 25, 0.2)
    hyp2 = _corpus(rng, 25, 0.6)[0]
    stats = np.stack([ps.sentence_stats(h, refs) for h in (hyp1, hyp2)])
    est = ps.averaged_score(stats, resamples=200)
    want = (sacrebleu.corpus_bleu(hyp1, [refs]).score + sacrebleu.corpus_bleu(hyp2, [refs]).score) / 2
    assert est.value == pytest.approx(want, abs=1e-9) and est.low < est.value < est.high


def test_paired_bootstrap_separates_a_clear_difference_and_not_a_null_one():
    rng = np.random.default_rng(4)
    good, refs = _corpus(rng, 60, 0.1)
    bad = [" ".join(str(rng.choice(WORDS)) if rng.random() < 0.6 else w for w in r.split()) for r in refs]
    sa, sb = ps.sentence_stats(good, refs), ps.sentence_stats(bad, refs)
    cmp = ps.paired_bootstrap(sa, sb, resamples=300)
    assert cmp.diff.low > 0 and cmp.p_value < 0.01
    assert ps.verdict(cmp.diff, "60") == "**holds**"
    assert ps.verdict(ps.paired_bootstrap(sb, sa, resamples=300).diff, "60") == "**fails**"
    same = ps.paired_bootstrap(sa, sa, resamples=300)
    assert same.diff.value == 0 and same.p_value == 1.0
    assert ps.verdict(same.diff, "60 sentences") == "**inconclusive at n = 60 sentences**"


def test_paired_mean_and_mean_ci_on_gaussians_with_known_mean():
    rng = np.random.default_rng(5)
    a = rng.normal(10.0, 1.0, 400)
    b = a - 0.5 + rng.normal(0, 0.1, 400)  # paired: the shared noise cancels in a - b
    cmp = ps.paired_mean(a, b, resamples=500)
    assert cmp.diff.low < 0.5 < cmp.diff.high and cmp.diff.high - cmp.diff.low < 0.05
    est = ps.mean_ci(a, resamples=500)
    # 95% CI of a mean of 400 N(10, 1) draws: about +-0.1 around the sample mean, covering 10
    assert est.low < 10.0 < est.high and 0.12 < est.high - est.low < 0.28


def test_spearman_known_values_and_ties():
    assert ps.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert ps.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(ps.spearman([1, 1, 1], [1, 2, 3]))
    x, y = [1, 2, 2, 3, 5], [2, 1, 4, 4, 6]
    # scipy's spearmanr uses the same average-rank convention
    from scipy.stats import spearmanr
    assert ps.spearman(x, y) == pytest.approx(spearmanr(x, y).statistic)
    with pytest.raises(ValueError, match="differ in length"):
        ps.spearman([1, 2], [1])


def test_within_sentence_correlation_averages_over_sentences_and_skips_constant_ones():
    rng = np.random.default_rng(6)
    groups = []
    for _ in range(50):
        x = rng.normal(size=8)
        groups.append((x, x + rng.normal(scale=0.01, size=8)))  # near-perfect within each sentence
    groups.append(([1.0, 1.0], [0.0, 1.0]))  # undefined: left out
    est = ps.within_sentence_correlation(groups, resamples=200)
    assert est.n == 50 and est.value > 0.95 and est.low > 0.9
    noise = [(rng.normal(size=8), rng.normal(size=8)) for _ in range(200)]
    null = ps.within_sentence_correlation(noise, resamples=200)
    assert null.low < 0 < null.high


def test_bad_inputs_are_clear_errors():
    with pytest.raises(ValueError, match="metric"):
        ps.sentence_stats(["a"], ["a"], "ter")
    with pytest.raises(ValueError, match="differ in length"):
        ps.sentence_stats(["a"], ["a", "b"])
    with pytest.raises(ValueError, match="different sentences"):
        ps.paired_bootstrap(np.zeros((3, 10)), np.zeros((4, 10)))
    with pytest.raises(ValueError, match="values"):
        ps.mean_ci([])
    assert "no CI" in ps.verdict(ps.Estimate(1.0, float("nan"), float("nan"), 1), "1")


def test_no_verdict_below_the_minimum_number_of_sentences():
    few = ps.Estimate(5.0, 2.0, 8.0, ps.MIN_SENTENCES - 1)
    assert ps.verdict(few, "9 sentences").startswith("**inconclusive at n = 9 sentences** (CI above 0")
    assert ps.verdict(dataclasses.replace(few, n=ps.MIN_SENTENCES), "10 sentences") == "**holds**"


def test_one_configuration_spelled_two_ways_shares_a_cache_key(monkeypatch):
    """bench/paper/paper_runs.options_key drops options left at mhfast.sample's defaults (Tables 1-3 each ran the
    default single-site local MH under a different spelling, and computed it three times)."""
    monkeypatch.syspath_prepend(str(ROOT / "bench" / "paper"))
    import paper_runs

    base = {"sampler": "mh", "energy": "local"}
    assert paper_runs.options_key({**base, "proposal_temperature": 1.0}) == paper_runs.options_key(base)
    assert paper_runs.options_key({**base, "top_p": 1.0}) == paper_runs.options_key(base)
    assert paper_runs.options_key({**base, "proposal_temperature": 0.8}) != paper_runs.options_key(base)
    assert paper_runs.options_key({**base, "energy": "raw"}) != paper_runs.options_key(base)
