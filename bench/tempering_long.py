"""One long tempered run of bench_tempering.py's sharpened Sapiens case, with its figures at several budgets.

The case of RESULTS.md's "Sapiens at target temperature 0.5" section: Sapiens' heavy-chain MLM, T=8 free residues,
energy local, 4 chains each from its own random residues, target temperature 0.5, ``tempering=8`` tuned in burn-in
(200 sweeps). The counter RNG makes a run's first N sweeps those of any shorter run with the same seed, bit for bit,
so one run of the longest budget gives the figures of every shorter one (``--at``): ArviZ's ESS and split-R-hat of
the post-burn-in draws up to each budget (bench_tempering.window_figures), CPU prorated by rows.

    python3 bench/tempering_long.py --seed 1 --epochs 19200 --at 9600 14400    # ~60 min of one core (AMD EPYC)

Writes ``--out`` (JSON: the figures per budget and the run's ladder, swap rates and round trips).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_tempering as bt  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=19200, help="sweeps in all, burn-in included")
    ap.add_argument("--burn-in", type=int, default=200)
    ap.add_argument("--rungs", type=int, default=8)
    ap.add_argument("--at", type=int, nargs="*", default=[], help="shorter budgets (sweeps) to report as well")
    ap.add_argument("--out", type=Path, default=None, help="JSON file (default: print only)")
    args = ap.parse_args()
    if not all(args.burn_in < a <= args.epochs for a in args.at) or args.epochs <= args.burn_in:
        ap.error("--at and --epochs must exceed --burn-in, and --at must be <= --epochs")
    torch.set_num_threads(1)
    case = bt.dispersed_case("sapiens", 8, 4, 0.5)
    t0 = time.perf_counter()
    r, rows, cpu = bt.traced_run(case, args.epochs, args.burn_in, args.seed, args.rungs)
    out = {"seed": args.seed, "epochs": args.epochs, "burn_in": args.burn_in, "rungs": args.rungs,
           "wall": time.perf_counter() - t0, "cpu": cpu, "what": case["what"],
           "ladder": [round(t, 2) for t in r.ladder[0].tolist()],
           "swap": [round(x, 2) for x in r.swap_rate[0].tolist()], "trips": r.round_trips[0].tolist()}
    for last in sorted({*args.at, args.epochs}):
        out[str(last)] = bt.window_figures(r, rows, cpu, args.burn_in, last)
        print(last, out[str(last)], flush=True)
    print(out["ladder"], out["swap"], out["trips"], flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps(out, indent=1, default=float) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
