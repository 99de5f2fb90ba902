"""Parallel tempering against plain MH on a device, at equal sweeps: effective samples per wall second (issue 38).

On one CPU thread a sweep of K rungs forwards K times the rows of plain MH and takes about K times as long, so
bench/bench_tempering.py compares the two at equal model rows. On a GPU a sweep of a small model is bound by kernel
launches, not by rows: the K rungs are more rows of the same batched forward, so a tempered sweep may cost little
more wall time than a plain one. What a user of a GPU pays is seconds, so here both samplers run the same number of
sweeps and the figure is ESS of E_local per wall second (and per 1,000 rows, for the CPU comparison).

Case: bench_tempering.py's ``sapiens-dispersed`` (Sapiens' heavy-chain MLM, T random residues, all free, energy
local, 4 chains each from its own random residues, target temperature ``--temperature``: 0.5 sharpens the target,
where plain MH stays in the basin it starts in); ``--model antiberty`` its ``antiberty-dispersed`` (RESULTS.md's
AntiBERTy T=8 runs: ``--temperature 1 --rungs 6``). Figures from the post-burn-in sweeps of the target chains
(``bench_tempering.window_figures``: ArviZ's bulk-ESS and rank-normalized split R-hat). Wall time of the whole
``mhfast.sample`` call, the device synchronized before the clock stops; it includes the burn-in, the diagnostics
and, on a GPU, the first call's warm-up (a first, short run of each sampler is made and discarded for that).

    python3 bench/tempering_device.py --device cuda --sweeps 600 --seeds 0 1 --traces runs.pt   # the GPU run
    python3 bench/tempering_device.py --from-traces runs.pt      # its table, where arviz-stats is installed
    python3 bench/tempering_device.py --device cuda --capture cuda-graph --traces graphs.pt   # the steps as graphs
    python3 bench/tempering_device.py --device cpu --sweeps 8 --burn-in 2 --length 4   # a smoke run (seconds)
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mhfast  # noqa: E402
from bench_mixmatch import sync  # noqa: E402
from bench_tempering import counters_text, dispersed_case, window_figures  # noqa: E402


def timed_run(case: dict, sweeps: int, burn_in: int, seed: int, tempering, capture: str = "none") -> dict:
    """One ``mhfast.sample`` call on the case's model's device (``capture``: the sampler's option): what its figures
    need (over sweeps ``burn_in .. sweeps - 1``), and wall seconds."""
    rows: list[int] = []
    sync(case["model"])
    wall = time.perf_counter()
    r = mhfast.sample(case["model"], **case["inputs"], **case["options"], epochs=sweeps, burn_in=burn_in, seed=seed,
                      tempering=tempering, capture=capture, progress=lambda e, s: rows.append(int(s["model_rows"])))
    sync(case["model"])  # the wall time of a device's run ends when its work does
    wall = time.perf_counter() - wall
    raw = {"tempering": tempering, "seed": seed, "wall": wall, "capture": capture, "rows": rows, "sweeps": sweeps,
           "burn_in": burn_in,
           "traces": r.traces.cpu(), "trace_epochs": r.trace_epochs.cpu(), "trace_names": list(r.trace_names),
           "novel_rate": r.novel_rate.cpu()}
    if r.ladder is not None:
        raw.update(ladder=[round(t, 2) for t in r.ladder[0].tolist()],
                   swap=[round(x, 2) for x in r.swap_rate[0].tolist()], trips=r.round_trips[0].tolist())
    return raw


def figures(raw: dict) -> dict:
    """A run's figures (ArviZ's, through bench_tempering.window_figures) from what :func:`timed_run` kept: computed
    where arviz-stats is installed (the GPU machine has none; ``--traces`` carries the runs back)."""
    import types

    r = types.SimpleNamespace(**{k: raw[k] for k in ("traces", "trace_epochs", "trace_names", "novel_rate")})
    out = {k: raw[k] for k in ("tempering", "seed", "wall") + (("ladder", "swap", "trips") if "ladder" in raw else ())}
    out.update(window_figures(r, raw["rows"], raw["wall"], raw["burn_in"], raw["sweeps"]))
    out["ess_per_s"] = out["ess_e"] / raw["wall"]
    return out


def table(runs: list[dict]) -> list[str]:
    out = ["| sampler | seed | sweeps (burn-in) | model rows | wall s | ms per sweep | ESS E_local | ESS / wall s | "
           "ESS / 1k rows | R-hat E_local | max R-hat | per chain: lowest E_local | tempering counters |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for x in runs:
        out.append(f"| {x['tempering'] or 'plain MH'} | {x['seed']} | {x['sweeps']} ({x['burn']}) | {x['rows']} | "
                   f"{x['wall']:.1f} | {1000 * x['wall'] / x['sweeps']:.1f} | {x['ess_e']:.1f} | "
                   f"{x['ess_per_s']:.2f} | {1000 * x['ess_e'] / x['rows']:.3f} | {x['rhat_e']:.3f} | {x['rhat']:.3f} | "
                   f"{x['chain_min']} | {counters_text(x)} |")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--sweeps", type=int, default=600)
    ap.add_argument("--burn-in", type=int, default=None, help="default: a quarter of the sweeps")
    ap.add_argument("--model", choices=("sapiens", "antiberty"), default="sapiens",
                    help="antiberty: needs the antiberty package (on a GPU machine: scripts/carry_parts.py)")
    ap.add_argument("--length", type=int, default=8)
    ap.add_argument("--temperature", type=float, default=0.5)
    ap.add_argument("--rungs", type=int, default=8)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--capture", default="none", choices=["none", "static", "cuda-graph"],
                    help="the sampler's capture option for both samplers (cuda-graph: the steps replayed as CUDA "
                    "graphs)")
    ap.add_argument("--json", type=Path, default=None, help="also write the runs' figures here")
    ap.add_argument("--traces", type=Path, default=None,
                    help="also save the runs' traces here (torch.save), for --from-traces where arviz-stats is")
    ap.add_argument("--from-traces", type=Path, default=None, help="run nothing: the table of the saved runs")
    args = ap.parse_args()
    if args.from_traces:
        saved = torch.load(args.from_traces, weights_only=False)  # our own file (a list of dicts of tensors)
        print(saved["header"] + "\n")
        print("\n".join(table([figures(raw) for raw in saved["runs"]])))
        return 0
    burn = args.sweeps // 4 if args.burn_in is None else args.burn_in
    torch.set_num_threads(1)
    case = dispersed_case(args.model, args.length, 4, args.temperature, args.device)  # (chains where the weights are)
    for t in (None, args.rungs):  # warm-up (the device's first calls: kernels loaded, allocator grown), discarded
        timed_run(case, 4, 1, 99, t, args.capture)
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU, 1 thread"
    header = (f"{case['what']}; {args.sweeps} sweeps each, burn-in {burn}; tempering={args.rungs} (tuned in burn-in) "
              f"against plain single-site MH at equal sweeps, capture {args.capture}; device {args.device} ({name}), "
              f"torch {torch.__version__}")
    raws = []
    for seed in args.seeds:  # interleaved per seed
        for t in (None, args.rungs):
            raws.append(timed_run(case, args.sweeps, burn, seed, t, args.capture))
            print(f"# seed {seed} tempering {t}: {raws[-1]['wall']:.2f} s, {raws[-1]['rows'][-1]} rows",
                  file=sys.stderr, flush=True)
            if args.traces:  # after every run: a run cut short by a time limit keeps the ones before it
                torch.save({"header": header, "runs": raws}, args.traces)
    print(header + "\n")
    try:
        runs = [figures(raw) for raw in raws]
    except ImportError as e:
        print(f"(no figures here: {e}; --from-traces computes them from --traces)")
        return 0
    print("\n".join(table(runs)))
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
