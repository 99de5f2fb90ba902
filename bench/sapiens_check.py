"""The real-model sampling check of scripts/gpu_check.sh: Sapiens (heavy chain, sapiens==1.0.5) on a device, or
AntiBERTy (``--model antiberty``: antiberty==0.1.3, whose weights reach a GPU machine in parts, scripts/carry_parts.py).

1. masked logits on the device equal the CPU's (fp32; max |difference| printed, at most --tolerance);
2. mhfast.sample on the device with forward="fast" and forward="full" gives the same chains (fp32);
3. the sampler's steady-state speed from a real parent (the mouse 4D5 heavy chain, trastuzumab's parent; Hu-mAb
   25 pairs of Marks et al. 2021, from github.com/Merck/BioPhi-2021-publication), every residue free, C chains:
   proposals/s and model rows/s of the second epoch, fp32 and bf16.

Prints a markdown table (gpu_check folds it into its summary); exits 1 when check 1 or 2 fails.

    python3 bench/sapiens_check.py --device cuda
    python3 bench/sapiens_check.py --device cuda --model antiberty
    python3 bench/sapiens_check.py --device cpu --quick        # a 24-residue fragment, 2 chains
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mhfast  # noqa: E402
from bench_mixmatch import load_model  # noqa: E402  (the benchmarks' model names: "sapiens-h", "antiberty")

PARENT = "QVQLQQSGPELVKPGASLKLSCTASGFNIKDTYIHWVKQRPEQGLEWIGRIYPTNGYTRYDPKFQDKATITADTSSNTAYLQVSRLTSEDTAVYYCSRWGGDGFYAMDYWGQGASVTVSS"


def logits_difference(lm_dev, lm_cpu, seq: str) -> float:
    """max |masked logits on the device - on the CPU| over every residue of ``seq`` masked in turn."""
    ids = lm_cpu.encode(seq)
    T = len(seq)
    rows = ids.repeat(T, 1)
    pos = torch.arange(1, T + 1)
    rows[torch.arange(T), pos] = lm_cpu.mask_id
    return float((lm_dev.masked_logits(rows, pos).float().cpu() - lm_cpu.masked_logits(rows, pos)).abs().max())


def timed_epoch(lm, init: torch.Tensor, chains: int, dtype: torch.dtype | None, forward: str = "fast") -> tuple:
    """(result, seconds and rows of the second of 2 epochs) of MH from ``init`` with every residue free."""
    marks = []

    def progress(epoch: int, stats: dict) -> None:
        if lm.device.type == "cuda":
            torch.cuda.synchronize()
        marks.append((time.perf_counter(), stats["model_rows"]))
    r = mhfast.sample(lm, init=init.to(lm.device), chains=chains, epochs=2, burn_in=0, seed=0, energy="local",
                      forward=forward, dtype=dtype, progress=progress)
    (t1, r1), (t2, r2) = marks[-2:]
    return r, t2 - t1, r2 - r1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--model", choices=("sapiens-h", "antiberty"), default="sapiens-h")
    p.add_argument("--chains", type=int, nargs="+", default=[5, 64])
    p.add_argument("--tolerance", type=float, default=1e-3)
    p.add_argument("--quick", action="store_true", help="a 24-residue fragment, 2 chains, fp32 only")
    args = p.parse_args(argv)
    seq = PARENT[:24] if args.quick else PARENT
    chains = [2] if args.quick else args.chains
    lm, cpu = load_model(args.model, args.device), load_model(args.model, "cpu")
    diff = logits_difference(lm, cpu, seq)
    init = cpu.encode(seq)[None]
    fast, _, _ = timed_epoch(lm, init, 2, None, "fast")
    full, _, _ = timed_epoch(lm, init, 2, None, "full")
    same = torch.equal(fast.tokens, full.tokens)
    name = "AntiBERTy" if args.model == "antiberty" else "Sapiens heavy chain"
    lines = [f"{name} on {args.device}: masked logits vs CPU max |diff| {diff:.2e} "
             f"({'ok' if diff <= args.tolerance else 'FAILED'}, tolerance {args.tolerance:g}); fast and full forwards: "
             f"{'the same chains' if same else 'DIFFERENT chains (FAILED)'}.", "",
             "| T | chains | dtype | proposals/s | model rows/s | rows / proposal | acceptance |", "|---|---|---|---|---|---|---|"]
    for c in chains:
        for dtype in ([None] if args.quick else [None, torch.bfloat16]):
            r, seconds, rows = timed_epoch(lm, init, c, dtype)
            props = c * len(seq)
            lines.append(f"| {len(seq)} | {c} | {'bf16' if dtype else 'fp32'} | {props / seconds:.1f} | "
                         f"{rows / seconds:.0f} | {rows / props:.1f} | {float(r.acceptance_rate[-1]):.2f} |")
    print("\n".join(lines), flush=True)
    return 0 if diff <= args.tolerance and same else 1


if __name__ == "__main__":
    sys.exit(main())
