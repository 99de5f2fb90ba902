"""The sampler's own cost per MH step, outside the model: a near-zero-cost model, so only mhfast is timed.

``NullMLM`` returns a fixed random logit row per position (no context, ~10 us per call), so a step's
time is the sampler's: proposing, building X' rows, gathering energies, accepting, the RNG and the
Python around them. Marginal time per step: (t(6 epochs) - t(2 epochs)) / (4 T), each the median of
``--repeats`` alternating runs, one torch thread, compiled ops vs the pure-PyTorch reference backend
(which also runs the RNG hash as ~50 small torch ops, as mhfast did before the counter_uniforms op).
Goals (issue 14): <= 0.25 ms per step for 5 chains, <= 2.5 ms for 500 chains at T=40. Writes its section
of bench/RESULTS.md.

    python3 bench/bench_floor.py
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
# Written under the table (edit it with the numbers of a new measurement).
NOTE = ('op calls / step: top-level torch/mhfast op calls per step of the compiled run (torch.profiler, untimed '
        "runs), the driver's few per-step ops included. A step's propose phase is one op (mh_propose_site), X' and "
        'its masked rows another (mh_site_rows), its accept + commit phase a third (mh_commit_site_, which also '
        "writes the accepted rows into the cache and takes the model's sub-batch outputs without concatenation); "
        "around the model call, its energy terms (the runner's output check, gather_energies, the term writes, the "
        'float64 energy sums that keep energies bit-identical) are still ~25 calls, plus ~8 per extra model sub-'
        'batch.  Before the fused ops (commit 91da378): 107 op calls per step for 5 chains and 197 for 500 chains at '
        'T=40 (57 and 133 after them, 47 and 123 since mh_site_rows); 0.28-0.31 ms and 3.7 ms per step on a quiet '
        'machine. Same-conditions A/B on this machine while other jobs kept its load average at ~3 (the two versions '
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


def per_step_ms(C: int, T: int, backend: str, repeats: int, capture: str = "none") -> tuple[float, float, float]:
    """(wall ms, model calls, CPU ms) per marginal step; CPU time (time.process_time) is less sensitive to other
    jobs on the machine than wall time (it still grows with contention for caches and memory bandwidth)."""
    model = NullMLM(T=T)
    kw = dict(chains=C, burn_in=0, seed=0, backend=backend, capture=capture)
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


def alternating_cpu_ms(C: int, T: int, variants: dict, restore, rounds: int, repeats: int,
                       swap_order: bool = False) -> dict[str, list[float]]:
    """A/B (or more) in one process: per round, each variant installed in turn (``variants``: name -> a function
    that installs it) and its CPU ms per marginal step measured (:func:`per_step_ms`, compiled backend);
    ``swap_order``: every other round in reverse order. ``restore()`` runs at the end, whatever happens.
    Returns name -> the CPU ms of each round.

    >>> marks = []
    >>> got = alternating_cpu_ms(5, 4, {"a": lambda: marks.append("a"), "b": lambda: marks.append("b")},
    ...                          lambda: marks.append("restored"), rounds=2, repeats=1, swap_order=True)
    >>> marks, sorted(got), len(got["a"])
    (['a', 'b', 'b', 'a', 'restored'], ['a', 'b'], 2)
    """
    got: dict[str, list[float]] = {name: [] for name in variants}
    try:
        for rnd in range(rounds):
            order = list(variants) if not (swap_order and rnd % 2) else list(variants)[::-1]
            for name in order:
                variants[name]()
                got[name].append(per_step_ms(C, T, "compiled", repeats)[2])
    finally:
        restore()
    return got


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
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(1)
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
