"""Exact early rejection (option delayed="early:K"; mhfast.sampler.moves.delayed, docs/delayed.md).

Stage 1 forwards the rows of X' at K*2 positions, bounds E(X') from below (the other local terms taken as 0) and
meets exact MH's test with exact MH's own uniform; stage 2 is exact MH's test. So the chains must be plain MH's,
bit for bit, with fewer rows. Checks: (1) on a tabular model where the bound decides often (neighbours copy each
other: a change at i makes its neighbours' terms jump), the same chains, energies and acceptance as plain MH with
the memo off and on, an extra energy term, annealing, parallel tempering (fixed and tuned ladders), several
inputs, with and without burn-in; fewer rows, some proposals stopped at stage 1; (2) the same chains on a small
BERT on every device; (3) the ranking by the terms of X' keeps learning and re-ranks each epoch; (4) the
option's checks (the raw energy, block MH, bad values).
"""
from __future__ import annotations

import pytest
import torch

import mhfast
from mhfast.models.tabular import TabularMLM
from mhfast.sampler.moves.influence import InfluenceWindows

from exact_checks import masks, run_and_compare, tiny_bert

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def neighbour_copy(T: int = 6, V: int = 3, J: float = 4.0, seed: int = 0) -> TabularMLM:
    """Ordinary tokens 0..V-1 (mask V, pad V+1) on T positions; a position's logits given the rest: J for each
    neighbour's token plus a little noise. Near a run of equal tokens every term is small, and a change at i makes
    its neighbours' terms jump by about J: the bound of a window of 1 sees the change, so it rejects early."""
    W = V + 2
    codes = torch.arange(W ** T)
    digits = torch.stack([(codes // W ** (T - 1 - t)) % W for t in range(T)], dim=1)
    g = torch.Generator().manual_seed(seed)
    table = 0.3 * torch.randn(W ** T, T, W, generator=g)
    for t in range(T):
        for nb in (t - 1, t + 1):
            if 0 <= nb < T:
                table[:, t, :V] += J * torch.nn.functional.one_hot(digits[:, nb].clamp(max=V), W)[:, :V]
    return TabularMLM({T: table}, mask_id=V, pad_id=V + 1)


def _pair(model, **kw):
    bound = {k: kw.pop(k) for k in ("delayed_min_temperature",) if k in kw}  # (early rejection's option only)
    plain = mhfast.sample(model, **kw)
    early = mhfast.sample(model, **kw, delayed="early:1", **bound)
    return plain, early


CASES = [
    ("memo-off", dict(memo=0)),
    ("memo-auto", dict()),
    ("no-burn-in", dict(burn_in=0, memo=0)),
    ("extra-term", dict(extra_energy=[lambda t: 0.7 * (t[:, 0] == t[:, -1]).float()])),
    ("annealed", dict(target_temperature=1.0, anneal=0.1, min_target_temperature=0.4)),
    ("tempered-fixed", dict(tempering=[1.0, 2.0, 4.0], memo=0)),
    ("tempered-tuned", dict(tempering=3)),
    ("sharp", dict(target_temperature=0.5, order="random")),
    # forced-accept epochs read remembered terms without a test: the partial entries are completed first
    ("forced-accept", dict(force_accept_epochs=3)),
    ("forced-accept-memo-off", dict(force_accept_epochs=3, memo=0)),  # (no memo: nothing to complete; it crashed)
    # plain MH's step below delayed_min_temperature: the same chains again, the partial entries completed there too
    ("warm-only", dict(target_temperature=1.0, anneal=0.1, min_target_temperature=0.4, delayed_min_temperature=0.7)),
    ("warm-only-memo-off", dict(target_temperature=1.0, anneal=0.1, min_target_temperature=0.4,
                                delayed_min_temperature=0.7, memo=0)),
    ("proposal-temperature", dict(proposal_temperature=0.8, top_p=0.95)),
]


@pytest.mark.parametrize("name,kw", CASES, ids=[c[0] for c in CASES])
def test_early_rejection_runs_plain_mh_s_chains_with_fewer_rows(name, kw):
    model = neighbour_copy()
    run = {**dict(length=6, chains=8, epochs=14, burn_in=3, seed=2, energy="local", start="random"), **kw}
    plain, early = _pair(model, **run)
    assert torch.equal(plain.tokens, early.tokens), name
    assert torch.equal(plain.energy, early.energy) and torch.equal(plain.e_local, early.e_local)
    assert torch.equal(plain.acceptance_rate, early.acceptance_rate)
    assert torch.equal(plain.traces, early.traces)
    if "tempered" in name:
        assert torch.equal(plain.ladder, early.ladder) and torch.equal(plain.swap_rate, early.swap_rate)
    # a real screen: proposals stopped at stage 1 (exact MH rejects every one of them), their rows not forwarded
    assert 0 < early.delayed_accepted <= early.delayed_passed < early.delayed_tested
    assert early.delayed_rows_saved > 0
    if kw.get("memo") == 0:  # (with the memo a stopped proposal is not remembered: its return may cost rows again)
        assert early.model_rows < plain.model_rows


@pytest.mark.parametrize("memo", [0, "auto"])
def test_early_rejection_matches_enumeration(memo, device):
    """The target by enumeration (tests/exact_checks.py's TV bound) on every device, memo off and on: the chains
    are plain MH's, but this holds without comparing them with another run."""
    model = neighbour_copy(T=4, J=1.0)  # (at J = 2 plain MH itself needs more than 30 sweeps to cross)
    template, free = masks(model, 4)
    tv, bound, result = run_and_compare(device, model, template, free, epochs=30, burn_in=5, seed=1, energy="local",
                                        delayed="early:1", memo=memo)
    assert tv < bound, f"TV {tv:.4f} >= bound {bound:.4f}"
    assert 0 < result.delayed_accepted <= result.delayed_passed < result.delayed_tested  # a real screen


def test_stopped_proposals_are_remembered_and_completed_when_they_return(monkeypatch):
    """With the memo, a proposal stopped early is remembered with partial terms; when a chain proposes it again
    and it passes the bound, its missing rows are forwarded then (moves.delayed.complete_partial): the chains are
    still plain MH's, and the returns that stop again cost no rows."""
    import mhfast.sampler.moves.delayed as delayed

    completed = []
    real = delayed.complete_partial
    monkeypatch.setattr(delayed, "complete_partial", lambda *a, **k: completed.append(real(*a, **k)) or completed[-1])
    model = neighbour_copy()
    kw = dict(length=6, chains=8, epochs=30, burn_in=3, seed=4, energy="local", start="random")
    plain = mhfast.sample(model, **kw)
    early = mhfast.sample(model, **kw, delayed="early:1")
    off = mhfast.sample(model, **kw, delayed="early:1", memo=0)
    assert torch.equal(plain.tokens, early.tokens) and torch.equal(plain.energy, early.energy)
    assert torch.equal(plain.tokens, off.tokens)
    assert any(completed)  # the path ran
    assert early.memo_hits == plain.memo_hits  # stopped proposals are remembered as plain MH's are
    assert early.model_rows < plain.model_rows


def test_several_inputs_and_the_reference_ops_give_plain_mh_s_chains():
    model = neighbour_copy(T=6)
    init = torch.tensor([[0, 0, 0, 1, 1, 1], [2, 2, 2, 2, 2, 2], [0, 1, 2, 0, 1, 2]])
    kw = dict(init=init, chains=4, epochs=10, burn_in=2, seed=7, energy="local", memo=0)
    for backend in ("compiled", "reference"):  # (each against plain MH on the same ops: they round alike)
        plain = mhfast.sample(model, **kw, backend=backend)
        early = mhfast.sample(model, **kw, delayed="early:1", backend=backend)
        assert torch.equal(plain.tokens, early.tokens) and torch.equal(plain.energy, early.energy), backend
        assert early.delayed_rows_saved > 0 and early.model_rows < plain.model_rows


def test_an_input_leaving_the_batch_keeps_the_ranking_of_the_others():
    """until_rhat: the chains of an input that converged leave the batch, and the others keep their input ids.
    The ranking by value keeps learning all run long from those left, in rows kept for every id (it crashed when
    the input with the larger id left first: its sums were re-sized from the ids still present)."""
    from mhfast.models.tabular import ConditionalTabularMLM

    cond = ConditionalTabularMLM.random(num_tokens=3, lengths=(4, 5), num_sources=2, seed=5)
    kw = dict(source=torch.tensor([0, 1]), chains=24, epochs=12, burn_in=0, until_rhat=1.5, energy="local", seed=21)
    plain, early = mhfast.sample(cond, **kw), mhfast.sample(cond, **kw, delayed="early:1", memo=0)
    assert plain.epochs_run.tolist() == [12, 10]  # input 1 left first
    assert torch.equal(plain.tokens, early.tokens) and torch.equal(plain.energy, early.energy)
    assert early.delayed_rows_saved > 0


@pytest.mark.parametrize("k", [0, 1, 3])
def test_a_small_bert_s_chains_are_plain_mh_s_on_every_device(k, device):
    """Float32 rows of a real transformer (forwarded in two batches instead of one) on every device; K = 0
    forwards no row in stage 1 (its bound is the proposed position's term alone)."""
    model = tiny_bert(device)
    kw = dict(length=10, chains=4, epochs=5, burn_in=2, seed=3, energy="local", target_temperature=0.3,
              device=device)
    plain = mhfast.sample(model, **kw)
    early = mhfast.sample(model, **kw, delayed=f"early:{k}")
    assert torch.equal(plain.tokens, early.tokens)
    torch.testing.assert_close(plain.energy, early.energy, rtol=1e-5, atol=1e-5)
    assert early.delayed_tested > 0 and early.delayed_passed <= early.delayed_tested


def test_the_ranking_by_value_keeps_learning_and_reranks_each_epoch():
    """learn_until=None: observing never stops, and the sets follow the sums at the first step of each epoch."""
    from types import SimpleNamespace
    from mhfast.op_types import SiteProposal

    T = 5
    state = SimpleNamespace(inputs=torch.tensor([0]), tokens=torch.zeros(1, T, dtype=torch.long),
                            energy_mask=torch.ones(1, T, dtype=torch.bool), raw_terms=torch.zeros(1, T),
                            local_terms=torch.full((1, T), 9.0), energy="local")
    w = InfluenceWindows(1, None, by_value=True)
    p = SiteProposal(torch.tensor([0]), torch.tensor([2]), torch.zeros(1, dtype=torch.long), torch.zeros(1),
                     torch.zeros(1))
    assert w.learning(0) and w.learning(10**6)
    w.observe(state, p, torch.zeros(1, T), torch.tensor([[0.0, 5.0, 0.0, 0.0, 3.0]]))  # by value: not the change
    w.update(state, 0)
    assert w.sets[0, 2].nonzero().flatten().tolist() == [1, 4]  # two rows (K = 1), the largest terms of X'
    w.observe(state, p, torch.zeros(1, T), torch.tensor([[9.0, 0.0, 0.0, 0.0, 0.0]]))
    w.observe(state, p, torch.zeros(1, T), torch.tensor([[9.0, 0.0, 0.0, 0.0, 0.0]]))
    w.update(state, 0)  # the same epoch: not re-ranked
    assert w.sets[0, 2].nonzero().flatten().tolist() == [1, 4]
    w.update(state, 1)
    assert w.sets[0, 2].nonzero().flatten().tolist() == [0, 1]  # means 6, 1.67, 0, 0, 1
    assert w.sums is not None  # kept


@pytest.mark.parametrize("kwargs,words", [
    (dict(energy="raw"), ["delayed", "early:2", "energy", "local", "raw"]),
    (dict(energy="local", sampler="block-mh"), ["delayed", "early:2", "sampler", "mh"]),
    (dict(energy="local", capture="static"), ["delayed", "capture"]),
])
def test_bad_combinations_are_clear_errors(kwargs, words):
    with pytest.raises(ValueError) as err:
        mhfast.sample(TabularMLM.random(3, 6, seed=0), 6, chains=2, epochs=2, burn_in=0, delayed="early:2", **kwargs)
    for w in words:
        assert w in str(err.value), (w, str(err.value))


@pytest.mark.parametrize("value", ["early:", "early:-1", "early:x", "early:1.5", "early"])
def test_bad_early_values_are_refused(value):
    with pytest.raises(ValueError, match="delayed"):
        mhfast.sample(TabularMLM.random(3, 6, seed=0), 6, chains=2, epochs=2, energy="local", delayed=value)


def test_cli_runs_it_and_refuses_the_raw_energy_in_one_line(tmp_path):
    """--delayed early:K from the option spec: with --energy local it runs and the stats line counts both stages;
    with the default raw energy it is one line naming both flags, exit 2."""
    import subprocess
    import sys

    pytest.importorskip("transformers")
    from hf_tiny_models import save_tiny_bert_dir

    bert = save_tiny_bert_dir(tmp_path / "bert")
    cmd = [sys.executable, "-m", "mhfast", "sample", "--model", bert, "--length", "12", "--epochs", "3", "--burn-in",
           "1", "--chains", "2", "--seed", "1", "--delayed", "early:1"]
    bad = subprocess.run(cmd, capture_output=True, text=True)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "--delayed" in bad.stderr and "--energy" in bad.stderr, bad.stderr
    ok = subprocess.run(cmd + ["--energy", "local"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    stats = ok.stdout.strip().splitlines()[-1]
    assert "delayed: stage 1 " in stats and "rows saved " in stats, stats


@pytest.mark.parametrize("log_alpha", [-0.5, -2.0, -5.0])
def test_the_first_test_leans_towards_passing_by_its_margin(log_alpha, monkeypatch):
    """Early rejection promises never to reject what exact MH accepts, float rounding included: its test
    (moves.delayed.first_stage, early=True) passes log u up to 1e-4 (1 + |log alpha|) ABOVE the lower bound's log
    alpha. A margin of the other sign passed every run (the chains' uniforms never fell that close); here u is put
    just inside the margin and just outside it."""
    from types import SimpleNamespace

    import mhfast.sampler.moves.delayed as delayed

    n = 2
    margin = 1e-4 * (1 + abs(log_alpha))
    # log u = log_alpha + margin/2 (inside: must pass) and log_alpha + 2 margin (outside: must not)
    u = torch.tensor([log_alpha + margin / 2, log_alpha + 2 * margin], dtype=torch.float64).exp().float()
    monkeypatch.setattr(delayed.rng, "uniforms_from_keys", lambda *a, **k: u)
    state = SimpleNamespace(target=torch.zeros(n), tokens=torch.zeros(n, 3, dtype=torch.long),
                            rng_keys=torch.zeros(n, dtype=torch.long))
    proposal = SimpleNamespace(ch=torch.arange(n), logq_reverse=torch.full((n,), log_alpha),
                               logq_forward=torch.zeros(n))
    ctx = SimpleNamespace(backend=SimpleNamespace(counter_uniforms=None))
    passed = delayed.first_stage(ctx, state, proposal, torch.zeros(n), beta=1.0, epoch=0, step=0, early=True)
    assert passed.tolist() == [True, False]
