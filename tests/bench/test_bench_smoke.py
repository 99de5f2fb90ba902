"""Smoke runs of bench/bench_ops.py, bench_decoder.py, bench_sampler.py, bench_mixmatch.py, bench_memo.py,
bench_floor.py --compare capture, bench_tempering.py --quick (Sapiens), tempering_device.py (CPU), tempering_long.py
(--init and compare_saved too), plain_long.py (--match too), bench_tempering.py --exact's enumeration,
graph_overhead.py, propose_ab.py and bench_forward.py's compile lines on tiny sizes, so the scripts cannot rot
unnoticed.

It checks that the script runs and reports every op; it asserts nothing about speed (speed is
measured in bench/, never asserted in tests).

Example:
    python3 -m pytest -q tests/bench/test_bench_smoke.py
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


def test_bench_ops_quick_runs_and_reports_every_op():
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_ops.py"), "--quick", "--no-write",
                           "--device", "cpu"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for op in ("masked_copies", "gather_energies", "propose", "mh_accept_", "one MH step (4 ops)"):
        assert f"{op} [cpu]" in proc.stdout, f"{op} missing from the report:\n{proc.stdout[-3000:]}"
    assert "wrote" not in proc.stdout  # --no-write leaves bench/RESULTS.md alone


@pytest.mark.slow  # 20 s on the 2-core CI machine
def test_bench_decoder_quick_runs_and_checks_the_chains():
    """bench/bench_decoder.py on the bundled CMLM, tiny sizes: it runs, reports both forwards, and the fast
    decoder's chains equal fairseq's (the script exits 1 otherwise)."""
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_decoder.py"), "--sentences", "2", "--epochs",
                           "2", "--repeats", "1", "--rows", "16", "--lengths", "8", "--budgets", "512", "4096",
                           "--budget-length", "8", "--no-write"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "| 8 |" in proc.stdout and "same chains: yes" in proc.stdout, proc.stdout[-3000:]
    assert "| 512 | 4096 |" in proc.stdout and "Fastest:" in proc.stdout, proc.stdout[-3000:]


@pytest.mark.slow  # 23-199 s on the 2-core CI machine
def test_bench_sampler_records_and_replays_the_default_forward():
    """bench/bench_sampler.py, one small AntiBERTy case: the sampler runs through the recorder of its default
    (fast) forward, the e1 run's calls are a prefix of the e2 run's (the script asserts it), the replay runs, and
    the case forwarded rows."""
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_sampler.py"), "--models", "antiberty",
                           "--lengths", "16", "--chains", "5", "--steps", "2", "--epochs", "1", "2", "--alg1-steps",
                           "1", "2", "--reps", "1", "--memory-epochs", "20", "--budget", "10000", "--no-write"],  # budget: no Algorithm 1
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    row = next(line for line in proc.stdout.splitlines() if line.startswith("| antiberty | 16 | 5 |"))
    rows_per_proposal = float(row.split("|")[10])
    assert rows_per_proposal > 0, row
    assert "wrote" not in proc.stdout


@pytest.mark.slow  # 15 s on the 2-core CI machine
def test_bench_mixmatch_runs_a_small_case_on_antiberty_s_shape():
    """bench/bench_mixmatch.py, one small case on the random model of AntiBERTy's shape (what the GPU check runs, where
    the antiberty package is missing): both loops make the same proposals, mixmatch forwards 2T+1 rows per proposal,
    mhfast at most T-1, and the report names the model."""
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_mixmatch.py"), "--model", "antiberty-random",
                           "--lengths", "8", "--chains", "2", "--dtypes", "float32", "--starts", "random", "--budget",
                           "16", "--repeats", "1", "--captures", "none", "static", "--no-write"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for start in ("random", "random, capture=static"):  # mhfast as it is, and its static step, against one mixmatch
        row = next(line for line in proc.stdout.splitlines() if line.startswith(f"| {start} | float32 | 8 | 2 |"))
        cells = [c.strip() for c in row.split("|")]
        assert cells[5] == "2 (2 x 1)" and cells[6] == "17", row  # C x n proposals; 2T+1 rows
        assert 0 < float(cells[7].split(";")[1]) <= 7, row  # mhfast's timed rows per proposal: T-1 when it changes
    assert "randomly initialized BERT of AntiBERTy's exact shape" in proc.stdout
    assert "wrote" not in proc.stdout


@pytest.mark.slow  # 15-21 s on the 2-core CI machine
def test_bench_memo_compares_the_memo_off_and_on():
    """bench/bench_memo.py, one tiny case: both runs, the memo's rows at most those without it."""
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_memo.py"), "--model", "antiberty-random",
                           "--lengths", "8", "--chains", "2", "--epochs", "3", "--starts", "random", "--repeats", "1",
                           "--no-write"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    row = next(line for line in proc.stdout.splitlines() if line.startswith("| random | 8 | 2 | 3 |"))
    cells = [c.strip() for c in row.split("|")]
    assert 0 <= float(cells[8]) <= float(cells[7]) <= 7, row  # rows / proposal: on <= off <= T-1


def test_bench_floor_compares_both_steps():
    """bench/bench_floor.py --compare capture, one tiny size: both steps timed, the static one forwards every moving
    chain's rows."""
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_floor.py"), "--compare", "capture", "--sizes",
                           "3x6", "--rounds", "1", "--repeats", "1", "--no-write"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    row = next(line for line in proc.stdout.splitlines() if line.startswith("| 3 | 6 |"))
    rows_none, rows_static = (float(x) for x in row.split("|")[6].split(","))
    assert rows_static == 3 * 5 and rows_none <= rows_static, row  # A x (T - 1) rows per static step
    assert "wrote" not in proc.stdout


@pytest.mark.slow  # 18-21 s on the 2-core CI machine
def test_bench_forward_compile_lines_on_a_tiny_bert(monkeypatch):
    """bench/bench_forward.py's measure_compile (gpu_check's step 10 on a GPU) on a tiny 2-layer BERT: it compiles
    through mhfast.models.compiled_blocks, times both modes and writes its line."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))  # put back after the test, with what the script adds
    import torch
    import bench_forward
    from exact_checks import two_layer_bert

    line = bench_forward.measure_compile(two_layer_bert(), 6, 1, torch.float32)
    assert line.startswith("torch.compile on the sampler's path (compile=True), float32, T=6: 1 encoder layers "
                           "compiled"), line
    assert "16 chain(s) (80 rows)" in line and "largest output difference" in line, line


@pytest.mark.slow  # 10 s on the 2-core CI machine
def test_bench_ess_quick_reports_every_sampler():
    """bench/bench_ess.py on the tabular toy, tiny sizes: it runs and reports ESS for the four samplers."""
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_ess.py"), "--quick", "--no-write", "--cases",
                           "toy"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for sampler in ("mh", "block-mh", "gibbs", "block-gibbs"):
        assert f"| toy | {sampler} | " in proc.stdout, proc.stdout[-3000:]
    assert "wrote" not in proc.stdout


def test_bench_delayed_toy_reports_every_setting():
    """bench/bench_delayed.py on the tabular toy: it runs every default setting and prints the table, with the
    stages' rates for the delayed ones."""
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_delayed.py"), "--case", "toy", "--epochs", "8",
                           "--seeds", "0"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    first_table = proc.stdout.split("fewer rows per accepted change")[0]  # (then the per-seed gains' table)
    rows = {line.split("|")[1].strip(): line.split("|") for line in first_table.splitlines() if line.startswith("| ")}
    for setting in ("mh", "mh-nomemo", "delayed-w1", "delayed-w2", "delayed-w3"):
        assert setting in rows, proc.stdout
    assert rows["delayed-w2"][11].strip() != "-"  # stage 1's rate: delayed acceptance acted
    assert "fewer rows per accepted change than mh" in proc.stdout  # the per-seed gains over the default


def test_bench_delayed_from_log_rebuilds_the_tables_of_a_run(tmp_path):
    """bench/bench_delayed.py --from-log: the tables of the runs a run logged to stderr, the same as that run printed
    (two seeds, so the gains over the default have a confidence interval)."""
    script = str(ROOT / "bench" / "bench_delayed.py")
    proc = subprocess.run([sys.executable, script, "--case", "toy", "--epochs", "6", "--seeds", "0", "1", "--settings",
                           "mh", "delayed-w1"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = tmp_path / "run.log"
    log.write_text(proc.stderr, encoding="utf-8")
    again = subprocess.run([sys.executable, script, "--from-log", str(log)], cwd=ROOT, capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    printed = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
    rebuilt = [line.replace(" (2 seeds) |", " |") for line in again.stdout.splitlines() if line.startswith("| ")]
    gains = [line for line in rebuilt if line.startswith("| delayed-w1 | 2 |")]
    assert rebuilt == printed and len(gains) == 1 and "[" in gains[0], again.stdout


def test_bench_delayed_toy_runs_block_mh_with_and_without_delayed_acceptance():
    """bench/bench_delayed.py's block-MH settings on the tabular toy: both rows, the two-stage one with its rates."""
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_delayed.py"), "--case", "toy", "--epochs", "8",
                           "--seeds", "0", "--settings", "block-mh", "block-mh-delayed-w1"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {line.split("|")[1].strip(): line.split("|") for line in proc.stdout.splitlines() if line.startswith("| ")}
    assert rows["block-mh"][11].strip() == "-" and rows["block-mh-delayed-w1"][11].strip() != "-", proc.stdout


@pytest.mark.slow  # loads Sapiens and runs 6 + 22 sweeps of T=6
def test_bench_tempering_quick_compares_sapiens_at_equal_rows():
    """bench/bench_tempering.py --quick, the sapiens-dispersed case (T=6, 2 rungs): the table has the tempered run
    and plain MH, plain MH cut at no more than the tempered run's model rows, with the tempering counters."""
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_tempering.py"), "--quick", "--cases",
                           "sapiens-dispersed", "--rungs", "2", "--dispersed-length", "6", "--seeds", "0"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {line.split("|")[1].strip(): line.split("|") for line in proc.stdout.splitlines()
            if line.startswith(("| plain MH | 0 |", "| 2 | 0 |"))}
    assert set(rows) == {"plain MH", "2"}, proc.stdout[-3000:]
    assert 0 < int(rows["plain MH"][5]) <= int(rows["2"][5]), rows  # model rows: equal_rows' cut
    assert "round trips" in rows["2"][16] and "Sapiens" in proc.stdout, rows


def test_tempering_device_saves_traces_and_reprints_the_same_table_from_them(tmp_path):
    """bench/tempering_device.py on the CPU (T=4, 2 rungs, 6 sweeps): plain MH and tempering at equal sweeps, the
    tempered run forwarding more rows; --traces saves the runs and --from-traces (what the GPU's runs need: no
    arviz-stats there) prints the same table from them."""
    traces = tmp_path / "runs.pt"
    run = [sys.executable, str(ROOT / "bench" / "tempering_device.py")]
    proc = subprocess.run(run + ["--device", "cpu", "--sweeps", "6", "--burn-in", "2", "--length", "4", "--rungs", "2",
                                 "--traces", str(traces)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = [line for line in proc.stdout.splitlines() if line.startswith(("| plain MH | 0 |", "| 2 | 0 |"))]
    assert len(table) == 2, proc.stdout[-3000:]
    plain, tempered = (line.split("|") for line in table)
    assert plain[3].strip() == tempered[3].strip() == "6 (2)" and int(plain[4]) < int(tempered[4]), table
    again = subprocess.run(run + ["--from-traces", str(traces)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    # (the wall seconds travel with the traces: the same table, line for line)
    assert [line for line in again.stdout.splitlines() if line.startswith(("| plain MH | 0 |", "| 2 | 0 |"))] == table


def test_graph_overhead_counts_the_calls_inside_and_outside_the_captured_body():
    """bench/graph_overhead.py on the CPU (3 sweeps, 2 rungs): both samplers' rows, calls inside the static step's
    body (what a CUDA graph replays), more calls outside it with tempering (its swaps), and the callers listed."""
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "graph_overhead.py"), "--sweeps", "3", "--length", "4",
                           "--rungs", "2", "--top", "50"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {line.split("|")[1].strip(): line.split("|") for line in proc.stdout.splitlines()
            if line.startswith(("| plain MH |", "| tempering=2 |"))}
    assert set(rows) == {"plain MH", "tempering=2"}, proc.stdout[-3000:]
    assert all(int(r[2]) > 0 for r in rows.values()), rows
    assert int(rows["tempering=2"][3]) > int(rows["plain MH"][3]), rows
    assert "tempering.py:_swap" in proc.stdout and "(CPU run: all on the host)" in proc.stdout, proc.stdout[-3000:]


@pytest.mark.slow  # loads Sapiens twice, 22 tempered sweeps of T=8 x 8 rungs
def test_tempering_long_reports_every_budget_and_the_shorter_is_a_prefix(tmp_path):
    """bench/tempering_long.py: figures at every budget asked for, from one run; a shorter budget's figures are
    those of its own run (the counter RNG repeats the first sweeps bit for bit), which RESULTS.md relies on."""
    def run(epochs: int, *at: str) -> dict:
        out = tmp_path / f"long{epochs}.json"
        proc = subprocess.run([sys.executable, str(ROOT / "bench" / "tempering_long.py"), "--seed", "0", "--epochs",
                               str(epochs), "--burn-in", "4", "--at", *at, "--out", str(out)], cwd=ROOT,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return json.loads(out.read_text())

    both, short = run(12, "10"), run(10)
    assert set(both) >= {"10", "12", "ladder", "swap", "trips"} and both["12"]["draws"] > both["10"]["draws"] > 0
    for key in ("rows", "draws", "ess_e", "rhat", "chain_min", "chain_mean"):
        assert repr(both["10"][key]) == repr(short["10"][key]), key  # (repr: NaN equals NaN)


@pytest.mark.slow  # loads Sapiens once, 30 plain sweeps of T=8
def test_tempering_long_plain_reports_budgets_in_cpu_seconds(tmp_path):
    """bench/tempering_long.py --plain --at-cpu: plain MH (no ladder), and each CPU budget's figures are those of the
    last sweep within it by the run's own per-sweep CPU clock (saved), not prorated by rows (RESULTS.md's AntiBERTy
    T=3 comparison at equal CPU seconds); ``--dtype`` reaches the sampler (the T=32 runs in bfloat16)."""
    saved, out = tmp_path / "plain.pt", tmp_path / "plain.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "tempering_long.py"), "--plain", "--seed", "0",
                           "--epochs", "30", "--burn-in", "4", "--at-cpu", "0", "1e9", "--save", str(saved),
                           "--dtype", "bfloat16", "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    got, cpu_at = json.loads(out.read_text()), torch.load(saved, weights_only=False)["cpu_at"]
    assert got["rungs"] is None and "ladder" not in got and len(cpu_at) == 30
    assert got["dtype"] == "bfloat16" and got["what"].endswith("forward in bfloat16")
    bad = subprocess.run([sys.executable, str(ROOT / "bench" / "tempering_long.py"), "--plain", "--epochs", "5",
                          "--burn-in", "1", "--dtype", "float17"], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)  # (the sampler's own option check refuses it: the flag reaches mhfast.sample)
    assert bad.returncode != 0 and "mhfast.sample: dtype must be" in bad.stderr, bad.stderr[-2000:]
    assert cpu_at == sorted(cpu_at) and set(got) >= {"30"}  # (budget 0: no sweep within it, so no figures)
    assert not any(k.isdigit() and int(k) <= 4 for k in got)
    assert got["30"]["cpu"] == cpu_at[-1] and got["30"]["sweeps"] == 30 and got["30"]["draws"] == 26 * 4


@pytest.mark.slow  # loads Sapiens four times: 15 sweeps of T=8 in all
def test_tempering_long_second_stage_starts_from_the_saved_states(tmp_path, monkeypatch):
    """bench/tempering_long.py --init: a run from a saved run's final states (RESULTS.md's two-stage T=32 case:
    plain MH's descent, then tempering or more plain MH from where it ended), and compare_saved on such a pair. At
    target temperature 0.1 a first sweep barely moves, so each chain's first E_local is that of the state it
    started from: the saved run's last, not a random start's. load_saved joins a run and its continuation."""
    def run(*args: str) -> tuple[Path, torch.Tensor]:
        saved = tmp_path / f"run{len(list(tmp_path.glob('*.pt')))}.pt"
        proc = subprocess.run([sys.executable, str(ROOT / "bench" / "tempering_long.py"), "--seed", "0",
                               "--temperature", "0.1", *args, "--save", str(saved)], cwd=ROOT, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        d = torch.load(saved, weights_only=False)
        assert d["tokens"].shape[:2] == (1, 4)  # the final states, for a next stage
        return saved, d["traces"][0][:, :, d["names"].index("e_local")]  # [chains, sweeps]

    first, e_first = run("--plain", "--epochs", "6", "--burn-in", "2")
    again, e_again = run("--plain", "--epochs", "3", "--burn-in", "1", "--init", str(first))
    fresh, e_fresh = run("--plain", "--epochs", "3", "--burn-in", "1")
    tempered, _ = run("--rungs", "2", "--epochs", "3", "--burn-in", "1", "--init", str(first))
    assert torch.allclose(e_again[:, 0], e_first[:, -1], atol=1.0), (e_again, e_first)
    assert not torch.allclose(e_fresh[:, 0], e_first[:, -1], atol=1.0), (e_fresh, e_first)
    monkeypatch.syspath_prepend(str(ROOT / "bench"))  # put back after the test, with what the script adds
    import tempering_long

    lines = tempering_long.compare_saved(tempered, again, [3])
    assert lines[0].startswith("tempered: ladder [0.1, ") and lines[1].startswith("plain MH: 3 sweeps, ")
    assert "tempered target chains against plain MH's first 3 sweeps" in lines[3]
    assert any(x.startswith("| tempering=2, 3 sweeps | 0 | 3 (1) |") for x in lines), lines
    # a run and its continuation from its final states, joined into one chain per chain (the T=32 bf16 comparison)
    (r1, d1), (r2, d2) = tempering_long.load_saved(first), tempering_long.load_saved(again)
    rj, dj = tempering_long.load_saved([first, again])
    assert torch.equal(rj.traces, torch.cat([r1.traces, r2.traces], dim=2))
    assert rj.trace_epochs.tolist() == r1.trace_epochs.tolist() + (r2.trace_epochs + 6).tolist()
    assert dj["rows_cum"] == d1["rows_cum"] + [d1["rows_cum"][-1] + r for r in d2["rows_cum"]]
    assert dj["cpu_at"] == d1["cpu_at"] + [d1["cpu"] + c for c in d2["cpu_at"]] and dj["cpu"] == d1["cpu"] + d2["cpu"]
    assert torch.equal(dj["tokens"], d2["tokens"]) and dj["burn_in"] == d1["burn_in"] == 2
    assert tempering_long.compare_saved(tempered, [first, again], [3])[1].startswith("plain MH: 9 sweeps, ")


@pytest.mark.slow  # loads Sapiens twice: 8 tempered sweeps of T=8 x 3 rungs, 40 plain ones in segments
def test_plain_long_matches_a_saved_tempered_run_at_equal_rows(tmp_path):
    """bench/plain_long.py --match: plain MH's burn-in ends at the first sweep whose rows reach the tempered
    burn-in's, and each figure's draws end at the last sweep within the tempered run's rows at the sweep asked for
    (RESULTS.md's AntiBERTy T=8 table at equal rows comes from such a pair)."""
    def run(script: str, *args: str) -> str:
        proc = subprocess.run([sys.executable, str(ROOT / "bench" / script), "--seed", "0", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc.stdout

    saved = tmp_path / "tempered.pt"
    run("tempering_long.py", "--epochs", "8", "--burn-in", "3", "--rungs", "3", "--save", str(saved))
    t_rows = torch.load(saved, weights_only=False)["rows_cum"]
    out = run("plain_long.py", "--dir", str(tmp_path / "plain"), "--segment", "20", "--rows", str(t_rows[-1]),
              "--match", str(saved), "--at", "5", "8")
    segments = sorted((tmp_path / "plain").glob("seg*.pt"), key=lambda q: int(q.stem[3:]))
    p_rows = sum((torch.load(q, weights_only=False)["rows_cum"] for q in segments), [])
    burn = next(i + 1 for i, n in enumerate(p_rows) if n >= t_rows[2])
    assert f"burn-in {burn} sweeps (the tempered burn-in's {t_rows[2]} rows)" in out, out
    for sweep in (5, 8):
        budget = t_rows[sweep - 1]
        line = next(x for x in out.splitlines() if x.startswith(f"{budget} "))
        last = max(i + 1 for i, n in enumerate(p_rows) if n <= budget)
        assert f"'rows': {p_rows[last - 1]}, " in line and f"'sweeps': {last}, 'burn': {burn}," in line, line


@pytest.mark.slow  # loads Sapiens twice, 9 plain sweeps of T=8 in three segments
def test_plain_long_resumes_segments_and_keeps_the_figures_of_a_shorter_budget(tmp_path):
    """bench/plain_long.py: segments run until the row budget, a second call with --resume adds segments after the
    saved ones, and a budget reached before it gets the same figures from the longer run (RESULTS.md's plain MH at
    9.06M / 13.5M / 18.0M rows come from one such run)."""
    def run(rows: int, *extra: str) -> dict[str, str]:
        proc = subprocess.run([sys.executable, str(ROOT / "bench" / "plain_long.py"), "--dir", str(tmp_path),
                               "--segment", "3", "--rows", str(rows), "--burn-in", "1", "--at", "900", *extra],
                              cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        lines = proc.stdout.splitlines()
        figures = next(x for x in lines if x.startswith("900 "))
        return {"segments": "\n".join(x for x in lines if x.startswith("segment")),
                "900": re.sub(r"'cpu': [^,]+, ", "", figures)}  # (CPU seconds are measured: they differ)

    first, second = run(1000), run(1500, "--resume")
    assert first["segments"].count("segment") == 2 and second["segments"].startswith("segment 2: seed 2001")
    assert "'draws': " in first["900"] and first["900"] == second["900"]


def test_propose_ab_times_two_labels_and_renders_their_ratio(tmp_path):
    """bench/propose_ab.py --quick on CPU, labelled twice as if two builds, then --render: one row per case."""
    out = tmp_path / "ab.jsonl"
    for label in ("old", "new"):
        proc = subprocess.run([sys.executable, str(ROOT / "bench" / "propose_ab.py"), "--quick", "--device", "cpu",
                               "--label", label, "--json", str(out)], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "propose_ab.py"), "--render", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| propose")]
    assert len(rows) == 2 and all(line.count("|") == 5 for line in rows), proc.stdout


def test_bench_tempering_exact_mean_is_the_enumerated_targets_and_fills_the_error_column(monkeypatch):
    """bench_tempering.exact_mean_e_local (``--exact``) against tests/exact_checks' enumeration on a tabular model at
    target temperature 0.7, its refusal of a case too large to enumerate, and the two columns it adds to the table."""
    from exact_checks import energies, enumerate_states, ordinary_tokens, target_distribution
    from mhfast.models.tabular import TabularMLM

    monkeypatch.syspath_prepend(str(ROOT / "bench"))  # put back after the test, with what the script adds
    import bench_tempering as bt

    model = TabularMLM.random(num_tokens=3, length=3, seed=11, scale=1.5)
    init = torch.full((1, 3), ordinary_tokens(model)[0])
    case = {"name": "tabular", "model": model, "inputs": {"init": init, "free_positions": torch.ones(1, 3).bool()}}
    states = enumerate_states(model, init[0], torch.ones(3, dtype=torch.bool))
    p = target_distribution(model, states, torch.ones(3, dtype=torch.bool), "local", 0.7)
    want = float((p * energies(model, states, torch.ones(3, dtype=torch.bool))[1]).sum())
    assert bt.exact_mean_e_local(case, 0.7) == pytest.approx(want, rel=1e-5)
    with pytest.raises(ValueError, match="--exact: 3\\^3 sequences is more than 20"):
        bt.exact_mean_e_local(case, 0.7, max_states=20)
    run = {"tempering": None, "seed": 0, "sweeps": 10, "burn": 2, "draws": 32, "rows": 100, "cpu": 1.0,
           "accept": 0.5, "ess_e": 16.0, "ess_p": 10.0, "rhat_e": 1.0, "rhat": 1.0, "chain_min": [0.0],
           "chain_mean": [1.0], "mean_e": want + 0.5, "sd_e": 2.0}
    lines = bt.equal_rows_lines({**case, "exact_mean": want}, [run])
    assert f"mean E_local (exact {want:.3f}) | error / MCSE |" in lines[0]
    assert [len(line.split("|")) for line in lines] == [len(lines[0].split("|"))] * 3
    assert lines[2].split("|")[17].strip() == "+1.00"  # 0.5 / (2 / sqrt(16)): a run stored without mcse_e
    # ArviZ's MCSE of the mean where the run has it (an audit: sd / sqrt(bulk-ESS) can be ~10% off it)
    lines = bt.equal_rows_lines({**case, "exact_mean": want}, [{**run, "mcse_e": 0.25}])
    assert lines[2].split("|")[17].strip() == "+2.00"


def test_bench_delayed_budget_table_keeps_each_epoch_count_apart(tmp_path):
    """bench/bench_delayed.py --from-log ... --budget E: one setting logged at two epoch counts gives two points, each
    with its anneal, its rows against the default's at E epochs and the paired best-energy difference; a log of no
    run is a clear error."""
    script = str(ROOT / "bench" / "bench_delayed.py")
    logs = []
    for epochs, settings in ((6, ["mh", "delayed-w1"]), (9, ["delayed-w1"])):
        proc = subprocess.run([sys.executable, script, "--case", "toy", "--epochs", str(epochs), "--seeds", "0", "1",
                               "--settings", *settings], cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        logs.append(tmp_path / f"{epochs}.log")
        logs[-1].write_text(proc.stdout + proc.stderr, encoding="utf-8")
    out = subprocess.run([sys.executable, script, "--from-log", *map(str, logs), "--budget", "6"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [line.split("|")[1:-1] for line in out.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    points = {(r[0].strip(), int(r[1])): r for r in rows[1:]}
    assert set(points) == {("mh", 6), ("delayed-w1", 6), ("delayed-w1", 9)}, out.stdout
    assert "(1.00x)" in points[("mh", 6)][4] and points[("mh", 6)][7].strip() == "-", out.stdout
    assert "[" in points[("delayed-w1", 9)][7], out.stdout  # two seeds: an interval
    assert {r[2].strip() for r in rows[1:]} == {"-"}, out.stdout  # the toy anneals not: no anneal logged
    empty = tmp_path / "empty.log"
    empty.write_text("nothing here\n", encoding="utf-8")
    bad = subprocess.run([sys.executable, script, "--from-log", str(empty), "--budget", "6"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "empty.log" in bad.stderr and "epochs" in bad.stderr, bad.stderr


def test_bench_delayed_examples_run(monkeypatch):
    """The docstring examples of bench/bench_delayed.py's table functions (seed_ratios, logged_runs, budget_points,
    budget_table) run and print what they show."""
    import doctest
    monkeypatch.setattr(sys, "path", [str(ROOT / "bench"), *sys.path])  # (restored after: the script adds its own)
    import bench_delayed
    result = doctest.testmod(bench_delayed, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 10 and result.failed == 0, result


def test_replicates_mcse_coverage_of_iid_runs_is_right_and_stuck_runs_count_outside(monkeypatch):
    """bench/tempering_runs/2026-11-29-antiberty-t3-cold/replicates.py's MCSE check on draws whose truth is known:
    runs of 4 chains of iid N(1, 1) draws have their mean within 2 MCSE of 1 in about 95.4% of runs, and almost never
    within 2 MCSE of 1.3; a run whose summary is constant (MCSE 0 or NaN) counts outside, and is said to."""
    import numpy as np

    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    monkeypatch.syspath_prepend(str(ROOT / "bench" / "tempering_runs" / "2026-11-29-antiberty-t3-cold"))
    import replicates

    def share(line: str) -> float:
        return float(re.search(r"\|z\| < 2 in ([0-9.]+) \[", line).group(1))

    x = np.random.default_rng(0).normal(1.0, 1.0, size=(800, 100))
    g = replicates.groups(x, low=-1.0, size=4)
    assert len(g["e_mean"]) == 200 and set(g) >= {"e_rhat", "e_ess_bulk", "e_mcse_mean", "low_mean"}
    assert 0.91 <= share(replicates.coverage_line(g, "e", 1.0)) <= 0.99
    assert share(replicates.coverage_line(g, "e", 1.3)) < 0.05
    # the lowest sequence's indicator (x < low + 1e-3) is never 1 here: a constant summary in every run
    stuck = replicates.groups(x[:8], low=-100.0, size=4)
    line = replicates.coverage_line(stuck, "low", 0.0)
    assert "MCSE 0 or NaN in 2 (counted outside)" in line and share(line) == 0.0
