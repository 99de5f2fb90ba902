"""bench/oracle_surrogate.py (the ceiling of delayed acceptance: a first stage that knows the exact energy) and
bench/delayed_influence.py (influence-ranked windows, offline) and bench/delayed_movetable.py (move and context
tables, offline).

The oracle is a bound only if (a) it is exact, so stage 2 accepts every survivor, and (b) its own forwards are not
counted as the sampler's rows: then the sampler forwards exactly T_e - 1 rows per accepted change.

Example:
    python3 -m pytest -q tests/bench/test_oracle_surrogate.py
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import mhfast
from mhfast.models.tabular import TabularMLM
from mhfast.sampler import memo as memo_module

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import delayed_influence  # noqa: E402
from oracle_surrogate import ExactEnergyOracle, greedy_starts  # noqa: E402


@pytest.mark.parametrize("energy", ["local", "raw"])
@pytest.mark.parametrize("memo", [0, 8, "8, terms only"])
def test_oracle_accepts_every_survivor_and_the_sampler_pays_rows_only_for_accepted_changes(energy, memo,
                                                                                           monkeypatch):
    lm = TabularMLM.random(num_tokens=3, length=8, seed=11, scale=0.5)
    oracle = ExactEnergyOracle(lm, energy)
    if memo == "8, terms only":  # the memo as it was before it kept model rows
        monkeypatch.setattr(memo_module, "ROWS_BUDGET_BYTES", 0)
    r = mhfast.sample(lm, 8, chains=4, epochs=40, burn_in=0, energy=energy, start="random",
                      memo=8 if memo else 0, delayed=oracle, seed=3)
    assert r.delayed_passed > 20 and int(r.delayed_accepted) == r.delayed_passed  # stage 2 never rejects
    changes = int(r.chain_novel.sum())
    # every accepted change pays T_e - 1 = 7 rows (stage 2's, or an accepted remembered X' refreshing the cache
    # where the memo keeps terms only), and without the memo nothing else does: the oracle's own rows (scored
    # apart) are not in model_rows. With the memo a miss whose X' another chain proposes in the same step forwards
    # its rows whatever stage 1 says (the other chain's hit reads them: delayed.py): a few more, whole proposals.
    # Where the memo keeps model rows, an accepted remembered X' forwards none: fewer than 7 per change
    rows = r.model_rows - r.init_rows
    if memo == 0:
        assert rows == 7 * changes
    elif memo == 8:
        assert rows % 7 == 0 and 7 * (changes - r.memo_hits) <= rows < 7 * changes
    else:
        assert rows % 7 == 0 and 7 * changes <= rows <= 7 * changes * 1.05
    assert oracle.rows == 8 * oracle.scored == 8 * len(oracle.values) > 0


def test_oracle_values_are_the_exact_energy_and_are_memoized():
    lm = TabularMLM.random(num_tokens=3, length=6, seed=0)
    oracle = ExactEnergyOracle(lm, "local")
    x = torch.tensor([[0, 1, 2, 0, 1, 2], [2, 2, 1, 0, 0, 1]])
    tokens = torch.cat([x, x.flip(0)])
    values = oracle(tokens, torch.zeros(4, dtype=torch.long))
    assert torch.allclose(values, mhfast.energy(lm, tokens, energy="local").e_local)
    assert oracle.scored == 2  # two distinct sequences


def test_oracle_tells_inputs_of_one_length_apart_by_lineage(bundled):
    """The bundled CMLM's test sentences 0 and 4 have targets of the same length: only lineage tells their
    sources apart; with a wrong source stage 2 would reject."""
    from mhfast.translation import bundled_test_file

    lines = Path(bundled_test_file("bundled", "--input")).read_text(encoding="utf-8").splitlines()
    inputs = {"source": [bundled.source_ids(lines[0]), bundled.source_ids(lines[4])]}
    options = dict(energy="raw", chains=2, epochs=2, burn_in=0, anneal=0.08)
    starts = greedy_starts(bundled.cmlm, inputs, options)
    assert starts.shape[0] == 2 and int((starts != bundled.cmlm.pad_id).sum(1).unique().numel()) == 1
    oracle = ExactEnergyOracle(bundled.cmlm, "raw", inputs["source"], starts)
    r = mhfast.sample(bundled.cmlm, **inputs, **options, delayed=oracle, memo=0, seed=0)  # (memo: see above)
    assert r.delayed_passed > 0 and int(r.delayed_accepted) == r.delayed_passed
    t_e = mhfast.scoring.api.energy_positions(bundled.cmlm, starts).sum(1)  # [B]
    assert r.model_rows - r.init_rows == int(((t_e - 1) * r.chain_novel.sum((0, 2))).sum())


def test_the_oracle_stays_exact_through_forced_accept_epochs(bundled):
    """Appendix F's Table 5 settings force the first 2 epochs to accept: those moves are never tested, so the
    oracle never sees their states and lineage cannot tell two sources apart. With one input it needs none, and
    bench_delayed.py runs a CMLM's inputs one at a time under the oracle then (the same law): still exact."""
    import bench_delayed
    from mhfast.translation import bundled_test_file

    lines = Path(bundled_test_file("bundled", "--input")).read_text(encoding="utf-8").splitlines()
    inputs = {"source": [bundled.source_ids(lines[0]), bundled.source_ids(lines[4])]}
    options = dict(energy="raw", chains=2, epochs=4, burn_in=2, anneal=0.02, proposal_temperature=0.8,
                   force_accept_epochs=2)
    run = bench_delayed.one_run(bundled.cmlm, inputs, options, "oracle", 0)
    assert run["passed"] > 0 and int(run["accepted"]) == run["passed"]  # stage 2 never rejects: exact
    assert len(run["best each"]) == 2 and run["oracle rows"] > 0
    alone = [bench_delayed.one_run(bundled.cmlm, {"source": [s]}, options, "oracle", 0) for s in inputs["source"]]
    assert run["rows"] == sum(a["rows"] for a in alone) and run["changes"] == sum(a["changes"] for a in alone)


def _coupled(seed: int, n: int = 200, T: int = 10) -> dict:
    """Proposals whose change at i moves the term at (i + 3) % T most (so no distance window sees it)."""
    g = torch.Generator().manual_seed(seed)
    i = torch.randint(0, T, (n,), generator=g)
    diff = torch.randn(n, T, generator=g, dtype=torch.float64) * 0.2
    diff[torch.arange(n), (i + 3) % T] += 2 * torch.randn(n, generator=g, dtype=torch.float64)
    return {"diff": diff, "i": i, "log_hastings": -diff[torch.arange(n), i], "T": T}


def test_influence_ranking_finds_the_coupled_position_with_the_window_s_row_count():
    table, count = delayed_influence.influence_table([_coupled(0)], 10)
    window, influence = delayed_influence.ranked_sets(table, count, 1)
    assert torch.equal(window.sum(1), influence.sum(1))  # the same rows at every position
    assert all(bool(influence[i, (i + 3) % 10]) and not bool(window[i, (i + 3) % 10]) for i in range(10))
    stages = delayed_influence.first_stages(_coupled(1), [_coupled(0)])  # fitted on seed 0, evaluated on seed 1
    dE = _coupled(1)["diff"].sum(1)
    corr = {name: torch.corrcoef(torch.stack([s, dE]))[0, 1].item() for name, (s, _) in stages.items()}
    assert corr["influence 1"] > 0.9 > 0.5 > corr["window 1"]
    assert torch.equal(stages["exact (oracle, a bound)"][0], dE)


def test_saved_measurements_feed_the_influence_table(tmp_path):
    """bench/delayed_surrogates.py --save, then bench/delayed_influence.py on the file (one seed: two halves)."""
    import subprocess

    saved = tmp_path / "m.pt"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "delayed_surrogates.py"), "--quick", "--cases", "random",
                           "--seeds", "0", "--layers", "--sample-steps", "0", "--save", str(saved)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "| exact (oracle, a bound) |" in proc.stdout and "relative cost" not in proc.stdout  # no small model
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "delayed_influence.py"), str(saved)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "seeds ['0a', '0b']" in proc.stdout
    row = next(line for line in proc.stdout.splitlines() if line.startswith("| influence 1 |"))
    assert all(-1.0 <= float(c) <= 1.0 for c in row.split("|")[2].split(" / ")), row  # correlations


def _moves(seed: int, n: int = 120, T: int = 6) -> dict:
    """Proposals on a model whose move (i, a -> b) changes term (i + 2) % T by a fixed amount per move and token."""
    g = torch.Generator().manual_seed(seed)
    i = torch.randint(0, T, (n,), generator=g)
    x_old = torch.randint(0, 3, (n, T), generator=g)
    old = x_old[torch.arange(n), i]
    new = (old + 1 + torch.randint(0, 2, (n,), generator=g)) % 3
    x_new = x_old.clone()
    x_new[torch.arange(n), i] = new
    diff = torch.randn(n, T, generator=g, dtype=torch.float64) * 0.05
    j = (i + 2) % T
    diff[torch.arange(n), j] += (new - old).double() * (1.0 + x_old[torch.arange(n), j].double())
    return {"diff": diff, "i": i, "old": old, "new": new, "x_old": x_old, "x_new": x_new,
            "log_hastings": -diff[torch.arange(n), i], "T": T}


def test_move_tables_are_antisymmetric_and_predict_a_seen_move():
    """bench/delayed_movetable.py: a table entry of (i, b, a) is the negated (i, a, b) (what keeps the kernel
    reversible); the context table, fitted on other seeds, tracks dE where the window cannot see the change."""
    import delayed_movetable

    train = [_moves(0), _moves(1)]
    moves, cells = delayed_movetable.move_table(train), delayed_movetable.context_table(train)
    for (i, a, b), v in moves.items():
        assert torch.allclose(moves[(i, b, a)], -v)
    for (i, a, b, j, x), v in cells.items():
        assert cells[(i, b, a, j, x)] == pytest.approx(-v)
    test = _moves(2)
    stages = delayed_movetable.first_stages(test, train)
    dE = test["diff"].sum(1)
    corr = {name: torch.corrcoef(torch.stack([s, dE]))[0, 1].item() for name, (s, _) in stages.items()}
    assert corr["context table (else influence 2)"] > 0.95 > 0.5 > corr["window 1"]
    assert not delayed_movetable.novel(test, [test]).any()  # every X' of a seed is among its own proposals
    report = delayed_movetable.report({0: _moves(0), 1: _moves(1), 2: test})
    assert "memo-novel proposals" in report and "| context table (else influence 2) |" in report
