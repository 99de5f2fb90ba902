"""Option delayed_min_temperature: delayed acceptance acts only in the epochs whose target temperature is at least
it (mhfast.sampler.moves.delayed.DelayedAcceptance.acts); a colder epoch runs plain MH's step.

Checks: an annealed run that crosses the bound does delayed acceptance's tests in exactly its warm epochs (the
counts of a run stopped there), single-site and block MH, with exact committed energies after the switch; the
enumerated target after a crossing, with the memo, an extra energy term and early rejection's partial entries
carried over; auto's resolution end to end (annealed: off below 0.25; a fixed target, tempered too: every epoch);
bad values, and a bound that would not split the epochs (never acting, or acting in all), are clear errors.
"""
from __future__ import annotations

import pytest
import torch

import mhfast
from mhfast.models.tabular import TabularMLM
from mhfast.sampler import options

from exact_checks import N_CHAINS, assert_energies_exact, empirical, ends_term, energies, enumerate_states, masks, \
    sample, tv_and_bound

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _same_chains(a, b) -> bool:
    return torch.equal(a.tokens, b.tokens) and torch.equal(a.energy, b.energy) and a.model_rows == b.model_rows


@pytest.mark.parametrize("sampler,delayed", [("mh", "window:1"), ("mh", "influence:2"), ("block-mh", "window:1")])
def test_an_annealed_run_screens_in_its_warm_epochs_only(sampler, delayed, device):
    """Annealed 1.0, 0.8, 0.6, 0.4, 0.2 with the bound 0.5: the first three epochs are delayed acceptance's. The
    same run stopped after three epochs made the same tests (the epochs before the crossing are the same numbers),
    the run with delayed acceptance in every epoch made more, and the committed energies stay exact."""
    model = TabularMLM.random(num_tokens=4, length=8, seed=4, scale=1.0)
    kw = dict(chains=6, burn_in=1, seed=3, energy="raw", anneal=0.2, delayed=delayed, sampler=sampler, device=device)
    if sampler == "block-mh":  # (its default block sizes shrink over the run's epochs: the same sizes in both runs)
        kw["block_schedule"] = 2
    switched = mhfast.sample(model, 8, epochs=5, delayed_min_temperature=0.5, **kw)
    warm = mhfast.sample(model, 8, epochs=3, **kw)
    always = mhfast.sample(model, 8, epochs=5, **kw)
    assert switched.delayed_tested == warm.delayed_tested > 0
    assert (switched.delayed_passed, switched.delayed_accepted) == (warm.delayed_passed, warm.delayed_accepted)
    assert always.delayed_tested > switched.delayed_tested
    assert_energies_exact(model, switched, "raw")


@pytest.mark.parametrize("energy,delayed", [("raw", "window:1"), ("local", "window:1"), ("local", "early:1")])
def test_enumerated_target_after_the_switch(energy, delayed, device):
    """Annealed from 1.0 to a floor of 0.5 with the bound 0.7: delayed acceptance (and the memo, with an extra
    energy term) while warm, plain MH's step at the floor, whose target exp(-(E + extra) / 0.5) the chains must
    sample. Early rejection's remembered partial terms are completed by the plain step."""
    model = TabularMLM.random(num_tokens=3, length=4, seed=7, scale=0.5)
    template, free = masks(model, 4)
    states = enumerate_states(model, template, free)
    energy_mask = ~torch.isin(template, torch.tensor(sorted(set(model.special_ids) - {model.mask_id})))
    e_raw, e_local = energies(model, states, energy_mask)
    weight = torch.softmax(-((e_raw if energy == "raw" else e_local) + ends_term(states).double()) / 0.5, 0)
    result = sample(device, model, init=template[None], free_positions=free[None], chains=N_CHAINS, energy=energy,
                    target_temperature=1.0, anneal=0.1, min_target_temperature=0.5, epochs=150, burn_in=10, seed=5,
                    delayed=delayed, delayed_min_temperature=0.7, extra_energy=[ends_term])
    tv, bound = tv_and_bound(weight, empirical(states, result.tokens[0]), N_CHAINS)
    assert tv < bound, f"TV {tv:.4f} >= bound {bound:.4f}"
    assert result.delayed_tested > 0 and result.memo_hits > 0


def test_auto_switches_off_below_a_quarter_when_annealing():
    """delayed='auto' in an annealed run is influence:2 with delayed_min_temperature 0.25
    (options.AUTO_DELAYED_MIN_TEMPERATURE): the same chains as those options spelt out; a named delayed keeps every
    epoch unless told otherwise. At a fixed target, tempered or not, auto acts in every epoch, however cold."""
    from exact_checks import tiny_bert

    model = tiny_bert()
    kw = dict(length=10, chains=3, epochs=6, burn_in=1, seed=4, energy="local", anneal=0.2)  # 1.0 ... 0.4, 0.2, 0.05
    auto = mhfast.sample(model, delayed="auto", **kw)
    spelt = mhfast.sample(model, delayed="influence:2", delayed_min_temperature=0.25, **kw)
    assert auto.delayed_tested > 0 and _same_chains(auto, spelt) and auto.delayed_tested == spelt.delayed_tested
    named = mhfast.sample(model, delayed="influence:2", **kw)
    assert named.delayed_tested > auto.delayed_tested
    annealed = options.config_from_kwargs({"delayed": "auto", "anneal": 0.1})
    assert options.resolved_delayed_min_temperature(annealed) == options.AUTO_DELAYED_MIN_TEMPERATURE == 0.25
    assert options.resolved_delayed_min_temperature(options.config_from_kwargs({"delayed": "auto"})) == 0
    fixed = dict(length=10, chains=2, epochs=3, burn_in=1, seed=4, energy="local", target_temperature=0.1)
    for extra in ({}, {"tempering": 3}):
        cold_auto, cold_named = (mhfast.sample(model, **fixed, **extra, delayed=d) for d in ("auto", "influence:2"))
        assert cold_auto.delayed_tested > 0 and _same_chains(cold_auto, cold_named)
        assert cold_auto.delayed_tested == cold_named.delayed_tested


@pytest.mark.parametrize("kwargs,words", [
    (dict(delayed="window:1", delayed_min_temperature=-0.1), ["delayed_min_temperature", "-0.1"]),
    (dict(delayed="window:1", delayed_min_temperature=float("nan")), ["delayed_min_temperature", "nan"]),
    (dict(delayed="window:1", delayed_min_temperature="warm"), ["delayed_min_temperature", "'warm'"]),
    (dict(delayed="window:1", delayed_min_temperature=True), ["delayed_min_temperature", "True"]),
    (dict(delayed_min_temperature=0.5), ["delayed_min_temperature", "no effect", "delayed"]),
    (dict(delayed="window:1", delayed_min_temperature=1.5), ["delayed_min_temperature", "above", "never act"]),
    (dict(delayed="window:1", delayed_min_temperature=0.5), ["delayed_min_temperature", "no effect", "coldest: 1"]),
    (dict(delayed="window:1", anneal=0.1, epochs=3, delayed_min_temperature=0.8),
     ["delayed_min_temperature", "no effect", "coldest: 0.8"]),
    (dict(delayed="window:1", tempering=2, target_temperature=0.5, delayed_min_temperature=0.6),
     ["delayed_min_temperature", "never act"]),
])
def test_bad_values_are_clear_errors(kwargs, words):
    model = TabularMLM.random(num_tokens=3, length=3, seed=0)
    with pytest.raises(ValueError) as err:
        mhfast.sample(model, 3, chains=2, **{"epochs": 1, "burn_in": 0, **kwargs})
    for w in words:
        assert w in str(err.value), str(err.value)
