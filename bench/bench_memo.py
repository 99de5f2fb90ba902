"""The proposal memo (option ``memo``) on AntiBERTy: rows and wall time with and without it, same chains.

Per case (start, T, chains): ``mhfast.sample`` with ``memo=0`` (off) and with ``memo=8`` (8 entries per chain, what
the default ``memo="auto"`` gives single-site MH) over the same start, seed and epochs, alternating in one process (off, on, off, on, ...); wall time of the
whole run (its warm start and initial energies are the same in both), rows forwarded per proposal after them,
the memo's hits, and whether the two runs gave the same final tokens (they should: the memo hands back the
energies computed earlier for the same sequence; a real network's rows can round differently in other batches,
which could flip a near-tie decision). Starts as in bench_mixmatch.py: ``parent`` (the first T residues of
adalimumab's VH, a real antibody: chains near a mode, where repeats are common) and ``random`` residues (a
burn-in, where they are rare). One torch thread. Writes its section of bench/RESULTS.md.

    python3 bench/bench_memo.py                                   # T=32, chains 1 and 5, 8 epochs, both starts
    python3 bench/bench_memo.py --cases parent:32:1 parent:32:5 random:16:5 --epochs 12 --translate  # RESULTS.md
    python3 bench/bench_memo.py --lengths 16 --chains 1 --epochs 4 --repeats 1 --no-write   # a quick look
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_mixmatch  # noqa: E402
import results_md  # noqa: E402

import mhfast  # noqa: E402

START, END = "<!-- bench_memo:start -->", "<!-- bench_memo:end -->"
SLOTS = 8  # the memo's entries per chain in the "on" runs


def one_run(lm, start: torch.Tensor, free: torch.Tensor, chains: int, epochs: int, memo) -> dict:
    t0 = time.perf_counter()
    r = mhfast.sample(lm, init=start, free_positions=free, chains=chains, epochs=epochs, burn_in=1, seed=0,
                      memo=memo)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "rows_per_proposal": r.rows_per_proposal, "hits": r.memo_hits,
            "proposals": r.proposals, "tokens": r.tokens, "acceptance": float(r.acceptance_rate.mean())}


def one_case(lm, kind: str, T: int, chains: int, epochs: int, repeats: int) -> dict:
    start, positions = bench_mixmatch.make_start(lm, T, kind)
    _, free = bench_mixmatch.evenly_spaced_sites(start, positions, positions.numel())  # every residue free
    runs = {0: [], SLOTS: []}
    for _ in range(repeats):
        for memo in runs:
            runs[memo].append(one_run(lm, start, free, chains, epochs, memo))
    off, on = runs[0], runs[SLOTS]
    ratios = [a["seconds"] / b["seconds"] for a, b in zip(off, on)]
    return {"start": kind, "T": T, "chains": chains, "epochs": epochs, "proposals": on[0]["proposals"],
            "acceptance": on[0]["acceptance"], "rows_off": off[0]["rows_per_proposal"],
            "rows_on": on[0]["rows_per_proposal"], "hits": on[0]["hits"],
            "s_off": statistics.median(r["seconds"] for r in off), "s_on": statistics.median(r["seconds"] for r in on),
            "speedup": statistics.median(ratios), "ratios": ratios,
            "same": all(torch.equal(a["tokens"], b["tokens"]) for a, b in zip(off, on))}


MAIN_JOB = ["translate", "--input", "bundled", "--ref", "bundled", "--limit", "5", "--format", "fairseq", "--energy",
            "raw", "--chains", "5", "--epochs", "12", "--burn-in", "2", "--anneal", "0.08", "--seed", "0", "--quiet"]


def translate_case(repeats: int) -> list[str]:
    """The README's main job (scripts/main.sh: MH translation of 5 sentences with the bundled CMLM) with ``--memo 0``
    and ``--memo 8``, alternating: its stdout, seconds, and the rows and hits of its ``mhfast.sample`` call."""
    import contextlib
    import io

    from mhfast.cli import main as cli_main

    real = mhfast.sample
    runs: dict[int, list[dict]] = {0: [], SLOTS: []}
    try:
        for _ in range(repeats):
            for memo in runs:
                seen = []
                mhfast.sample = lambda *a, **k: seen.append(real(*a, **k)) or seen[-1]  # noqa: E731
                out, err = io.StringIO(), io.StringIO()
                t0 = time.perf_counter()
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    code = cli_main([*MAIN_JOB, "--memo", str(memo)])
                seconds = time.perf_counter() - t0
                assert code == 0, err.getvalue()
                runs[memo].append({"seconds": seconds, "out": out.getvalue(), "rows": sum(r.model_rows for r in seen),
                                   "hits": sum(r.memo_hits for r in seen), "proposals": sum(r.proposals for r in seen)})
    finally:
        mhfast.sample = real
    off, on = runs[0], runs[SLOTS]
    ratios = ", ".join(f"{a['seconds'] / b['seconds']:.2f}" for a, b in zip(off, on))
    same = all(a["out"] == b["out"] for a, b in zip(off, on))
    return ["| run | proposals | model rows | memo hits | s (median) | speed-up (per repeat) | same output |",
            "|---|---|---|---|---|---|---|",
            f"| memo off | {off[0]['proposals']} | {off[0]['rows']} | 0 | "
            f"{statistics.median(r['seconds'] for r in off):.1f} | | |",
            f"| memo={SLOTS} | {on[0]['proposals']} | {on[0]['rows']} | {on[0]['hits']} | "
            f"{statistics.median(r['seconds'] for r in on):.1f} | {ratios} | {'yes' if same else 'NO'} |"]


def table(rows: list[dict]) -> list[str]:
    out = ["| start | T | chains | epochs | proposals | acceptance | rows / proposal, memo off | memo on | memo hits "
           "| s, memo off | memo on | speed-up (per repeat) | same tokens |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        each = ", ".join(f"{x:.2f}" for x in r["ratios"])
        out.append(f"| {r['start']} | {r['T']} | {r['chains']} | {r['epochs']} | {r['proposals']} | "
                   f"{r['acceptance']:.3f} | {r['rows_off']:.2f} | {r['rows_on']:.2f} | {r['hits']} | "
                   f"{r['s_off']:.1f} | {r['s_on']:.1f} | {r['speedup']:.2f}x ({each}) | "
                   f"{'yes' if r['same'] else 'NO'} |")
    return out


def cases_wanted(args) -> bool:
    return args.cases is None or bool(args.cases)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[32])
    ap.add_argument("--chains", type=int, nargs="+", default=[1, 5])
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--starts", nargs="+", default=["parent", "random"], choices=sorted(bench_mixmatch.STARTS))
    ap.add_argument("--cases", nargs="*", default=None, metavar="START:T:CHAINS",
                    help="explicit cases instead of starts x lengths x chains, e.g. parent:32:5 random:16:5")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--model", default="antiberty", choices=["antiberty", "antiberty-random"],
                    help="antiberty-random: a randomly initialized BERT of its shape (for the smoke test)")
    ap.add_argument("--translate", action="store_true", help="also the README's main job (bundled CMLM, 5 sentences)")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    lm = bench_mixmatch.load_model(args.model, "cpu") if cases_wanted(args) else None
    cases = [(kind, T, C) for kind in args.starts for T in args.lengths for C in args.chains]
    if args.cases is not None:
        cases = [(kind, int(T), int(C)) for kind, T, C in (c.split(":") for c in args.cases)]
    rows = []
    for kind, T, C in cases:
        rows.append(one_case(lm, kind, T, C, args.epochs, args.repeats))
        print("\n".join(table(rows)[-1:]), flush=True)
    main_job = []
    if args.translate:
        main_job = ["", f"The README's main job (`mhfast {' '.join(MAIN_JOB)}`, the bundled Multi30k CMLM: "
                    "annealed MH from the greedy warm start, the paper's translation setting) with `--memo 0` and "
                    f"`--memo {SLOTS}`, alternating, {args.repeats} repeat(s); rows and hits of its `mhfast.sample` "
                    "call, seconds of the whole command in-process (model loading included):", "",
                    *translate_case(args.repeats)]
        print("\n".join(main_job), flush=True)
    text = "\n".join([
        "## The proposal memo (bench/bench_memo.py)", "",
        f"`python3 bench/bench_memo.py {' '.join(sys.argv[1:])}`".replace(" `", "`"),
        f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {results_md.machine_description()}; one torch "
        f"thread). {'AntiBERTy' if args.model == 'antiberty' else 'A random BERT of AntiBERTy shape'}, single-site "
        "MH, raw energy, default options but `memo`, 1 burn-in epoch; the memo "
        f"off (`memo=0`) and on (`memo={SLOTS}`: {SLOTS} entries per chain, the default's value here) alternate, "
        f"{args.repeats} repeat(s); seconds "
        "= the whole run (median), rows / proposal after the initial energies.", "", *table(rows), *main_job, ""])
    print(text)
    if not args.no_write:
        results_md.write_section(START, END, text)


if __name__ == "__main__":
    main()
