"""propose and mh_propose_site of two builds of mhfast, timed in one session on one GPU.

Each run times the mhfast that its own checkout holds (``bench/ops_floor.py``'s sizes and timer: CUDA
events, median of 30 calls, inputs rotated among 4 copies) and appends one JSON line,
labelled, to ``--json``. Run it alternately in two checkouts (A B A B: drift in clocks or temperature falls on both),
then ``--render`` prints each case's median per label and the ratio of the first label to the second.

Example (the GPU session of 2026-11-26; ``/tmp/old`` a copy of the tree with the previous propose kernel,
built with ``python setup.py build_ext --inplace``):
    for i in 1 2; do
      python bench/propose_ab.py --label new --json ab.jsonl
      python /tmp/old/bench/propose_ab.py --label old --json ab.jsonl
    done
    python bench/propose_ab.py --render ab.jsonl --ratio old new
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ops_floor  # noqa: E402  (puts this checkout's mhfast first on sys.path)


def cases(device: str, quick: bool) -> list[tuple[str, object]]:
    f32, bf16 = torch.float32, torch.bfloat16
    if quick:
        return [("propose B=16 V=1000 float32 top_p=0.9",
                 lambda: ops_floor.propose_case(16, 1000, f32, 0.9, device)[0]),
                ("propose B=16 V=1000 float32 top_p=0.9 T=0.7",
                 lambda: ops_floor.propose_case(16, 1000, f32, 0.9, device, temperature=0.7)[0])]
    out = []
    for B, V in ((1320, 8192), (1320, 32000), (264, 250000)):
        for top_p in (1.0, 0.9):
            for dt in ((f32, bf16) if V == 32000 else (f32,)):
                name = str(dt).replace("torch.", "")
                out.append((f"propose B={B} V={V} {name} top_p={top_p}",
                            lambda B=B, V=V, dt=dt, top_p=top_p: ops_floor.propose_case(B, V, dt, top_p, device)[0]))
    out.append(("propose B=1320 V=32000 float32 top_p=0.9 T=0.7",
                lambda: ops_floor.propose_case(1320, 32000, f32, 0.9, device, temperature=0.7)[0]))
    out.append(("propose B=1320 V=32000 float32 top_p=0.9 uniform_mix=0.01",
                lambda: ops_floor.propose_case(1320, 32000, f32, 0.9, device, 0.01)[0]))
    for top_p in (1.0, 0.9):
        out.append((f"mh_propose_site M=1320 T=4 V=32000 float32 top_p={top_p}",
                    lambda top_p=top_p: ops_floor.propose_site_case(1320, 4, 32000, f32, top_p, device)[0]))
    return out


def render(path: Path, first: str, second: str) -> str:
    runs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    times: dict[str, dict[str, list[float]]] = {}
    for run in runs:
        for case, secs in run["rows"].items():
            times.setdefault(case, {}).setdefault(run["label"], []).append(secs)
    n = {lab: sum(1 for r in runs if r["label"] == lab) for lab in (first, second)}
    lines = [f"# {first} vs {second} ({runs[0]['device']}; median over {n[first]} / {n[second]} alternating runs, "
             f"each the median of {runs[0]['reps']} calls)", "",
             f"| case | {first} | {second} | {first} / {second} |", "|---|---|---|---|"]
    for case, by in times.items():
        if first in by and second in by:
            a, b = statistics.median(by[first]), statistics.median(by[second])
            lines.append(f"| {case} | {a * 1e6:.1f} us | {b * 1e6:.1f} us | {a / b:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--label", help="this build's name in the JSON line")
    p.add_argument("--json", type=Path, help="append this run's medians here")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--quick", action="store_true", help="tiny sizes, few repeats (smoke run)")
    p.add_argument("--render", type=Path, help="print the table of a JSON-lines file instead of timing")
    p.add_argument("--ratio", nargs=2, metavar=("FIRST", "SECOND"), default=("old", "new"))
    args = p.parse_args(argv)
    if args.render is not None:
        print(render(args.render, *args.ratio), end="")
        return 0
    if args.label is None or args.json is None:
        p.error("--label and --json are needed to time (or --render FILE)")
    reps = 5 if args.quick else 30
    rows = {}
    for name, make in cases(args.device, args.quick):
        fn = make()
        rows[name] = ops_floor.timer(args.device, fn, reps)
        print(f"{args.label:6s} {name:60s} {rows[name] * 1e6:10.1f} us", flush=True)
        del fn
    with args.json.open("a") as f:
        f.write(json.dumps(dict(label=args.label, device=torch.cuda.get_device_name(0) if args.device == "cuda"
                                else "cpu", reps=reps, rows=rows)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
