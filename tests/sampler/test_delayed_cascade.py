"""A cascade of three stages (option ``delayed="cascade:K"``; mhfast.sampler.moves.delayed) samples the exact target.

The proposal's own term first (no rows), then ``window:K``'s rows for its survivors (the middle test, against the own
term's energy), then the rest (the correction, against the window's). Checks: (1) enumeration on tabular models (the
TV bound of tests/sampler/test_sampler_exact.py), both energies, at a target temperature below the proposal's (so the
free stage screens), annealed, tempered, with an extra energy term, the memo off and on; (2) the three-stage
probability of every move from one state at one position, computed by hand, against the empirical one-step
transition of many chains, which differs from plain MH's and from ``window:K``'s two stages (the test has power);
(3) ``cascade:0`` is ``window:0`` bit for bit (its middle stage forwards nothing and tests a ratio of 1); (4) bad
spellings and block MH are clear errors.
"""
from __future__ import annotations

import pytest
import torch

import mhfast
from mhfast.models.tabular import TabularMLM

from exact_checks import N_CHAINS, empirical, ends_term, enumerate_states, masks, one_site_moves, \
    one_step_distribution, ordinary_tokens, run_and_compare, terms_by_hand, tv_and_bound

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CASES = [
    # id, model kwargs, sample kwargs (tau: the target temperature; the proposal's is 1, so beta - 1 = 1 at tau 0.5)
    ("raw-cascade1", dict(), dict(energy="raw", delayed="cascade:1", tau=0.5)),
    ("local-cascade1", dict(features=True), dict(energy="local", delayed="cascade:1", tau=0.5)),
    ("raw-cascade1-coupled-hot", dict(scale=1.2), dict(energy="raw", delayed="cascade:1", tau=2.0)),
    ("local-cascade1-annealed", dict(), dict(energy="local", delayed="cascade:1", tau=0.5, start_tau=1.0, anneal=0.1,
                                             min_target_temperature=0.5)),
    # parallel tempering (rung 0 at beta 1, where the free stage passes all; rung 1 at beta 0.4, where it screens)
    ("raw-cascade1-tempered", dict(scale=1.2), dict(energy="raw", delayed="cascade:1", tempering=[1.0, 2.5])),
    ("local-cascade4-exact-window", dict(), dict(energy="local", delayed="cascade:4", tau=0.5)),
]
MEMO_CASES = [(f"{name}-memo{m}", mk, {**kw, "memo": m}) for name, mk, kw in CASES for m in (0, "auto")]


@pytest.mark.parametrize("name,model_kwargs,kwargs", MEMO_CASES, ids=[c[0] for c in MEMO_CASES])
def test_cascade_matches_enumeration(name, model_kwargs, kwargs, device):
    model = TabularMLM.random(num_tokens=3, length=4, seed=11, **{"scale": 0.5, **model_kwargs})
    template, free = masks(model, 4)
    # (150 epochs: at tau 0.5 plain MH itself needs more than 30 to pass the bound from the template's start, and
    # the cascade accepts less per sweep)
    tv, bound, result = run_and_compare(device, model, template, free, epochs=150, burn_in=5, seed=1, **kwargs)
    assert tv < bound, f"{name}: TV {tv:.4f} >= bound {bound:.4f}"
    assert 0 < result.delayed_accepted <= result.delayed_passed < result.delayed_tested  # the stages screened
    assert (result.memo_hits > 0) == (kwargs["memo"] != 0)
    if kwargs["memo"] == 0:
        assert result.delayed_rows_saved > 0


@pytest.mark.parametrize("memo", [0, "auto"])
@pytest.mark.parametrize("energy", ["raw", "local"])
def test_cascade_with_extra_energy_matches_enumeration(energy, memo, device):
    model = TabularMLM.random(num_tokens=3, length=4, seed=7, scale=0.5)
    template, free = masks(model, 4)
    states = enumerate_states(model, template, free)
    e_raw, e_local = terms_by_hand(model, states)
    energy_of = (e_raw if energy == "raw" else e_local).sum(1).double()
    weight = torch.softmax(-(energy_of + ends_term(states).double()) / 0.5, 0)
    # (the local energy with the ends term mixes slowly under the cascade: at 150 epochs the chi-square test saw
    # its chains short of the target, p 2e-7, where plain MH had mixed; at 450, p 0.84)
    result = mhfast.sample(model, init=template[None], free_positions=free[None], chains=N_CHAINS, energy=energy,
                           epochs=450 if energy == "local" else 150, burn_in=5, seed=3, delayed="cascade:1",
                           extra_energy=[ends_term], memo=memo, target_temperature=0.5, device=device)
    tv, bound = tv_and_bound(weight, empirical(states, result.tokens[0].cpu()), N_CHAINS)
    assert tv < bound, f"TV {tv:.4f} >= bound {bound:.4f}"
    assert result.delayed_passed < result.delayed_tested


def _three_stage(model, x: torch.Tensor, i: int, k: int, energy: str, tau: float) -> dict[str, torch.Tensor]:
    """By hand: the probability of each token y at position i after one cascade step from ``x`` (q(y | x) alpha1
    alpha2 alpha3, the rest on x_i), and the same for ``window:k``'s two stages, for plain MH and for a cascade
    whose first stage drops q's Hastings ratio (f64[V] each, by name)."""
    logq, words, d = one_site_moves(model, x, i, energy)
    window = (torch.arange(x.shape[0]) - i).abs() <= k
    d_own, d_win, d_exact = d[:, i], d[:, window].sum(1), d.sum(1)
    hastings = logq[x[i]] - logq[words]
    clamp = lambda v: torch.clamp(torch.exp(v), max=1.0)  # noqa: E731
    later = clamp(-(d_win - d_own) / tau) * clamp(-(d_exact - d_win) / tau)
    kernels = {"cascade": clamp(-d_own / tau + hastings) * later,
               "window": clamp(-d_win / tau + hastings) * clamp(-(d_exact - d_win) / tau),
               "plain MH": clamp(-d_exact / tau + hastings),
               "no stage-1 ratio": clamp(-d_own / tau) * later}
    return {name: one_step_distribution(logq, words, int(x[i]), a) for name, a in kernels.items()}


# Each temperature has power against the rivals it names (> 10 bounds). At 0.4 a first stage without q's ratio
# gives the same kernel: the one move it screens differently (y = words[0], q 0.008) the later stages stop anyway.
# At 2, window:1's two stages give nearly the cascade's kernel.
@pytest.mark.parametrize("tau, n, rivals", [(0.4, 20000, ("window", "plain MH")),
                                            (2.0, 50000, ("no stage-1 ratio", "plain MH"))])
@pytest.mark.parametrize("energy", ["raw", "local"])
def test_three_stage_probability_of_every_move(energy, tau, n, rivals):
    """One step at one position (only it is free) from one state, n chains: the empirical distribution of the
    new token matches q alpha1 alpha2 alpha3 computed by hand, and differs from each rival kernel's."""
    model = TabularMLM.random(num_tokens=5, length=6, seed=4, scale=1.5)
    words = ordinary_tokens(model)
    x = torch.tensor([words[int(t) % len(words)] for t in torch.tensor([5, 6, 7, 5, 8, 6])])
    i = 2
    free = torch.zeros(6, dtype=torch.bool)
    free[i] = True
    r = mhfast.sample(model, init=x[None], free_positions=free[None], chains=n, epochs=1, burn_in=0, seed=9,
                      energy=energy, target_temperature=tau, delayed="cascade:1", memo=0)
    got = torch.bincount(r.tokens[0, :, i], minlength=model.vocab_size).double() / n
    kernels = _three_stage(model, x, i, 1, energy, tau)
    want = kernels["cascade"]
    bound = 5 * torch.sqrt(want * (1 - want) / n) + 1e-9
    assert bool(((got - want).abs() <= bound).all()), f"{got.tolist()} vs {want.tolist()}"
    for name in rivals:
        assert float((kernels[name] - want).abs().max()) > 10 * float(bound.max()), f"{name} must differ here"


def test_cascade0_is_window0_bit_for_bit():
    """K = 0: the middle stage forwards no row and tests a ratio of 1 (log u < 0), so the chains are window:0's."""
    model = TabularMLM.random(num_tokens=4, length=7, seed=5, scale=1.0)
    kw = dict(chains=6, epochs=6, burn_in=1, seed=2, energy="raw", target_temperature=0.5)
    a = mhfast.sample(model, 7, delayed="window:0", **kw)
    b = mhfast.sample(model, 7, delayed="cascade:0", **kw)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.energy, b.energy)
    assert (a.delayed_tested, a.delayed_passed, a.delayed_rows_saved) == \
        (b.delayed_tested, b.delayed_passed, b.delayed_rows_saved)


def test_cascade_screens_with_fewer_rows_than_its_window_alone():
    """Where beta is well above 1 / the proposal temperature, the free stage stops proposals before their window's
    rows: fewer rows than window:1 per tested proposal, on the same model and seeds (not a speed claim: the rows)."""
    model = TabularMLM.random(num_tokens=4, length=7, seed=3, scale=1.0)
    kw = dict(chains=8, epochs=6, burn_in=1, seed=4, energy="raw", target_temperature=0.25, memo=0)
    w = mhfast.sample(model, 7, delayed="window:1", **kw)
    c = mhfast.sample(model, 7, delayed="cascade:1", **kw)
    assert c.model_rows / c.delayed_tested < w.model_rows / w.delayed_tested


@pytest.mark.parametrize("kwargs,words", [
    (dict(delayed="cascade:x"), ["delayed", "cascade:K"]),
    (dict(delayed="cascade:-1"), ["delayed", "cascade:K"]),
    (dict(delayed="cascade:1", sampler="block-mh"), ["delayed", "sampler", "block-mh"]),
])
def test_bad_options_are_clear_errors(kwargs, words):
    model = TabularMLM.random(num_tokens=3, length=3, seed=0)
    with pytest.raises(ValueError) as err:
        mhfast.sample(model, 3, chains=2, epochs=1, burn_in=0, **kwargs)
    for w in words:
        assert w in str(err.value), str(err.value)
