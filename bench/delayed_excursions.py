"""Why a small first stage loses ESS on AntiBERTy infilling: the chains' excursions away from the parent (issue 34).

bench/bench_delayed.py's ``antiberty-infill`` case with the issue's 5 chains and 100 epochs, under today's default
(``mh``) and ``influence:1/2/3`` (its settings ``delayed-i1``..``-i3``), the same seeds and so the same chains as bench_delayed's runs. For each run, over
the post-burn-in traced sweeps of the 5 chains: the share of draws whose E_local is above the parent's + 3 nats,
the excursions (maximal runs of such draws in one chain), their mean and longest length in sweeps, ArviZ's bulk-ESS
and split-R-hat of E_local, and each chain's mean E_local. A first stage that blocks the way back to the parent
shows as longer excursions at about the same count.

    python3 bench/delayed_excursions.py --seeds 0 2 1 3        # ~4 x 4 runs of 1-2 min of one core (AMD EPYC)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mhfast  # noqa: E402
from bench_delayed import SETTINGS, case_inputs  # noqa: E402

COMPARED = ("mh", "delayed-i1", "delayed-i2", "delayed-i3")  #: bench_delayed's settings: the default, influence:1-3


def excursions(high: torch.Tensor) -> list[int]:
    """The lengths of the maximal runs of True in each row of ``high`` (Bool[C, D]), chain after chain.

    Example:
        >>> excursions(torch.tensor([[True, True, False, True], [False, False, False, True]]))
        [2, 1, 1]
    """
    runs = []
    for row in high.tolist():
        n = 0
        for h in row + [False]:
            if h:
                n += 1
            elif n:
                runs.append(n)
                n = 0
    return runs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    ap.add_argument("--above", type=float, default=3.0, help="nats above the parent's E_local that count as away")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, inputs, options, _ = case_inputs("antiberty-infill", 100)
    options = {**options, "chains": 5}
    parent = float(mhfast.energy(model, inputs["init"], energy="local").e_local[0])  # (the lowest E_local)
    for seed in args.seeds:
        for name in COMPARED:
            r = mhfast.sample(model, **inputs, **options, **SETTINGS[name], seed=seed)
            post = r.traces[0, :, r.trace_epochs >= r.burn_in, r.trace_names.index("e_local")]  # [C, D]
            high = post > parent + args.above
            runs = excursions(high)
            d = r.diagnostics[0]
            print(f"seed {seed} {name}: draws {post.numel()} away {float(high.float().mean()):.3f} excursions "
                  f"{len(runs)} mean length {sum(runs) / max(1, len(runs)):.1f} longest {max(runs, default=0)} "
                  f"ESS {float(d['ess_bulk']['e_local']):.1f} R-hat {float(d['rhat']['e_local']):.3f} chain means "
                  f"{[round(float(v), 2) for v in post.mean(1)]}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
