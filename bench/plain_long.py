"""Plain single-site MH on one of bench_tempering.py's dispersed cases, run in segments up to a row budget, with
its figures at several budgets: the plain-MH side of RESULTS.md's long "Sapiens at target temperature 0.5" and
"AntiBERTy from dispersed random starts" tables.

The case: by default Sapiens' heavy-chain MLM, T=8 free residues, energy local, 4 chains each from its own random
residues, target temperature 0.5 (``bench_tempering.dispersed_case("sapiens", 8, 4, 0.5)``); ``--model antiberty
--temperature 1`` gives AntiBERTy's. Segment k runs ``--segment``
sweeps from segment k-1's final tokens with seed ``seed + 1000 k`` (so the first segment is the seed's own run, and
each later one a fresh stream: the chain is plain MH all along, its memo restarted per segment). Each segment's
traces and rows are saved to ``--dir`` as it ends, so a stopped run resumes at the next segment (``--resume``).
Figures (``--at``, model rows): bench_tempering.window_figures over the joined traces, burn-in ``--burn-in`` sweeps
(2,443 for seed 1: where the earlier plain run reached the tempered burn-in's rows), draws up to the last sweep
within the budget, CPU prorated by rows. ``--match`` takes the burn-in and the budgets from a tempered run saved by
``bench/tempering_long.py --save`` instead: plain MH's burn-in ends where its rows reach the tempered burn-in's, and
each budget is the tempered run's rows at one of its sweeps (``--at``, then in tempered sweeps): equal model rows.

    python3 bench/plain_long.py --dir /tmp/plain18 --seed 1 --rows 18100000 --at 9060941 13528939 18042147
    # ~2 h of one core (AMD EPYC), 13 segments of 20,000 sweeps
    python3 bench/plain_long.py --model antiberty --temperature 1 --dir /tmp/plainab --seed 0 --segment 1000 \
        --rows 830000 --match tempered.pt --at 192 448 704 832                  # ~95 min of one core
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
    free = case["inputs"].get("free_positions")
    if free is None:  # (Sapiens: T residues between <s> and </s>)
        T = case["inputs"]["length"]
        free = torch.zeros(1, T + 2, dtype=torch.bool)
        free[0, 1:T + 1] = True
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
    ap.add_argument("--model", choices=("sapiens", "antiberty"), default="sapiens")
    ap.add_argument("--length", type=int, default=8, help="free residues T")
    ap.add_argument("--temperature", type=float, default=0.5, help="the target temperature")
    ap.add_argument("--match", type=Path, default=None,
                    help="a tempered run saved by tempering_long.py --save: burn-in and budgets (--at: its sweeps) at "
                    "its rows")
    ap.add_argument("--resume", action="store_true", help="go on from the segments already in --dir")
    args = ap.parse_args()
    torch.set_num_threads(1)
    args.dir.mkdir(parents=True, exist_ok=True)
    case = bt.dispersed_case(args.model, args.length, 4, args.temperature)
    run_segments(case, args.dir, args.seed, args.segment, args.rows, args.resume)
    r, rows, cpu = joined(args.dir)
    burn_in, budgets = args.burn_in, args.at
    if args.match is not None:
        tempered = torch.load(args.match, weights_only=False)  # (our own file: lists and tensors)
        t_rows = tempered["rows_cum"]
        if not all(0 < s <= len(t_rows) for s in [tempered["burn_in"], *args.at]):
            ap.error(f"--at: sweeps of the tempered run, 1 .. {len(t_rows)}")
        burn_in = bt.first_reaching(rows, t_rows[tempered["burn_in"] - 1])
        budgets = [t_rows[s - 1] for s in args.at]
        print(f"matched to {args.match}: burn-in {burn_in} sweeps (the tempered burn-in's "
              f"{t_rows[tempered['burn_in'] - 1]} rows)", flush=True)
    for budget in budgets:
        last = bt.last_within(rows, budget, 0)
        if rows[-1] < budget or last <= burn_in:
            print(budget, "not reached")
            continue
        print(budget, bt.window_figures(r, rows, cpu, burn_in, last), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
