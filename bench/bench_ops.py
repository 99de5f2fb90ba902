"""Benchmark of mhfast's compiled ops against their pure-PyTorch references.

Times each op (``mhfast.ops``, ``validate=False``, as the sampler calls them) and its reference
(``mhfast.reference``, with and without its argument checks, which sync with the GPU) with
``torch.utils.benchmark``, at the paper's sizes: B up to 320 sequences (64 sentences x 5 chains),
T in {16, 32, 64}, V in {25 (AntiBERTy-like), 32000 (BERT/RoBERTa-like), 50000}, N = B*T masked
rows; plus one MH step's worth of the four ops together (masked_copies of T-1 rows per chain,
gather_energies over them, propose on B rows, mh_accept_ on B chains; the model call in between
is not part of it). CPU always, CUDA when available. Reports reference / compiled time ratios
and, for gather_energies on CUDA, the achieved memory bandwidth against the GPU's peak.

Results go to bench/RESULTS.md between ``<!-- bench_ops:start -->`` and ``<!-- bench_ops:end -->``
(the rest of the file is left alone).

Example:
    python3 bench/bench_ops.py              # full run, updates bench/RESULTS.md
    python3 bench/bench_ops.py --quick --no-write   # smoke run on tiny sizes
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.utils.benchmark as benchmark

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results_md  # noqa: E402

import mhfast.ops as ops  # noqa: E402
import mhfast.reference as reference  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
START, END = "<!-- bench_ops:start -->", "<!-- bench_ops:end -->"


@dataclass
class Case:
    """One op at one size: the callables to time and the bytes the op must move (for GB/s)."""

    op: str
    size: str
    compiled: Callable[[], object]
    reference: Callable[[], object]
    bytes_moved: int | None = None


@contextlib.contextmanager
def reference_without_checks():
    """Runs mhfast.reference with its argument checks stubbed out (they sync on CUDA)."""
    saved = reference._validate
    reference._validate = types.SimpleNamespace(**{name: (lambda *a, **k: None) for name in
                                                   ("masked_copies", "gather_energies", "propose", "mh_accept_")})
    try:
        yield
    finally:
        reference._validate = saved


def gen(device: str, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


# ------------------------------------------------------------------------------------------------
# Inputs of each op (built once per case, outside the timed region).
# ------------------------------------------------------------------------------------------------


def masked_copies_case(B: int, T: int, device: str) -> Case:
    g = gen(device, 0)
    tokens = torch.randint(0, 1000, (B, T), generator=g, device=device)
    seq = torch.arange(B, device=device).repeat_interleave(T)
    pos = torch.arange(T, device=device).repeat(B)
    return Case("masked_copies", f"B={B} T={T} N={B * T}",
                lambda: ops.masked_copies(tokens, seq, pos, 4, validate=False),
                lambda: reference.masked_copies(tokens, seq, pos, 4),
                bytes_moved=2 * B * T * T * 8)


def gather_energies_case(B: int, T: int, V: int, dtype: torch.dtype, device: str) -> Case:
    g = gen(device, 1)
    N = B * T
    logits = torch.randn(N, V, generator=g, device=device).to(dtype)
    targets = torch.randint(0, V, (N,), generator=g, device=device)
    seq = torch.arange(B, device=device).repeat_interleave(T)
    name = str(dtype).replace("torch.", "")
    return Case("gather_energies", f"B={B} T={T} V={V} {name}",
                lambda: ops.gather_energies(logits, targets, seq, B, validate=False),
                lambda: reference.gather_energies(logits, targets, seq, B),
                bytes_moved=logits.numel() * logits.element_size())


def propose_case(B: int, V: int, top_p: float, device: str, dtype: torch.dtype = torch.float32) -> Case:
    g = gen(device, 2)
    logits = (torch.randn(B, V, generator=g, device=device) * 3).to(dtype)
    current = torch.randint(0, V, (B,), generator=g, device=device)
    u = torch.rand(B, generator=g, device=device)
    return Case("propose", f"B={B} V={V} top_p={top_p}",
                lambda: ops.propose(logits, current, 1.0, top_p, u, validate=False),
                lambda: reference.propose(logits, current, 1.0, top_p, u),
                bytes_moved=logits.numel() * logits.element_size())


def mh_accept_inputs(B: int, T: int, K: int, device: str, seed: int = 3) -> dict:
    g = gen(device, seed)
    shape = (B,) if K == 1 else (B, K)
    positions = torch.randint(0, T, shape, generator=g, device=device)
    if K > 1:
        positions[:, -1] = -1  # an unused slot per chain
    f = lambda: torch.randn(B, generator=g, device=device)
    return dict(tokens=torch.randint(0, 1000, (B, T), generator=g, device=device), positions=positions,
                proposed=torch.randint(0, 1000, shape, generator=g, device=device), energy=f(),
                energy_proposed=f(), logq_forward=f(), logq_reverse=f(),
                beta=torch.ones(B, device=device), uniforms=torch.rand(B, generator=g, device=device))


def mh_accept_case(B: int, T: int, K: int, device: str) -> Case:
    a = mh_accept_inputs(B, T, K, device)
    return Case("mh_accept_", f"B={B} T={T} K={K}", lambda: ops.mh_accept_(**a, validate=False),
                lambda: reference.mh_accept_(**a))


def mh_step_case(B: int, T: int, V: int, device: str) -> Case:
    """The four ops of one single-site MH step on B chains (scoring T-1 masked copies per chain)."""
    g = gen(device, 4)
    tokens = torch.randint(0, V, (B, T), generator=g, device=device)
    seq = torch.arange(B, device=device).repeat_interleave(T - 1)
    pos = torch.arange(T - 1, device=device).repeat(B)
    rows_logits = torch.randn(B * (T - 1), V, generator=g, device=device)  # the model's output, precomputed
    site_logits = torch.randn(B, V, generator=g, device=device) * 3
    site = torch.randint(0, T, (B,), generator=g, device=device)
    u_prop = torch.rand(B, generator=g, device=device)
    u_acc = torch.rand(B, generator=g, device=device)
    beta = torch.ones(B, device=device)
    energy = torch.randn(B, generator=g, device=device)

    def step(lib, **kw):
        copies = lib.masked_copies(tokens, seq, pos, 0, **kw)
        targets = tokens[seq, pos]
        _, e_local, _ = lib.gather_energies(rows_logits, targets, seq, B, **kw)
        current = tokens.gather(1, site[:, None]).squeeze(1)
        proposed, logq_f, logq_r = lib.propose(site_logits, current, 1.0, 1.0, u_prop, **kw)
        return copies, lib.mh_accept_(tokens, site, proposed, energy, e_local, logq_f, logq_r, beta, u_acc, **kw)

    return Case("one MH step (4 ops)", f"B={B} T={T} V={V}", lambda: step(ops, validate=False),
                lambda: step(reference))


# ------------------------------------------------------------------------------------------------
# Size grids.
# ------------------------------------------------------------------------------------------------


def cases(device: str, quick: bool) -> list[Callable[[], Case]]:
    f32, bf16, f16 = torch.float32, torch.bfloat16, torch.float16
    if quick:
        return [lambda: masked_copies_case(4, 8, device),
                lambda: gather_energies_case(4, 8, 300, f32, device),
                lambda: propose_case(4, 300, 0.9, device),
                lambda: mh_accept_case(4, 8, 2, device),
                lambda: mh_step_case(4, 8, 25, device)]
    cuda = device == "cuda"
    Ts = (16, 32, 64)
    big_B = 320 if cuda else 8  # CPU: a few sequences of the 32K vocabulary (the reference is slow)
    out: list[Callable[[], Case]] = []
    out += [lambda T=T: masked_copies_case(320, T, device) for T in Ts]
    out += [lambda T=T: gather_energies_case(320, T, 25, f32, device) for T in Ts]
    out += [lambda T=T: gather_energies_case(big_B, T, 32000, f32, device) for T in Ts]
    out += [lambda T=T: gather_energies_case(big_B, T, 32000, bf16, device) for T in ((16, 64) if cuda else (16,))]
    if cuda:
        out += [lambda: gather_energies_case(320, 32, 32000, f16, device),
                lambda: gather_energies_case(320, 32, 50000, f32, device)]
    prop_B = 320 if cuda else 64
    out += [lambda p=p: propose_case(320, 25, p, device) for p in (1.0, 0.9)]
    out += [lambda p=p, V=V: propose_case(prop_B, V, p, device) for V in (32000, 50000) for p in (1.0, 0.9)]
    out += [lambda K=K: mh_accept_case(320, 64, K, device) for K in (1, 4)]
    out += [lambda T=T: mh_step_case(320, T, 25, device) for T in (16, 64)]
    out += [lambda T=T: mh_step_case(320 if cuda else 16, T, 32000, device) for T in (16, 64 if cuda else 32)]
    return out


# ------------------------------------------------------------------------------------------------
# Running and reporting.
# ------------------------------------------------------------------------------------------------


def peak_bandwidth_gbs() -> float | None:
    """HBM peak of GPU 0 from its memory clock and bus width (DDR: 2 transfers per clock)."""
    props = torch.cuda.get_device_properties(0)
    clock_khz = getattr(props, "memory_clock_rate", None)
    bus_bits = getattr(props, "memory_bus_width", None)
    if clock_khz and bus_bits:
        return 2 * clock_khz * 1e3 * bus_bits / 8 / 1e9
    known = {"H100 80GB HBM3": 3350.0, "H100 PCIe": 2000.0, "H200": 4800.0, "A100-SXM4-80GB": 2039.0,
             "A100-SXM4-40GB": 1555.0, "A100 80GB PCIe": 1935.0}
    return next((v for k, v in known.items() if k in props.name), None)


def time_case(case: Case, device: str, min_run_time: float) -> dict:
    threads = torch.get_num_threads()
    row = {"op": case.op, "size": case.size}
    for label, fn in (("compiled", case.compiled), ("reference", case.reference)):
        fn()  # warm-up (allocator, lazy init)
        t = benchmark.Timer(stmt="fn()", globals={"fn": fn}, label=f"{case.op} [{device}]", sub_label=case.size,
                            description=label, num_threads=threads)
        row[label] = t.blocked_autorange(min_run_time=min_run_time)
    with reference_without_checks():
        case.reference()
        t = benchmark.Timer(stmt="fn()", globals={"fn": case.reference}, label=f"{case.op} [{device}]",
                            sub_label=case.size, description="reference, no checks", num_threads=threads)
        row["reference, no checks"] = t.blocked_autorange(min_run_time=min_run_time)
    if device == "cuda":
        torch.cuda.synchronize()
    return row


def fmt_time(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"


def markdown_table(rows: list[dict], device: str) -> str:
    peak = peak_bandwidth_gbs() if device == "cuda" else None
    head = "| op | size | compiled | reference | ref / compiled | reference, no checks | ref (no checks) / compiled |"
    lines = [head, "|" + "---|" * 7]
    for r in rows:
        c, ref, refn = (r[k].median for k in ("compiled", "reference", "reference, no checks"))
        lines.append(f"| {r['op']} | {r['size']} | {fmt_time(c)} | {fmt_time(ref)} | {ref / c:.1f}x | "
                     f"{fmt_time(refn)} | {refn / c:.1f}x |")
    if device == "cuda":
        bw = [r for r in rows if r["op"] == "gather_energies" and r.get("bytes")]
        if bw:
            lines += ["", "gather_energies, achieved read bandwidth of the logits (compiled):", "",
                      "| size | GB/s | % of peak |", "|---|---|---|"]
            for r in bw:
                gbs = r["bytes"] / r["compiled"].median / 1e9
                pct = f"{100 * gbs / peak:.0f}%" if peak else "n/a"
                lines.append(f"| {r['size']} | {gbs:.0f} | {pct} |")
            if peak:
                lines.append(f"\nPeak HBM bandwidth taken as {peak:.0f} GB/s.")
    return "\n".join(lines)


def run_device(device: str, quick: bool, min_run_time: float) -> tuple[str, list[benchmark.Measurement]]:
    rows, measurements = [], []
    for make in cases(device, quick):
        case = make()
        row = time_case(case, device, min_run_time)
        row["bytes"] = case.bytes_moved
        rows.append(row)
        measurements += [row["compiled"], row["reference"], row["reference, no checks"]]
        print(f"[{device}] {case.op:22s} {case.size:32s} compiled {fmt_time(row['compiled'].median):>10s}  "
              f"reference {fmt_time(row['reference'].median):>10s}  "
              f"ratio {row['reference'].median / row['compiled'].median:7.1f}x", flush=True)
        del case
        if device == "cuda":
            torch.cuda.empty_cache()
    return markdown_table(rows, device), measurements


def write_section(text: str) -> None:
    results_md.write_section(START, END, text, RESULTS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, short timings (smoke run)")
    parser.add_argument("--no-write", action="store_true", help="print only; leave bench/RESULTS.md alone")
    parser.add_argument("--device", choices=["cpu", "cuda", "all"], default="all")
    parser.add_argument("--min-run-time", type=float, default=None, help="seconds per measurement")
    args = parser.parse_args(argv)
    min_run_time = args.min_run_time or (0.01 if args.quick else 0.5)
    devices = ["cpu"] if args.device == "cpu" else []
    if args.device in ("cuda", "all") and torch.cuda.is_available():
        devices.append("cuda")
    elif args.device == "cuda":
        parser.error("--device cuda: no GPU visible")
    if args.device == "all":
        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    sections = ["## Compiled ops vs pure-PyTorch reference (`bench/bench_ops.py`)", "",
                f"Run {when}{' (--quick)' if args.quick else ''}. Median times from "
                "`torch.utils.benchmark` (`blocked_autorange`); compiled = `mhfast.ops` with "
                "`validate=False`; reference = `mhfast.reference` (its value checks sync with the GPU), "
                "also timed with those checks stubbed out."]
    for device in devices:
        table, measurements = run_device(device, args.quick, min_run_time)
        compare = benchmark.Compare(measurements)
        compare.trim_significant_figures()
        print(compare)
        sections += ["", f"### {device}", "", f"Machine: {results_md.machine_description(device)}.", "", table, "",
                     "<details><summary>torch.utils.benchmark.Compare</summary>", "", "```text",
                     str(compare).strip(), "```", "", "</details>"]
    text = "\n".join(sections)
    if not args.no_write:
        write_section(text)
        print(f"wrote the bench_ops section of {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
