"""Plain single-site MH on bench_tempering.py's sharpened Sapiens case, run in segments up to a row budget, with
its figures at several budgets: the plain-MH side of RESULTS.md's "Sapiens at target temperature 0.5" tables.

The case: Sapiens' heavy-chain MLM, T=8 free residues, energy local, 4 chains each from its own random residues,
target temperature 0.5 (``bench_tempering.dispersed_case("sapiens", 8, 4, 0.5)``). Segment k runs ``--segment``
sweeps from segment k-1's final tokens with seed ``seed + 1000 k`` (so the first segment is the seed's own run, and
each later one a fresh stream: the chain is plain MH all along, its memo restarted per segment). Each segment's
traces and rows are saved to ``--dir`` as it ends, so a stopped run resumes at the next segment (``--resume``).
Figures (``--at``, model rows): bench_tempering.window_figures over the joined traces, burn-in ``--burn-in`` sweeps
(2,443 for seed 1: where the earlier plain run reached the tempered burn-in's rows), draws up to the last sweep
within the budget, CPU prorated by rows.

    python3 bench/plain_long.py --dir /tmp/plain18 --seed 1 --rows 18100000 --at 9060941 13528939 18042147
    # ~2 h of one core (AMD EPYC), 13 segments of 20,000 sweeps
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_tempering as bt  # noqa: E402
import mhfast  # noqa: E402


def run_segments(case: dict, out: Path, seed: int, segment: int, rows: int, resume: bool) -> None:
    """Segments of ``segment`` sweeps until the joined run has forwarded ``rows`` model rows."""
    free = torch.zeros(1, 10, dtype=torch.bool)
    free[0, 1:9] = True  # (T=8 residues between <s> and </s>)
    done = sorted(out.glob("seg*.pt"), key=lambda p: int(p.stem[3:])) if resume else []
    k, total = len(done), (torch.load(done[-1], weights_only=False)["rows_cum"][-1] if done else 0)
    while total < rows:
        if k == 0:
            inputs, options = case["inputs"], case["options"]
        else:
            prev = torch.load(out / f"seg{k - 1}.pt", weights_only=False)
            inputs = {"init": prev["tokens"], "free_positions": free}
            options = {key: v for key, v in case["options"].items() if key != "start"}
        seen: list[int] = []
        cpu = time.process_time()
        r = mhfast.sample(case["model"], **inputs, **options, epochs=segment, burn_in=0, seed=seed + 1000 * k,
                          progress=lambda e, s: seen.append(int(s["model_rows"])))
        cum = [total + n for n in seen]
        torch.save({"traces": r.traces, "names": r.trace_names, "epochs": r.trace_epochs, "novel": r.novel_rate,
                    "rows_cum": cum, "tokens": r.tokens.clone(), "cpu": time.process_time() - cpu},
                   out / f"seg{k}.pt")
        total = cum[-1]
        print(f"segment {k}: seed {seed + 1000 * k}, {total} rows", flush=True)
        k += 1


def joined(out: Path) -> tuple[SimpleNamespace, list[int], float]:
    """The segments as one result (traces, trace epochs, novel rates), their cumulative rows and CPU s."""
    parts = [torch.load(p, weights_only=False) for p in sorted(out.glob("seg*.pt"), key=lambda p: int(p.stem[3:]))]
    epochs, offset = [], 0
    for p in parts:
        epochs.append(p["epochs"] + offset)
        offset += len(p["rows_cum"])
    r = SimpleNamespace(traces=torch.cat([p["traces"] for p in parts], dim=2), trace_epochs=torch.cat(epochs),
                        trace_names=parts[0]["names"], novel_rate=torch.cat([p["novel"] for p in parts]))
    return r, sum((p["rows_cum"] for p in parts), []), sum(p["cpu"] for p in parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, required=True, help="where the segments are saved")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--segment", type=int, default=20000, help="sweeps per segment")
    ap.add_argument("--rows", type=int, default=18_100_000, help="run until this many model rows")
    ap.add_argument("--burn-in", type=int, default=2443, help="sweeps left out of the figures")
    ap.add_argument("--at", type=int, nargs="*", default=[], help="row budgets to report")
    ap.add_argument("--resume", action="store_true", help="go on from the segments already in --dir")
    args = ap.parse_args()
    torch.set_num_threads(1)
    args.dir.mkdir(parents=True, exist_ok=True)
    run_segments(bt.dispersed_case("sapiens", 8, 4, 0.5), args.dir, args.seed, args.segment, args.rows, args.resume)
    r, rows, cpu = joined(args.dir)
    for budget in args.at:
        last = max((i + 1 for i, n in enumerate(rows) if n <= budget), default=0)
        if rows[-1] < budget or last <= args.burn_in:
            print(budget, "not reached")
            continue
        print(budget, bt.window_figures(r, rows, cpu, args.burn_in, last), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
