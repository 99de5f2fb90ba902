"""Delayed acceptance for block MH (option delayed with sampler="block-mh"; mhfast.sampler.moves.block_delayed).

Checks: enumeration on tabular models (the TV bound of tests/exact_checks.py) for both energies, blocks of 2 and
3, a schedule mixing one-position blocks (their own term from the cache) with larger ones, an extra energy term,
tempering, a poor surrogate (window 0: the block's own terms only) and an exact one (a window covering every
position: stage 2 accepts every survivor and the acceptance is plain block MH's); forced-accept epochs.
"""
from __future__ import annotations

import pytest
import torch

import mhfast
from mhfast.models.tabular import TabularMLM

from exact_checks import N_CHAINS, empirical, enumerate_states, masks, run_and_compare, target_distribution, \
    tv_and_bound

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# T = 4: a window of 1 around a block of 2 covers nearly everything, so the screens are mostly window 0 (the
# block's own terms; the other positions' rows are what stage 1 saves)
CASES = [
    ("raw-block2-window0", dict(scale=1.2), dict(energy="raw", block_schedule=2, delayed="window:0")),
    ("local-block2-window0", dict(features=True, scale=1.2), dict(energy="local", block_schedule=2,
                                                                  delayed="window:0")),
    ("local-block3-window0", dict(), dict(energy="local", block_schedule=3, delayed="window:0")),
    ("raw-schedule-window1-coupled", dict(scale=1.2), dict(energy="raw", block_schedule=lambda e: 1 + e % 3,
                                                          delayed="window:1", tau=2.0)),
    ("raw-block2-window0-tempered", dict(scale=1.2), dict(energy="raw", block_schedule=2, delayed="window:0",
                                                         tempering=[1.0, 2.5])),
    ("local-block2-exact-window", dict(), dict(energy="local", block_schedule=2, delayed="window:4")),
]


@pytest.mark.parametrize("name,model_kwargs,kwargs", CASES, ids=[c[0] for c in CASES])
def test_block_delayed_matches_enumeration(name, model_kwargs, kwargs, device):
    model = TabularMLM.random(num_tokens=3, length=4, seed=11, **{"scale": 0.5, **model_kwargs})
    template, free = masks(model, 4)
    # 100 epochs: a block move accepts less often than a single-site one (0.2-0.3 here), so it mixes slower
    tv, bound, result = run_and_compare(device, model, template, free, epochs=100, burn_in=10, seed=1,
                                        sampler="block-mh", **kwargs)
    assert tv < bound, f"{name}: TV {tv:.4f} >= bound {bound:.4f}"
    assert 0 < result.delayed_accepted <= result.delayed_passed <= result.delayed_tested
    if "exact" not in name:  # a real screen: some proposals stopped at stage 1, their other rows never forwarded
        assert result.delayed_passed < result.delayed_tested and result.delayed_rows_saved > 0
    if "exact" in name:  # dE~ = dE: stage 2 accepts every survivor, nothing is saved
        assert result.delayed_accepted == result.delayed_passed and result.delayed_rows_saved == 0


def _term(tokens: torch.Tensor) -> torch.Tensor:
    return (tokens[:, 0] == tokens[:, -1]).float() * 2.0


def test_block_delayed_with_extra_energy_matches_enumeration(device):
    model = TabularMLM.random(num_tokens=3, length=4, seed=7, scale=0.5)
    template, free = masks(model, 4)
    states = enumerate_states(model, template, free)
    p_model = target_distribution(model, states, torch.ones(4, dtype=torch.bool), "local", 1.0)
    weight = torch.softmax(torch.log(p_model) - _term(states).double(), 0)
    result = mhfast.sample(model, init=template[None], free_positions=free[None], chains=N_CHAINS, energy="local",
                           epochs=100, burn_in=10, seed=3, sampler="block-mh", block_schedule=2, delayed="window:0",
                           extra_energy=[_term], device=device)
    tv, bound = tv_and_bound(weight, empirical(states, result.tokens[0].cpu()), N_CHAINS)
    assert tv < bound, f"TV {tv:.4f} >= bound {bound:.4f}"
    assert result.delayed_passed < result.delayed_tested


def test_exact_window_accepts_as_plain_block_mh():
    model = TabularMLM.random(num_tokens=4, length=6, seed=2, scale=0.8)
    kw = dict(chains=2000, epochs=6, burn_in=0, seed=5, energy="raw", sampler="block-mh", block_schedule=2)
    plain = mhfast.sample(model, 6, **kw)
    exact = mhfast.sample(model, 6, delayed="window:6", **kw)
    assert exact.delayed_accepted == exact.delayed_passed > 0 and exact.delayed_rows_saved == 0
    a, b = float(plain.acceptance_rate.mean()), float(exact.acceptance_rate.mean())
    n = plain.proposals
    assert abs(a - b) < 6 * (a * (1 - a) / n) ** 0.5 * 2 ** 0.5 * 3, (a, b)  # x3: steps of a chain correlate


def test_block_forced_accept_epochs_skip_both_tests():
    model = TabularMLM.random(num_tokens=4, length=8, seed=3)
    r = mhfast.sample(model, 8, sampler="block-mh", block_schedule=2, chains=3, epochs=2, burn_in=0,
                      force_accept_epochs=2, delayed="window:1")
    assert r.delayed_tested == 0 and float(r.acceptance_rate.min()) == 1.0


def test_block_gibbs_refuses_delayed():
    model = TabularMLM.random(num_tokens=3, length=3, seed=0)
    with pytest.raises(ValueError, match="delayed.*block-gibbs"):
        mhfast.sample(model, 3, sampler="block-gibbs", chains=2, epochs=1, burn_in=0, delayed="window:1")
