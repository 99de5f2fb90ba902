"""Did the chains mix? Traces, ArviZ diagnostics, dispersed starts and runs that stop when converged (issue 33).

* the diagnostics are ArviZ's on the same arrays (array_stats on ``result.traces``), and R-hat is the
  rank-normalized split R-hat of Vehtari et al. (2021), recomputed here by hand from its definition;
* the 95% interval ``mean +- 1.96 MCSE`` of the mean local energy covers the exact mean (enumeration) at close to
  the nominal rate over many independent replicates; the bound is binomial in their number (see the test); an
  MCSE that ignores autocorrelation fails the same check;
* chains that cannot mix are flagged: the reducible nucleus model (uniform_mix=0) with chains started in its two
  closed classes, and a strongly coupled two-mode model whose modes have equal energy (its energy traces mix, its
  projections do not): R-hat well above 1.01, and until_rhat never declares them converged;
* until_rhat on a mixing toy stops early, per input, and the chains are bit for bit those of a run without the
  option up to each input's stop (every kernel, the memo, the static step);
* per-position tallies agree with the per-chain counts; traces are what they say; dispersed starts follow
  their distributions (chi-square); bad input is a ValueError naming the argument.
"""
from __future__ import annotations

import builtins
import math

import numpy as np
import pytest
import torch
from scipy import stats

import mhfast
from mhfast.models.tabular import TabularMLM
from mhfast.sampler import diagnostics, starts, traces
from exact_checks import agreeing_pair, coupled_modes, energies, enumerate_states, masks

from arviz_stats.base import array_stats  # noqa: E402 - installed by scripts/install.sh: missing, these tests fail

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def mixing_toy(**kw) -> TabularMLM:
    return TabularMLM.random(num_tokens=3, length=3, seed=11, **kw)


def post_burn_in(r, b: int) -> np.ndarray:
    keep = (r.trace_epochs >= r.burn_in) & (r.trace_epochs < int(r.epochs_run[b]))
    return r.traces[b][:, keep].double().numpy()


# ---------------------------------------------------------------------------- the diagnostics are ArviZ's
def hand_rank_rhat(x: np.ndarray) -> float:
    """Rank-normalized split R-hat (Vehtari et al. 2021, eqs. 1-4 and section 4), from its definition: split
    each chain in halves, replace the draws by normal scores of their pooled ranks (Blom: (r - 3/8) / (n + 1/4)),
    classic R-hat; the same of the folded draws |x - median|; the larger of the two."""
    def split(a):
        half = a.shape[1] // 2
        return np.vstack([a[:, :half], a[:, a.shape[1] - half:]])

    def z(a):
        r = stats.rankdata(a, method="average").reshape(a.shape)
        return stats.norm.ppf((r - 0.375) / (a.size + 0.25))

    def rhat(a):
        n = a.shape[1]
        w = a.var(axis=1, ddof=1).mean()
        b = n * a.mean(axis=1).var(ddof=1)
        return math.sqrt(((n - 1) / n * w + b / n) / w)

    s = split(x)
    return max(rhat(z(s)), rhat(z(np.abs(s - np.median(s)))))


def test_diagnostics_equal_arviz_on_the_traces():
    model = mixing_toy()
    template, _ = masks(model, 3)
    r = mhfast.sample(model, init=template[None].repeat(3, 1), chains=4, epochs=70, burn_in=10, seed=5,
                      start="random", energy="local")
    assert r.trace_names == ["e_raw", "e_local", "proj_0", "proj_1", "proj_2"]
    assert tuple(r.traces.shape) == (3, 4, 70, 5) and r.trace_epochs.tolist() == list(range(70))
    for b, diag in enumerate(r.diagnostics):
        x = post_burn_in(r, b)
        assert x.shape == (4, 60, 5)
        for s, name in enumerate(r.trace_names):
            a = x[:, :, s]
            assert diag["rhat"][name] == float(array_stats.rhat(a, method="rank"))
            assert diag["ess_bulk"][name] == float(array_stats.ess(a, method="bulk"))
            assert diag["ess_tail"][name] == float(array_stats.ess(a, method="tail", prob=(0.05, 0.95)))
            assert diag["mcse_mean"][name] == float(array_stats.mcse(a, method="mean"))
            assert diag["rhat"][name] == pytest.approx(hand_rank_rhat(a), rel=1e-12)
            # MCSE of the mean is sd / sqrt(ESS of the mean), the ESS ArviZ computes for it
            assert diag["mcse_mean"][name] == pytest.approx(a.std(ddof=1) / math.sqrt(
                float(array_stats.ess(a, method="mean"))), rel=1e-12)


def _sticky_chains(seed: int, chains: int = 4, draws: int = 400) -> np.ndarray:
    """[chains, draws] energies of a sticky chain between two states (redrawn with probability 0.05 a draw):
    tie-heavy traces, like those of a tempered chain that sits in a basin's lowest state."""
    rng = np.random.default_rng(seed)
    energy = np.array([1.78, 3.87])
    state = np.empty((chains, draws), dtype=int)
    state[:, 0] = rng.integers(0, 2, chains)
    for d in range(1, draws):
        move = rng.random(chains) < 0.05
        state[:, d] = np.where(move, rng.integers(0, 2, chains), state[:, d - 1])
    return energy[state]


def test_rounding_noise_of_a_rescored_state_does_not_change_the_diagnostics():
    """A state's energy, recomputed in another batch on a GPU, can differ by a few float32 ulps (3.6e-6 seen on an
    H200): the diagnostics merge such values back into the tie (diagnostics.merge_rounding_ties), so the noisy
    trace gets exactly the clean one's figures. ArviZ alone ranks the noise as movement: a far larger ESS."""
    clean = _sticky_chains(0)
    noisy = clean + np.random.default_rng(1).uniform(-4e-6, 4e-6, clean.shape)
    got, want = diagnostics.diagnose(noisy[:, :, None], ["e"]), diagnostics.diagnose(clean[:, :, None], ["e"])
    assert {k: got[k] for k in ("rhat", "ess_bulk", "ess_tail")} == {k: want[k] for k in ("rhat", "ess_bulk", "ess_tail")}
    assert got["mcse_mean"]["e"] == pytest.approx(want["mcse_mean"]["e"], rel=1e-5)  # (values, not ranks: ~ulps)
    # what the merge prevents: the noise breaks the ties, and ArviZ takes it for mixing (here 98 against 46)
    assert float(array_stats.ess(noisy, method="bulk")) > 1.5 * float(array_stats.ess(clean, method="bulk"))
    assert float(array_stats.rhat(noisy, method="rank")) < float(array_stats.rhat(clean, method="rank"))


def test_only_values_within_rounding_are_merged():
    x = np.array([[1.0, 1.0 + 1e-3, 5.0, 5.0], [5.0 + 2e-5, 9.0, 9.0 + 3e-5, -2.0]])
    # the tolerance is TIE_RTOL x 9 (the largest magnitude): 3.4e-5
    assert diagnostics.merge_rounding_ties(x).tolist() == [[1.0, 1.0 + 1e-3, 5.0, 5.0], [5.0, 9.0, 9.0, -2.0]]
    # continuous draws: now and then two fall that close and are merged, which moves the figures by a hair
    normal = np.random.default_rng(2).normal(size=(4, 500))
    assert np.abs(diagnostics.merge_rounding_ties(normal) - normal).max() <= diagnostics.TIE_RTOL * 4
    d = diagnostics.diagnose(normal[:, :, None], ["x"])
    assert d["ess_bulk"]["x"] == pytest.approx(float(array_stats.ess(normal, method="bulk")), rel=1e-3)
    assert d["rhat"]["x"] == pytest.approx(float(array_stats.rhat(normal, method="rank")), rel=1e-4)
    assert np.isnan(diagnostics.merge_rounding_ties(np.array([1.0, np.nan]))[1])  # left for ArviZ to report
    # dense values (many states of a long sequence at a large energy): neighbours within the tolerance chain up, yet
    # no value moves further than it (merging every such pair had collapsed whole stretches: a shift of 9.4 here)
    dense = -2000.0 + 5.0 * np.random.default_rng(3).normal(size=(4, 5000))
    tol = diagnostics.TIE_RTOL * np.abs(dense).max()
    merged = diagnostics.merge_rounding_ties(dense)
    assert 0 <= (dense - merged).min() and (dense - merged).max() <= tol  # each value to its group's smallest
    assert np.unique(merged).size > 2000  # still many groups: ~30 values within one tolerance of each other
    assert abs(merged.mean() - dense.mean()) <= tol


def test_a_group_cut_where_the_sum_rounds_stays_inside_the_values():
    """The cut of a run wider than the tolerance searched for ranked[i] + tol, which rounds: with three values just
    across 0.5 (tol 2**-18) the search went past the end, and diagnose raised an IndexError (a review). Each value
    still moves to its group's smallest, by at most tol, for every such case found around 0.5 and 1024."""
    x = np.array([0.4999998436984103, 0.5000017510470431, 0.500003658395676])
    assert diagnostics.merge_rounding_ties(x).tolist() == [x[0], x[0], x[2]]
    assert np.isfinite(diagnostics.diagnose(np.array([[*x, 0.1, 0.2], [0.3, 0.4, 0.2, 0.1, 0.3]])[:, :, None],
                                            ["e"])["rhat"]["e"])
    g = np.random.default_rng(0)
    for centre in (0.5, 1024.0):
        tol = diagnostics.TIE_RTOL * max(1.0, centre)
        for _ in range(300):
            v = np.sort(centre - g.uniform(0, tol) + g.uniform(0, 3 * tol, 12))
            merged = diagnostics.merge_rounding_ties(v)
            assert 0 <= (v - merged).min() and (v - merged).max() <= diagnostics.TIE_RTOL * max(1.0, v.max())


def test_diagnose_names_what_is_wrong_with_its_arguments():
    """A [chains, draws] array (the summary axis forgotten) had raised a bare IndexError, an unknown statistic a
    KeyError, and names of another count than the summaries were zipped silently: figures under the wrong name."""
    draws = np.random.default_rng(0).normal(size=(2, 50, 2))
    for args, message in (((draws[..., 0], ["e"]), r"draws must be an array \[chains, draws, summaries\], got "
                                                   r"shape \(2, 50\)"),
                          ((draws, ["e"]), "names has 1 entries, draws 2 summaries"),
                          ((draws, ["e", "f", "g"]), "names has 3 entries, draws 2 summaries"),
                          ((draws, ["e", "f"], ["ess"]), r"stats \['ess'\] are not among")):
        with pytest.raises(ValueError, match="^diagnose: " + message):
            diagnostics.diagnose(*args)


def test_one_huge_draw_does_not_hide_chains_that_have_not_mixed():
    """The tolerance had come from a summary's largest |value|: one draw of 5e7 set it to ~190, every other draw
    became one value, and two chains shifted by 0.8 sd from the other two read R-hat 1.0000, bulk ESS 400, enough for
    until_rhat and min_ess (a review). Its magnitude is now a quantile of |values|: ArviZ's figures, as without it."""
    g = np.random.default_rng(0)
    x = g.normal(size=(4, 100))
    x[2:] += 0.8
    x[0, 50] = 5e7
    d = diagnostics.diagnose(x[:, :, None], ["e"])
    assert d["rhat"]["e"] == pytest.approx(float(array_stats.rhat(x, method="rank")), rel=1e-9)
    assert d["rhat"]["e"] > 1.05 and d["ess_bulk"]["e"] < 100
    assert not diagnostics.meets(d, 1.01, 400)
    with pytest.raises(ValueError, match=r"rtol must be a finite number >= 0, got -1e-06"):
        diagnostics.merge_rounding_ties(x, rtol=-1e-6)  # (it had never returned)


def test_the_cached_diagnostics_follow_a_changed_burn_in():
    """result.diagnostics is computed once, but it had stayed the figures of the old burn-in after r.burn_in = 30 or
    dataclasses.replace(r, burn_in=30), beside a summary() of the new draws (a review)."""
    import dataclasses

    from mhfast.sampler import diagnostics_report

    r = mhfast.sample(TabularMLM.random(3, 3, seed=0), 3, chains=4, epochs=40, burn_in=2, seed=0, start="random")
    before = r.diagnostics
    assert r.diagnostics is before  # (cached)
    later = dataclasses.replace(r, burn_in=30)
    assert later.diagnostics == diagnostics_report.per_input(later) != before
    r.burn_in = 30
    assert r.diagnostics == later.diagnostics


def test_the_table_says_what_nan_means_where_it_shows_one():
    """Chains that never moved give NaN figures, flagged nan! under a legend that spoke only of thresholds (a
    review): the table says why a figure cannot be computed, and only where one shows."""
    moving = np.random.default_rng(0).normal(size=(2, 50, 1))
    for draws, has_nan in ((np.full((2, 50, 1), 3.0), True), (moving, False)):
        table = diagnostics.format_table([("input 1", diagnostics.summary_rows(
            draws, ["e"], diagnostics.diagnose(draws, ["e"])))], chains=2)
        assert ("nan!" in table) == has_nan
        assert table.endswith("nan = not computable: fewer than 4 draws per chain, a summary with one value in every "
                              "draw (chains that never moved), or NaN draws") == has_nan


def test_merging_once_gives_what_each_call_merging_gives():
    """adaptive.py merges an input's draws once (merge_ties) and asks varying() and diagnose() with
    ties_merged=True: merging again changes nothing, so the figures are those of the raw draws. Fails if the merge
    were not idempotent (a group's smallest value merged into the next) or a flag dropped the merge for raw draws."""
    g = np.random.default_rng(4)
    dense = -2000.0 + 5.0 * g.normal(size=(4, 3000, 1))  # groups chain up here: the case a second merge could move
    sticky = _sticky_chains(0)[:, :, None] + g.uniform(-4e-6, 4e-6, (4, _sticky_chains(0).shape[1], 1))
    flat = np.full_like(sticky, 3.0) + g.uniform(-1e-6, 1e-6, sticky.shape)  # rounding noise only: not varying
    for raw, names in ((dense, ["d"]), (np.concatenate([sticky, flat], axis=2), ["s", "f"])):
        once = diagnostics.merge_ties(raw)
        assert np.array_equal(diagnostics.merge_ties(once), once)
        assert np.array_equal(once[:, :, 0], diagnostics.merge_rounding_ties(raw[:, :, 0]))
        assert diagnostics.varying(once, ties_merged=True).tolist() == diagnostics.varying(raw).tolist()
        got, want = diagnostics.diagnose(once, names, ties_merged=True), diagnostics.diagnose(raw, names)
        for stat in diagnostics.STATS:  # the same numbers into ArviZ: equal, NaN where NaN (the flat summary's ESS)
            np.testing.assert_array_equal([got[stat][n] for n in names], [want[stat][n] for n in names])
    assert diagnostics.varying(raw).tolist() == [True, False]
    # the flag only skips the merge: given raw draws, ArviZ ranks the sticky trace's noise as movement (module doc)
    unmerged = diagnostics.diagnose(raw, names, ("ess_bulk",), ties_merged=True)["ess_bulk"]["s"]
    assert unmerged > 1.5 * diagnostics.diagnose(raw, names, ("ess_bulk",))["ess_bulk"]["s"]


def test_rhat_by_hand_sees_the_chain_axis():
    """The hand formula itself can fail: chains with different means give a large R-hat, and swapping the chain
    and draw axes changes it."""
    g = np.random.default_rng(0)
    x = g.normal(size=(4, 100)) + np.array([0, 0, 3, 3])[:, None]
    assert hand_rank_rhat(x) > 1.5 and hand_rank_rhat(x) == pytest.approx(float(array_stats.rhat(x)), rel=1e-12)
    assert hand_rank_rhat(x.T[:4]) != pytest.approx(hand_rank_rhat(x))


# ---------------------------------------------------------------------------- MCSE covers the exact mean
Z95 = 1.959964


def coverage_consistent(k: int, n: int, low: float = 0.92, high: float = 0.97, alpha: float = 1e-3) -> bool:
    """Whether ``k`` covers out of ``n`` are consistent with a true coverage in [low, high]: not below the
    ``alpha`` quantile of Binomial(n, low) nor above the ``1 - alpha`` quantile of Binomial(n, high)."""
    return stats.binom.cdf(k, n, low) > alpha and stats.binom.sf(k - 1, n, high) > alpha


@pytest.mark.slow  # 14 s on the 2-core CI machine
def test_mcse_interval_covers_the_exact_mean_energy():
    """n = 400 inputs of one call are 400 independent replicates (the counter RNG keys every draw by its input),
    each with 4 chains from random starts, 100 post-burn-in sweeps. Per replicate, mean +- 1.96 MCSE of E_local
    (ArviZ's MCSE, as result.diagnostics reports it) should cover the exact E_pi[E_local] (enumeration) 95% of the
    time; MCSE is itself estimated (ESS ~170 of 400 draws), so the true coverage sits a little under 0.95. The
    check: the number of covers k is consistent with a coverage in [0.92, 0.97] (binomial, alpha = 1e-3 on each
    side): a sampler at 0.95 fails it with probability < 1e-3 * 2 (P(Bin(400, .95) <= the .92 bound) is ~1e-5).
    The same data with a naive MCSE (sd / sqrt(draws), autocorrelation ignored) covers ~75% and must fail."""
    model = mixing_toy()
    template, free = masks(model, 3)
    states = enumerate_states(model, template, free)
    _, e_local = energies(model, states, free)
    exact = float((torch.softmax(-e_local, 0) * e_local).sum())
    n = 400
    r = mhfast.sample(model, init=template[None].repeat(n, 1), chains=4, epochs=120, burn_in=20, seed=3,
                      start="random", energy="local")
    covered = naive = 0
    for b in range(n):
        x = post_burn_in(r, b)[:, :, 1]
        mcse = r.diagnostics[b]["mcse_mean"]["e_local"]
        covered += abs(x.mean() - exact) <= Z95 * mcse
        naive += abs(x.mean() - exact) <= Z95 * x.std(ddof=1) / math.sqrt(x.size)
    assert coverage_consistent(covered, n), f"MCSE interval covers {covered}/{n}"
    assert not coverage_consistent(naive, n), f"the naive interval covers {naive}/{n}: the check cannot fail"


# ---------------------------------------------------------------------------- chains that cannot mix
def test_reducible_nucleus_is_flagged_and_never_converges():
    """agreeing_pair with top_p = 0.5 and uniform_mix = 0: {aa} and {bb} are closed classes (tests/ops/test_uniform_mix.py).
    Two chains start in each (per-chain init); they never move, so every projection's R-hat is infinite (chains
    constant and different) while aa and bb have the same energy (its R-hat is NaN: no variance at all)."""
    model = agreeing_pair()
    init = torch.tensor([[0, 0], [0, 0], [1, 1], [1, 1]])[None]
    kw = dict(chains=4, epochs=60, burn_in=5, seed=0, energy="local", top_p=0.5, uniform_mix=0.0)
    r = mhfast.sample(model, init=init, **kw)
    assert torch.equal(r.tokens, init), "the chains must stay in their classes"
    rhat = r.diagnostics[0]["rhat"]
    assert all(rhat[f"proj_{j}"] > 10 for j in range(traces.PROJECTIONS)), rhat
    stopped = mhfast.sample(model, init=init, until_rhat=1.01, **kw)
    assert stopped.converged.tolist() == [False] and stopped.epochs_run.tolist() == [60]
    # every chain at the same (greedy) start: nothing varies at all; R-hat NaN is not converged either
    same = mhfast.sample(model, 2, until_rhat=1.01, **kw)
    assert all(math.isnan(v) for v in same.diagnostics[0]["rhat"].values())
    assert same.converged.tolist() == [False] and same.epochs_run.tolist() == [60]
    # nor does min_ess alone pass them: ArviZ gives a constant trace an ESS of all its draws (and an MCSE of 0),
    # which the diagnostics report as NaN (until 2026-11-30 this run stopped as converged after 2 epochs)
    ess = mhfast.sample(model, 2, min_ess=50, **kw)
    assert ess.converged.tolist() == [False] and ess.epochs_run.tolist() == [60]
    d = ess.diagnostics[0]
    assert all(math.isnan(v) for stat in ("ess_bulk", "ess_tail", "mcse_mean") for v in d[stat].values()), d


def test_draws_are_copied_only_for_the_checks_that_are_due(monkeypatch):
    """Past 256 draws a check is due every draws // 128-th sweep, but every sweep had copied all inputs' draws
    before asking (O(D) per sweep, quadratic in the run): only a due check reads them now."""
    from mhfast.sampler.adaptive import check_due

    reads = []
    real = traces.TraceRecorder.input_draws
    monkeypatch.setattr(traces.TraceRecorder, "input_draws", lambda self, b, first: reads.append(b) or real(self, b,
                                                                                                           first))
    model = agreeing_pair()
    init = torch.tensor([[0, 0], [0, 0], [1, 1], [1, 1]])[None]  # closed classes: never converges
    r = mhfast.sample(model, init=init, chains=4, epochs=400, burn_in=5, seed=0, energy="local", top_p=0.5,
                      uniform_mix=0.0, until_rhat=1.01)
    assert r.converged.tolist() == [False]
    due = [d for d in range(diagnostics.MIN_DRAWS, 396) if check_due(d)]
    assert len(reads) == len(due) < 391 - diagnostics.MIN_DRAWS  # (not every sweep after burn-in: 395)


def test_two_equal_energy_modes_are_flagged_by_the_projections():
    model = coupled_modes()
    init = torch.tensor([[0] * 6] * 2 + [[1] * 6] * 2)[None]
    kw = dict(chains=4, epochs=300, burn_in=10, seed=0, energy="local")
    r = mhfast.sample(model, init=init, **kw)
    mostly_a = (r.tokens[0] == 0).float().mean(dim=1).tolist()
    assert mostly_a[0] > 0.5 and mostly_a[1] > 0.5 and mostly_a[2] < 0.5 and mostly_a[3] < 0.5, "chains crossed"
    rhat = r.diagnostics[0]["rhat"]
    assert rhat["e_local"] < 1.05, f"the energy traces mix (both modes have the same energies): {rhat}"
    assert min(rhat[f"proj_{j}"] for j in range(traces.PROJECTIONS)) > 2, rhat
    stopped = mhfast.sample(model, init=init, until_rhat=1.01, **kw)
    assert stopped.converged.tolist() == [False] and stopped.epochs_run.tolist() == [300]


# ---------------------------------------------------------------------------- until_rhat stops early, same chains
SAMPLERS = [dict(), dict(memo=0), dict(capture="static"), dict(sampler="block-mh", block_schedule=2),
            dict(sampler="gibbs"), dict(sampler="block-gibbs", block_schedule=2)]


@pytest.mark.slow  # 3-11 s on the 2-core CI machine
@pytest.mark.parametrize("kwargs", SAMPLERS, ids=["mh", "mh-memo0", "mh-static", "block-mh", "gibbs", "block-gibbs"])
def test_until_rhat_stops_each_input_early_with_the_same_chains(kwargs):
    """Four inputs (two lengths, padding) leave the batch at their own epochs; each one's tokens, best sample,
    traces and tallies equal, bit for bit, a run without the options of exactly that many epochs."""
    model = TabularMLM.random(4, (3, 4), seed=2, scale=0.5)
    m, p = model.mask_id, model.pad_id
    init = torch.tensor([[m, m, m, m], [m, m, m, p], [m, m, m, m], [m, m, m, p]])
    base = dict(chains=4, epochs=400, burn_in=5, seed=1, start="random", energy="local", **kwargs)
    r = mhfast.sample(model, init=init, until_rhat=1.03, min_ess=80, **base)
    assert r.converged.all() and bool((r.epochs_run < 400).all()), r.epochs_run
    assert len(set(r.epochs_run.tolist())) > 1, "inputs should stop at different epochs"
    assert len(r.e_raw) == int(r.epochs_run.max())
    for b in range(4):
        e = int(r.epochs_run[b])
        d = r.diagnostics[b]
        assert diagnostics.meets(d, 1.03, 80), d
        plain = mhfast.sample(model, init=init, **{**base, "epochs": e})
        assert torch.equal(plain.tokens[b], r.tokens[b]) and torch.equal(plain.best_tokens[b], r.best_tokens[b])
        assert torch.equal(plain.traces[b], r.traces[b, :, :e]) and bool(r.traces[b, :, e:].isnan().all())
        for key in ("position_proposals", "position_accepted", "position_changed"):
            assert torch.equal(getattr(plain, key)[b], getattr(r, key)[b]), key
        assert torch.equal(plain.chain_proposals[:, b], r.chain_proposals[:e, b])
        assert int(r.chain_proposals[e:, b].sum()) == 0, "a stopped input made proposals"


def test_stopped_inputs_keep_no_cache(monkeypatch):
    """The chains of an input that left are kept to read (the result), not to step: without the [M, T, D] cache of
    masked outputs. The first input to leave kept the live state, cache and all, to the end of the run."""
    from mhfast.sampler import adaptive

    kept = []
    after_epoch = adaptive.RunMonitor.after_epoch

    def spy(self, *args, **kwargs):
        out = after_epoch(self, *args, **kwargs)
        if self.full is not None:
            kept.append(self.full.cache)
        return out
    monkeypatch.setattr(adaptive.RunMonitor, "after_epoch", spy)
    model = TabularMLM.random(4, (3, 4), seed=2, scale=0.5)
    m, p = model.mask_id, model.pad_id
    init = torch.tensor([[m, m, m, m], [m, m, m, p], [m, m, m, m], [m, m, m, p]])
    r = mhfast.sample(model, init=init, chains=4, epochs=400, burn_in=5, seed=1, start="random", energy="local",
                      until_rhat=1.05)
    assert len(set(r.epochs_run.tolist())) > 1 and kept and all(cache is None for cache in kept)


def test_until_rhat_alone_and_min_ess_alone():
    model = mixing_toy(scale=0.3)
    r = mhfast.sample(model, 3, chains=4, epochs=300, burn_in=5, seed=0, start="random", until_rhat=1.05)
    assert r.converged.tolist() == [True] and int(r.epochs_run[0]) < 300
    assert all(v < 1.05 for v in r.diagnostics[0]["rhat"].values())
    r = mhfast.sample(model, 3, chains=4, epochs=300, burn_in=5, seed=0, start="random", min_ess=200)
    assert r.converged.tolist() == [True] and int(r.epochs_run[0]) < 300
    assert all(v >= 200 for key in ("ess_bulk", "ess_tail") for v in r.diagnostics[0][key].values())
    unbounded = mhfast.sample(model, 3, chains=4, epochs=30, burn_in=5, seed=0, start="random", min_ess=1e9)
    assert unbounded.converged.tolist() == [False] and unbounded.epochs_run.tolist() == [30]
    assert mhfast.sample(model, 3, chains=2, epochs=3, burn_in=1).converged is None  # no criteria: no verdict


def test_a_summary_constant_by_design_does_not_block_the_stop():
    """A term that is the same for every state of an input (a length penalty) has NaN R-hat; it is left out of the
    check while another summary varies (it blocked until_rhat to the cap, silently). The stop is the one of the run
    without the term, and the report still shows the term's NaN."""
    model = mixing_toy(scale=0.3)

    def length(tokens):
        return (tokens != model.pad_id).sum(1).float()

    kw = dict(chains=4, epochs=300, burn_in=5, seed=0, start="random", until_rhat=1.05)
    plain = mhfast.sample(model, 3, **kw)
    termed = mhfast.sample(model, 3, extra_energy=[(length, 0.1)], **kw)
    assert termed.converged.tolist() == [True] and termed.epochs_run.tolist() == plain.epochs_run.tolist()
    assert math.isnan(termed.diagnostics[0]["rhat"]["length"])


@pytest.mark.parametrize("names", [["e_raw"], ["proj_0"], ["proj", "proj"], ["e_local", "x"]])
def test_a_term_named_like_a_traced_summary_is_refused(names):
    """The traces and diagnostics are keyed by name: a term named e_raw / e_local / proj_N (also by the _0, _1
    numbering of two terms of one name) would hide that summary from the report and from until_rhat."""
    def term(name):
        f = lambda tokens: torch.zeros(tokens.shape[0])  # noqa: E731
        f.name = name
        return f

    with pytest.raises(ValueError, match="extra_energy: a term is named .* the name of a traced summary"):
        mhfast.sample(mixing_toy(), 3, chains=2, epochs=2, burn_in=1, extra_energy=[term(n) for n in names])
    assert mhfast.energy(mixing_toy(), torch.tensor([[0, 1, 2]]), extra_energy=[term(n) for n in names]).terms \
        .shape == (1, len(names))  # scoring traces nothing: any name


def test_terms_numbered_apart_never_share_a_name():
    """Terms named x, x and x_0 were numbered x_0, x_1, x_0: two traced summaries under one name, one of them
    missing from the report. Every term now has a name of its own."""
    def term(name):
        f = lambda tokens: torch.zeros(tokens.shape[0])  # noqa: E731
        f.name = name
        return f

    r = mhfast.sample(mixing_toy(), 3, chains=2, epochs=4, burn_in=1, extra_energy=[term("x"), term("x"), term("x_0")])
    assert r.term_names == ["x_1", "x_2", "x_0"] and len(set(r.trace_names)) == len(r.trace_names)
    assert len(r.diagnostics[0]["rhat"]) == len(r.trace_names)


def test_length_beam_keeps_the_chosen_candidates_diagnostics():
    from mhfast.models.tabular import ConditionalTabularMLM

    model = ConditionalTabularMLM.random(num_tokens=3, lengths=(2, 3, 4), num_sources=3, seed=5)
    r = mhfast.sample(model, source=[0, 1, 2], length_beam=2, chains=3, epochs=40, burn_in=5, seed=0,
                      until_rhat=1.1)
    assert r.traces.shape[:2] == (3, 3) and r.epochs_run.shape == (3,) and r.converged.shape == (3,)
    assert len(r.diagnostics) == 3 and r.position_proposals.shape[:2] == (3, 3)


# ---------------------------------------------------------------------------- traces and tallies
def test_traces_are_the_states_summaries():
    model = mixing_toy()
    r = mhfast.sample(model, 3, chains=3, epochs=9, burn_in=2, seed=4, trace_every=3, start="sampled")
    assert r.trace_epochs.tolist() == [2, 5, 8] and r.traces.shape == (1, 3, 3, 5)
    last = r.traces[0, :, -1]
    assert torch.equal(last[:, 0], r.energy_raw[0]) and torch.equal(last[:, 1], r.energy_local[0])
    assert torch.equal(last[:, 2:], traces.projections(r.tokens[0], torch.ones(3, 3, dtype=torch.bool), 5))


def test_projections_are_fixed_functions_of_position_and_token():
    x = torch.tensor([[0, 1, 2], [2, 1, 0], [0, 1, 2]])
    free = torch.ones(3, 3, dtype=torch.bool)
    p = traces.projections(x, free, 3)
    assert torch.equal(p[0], p[2]) and not torch.equal(p[0], p[1])
    # a sum over the free positions of one weight per (position, token): position by position, the same total
    one_hot = torch.eye(3, dtype=torch.bool)
    parts = torch.stack([traces.projections(x, one_hot[t].expand(3, 3), 3) for t in range(3)])
    torch.testing.assert_close(parts.sum(0), p)
    assert torch.equal(traces.projections(x, free, 3, mhfast.reference.counter_uniforms), p)  # either backend's op
    g = torch.Generator().manual_seed(0)  # standard normal weights: many random one-token sequences
    many = traces.projections(torch.randint(0, 1000, (20000, 1), generator=g), torch.ones(20000, 1, dtype=torch.bool),
                              1000)
    assert abs(float(many.mean())) < 0.05 and abs(float(many.std()) - 1) < 0.05


@pytest.mark.parametrize("sampler", ["mh", "gibbs", "block-mh", "block-gibbs"])
def test_position_tallies_agree_with_the_chain_counts(sampler):
    model = TabularMLM.random(4, (3, 5), seed=11, scale=1.5)
    m, p = model.mask_id, model.pad_id
    init = torch.tensor([[m, m, m, m, m], [0, m, 2, m, 1], [m, 1, m, p, p]])
    free = torch.tensor([[True] * 5, [False, True, True, True, False], [True, True, True, False, False]])
    kw = dict(block_schedule=2) if sampler.startswith("block") else {}
    r = mhfast.sample(model, init=init, free_positions=free, sampler=sampler, chains=3, epochs=12, burn_in=4, seed=2,
                      **kw)
    post = 12 - 4
    # every free position is proposed once per sweep, in every kernel; nothing else is
    assert torch.equal(r.position_proposals, free[:, None, :].expand(-1, 3, -1).long() * post)
    assert bool((r.position_changed <= r.position_accepted).all() and (r.position_accepted <= r.position_proposals).all())
    chain = lambda counts: counts[4:].permute(1, 2, 0).sum(-1)  # noqa: E731  Long[B, C] after burn-in
    if sampler in ("mh", "gibbs"):  # one position per proposal: the per-position sums are the chain counts
        assert torch.equal(r.position_accepted.sum(-1), chain(r.chain_accepted))
        assert torch.equal(r.position_changed.sum(-1), chain(r.chain_novel))
    if sampler.endswith("gibbs"):
        assert torch.equal(r.position_accepted, r.position_proposals)
    acc, changed = r.position_rates()
    assert acc.shape == (3, 5) and bool(acc[~free].isnan().all()) and bool((changed[free] <= acc[free]).all())


# ---------------------------------------------------------------------------- dispersed starts
def _start_tokens(model, cfg_kwargs, n: int):
    """The starts of n chains of one all-mask input (no step: the function the sampler calls)."""
    from mhfast.sampler.options import config_from_kwargs
    from mhfast.sampler.problem import build_problem
    from mhfast.runtime.runner import ModelRunner

    cfg = config_from_kwargs({"chains": n, **cfg_kwargs})
    problem = build_problem(model, cfg, length=2)
    return starts.initial_tokens(ModelRunner(model, None, 65536), problem, cfg, mhfast.reference.counter_uniforms)


def test_random_and_sampled_starts_follow_their_distributions():
    model = TabularMLM.random(num_tokens=4, length=2, seed=3, scale=2.0)
    n = 8000
    greedy = _start_tokens(model, {}, 5)
    assert bool((greedy == greedy[0]).all()), "greedy: every chain at the same start"
    for start in ("random", "sampled"):
        x = _start_tokens(model, {"start": start, "proposal_temperature": 0.7}, n)
        assert bool((x < 4).all()), "a special id was drawn"
        for t in range(2):
            if start == "random":
                expected = torch.full((4,), 0.25)
            else:  # the warm start's conditional (all masks), at the proposal temperature
                logits = model.masked_logits(torch.full((1, 2), model.mask_id), torch.tensor([t]))[0, :4]
                expected = torch.softmax(logits.double() / 0.7, 0)
            counts = torch.bincount(x[:, t], minlength=4).double()
            _, pval = stats.chisquare(counts.numpy(), (expected.double() * n).numpy())
            assert pval > 1e-4, f"{start} start, position {t}: chi-square p = {pval:.2e}"
        # the joint of the two positions (16 cells): independent draws, each from its own distribution (one
        # uniform per chain for all its positions kept every marginal and made every chain "aa", "bb", ...)
        if start == "random":
            joint = torch.full((16,), 1 / 16)
        else:  # both positions are drawn from the all-mask row's conditionals, independently
            rows = torch.full((2, 2), model.mask_id)
            logits = model.masked_logits(rows, torch.tensor([0, 1]))[:, :4].double() / 0.7
            joint = torch.outer(torch.softmax(logits[0], 0), torch.softmax(logits[1], 0)).flatten()
        counts = torch.bincount(x[:, 0] * 4 + x[:, 1], minlength=16).double()
        _, pval = stats.chisquare(counts.numpy(), (joint * n).numpy())
        assert pval > 1e-4, f"{start} start, joint of the positions: chi-square p = {pval:.2e}"


def test_per_chain_init_and_sampled_masks():
    model = agreeing_pair()  # reducible at top_p 0.5: chains stay where they start
    init = torch.tensor([[0, 0], [1, 1], [0, 0], [1, 1]])[None]
    r = mhfast.sample(model, init=init, chains=4, epochs=3, burn_in=0, top_p=0.5, uniform_mix=0.0)
    assert torch.equal(r.tokens, init)
    m = model.mask_id
    masked = torch.tensor([[0, m], [1, m], [m, m], [m, m]])[None]
    r = mhfast.sample(model, init=masked, chains=4, epochs=1, burn_in=0, start="sampled", seed=0)
    assert r.tokens.shape == (1, 4, 2) and bool((r.tokens < 2).all())


def test_a_sampled_start_needs_a_mask_to_draw_in_every_input():
    """start="sampled" draws only masked free positions: an input given without masks had all its chains start at
    its given row, the option doing nothing (R-hat then compares chains that never differed at the start). An
    error naming the input, per input: a batch with one masked input does not pass an unmasked one."""
    model = agreeing_pair()
    m = model.mask_id
    for init in (torch.tensor([[0, m], [1, 0]]), torch.tensor([[[0, m], [m, 1]], [[1, 0], [0, 0]]])):
        with pytest.raises(ValueError, match=r"^mhfast.sample: start='sampled' draws the masked free positions of "
                                             r"each input, and input 1 has none: .* Use start='random'"):
            mhfast.sample(model, init=init, chains=2, epochs=1, burn_in=0, start="sampled")
    # a per-chain init whose chain 1 holds the input's only mask is drawn: fine
    mhfast.sample(model, init=torch.tensor([[[0, 1], [m, 1]]]), chains=2, epochs=1, burn_in=0, start="sampled")


def test_a_sampled_start_at_a_tiny_proposal_temperature_draws_the_argmax():
    """logits / 1e-38 overflowed float32 (inf, then a NaN softmax), and the start drew token 0, here the pad id:
    [2, 0, 0, 3] instead of [2, 3, 3, 3]. The division is in float64 now."""
    from mhfast.runtime.backend import get_backend
    from mhfast.runtime.runner import ModelRunner
    from mhfast.sampler import api, options

    V, L = 6, 4
    table = torch.zeros(V ** L, L, V)
    table[..., 2], table[..., 3], table[..., 4] = 10.0, 20.0, -1.0
    model = TabularMLM(table, mask_id=5, pad_id=0, special_ids=(1,))
    cfg = options.config_from_kwargs(dict(chains=3, start="sampled", proposal_temperature=1e-38))
    problem, chain_rows = api._problem(model, cfg, init=torch.tensor([[2, 5, 5, 3]]))
    tokens = starts.initial_tokens(ModelRunner(model, None, 65536), problem, cfg,
                                   get_backend("reference").counter_uniforms, chain_rows)
    assert tokens.tolist() == [[2, 3, 3, 3]] * 3
    with pytest.raises(ValueError, match="mhfast.sample: a start position has no token to draw"):
        starts._draw(torch.full((2, 3), float("-inf")), torch.tensor([0.5, 0.5]))


# ---------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("kwargs,message", [
    (dict(until_rhat=1.0), "until_rhat must be a finite number > 1, got 1.0"),
    (dict(until_rhat=float("nan")), "until_rhat must be"),
    (dict(until_rhat="1.01"), "until_rhat must be"),
    (dict(min_ess=-1), "min_ess must be a finite number >= 0, got -1"),
    (dict(trace_every=0), "trace_every must be an int >= 1, got 0"),
    (dict(trace_every=1.5), "trace_every must be an int >= 1"),
    (dict(start="dispersed"), "start must be one of 'greedy', 'sampled', 'random'"),
    (dict(until_rhat=1.01, chains=1), "until_rhat needs chains >= 2"),
    (dict(min_ess=10, chains=1), "min_ess needs chains >= 2"),
    (dict(until_rhat=1.01, anneal=0.1), "until_rhat needs a fixed target"),
    (dict(until_rhat=1.01, force_accept_epochs=3, burn_in=2), "until_rhat needs force_accept_epochs"),
    # fewer draws than ArviZ's 4 within the cap: it could never be met (a review: it ran all epochs, "not converged")
    (dict(min_ess=5, epochs=5, burn_in=5), "min_ess needs at least 4 traced sweeps after burn_in (5) within epochs "
                                           "(5), got 0"),
    (dict(until_rhat=1.1, epochs=9, burn_in=2, trace_every=2), "until_rhat needs at least 4 traced sweeps after "
                                                              "burn_in (2) within epochs (9), got 3"),
])
def test_bad_options_name_the_argument(kwargs, message):
    with pytest.raises(ValueError, match="mhfast.sample: " + message.replace("(", "\\(").replace(")", "\\)")
                       .replace("[", "\\[").replace("]", "\\]").replace("+", "\\+")):
        mhfast.sample(mixing_toy(), 3, **{"chains": 2, "epochs": 4, "burn_in": 2, **kwargs})


def test_bad_per_chain_init_names_init():
    model = TabularMLM.random(4, (3, 4), seed=2)
    m, p = model.mask_id, model.pad_id
    sample = lambda init, **kw: mhfast.sample(model, init=init, chains=2, epochs=2, burn_in=1, **kw)  # noqa: E731
    with pytest.raises(ValueError, match=r"init of shape \[B, C, T\] must have .* C = chains \(2\)"):
        sample(torch.full((1, 3, 4), m))
    with pytest.raises(ValueError, match=r"init must have shape \[B, T\] \(one start per input\) or \[B, chains, T\]"):
        sample(torch.full((1, 2, 3, 4), m))
    with pytest.raises(ValueError, match=r"init must have shape \[B, T\]"):
        sample(torch.full((4,), m))
    with pytest.raises(ValueError, match="chain 1 of input 0 has its padding elsewhere"):
        sample(torch.tensor([[[m, m, m, m], [m, m, m, p]]]))
    with pytest.raises(ValueError, match="chain 1 of input 0 differs from chain 0 at a fixed position"):
        sample(torch.tensor([[[0, 1, m, m], [1, 1, m, m]]]), free_positions=torch.tensor([[False, False, True, True]]))
    with pytest.raises(ValueError, match="contains token id 9"):
        sample(torch.tensor([[[0, 1, m, m], [0, 9, m, m]]]))
    with pytest.raises(ValueError, match="start='random' .* cannot be combined with a per-chain init"):
        sample(torch.full((1, 2, 4), m), start="random")
    with pytest.raises(TypeError, match="init must be int64"):
        sample(torch.full((1, 2, 4), float(m)))


def test_diagnostics_need_two_chains():
    r = mhfast.sample(mixing_toy(), 3, chains=1, epochs=10, burn_in=2)
    with pytest.raises(ValueError, match="diagnostics need chains >= 2"):
        r.diagnostics
    with pytest.raises(ValueError, match="diagnostics need chains >= 2"):
        r.summary()


def test_without_arviz_stats_the_error_names_the_extra(monkeypatch):
    real_import = builtins.__import__

    def no_arviz(name, *args, **kwargs):
        if name.startswith("arviz"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_arviz)
    r = mhfast.sample(mixing_toy(), 3, chains=2, epochs=6, burn_in=1)
    with pytest.raises(ImportError, match=r"pip install \"mhfast\[diagnostics\]\""):
        r.diagnostics
    with pytest.raises(ValueError, match=r"until_rhat .*mhfast\[diagnostics\]"):
        mhfast.sample(mixing_toy(), 3, chains=2, epochs=6, burn_in=1, until_rhat=1.01)
    with pytest.raises(ImportError, match=r"to_arviz needs ArviZ and xarray: pip install \"mhfast\[arviz\]\""):
        r.to_arviz()


def test_arviz_dict_holds_the_post_burn_in_traces():
    r = mhfast.sample(mixing_toy(), init=torch.full((2, 3), 3), chains=3, epochs=8, burn_in=3, seed=1)
    d = r.arviz_dict()
    assert set(d["posterior"]) == set(r.trace_names) and d["coords"] == {"input": [0, 1]}
    assert d["posterior"]["e_local"].shape == (3, 5, 2)  # chain, draw, input
    assert np.array_equal(d["posterior"]["e_local"][:, :, 1], r.traces[1, :, 3:, 1].double().numpy())
    acc = d["sample_stats"]["acceptance_rate"]
    assert acc.shape == (3, 5, 2) and np.allclose(
        acc[:, :, 0], (r.chain_accepted[3:, 0] / r.chain_proposals[3:, 0]).T.double().numpy())
