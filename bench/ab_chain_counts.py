"""A/B in one process: the single-site step with and without the per-chain proposal counts.

``SampleResult.chain_proposals/_accepted/_novel`` come from ``ChainState.counts`` (mhfast/sampler/state.py:
``ChainCounts``), which a step feeds with references to tensors it already has and which reduces them once per
epoch. This measures what that costs the sampler's own step: bench/bench_floor.py's NullMLM (the model costs
~nothing), CPU time per marginal step, the run with counts and a run whose state has ``counts=None`` alternating
(the order swapped every round), median of the rounds. Prints a Markdown table (RESULTS.md quotes it).

    python3 bench/ab_chain_counts.py [--rounds 4]
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_floor import alternating_cpu_ms  # noqa: E402
import results_md  # noqa: E402

from mhfast.sampler import state as state_module  # noqa: E402

WITH_COUNTS = state_module.ChainState.create.__func__


def _without_counts(cls, *args, **kwargs):
    return dataclasses.replace(WITH_COUNTS(cls, *args, **kwargs), counts=None)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3, help="runs per measurement (bench_floor.per_step_ms)")
    args = p.parse_args()
    torch.set_num_threads(1)
    print(results_md.machine_description())
    print("| chains | T | without counts (CPU ms / step) | with counts (CPU ms / step) | difference (us / step) "
          "| rounds (without; with) |")
    print("|---|---|---|---|---|---|")
    use = lambda create: lambda: setattr(state_module.ChainState, "create", classmethod(create))  # noqa: E731
    for C, T in [(5, 10), (5, 40), (500, 40)]:
        times = alternating_cpu_ms(C, T, {"off": use(_without_counts), "on": use(WITH_COUNTS)}, use(WITH_COUNTS),
                                   args.rounds, args.repeats, swap_order=True)
        off, on = statistics.median(times["off"]), statistics.median(times["on"])
        print(f"| {C} | {T} | {off:.3f} | {on:.3f} | {1e3 * (on - off):+.1f} | "
              f"{', '.join(f'{x:.3f}' for x in times['off'])}; {', '.join(f'{x:.3f}' for x in times['on'])} |",
              flush=True)


if __name__ == "__main__":
    main()
