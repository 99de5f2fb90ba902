"""One long tempered run of one of bench_tempering.py's dispersed cases, with its figures at several budgets.

By default the case of RESULTS.md's "Sapiens at target temperature 0.5" section: Sapiens' heavy-chain MLM, T=8 free
residues, energy local, 4 chains each from its own random residues, target temperature 0.5, ``tempering=8`` tuned in
burn-in (200 sweeps). ``--model antiberty --temperature 1 --rungs 6`` gives the "AntiBERTy from dispersed random
starts" case instead (``bench_tempering.dispersed_case``). The counter RNG makes a run's first N sweeps those of
any shorter run with the same seed, bit for bit, so one run of the longest budget gives the figures of every shorter
one (``--at``): ArviZ's ESS and split-R-hat of the post-burn-in draws up to each budget
(bench_tempering.window_figures), CPU prorated by rows. ``--save`` keeps the traces and rows, so plain MH at the same
rows (bench/plain_long.py) can be cut to match later.

    python3 bench/tempering_long.py --seed 1 --epochs 19200 --at 9600 14400    # ~60 min of one core (AMD EPYC)
    python3 bench/tempering_long.py --model antiberty --temperature 1 --rungs 6 --seed 0 --epochs 832 \
        --burn-in 128 --at 320 576 --echo 32                                    # ~80 min of one core

``--plain`` runs plain single-site MH on the same case instead (the same seed's chains without tempering), for a
comparison at equal CPU seconds: with the proposal memo a stuck plain chain forwards almost no rows (every neighbour
of its state is remembered), so at equal rows it would run ~25x the sweeps of a tempered one and ~10x its CPU, while
its sweeps cost about the same CPU whatever their rows. ``--at-cpu`` gives budgets in CPU seconds (each: the last
sweep within it); every budget's CPU is then read from the per-sweep CPU clock, not prorated by rows.

    python3 bench/tempering_long.py --model antiberty --length 3 --temperature 0.5 --rungs 6 --seed 0 \
        --epochs 12000 --burn-in 200 --at 1000 2000 4000 8000                   # ~30 min of one core
    python3 bench/tempering_long.py --model antiberty --length 3 --temperature 0.5 --plain --seed 0 \
        --epochs 130000 --burn-in 2200 --at-cpu 150 300 600 1200               # plain MH, the same CPU budgets

``--init`` starts every chain from the final states of a run saved by ``--save`` (a second stage: from noise at
T=32 plain MH descends first, then tempering and more plain MH go on from where it ended, both on one seed), and
:func:`compare_saved` sets a saved tempered run against a saved plain one (RESULTS.md, "AntiBERTy at T=32 in two
stages"; the commands: bench/tempering_runs/2026-11-30-antiberty-t32-two-stage/compare.py):

    python3 bench/tempering_long.py --model antiberty --length 32 --temperature 1 --plain --seed 0 --epochs 120 \
        --burn-in 8 --save stage1.pt                                            # ~50-60 min of one core
    python3 bench/tempering_long.py --model antiberty --length 32 --temperature 1 --rungs 6 --seed 1 --epochs 14 \
        --burn-in 8 --init stage1.pt --save tempered.pt                         # ~60 min

Writes ``--out`` (JSON: the figures per budget and the run's ladder, swap rates and round trips).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_tempering as bt  # noqa: E402


def load_saved(path: str | Path | list) -> tuple[SimpleNamespace, dict]:
    """A run saved by ``--save``: the result fields bench_tempering.window_figures reads (traces, their names and
    epochs, novel rate), and the saved dict itself (cumulative rows, per-sweep CPU clock, burn-in, ladder...).
    A list of such runs, each started from the previous one's final states (``--init``), is joined into one chain
    per chain: traces appended, sweeps, rows and CPU seconds counted on; burn-in and ladder the first run's."""
    parts = [torch.load(p, weights_only=False) for p in (path if isinstance(path, list) else [path])]  # our files
    d = dict(parts[0])
    for more in parts[1:]:
        sweeps, rows, cpu = len(d["rows_cum"]), d["rows_cum"][-1], d["cpu"]
        d["traces"] = torch.cat([d["traces"], more["traces"]], dim=2)
        d["epochs"] = torch.cat([d["epochs"], more["epochs"] + sweeps])
        d["novel"] = torch.cat([d["novel"], more["novel"]])
        d["rows_cum"] = d["rows_cum"] + [rows + r for r in more["rows_cum"]]
        d["cpu_at"] = d["cpu_at"] + [cpu + c for c in more["cpu_at"]]
        d["cpu"], d["tokens"] = cpu + more["cpu"], more["tokens"]
    return SimpleNamespace(traces=d["traces"], trace_names=d["names"], trace_epochs=d["epochs"],
                           novel_rate=d["novel"]), d


def compare_saved(tempered: str | Path, plain: str | Path | list, budgets: list[int], seed: int = 0) -> list[str]:
    """A tempered run against plain MH on the same chains (same case, seed and start), both saved by ``--save``,
    at each of the tempered run's ``budgets`` (sweeps; the draws exclude its burn-in): a header (ladder, swap
    rates, round trips, totals, each chain's lowest E_local, how far the target chains are from plain MH's) and
    bench_tempering's equal-rows table. Plain MH is cut twice per budget: where its forwarded rows reach the
    tempered run's (its burn-in ends where its rows reach those of the tempered burn-in, its draws at the last
    sweep within the budget's rows: bench_tempering.equal_rows' rule), and where its CPU seconds do (the same rule
    on the per-sweep CPU clocks). ``plain`` may be a list of runs, joined (:func:`load_saved`)."""
    (rt, t), (rp, p) = load_saved(tempered), load_saved(plain)
    burn = t["burn_in"]

    def lowest(r) -> list[float]:  # each chain's lowest E_local over every traced sweep
        return r.traces[0][:, :, r.trace_names.index("e_local")].min(dim=1).values.double().round(decimals=2).tolist()

    # rung 0 keeps plain MH's chain ids, hence its random numbers: until a swap first reaches rung 0 the target
    # chains are plain MH's (up to the rounding of a differently composed batch); how long they stay so is a
    # measure of how little the ladder reaches the target
    k, n = rt.trace_names.index("e_local"), rt.traces.shape[2]
    gap = (rt.traces[0][:, :, k] - rp.traces[0][:, :n, k]).abs().amax(dim=0)  # per sweep, over chains
    apart = (gap > 1e-3).nonzero().flatten().tolist()

    def where_apart(sweeps: list[int]) -> str:  # (0-based sweeps where the chains are apart)
        if not sweeps:
            return ""
        same = f"the same to 1e-3 in the first {sweeps[0]} sweeps, " if sweeps[0] else ""
        return f" ({same}apart from sweep {sweeps[0] + 1} on)"

    out = [f"tempered: ladder {[round(x, 2) for x in t['ladder'][0].tolist()]}, swap rates "
           f"{[round(x, 2) for x in t['swap'][0].tolist()]}, round trips {t['trips'][0].tolist()}; "
           f"{len(t['rows_cum'])} sweeps, {t['rows_cum'][-1]} rows, {t['cpu']:.0f} CPU s",
           f"plain MH: {len(p['rows_cum'])} sweeps, {p['rows_cum'][-1]} rows, {p['cpu']:.0f} CPU s",
           f"lowest E_local per chain over the whole run: tempered {lowest(rt)}, plain MH {lowest(rp)}",
           f"tempered target chains against plain MH's first {n} sweeps: E_local at most {float(gap.max()):.2g} apart"
           + where_apart(apart), ""]
    runs = []
    for last in budgets:
        a = bt.window_figures(rt, t["rows_cum"], t["cpu"], burn, last, t["cpu_at"])
        runs.append({"tempering": f"tempering={t['ladder'].shape[1]}, {last} sweeps", "seed": seed, **a})
        for how, clock in (("rows", "rows_cum"), ("CPU s", "cpu_at")):
            first = bt.first_reaching(p[clock], t[clock][burn - 1])
            end = bt.last_within(p[clock], t[clock][last - 1], 0)
            if end <= first:
                continue
            b = bt.window_figures(rp, p["rows_cum"], p["cpu"], first, end, p["cpu_at"])
            short = t[clock][last - 1] - p[clock][end - 1]
            runs.append({"tempering": f"plain MH at equal {how}" + (f" ({short:.0f} short)" if end == len(
                p[clock]) and short > 0.02 * t[clock][last - 1] else ""), "seed": seed, **b})
    return out + bt.equal_rows_lines({}, runs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=19200, help="sweeps in all, burn-in included")
    ap.add_argument("--burn-in", type=int, default=200)
    ap.add_argument("--rungs", type=int, default=8)
    ap.add_argument("--plain", action="store_true", help="plain single-site MH instead of tempering (no --rungs)")
    ap.add_argument("--at", type=int, nargs="*", default=[], help="shorter budgets (sweeps) to report as well")
    ap.add_argument("--at-cpu", type=float, nargs="*", default=[],
                    help="budgets in CPU seconds to report as well (each: the last sweep within it)")
    ap.add_argument("--model", choices=("sapiens", "antiberty"), default="sapiens")
    ap.add_argument("--length", type=int, default=8, help="free residues T")
    ap.add_argument("--temperature", type=float, default=0.5, help="the target temperature (the ladder's cold end)")
    ap.add_argument("--echo", type=int, default=0, help="print the rows and seconds so far every this many sweeps")
    ap.add_argument("--save", type=Path, default=None,
                    help="also save the run's traces, cumulative rows and final states (torch.save) for later "
                         "comparisons")
    ap.add_argument("--init", type=Path, default=None,
                    help="start every chain from the final state of a run saved by --save (the same case and "
                         "chains) instead of its own random residues: a second stage")
    ap.add_argument("--dtype", default=None, help="the model's forward precision (option dtype, e.g. bfloat16: "
                    "the target is then the model as evaluated in it; default the model's own, float32)")
    ap.add_argument("--out", type=Path, default=None, help="JSON file (default: print only)")
    args = ap.parse_args()
    if not all(args.burn_in < a <= args.epochs for a in args.at) or args.epochs <= args.burn_in:
        ap.error("--at and --epochs must exceed --burn-in, and --at must be <= --epochs")
    torch.set_num_threads(1)
    case = bt.dispersed_case(args.model, args.length, 4, args.temperature)
    if args.dtype is not None:
        case["options"]["dtype"] = args.dtype
        case["what"] += f", forward in {args.dtype}"
    if args.init is not None:
        # per-chain init (Long[B, C, T], every free position filled: start="greedy" fills only masks, so none),
        # in place of the case's length or shared init; its free positions stay the case's
        case["inputs"] = {"init": load_saved(args.init)[1]["tokens"],
                          **{k: v for k, v in case["inputs"].items() if k == "free_positions"}}
        case["options"]["start"] = "greedy"
    t0 = time.perf_counter()
    rungs = None if args.plain else args.rungs
    cpu_at: list[float] = []
    r, rows, cpu = bt.traced_run(case, args.epochs, args.burn_in, args.seed, rungs, echo=args.echo, cpu_at=cpu_at)
    if args.save is not None:
        torch.save({"traces": r.traces, "names": r.trace_names, "epochs": r.trace_epochs, "novel": r.novel_rate,
                    "rows_cum": rows, "cpu_at": cpu_at, "cpu": cpu, "burn_in": args.burn_in, "ladder": r.ladder,
                    "swap": r.swap_rate, "trips": r.round_trips, "tokens": r.tokens},
                   args.save)
    out = {"model": args.model, "length": args.length, "temperature": args.temperature, "seed": args.seed,
           "init": None if args.init is None else str(args.init), "dtype": args.dtype,
           "epochs": args.epochs, "burn_in": args.burn_in, "rungs": rungs,
           "wall": time.perf_counter() - t0, "cpu": cpu, "what": case["what"]}
    if rungs is not None:
        out.update(ladder=[round(t, 2) for t in r.ladder[0].tolist()],
                   swap=[round(x, 2) for x in r.swap_rate[0].tolist()], trips=r.round_trips[0].tolist())
    within = [bt.last_within(cpu_at, budget, 0) for budget in args.at_cpu]  # (CPU s: non-decreasing; 0: none)
    for last in sorted({*args.at, *(w for w in within if w > args.burn_in), args.epochs}):
        out[str(last)] = bt.window_figures(r, rows, cpu, args.burn_in, last, cpu_at)
        print(last, out[str(last)], flush=True)
    if rungs is not None:
        print(out["ladder"], out["swap"], out["trips"], flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps(out, indent=1, default=float) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
