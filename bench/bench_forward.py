"""What one forwarded row costs: sub-batch size, the fast forward and the precision, on the real AntiBERTy.

The sampler forwards masked rows in sub-batches of ``max_tokens_per_batch // T`` rows. This bench times the
forward of the same ``--rows`` masked rows (random residues, one mask each, length T) through the sampler's
own runner (:class:`mhfast.runtime.runner.ModelRunner`) for every budget of ``--budgets``, with
``forward="full"`` (the whole model) and ``forward="fast"`` (the last layer only at the masked position), in
fp32 and, where the CPU has native bf16 (AVX512-BF16 / AMX), bf16. Runs alternate within a round (every
budget and mode once per round); each figure is the median over ``--repeats`` rounds, in ms per row. Also the
model's FLOP rate per row (counted: 2 FLOPs per multiply-add of every linear layer at every position of
the rows, plus attention's two T x T products; the head at one position) and, for scale, one large matmul's
rate at the same thread count, so the forward's rate is shown as a fraction of what this core reaches.
Writes its section of bench/RESULTS.md.

    python3 bench/bench_forward.py                       # ~10 min on one core
    python3 bench/bench_forward.py --compile             # + torch.compile on the sampler's path: compile time, ms per row
    python3 bench/bench_forward.py --compile-only        # only that, keeping the section's table (~5 min)
    python3 bench/bench_forward.py --lengths 32 --repeats 1 --no-write
    python3 bench/bench_forward.py --compile-only --device cuda --model antiberty-random --no-write   # on a GPU
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results_md  # noqa: E402
from bench_mixmatch import load_model, matmul_peak, sync  # noqa: E402

from mhfast.models.compiled_blocks import compiled_blocks  # noqa: E402
from mhfast.models.fast_forward import fast_forward_model  # noqa: E402
from mhfast.runtime import cpu_info, precision  # noqa: E402
from mhfast.runtime.runner import ModelRunner, default_max_tokens  # noqa: E402

START, END = "<!-- bench_forward:start -->", "<!-- bench_forward:end -->"


def masked_rows(lm, n: int, T: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` rows [CLS] + T residues + [SEP], one masked position each (spread over the row)."""
    g = torch.Generator().manual_seed(seed)
    words = torch.tensor([i for i in range(lm.vocab_size) if i not in set(lm.special_ids)])
    body = words[torch.randint(len(words), (n, T), generator=g)]
    rows = torch.cat([torch.full((n, 1), lm.bos_id), body, torch.full((n, 1), lm.eos_id)], dim=1)
    pos = 1 + torch.arange(n) % T
    rows[torch.arange(n), pos] = lm.mask_id
    return rows, pos


def flops_per_row(lm, T: int) -> float:
    """Multiply-add FLOPs of one row of length T+2 through the body (every linear layer at every position,
    attention's QK^T and AV) and the head at one position."""
    cfg = lm.model.config
    d, L, ff, V = cfg.hidden_size, cfg.num_hidden_layers, cfg.intermediate_size, lm.vocab_size
    n = T + 2
    per_layer = 2 * n * (4 * d * d + 2 * d * ff) + 2 * 2 * n * n * d
    return L * per_layer + 2 * (d * d + d * V)


def matmul_gflops(dtype: torch.dtype) -> float:
    """This core's achievable matmul rate in ``dtype``: the best of 1024^3 and 2048^3 matmuls (best of 5 and 3 runs).
    One size timed once can read low on a machine whose other core is busy (63 vs 93 GFLOP/s on the AMD EPYC of
    bench/RESULTS.md), which would show forwards above 100% of "peak"; the report keeps the best over the run."""
    return max(matmul_peak(dtype, "cpu", n=1024, reps=5), matmul_peak(dtype, "cpu", n=2048, reps=3))


def time_rows(runner: ModelRunner, rows: torch.Tensor, pos: torch.Tensor) -> float:
    t0 = time.perf_counter()
    runner.outputs(rows, pos)
    return time.perf_counter() - t0


def measure(lm, T: int, n: int, budgets: list[int], dtypes: list[torch.dtype], repeats: int) -> list[dict]:
    rows, pos = masked_rows(lm, n, T)
    cases = [(b, fwd, dt) for dt in dtypes for fwd in ("full", "fast") for b in budgets]
    models = {"full": lm, "fast": fast_forward_model(lm)}
    seconds = {c: [] for c in cases}
    for c in cases:  # warm-up: one pass of every case (allocator, oneDNN primitives)
        ModelRunner(models[c[1]], None, c[0], dtype=c[2]).outputs(rows[:8], pos[:8])
    for _ in range(repeats):
        for c in cases:
            seconds[c].append(time_rows(ModelRunner(models[c[1]], None, c[0], dtype=c[2]), rows, pos))
    return [dict(T=T, budget=b, forward=f, dtype=str(dt).replace("torch.", ""), n=n,
                 ms_per_row=1e3 * statistics.median(seconds[(b, f, dt)]) / n) for (b, f, dt) in cases]


def sampler_runner(lm, dtype: torch.dtype, device: str = "cpu") -> ModelRunner:
    """The runner ``mhfast.sample`` builds on ``device``: the fast forward, the default sub-batches for ``dtype``."""
    return ModelRunner(fast_forward_model(lm), None, default_max_tokens(lm, device, dtype), device=device, dtype=dtype)



def chain_row_sets(lm, T: int) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """Rows of one step of 1, 5 and 16 chains' single-site proposals (T-1 masked rows per chain), by chains."""
    return {c: masked_rows(lm, c * (T - 1), T, seed=c) for c in (1, 5, 16)}


def alternate(lm, runner: ModelRunner, sets: dict, T: int, repeats: int, modes: dict[str, Callable[[], Any]]
              ) -> tuple[dict, dict]:
    """Time ``runner.outputs`` on every row set inside each mode's context, the modes alternating (their order
    reversed every round); a block of calls starts with a 2-row warm call (a session's first call casts the
    weights). Returns the seconds and the last outputs, both keyed by (mode, chains)."""
    names = list(modes)
    times: dict = {(m, c): [] for m in names for c in sets}
    outs: dict = {}
    for r in range(repeats):
        for m in (names if r % 2 == 0 else names[::-1]):
            with modes[m]():
                runner.outputs(*masked_rows(lm, 2, T, seed=99))
                for c in sets:
                    sync(lm)
                    start = time.perf_counter()
                    outs[(m, c)] = runner.outputs(*sets[c])
                    sync(lm)
                    times[(m, c)].append(time.perf_counter() - start)
    return times, outs


def per_chains(sets: dict, times: dict, new: str, old: str) -> str:
    """'C chain(s) (N rows): new vs old ms per row (xratio)' for every row set, medians of ``times``."""
    parts = []
    for c, (rows, _) in sets.items():
        o, n = (1e3 * statistics.median(times[(m, c)]) / rows.shape[0] for m in (old, new))
        parts.append(f"{c} chain(s) ({rows.shape[0]} rows): {n:.2f} vs {o:.2f} ms per row (x{o / n:.2f})")
    return "; ".join(parts)


def measure_compile(lm, T: int, repeats: int, dtype: torch.dtype, device: str = "cpu") -> str:
    """``compile=True`` on the sampler's own path (its runner, the fast forward, the default sub-batches, autocast
    to ``dtype``) against eager, same rows, alternating: :func:`mhfast.models.compiled_blocks.compiled_blocks`
    as ``mhfast.sample`` enters it, so every encoder layer but the last (which the fast forward runs in pieces at
    the masked positions) is compiled and the per-layer Python and the elementwise work (GELU, LayerNorm,
    residual adds) can be fused. Rows in sub-batches of 1, 5 and 16 chains' single-site proposals (T-1 rows
    each). Both inside the runner's session, as mhfast.sample runs."""
    runner = sampler_runner(lm, dtype, device)
    sets = chain_row_sets(lm, T)
    eager_out = {c: runner.outputs(*sets[c]) for c in sets}
    start = time.perf_counter()
    with compiled_blocks(runner.model) as report:
        diff = max(float((runner.outputs(*sets[c]).float() - eager_out[c].float()).abs().max()) for c in sets)
    sync(lm)
    first_s = time.perf_counter() - start

    modes = {"eager": runner.session, "compiled": lambda: compiled_in(runner)}
    times, _ = alternate(lm, runner, sets, T, repeats, modes)
    name = "float32" if dtype == torch.float32 else f"{str(dtype).replace('torch.', '')} (autocast)"
    where = "" if device == "cpu" else f" on {torch.cuda.get_device_name()}"
    return (f"torch.compile on the sampler's path{where} (compile=True), {name}, T={T}: {report.blocks} encoder "
            f"layers compiled (inductor, dynamic shapes), {report.graphs} graph(s) in {report.seconds:.1f} s of "
            f"compiling ({first_s:.0f} s with the first calls; less with a warm inductor cache); compiled vs eager, "
            f"both in the runner's session, median of {repeats} alternating rounds: "
            + per_chains(sets, times, "compiled", "eager") + f"; largest output difference {diff:.2g}.")


@contextlib.contextmanager
def compiled_in(runner: ModelRunner) -> Iterator[None]:
    """The runner's session with its model's blocks compiled (``mhfast.sample(..., compile=True)``'s context)."""
    with compiled_blocks(runner.model), runner.session():
        yield


def measure_cast_cache(lm, T: int, repeats: int, dtype: torch.dtype, device: str = "cpu") -> str:
    """The sampler's bf16 path with and without :meth:`ModelRunner.session` (autocast's weight-cast cache kept
    over the run): rows of 1, 5 and 16 chains' single-site proposals (T-1 rows each) per call, alternating."""
    runner = sampler_runner(lm, dtype, device)
    sets = chain_row_sets(lm, T)
    times, outs = alternate(lm, runner, sets, T, repeats, {"per call": contextlib.nullcontext,
                                                           "session": runner.session})
    same = all(torch.equal(outs[("per call", c)], outs[("session", c)]) for c in sets)
    name = str(dtype).replace("torch.", "")
    where = "" if device == "cpu" else f" on {torch.cuda.get_device_name()}"
    return (f"Weight casts{where}, {name} (autocast), T={T}: the runner's session (autocast's cache of weight casts kept "
            f"over a run, as mhfast.sample does) vs a cast of every weight per model call (the table above), "
            f"median of {repeats} alternating rounds: " + per_chains(sets, times, "session", "per call")
            + f"; outputs {'bit-identical' if same else 'DIFFERENT'}.")


def report(results: list[dict], lm, peaks: dict, args) -> str:
    lines = ["## The cost of a forwarded row (bench/bench_forward.py)", "",
             f"AntiBERTy (8 layers, d=512), {args.rows} masked rows of length T+2 through the sampler's runner, "
             f"ms per row (median of {args.repeats} alternating rounds), by `max_tokens_per_batch` (rows per "
             f"sub-batch = budget // (T+2)), `forward` and `dtype`. {results_md.machine_description()}. "
             f"Matmul peak at this thread count (the best of 1024^3 and 2048^3 matmuls, taken before each T): "
             f"{peaks['float32']:.0f} GFLOP/s fp32"
             + (f", {peaks['bfloat16']:.0f} GFLOP/s bf16" if "bfloat16" in peaks else "") + "; the FLOP-rate "
             "column is the forward's counted FLOPs per second over that fp32 (or bf16) matmul rate. L2 cache "
             f"per core: {cpu_info.l2_bytes() >> 10} KiB, so mhfast's default budget here (width and L2, "
             "`default_max_tokens`) is " + ", ".join(f"{default_max_tokens(lm, 'cpu', precision.NAMES[name])} tokens "
                                                     f"in {name}" for name in peaks) + ".", ""]
    head = "| T | dtype | forward | " + " | ".join(f"budget {b}" for b in args.budgets) + " | best | FLOP rate at best |"
    lines += [head, "|" + "---|" * (len(args.budgets) + 5)]
    for T in args.lengths:
        for dt in sorted({r["dtype"] for r in results}):
            for fwd in ("full", "fast"):
                rs = [r for r in results if r["T"] == T and r["dtype"] == dt and r["forward"] == fwd]
                if not rs:
                    continue
                best = min(rs, key=lambda r: r["ms_per_row"])
                rate = flops_per_row(lm, T) / (best["ms_per_row"] / 1e3) / 1e9
                lines.append(f"| {T} | {dt} | {fwd} | " + " | ".join(f"{r['ms_per_row']:.2f}" for r in rs)
                             + f" | {best['budget']} | {rate:.0f} GFLOP/s = {rate / peaks[dt]:.0%} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[16, 32, 64])
    p.add_argument("--budgets", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096, 16384, 65536])
    p.add_argument("--rows", type=int, default=96)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--compile", action="store_true", help="also time torch.compile on the sampler's path (minutes)")
    p.add_argument("--compile-only", action="store_true",
                   help="only the lines below the table (weight casts, torch.compile): replaces them, keeps the table")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                   help="cuda: the --compile-only lines on the GPU (the budget table is the CPU's)")
    p.add_argument("--model", default="antiberty", choices=["antiberty", "antiberty-random"],
                   help="antiberty-random: AntiBERTy's shape with random weights (bench_mixmatch.load_model)")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    if args.device == "cuda" and not (args.compile_only and args.no_write and torch.cuda.is_available()):
        p.error("--device cuda: needs a GPU, --compile-only and --no-write (bench/RESULTS.md's section is the CPU's)")
    torch.set_num_threads(args.threads)
    lm = load_model(args.model, args.device)
    dtypes = [torch.float32] + ([torch.bfloat16] if precision.native(torch.bfloat16, torch.device(args.device))
                                else [])
    if args.compile_only:
        old = results_md.read_section(START, END)
        text = "".join(line for line in old.splitlines(keepends=True)
                       if not line.startswith(("torch.compile", "Weight casts")))
    else:
        peaks: dict[str, float] = {}
        results = []
        for T in args.lengths:
            for dt in dtypes:  # the best over the run: a busy neighbour makes one reading low
                name = str(dt).replace("torch.", "")
                peaks[name] = max(peaks.get(name, 0.0), matmul_gflops(dt))
            results += measure(lm, T, args.rows, args.budgets, dtypes, args.repeats)
            print(f"T={T} done", flush=True)
        text = report(results, lm, peaks, args)
    extra = [measure_cast_cache(lm, 32, max(args.repeats, 5), dt, args.device) for dt in dtypes
             if dt != torch.float32]
    if args.compile or args.compile_only:
        extra += [measure_compile(lm, 32, args.repeats, dt, args.device) for dt in dtypes]
    text = text.rstrip("\n") + "\n\n" + "\n\n".join(extra) + "\n"
    print(text)
    if not args.no_write:
        results_md.write_section(START, END, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
