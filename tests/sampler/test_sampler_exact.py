"""mhfast.sample draws from exp(-E / tau) / Z exactly: checked against full enumeration.

On models small enough to enumerate every sequence (tabular conditionals, a tiny random BERT),
the final states of n independent chains (one batched call, counter-based RNG, so chains are
independent) are compared with the target computed by enumeration, the energies coming from
the reference ops (:mod:`mhfast.reference`).

Tolerance. For K states with target p_k and empirical frequencies from n independent draws,
E|p_hat_k - p_k| <= sqrt(p_k (1 - p_k) / n), so E[TV] <= 0.5 * sum_k sqrt(p_k (1 - p_k) / n)
=: m (<= 0.5 sqrt(K / n)). TV changes by at most 1/n when one draw changes, so McDiarmid gives
P(TV > m + t) <= exp(-2 n t^2). We assert TV < 3 m: a false failure has probability
< exp(-8 n m^2), below 1e-6 where n m^2 >= 1.73 (the 27- and 81-state cases: m >= 0.03 at
n = 3000), but only about 0.07 on the counter-example's few states (m = 0.0128 at n = 2000) and
about 3e-5 for the infilling case; the seeds are fixed, so a run either passes or not. A sampler with
the wrong stationary distribution (degenerate Gibbs on the paper's counter-example) misses by 10x.
The TV bound alone lacks power on small state spaces (a sampler without the Hastings ratio passed
it), so the comparison also asserts Pearson's chi-square test at p 1e-6 (exact_checks.tv_and_bound).
The number of epochs is chosen so that the chains (all warm-started at the same greedy state)
have mixed: the distance to stationarity is far below m.
"""
from __future__ import annotations

import pytest
import torch

from mhfast import reference
from mhfast.models.tabular import TabularMLM, counter_example
from exact_checks import (N_CHAINS, consistent_joint, empirical, enumerate_states, independent_positions, masks,
                          nucleus_connected, run_and_compare, sample, target_distribution, tiny_bert, tv_and_bound)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


TABULAR_CASES = [
    # id, model kwargs, sample kwargs
    ("mh-raw", dict(), dict(energy="raw")),
    ("mh-local-ptemp0.5-features", dict(features=True), dict(energy="local", proposal_temperature=0.5)),
    ("mh-raw-ptemp2-tau0.5-l2r", dict(), dict(energy="raw", proposal_temperature=2.0, tau=0.5,
                                              order="left-to-right")),
    ("mh-local-top_p0.8", dict(features=True), dict(energy="local", top_p=0.8)),
    ("mh-local-annealed-to-0.5", dict(), dict(energy="local", tau=0.5, start_tau=1.0, anneal=0.1,
                                              min_target_temperature=0.5)),
    ("block2-raw-hooks", dict(row_hooks=True), dict(energy="raw", sampler="block-mh", block_schedule=2)),
    ("block3-local-ptemp2-features", dict(features=True, row_hooks=True),
     dict(energy="local", sampler="block-mh", block_schedule=3, proposal_temperature=2.0)),
    ("block-schedule-local-tau0.5", dict(), dict(energy="local", sampler="block-mh", tau=0.5,
                                                 block_schedule=lambda e: 1 + e % 3)),
]


@pytest.mark.parametrize("energy", ["raw", "local"])
def test_block_mh_on_a_sharper_model_matches_enumeration(energy, device):
    """Block MH where the reverse proposal's context matters: q(X_I | X without I) read from X' with only one
    position masked moved the cases above by half their bound only; this sharper, longer model (the delayed-block
    tests' settings) puts it at 1.3-2x the bound."""
    model = TabularMLM.random(num_tokens=3, length=4, seed=11, scale=1.2)
    template, free = masks(model, 4)
    tv, bound, _ = run_and_compare(device, model, template, free, energy=energy, epochs=100, burn_in=10, seed=1,
                                   sampler="block-mh", block_schedule=2)
    assert tv < bound, f"TV {tv:.4f} >= bound {bound:.4f}"


@pytest.mark.parametrize("name,model_kwargs,kwargs", TABULAR_CASES, ids=[c[0] for c in TABULAR_CASES])
def test_tabular_matches_enumeration(name, model_kwargs, kwargs, device):
    # scale 0.5: peaked enough that MH rejects often, flat enough that 30 epochs mix at tau = 0.5
    model = TabularMLM.random(num_tokens=3, length=3, seed=11, scale=0.5, **model_kwargs)
    template, free = masks(model, 3)
    if "top_p" in kwargs:
        assert nucleus_connected(model, template, free, 1.0, kwargs["top_p"]), "test model must be irreducible"
    tv, bound, result = run_and_compare(device, model, template, free, epochs=30, burn_in=5, seed=1, **kwargs)
    assert tv < bound, f"{name}: TV {tv:.4f} >= bound {bound:.4f}"
    assert 0 < float(result.novel_rate[-5:].mean()) <= float(result.acceptance_rate[-5:].mean()) <= 1


@pytest.mark.parametrize("sampler", ["gibbs", "block-gibbs"])
def test_tabular_degenerate_gibbs_misses_the_target(sampler, device):
    """Negative control: the same comparison rejects the degenerate samplers on the tabular model
    (its random conditionals are inconsistent), so the bound above has power."""
    model = TabularMLM.random(num_tokens=3, length=3, seed=11, scale=0.5)
    template, free = masks(model, 3)
    blocks = {"block_schedule": 2} if sampler == "block-gibbs" else {}  # an ineffective option is an error
    tv, bound, _ = run_and_compare(device, model, template, free, energy="local", epochs=30, burn_in=5, seed=1,
                                   sampler=sampler, fit=False, **blocks)
    assert tv > bound, f"{sampler}: TV {tv:.4f} <= bound {bound:.4f}"


GIBBS_EXACT_CASES = [
    ("gibbs-random", "joint", dict(sampler="gibbs")),
    ("gibbs-left-to-right-local", "joint", dict(sampler="gibbs", order="left-to-right", energy="local")),
    ("gibbs-random-start", "joint", dict(sampler="gibbs", start="random")),
    ("block-gibbs-size-1", "joint", dict(sampler="block-gibbs", block_schedule=1)),
    ("block-gibbs-size-2", "independent", dict(sampler="block-gibbs", block_schedule=2)),
    ("block-gibbs-size-T-local", "independent", dict(sampler="block-gibbs", block_schedule=3, energy="local")),
    ("block-gibbs-callable", "independent", dict(sampler="block-gibbs", block_schedule=lambda e: 1 + e % 3)),
]


@pytest.mark.parametrize("name,kind,kwargs", GIBBS_EXACT_CASES, ids=[c[0] for c in GIBBS_EXACT_CASES])
def test_gibbs_samples_the_joint_of_consistent_conditionals(name, kind, kwargs, device):
    """The positive check of the degenerate samplers (the controls above only show they miss an MH target): where
    the MLM's conditionals are those of one joint p, Gibbs (and block Gibbs with blocks of 1) samples p; where the
    positions are independent, block Gibbs does for any block size. A kernel that draws from anything but the
    conditional (uniform draws: TV 0.5-0.6 here, bounds ~0.1) or that freezes fails the bound."""
    if kind == "joint":
        model, p = consistent_joint(3, 3, seed=1)
    else:
        model = independent_positions(3, 3, seed=2)
        p = target_distribution(model, enumerate_states(model, *masks(model, 3)), torch.ones(3, dtype=torch.bool),
                                "local", 1.0)
    template, free = masks(model, 3)
    states = enumerate_states(model, template, free)
    result = sample(device, model, init=template[None], free_positions=free[None], chains=N_CHAINS, epochs=20,
                    seed=7, **kwargs)
    tv, bound = tv_and_bound(p, empirical(states, result.tokens[0]), N_CHAINS)
    assert tv < bound, f"{name}: TV {tv:.4f} >= bound {bound:.4f}"


@pytest.mark.parametrize("kwargs", [dict(sampler="gibbs"), dict(sampler="block-gibbs", block_schedule=3)],
                         ids=["gibbs", "block-gibbs"])
def test_one_sweep_draws_from_the_tempered_nucleus(kwargs, device):
    """What proposal_temperature and top_p mean inside the sampler (MH's target does not depend on them, so the
    exactness tests cannot see a sampler that ignores them): one Gibbs sweep on independent positions draws each
    position from its conditional's nucleus at the proposal temperature (mhfast.reference.nucleus_log_probs, itself
    checked by hand in tests/ops/test_propose.py)."""
    model = independent_positions(3, 3, seed=2)
    template, free = masks(model, 3)
    states = enumerate_states(model, template, free)
    logits = model.masked_logits(template[None].repeat(3, 1), torch.arange(3))[:, :3]  # context-free: any row
    q = reference.nucleus_log_probs(logits, 0.5, 0.8).double().exp()  # [3 positions, 3 tokens]
    p = q[0][states[:, 0]] * q[1][states[:, 1]] * q[2][states[:, 2]]
    result = sample(device, model, init=template[None], chains=N_CHAINS, epochs=1, burn_in=0, seed=4,
                    proposal_temperature=0.5, top_p=0.8, **kwargs)
    tv, bound = tv_and_bound(p, empirical(states, result.tokens[0]), N_CHAINS)
    assert tv < bound, f"TV {tv:.4f} >= bound {bound:.4f}"


def test_infilling_with_padding_matches_enumeration(device):
    """A length-3 row padded to 4 with its middle token fixed: the fixed token counts in the energy."""
    model = TabularMLM.random(num_tokens=3, length=(3, 4), seed=5)
    template = torch.tensor([model.mask_id, 1, model.mask_id])
    free = torch.tensor([True, False, True])
    states = enumerate_states(model, template, free)
    p = target_distribution(model, states, torch.ones(3, dtype=torch.bool), "local", 0.7)
    init = torch.tensor([[model.mask_id, 1, model.mask_id, model.pad_id]])
    result = sample(device, model, init=init, free_positions=torch.tensor([[True, False, True, False]]),
                    chains=N_CHAINS, energy="local", target_temperature=0.7, epochs=30, burn_in=5, seed=2)
    assert bool((result.tokens[0, :, 3] == model.pad_id).all())
    tv, bound = tv_and_bound(p, empirical(states, result.tokens[0, :, :3]), N_CHAINS)
    assert tv < bound, f"TV {tv:.4f} >= bound {bound:.4f}"


@pytest.mark.parametrize("energy", ["raw", "local"])
def test_counter_example_mh_is_exact(energy, device):
    """Appendix C: MH samples pi(x1, x2) ~ p(x1 | x2) (.495 on aa/bb); the chains need ~100 epochs to
    cross between the two modes, so this runs longer."""
    model = counter_example()
    template, free = masks(model, 2)
    tv, bound, _ = run_and_compare(device, model, template, free, energy=energy, n=2000, epochs=200, burn_in=5, seed=3)
    assert tv < bound, f"TV {tv:.4f} >= bound {bound:.4f}"


def test_counter_example_degenerate_gibbs_is_not(device):
    """The paper's point (section 2.1, appendix C): Gibbs with the MLM conditionals samples another
    distribution. Left-to-right, the last update draws X2 uniformly whatever X1: the final states
    are uniform, at TV 0.49 from the target."""
    model = counter_example()
    template, free = masks(model, 2)
    tv, bound, result = run_and_compare(device, model, template, free, energy="raw", n=2000, epochs=20, burn_in=5,
                                        sampler="gibbs", order="left-to-right", seed=4, fit=False)
    assert tv > 0.4 and tv > 5 * bound, f"degenerate Gibbs TV {tv:.4f} (bound {bound:.4f})"
    assert float(result.acceptance_rate.min()) == 1.0


@pytest.mark.parametrize("sampler,energy,ptemp", [("mh", "local", 1.0), ("block-mh", "raw", 1.0), ("mh", "local", 2.0)])
def test_tiny_bert_matches_enumeration(sampler, energy, ptemp, device):
    """The tiny BERT's conditionals are nearly consistent: at proposal temperature 1, MH accepts 0.9997 of its
    proposals, so a sampler that accepted them all would pass too (a tests review); at 2 the MH test decides."""
    model = tiny_bert(device)
    template = model.frame(3)  # [CLS] m m m [SEP]: the specials are fixed and outside the energy
    free = template == model.mask_id
    n = 2000
    tv, bound, result = run_and_compare(device, model, template, free, energy=energy, n=n, epochs=15, burn_in=3, seed=5,
                                        sampler=sampler, block_schedule=2 if sampler == "block-mh" else None,
                                        proposal_temperature=ptemp)
    if ptemp != 1.0:
        assert float(result.acceptance_rate[3:].mean()) < 0.9  # the MH test rejects some
    assert tv < bound, f"TV {tv:.4f} >= bound {bound:.4f}"
    assert bool((result.tokens[0, :, 0] == 2).all()) and bool((result.tokens[0, :, 4] == 3).all())
