"""mhfast.sample against a re-implementation of the mixmatch MH loop, side by side, on AntiBERTy.

The baseline re-implements, from its description, the batched MH loop of mixmatch (Mireshghallah, Goyal
& Berg-Kirkpatrick, "Mix and Match", ACL 2022; github.com/mireshghallah/mixmatch, ``batched_MH``): per
step every chain proposes at one position from the MLM conditional (X masked there: 1 row), then the
energies of X and X' are recomputed from scratch with one masked copy per position each (2T rows), all
chains in one batched full forward (LM head at every position, as ``model(input_ids).logits``): 2T+1
rows per proposal. mhfast forwards T-1 rows for a proposal that changes the state and none otherwise.

Same model, same start (the greedy warm start of the full-length row), same number of proposals
(``--steps`` positions per chain, single-site MH, raw energy), runs alternating in one process
(baseline, mhfast, baseline, mhfast, ...; median of ``--repeats``), fp32 and bf16 (autocast for both;
bf16 is fast only on CPUs with AVX512-BF16/AMX or on GPUs, and the table says which this CPU has). Also
the model's FLOP rate in the baseline's forwards as a fraction of the machine's peak when ``--peak-gflops``
is given (this script cannot know the peak). Writes its section of bench/RESULTS.md.

    python3 bench/bench_mixmatch.py                                  # T 16/32/64 x C 1/5/16, fp32 + bf16
    python3 bench/bench_mixmatch.py --lengths 16 --chains 1 5 --steps 2 --repeats 1   # a few minutes
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
from mhfast.sampler import precision  # noqa: E402

START, END = "<!-- bench_mixmatch:start -->", "<!-- bench_mixmatch:end -->"


def _forward(model, rows: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    with torch.no_grad(), torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
        return model(input_ids=rows).logits.float()


def _energies(model, x: torch.Tensor, positions: torch.Tensor, mask_id: int, dtype) -> torch.Tensor:
    """Raw energies of the C rows of ``x`` from scratch: one masked copy per position each (C*T rows)."""
    C, T = x.shape[0], positions.numel()
    rows = x.repeat_interleave(T, dim=0)
    idx = torch.arange(C * T)
    pos = positions.repeat(C)
    rows[idx, pos] = mask_id
    logits = _forward(model, rows, dtype)[idx, pos]
    return -logits.gather(1, x.repeat_interleave(T, dim=0)[idx, pos][:, None]).view(C, T).double().sum(1)


def mixmatch_loop(lm, start: torch.Tensor, positions: torch.Tensor, sites: torch.Tensor, sweeps: int, dtype,
                  seed: int = 0) -> dict:
    """``sweeps`` sweeps over the proposal ``sites`` (a random order per chain and sweep) of C chains (rows
    of ``start``), the energy over ``positions``: 2T+1 rows per proposal."""
    g = torch.Generator().manual_seed(seed)
    model, mask_id = lm.model, lm.mask_id
    special = torch.zeros(lm.vocab_size, dtype=torch.bool)
    special[list(lm.special_ids)] = True
    x = start.clone()
    C = x.shape[0]
    rows = accepted = 0
    order = [torch.stack([torch.randperm(len(sites), generator=g) for _ in range(C)]) for _ in range(sweeps)]
    for k in range(sweeps * len(sites)):
        t = sites[order[k // len(sites)][:, k % len(sites)]]
        masked = x.clone()
        masked[torch.arange(C), t] = mask_id
        logq = torch.log_softmax(_forward(model, masked, dtype)[torch.arange(C), t].masked_fill(special, -1e9), 1)
        w_new = torch.multinomial(logq.exp(), 1, generator=g).squeeze(1)
        x_new = x.clone()
        x_new[torch.arange(C), t] = w_new
        both = _energies(model, torch.cat([x, x_new]), positions, mask_id, dtype)  # X and X' in one forward
        e_old, e_new = both[:C], both[C:]
        log_a = (e_old - e_new) + logq[torch.arange(C), x[torch.arange(C), t]].double() - logq[
            torch.arange(C), w_new].double()
        acc = torch.log(torch.rand(C, generator=g, dtype=torch.float64)) < log_a
        x = torch.where(acc[:, None], x_new, x)
        rows += C * (2 * len(positions) + 1)
        accepted += int(acc.sum())
    return {"rows": rows, "proposals": C * sweeps * len(sites), "acceptance": accepted / (C * sweeps * len(sites))}


def one_case(lm, T: int, C: int, steps: int, dtype, repeats: int) -> dict:
    """Marginal (steady-state) cost of ``steps`` proposals per chain: runs of 1 and 2 sweeps over ``steps``
    evenly spaced sites, timed alternately; the difference removes mhfast's warm start and initial energies."""
    start = mhfast.sample(lm, T, chains=1, epochs=1, burn_in=0, seed=0).tokens[0, :1]  # warm start + 1 sweep
    positions = (start[0] != lm.pad_id).nonzero().flatten()[1:-1]  # residues ([CLS]/[SEP] fixed)
    sites = positions[torch.linspace(0, len(positions) - 1, steps).round().long()]
    free = torch.zeros_like(start, dtype=torch.bool)
    free[0, sites] = True
    dt = None if dtype == torch.float32 else dtype
    times: dict = {("base", 1): [], ("base", 2): [], ("mh", 1): [], ("mh", 2): []}
    rows = {}
    for _ in range(repeats):
        for sweeps in (1, 2):
            t0 = time.perf_counter()
            base = mixmatch_loop(lm, start.repeat(C, 1), positions, sites, sweeps, dtype)
            times["base", sweeps].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            r = mhfast.sample(lm, init=start, free_positions=free, chains=C, epochs=sweeps, burn_in=0, seed=0,
                              dtype=dt)
            times["mh", sweeps].append(time.perf_counter() - t0)
            rows["base", sweeps], rows["mh", sweeps] = base["rows"], r.model_rows
    med = {k: statistics.median(v) for k, v in times.items()}
    b, m = med["base", 2] - med["base", 1], med["mh", 2] - med["mh", 1]
    base = {"rows": rows["base", 2] - rows["base", 1]}
    mh_rows = rows["mh", 2] - rows["mh", 1]
    proposals = C * steps
    return {"T": T, "C": C, "dtype": str(dtype).replace("torch.", ""), "base_rows": base["rows"] / proposals,
            "mh_rows": mh_rows / proposals, "base_ms": 1e3 * b / proposals, "mh_ms": 1e3 * m / proposals,
            "speedup": b / m, "tokens_per_s": base["rows"] * (T + 2) / b}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[16, 32, 64])
    p.add_argument("--chains", type=int, nargs="+", default=[1, 5, 16])
    p.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16"])
    p.add_argument("--steps", type=int, default=4, help="proposals per chain")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    from mhfast.models.antiberty import load_antiberty

    lm = load_antiberty()
    rows = []
    for T in args.lengths:
        for C in args.chains:
            for name in args.dtypes:
                rows.append(one_case(lm, T, C, min(args.steps, T), precision.NAMES[name], args.repeats))
                print(rows[-1], flush=True)
    bf16 = "native bf16 (AVX512-BF16/AMX)" if precision.native(torch.bfloat16, torch.device("cpu")) else \
        "NO native bf16 (bf16 runs slower than fp32 here)"
    lines = [f"AntiBERTy (8 layers, d=512, V=25), single-site MH, raw energy, {args.steps} proposals per chain, "
             f"{args.threads} thread(s), median of {args.repeats} alternating runs; this CPU: {bf16}. "
             f"Machine: {results_md.machine_description()}.", "",
             "| T | chains | dtype | mixmatch rows / proposal | mhfast rows / proposal | mixmatch ms / proposal "
             "| mhfast ms / proposal | mhfast speed-up | baseline tokens/s |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['T']} | {r['C']} | {r['dtype']} | {r['base_rows']:.0f} | {r['mh_rows']:.1f} | "
                     f"{r['base_ms']:.1f} | {r['mh_ms']:.1f} | {r['speedup']:.2f}x | {r['tokens_per_s']:.0f} |")
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        results_md.write_section(START, END, "## mhfast vs the mixmatch MH loop (bench/bench_mixmatch.py)\n\n" + text)


if __name__ == "__main__":
    main()
