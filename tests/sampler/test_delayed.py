"""Delayed-acceptance MH (option delayed; mhfast.sampler.moves.delayed) samples the exact target.

Checks: (1) enumeration on tabular models (the TV bound of tests/sampler/test_sampler_exact.py) for both energies, with an
extra energy term, annealed, with a poor surrogate (window 0: the proposed position's own term only, which under
the local energy the Hastings ratio cancels exactly, so stage 1 passes everything; window 1 on a strongly coupled
model) and with an exact one (a window covering every position: stage 2 accepts every survivor, and the acceptance
matches plain MH's); (2) the two-stage probability of every move from one state at one position, computed by hand
from the model's conditionals, against the empirical one-step transition of many chains; (3) beta as a tensor [M]
(parallel tempering's form, passed through opaquely); forced-accept epochs; the options' errors. Each enumeration
case runs with the proposal memo off and on (it supplies remembered proposals' terms to both stages; its own checks:
tests/sampler/test_delayed_memo.py; block MH: tests/sampler/test_delayed_block.py).
"""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import mhfast
from mhfast.models.tabular import TabularMLM
from mhfast.sampler import options, schedules

from hf_tiny_models import save_tiny_bert_dir
from exact_checks import N_CHAINS, empirical, ends_term, enumerate_states, masks, one_site_moves, \
    one_step_distribution, ordinary_tokens, run_and_compare, terms_by_hand, tv_and_bound

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CASES = [
    # id, model kwargs, sample kwargs
    ("raw-window1", dict(), dict(energy="raw", delayed="window:1")),
    ("local-window1", dict(features=True), dict(energy="local", delayed="window:1")),
    ("raw-window0-poor", dict(), dict(energy="raw", delayed="window:0")),
    ("local-window0-poor", dict(), dict(energy="local", delayed="window:0")),
    ("raw-window1-coupled", dict(scale=1.2), dict(energy="raw", delayed="window:1", tau=2.0)),
    # (90 epochs: from the template's start, 30 at tau 0.5 leave the chains short of the target, at chi-square
    # p 1e-12 for plain MH too)
    ("local-window1-annealed", dict(), dict(energy="local", delayed="window:1", tau=0.5, start_tau=1.0, anneal=0.1,
                                            min_target_temperature=0.5, epochs=90)),
    ("raw-exact-window", dict(), dict(energy="raw", delayed="window:4")),
    ("local-auto-off", dict(), dict(energy="local", delayed="auto")),  # T = 4: auto is off (plain MH)
    # parallel tempering: the rungs' betas (a tensor, one per chain row) reach both stages; rung 0 is the target
    ("raw-window1-tempered", dict(scale=1.2), dict(energy="raw", delayed="window:1", tempering=[1.0, 2.5])),
    ("local-window1-tempered-tuned", dict(), dict(energy="local", delayed="window:1", tempering=3)),
]


#: each case with the memo off and on: on, it supplies numbers only (remembered proposals meet both stages
#: without rows), so the kernel and the target are the same
MEMO_CASES = [(f"{name}-memo{m}", mk, {**kw, "memo": m}) for name, mk, kw in CASES for m in (0, "auto")
              if not (kw["delayed"] == "auto" and m == 0)]


@pytest.mark.parametrize("name,model_kwargs,kwargs", MEMO_CASES, ids=[c[0] for c in MEMO_CASES])
def test_delayed_matches_enumeration(name, model_kwargs, kwargs, device):
    model = TabularMLM.random(num_tokens=3, length=4, seed=11, **{"scale": 0.5, **model_kwargs})
    template, free = masks(model, 4)
    tv, bound, result = run_and_compare(device, model, template, free, burn_in=5, seed=1, **{"epochs": 30, **kwargs})
    assert tv < bound, f"{name}: TV {tv:.4f} >= bound {bound:.4f}"
    if kwargs["delayed"] == "auto":
        assert result.delayed_tested == 0 and result.memo_hits > 0  # off, and the memo on as always
        return
    assert 0 < result.delayed_accepted <= result.delayed_passed <= result.delayed_tested
    assert (result.memo_hits > 0) == (kwargs["memo"] != 0)  # 81 states, 3,000 chains: the memo answers most
    if "window0-poor" in name and "local" in name:  # the own term is cancelled by the Hastings ratio: no screen
        assert result.delayed_passed == result.delayed_tested and result.delayed_rows_saved == 0
    if "window1" in name:  # a real screen: some proposals stopped at stage 1
        assert result.delayed_passed < result.delayed_tested
        if kwargs["memo"] == 0:  # their other rows never forwarded (with the memo most had no rows to forward)
            assert result.delayed_rows_saved > 0


@pytest.mark.parametrize("memo", [0, "auto"])
@pytest.mark.parametrize("energy", ["raw", "local"])
def test_delayed_with_extra_energy_matches_enumeration(energy, memo, device):
    model = TabularMLM.random(num_tokens=3, length=4, seed=7, scale=0.5)
    template, free = masks(model, 4)
    states = enumerate_states(model, template, free)
    p_model = _enumerated_target(model, states, energy)
    weight = torch.softmax(torch.log(p_model) - ends_term(states).double(), 0)
    result = mhfast.sample(model, init=template[None], free_positions=free[None], chains=N_CHAINS, energy=energy,
                           epochs=30, burn_in=5, seed=3, delayed="window:1", extra_energy=[ends_term], memo=memo,
                           device=device)
    tv, bound = tv_and_bound(weight, empirical(states, result.tokens[0].cpu()), N_CHAINS)
    assert tv < bound, f"TV {tv:.4f} >= bound {bound:.4f}"
    assert result.delayed_passed < result.delayed_tested
    assert (result.memo_hits > 0) == (memo != 0)  # under delayed acceptance the memo acts with extra terms


def _enumerated_target(model, states: torch.Tensor, energy: str) -> torch.Tensor:
    e_raw, e_local = terms_by_hand(model, states)
    return torch.softmax(-(e_raw if energy == "raw" else e_local).sum(1).double(), 0)


def _two_stage(model, x: torch.Tensor, i: int, k: int, energy: str, tau: float) -> tuple[torch.Tensor, ...]:
    """By hand: the probability of each token y at position i after one delayed-acceptance step from ``x``
    (q(y | x) alpha1 alpha2, the rest on x_i); the same for three wrong kernels by name (plain MH, a stage 1
    without its Hastings ratio, stage 1 alone), f64[V] each; and stage 1's (sum over y != x_i of q(y) alpha1(y),
    sum of q(y))."""
    logq, words, d = one_site_moves(model, x, i, energy)
    window = (torch.arange(x.shape[0]) - i).abs() <= k
    d_exact, d_sur = d.sum(1), d[:, window].sum(1)
    hastings = logq[x[i]] - logq[words]
    a1 = torch.clamp(torch.exp(-d_sur / tau + hastings), max=1.0)
    a2 = torch.clamp(torch.exp(-(d_exact - d_sur) / tau), max=1.0)
    a_mh = torch.clamp(torch.exp(-d_exact / tau + hastings), max=1.0)
    a1_no_ratio = torch.clamp(torch.exp(-d_sur / tau), max=1.0)
    other = torch.tensor(words) != x[i]
    q_words = torch.exp(logq[words])
    stage1 = ((q_words * a1)[other].sum(), q_words[other].sum())
    rivals = {"plain MH": a_mh, "a stage 1 without q's ratio": a1_no_ratio * a2, "stage 1 alone": a1}
    return (one_step_distribution(logq, words, int(x[i]), a1 * a2),
            {name: one_step_distribution(logq, words, int(x[i]), a) for name, a in rivals.items()}, stage1)


@pytest.mark.parametrize("energy", ["raw", "local"])
def test_two_stage_probability_of_every_move(energy):
    """One step at one position (only it is free) from one state, 20000 chains: the empirical distribution of the
    new token matches q alpha1 alpha2 computed by hand, and differs from plain MH's, from a stage 1 that drops its
    Hastings ratio and from stage 1 alone (the test has power against each)."""
    model = TabularMLM.random(num_tokens=5, length=6, seed=4, scale=1.5)
    i, n, tau = 2, 20000, 0.8
    words = ordinary_tokens(model)
    # From words (0, 1, 0, 0, 1, 1) every local-energy stage-1 ratio reached 1 with q's ratio or without it, so a
    # stage 1 that dropped the ratio gave the same kernel. This start, found by enumerating all 5^6, is > 30 bounds
    # from every rival for both energies.
    x = torch.tensor([words[j] for j in (2, 1, 2, 3, 1, 4)])
    free = torch.zeros(6, dtype=torch.bool)
    free[i] = True
    r = mhfast.sample(model, init=x[None], free_positions=free[None], chains=n, epochs=1, burn_in=0, seed=9,
                      energy=energy, target_temperature=tau, delayed="window:1")
    got = torch.bincount(r.tokens[0, :, i], minlength=model.vocab_size).double() / n
    want, rivals, stage1 = _two_stage(model, x, i, 1, energy, tau)
    bound = 5 * torch.sqrt(want * (1 - want) / n) + 1e-9
    assert bool(((got - want).abs() <= bound).all()), f"{got.tolist()} vs {want.tolist()}"
    for name, rival in rivals.items():
        assert float((rival - want).abs().max()) > 10 * float(bound.max()), f"{name}'s kernel must differ here"
    # stage 1's pass rate among the changed proposals, by hand: sum_y q(y) alpha1(y) / sum_y q(y) over y != x_i
    rate, changed = r.delayed_passed / r.delayed_tested, r.delayed_tested / n
    want_rate = float(stage1[0] / stage1[1])
    assert abs(changed - float(stage1[1])) < 5 * (changed * (1 - changed) / n) ** 0.5, (changed, float(stage1[1]))
    assert abs(rate - want_rate) <= 5 * (want_rate * (1 - want_rate) / r.delayed_tested) ** 0.5 + 1e-12, (rate,
                                                                                                       want_rate)


def test_exact_window_accepts_as_plain_mh():
    """A window covering every position: dE~ = dE exactly, so stage 2 accepts every survivor and the acceptance
    rate is plain MH's (the same kernel with another stream of uniforms)."""
    model = TabularMLM.random(num_tokens=4, length=5, seed=2, scale=0.8)
    kw = dict(chains=2000, epochs=8, burn_in=0, seed=5, energy="local", memo=0)
    plain = mhfast.sample(model, 5, **kw)
    exact = mhfast.sample(model, 5, delayed="window:5", **kw)
    assert exact.delayed_accepted == exact.delayed_passed > 0 and exact.delayed_rows_saved == 0
    n = plain.proposals
    a, b = float(plain.acceptance_rate.mean()), float(exact.acceptance_rate.mean())
    assert abs(a - b) < 6 * (a * (1 - a) / n) ** 0.5 * 2 ** 0.5 * 3, (a, b)  # x3: steps of a chain correlate


def _tensor_beta(monkeypatch, rows: int, value: float | None = None, device: str = "cpu") -> None:
    """The epoch schedule with every beta as a float64 tensor [rows] on ``device`` (parallel tempering's form)."""
    original = schedules.epoch_schedule

    def per_row(cfg):
        def beta(e):
            return torch.full((rows,), e.beta if value is None else value, dtype=torch.float64, device=device)
        return [e if e.beta is None else schedules.Epoch(e.index, e.target_temperature, beta(e), e.post_burn_in)
                for e in original(cfg)]

    monkeypatch.setattr(schedules, "epoch_schedule", per_row)


@pytest.mark.parametrize("backend", ["compiled", "reference"])
def test_tensor_beta_passes_through(monkeypatch, backend, device):
    """beta as a tensor [M] equal to the number gives the same chains bit for bit; beta 0 on every row makes stage
    2 accept every survivor (exp(-0 (dE - dE~)) = 1) while stage 1 still applies the Hastings ratio."""
    model = TabularMLM.random(num_tokens=4, length=8, seed=3, scale=1.0)
    kw = dict(chains=6, epochs=4, burn_in=0, seed=2, energy="raw", delayed="window:1", backend=backend,
              target_temperature=0.7, device=device)
    number = mhfast.sample(model, 8, **kw)
    _tensor_beta(monkeypatch, 6, device=device)
    rows = mhfast.sample(model, 8, **kw)
    assert torch.equal(number.tokens, rows.tokens) and number.delayed_accepted == rows.delayed_accepted
    _tensor_beta(monkeypatch, 6, 0.0, device=device)
    cold = mhfast.sample(model, 8, **kw)
    assert cold.delayed_tested > cold.delayed_passed == cold.delayed_accepted > 0


def test_forced_accept_epochs_skip_both_tests():
    model = TabularMLM.random(num_tokens=4, length=8, seed=3)
    r = mhfast.sample(model, 8, chains=3, epochs=2, burn_in=0, force_accept_epochs=2, delayed="window:1")
    assert r.delayed_tested == 0 and float(r.acceptance_rate.min()) == 1.0


@pytest.mark.parametrize("kwargs,words", [
    (dict(delayed="window:x"), ["delayed", "window:K"]),
    (dict(delayed="window:-1"), ["delayed", "window:K"]),
    (dict(delayed="window:1048577"), ["delayed", "K an int in [0, 1048576]"]),  # (it had said "K an int >= 0")
    (dict(delayed="maskless"), ["delayed", "'maskless'"]),
    (dict(delayed=2), ["delayed", "2"]),
    (dict(delayed="window:1", sampler="gibbs"), ["delayed", "sampler", "gibbs"]),
    (dict(delayed="auto", capture="static"), ["delayed", "capture", "static"]),
    (dict(memo=4, extra_energy=[lambda t: t[:, 0].float()]), ["memo", "extra_energy", "delayed"]),
])
def test_bad_options_are_clear_errors(kwargs, words):
    model = TabularMLM.random(num_tokens=3, length=3, seed=0)
    with pytest.raises(ValueError) as err:
        mhfast.sample(model, 3, chains=2, epochs=1, burn_in=0, **kwargs)
    for w in words:
        assert w in str(err.value), str(err.value)


def test_cli_flag_and_stats_line(tmp_path):
    """--delayed is a flag of mhfast sample (from the option spec); a bad value is one line, exit 2; the stats line
    reports both stages and the rows saved."""
    pytest.importorskip("transformers")
    bert = save_tiny_bert_dir(tmp_path / "bert")
    cmd = [sys.executable, "-m", "mhfast", "sample", "--model", bert, "--length", "12", "--epochs", "3", "--burn-in",
           "0", "--chains", "2", "--seed", "1"]
    bad = subprocess.run(cmd + ["--delayed", "window:z"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--delayed" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    ok = subprocess.run(cmd + ["--delayed", "window:1"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    stats = ok.stdout.strip().splitlines()[-1]
    assert "delayed: stage 1 " in stats and "stage 2 " in stats and "rows saved " in stats, stats


def test_conditional_model_sub_batches_and_backends_give_the_same_chains():
    """A conditional model (per-source context rows), rows forwarded one per sub-batch or all at once, compiled or
    reference ops: the same chains (the window's and the survivors' rows reach the cache alike)."""
    from mhfast.models.tabular import ConditionalTabularMLM

    cond = ConditionalTabularMLM.random(num_tokens=3, lengths=(5, 6), num_sources=2, seed=5)
    kw = dict(source=torch.tensor([0, 1]), chains=3, epochs=4, burn_in=0, delayed="window:1", seed=2)
    runs = [mhfast.sample(cond, **kw, **extra) for extra in (
        {}, {"backend": "reference"}, {"max_tokens_per_batch": 6}, {"max_tokens_per_batch": 6, "backend": "reference"})]
    for r in runs[1:]:
        assert torch.equal(r.tokens, runs[0].tokens) and torch.equal(r.energy, runs[0].energy)
        assert r.delayed_rows_saved == runs[0].delayed_rows_saved > 0


def test_auto_is_influence2_on_inputs_long_enough(monkeypatch):
    """delayed='auto' (options.resolved_delayed): influence:2 (the same chains; the kernel ranks its windows, K = 2)
    on an input with more than 8 energy rows per proposal, with the memo on or off and with extra energy terms (the
    memo composes with it), with and without burn-in; window:2 in block MH (its windows are distance windows); off
    on a shorter input (the same chains as delayed=None)."""
    from test_sampler_exact import tiny_bert

    import mhfast.sampler.moves.delayed as delayed_move

    ranked = []  # the K of every influence ranking a kernel builds (tiny_bert's chains cannot tell the windows apart)
    real = delayed_move.InfluenceWindows
    monkeypatch.setattr(delayed_move, "InfluenceWindows",
                        lambda k, until, **kw: ranked.append(k) or real(k, until, **kw))
    model = tiny_bert()
    kw = dict(length=10, chains=3, epochs=3, seed=4, energy="local")
    for extra in ({"burn_in": 0}, {"burn_in": 0, "memo": 0}, {"burn_in": 0, "extra_energy": [ends_term]},
                  {"burn_in": 1}):
        auto, chosen = (mhfast.sample(model, delayed=d, **kw, **extra) for d in ("auto", "influence:2"))
        assert auto.delayed_tested > 0 and torch.equal(auto.tokens, chosen.tokens), extra
        assert auto.model_rows == chosen.model_rows and auto.memo_hits == chosen.memo_hits
    assert ranked == [2] * 8  # auto and influence:2, four times
    block = {**kw, "burn_in": 1, "sampler": "block-mh"}
    auto, window2 = (mhfast.sample(model, delayed=d, **block) for d in ("auto", "window:2"))
    assert auto.delayed_tested > 0 and torch.equal(auto.tokens, window2.tokens)
    assert auto.model_rows == window2.model_rows
    short = {**kw, "burn_in": 0, "length": 9}
    off, plain = mhfast.sample(model, delayed="auto", **short), mhfast.sample(model, **short)
    assert len(ranked) == 8  # neither block MH nor a run with auto off ranked windows
    assert off.delayed_tested == 0 and torch.equal(off.tokens, plain.tokens) and off.model_rows == plain.model_rows


@pytest.mark.parametrize("extra", [{}, {"sampler": "block-mh"}, {"sampler": "block-mh", "block_schedule": 1},
                                   {"tempering": 2}, {"extra_energy": [lambda x: (x == 5).sum(1).float()]}],
                         ids=["mh", "block-mh", "block-mh-single-site", "tempering", "extra-term"])
def test_auto_acts_on_each_input_by_its_own_length_whatever_shares_the_batch(extra):
    """delayed='auto' acts where an input has more than 9 energy positions (options.auto_fewest_energy). A batch of
    a long input (14 free positions) and a short one (5) gives each the chains it gets alone: the long one delayed
    acceptance's, the short one plain MH's. Until 2026-11-30 the longest input decided for the whole batch, so the
    short input's chains changed with what shared its call (a review found it), against the promise that chains do
    not depend on the batch. And an input that cannot run (an explicit memo with an extra term needs delayed
    acceptance to act on it) fails alone and in any batch alike. (The extra term counts a token: one of a row's ends
    would see the padding of a batch.)"""
    from exact_checks import tiny_bert

    model = tiny_bert()
    m, p = model.mask_id, model.pad_id
    init = torch.tensor([[m] * 14, [m] * 5 + [p] * 9])
    kw = dict(chains=2, epochs=5, burn_in=1, seed=0, start="random", energy="local", delayed="auto", **extra)
    both = mhfast.sample(model, init=init, **kw)
    long, short = (mhfast.sample(model, init=init[b:b + 1, :n], input_ids=[b], **kw) for b, n in ((0, 14), (1, 5)))
    assert long.delayed_tested > 0 and short.delayed_tested == 0
    assert both.delayed_tested == long.delayed_tested and both.delayed_accepted == long.delayed_accepted
    assert torch.equal(both.tokens[0], long.tokens[0]) and torch.equal(both.tokens[1, :, :5], short.tokens[0])
    assert torch.equal(both.chain_accepted[:, 0], long.chain_accepted[:, 0])  # [epochs, inputs, chains]
    assert torch.equal(both.chain_accepted[:, 1], short.chain_accepted[:, 0])
    # the energies up to float rounding: the short input's rows are padded in the batch, and on an AVX2-only AMD
    # EPYC a padded block-MH row's attention sums in another order (last bits: 9.5648 either way, 2026-12-02)
    assert torch.allclose(both.energy[1], short.energy[0], rtol=0, atol=1e-5)
    assert torch.allclose(both.energy[0], long.energy[0], rtol=0, atol=1e-5)
    if extra.get("sampler", "mh") == "mh" and "tempering" not in extra:
        refused = {**kw, "memo": 8, "extra_energy": [ends_term]}
        mhfast.sample(model, init=init[:1], **refused)  # the long input alone: delayed acceptance acts, memo may too
        for x in (init, init[1:, :5]):
            with pytest.raises(ValueError, match="memo"):
                mhfast.sample(model, init=x, **refused)


def test_auto_is_off_on_a_cuda_device_and_on_elsewhere(device):
    """delayed='auto' stays off where the chains are on a CUDA device (options.resolved_delayed: there the rows it
    saves save no time; measured 1.8x slower on an H200): the same chains as delayed=None; on the CPU it acts. A
    name (window:K) acts on either."""
    from exact_checks import tiny_bert

    model = tiny_bert(device)
    kw = dict(length=12, chains=3, epochs=3, burn_in=1, seed=4, energy="local", device=device)
    auto, plain, named = (mhfast.sample(model, **kw, **extra) for extra in ({"delayed": "auto"}, {},
                                                                              {"delayed": "window:2"}))
    assert named.delayed_tested > 0
    if device == "cuda":
        assert auto.delayed_tested == 0 and torch.equal(auto.tokens, plain.tokens)
        assert auto.model_rows == plain.model_rows
    else:
        assert auto.delayed_tested > 0
    for dev in ("cuda", "cuda:1", torch.device("cuda", 0)):
        assert options.resolved_delayed(options.config_from_kwargs({"delayed": "auto"}), 32, dev) is None
    assert options.resolved_delayed(options.config_from_kwargs({"delayed": "auto"}), 32, "cpu") == "influence:2"
