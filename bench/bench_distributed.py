"""Scaling of ``torchrun -m mhfast translate`` with the number of ranks, on the same inputs.

For each rank count (1 = plain ``python -m mhfast``, else ``torchrun --nproc-per-node N``) the same
translation runs with one torch thread per rank, its wall time is measured (model loading included and
reported apart from a run of 0 lines), the output is checked byte-identical to the one-rank run, and the
scaling efficiency is speed-up / ranks. Each rank should have its own core: on a 2-core machine measure
1 and 2 ranks. Writes its section of bench/RESULTS.md.

    python3 bench/bench_distributed.py --ranks 1 2 --lines 16 --epochs 6
"""
from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results_md  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- bench_distributed:start -->", "<!-- bench_distributed:end -->"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(ranks: int, argv: list[str], out: Path) -> float:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "mhfast", "translate", *argv, "--output", str(out)]
    if ranks > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks), "--master-port",
               str(_port()), "-m", "mhfast", "translate", *argv, "--output", str(out)]
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=3600)
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    p.add_argument("--lines", type=int, default=16)
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    base = ["--input", "bundled", "--chains", "5", "--epochs", str(args.epochs), "--burn-in", "1", "--quiet",
            "--threads", "1", "--batch-size", str(args.batch_size)]
    rows, ref = [], None
    with tempfile.TemporaryDirectory() as tmp:
        for ranks in args.ranks:
            load = run(ranks, base + ["--limit", "0"], Path(tmp) / f"empty{ranks}.txt")
            wall = run(ranks, base + ["--limit", str(args.lines)], Path(tmp) / f"out{ranks}.txt")
            data = (Path(tmp) / f"out{ranks}.txt").read_bytes()
            ref = ref if ref is not None else data
            rows.append((ranks, load, wall, data == ref))
            print(rows[-1], flush=True)
    t1 = rows[0][2] - rows[0][1]
    lines = [f"The bundled De->En CMLM, first {args.lines} test_2016_flickr sentences, MH (5 chains, {args.epochs} "
             f"epochs), --batch-size {args.batch_size}, one torch thread per rank. Machine: "
             f"{results_md.machine_description()}.", "",
             "| ranks | startup + model load (s) | wall (s) | translation (s) | speed-up | efficiency | same bytes |",
             "|---|---|---|---|---|---|---|"]
    for ranks, load, wall, same in rows:
        t = wall - load
        lines.append(f"| {ranks} | {load:.1f} | {wall:.1f} | {t:.1f} | {t1 / t:.2f}x | {t1 / t / ranks:.2f} | "
                     f"{'yes' if same else 'NO'} |")
    lines += ["", "Not measured here: more ranks than cores, several GPUs (NCCL), real multi-node networks. On a "
              "GPU machine: `torchrun --nproc-per-node $GPUS -m mhfast translate --device cuda ...` (one GPU per "
              "local rank)."]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        results_md.write_section(START, END, "## Ranks (bench/bench_distributed.py)\n\n" + text)


if __name__ == "__main__":
    main()
