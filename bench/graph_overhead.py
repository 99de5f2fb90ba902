"""Where a captured sweep's time goes: aten calls inside the static step's body, which a CUDA graph replays as one
launch, and outside it, which run one by one (issue 38: tempering with capture="cuda-graph").

On an H200 (bench/CUDA_NOTES.md, "Fifth run") a plain sweep of Sapiens at T=8 took 37.3 ms eager and 6.6 ms with
its steps as CUDA graphs, a tempered one (8 rungs) 49.4 and 12.3 ms. What is left of a captured sweep is the graphs'
replays and the calls around them. This script counts those calls: ``mhfast.sample(..., capture="static")`` on the
CPU (the graph's body run eagerly: the same calls) under a ``TorchDispatchMode`` that counts every aten call, split by
whether it ran inside ``graphed.StaticSiteSteps._body`` and, for those outside, by the two innermost mhfast
functions that made it. Views are counted too. Some outside calls are on host tensors (tempering keeps its ladder,
labels and permutations on the CPU): they cost a dispatch, not a kernel launch; ``--device cuda`` (capture
cuda-graph) tells them apart, which a CPU run cannot.

    python3 bench/graph_overhead.py                      # Sapiens T=8, 4 chains, plain MH and tempering=8
    python3 bench/graph_overhead.py --device cuda        # on a GPU: the outside calls that launch kernels
    python3 bench/graph_overhead.py --sweeps 3 --top 5   # a smoke run (seconds)
"""
from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mhfast  # noqa: E402
from bench_tempering import dispersed_case  # noqa: E402
from mhfast.sampler import graphed  # noqa: E402


class CallCounter(TorchDispatchMode):
    """Counts aten calls: ``inside`` those made while :attr:`in_body`, ``outside`` the others by caller."""

    def __init__(self) -> None:
        super().__init__()
        self.in_body = False
        self.inside = 0
        self.outside: collections.Counter[str] = collections.Counter()
        self.on_device = 0  # outside calls with a tensor off the CPU (a kernel launch on a GPU; 0 on the CPU)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.in_body:
            self.inside += 1
        else:
            self.outside[_callers(sys._getframe(1))] += 1
            tensors = [a for a in (*args, *(kwargs or {}).values()) if isinstance(a, torch.Tensor)]
            self.on_device += any(t.device.type != "cpu" for t in tensors)
        return func(*args, **(kwargs or {}))


def _callers(frame, depth: int = 2) -> str:
    """The ``depth`` innermost mhfast functions on the stack, innermost first (``file:function < ...``)."""
    names: list[str] = []
    while frame is not None and len(names) < depth:
        path = frame.f_code.co_filename
        if "/mhfast/" in path:
            names.append(f"{path.split('/mhfast/')[1]}:{frame.f_code.co_name}")
        frame = frame.f_back
    return " < ".join(names) or "(outside mhfast)"


def count(case: dict, sweeps: int, burn_in: int, tempering: int | None, capture: str) -> CallCounter:
    """One run's calls (after a short run that warms up the same shapes, uncounted). With capture cuda-graph the
    body's calls are those of the warm-up steps and captures only (a replay makes none)."""
    counter = CallCounter()
    body = graphed.StaticSiteSteps._body

    def counted_body(self, *args, **kwargs):
        counter.in_body = True
        try:
            return body(self, *args, **kwargs)
        finally:
            counter.in_body = False

    graphed.StaticSiteSteps._body = counted_body
    try:
        kw = dict(**case["inputs"], **case["options"], seed=0, tempering=tempering, capture=capture)
        mhfast.sample(case["model"], **kw, epochs=2, burn_in=1)
        with counter:
            mhfast.sample(case["model"], **kw, epochs=sweeps, burn_in=burn_in)
    finally:
        graphed.StaticSiteSteps._body = body
    return counter


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweeps", type=int, default=40)
    ap.add_argument("--burn-in", type=int, default=None, help="default: a quarter of the sweeps")
    ap.add_argument("--length", type=int, default=8)
    ap.add_argument("--rungs", type=int, default=8)
    ap.add_argument("--top", type=int, default=12, help="callers listed per sampler")
    ap.add_argument("--device", default="cpu", help="cpu: capture static; cuda: capture cuda-graph, and the outside "
                    "calls split into those on the device (launches) and on the host")
    args = ap.parse_args()
    capture = "cuda-graph" if args.device.startswith("cuda") else "static"
    burn = args.sweeps // 4 if args.burn_in is None else args.burn_in
    torch.set_num_threads(1)
    case = dispersed_case("sapiens", args.length, 4, 0.5, args.device)
    print(f"{case['what']}; {args.sweeps} sweeps (burn-in {burn}), capture {capture} on {args.device}; aten calls "
          f"per sweep, whole run (setup, burn-in and diagnostics included) over sweeps\n")
    print("| sampler | inside the step's body (one graph replay per step on a GPU) | outside | outside, on the device |")
    print("|---|---|---|---|")
    runs = {}
    for t in (None, args.rungs):
        c = runs[t] = count(case, args.sweeps, burn, t, capture)
        print(f"| {f'tempering={t}' if t else 'plain MH'} | {c.inside / args.sweeps:.0f} | "
              f"{sum(c.outside.values()) / args.sweeps:.0f} | "
              f"{c.on_device / args.sweeps:.0f}{' (CPU run: all on the host)' if args.device == 'cpu' else ''} |")
    for t, c in runs.items():
        print(f"\nOutside the body, {f'tempering={t}' if t else 'plain MH'}, by caller (per sweep):\n")
        print("| caller | calls per sweep |\n|---|---|")
        for name, n in c.outside.most_common(args.top):
            print(f"| {name} | {n / args.sweeps:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
