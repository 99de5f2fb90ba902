"""The static-shape step (``capture="static"``, what ``capture="cuda-graph"`` captures) against the default step,
outside the model, on CPU: how much a step costs when it forwards every moving chain's rows and puts back the
unchanged chains' results instead of reading which chains changed (one host sync).

bench_floor's NullMLM (near-zero cost), one thread, CPU ms per marginal step (bench_floor.per_step_ms), the two
variants alternating for ``--rounds`` rounds, each the median of ``--repeats`` runs; model rows per step from the
same runs; with ``--antiberty T CHAINS EPOCHS`` also the real AntiBERTy from its warm start (2 threads).
Writes its section of bench/RESULTS.md.

    python3 bench/ab_static_step.py --antiberty 20 5 6
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results_md  # noqa: E402
from bench_floor import NullMLM, per_step_ms  # noqa: E402

import mhfast  # noqa: E402

START, END = "<!-- ab_static_step:start -->", "<!-- ab_static_step:end -->"


def rows_per_step(C: int, T: int, capture: str) -> tuple[float, float]:
    """(model rows per marginal step, novel rate) of 2 vs 6 epochs, the runs per_step_ms times."""
    model = NullMLM(T=T)
    got = {e: mhfast.sample(model, T, epochs=e, chains=C, burn_in=0, seed=0, capture=capture) for e in (2, 6)}
    return (got[6].model_rows - got[2].model_rows) / (4 * T), float(got[6].novel_rate.mean())


def antiberty_case(T: int, chains: int, epochs: int) -> list[str]:
    """The real AntiBERTy from its warm start (few proposals change the state): rows, wall time and whether the
    tokens equal the default step's, fp32 and bf16 (the caller sets the threads). Lines for the report."""
    from mhfast.models.antiberty import load_antiberty

    lm = load_antiberty()
    out = ["", f"The real AntiBERTy from its greedy warm start, T={T}, {chains} chains, {epochs} epochs (1 burn-in), "
           f"seed 2, {torch.get_num_threads()} torch threads, one run each:", "",
           "| dtype | rows none, static | s none, static | novel rate | tokens equal | max abs energy difference |",
           "|---|---|---|---|---|---|"]
    for dtype in (None, torch.bfloat16):
        common = dict(length=T, chains=chains, epochs=epochs, burn_in=1, seed=2, dtype=dtype)
        t0 = time.perf_counter()
        a = mhfast.sample(lm, **common)
        t1 = time.perf_counter()
        b = mhfast.sample(lm, capture="static", **common)
        t2 = time.perf_counter()
        out.append(f"| {'bfloat16' if dtype else 'float32'} | {a.model_rows}, {b.model_rows} | {t1 - t0:.1f}, "
                   f"{t2 - t1:.1f} | {float(a.novel_rate.mean()):.2f} | {'yes' if torch.equal(a.tokens, b.tokens) else 'no'}"
                   f" | {float((a.e_raw - b.e_raw).abs().max()):.2g} |")
        print(out[-1], flush=True)
    return out + ["", "Tokens can differ in bf16: the static step forwards other batch shapes, which round differently, "
                  "and some MH decisions change (each run is exact for the model as evaluated)."]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--sizes", nargs="+", default=["5x40", "500x40"], help="CHAINSxT")
    p.add_argument("--antiberty", type=int, nargs=3, default=None, metavar=("T", "CHAINS", "EPOCHS"),
                   help="also the real AntiBERTy from its warm start (e.g. 20 5 6)")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(1)
    lines = [f"`capture='static'` against the default step (`none`), outside the model: bench_floor's NullMLM, one "
             f"thread, CPU ms per marginal step, {args.rounds} alternating rounds (each the median of {args.repeats} "
             f"runs). Machine: {results_md.machine_description()}.", "",
             "| chains | T | none (ms / step, each round) | static (ms / step, each round) | static / none | "
             "rows / step none, static | novel rate |", "|---|---|---|---|---|---|---|"]
    for size in args.sizes:
        C, T = (int(x) for x in size.split("x"))
        ms: dict[str, list[float]] = {"none": [], "static": []}
        for _ in range(args.rounds):
            for capture in ms:
                ms[capture].append(per_step_ms(C, T, "compiled", args.repeats, capture)[2])
        (r_none, novel), (r_static, _) = rows_per_step(C, T, "none"), rows_per_step(C, T, "static")
        a, b = statistics.median(ms["none"]), statistics.median(ms["static"])
        lines.append(f"| {C} | {T} | {a:.3f} ({', '.join(f'{x:.3f}' for x in ms['none'])}) | {b:.3f} "
                     f"({', '.join(f'{x:.3f}' for x in ms['static'])}) | {b / a:.2f}x | {r_none:.0f}, {r_static:.0f} | "
                     f"{novel:.2f} |")
        print(lines[-1], flush=True)
    if args.antiberty is not None:
        torch.set_num_threads(2)
        lines += antiberty_case(*args.antiberty)
    lines += ["", "The static step forwards the rows of chains whose proposal kept their state too ("
              "1 - novel rate of them) and spends a few ops putting their old results back; it exists to be "
              "captured as a CUDA graph (no host sync, static shapes), where a step of few chains is bound by "
              "launches, not rows. On CPU the default step is the faster one. Not measured: a GPU (none lent)."]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        results_md.write_section(START, END, "## The static-shape step on CPU (bench/ab_static_step.py)\n\n" + text)


if __name__ == "__main__":
    main()
