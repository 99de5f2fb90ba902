"""Each compiled op against its pure-PyTorch reference and against its memory-traffic floor.

The floor of an op is the time to move the bytes it must move (each input read once, each output
written once) at the device's measured copy bandwidth (a large device-to-device copy, bytes read
+ written). ``x floor`` = measured / floor: the issue's goals on an H100 are gather_energies at
>= 70% of the bandwidth (x floor <= 1.43) and propose <= 3x its read-once floor. The fused
single-site ops: mh_propose_site reads one cached row per moving chain (the floor of propose on
those rows); mh_commit_site_ (beta=None: every move accepted) reads and writes each model row once
and copies the [M, T] state. Timing: CUDA
events around each call after warm-up, median of the repeats, inputs rotated among 4 copies so
that repeated calls do not read the L2 cache. On CPU the same table is printed with the CPU's
memcpy bandwidth (a smoke run: numbers are not the point there).

Writes ``OUT/ops_floor.md`` (table) and ``OUT/ops_floor.json`` (all numbers).

Example:
    python3 bench/ops_floor.py --out /tmp/o --device cuda
    python3 bench/ops_floor.py --out /tmp/o --device cpu --quick
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "sweeps"))  # op_sweep_site
import mhfast.ops as ops  # noqa: E402
import mhfast.reference as reference  # noqa: E402
from op_sweep_site import bundled, commit_inputs  # noqa: E402

ROTATE = 4


def timer(device: str, fn: Callable[[int], object], reps: int) -> float:
    """Median seconds of fn(i) (i rotates the input copy)."""
    for i in range(3):
        fn(i % ROTATE)
    times = []
    for r in range(reps):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(r % ROTATE)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn(r % ROTATE)
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def copy_bandwidth(device: str, reps: int) -> float:
    """Bytes/s of a large copy, counting bytes read + written."""
    n = (1 << 28) if device == "cuda" else (1 << 24)
    src = torch.randn(n // 4, device=device)
    dst = torch.empty_like(src)
    t = timer(device, lambda i: dst.copy_(src), reps)
    return 2 * src.numel() * 4 / t


def gather_case(N: int, V: int, dtype: torch.dtype, device: str, sorted_seqs: bool):
    g = torch.Generator().manual_seed(N + V)
    logits = [torch.randn(N, V, generator=g).to(device=device, dtype=dtype) for _ in range(ROTATE)]
    targets = torch.randint(0, V, (N,), generator=g).to(device)
    # The sampler's pattern: one row per sequence (num_seqs = N), seq_index = arange.
    seq = torch.arange(N) if sorted_seqs else torch.randperm(N, generator=g)
    seq = seq.to(device)
    nbytes = N * V * logits[0].element_size() + 2 * N * 8 + 3 * N * 4
    comp = lambda i: ops.gather_energies(logits[i], targets, seq, N, validate=False)
    ref = lambda i: reference.gather_energies(logits[i], targets, seq, N)
    return comp, ref, nbytes


def propose_case(B: int, V: int, dtype: torch.dtype, top_p: float, device: str, eps: float = 0.0,
                 temperature: float = 1.0):
    """propose (eps = uniform_mix > 0: the mixture, the same bytes and more passes over the row). Inputs drawn on
    the device (as propose_site_case does): no 4 x 169 MB of CPU draws copied over per case."""
    g = torch.Generator(device=device).manual_seed(B + V)
    logits = [(torch.randn(B, V, generator=g, device=device) * 3).to(dtype) for _ in range(ROTATE)]
    current = torch.randint(0, V, (B,), generator=g, device=device)
    u = torch.rand(B, generator=g, device=device)
    nbytes = B * V * logits[0].element_size() + B * (8 + 4 + 8 + 4 + 4)
    comp = lambda i: ops.propose(logits[i], current, temperature, top_p, u, eps, validate=False)
    ref = lambda i: reference.propose(logits[i], current, temperature, top_p, u, eps)
    return comp, ref, nbytes


def propose_site_case(M: int, T: int, V: int, dtype: torch.dtype, top_p: float, device: str):
    """mh_propose_site with every chain moving (A = M): one cached row of V logits read per chain."""
    torch.manual_seed(M + V)
    caches = [(torch.randn(M, T, V, device=device) * 3).to(dtype) for _ in range(ROTATE)]
    tokens = torch.randint(0, V, (M, T), device=device)
    keys = torch.randint(-2**62, 2**62, (M,), device=device)
    act, pos = torch.arange(M, device=device), torch.randint(0, T, (M,), device=device)
    blocked = torch.zeros(V, dtype=torch.bool, device=device)
    blocked[:4] = True  # special tokens
    nbytes = M * V * caches[0].element_size() + V + M * (4 * 8 + 8 + 4 + 4 + 1)
    comp = lambda i: ops.mh_propose_site(caches[i], tokens, keys, act, pos, blocked, 1, 2, 1, 1.0, top_p,
                                         validate=False)
    ref = lambda i: reference.mh_propose_site(caches[i], tokens, keys, act, pos, blocked, 1, 2, 1, 1.0, top_p)
    return comp, ref, nbytes


def commit_site_case(M: int, T: int, D: int, dtype: torch.dtype, chunks: int, device: str):
    """mh_commit_site_ with every chain moving and accepting (beta=None): its T - 1 model rows of D
    outputs (in ``chunks`` sub-batches) copied into the cache, plus copies of the [M, T] state."""
    small = commit_inputs(M, T, 1, M, torch.float32, chunks, seed=M + T)
    args = [t.to(device) for t in small[:20]]
    torch.manual_seed(D)
    caches = [torch.randn(M, T, D, device=device).to(dtype) for _ in range(ROTATE)]
    R = args[18].shape[0]
    outputs = list(torch.randn(R, D, device=device).to(dtype).split([o.shape[0] for o in small[20]]))
    es = caches[0].element_size()
    nbytes = 2 * R * D * es + 2 * M * T * (8 + 4 + 4) + 2 * 2 * M * 4 + M * (2 * T * 4 + 8 * 8) + R * 16
    comp = lambda i: ops.mh_commit_site_(*bundled([*args[:6], caches[i], *args[7:20], outputs]), None, 0, 1, 2,
                                         validate=False)
    ref = lambda i: reference.mh_commit_site_(*bundled([*args[:6], caches[i], *args[7:20], outputs]), None, 0, 1, 2)
    return comp, ref, nbytes


def masked_copies_case(B: int, T: int, device: str):
    tokens = [torch.randint(5, 1000, (B, T), device=device) for _ in range(ROTATE)]
    seq = torch.arange(B, device=device).repeat_interleave(T)
    pos = torch.arange(T, device=device).repeat(B)
    nbytes = B * T * 8 + 2 * B * T * 8 + B * T * T * 8
    comp = lambda i: ops.masked_copies(tokens[i], seq, pos, 4, validate=False)
    ref = lambda i: reference.masked_copies(tokens[i], seq, pos, 4)
    return comp, ref, nbytes


def mh_accept_case(B: int, T: int, device: str):
    g = torch.Generator().manual_seed(B)
    tokens = [torch.randint(5, 1000, (B, T), generator=g).to(device) for _ in range(ROTATE)]
    pos = torch.randint(0, T, (B,), generator=g).to(device)
    prop = torch.randint(5, 1000, (B,), generator=g).to(device)
    f = [torch.randn(B, generator=g).to(device) for _ in range(4)]
    beta, u = torch.ones(B, device=device), torch.rand(B, generator=g).to(device)
    nbytes = B * (8 + 8 + 6 * 4 + 1 + 8)  # per chain: positions, proposed, 6 floats, accepted, one token
    comp = lambda i: ops.mh_accept_(tokens[i], pos, prop, *f, beta, u, validate=False)
    ref = lambda i: reference.mh_accept_(tokens[i], pos, prop, *f, beta, u)
    return comp, ref, nbytes


def cases(device: str, quick: bool) -> list[tuple[str, str, Callable]]:
    if quick:
        return [("masked_copies", "B=8 T=16", lambda: masked_copies_case(8, 16, device)),
                ("gather_energies", "N=64 V=1000 f32", lambda: gather_case(64, 1000, torch.float32, device, True)),
                ("propose", "B=16 V=1000 f32 top_p=0.9", lambda: propose_case(16, 1000, torch.float32, 0.9, device)),
                ("mh_accept_", "B=64 T=16", lambda: mh_accept_case(64, 16, device)),
                ("propose", "B=16 V=1000 f32 top_p=0.9 uniform_mix=0.01",
                 lambda: propose_case(16, 1000, torch.float32, 0.9, device, 0.01)),
                ("mh_propose_site", "M=16 T=4 V=1000 f32 top_p=0.9",
                 lambda: propose_site_case(16, 4, 1000, torch.float32, 0.9, device)),
                ("mh_commit_site_", "M=16 T=8 D=1000 f32 chunks=3",
                 lambda: commit_site_case(16, 8, 1000, torch.float32, 3, device))]
    out = [("masked_copies", "B=320 T=64", lambda: masked_copies_case(320, 64, device))]
    for N, V in ((16384, 32000), (4096, 50000), (16384, 30522)):
        for dt in (torch.float32, torch.bfloat16):
            name = str(dt).replace("torch.", "")
            out.append(("gather_energies", f"N={N} V={V} {name} sorted",
                        lambda N=N, V=V, dt=dt: gather_case(N, V, dt, device, True)))
    out.append(("gather_energies", "N=16384 V=32000 float32 unsorted",
                lambda: gather_case(16384, 32000, torch.float32, device, False)))
    for V in (8192, 12000, 32000, 50000, 128000, 250000):
        for top_p in (1.0, 0.9):
            for dt in (torch.float32, torch.bfloat16):
                B = 1320 if V <= 50000 else 264
                name = str(dt).replace("torch.", "")
                out.append(("propose", f"B={B} V={V} {name} top_p={top_p}",
                            lambda B=B, V=V, dt=dt, top_p=top_p: propose_case(B, V, dt, top_p, device)))
    for V in (32000, 250000):
        B = 1320 if V <= 50000 else 264
        out.append(("propose", f"B={B} V={V} float32 top_p=0.9 uniform_mix=0.01",
                    lambda B=B, V=V: propose_case(B, V, torch.float32, 0.9, device, 0.01)))
    out.append(("mh_accept_", "B=320 T=64", lambda: mh_accept_case(320, 64, device)))
    for dt in (torch.float32, torch.bfloat16):  # the sampler's single-site step: 1320 chains, V = 32000
        for top_p in (1.0, 0.9):
            name = str(dt).replace("torch.", "")
            out.append(("mh_propose_site", f"M=1320 T=4 V=32000 {name} top_p={top_p}",
                        lambda dt=dt, top_p=top_p: propose_site_case(1320, 4, 32000, dt, top_p, device)))
        out.append(("mh_commit_site_", f"M=320 T=16 D=32000 {name} chunks=4",
                    lambda dt=dt: commit_site_case(320, 16, 32000, dt, 4, device)))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--quick", action="store_true", help="tiny sizes, few repeats (smoke run)")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    reps = 5 if args.quick else 30
    bw = copy_bandwidth(args.device, reps)
    rows = []
    for op, size, make in cases(args.device, args.quick):
        comp, ref, nbytes = make()
        t_c = timer(args.device, comp, reps)
        t_r = timer(args.device, ref, max(3, reps // 5))
        floor = nbytes / bw
        rows.append(dict(op=op, size=size, compiled_s=t_c, reference_s=t_r, bytes=nbytes, floor_s=floor,
                         x_floor=t_c / floor, bandwidth_fraction=floor / t_c, speedup=t_r / t_c))
        print(f"{op:16s} {size:36s} {t_c * 1e6:10.1f} us  ref {t_r * 1e6:10.1f} us  "
              f"x{t_r / t_c:6.1f}  floor {floor * 1e6:8.1f} us  x_floor {t_c / floor:5.2f}", flush=True)
        del comp, ref
    lines = [f"# ops vs reference and memory floor ({args.device}, copy bandwidth {bw / 1e9:.0f} GB/s)", "",
             "| op | size | compiled | reference | ref/compiled | floor | compiled/floor | % of bandwidth |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['op']} | {r['size']} | {r['compiled_s'] * 1e6:.1f} us | {r['reference_s'] * 1e6:.1f} us "
                     f"| {r['speedup']:.1f} | {r['floor_s'] * 1e6:.1f} us | {r['x_floor']:.2f} "
                     f"| {100 * r['bandwidth_fraction']:.0f}% |")
    (args.out / "ops_floor.md").write_text("\n".join(lines) + "\n")
    (args.out / "ops_floor.json").write_text(json.dumps(dict(device=args.device, copy_bytes_per_s=bw, rows=rows),
                                                        indent=1))
    print(f"wrote {args.out / 'ops_floor.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
