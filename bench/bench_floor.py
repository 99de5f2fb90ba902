"""The sampler's own cost per MH step, outside the model: a near-zero-cost model, so only mhfast is timed.

``NullMLM`` returns a fixed random logit row per position (no context, ~10 us per call), so a step's
time is the sampler's: proposing, building X' rows, gathering energies, accepting, the RNG and the
Python around them. Marginal time per step: (t(6 epochs) - t(2 epochs)) / (4 T), each the median of
``--repeats`` alternating runs, one torch thread, compiled ops vs the pure-PyTorch reference backend
(which also runs the RNG hash as ~50 small torch ops, as mhfast did before the counter_uniforms op).
Goals (issue 14): <= 0.25 ms per step for 5 chains, <= 2.5 ms for 500 chains at T=40. Writes its section
of bench/RESULTS.md.

``--compare`` times one option's two values against each other instead, alternating in one process (``memo``: the
order swapped every other round; ``capture``: always none first), CPU ms per marginal step, median of ``--rounds``
rounds:

* ``memo``: the proposal memo off (``memo=0``) and on (``memo=8``, what the default ``"auto"`` gives single-site
  MH), with the memo's hits per step (prints its table; bench/RESULTS.md's memo section quotes it);
* ``capture``: the static-shape step (``capture="static"``, what ``"cuda-graph"`` captures) against the default
  step, with the model rows per step; ``--antiberty T CHAINS EPOCHS`` adds the real AntiBERTy from its warm start.
  Writes its own section of bench/RESULTS.md.

    python3 bench/bench_floor.py
    python3 bench/bench_floor.py --compare memo --rounds 5
    python3 bench/bench_floor.py --compare capture --antiberty 20 5 6
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

import mhfast  # noqa: E402

START, END = "<!-- bench_floor:start -->", "<!-- bench_floor:end -->"
CAPTURE_START, CAPTURE_END = "<!-- bench_floor_capture:start -->", "<!-- bench_floor_capture:end -->"
MEMO_SLOTS = 8  # what memo="auto" gives single-site MH
# Written under the table: what the columns count, then earlier runs' figures, dated (text, not this run's numbers).
NOTE = ('op calls / step: top-level torch/mhfast op calls per step of the compiled run (torch.profiler, untimed '
        "runs), the driver's few per-step ops included. A step's propose phase is one op (mh_propose_site), X' and "
        'its masked rows another (mh_site_rows), its accept + commit phase a third (mh_commit_site_, which also '
        "writes the accepted rows into the cache and takes the model's sub-batch outputs without concatenation); "
        "around the model call, its energy terms (the runner's output check, gather_energies, the term writes, the "
        'float64 energy sums that keep energies bit-identical) are still ~25 calls, plus ~8 per extra model sub-'
        'batch. Earlier runs (Intel Xeon, 2026-11-23 and 24; kept as text): before the fused ops (commit 91da378), '
        '107 op calls per step for 5 chains and 197 for 500 chains at T=40 (57 and 133 after them, 47 and 123 after '
        'mh_site_rows); 0.28-0.31 ms and 3.7 ms per step on a quiet machine. A same-conditions A/B while other jobs '
        'kept the load average at ~3 (the two versions '
        'alternated, 3 rounds, each the median of 3 runs, CPU time per step by time.process_time, less load-sensitive'
        ' than wall time): 5 chains 0.28-0.33 -> 0.17-0.22 ms, 500 chains T=40 4.37-4.55 -> 2.36-2.67 ms; wall time '
        'in the same rounds (noisier): 5 chains best 0.29-0.36 -> 0.17-0.18 ms, 500 chains 5.3-7.4 -> 3.5-4.1 ms. '
        "About 0.6x. At 500 chains the step is bound by data movement (17.5k masked rows of 40 tokens, the model's "
        'outputs, the energy gathers, the cache rows), not by op calls. The reference backend now runs the references'
        " of the two fused ops (which check their inputs' values, then run the old op sequence), so its column is not"
        ' comparable with earlier tables. Before the counter_uniforms op: 1.1-1.4 ms and 8.3 ms on the machine of '
        'issue 14.')


def goals_line(rows: list[tuple]) -> str:
    """This run's verdict on the issue-14 goals (<= 0.25 ms for 5 chains, <= 2.5 ms for 500), from the table."""
    parts = []
    for C, T, comp, comp_cpu, *_ in rows:
        goal = 0.25 if C == 5 else 2.5
        parts.append(f"{C} chains T={T}: {comp:.3f} ms wall, {comp_cpu:.3f} ms CPU -> "
                     f"{'met' if comp <= goal else 'MISSED'} (goal <= {goal} ms)")
    return "This run against the goals: " + "; ".join(parts) + "."


class NullMLM:
    """A near-zero-cost MLM: logits = a fixed random row per position (the context is ignored)."""

    def __init__(self, V: int = 32, T: int = 64):
        self.table = torch.randn(T, V, generator=torch.Generator().manual_seed(0)) * 2
        self.vocab_size, self.mask_id, self.pad_id, self.special_ids = V, V - 1, V - 2, (V - 1, V - 2)

    def masked_logits(self, tokens, positions, context=None, context_index=None):
        return self.table[positions]


def per_step_ms(C: int, T: int, backend: str, repeats: int, **options) -> tuple[float, float, float]:
    """(wall ms, model calls, CPU ms) per marginal step, ``options`` passed to ``mhfast.sample`` (e.g.
    ``capture="static"``, ``memo=0``); CPU time (time.process_time) is less sensitive to other jobs on the machine
    than wall time (it still grows with contention for caches and memory bandwidth)."""
    model = NullMLM(T=T)
    kw = dict(chains=C, burn_in=0, seed=0, backend=backend, **options)
    mhfast.sample(model, T, epochs=1, **kw)  # warm-up
    t = {2: [], 6: []}
    cpu = {2: [], 6: []}
    calls = {}
    for _ in range(repeats):
        for e in (2, 6):
            t0, c0 = time.perf_counter(), time.process_time()
            r = mhfast.sample(model, T, epochs=e, **kw)
            t[e].append(time.perf_counter() - t0)
            cpu[e].append(time.process_time() - c0)
            calls[e] = r.model_calls
    steps = 4 * T
    marginal = lambda x: 1e3 * (statistics.median(x[6]) - statistics.median(x[2])) / steps  # noqa: E731
    return marginal(t), (calls[6] - calls[2]) / steps, marginal(cpu)


def alternating_cpu_ms(C: int, T: int, variants: dict[str, dict], rounds: int, repeats: int,
                       swap_order: bool = True) -> dict[str, list[float]]:
    """A/B (or more) in one process: per round, each variant (name -> options of ``mhfast.sample``) in turn, its
    CPU ms per marginal step (:func:`per_step_ms`, compiled backend); ``swap_order``: every other round in reverse
    order. Returns name -> the CPU ms of each round.

    >>> got = alternating_cpu_ms(2, 4, {"off": dict(memo=0), "on": dict(memo=MEMO_SLOTS)}, rounds=2, repeats=1)
    >>> sorted(got), len(got["on"])
    (['off', 'on'], 2)
    """
    got: dict[str, list[float]] = {name: [] for name in variants}
    for rnd in range(rounds):
        order = list(variants) if not (swap_order and rnd % 2) else list(variants)[::-1]
        for name in order:
            got[name].append(per_step_ms(C, T, "compiled", repeats, **variants[name])[2])
    return got


def rounds_text(xs: list[float]) -> str:
    return ", ".join(f"{x:.3f}" for x in xs)


def compare_memo(rounds: int, repeats: int) -> list[str]:
    """The memo off and on, CPU ms per marginal step and the memo's hits per step (from a 4-epoch run)."""
    lines = [f"Machine: {results_md.machine_description()}", "",
             "| chains | T | memo off (CPU ms / step) | memo on | on / off | memo hits / step | rounds (off; on) |",
             "|---|---|---|---|---|---|---|"]
    for C, T in ((5, 10), (5, 40), (500, 40)):
        got = alternating_cpu_ms(C, T, {"off": dict(memo=0), "on": dict(memo=MEMO_SLOTS)}, rounds, repeats)
        off, on = statistics.median(got["off"]), statistics.median(got["on"])
        hits = mhfast.sample(NullMLM(T=T), T, chains=C, epochs=4, burn_in=0, seed=0, memo=MEMO_SLOTS).memo_hits
        lines.append(f"| {C} | {T} | {off:.3f} | {on:.3f} | {on / off:.2f} | {hits / (4 * T):.2f} | "
                     f"{rounds_text(got['off'])}; {rounds_text(got['on'])} |")
        print(lines[-1], flush=True)
    return lines


def rows_per_step(C: int, T: int, capture: str) -> tuple[float, float]:
    """(model rows per marginal step, novel rate) of 2 vs 6 epochs, the runs per_step_ms times."""
    model = NullMLM(T=T)
    got = {e: mhfast.sample(model, T, epochs=e, chains=C, burn_in=0, seed=0, capture=capture) for e in (2, 6)}
    return (got[6].model_rows - got[2].model_rows) / (4 * T), float(got[6].novel_rate.mean())


def antiberty_capture_case(T: int, chains: int, epochs: int) -> list[str]:
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


def compare_capture(sizes: list[str], rounds: int, repeats: int, antiberty: list[int] | None) -> list[str]:
    """The static-shape step against the default one: CPU ms per marginal step (each round the median of
    ``repeats`` runs), rows per step, and with ``antiberty`` the real model."""
    lines = [f"`capture='static'` against the default step (`none`), outside the model: bench_floor's NullMLM, one "
             f"thread, CPU ms per marginal step, {rounds} alternating rounds (each the median of {repeats} "
             f"runs). Machine: {results_md.machine_description()}.", "",
             "| chains | T | none (ms / step, each round) | static (ms / step, each round) | static / none | "
             "rows / step none, static | novel rate |", "|---|---|---|---|---|---|---|"]
    for size in sizes:
        C, T = (int(x) for x in size.split("x"))
        ms = alternating_cpu_ms(C, T, {"none": dict(capture="none"), "static": dict(capture="static")}, rounds,
                                repeats, swap_order=False)
        (r_none, novel), (r_static, _) = rows_per_step(C, T, "none"), rows_per_step(C, T, "static")
        a, b = statistics.median(ms["none"]), statistics.median(ms["static"])
        lines.append(f"| {C} | {T} | {a:.3f} ({rounds_text(ms['none'])}) | {b:.3f} ({rounds_text(ms['static'])}) | "
                     f"{b / a:.2f}x | {r_none:.0f}, {r_static:.0f} | {novel:.2f} |")
        print(lines[-1], flush=True)
    if antiberty is not None:
        torch.set_num_threads(2)
        lines += antiberty_capture_case(*antiberty)
    return lines + ["", "The static step forwards the rows of chains whose proposal kept their state too ("
                    "1 - novel rate of them) and spends a few ops putting their old results back; it exists to be "
                    "captured as a CUDA graph (no host sync, static shapes), where a step of few chains is bound by "
                    "launches, not rows. On CPU the default step is the faster one. Not measured: a GPU (none lent)."]


def op_calls_per_step(C: int, T: int) -> float:
    """Top-level op calls (torch and mhfast ops dispatched from Python) per marginal step, compiled backend:
    counted with torch.profiler in untimed runs of 4 and 2 epochs. Includes the driver's few per-step ops
    (best-state update, step statistics)."""
    model = NullMLM(T=T)
    kw = dict(chains=C, burn_in=0, seed=0, backend="compiled")
    counts = {}
    for e in (2, 4):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            mhfast.sample(model, T, epochs=e, **kw)
        counts[e] = sum(1 for ev in prof.profiler.function_events if ev.cpu_parent is None)
    return (counts[4] - counts[2]) / (2 * T)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3, help="runs per measurement (per_step_ms takes their median)")
    p.add_argument("--compare", choices=["memo", "capture"], default=None,
                   help="time one option's two values against each other instead of the floor table")
    p.add_argument("--rounds", type=int, default=None, help="--compare: alternating rounds (memo 5, capture 3)")
    p.add_argument("--sizes", nargs="+", default=["5x40", "500x40"], help="--compare capture: CHAINSxT")
    p.add_argument("--antiberty", type=int, nargs=3, default=None, metavar=("T", "CHAINS", "EPOCHS"),
                   help="--compare capture: also the real AntiBERTy from its warm start (e.g. 20 5 6)")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(1)
    if args.compare == "memo":
        print("\n".join(compare_memo(args.rounds or 5, args.repeats)))
        return
    if args.compare == "capture":
        text = "\n".join(compare_capture(args.sizes, args.rounds or 3, args.repeats, args.antiberty))
        print(text)
        if not args.no_write:
            results_md.write_section(CAPTURE_START, CAPTURE_END, "## The static-shape step on CPU "
                                     "(bench/bench_floor.py --compare capture)\n\n" + text)
        return
    rows = []
    for C, T in ((5, 10), (5, 20), (5, 40), (500, 40)):
        comp, calls, comp_cpu = per_step_ms(C, T, "compiled", args.repeats)
        ref, _, _ = per_step_ms(C, T, "reference", args.repeats)
        rows.append((C, T, comp, comp_cpu, ref, calls, op_calls_per_step(C, T)))
        print(rows[-1], flush=True)
    lines = [f"Single-site MH, raw energy, a near-zero-cost model (bench/bench_floor.py: NullMLM, V=32), 1 thread, "
             f"marginal ms per step (all chains move once), median of {args.repeats}. Machine: "
             f"{results_md.machine_description()}.", "",
             "| chains | T | compiled (ms / step) | compiled, CPU time (ms / step) | reference backend (ms / step) | "
             "model calls / step | op calls / step | goal |",
             "|---|---|---|---|---|---|---|---|"]
    for C, T, comp, comp_cpu, ref, calls, ops in rows:
        goal = "<= 0.25" if C == 5 else "<= 2.5"
        lines.append(f"| {C} | {T} | {comp:.3f} | {comp_cpu:.3f} | {ref:.3f} | {calls:.2f} | {ops:.1f} | {goal} |")
    lines += ["", goals_line(rows), "", NOTE]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        results_md.write_section(START, END, "## The sampler's own cost per step (bench/bench_floor.py)\n\n" + text)


if __name__ == "__main__":
    main()
