"""The mixmatch baseline of bench/ (bench_mixmatch.mixmatch_loop) samples the same target as mhfast's mh, and
bench_ess traces it the way mhfast traces its chains, so that their ESS compare (issue 33).

* exactness: on a tiny BERT whose every sequence can be enumerated, 3,000 independent mixmatch chains end
  distributed as exp(-E) for the raw and the local energy (total variation below the bound of
  tests/exact_checks.py), and not as exp(-2E), 0.25 away in total variation (the check has power; this model's
  raw and local targets are too close, 1e-4, to serve as each other's control);
* free positions (bench_ess's infilling case: some residues fixed): bench_ess.mixmatch_inputs gives the loop
  mhfast's energy positions (every position, the fixed ones included) and its free positions as the only proposal
  sites; on a tabular MLM (5 positions, 2 fixed; the tiny BERT's conditionals hardly depend on the context, so
  leaving the fixed terms out would not show), 3,000 chains keep the fixed tokens and end distributed as the
  enumerated exp(-E_local) over the sequences that agree with them, and not as the target whose energy leaves
  out the fixed positions' terms, 0.55 away in total variation (the check has power);
* the traces: the energies the loop hands its sweep hook are the state's own (enumeration's reference ops);
* bench_ess's mixmatch row: the draws, ESS and the same-law comparison against mh come out.

Example:
    python3 -m pytest -q tests/bench/test_mixmatch_loop.py
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from exact_checks import (empirical, energies, enumerate_states, masks, target_distribution, tiny_bert,
                          tv_and_bound)
from mhfast.models.tabular import TabularMLM
from mhfast.sampler.options import config_from_kwargs
from mhfast.sampler.problem import build_problem

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def bench(monkeypatch):
    """bench/ importable for one test (monkeypatch puts sys.path back, with what the scripts add)."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import bench_ess
    import bench_mixmatch
    return bench_mixmatch, bench_ess


@pytest.mark.slow  # 3,000 chains x 30 sweeps
@pytest.mark.parametrize("energy", ["raw", "local"])
def test_mixmatch_loop_samples_the_energys_target(bench, energy):
    bench_mixmatch, _ = bench
    lm = tiny_bert()
    template, free = masks(lm, 3)
    states = enumerate_states(lm, template, free)
    p, p_cold = (target_distribution(lm, states, free, energy, tau) for tau in (1.0, 0.5))
    n = 3000
    final: dict = {}
    out = bench_mixmatch.mixmatch_loop(lm, states[:1].repeat(n, 1), torch.arange(3), torch.arange(3), torch.float32,
                                       seed=1, energy=energy, sweeps=30,
                                       on_sweep=lambda s, x, e: final.update(x=x.clone()))
    p_hat = (final["x"][:, None, :] == states[None]).all(dim=2).double().mean(dim=0)
    assert float(p_hat.sum()) == pytest.approx(1.0)  # every chain sits in the enumerated space
    tv, bound = tv_and_bound(p, p_hat, n)
    assert tv < bound, f"{energy}: TV {tv:.4f} >= bound {bound:.4f}"
    tv_cold, bound_cold = tv_and_bound(p_cold, p_hat, n, fit=False)  # 0.25 from p: the check tells such targets apart
    assert tv_cold > bound_cold, f"the target at half the temperature is not told apart: TV {tv_cold:.4f}"
    assert 0 < out["acceptance"] < 1 and len(out["accepted"]) == 30


class TabularFullForward:
    """A TabularMLM as the mixmatch loop calls a model (``lm.model(rows)[0]``: logits [N, W, V] at every position,
    each from the table's entry for the row as it is); the loop reads them only at a row's masked position."""

    def __init__(self, table: TabularMLM):
        self.table, self.device = table, torch.device("cpu")
        self.vocab_size, self.mask_id, self.special_ids = table.vocab_size, table.mask_id, table.special_ids

    def model(self, rows: torch.Tensor) -> tuple[torch.Tensor]:
        return (torch.stack([self.table.masked_logits(rows, torch.full((rows.shape[0],), t))
                             for t in range(rows.shape[1])], dim=1),)


def test_mixmatch_loop_keeps_fixed_positions_and_samples_the_infilling_target(bench):
    """bench_ess's antiberty-infill case in small: 5 positions, the first 2 fixed, the last 3 free, energy local."""
    bench_mixmatch, bench_ess = bench
    table = TabularMLM.random(num_tokens=3, length=5, seed=1, scale=1.0)  # random conditionals: strong coupling
    init = torch.tensor([[1, 0, 2, 2, 1]])
    free = torch.tensor([[False, False, True, True, True]])
    n = 3000
    case = {"inputs": {"init": init, "free_positions": free}, "positions": torch.arange(5)}
    start, positions, sites, chains_free = bench_ess.mixmatch_inputs(case, n)
    # What mhfast's mh runs on for this input: the loop's energy positions and sites are its energy mask and free.
    problem = build_problem(table, config_from_kwargs({}), init=init, free_positions=free)
    assert positions.tolist() == problem.energy_mask[0].nonzero()[:, 0].tolist() == [0, 1, 2, 3, 4]
    assert sites.tolist() == problem.free[0].nonzero()[:, 0].tolist() == [2, 3, 4]
    assert torch.equal(chains_free, problem.free.expand(n, -1))
    states = enumerate_states(table, init[0], free[0])
    p = target_distribution(table, states, problem.energy_mask[0], "local", 1.0)
    p_free_only = target_distribution(table, states, free[0], "local", 1.0)  # the fixed positions' terms left out
    final: dict = {}
    bench_mixmatch.mixmatch_loop(TabularFullForward(table), start, positions, sites, torch.float32, seed=3,
                                 energy="local", sweeps=30, on_sweep=lambda s, x, e: final.update(x=x.clone()))
    assert torch.equal(final["x"][:, :2], start[:, :2])  # the fixed positions never change
    p_hat = empirical(states, final["x"])  # every chain is one of the enumerated sequences
    tv, bound = tv_and_bound(p, p_hat, n)
    assert tv < bound, f"TV {tv:.4f} >= bound {bound:.4f}"
    tv_other, bound_other = tv_and_bound(p_free_only, p_hat, n, fit=False)  # 0.55 from p: the check tells them apart
    assert tv_other > bound_other, f"the free-positions-only target is not told apart: TV {tv_other:.4f}"


def test_the_sweep_hook_sees_the_states_energies(bench):
    bench_mixmatch, _ = bench
    lm = tiny_bert()
    template, free = masks(lm, 4)
    start = enumerate_states(lm, template, free)[:1].repeat(6, 1)
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    bench_mixmatch.mixmatch_loop(lm, start, torch.arange(4), torch.arange(4), torch.float32, seed=2, energy="local",
                                 sweeps=3, on_sweep=lambda s, x, e: seen.append((x.clone(), e.clone())))
    assert len(seen) == 3 and not torch.equal(seen[-1][0], start)
    for x, e in seen:
        raw, local = energies(lm, x, free)
        torch.testing.assert_close(e, torch.stack([raw, local], dim=1), atol=1e-4, rtol=1e-5)


@pytest.mark.slow  # 4 runs of 2 samplers
def test_bench_ess_mixmatch_row_and_same_law_line(bench):
    """bench_ess on a tiny case: the mixmatch run is traced like mh's (the same summaries, draws = chains x
    post-burn-in sweeps), mh also reports its figures over the mixmatch run's sweeps, and the same-law line
    compares them."""
    _, bench_ess = bench
    lm = tiny_bert()
    template, free = masks(lm, 4)
    start = enumerate_states(lm, template, free)[:1]
    case = {"name": "tiny", "model": lm, "inputs": {"init": start, "free_positions": free[None]},
            "positions": torch.arange(4), "sizes": {"mh": (20, 2), bench_ess.MIXMATCH: (10, 2)},
            "options": dict(chains=3, epochs=20, burn_in=2, energy="local"), "seeds": [0, 1]}
    rows, _, runs_of = bench_ess.case_rows(case, ["mh", bench_ess.MIXMATCH])
    mh, mix = runs_of["mh"], runs_of[bench_ess.MIXMATCH]
    assert [r["draws"] for r in mh] == [3 * 18] * 2 and [r["draws"] for r in mix] == [3 * 8] * 2
    assert [r["short_draws"] for r in mh] == [3 * 8] * 2
    assert all(0 < r["ess_e"] and 0 < r["ess_p"] and r["rows"] > 0 for r in mh + mix)
    assert mix[0]["rows"] == 3 * 4 * 10 * (2 * 4 + 1)  # chains x sites x sweeps x (2T + 1)
    assert rows[1].startswith("| tiny | mixmatch | 24; 2 seeds | ")
    line = bench_ess.same_law_line("tiny", runs_of)
    assert line.startswith("- Same law, `tiny` (2 and 2 seeds; mh's first 24 post-burn-in draws") and "x the " in line


def test_the_same_law_line_charges_post_burn_in_cpu_and_leaves_out_windows_that_never_moved(bench):
    """Two findings of a review on the stored AntiBERTy runs: the CPU per draw was each whole run's, burn-in included,
    whose share differed between the arms (mh 20 of 200 sweeps, the loop 2 of 12: 90.2x instead of 83.5x); and a
    window in which no chain moved (R-hat NaN) counted as ArviZ's old "ESS = draws"."""
    _, bench_ess = bench

    def run(sizes, cpu, ess, rhat, short=None):
        draws = sizes[0] * (sizes[1] - sizes[2])
        out = {"sizes": sizes, "cpu": cpu, "draws": draws, "ess_e": ess, "ess_p": ess, "rhat": rhat}
        if short is not None:  # mh's figures over the loop's sweeps
            out.update(short_draws=40, short_ess_e=short[0], short_ess_p=short[0], short_rhat=short[1])
        return out
    mh = [run([4, 200, 20], 100.0, 360.0, 1.0, (40.0, float("nan"))), run([4, 200, 20], 100.0, 360.0, 1.0, (20.0, 1.1)),
          run([4, 200, 20], 100.0, 360.0, 1.0, (30.0, 1.1))]
    mix = [run([4, 12, 2], 600.0, 20.0, 1.2), run([4, 12, 2], 600.0, 30.0, 1.2)]
    line = bench_ess.same_law_line("x", {"mh": mh, bench_ess.MIXMATCH: mix})
    # post-burn-in CPU: mh 90, the loop 500; ESS per second 4 against 0.05 -> 80x; CPU per draw 0.125 vs 12.5 -> 100x
    assert "mh 80.0x the mixmatch loop's; CPU per draw: mixmatch 100.0x mh's" in line, line
    # the window that never moved is left out: mh's mean over 50 and 75 per 100 draws, not over 100, 50 and 75
    assert "ESS of E_local per 100 draws 62.5 (50.0-75.0) (mh)" in line and "1 of the 5 windows never changed: no " \
        "ESS, left out" in line, line


@pytest.mark.parametrize("dtypes", [["float32"], ["float32", "bfloat16"]])
def test_the_grid_measures_the_matmul_peak_of_its_dtypes_only(bench, monkeypatch, dtypes):
    """run_grid measures the achievable matmul peak of the dtypes it runs and of no other: on a CPU without a bf16
    fast path (AVX2-only AMD EPYC) one 2048^3 bf16 matmul took 63 s, so a float32 run measuring bf16 too spent four
    minutes on it and timed out gpu_check --quick's test on a fresh machine. The report names the peaks it has."""
    import argparse

    bench_mixmatch, _ = bench
    measured = []
    monkeypatch.setattr(bench_mixmatch, "matmul_peak", lambda dtype, device="cpu": measured.append(dtype) or 1.0)
    monkeypatch.setattr(bench_mixmatch, "one_case", lambda *a, **k: [])
    monkeypatch.setattr(bench_mixmatch, "make_start", lambda lm, T, kind: (None, None))
    args = argparse.Namespace(device="cpu", lengths=[8], starts=["random"], chains=[2], dtypes=dtypes, budget=16,
                              repeats=1, captures=["none"], batch_sweep=None)
    _, peaks, _ = bench_mixmatch.run_grid(args, None, lambda *a: None)
    assert list(peaks) == dtypes
    assert set(measured) == {getattr(torch, d) for d in dtypes}
