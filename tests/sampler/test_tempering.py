"""Parallel tempering (option ``tempering``, :mod:`mhfast.sampler.tempering`): the target's replicas sample the
target exactly, chains cross between modes where plain MH does not, the swap test is the textbook one, the ladder
tunes itself in burn-in only, bad ladders are errors naming the option.

Exactness is checked as in tests/sampler/test_sampler_exact.py (its enumeration, its TV bound from the number of chains):
the final states of the rung-0 replicas of n independent chains against the enumerated target.
"""
from __future__ import annotations

import dataclasses
import math
import re
import warnings
from pathlib import Path

import pytest
import torch

import mhfast
from mhfast.cli import main
from mhfast.models.tabular import TabularMLM
from mhfast.runtime import rng
from mhfast.sampler import ladder
from mhfast.sampler.kernels.base import Capabilities
from mhfast.sampler.state import ChainState
from mhfast.sampler.step import StepInfo
from mhfast.sampler.tempering import Tempered, swap_log_alpha
from test_energy_terms import TableTerm, term_target
from exact_checks import (coupled_modes, empirical, energies, enumerate_states, masks, sample,
                          tiny_bert, tv_and_bound)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

N = 2000
#: translate's sampler in its CLI test (sample's runs single-site MH)
SAMPLER_FLAGS = ["--sampler", "block-mh", "--block-schedule", "2"]


def _model(**kw) -> TabularMLM:
    # scale 0.5 as in test_sampler_exact: peaked enough that MH rejects, flat enough that 30 epochs mix
    return TabularMLM.random(num_tokens=3, length=3, seed=11, scale=0.5, **kw)


EXACT_CASES = [
    # id, sample kwargs (tau: the target temperature)
    ("mh-local-fixed", dict(energy="local", tempering=[1.0, 2.0, 4.0])),
    ("mh-raw-tuned-tau0.5", dict(energy="raw", tau=0.5, tempering=4)),
    ("block-mh-raw-fixed", dict(energy="raw", sampler="block-mh", block_schedule=2, tempering=[1.0, 3.0])),
    ("block-mh-local-tuned", dict(energy="local", sampler="block-mh", block_schedule=2, tempering=3)),
]


@pytest.mark.parametrize("name,kwargs", EXACT_CASES, ids=[c[0] for c in EXACT_CASES])
def test_target_replicas_match_enumeration(name, kwargs, device):
    model = _model(features=kwargs.get("sampler") is None, row_hooks=kwargs.get("sampler") == "block-mh")
    template, free = masks(model, 3)
    states = enumerate_states(model, template, free)
    tau = kwargs.pop("tau", 1.0)
    if isinstance(kwargs["tempering"], list):
        kwargs["tempering"] = [t * tau for t in kwargs["tempering"]]
    r = sample(device, model, init=template[None], chains=N, epochs=30, burn_in=8, seed=1, target_temperature=tau,
               replicas=True, **kwargs)
    K = ladder.rungs(kwargs["tempering"])
    assert r.tokens.shape == (1, N, 3) and r.ladder.shape == (1, K) and r.round_trips.shape == (1, N)
    assert float(r.ladder[0, 0]) == tau and bool((r.ladder[0, 1:] > r.ladder[0, :-1]).all())
    assert bool(((r.swap_rate > 0) & (r.swap_rate <= 1)).all()), r.swap_rate
    # every rung, the target's (its states are the samples) and the auxiliary ones (replicas=True), at its own
    # temperature of the final ladder (fixed since burn-in): the final states, and the mean energy over the epochs
    # after burn-in, within 4 standard errors; a chain's mean over epochs varies no more than one draw, and the
    # chains are independent, so sd / sqrt(N) bounds the error (a neighbouring rung's temperature is > 7 away)
    assert torch.equal(r.replica_tokens[:, 0], r.tokens)
    e_raw, e_local = energies(model, states, torch.ones(3, dtype=torch.bool))
    _assert_rungs_exact(name, r, (e_raw if kwargs["energy"] == "raw" else e_local).double(), states, burn_in=8)


def _assert_rungs_exact(name: str, r, e: torch.Tensor, states: torch.Tensor, burn_in: int) -> None:
    """Every rung of ``r`` (run with replicas=True), at its temperature of the final ladder: its final states (TV and
    chi-square against exp(-e / temperature)) and its mean energy over the epochs after ``burn_in``, within 4
    standard errors (a chain's mean over epochs varies no more than one draw, and the chains are independent, so
    sd / sqrt(N) bounds the error; it catches swap errors at 9-25 standard errors)."""
    n = r.tokens.shape[1]
    for k, temperature in enumerate(r.ladder[0].tolist()):
        p = torch.softmax(-e / temperature, dim=0)
        tv, bound = tv_and_bound(p, empirical(states, r.replica_tokens[0, k].cpu()), n)
        assert tv < bound, f"{name}, rung {k} (temperature {temperature:.3f}): TV {tv:.4f} >= bound {bound:.4f}"
        mean, sd = float((p * e).sum()), float((p * (e - (p * e).sum()) ** 2).sum().sqrt())
        z = (float(r.replica_energy[0, k, :, burn_in:].double().mean()) - mean) / (sd / math.sqrt(n))
        assert abs(z) < 4, f"{name}, rung {k} (temperature {temperature:.3f}): mean energy {z:+.1f} SE off"


@pytest.mark.parametrize("sampler", ["mh", "block-mh"])
def test_with_an_extra_energy_term_the_target_replicas_are_exact(sampler, device):
    model = _model(features=sampler == "mh", row_hooks=sampler == "block-mh")
    template, free = masks(model, 3)
    states = enumerate_states(model, template, free)
    term = TableTerm(seed=3)
    p = term_target(model, states, "local", 0.7 * term(states))
    r = sample(device, model, init=template[None], chains=N, epochs=30, burn_in=8, seed=2, energy="local",
               sampler=sampler, block_schedule=2 if sampler == "block-mh" else None,
               extra_energy=[(term, 0.7)], tempering=3)
    tv, bound = tv_and_bound(p, empirical(states, r.tokens[0]), N)
    assert tv < bound, f"{sampler}: TV {tv:.4f} >= bound {bound:.4f}"
    assert torch.allclose(r.energy, r.energy_local + 0.7 * r.terms[..., 0], atol=1e-5)  # the target's energy


# ---------------------------------------------------------------------------- with the static (captured) step
@pytest.mark.parametrize("tempering", [3, [1.0, 2.0, 4.0]], ids=["tuned", "fixed"])
def test_the_static_step_gives_the_dynamic_steps_tempered_chains(tempering):
    """capture='static' (the step a CUDA graph replays) with tempering: the rungs' betas as a buffer, a swap's rows
    copied into the step's buffers. On a tabular model (rows do not depend on their batch) the chains, swaps,
    ladders and round trips (and every rung's states and energies) equal the dynamic step's bit for bit."""
    model = TabularMLM.random(num_tokens=3, length=4, seed=11, scale=0.5, features=True)
    kw = dict(chains=6, epochs=20, burn_in=6, seed=3, energy="local", tempering=tempering, record="epoch",
              replicas=True)
    a, b = mhfast.sample(model, 4, **kw), mhfast.sample(model, 4, capture="static", **kw)
    assert b.model_rows > a.model_rows  # (the static step forwards every moving chain's rows)
    for f in ("tokens", "energy", "history", "ladder", "swap_rate", "round_trips", "acceptance_rate",
              "replica_tokens", "replica_energy"):
        assert torch.equal(getattr(a, f), getattr(b, f)), f
    assert int(a.round_trips.sum()) > 0 and bool((a.swap_rate > 0).all())


def test_replayed_captures_follow_the_swaps_and_the_retuned_ladder(monkeypatch):
    """capture='cuda-graph''s capture-and-replay logic with tempering, on CPU with torch.fx standing in for the
    CUDA graph (tests/sampler/test_static_step.py's FxReplayedSteps): one graph per moving-chain count serves every
    ladder the tuning makes (the betas are a buffer refilled at each step) and sees the swaps' rows (copied into
    the buffers): the tiny BERT's tempered chains equal the dynamic step's."""
    import mhfast.sampler.kernels.mh as mh_kernel
    from test_static_step import FxReplayedSteps, same_result

    model = tiny_bert()
    common = dict(chains=3, epochs=12, burn_in=8, seed=5, energy="local", tempering=3)
    a = mhfast.sample(model, 4, memo=0, **common)  # (memo 0: the static step has none)
    start = (1.0 / ladder.initial_betas(3, 1.0, 1)).float()
    assert not torch.allclose(a.ladder.float(), start), "the ladder was not retuned: the test would not see it"
    monkeypatch.setattr(mh_kernel, "StaticSiteSteps", FxReplayedSteps)
    FxReplayedSteps.captures = 0
    b = mhfast.sample(model, 4, capture="static", **common)
    assert same_result(a, b) == []
    assert torch.equal(a.ladder, b.ladder) and torch.equal(a.swap_rate, b.swap_rate)
    assert FxReplayedSteps.captures == 1  # one moving-chain count, one tensor beta: one graph for the run


@pytest.mark.parametrize("energy", ["raw", "local"])
def test_tempered_static_step_matches_enumeration(energy, device):
    """The target replicas' law with the static step (capture='static' on CPU, 'cuda-graph' on a GPU): exact. On a
    GPU the model is the tiny BERT: TabularMLM's lookup asks the host which row lengths it holds (torch.unique, then
    .tolist()), which a CUDA graph cannot capture (found on an H200, 2026-11-27). It runs at proposal temperature 2,
    where MH rejects (11% here; at 1 it accepts 99.97%, and an accept test that did nothing would pass); the same
    case with capture='static' on the CPU passes every check below (TV 0.051, bound 0.160)."""
    extra = {}
    if device == "cuda":
        model = tiny_bert(device)
        template = model.frame(3)
        free = template == model.mask_id
        extra = dict(proposal_temperature=2.0)
    else:
        model = _model(features=True)
        template, free = masks(model, 3)
    capture = "cuda-graph" if device == "cuda" else "static"
    # every rung, the target's first (its TV and chi-square, as run_and_compare checks it), and the mean energies
    # after burn-in: a swap with a wrong acceptance had passed the final states' checks of the target rung
    # (chi-square p 0.003 and 2e-5 for always-accepted and sign-flipped swaps)
    r = sample(device, model, init=template[None], free_positions=free[None], chains=N, energy=energy, epochs=30,
               burn_in=8, seed=1, tempering=3, replicas=True, capture=capture, **extra)
    assert torch.equal(r.replica_tokens[:, 0], r.tokens)
    mask = ~torch.isin(template, torch.tensor(sorted(set(model.special_ids) - {model.mask_id})))
    states = enumerate_states(model, template, free)
    e_raw, e_local = energies(model, states, mask)
    _assert_rungs_exact(f"{energy}, static", r, (e_raw if energy == "raw" else e_local).double(), states, burn_in=8)


# ---------------------------------------------------------------------------- crossing between modes
def _modes_visited(r) -> torch.Tensor:
    """Bool[C, 2]: whether each chain's recorded states were ever in mode a (>= 5 of 6 a's) and in mode b."""
    a = (r.history[:, 0] == 0).sum(dim=2)  # [E, C]
    return torch.stack([(a >= 5).any(dim=0), (a <= 1).any(dim=0)], dim=1)


@pytest.mark.parametrize("sampler", ["mh", "block-mh"])
def test_tempering_crosses_between_modes_where_plain_mh_stays(sampler, device):
    model = coupled_modes(J=2.0)  # (at J = 1.5 plain block MH with a 20% uniform share crosses now and then)
    init = torch.tensor([[0] * 6] * 2 + [[1] * 6] * 2)[None]  # two chains in each mode
    kw = dict(chains=4, epochs=200, burn_in=20, seed=0, energy="local", record="epoch", sampler=sampler,
              uniform_mix=0.2, block_schedule=2 if sampler == "block-mh" else None)
    plain = _modes_visited(sample(device, model, init=init, **kw))
    assert plain.tolist() == [[True, False]] * 2 + [[False, True]] * 2, "plain MH crossed: the model is too easy"
    tempered = sample(device, model, init=init, tempering=6, **kw)
    assert bool(_modes_visited(tempered).all()), _modes_visited(tempered)
    assert int(tempered.round_trips.sum()) > 0


# ---------------------------------------------------------------------------- the swap test itself
class _Still:
    """An inner kernel that does nothing (the swaps are all that moves)."""

    name, capabilities = "still", Capabilities()

    def init(self, state):
        return state

    def sweep(self, state, epoch):
        return []

    def step(self, state, epoch, move):
        return state, StepInfo(0, 0, 0, scored=True)


def test_swaps_use_the_inverse_temperatures_the_sweeps_use(monkeypatch):
    """The sweeps test with each rung's beta rounded to float32 (moves.accept.beta_rows); the swaps must use the
    same numbers, or sweeps and swaps leave two different products of tempered targets invariant (by 1e-8 here).
    Temperature 3: beta 1/3, which float32 rounds."""
    import mhfast.sampler.tempering as tempering

    seen = []
    monkeypatch.setattr(tempering, "swap_log_alpha", lambda *args: seen.append(args) or (args[0] - args[1]) * 0)
    C = 3
    state = ChainState.create(torch.zeros(C, 2, dtype=torch.long), torch.ones(C, 2, dtype=torch.bool),
                              torch.ones(C, 2, dtype=torch.bool), torch.zeros(C, dtype=torch.long), torch.arange(C),
                              None, "raw", seed=5)
    kernel = Tempered(_Still(), [1.0, 3.0], chains=C, burn_in=0, target_temperature=1.0)
    full = kernel.init(state)
    epoch = mhfast.sampler.schedules.Epoch(0, 1.0, 1.0, True)
    kernel.step(full, epoch, kernel.sweep(full, epoch)[-1])
    (b_lo, b_hi, _, _), = seen
    swept = kernel._tempered(epoch, full).beta  # what the inner kernel's accept gets, per row, before its own rounding
    assert b_hi.tolist() == [float(torch.tensor(1 / 3).float())] * C == swept[C:].float().double().tolist()
    assert b_hi[0].item() != 1 / 3 and b_lo.tolist() == [1.0] * C


def test_swap_acceptance_is_min_1_exp_dbeta_de():
    """C = 4000 chains of one input, K = 2 rungs at temperatures 1 and 4, every rung-0 replica at energy 3 and
    every rung-1 replica at energy 1 + 2 * (chain is odd): the swap of an even chain is accepted with probability
    exp((1 - 1/4) (3 - 1)) > 1 -> 1, of an odd chain exp(0.75 * 0) = 1, so all swap; at energies 1 (cold) and 3
    (hot) it is exp(-1.5) = 0.223. Computed here from the definition, compared within 5 binomial sd."""
    C = 4000
    tokens = torch.arange(C)[:, None].repeat(1, 2) % 3
    state = ChainState.create(tokens, torch.ones(C, 2, dtype=torch.bool), torch.ones(C, 2, dtype=torch.bool),
                              torch.zeros(C, dtype=torch.long), torch.arange(C), None, "raw", seed=5)
    kernel = Tempered(_Still(), [1.0, 4.0], chains=C, burn_in=0, target_temperature=1.0)
    full = kernel.init(state)
    assert full.tokens.shape[0] == 2 * C and full.chain_ids.tolist()[C:C + 2] == [C, C + 1]
    marker = torch.arange(2 * C)[:, None].repeat(1, 2)  # which row a state started in
    cache = marker[:, :, None].float()

    def run(e_cold: float, e_hot: float) -> torch.Tensor:
        s = dataclasses.replace(full, tokens=marker.clone(), cache=cache.clone(),
                                e_raw=torch.tensor([e_cold] * C + [e_hot] * C))
        epoch = mhfast.sampler.schedules.Epoch(0, 1.0, 1.0, True)
        out = kernel.step(s, epoch, kernel.sweep(s, epoch)[-1])[0]
        swapped = out.tokens[:C, 0] == marker[C:, 0]
        assert torch.equal(out.tokens[:C][swapped], marker[C:][swapped])  # states exchanged, caches with them
        assert torch.equal(out.cache[:, :, 0].long(), out.tokens) and torch.equal(out.e_raw[:C][swapped],
                                                                                   torch.full((int(swapped.sum()),),
                                                                                              e_hot))
        return swapped.double().mean()

    assert float(run(3.0, 1.0)) == 1.0
    p = math.exp((1 - 0.25) * (1.0 - 3.0))
    assert p == pytest.approx(math.exp(float(swap_log_alpha(torch.tensor(1.0), torch.tensor(0.25),
                                                            torch.tensor(1.0), torch.tensor(3.0)))))
    rate = float(run(1.0, 3.0))
    assert abs(rate - p) < 5 * math.sqrt(p * (1 - p) / C), (rate, p)
    # the uniforms are the counter RNG's swap stream of the colder replica
    u = rng.uniforms_from_keys(full.rng_keys[:C], 0, 0, rng.SWAP)
    assert rate == float((torch.log(u.double()) < (1 - 0.25) * (1.0 - 3.0)).double().mean())


@pytest.mark.parametrize("delayed", [None, "window:1"])
def test_every_rows_cache_and_terms_are_its_states_after_every_step_and_swap(monkeypatch, delayed):
    """End to end, after every step of a tempered run (each replica's MH steps and every swap): each row's
    per-position cache and energy terms equal a fresh rescore of the tokens it holds. The swap exchanges a row's
    tokens, terms and cached model rows together, while the memo is shared by the replicas of an input (its hits'
    rows are copied into the cache) and with delayed acceptance. (A swap that left the cache behind passes the
    enumeration tests above: its stale rows are refreshed by the next accepted moves, so its bias is small; this
    check sees it at once.)"""
    from mhfast.sampler.state import rescore

    model = TabularMLM.random(num_tokens=4, length=5, seed=3, features=True)
    checked = {"swap": 0, "step": 0}
    real_step = Tempered.step

    def step(self, state, epoch, move):
        state, info = real_step(self, state, epoch, move)
        fresh = rescore(state, self.ctx.runner, self.ctx.backend, keep_cache=True)
        mask = state.energy_mask
        assert torch.equal(state.cache[mask], fresh.cache[mask]), (epoch.index, move)
        assert torch.equal(state.raw_terms, fresh.raw_terms) and torch.equal(state.local_terms, fresh.local_terms)
        assert torch.equal(state.e_local, fresh.e_local) and torch.equal(state.e_raw, fresh.e_raw)
        checked["swap" if isinstance(move, str) else "step"] += 1
        return state, info

    monkeypatch.setattr(Tempered, "step", step)
    r = mhfast.sample(model, 5, chains=6, epochs=20, burn_in=4, seed=5, target_temperature=0.7, memo=8,
                      delayed=delayed, tempering=[0.7, 1.4, 5.0])
    assert checked == {"swap": 20, "step": 20 * 5}
    assert r.memo_hits > 0 and bool((r.swap_rate > 0).all())


def test_only_even_pairs_swap_in_even_epochs_and_odd_pairs_in_odd_ones():
    C, K = 3, 4
    state = ChainState.create(torch.zeros(C, 1, dtype=torch.long), torch.ones(C, 1, dtype=torch.bool),
                              torch.ones(C, 1, dtype=torch.bool), torch.zeros(C, dtype=torch.long), torch.arange(C),
                              None, "raw", seed=0)
    kernel = Tempered(_Still(), [1.0, 2.0, 3.0, 4.0], chains=C, burn_in=0, target_temperature=1.0)
    full = kernel.init(state)
    rung = torch.arange(K * C) // C
    for index, moving in ((0, {0, 1, 2, 3}), (1, {1, 2})):
        s = dataclasses.replace(full, tokens=rung[:, None].clone(), e_raw=-10.0 * rung.float())  # hot = low energy:
        epoch = mhfast.sampler.schedules.Epoch(index, 1.0, 1.0, True)  # every proposed swap is accepted
        out = kernel.step(s, epoch, "swap")[0]
        changed = set(rung[out.tokens[:, 0] != rung].tolist())
        assert changed == moving, (index, changed)


# ---------------------------------------------------------------------------- the ladder
def test_retuned_ladder_reaches_equal_barrier_steps():
    """With swap rejection between beta' < beta equal to Lambda(beta) - Lambda(beta') for a known barrier
    Lambda (here Lambda(beta) = 3 * beta^2 on [0.05, 1]), repeated tuning converges to rungs at equal steps of
    Lambda, whatever the start."""
    lam = lambda b: 3 * b ** 2  # noqa: E731
    betas = torch.tensor([[1.0, 0.9, 0.8, 0.7, 0.05]], dtype=torch.float64)
    for _ in range(30):
        rejection = lam(betas[:, :-1]) - lam(betas[:, 1:])
        betas = ladder.retuned(betas, rejection)
    steps = lam(betas[0, :-1]) - lam(betas[0, 1:])
    assert torch.allclose(steps, steps.mean().expand(4), rtol=1e-3), steps
    assert float(betas[0, 0]) == 1.0 and float(betas[0, -1]) == 0.05
    assert float(ladder.barrier(rejection)[0]) == pytest.approx(lam(1.0) - lam(0.05), rel=1e-6)


def test_the_ladder_is_tuned_in_burn_in_and_fixed_after_it():
    model = _model(features=True)
    kw = dict(chains=8, burn_in=8, seed=3, energy="local")
    short = mhfast.sample(model, 3, epochs=8, tempering=4, **kw)
    long = mhfast.sample(model, 3, epochs=40, tempering=4, **kw)
    assert torch.equal(short.ladder, long.ladder), "the ladder moved after burn-in"
    start = 1.0 / ladder.initial_betas(4, 1.0, 1)
    assert not torch.allclose(long.ladder, start), "the ladder was not tuned"
    fixed = mhfast.sample(model, 3, epochs=40, tempering=[1.0, 1.5, 2.0, 9.0], **kw)
    assert fixed.ladder.tolist() == [[1.0, 1.5, 2.0, 9.0]]


@pytest.mark.parametrize("rungs", [3, 4])
def test_a_tuning_round_of_one_sweep_says_it_left_the_ladder_as_it_was(rungs):
    """burn_in=1: one round of one sweep, which proposes only the even or the odd pairs, so with 3 or more rungs a
    pair is unmeasured and the ladder stays geometric. Until 2026-12-01 without a word; burn_in=2 measures every
    pair and retunes."""
    model = _model(features=True)
    kw = dict(chains=4, epochs=4, seed=0, energy="local", tempering=rungs)
    start = 1.0 / ladder.initial_betas(rungs, 1.0, 1)
    with pytest.warns(UserWarning, match=r"tempering: tuning round 1 left the ladder of input 0 as it was \(rungs "
                      r"\d and \d: no swap was proposed between them in its one sweep"):
        one = mhfast.sample(model, 3, burn_in=1, **kw)
    assert torch.allclose(one.ladder.double(), start)
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*left the ladder.*")
        two = mhfast.sample(model, 3, burn_in=2, **kw)
    assert not torch.allclose(two.ladder.double(), start)


def test_the_hot_end_doubles_while_the_hottest_replica_does_not_mix():
    betas = torch.tensor([[1.0, 0.5, 0.125]] * 4, dtype=torch.float64)
    nan = float("nan")
    heat = ladder.heated(betas, torch.tensor([0.1, 0.9, 0.2, 0.1], dtype=torch.float64),
                         torch.tensor([nan, nan, 0.195, nan], dtype=torch.float64),
                         torch.tensor([False, False, False, True]))
    assert heat.tolist() == [True, False, False, False]  # low and rising; mixes; no longer rising; settled before
    assert [round(1 / b, 6) for b in ladder.doubled(betas[0]).tolist()] == [1.0, 4.0, 16.0]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("rungs,forced", [(3, 0), (2, 0), (3, 2)], ids=["3-rungs", "2-rungs", "2-forced-epochs"])
def test_a_short_burn_in_moves_the_hot_end_when_the_hottest_replica_does_not_mix(seed, rungs, forced):
    """Burn-in 32: tuning rounds end after sweeps 2, 4, 8, 16, 32, and the hot end may move at the first two. With
    8 chains of 6 free sites a round of 2 sweeps tests at most 96 proposals at the hottest rung, fewer than the
    HOT_MIN_TESTS a decision needs, so no round alone can decide (the tuning before this test, which counted per
    round, kept the hot end at 8 x the target here whatever the model); counted since the hot end last moved,
    the two rounds together can. A peaked model (scale 30) whose hottest replica at 8 x accepts ~0.1 of its
    changing proposals gets a hotter end (16 x); a flat one (scale 0.1), whose hottest replica mixes, keeps 8 x.

    The same with 2 rungs, whose odd sweeps have no pair to swap yet end the rounds (the tuning skipped them until
    2026-11-30, so a 2-rung ladder never moved), and after 2 forced-accept epochs, whose accepts are not the
    hottest replica's mixing and whose sweeps are not tuning rounds (until 2026-11-30 they were pooled into the
    first measurement, which then settled the hot end at 8 x, and they used up the heating rounds)."""
    C, T, burn_in = 8, 6, 32 + forced
    assert ladder.tuning_ends(burn_in - forced)[:ladder.heating_rounds(5)] == [2, 4]
    assert C * T * 2 < ladder.HOT_MIN_TESTS  # the premise: one round cannot decide
    kw = dict(chains=C, epochs=burn_in, burn_in=burn_in, seed=seed, energy="local", tempering=rungs, uniform_mix=0.9,
              start="random", force_accept_epochs=forced)
    peaked = mhfast.sample(TabularMLM.random(num_tokens=8, length=T, seed=0, scale=30.0), T, **kw)
    flat = mhfast.sample(TabularMLM.random(num_tokens=8, length=T, seed=0, scale=0.1), T, **kw)
    assert round(float(peaked.ladder[0, -1]), 9) == 16.0, peaked.ladder
    assert round(float(flat.ladder[0, -1]), 9) == ladder.HOT_START, flat.ladder


def test_tuning_rounds_double_in_length_and_the_last_ones_only_equalise():
    assert ladder.tuning_ends(8) == [2, 4, 8] and ladder.tuning_ends(300) == [2, 4, 8, 16, 32, 64, 128, 300]
    assert ladder.tuning_ends(1) == [1] and ladder.tuning_ends(0) == []
    ends = ladder.tuning_ends(300)
    assert all(b - a >= a - p for p, a, b in zip([0] + ends, ends, ends[1:]))  # no round shorter than the last
    assert [ladder.heating_rounds(n) for n in (1, 2, 3, 4, 5, 8)] == [0, 1, 1, 1, 2, 5]


def test_the_tuned_ladder_equalises_the_swap_rates():
    """Syed et al.'s tuning aims at equal swap rejection between all neighbours. On a peaked random tabular
    model (4 tokens, T = 4) with 64 chains and 256 burn-in sweeps, the post-burn-in swap rates of the 4 rungs'
    3 pairs must agree within what their counts allow: the final ladder equalises the last tuning round's
    estimates (n_r = C * L / 2 swaps per pair, L its length), and the rates are measured from n_k swaps after
    burn-in, so two rates differ by about sd * sqrt(2 / n_r + 1 / n_j + 1 / n_k) (sd of one swap's outcome);
    allowed: 4 of those. The code before this test (the hot end doubling again after the last equalisation,
    which reset the rungs to geometric) gave [0.567, 0.470, 0.593]: 0.123 apart against a bound of 0.054."""
    model = TabularMLM.random(num_tokens=4, length=4, seed=11, scale=2.0)
    C, burn_in, after = 64, 256, 256
    r = mhfast.sample(model, 4, chains=C, epochs=burn_in + after, burn_in=burn_in, seed=0, energy="local",
                      tempering=4)
    rates = r.swap_rate[0]
    ends = ladder.tuning_ends(burn_in)
    n_r = C * (ends[-1] - ends[-2]) / 2
    n = [C * sum(1 for e in range(burn_in, burn_in + after) if e % 2 == k % 2) for k in range(3)]
    mean = float(rates.mean())
    sd = math.sqrt(mean * (1 - mean))
    for j in range(3):
        for k in range(j + 1, 3):
            bound = 4 * sd * math.sqrt(2 / n_r + 1 / n[j] + 1 / n[k])
            assert abs(float(rates[j] - rates[k])) < bound, (rates.tolist(), j, k, bound)
    assert 0.2 < mean < 0.95, rates  # a ladder that neither skips the barrier nor wastes rungs


@pytest.mark.parametrize("until_rhat", [None, 1.03], ids=["fixed-epochs", "until-rhat"])
def test_pooled_acceptance_rates_are_the_target_chains_like_the_per_chain_counts(until_rhat):
    """The pooled per-epoch rates are rung 0's (the samples'), as the per-chain counts are; ``proposals`` counts
    every replica (the cost). (Pooling every replica's counts, as before, fails the first assert: the hot
    replicas accept more often than the target's.)"""
    model = TabularMLM.random(4, (3, 4), seed=2, scale=2.0)
    m, p = model.mask_id, model.pad_id
    init = torch.tensor([[m, m, m, m], [m, m, m, p]])
    r = mhfast.sample(model, init=init, chains=4, epochs=60, burn_in=6, seed=1, start="random", energy="local",
                      tempering=[1.0, 4.0, 16.0], until_rhat=until_rhat, min_ess=40 if until_rhat else None)
    proposals = r.chain_proposals.sum(dim=(1, 2))
    assert torch.allclose(r.acceptance_rate, (r.chain_accepted.sum(dim=(1, 2)) / proposals).float())
    assert torch.allclose(r.novel_rate, (r.chain_novel.sum(dim=(1, 2)) / proposals).float())
    assert r.proposals > int(proposals.sum())  # ... while proposals counts the hot replicas' too


# ---------------------------------------------------------------------------- the auxiliary replicas, if asked
@pytest.mark.parametrize("until_rhat", [None, 1.03], ids=["fixed-epochs", "until-rhat"])
def test_replicas_returns_every_rungs_states_and_energies_without_changing_the_chains(until_rhat):
    """``replicas=True`` returns what the run held at every rung (each state's energy is its own, rescored), the
    target's rung as the samples, and leaves the chains as they are without it; an input that left the batch
    (until_rhat) keeps its last states and has NaN energies after its last epoch."""
    model = TabularMLM.random(4, (3, 4), seed=2, scale=0.5)
    m, p = model.mask_id, model.pad_id
    init = torch.tensor([[m, m, m, m], [m, m, m, p], [m, m, m, m]])
    base = dict(chains=4, epochs=120 if until_rhat else 12, burn_in=6, seed=1, start="random", energy="local",
                tempering=3, until_rhat=until_rhat, min_ess=80 if until_rhat else None)
    r = mhfast.sample(model, init=init, replicas=True, **base)
    plain = mhfast.sample(model, init=init, **base)
    assert plain.replica_tokens is None and plain.replica_energy is None
    for name in ("tokens", "best_tokens", "energy", "ladder", "swap_rate", "round_trips", "chain_accepted"):
        torch.testing.assert_close(getattr(r, name), getattr(plain, name), rtol=0, atol=0, equal_nan=True, msg=name)
    B, K, C, T, E = 3, 3, 4, 4, r.e_local.shape[0]
    assert r.replica_tokens.shape == (B, K, C, T) and r.replica_energy.shape == (B, K, C, E)
    assert torch.equal(r.replica_tokens[:, 0], r.tokens)
    for b in range(B):
        ran = int(r.epochs_run[b])
        assert torch.equal(r.replica_energy[b, 0, :, ran - 1], r.energy[b]), b
        e = r.replica_energy[b]
        assert bool(e[:, :, :ran].isfinite().all()) and bool(e[:, :, ran:].isnan().all()), b
        rescored = mhfast.energy(model, r.replica_tokens[b].reshape(K * C, T), energy="local").e_local.view(K, C)
        assert torch.allclose(rescored, r.replica_energy[b, :, :, ran - 1], atol=1e-5), b
    if until_rhat:
        assert len(set(r.epochs_run.tolist())) > 1, r.epochs_run  # inputs left at different epochs
    # the hot rungs move more: their energies spread wider over the epochs after burn-in
    spread = r.replica_energy[:, :, :, 6:].nan_to_num(nan=0.0).std(dim=-1).mean(dim=(0, 2))
    assert float(spread[-1]) > float(spread[0]), spread


def test_with_a_length_beam_the_kept_candidates_replicas_are_returned():
    """source= with length_beam 2: each candidate has its own replicas; the result keeps the chosen one's, whose
    rung 0 is the returned chains."""
    from mhfast.models.tabular import ConditionalTabularMLM

    model = ConditionalTabularMLM.random(num_tokens=3, lengths=(2, 3, 4), num_sources=3, seed=5)
    r = mhfast.sample(model, source=[0, 1, 2], length_beam=2, chains=3, epochs=8, burn_in=2, seed=0, tempering=3,
                      replicas=True)
    assert r.replica_tokens.shape[:3] == (3, 3, 3) and r.replica_energy.shape == (3, 3, 3, 8)
    assert torch.equal(r.replica_tokens[:, 0], r.tokens)
    assert torch.equal(r.replica_energy[:, 0, :, -1], r.energy)


def test_the_summary_shows_each_inputs_tempering_counters_under_its_verdict():
    model = TabularMLM.random(4, (3, 4), seed=2, scale=0.5)
    m, p = model.mask_id, model.pad_id
    r = mhfast.sample(model, init=torch.tensor([[m, m, m, m], [m, m, m, p]]), chains=4, epochs=40, burn_in=6, seed=1,
                      start="random", tempering=3)
    lines = r.summary().splitlines()
    for b in range(2):
        at = next(i for i, line in enumerate(lines) if line.startswith(f"input {b}:"))
        trips = ",".join(str(int(n)) for n in r.round_trips[b])
        assert lines[at + 1].startswith("  tempering: ladder 1,") and f"round trips {trips} " in lines[at + 1]
    assert "tempering" not in mhfast.sample(model, 4, chains=2, epochs=4, burn_in=1).summary()


def test_replicas_without_tempering_is_an_error_naming_both():
    with pytest.raises(ValueError, match="replicas .*has no effect without tempering"):
        mhfast.sample(_model(), 3, epochs=2, burn_in=0, replicas=True)


# ---------------------------------------------------------------------------- options and errors
@pytest.mark.parametrize("value,message", [
    ([2.0, 1.0], "strictly increasing"), ([1.0, 1.0], "strictly increasing"), ([1.0, -2.0], "> 0"),
    ([0.0, 1.0], "> 0"), ([1.0], "at least 2"), (1, "at least 2"), (0, "at least 2"), (True, "an int >= 2"),
    ([1.0, float("inf")], "finite"), ("hot", "an int >= 2 or a list"), ([2.0, 4.0], "must start at target"),
    ([True, 2.0], "list of numbers"), (["1", "2.5"], "list of numbers"),  # (float() had read them as 1.0, 2.5)
])
def test_bad_ladders_are_errors_naming_the_option(value, message):
    with pytest.raises(ValueError, match=f"tempering .*{message}"):
        mhfast.sample(_model(), 3, epochs=2, burn_in=0, tempering=value)


def test_the_reported_ladder_is_the_one_used_and_can_be_passed_back():
    """result.ladder had been 1 / (1 / t): 0.10999999999999999 for 0.11, so a tuned ladder passed back was refused
    ("must start at target_temperature") and a fixed one came back changed. An array ladder is taken as a list."""
    import numpy as np

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (few epochs: the sparse-ladder and short burn-in warnings)
        given = [0.11, 0.22, 0.45]
        r = mhfast.sample(_model(), 3, chains=2, epochs=8, burn_in=4, target_temperature=0.11, tempering=given)
        assert r.ladder[0].tolist() == given
        tuned = mhfast.sample(_model(), 3, chains=2, epochs=8, burn_in=4, target_temperature=0.11, tempering=3)
        assert tuned.ladder[0, 0].item() == 0.11
        again = mhfast.sample(_model(), 3, chains=2, epochs=8, burn_in=4, target_temperature=0.11,
                              tempering=tuned.ladder[0].tolist())
        assert again.ladder[0].tolist() == tuned.ladder[0].tolist()
        for array in (np.array(given), torch.tensor(given, dtype=torch.float64),
                      list(torch.tensor(given, dtype=torch.float64))):  # (a list of 0-d tensors, as float() took)
            r2 = mhfast.sample(_model(), 3, chains=2, epochs=8, burn_in=4, target_temperature=0.11, tempering=array)
            assert r2.ladder[0].tolist() == given and torch.equal(r2.tokens, r.tokens)


@pytest.mark.parametrize("kwargs,other", [(dict(sampler="gibbs"), "sampler"), (dict(anneal=0.1), "anneal")])
def test_tempering_with_what_it_cannot_act_on_is_an_error_naming_both(kwargs, other):
    with pytest.raises(ValueError, match=f"tempering.*{other}"):
        mhfast.sample(_model(), 3, epochs=2, burn_in=0, tempering=3, **kwargs)


def test_cli_rejects_a_bad_ladder_in_one_line(capsys):
    assert main(["sample", "--model", "none", "--length", "3", "--tempering", "2,1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--tempering" in err and "increasing" in err, err


# ---------------------------------------------------------------------------- until_rhat: inputs leave the batch
@pytest.mark.parametrize("kwargs", [dict(), dict(sampler="block-mh", block_schedule=2)], ids=["mh", "block-mh"])
def test_until_rhat_with_tempering_stops_inputs_with_the_same_chains(kwargs):
    model = TabularMLM.random(4, (3, 4), seed=2, scale=0.5)
    m, p = model.mask_id, model.pad_id
    init = torch.tensor([[m, m, m, m], [m, m, m, p], [m, m, m, m]])
    base = dict(chains=4, epochs=300, burn_in=6, seed=1, start="random", energy="local", tempering=3, **kwargs)
    r = mhfast.sample(model, init=init, until_rhat=1.03, min_ess=80, **base)
    assert r.converged.all() and bool((r.epochs_run < 300).all()), r.epochs_run
    for b in range(3):
        alone = mhfast.sample(model, init=init, **{**base, "epochs": int(r.epochs_run[b])})
        assert torch.equal(r.tokens[b], alone.tokens[b]), b
        assert torch.equal(r.best_tokens[b], alone.best_tokens[b]), b
        assert torch.equal(r.round_trips[b], alone.round_trips[b]) and torch.equal(r.ladder[b], alone.ladder[b])


# ---------------------------------------------------------------------------- the commands
def test_cli_sample_prints_the_tempering_counters(capsys, tmp_path):
    from hf_tiny_models import save_tiny_bert_dir

    model_dir = save_tiny_bert_dir(tmp_path / "tiny_bert")
    code = main(["sample", "--model", str(model_dir), "--length", "4", "--chains", "2", "--epochs", "6",
                 "--burn-in", "2", "--tempering", "3", "--seed", "1"])  # single-site MH
    out, err = capsys.readouterr()
    assert code == 0, err
    line = next(t for t in out.splitlines() if "tempering:" in t)
    assert line.startswith("  tempering: ladder 1,") and "swap rates" in line and "round trips" in line, line
    assert len(line.split("round trips ")[1].split()[0].split(",")) == 2  # one count per chain


def test_cli_shows_the_tuning_warning_in_one_line_naming_the_flags(tmp_path):
    """A warning of the run is one line, ``mhfast sample: warning: ...`` with the flags' names (it was Python's two
    lines: ``.../tempering.py:239: UserWarning: mhfast.sample: ... burn_in ...`` and the source line). A process of
    its own: pytest catches the warnings of a command run in the test's process."""
    import os
    import subprocess
    import sys

    from hf_tiny_models import save_tiny_bert_dir

    model_dir = save_tiny_bert_dir(tmp_path / "tiny_bert")
    proc = subprocess.run([sys.executable, "-m", "mhfast", "sample", "--model", str(model_dir), "--length", "4",
                           "--chains", "2", "--epochs", "3", "--burn-in", "1", "--tempering", "3", "--seed", "1", "-q"],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), OMP_NUM_THREADS="1"))
    err = proc.stderr
    assert proc.returncode == 0, err
    assert err.count("\n") == 1, err
    assert err.startswith("mhfast sample: warning: --tempering: tuning round 1 left the ladder of input 0"), err
    assert err.endswith("give --burn-in at least 2 sweeps more than --force-accept-epochs)\n"), err


def test_cli_translate_writes_the_tempering_counters(tiny_paths, tmp_path, capsys):
    import json

    src = tmp_path / "src.txt"
    src.write_text(min(tiny_paths["valid_de"].read_text(encoding="utf-8").splitlines(), key=len) + "\n")
    stats = tmp_path / "stats.json"
    code = main(["translate", "--model", str(tiny_paths["checkpoint"]), "--data", str(tiny_paths["data"]),
                 "--tokenizer", "none", "--input", str(src), "--stats-out", str(stats), "--chains", "2", "--epochs",
                 "4", "--burn-in", "2", "--tempering", "1,2,4", *SAMPLER_FLAGS])
    out, err = capsys.readouterr()
    assert code == 0, err
    tempering = json.loads(stats.read_text())["batches"][0]["tempering"][0]
    assert tempering["ladder"] == [1.0, 2.0, 4.0] and len(tempering["swap_rate"]) == 2
    assert len(tempering["round_trips"]) == 2


# ---------------------------------------------------------------------------- a ladder cut by a barrier
def test_a_ladder_whose_rungs_never_swap_warns_with_the_rungs_it_needs():
    """Two rungs far apart on the two-mode model: the target (E ~ 0 in a mode) and 1000 x (a flat, high-energy
    replica) almost never swap, and the user is told so with a rung count; a close ladder is not warned about."""
    model = coupled_modes(J=2.0)
    kw = dict(chains=4, epochs=60, burn_in=10, seed=0, energy="local", uniform_mix=0.2)
    with pytest.warns(UserWarning, match=r"tempering: swaps between rungs 0 and 1 succeeded 0\.0\d of the time .*"
                                         r"use about 2 Lambda \+ 1 = \d+ rungs or more"):
        cut = mhfast.sample(model, 6, tempering=[1.0, 1000.0], **kw)
    assert float(cut.swap_rate[0, 0]) < ladder.SPARSE_SWAP
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a close ladder: no advice
        close = mhfast.sample(model, 6, tempering=[1.0, 1.05], **kw)
    assert float(close.swap_rate[0, 0]) >= ladder.SPARSE_SWAP


def test_the_docs_replicas_example_prints_what_it_shows(capsys):
    """docs/tempering.md's example of the auxiliary replicas (stepping stones against enumeration) runs and prints
    the output the page shows."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "tempering.md").read_text(encoding="utf-8")
    section = text.split("## The auxiliary replicas", 1)[1]
    code, shown = re.search(r"```python\n(.*?)```\n\n```text\n(.*?)```", section, re.S).groups()
    exec(compile(code, "docs/tempering.md", "exec"), {})
    assert capsys.readouterr().out == shown
