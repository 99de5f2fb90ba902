"""A/B across processes: glibc malloc as it comes vs ``mhfast.tune_cpu_allocator()``, on AntiBERTy.

The tuning is process-wide and permanent, so each measurement is a fresh worker process, the two modes alternating
(the order swapped every round), median of the rounds. Two measurements, one thread:

* forward: ms per masked row of the sampler's runner (forward='fast', mhfast's default sub-batches, bf16 inside
  ``runner.session()``), T=32, 31 / 155 / 496 rows per call (1 / 5 / 16 chains' rows of one step), fp32 and bf16,
  and the minor page faults per call;
* sample: ms per proposal of ``mhfast.sample``'s second epoch (bench_mixmatch.mhfast_run: random start, T=32,
  5 chains, 12 sites per chain), fp32 and bf16.

Writes the ``ab_malloc`` section of bench/RESULTS.md (``--no-write``: print only).

    python3 bench/ab_malloc.py [--rounds 5]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import results_md  # noqa: E402

START, END = "<!-- ab_malloc:start -->", "<!-- ab_malloc:end -->"
MODES = ("plain", "tuned")
T = 32


def worker(mode: str, kind: str, dtype_name: str, size: int) -> dict:
    """One measurement in this (fresh) process: ``kind`` forward (``size`` rows per call) or sample (``size``
    chains)."""
    import resource

    import mhfast
    from bench_forward import masked_rows, sampler_runner
    from bench_mixmatch import evenly_spaced_sites, load_model, make_start, mhfast_run

    torch.set_num_threads(1)
    if mode == "tuned" and not mhfast.tune_cpu_allocator():
        raise SystemExit("tune_cpu_allocator: not applied (not glibc?)")
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype_name]
    lm = load_model("antiberty", "cpu")
    if kind == "sample":
        start, positions = make_start(lm, T, "random")
        _, free = evenly_spaced_sites(start, positions, 12)
        mhfast_run(lm, start, free, size, dtype, None)  # warm-up
        r = mhfast_run(lm, start, free, size, dtype, None)
        return {"ms": 1e3 * r["seconds"] / r["proposals"], "rows_per_proposal": r["rows_timed"] / r["proposals"]}
    runner = sampler_runner(lm, dtype)
    rows, pos = masked_rows(lm, size, T)
    calls = max(2, 1000 // size)
    with runner.session():
        for _ in range(2):
            runner.outputs(rows, pos)
        f0, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
        for _ in range(calls):
            runner.outputs(rows, pos)
        seconds = time.perf_counter() - t0
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
    return {"ms": 1e3 * seconds / (calls * size), "faults": faults / calls}


def run_worker(mode: str, kind: str, dtype: str, size: int) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", mode, kind, dtype, str(size)]
    env = {**os.environ, "MHFAST_TUNE_MALLOC": "0"}  # the workers decide (the command's default is tuned)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"worker {cmd[2:]} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--rows", type=int, nargs="+", default=[31, 155, 496])
    p.add_argument("--chains", type=int, nargs="*", default=[5], help="the sample measurement's chain counts")
    p.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16"])
    p.add_argument("--no-write", action="store_true")
    p.add_argument("--worker", nargs=4, metavar=("MODE", "KIND", "DTYPE", "SIZE"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        mode, kind, dtype, size = args.worker
        print(json.dumps(worker(mode, kind, dtype, int(size))))
        return
    torch.set_num_threads(1)  # as the workers (machine_description reports it)
    cases = [("forward", d, n) for d in args.dtypes for n in args.rows] + \
            [("sample", d, c) for d in args.dtypes for c in args.chains]
    load0, t_start = os.getloadavg()[0], time.perf_counter()
    got: dict[tuple, dict[str, list[dict]]] = {c: {m: [] for m in MODES} for c in cases}
    for r in range(args.rounds):
        for case in cases:
            for mode in (MODES if r % 2 == 0 else MODES[::-1]):
                got[case][mode].append(run_worker(mode, *case))
            print(case, {m: round(got[case][m][-1]["ms"], 3) for m in MODES}, flush=True)
    minutes = (time.perf_counter() - t_start) / 60
    lines = [f"Run {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, {minutes:.0f} min, "
             f"load average {load0:.2f} at the start. Machine: {results_md.machine_description()}.", "",
             "AntiBERTy, T=32, one thread; each number a fresh process, plain (glibc as it comes) and tuned "
             "(`mhfast.tune_cpu_allocator()`) alternating, the order swapped every round; median of "
             f"{args.rounds} rounds (each round's ratio in brackets). forward: the sampler's runner "
             "(forward='fast', default sub-batches, bf16 in `runner.session()`), ms per row and minor page faults "
             "per call; sample: `mhfast.sample`'s second epoch from a random start (bench_mixmatch.mhfast_run, 12 "
             "sites per chain), ms per proposal.", "",
             "| measurement | dtype | rows per call / chains | plain ms | tuned ms | speed-up (each round) "
             "| page faults per call, plain / tuned |", "|---|---|---|---|---|---|---|"]
    for case in cases:
        kind, dtype, size = case
        plain, tuned = ([x["ms"] for x in got[case][m]] for m in MODES)
        ratios = [a / b for a, b in zip(plain, tuned)]
        faults = (f"{statistics.median(x['faults'] for x in got[case]['plain']):.0f} / "
                  f"{statistics.median(x['faults'] for x in got[case]['tuned']):.0f}" if kind == "forward" else "-")
        unit = "ms / row" if kind == "forward" else "ms / proposal"
        lines.append(f"| {kind} ({unit}) | {dtype} | {size} | {statistics.median(plain):.3f} | "
                     f"{statistics.median(tuned):.3f} | **{statistics.median(ratios):.2f}x** "
                     f"({', '.join(f'{x:.2f}' for x in ratios)}) | {faults} |")
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        results_md.write_section(START, END, "## glibc malloc thresholds (bench/ab_malloc.py)\n\n" + text)


if __name__ == "__main__":
    main()
