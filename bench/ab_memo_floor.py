"""What the proposal memo costs outside the model: bench_floor's per-step CPU time with the memo off and on.

bench/bench_floor.py's near-zero-cost model (so only the sampler is timed), single-site MH with default options but
``memo``: ``memo=0`` (off) or ``memo=8`` (on: what the default ``memo="auto"`` gives there), the two alternating in
one process (:func:`bench_floor.alternating_cpu_ms`, order swapped every other round), CPU ms per marginal step,
median of the rounds; plus the memo's hits per step there. The issue-14 goals (<= 0.25 ms for 5 chains, <= 2.5 ms
for 500 chains at T=40) apply to the default, i.e. to the "on" column since the memo's two ops exist.

    python3 bench/ab_memo_floor.py --rounds 5
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_floor  # noqa: E402
import results_md  # noqa: E402

import functools  # noqa: E402

import mhfast  # noqa: E402

SLOTS = 8
REAL_SAMPLE = mhfast.sample


def hits_per_step(C: int, T: int) -> float:
    r = REAL_SAMPLE(bench_floor.NullMLM(T=T), T, chains=C, epochs=4, burn_in=0, seed=0, memo=SLOTS)
    return r.memo_hits / (4 * T)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    import torch
    torch.set_num_threads(1)
    # bench_floor calls mhfast.sample with default options: the variants pin memo to 0 and to 8
    variants = {"off": lambda: setattr(mhfast, "sample", functools.partial(REAL_SAMPLE, memo=0)),
                "on": lambda: setattr(mhfast, "sample", functools.partial(REAL_SAMPLE, memo=SLOTS))}
    print(results_md.machine_description())
    print("| chains | T | memo off (CPU ms / step) | memo on | on / off | memo hits / step | rounds (off; on) |")
    print("|---|---|---|---|---|---|---|")
    for C, T in ((5, 10), (5, 40), (500, 40)):
        got = bench_floor.alternating_cpu_ms(C, T, variants, lambda: setattr(mhfast, "sample", REAL_SAMPLE),
                                             args.rounds, args.repeats, swap_order=True)
        off, on = statistics.median(got["off"]), statistics.median(got["on"])
        each = lambda xs: ", ".join(f"{x:.3f}" for x in xs)  # noqa: E731
        print(f"| {C} | {T} | {off:.3f} | {on:.3f} | {on / off:.2f} | {hits_per_step(C, T):.2f} | "
              f"{each(got['off'])}; {each(got['on'])} |", flush=True)


if __name__ == "__main__":
    main()
