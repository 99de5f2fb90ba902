"""``result.to_arviz()`` against the real ArviZ stack (arviz-base's DataTree, arviz-stats on xarray): the data
a user plots is the traces mhfast recorded, and ArviZ's own diagnostics of it are mhfast's ``result.diagnostics``.

Needs the ``arviz`` extra (arviz-base, xarray, xarray-einstats), which the test environment installs
(scripts/constraints.txt); a missing package is a failure here, not a skip.
"""
from __future__ import annotations

import arviz_base  # noqa: F401  (required, not skipped: see the module doc)
import arviz_stats as azs
import numpy as np
import pytest
import torch

import mhfast
from mhfast.models.tabular import TabularMLM
from mhfast.sampler.diagnostics import TAIL_PROB


@pytest.fixture(scope="module")
def result():
    # Two inputs, four chains from random starts, enough draws for every diagnostic; burn-in excluded.
    model = TabularMLM.random(num_tokens=4, length=3, seed=0)
    return mhfast.sample(model, init=torch.zeros(2, 3, dtype=torch.long), chains=4, epochs=40, burn_in=6, seed=1,
                         start="random")


def test_posterior_holds_the_post_burn_in_traces(result):
    dt = result.to_arviz()
    post = dt["posterior"]
    assert set(post.data_vars) == set(result.trace_names)
    keep = (result.trace_epochs >= result.burn_in).nonzero().flatten()
    for s, name in enumerate(result.trace_names):
        da = post[name]
        assert da.dims == ("chain", "draw", "input")
        want = result.traces[:, :, keep, s].double().permute(1, 2, 0).numpy()  # [C, D, B]
        np.testing.assert_array_equal(da.values, want)
    assert post.sizes == {"chain": 4, "draw": keep.numel(), "input": 2}


def test_sample_stats_share_the_input_dimension(result):
    stats = result.to_arviz()["sample_stats"]
    for name in ("acceptance_rate", "novel_rate"):
        assert stats[name].dims == ("chain", "draw", "input")
        v = stats[name].values
        assert np.all((v[~np.isnan(v)] >= 0) & (v[~np.isnan(v)] <= 1))


@pytest.mark.parametrize("stat", ["rhat", "ess_bulk", "ess_tail", "mcse_mean"])
def test_arviz_diagnostics_of_the_datatree_equal_result_diagnostics(result, stat):
    dt = result.to_arviz()
    ours = {name: [d[stat][name] for d in result.diagnostics] for name in result.trace_names}
    if stat == "rhat":
        theirs = azs.rhat(dt, method="rank")
    elif stat == "mcse_mean":
        theirs = azs.mcse(dt, method="mean")
    elif stat == "ess_bulk":
        theirs = azs.ess(dt, method="bulk")
    else:  # Vehtari et al.'s 5% / 95% quantiles (ArviZ 1.x's default reads rcParams["stats.ci_prob"] instead)
        theirs = azs.ess(dt, method="tail", prob=TAIL_PROB)
    for name in result.trace_names:
        np.testing.assert_allclose(np.asarray(theirs[name].values), ours[name], rtol=1e-12, err_msg=name)


def test_summary_table_agrees_with_arviz_summary(result):
    table = azs.summary(result.to_arviz(), kind="diagnostics")
    for b, diag in enumerate(result.diagnostics):
        for name in ("e_raw", "e_local"):
            row = table.loc[f"{name}[{b}]"]
            assert row["r_hat"] == pytest.approx(diag["rhat"][name], abs=0.006)  # arviz rounds to 2 decimals
            assert row["ess_bulk"] == pytest.approx(diag["ess_bulk"][name], abs=0.6)
