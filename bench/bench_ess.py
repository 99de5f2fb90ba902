"""Effective samples per second: the headline speed figure (issue 33), and what the traces cost.

Speed in proposals or rows per second says nothing about how well the chains explore: a sampler that rejects
everything is fast and useless. This script reports, per model and sampler, the bulk-ESS of E_local and the
smallest bulk-ESS over the traced random projections (``proj_j``, which see moves the energy does not),
summed over the inputs of the run, per CPU second of the ``mhfast.sample`` call (one torch thread; CPU time,
because the shared machine's wall clock swings with its load) and per 1,000 forwarded model rows (the cost unit
of bench/: independent of the CPU). The ESS are ArviZ's (``result.diagnostics``) over the post-burn-in sweeps;
each case runs several seeds and reports the mean and the spread (min-max) over them, so one can see whether
the ESS estimate itself is stable.

Cases (``--cases``):

* ``toy``: an enumerable tabular MLM (4 tokens, T = 5, random logits x 0.5: at x 1.5 or even x 0.8 single-site MH is metastable there, ESS ~10 in 4,000 draws), energy local, 4 chains from
  random starts, 1000 post-burn-in sweeps, 3 seeds;
* ``cmlm``: the bundled De->En CMLM on the first 2 test sentences with the main job's sampler settings
  (scripts/main.sh: energy raw, 5 chains, burn-in 2) but a fixed target temperature (the main job anneals, and
  an annealed target is not stationary: ESS would be meaningless) and 40 epochs, 2 seeds;
* ``antiberty-infill``: AntiBERTy, T = 32 residues of a real antibody (adalimumab's VH, bench_mixmatch.PARENT),
  the last 8 free, energy local, 4 chains from the parent, 40 epochs, 1 seed (AntiBERTy forwards cost ~20 ms
  of CPU per row here);
* ``antiberty-random``: AntiBERTy, T = 32 random residues, all free (not in the default run: from a random
  start a single-site MH sweep of 4 chains forwards ~3,700 rows, ~75 s of CPU per sweep here, so chains long
  enough for a stable ESS take hours; ``--cases antiberty-random`` runs it).

Samplers: ``mh`` with today's defaults (memo auto), ``block-mh`` (blocks of 2), and the Gibbs baselines
``gibbs`` / ``block-gibbs`` as a reference only: they sample another distribution (paper, section 6), so their
ESS is of a different target.

The traces' cost: on the bundled CMLM's mh runs, the time spent recording traces and per-position tallies
(the monitor's epoch-end work and SiteCounts' filing, timed around those calls) as a share of the sampling
time. Writes its section of bench/RESULTS.md.

    python3 bench/bench_ess.py                              # the default cases, ~15 min of one core
    python3 bench/bench_ess.py --quick --no-write           # a smoke run (seconds)
    python3 bench/bench_ess.py --cases cmlm --samplers mh   # re-measure some rows (the section keeps the others)
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results_md  # noqa: E402

import mhfast  # noqa: E402
from mhfast.models.tabular import TabularMLM  # noqa: E402

START, END = "<!-- bench_ess:start -->", "<!-- bench_ess:end -->"
SAMPLERS = {"mh": {}, "block-mh": {"sampler": "block-mh", "block_schedule": 2}, "gibbs": {"sampler": "gibbs"},
            "block-gibbs": {"sampler": "block-gibbs", "block_schedule": 2}}


# ---------------------------------------------------------------------------- cases
def toy_case(quick: bool) -> dict:
    model = TabularMLM.random(num_tokens=4, length=5, seed=11, scale=0.5)
    return {"name": "toy", "what": "tabular MLM, 4 tokens, T=5, random logits x 0.5, energy local, random starts",
            "inputs": {"init": torch.full((1, 5), model.mask_id)}, "model": model, "seeds": [0, 1] if quick else [0, 1, 2],
            "options": dict(chains=4, epochs=60 if quick else 1100, burn_in=10 if quick else 100, energy="local",
                            start="random")}


def cmlm_case(quick: bool) -> dict:
    from mhfast.translation import bundled_test_file, load_bundled_model

    tr = load_bundled_model()
    lines = Path(bundled_test_file("bundled", "--input")).read_text(encoding="utf-8").splitlines()[:1 if quick else 2]
    return {"name": "cmlm", "what": f"bundled De->En CMLM, {len(lines)} test sentences, main job's settings "
            "(energy raw, 5 chains, burn-in 2) at a fixed temperature", "model": tr.cmlm,
            "inputs": {"source": [tr.source_ids(s) for s in lines]}, "seeds": [0] if quick else [0, 1],
            "options": dict(chains=5 if not quick else 2, epochs=8 if quick else 40, burn_in=2, energy="raw")}


def antiberty_case(kind: str, quick: bool) -> dict:
    import bench_mixmatch
    from mhfast.models.antiberty import load_antiberty

    lm = load_antiberty()
    T = 8 if quick else 32
    start, positions = bench_mixmatch.make_start(lm, T, "parent" if kind == "infill" else "random")
    free = torch.zeros_like(start, dtype=torch.bool)
    free[0, positions[-8:] if kind == "infill" else positions] = True
    epochs = 4 if quick else (40 if kind == "infill" else 12)
    return {"name": f"antiberty-{kind}", "model": lm, "seeds": [0],
            "what": (f"AntiBERTy, T={T} residues of adalimumab's VH, the last 8 free" if kind == "infill" else
                     f"AntiBERTy, T={T} random residues, all free") + ", energy local",
            "inputs": {"init": start, "free_positions": free},
            "options": dict(chains=2 if quick else 4, epochs=epochs, burn_in=1 if quick else 5, energy="local")}


CASES: dict[str, Callable[[bool], dict]] = {
    "toy": toy_case, "cmlm": cmlm_case, "antiberty-infill": lambda q: antiberty_case("infill", q),
    "antiberty-random": lambda q: antiberty_case("random", q)}
DEFAULT_CASES = ("toy", "cmlm", "antiberty-infill")


# ---------------------------------------------------------------------------- the traces' cost
class TraceClock:
    """Times the monitor's epoch-end work and SiteCounts' filing (the traces' whole cost) inside a run."""

    def __init__(self):
        self.seconds = 0.0
        self._depth = 0  # only the outermost timed call counts (finish calls _reduce, after_epoch records, ...)

    @contextlib.contextmanager
    def installed(self):
        from mhfast.sampler import adaptive, site_counts

        patched = [(adaptive.RunMonitor, name) for name in ("after_epoch", "view", "finish", "start")]
        patched += [(site_counts.SiteCounts, name) for name in ("proposed", "tested", "taken", "_reduce")]
        originals = [(cls, name, getattr(cls, name)) for cls, name in patched]
        for cls, name, fn in originals:
            setattr(cls, name, self._timed(fn))
        try:
            yield self
        finally:
            for cls, name, fn in originals:
                setattr(cls, name, fn)

    def _timed(self, fn: Callable) -> Callable:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            self._depth += 1
            try:
                return fn(*args, **kwargs)
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self.seconds += time.perf_counter() - t0
        return wrapper


# ---------------------------------------------------------------------------- runs
def one_run(case: dict, sampler: str, seed: int, clock: TraceClock | None = None) -> dict:
    cpu, wall = time.process_time(), time.perf_counter()
    with clock.installed() if clock is not None else contextlib.nullcontext():
        r = mhfast.sample(case["model"], **case["inputs"], **case["options"], **SAMPLERS[sampler], seed=seed)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    diags = r.diagnostics
    ess_e = sum(d["ess_bulk"]["e_local"] for d in diags)
    ess_p = sum(min(v for k, v in d["ess_bulk"].items() if k.startswith("proj_")) for d in diags)
    draws = sum(int(((r.trace_epochs >= r.burn_in) & (r.trace_epochs < int(r.epochs_run[b]))).sum())
                for b in range(len(diags))) * r.traces.shape[1]
    rhat = max(max(d["rhat"].values()) for d in diags)
    return {"cpu": cpu, "wall": wall, "rows": r.model_rows, "ess_e": ess_e, "ess_p": ess_p, "draws": draws,
            "rhat": rhat, "accept": float(r.acceptance_rate[r.burn_in:].mean()),
            "trace_share": clock.seconds / wall if clock is not None else None}


def spread(values: list[float], fmt: str = "{:.1f}") -> str:
    """mean (min-max) of the seeds, or the one value."""
    if len(values) == 1:
        return fmt.format(values[0])
    return f"{fmt.format(statistics.mean(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def case_rows(case: dict, samplers: list[str]) -> tuple[list[str], list[float]]:
    rows, shares = [], []
    for sampler in samplers:
        runs = []
        for seed in case["seeds"]:
            clock = TraceClock() if case["name"] == "cmlm" and sampler == "mh" else None
            runs.append(one_run(case, sampler, seed, clock))
            if clock is not None:
                shares.append(runs[-1]["trace_share"])
            print(f"  {case['name']} {sampler} seed {seed}: {runs[-1]}", flush=True)
        col = lambda key: [r[key] for r in runs]  # noqa: E731
        per_s = lambda key: [r[key] / r["cpu"] for r in runs]  # noqa: E731
        per_k = lambda key: [1000 * r[key] / max(r["rows"], 1) for r in runs]  # noqa: E731
        rows.append(f"| {case['name']} | {sampler} | {runs[0]['draws']} | {spread(col('accept'), '{:.3f}')} | "
                    f"{spread(col('ess_e'), '{:.0f}')} | {spread(col('ess_p'), '{:.0f}')} | "
                    f"{spread(per_s('ess_e'), '{:.2f}')} | {spread(per_s('ess_p'), '{:.2f}')} | "
                    f"{spread(per_k('ess_e'), '{:.1f}')} | {spread(per_k('ess_p'), '{:.1f}')} | "
                    f"{spread(col('rows'), '{:.0f}')} | {spread(col('cpu'), '{:.1f}')} | "
                    f"{spread(col('rhat'), '{:.3f}')} |")
    return rows, shares


def _merged(old: str, new: dict[str, str], key: Callable[[str], str | None]) -> list[str]:
    """The lines of ``old`` that ``key`` recognises, each replaced by ``new``'s line of the same key, then
    ``new``'s other lines (a run of some cases keeps the other cases' lines of the section)."""
    lines, seen = [], set()
    for line in old.splitlines():
        k = key(line)
        if k is not None:
            lines.append(new.get(k, line))
            seen.add(k)
    return lines + [line for k, line in new.items() if k not in seen]


def report(cases: list[dict], rows: list[str], shares: list[float], seconds: float, old: str = "") -> str:
    bullet_key = lambda line: line.split("`")[1] if line.startswith("* `") else None  # noqa: E731
    row_key = lambda line: "|".join(line.split("|")[1:3]) if line.startswith("| ") and not line.startswith(  # noqa: E731
        "| case") else None
    bullets = {c["name"]: f"* `{c['name']}`: {c['what']}; {c['options']['chains']} chains, {c['options']['epochs']} "
               f"epochs ({c['options']['burn_in']} burn-in), seeds {c['seeds']}" for c in cases}
    lines = [f"Machine: {results_md.machine_description()}.", f"Last run: {seconds / 60:.1f} min of wall time "
             f"({', '.join(c['name'] for c in cases)}).", ""]
    lines += _merged(old, bullets, bullet_key)
    lines += ["", "ESS: ArviZ's bulk-ESS over the post-burn-in sweeps, summed over the run's inputs; `proj` = the "
              "smallest over the 3 traced projections. Per CPU second of the `mhfast.sample` call (one torch thread) "
              "and per 1,000 forwarded rows. Each cell: mean (min-max) over the seeds. gibbs / block-gibbs sample "
              "another distribution (reference only). max R-hat: the largest over every input and summary.", "",
              "| case | sampler | draws | accept | ESS E_local | ESS proj | ESS E_local / s | ESS proj / s | "
              "ESS E_local / 1k rows | ESS proj / 1k rows | rows | CPU s | max R-hat |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += _merged(old, {row_key(r): r for r in rows}, row_key)
    trace = [line for line in old.splitlines() if line.startswith("Traces' cost")]
    if shares:
        trace = [f"Traces' cost (bundled CMLM, mh, {len(shares)} runs): the monitor's epoch-end work and the "
                 f"per-position filing took {spread([100 * s for s in shares], '{:.2f}')}% of the wall time of "
                 "the sampling call (timed around those calls)."]
    return "\n".join(lines + [""] + trace)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", nargs="+", choices=sorted(CASES), default=list(DEFAULT_CASES))
    ap.add_argument("--samplers", nargs="+", choices=sorted(SAMPLERS), default=list(SAMPLERS))
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    ap.add_argument("--no-write", action="store_true", help="leave bench/RESULTS.md alone")
    args = ap.parse_args()
    torch.set_num_threads(1)
    mhfast.tune_cpu_allocator()
    t0 = time.perf_counter()
    cases, rows, shares = [], [], []
    for name in args.cases:
        case = CASES[name](args.quick)
        cases.append(case)
        r, s = case_rows(case, args.samplers)
        rows += r
        shares += s
    old = "" if args.no_write else results_md.read_section(START, END)
    text = report(cases, rows, shares, time.perf_counter() - t0, old)
    print(text)
    if not args.no_write:
        results_md.write_section(START, END, "## Effective samples per second (bench/bench_ess.py)\n\n" + text)
        print(f"wrote {results_md.RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
