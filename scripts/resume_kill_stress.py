#!/usr/bin/env python3
"""Long resume property test: kill ``mhfast translate`` many times at random points, resume, compare.

Each trial starts a run on a fresh --output (with --stats-out), SIGKILLs it at a random point, then
resumes it (resumed runs are killed again with probability --rekill) until one finishes; the output
and statistics must equal an uninterrupted run's byte for byte. Any difference, or a resume that is
refused, is reported and makes the exit status 1.

Kill points (--mode):
  event    at a random file operation (os.write torn after a random prefix, before/after fsync,
           replace, ftruncate): every instant of the commit protocol; forked runs (fast)
  exhaust  every file operation of a run once, in order (forked)
  instant  after a random wall-clock delay within the run's duration (forked)
  process  fresh ``python -m mhfast translate`` processes killed after a random delay (slow, realistic)

The suite's bounded version is tests/cli/test_cli_resume_kill.py (same harness: tests/resume_harness.py).

Examples:
    $ python3 scripts/resume_kill_stress.py --mode event --trials 200            # tiny CMLM (trained once)
    $ python3 scripts/resume_kill_stress.py --mode exhaust --lines 8
    $ python3 scripts/resume_kill_stress.py --mode process --trials 20 --model bundled --lines 12
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from resume_harness import KILLED, forked_translate, no_tqdm_monitor_thread, tiny_translator  # noqa: E402


def job(args: argparse.Namespace, tmp: Path) -> tuple[list[str], object]:
    """(argv without --output/--stats-out, translator for forked runs)."""
    common = ["--format", "fairseq", "--batch-size", str(args.batch_size), "--chains", "2", "--epochs", "2",
              "--burn-in", "1", "--seed", "11", "--quiet", "--limit", str(args.lines)]
    if args.model == "bundled":
        from mhfast.translation import load_bundled_model

        translator = None if args.mode == "process" else load_bundled_model()
        return ["translate", "--input", "bundled", "--ref", "bundled", *common], translator
    from fairseq_tiny_cmlm import build

    paths = build(os.environ.get("MHFAST_FAIRSEQ_CACHE") or Path(tempfile.gettempdir()) / "mhfast_tiny_cmlm")
    de = sorted(paths["valid_de"].read_text(encoding="utf-8").split("\n")[:-1], key=lambda s: len(s.split()))
    src = tmp / "src.txt"
    src.write_text("".join(x + "\n" for x in de[:args.lines]), encoding="utf-8")
    translator = None if args.mode == "process" else tiny_translator(str(paths["checkpoint"]), str(paths["data"]))
    return ["translate", "--model", str(paths["checkpoint"]), "--data", str(paths["data"]), "--tokenizer", "none",
            "--input", str(src), *common], translator


def run_once(args, argv, translator, out: Path, rng: random.Random, event=None, delay=None) -> int:
    full = argv + ["--output", str(out), "--stats-out", f"{out}.stats"]
    if args.mode != "process":
        return forked_translate(full, translator, event=event, delay=delay, seed=rng.randrange(1 << 30))
    proc = subprocess.Popen([sys.executable, "-m", "mhfast", *full], cwd=ROOT, stdout=subprocess.DEVNULL,
                            env=dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1"))
    try:
        return proc.wait(timeout=delay) if delay is not None else proc.wait()
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        return KILLED


def trial(args, argv, translator, out: Path, rng, seconds: float, operations: int, point: int | None) -> tuple:
    """Kill once at ``point`` (or a random point), resume until done; (kills, ok, message)."""
    out.parent.mkdir(parents=True)
    kills, resume = 0, []
    for attempt in range(50):
        first = attempt == 0
        event = delay = None
        if args.mode in ("event", "exhaust") and (first or rng.random() < args.rekill):
            event = point if (first and point is not None) else rng.randint(1, operations)
        elif args.mode in ("instant", "process") and (first or rng.random() < args.rekill):
            delay = rng.uniform(0.0, seconds)
        status = run_once(args, argv, translator, out, rng, event=event, delay=delay)
        if status == 0:
            return kills, True, ""
        if status != KILLED:
            return kills, False, f"exit status {status} (a refused or failed resume)"
        kills += 1
        resume = ["--resume"] if Path(f"{out}.progress").is_file() else []
        argv = [a for a in argv if a != "--resume"] + resume
    return kills, False, "no run finished in 50 tries"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=("event", "exhaust", "instant", "process"), default="event")
    p.add_argument("--trials", type=int, default=100)
    p.add_argument("--model", choices=("tiny", "bundled"), default="tiny")
    p.add_argument("--lines", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--rekill", type=float, default=0.3, help="probability that a resumed run is killed too")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    no_tqdm_monitor_thread()  # runs are forked from this process
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        argv, translator = job(args, tmp)
        ref = tmp / "reference" / "out.txt"
        ref.parent.mkdir()
        t0 = time.monotonic()
        saved_mode, args.mode = args.mode, ("process" if args.mode == "process" else "event")
        count = tmp / "operations"
        if args.mode == "event":
            status = forked_translate(argv + ["--output", str(ref), "--stats-out", f"{ref}.stats"], translator,
                                      count_file=str(count))
        else:
            status = run_once(args, argv, translator, ref, rng)
        args.mode = saved_mode
        seconds = time.monotonic() - t0
        assert status == 0, f"the uninterrupted run failed ({status})"
        operations = int(count.read_text()) if count.is_file() else 0
        want, want_stats = ref.read_bytes(), json.loads(Path(f"{ref}.stats").read_text())["batches"]
        points = list(range(1, operations + 1)) if args.mode == "exhaust" else [None] * args.trials
        print(f"uninterrupted run: {seconds:.2f} s, {operations or '?'} file operations, {len(want)} bytes; "
              f"{len(points)} trials ({args.mode})", flush=True)
        failures, total_kills, t0 = 0, 0, time.monotonic()
        for i, point in enumerate(points):
            out = tmp / f"trial{i}" / "out.txt"
            kills, ok, message = trial(args, argv, translator, out, rng, seconds, operations, point)
            total_kills += kills
            if ok and out.read_bytes() != want:
                ok, message = False, "output differs from the uninterrupted run"
            if ok and json.loads(Path(f"{out}.stats").read_text())["batches"] != want_stats:
                ok, message = False, "statistics differ from the uninterrupted run"
            if not ok:
                failures += 1
                print(f"trial {i} (kill point {point}): FAILED: {message}", flush=True)
        print(f"{len(points)} trials, {total_kills} kills, {failures} failures, {time.monotonic() - t0:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
