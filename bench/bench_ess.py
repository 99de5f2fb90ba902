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
  the last 8 free, energy local, 4 chains from the parent, 3 seeds; epochs per sampler in :data:`ANTIBERTY_SIZES`
  (AntiBERTy forwards cost ~20 ms of CPU per row here);
* ``antiberty-random``: AntiBERTy, T = 32 random residues (bench_mixmatch's seeded random start), all free,
  energy local, 2 chains, 3 seeds (not in the default run, and not in the section's table: from a random start a
  single-site MH sweep of 4 chains forwards ~3,900 rows, ~78 s of one core here, and runs of 8 sweeps had R-hat
  1.5-3.3, an ESS set by the ranks alone; a stable ESS needs hundreds of sweeps per seed, so the section gives
  that cost in the case's line instead of numbers that mean nothing, and measures ``antiberty-random-t8``);
* ``antiberty-random-t8``: the same at T = 8 (4 chains, 30 sweeps, 3 seeds): where the mh-vs-mixmatch check of the
  same law runs in minutes (the mixmatch loop: 17 rows per proposal).

Samplers: ``mh`` with today's defaults (memo auto), ``block-mh`` (blocks of 2), the Gibbs baselines
``gibbs`` / ``block-gibbs`` as a reference only: they sample another distribution (paper, section 6), so their
ESS is of a different target; and ``mixmatch`` (the AntiBERTy cases): bench_mixmatch.mixmatch_loop, our
re-implementation of the mixmatch MH loop (same model, start, free sites, energy and MLM proposal, one thread,
2T+1 rows per proposal), traced after every sweep as mhfast traces (E_raw, E_local and the same seeded
projections, mhfast.sampler.traces.projections) and its ESS by the same ArviZ functions (diagnostics.diagnose).
It runs the same chain law as mh (tests/bench/test_mixmatch_loop.py checks it against enumeration), so its ESS
per draw should match mh's within noise: a line under the table compares them (mh's figures over the same
sweeps as the mixmatch run, since it is the shorter) and gives the ratio of ESS per CPU second.

``--runs FILE.json`` keeps every run (per case, sampler and seed, with its sizes) so that samplers and seeds can
be measured one process at a time (the expensive AntiBERTy rows were); the rows and the mh-vs-mixmatch lines are
made from all stored runs of the current sizes. bench/ess_runs.json holds the runs of the section's AntiBERTy
rows (the infilling Gibbs and mixmatch rows: 2026-11-26, 05:30-06:28 UTC).

The traces' cost: on the bundled CMLM's mh runs, the time spent recording traces and per-position tallies
(the monitor's epoch-end work and SiteCounts' filing, timed around those calls) as a share of the sampling
time. Writes its section of bench/RESULTS.md.

    python3 bench/bench_ess.py                              # the default cases, over an hour of one core
    python3 bench/bench_ess.py --quick --no-write           # a smoke run (seconds)
    python3 bench/bench_ess.py --cases cmlm --samplers mh   # re-measure some rows (the section keeps the others)
    python3 bench/bench_ess.py --cases antiberty-random --samplers mixmatch --seeds 1 --runs bench/ess_runs.json
"""
from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results_md  # noqa: E402

import mhfast  # noqa: E402
from mhfast.models.tabular import TabularMLM  # noqa: E402
from mhfast.sampler import diagnostics, traces  # noqa: E402

START, END = "<!-- bench_ess:start -->", "<!-- bench_ess:end -->"
SAMPLERS = {"mh": {}, "block-mh": {"sampler": "block-mh", "block_schedule": 2}, "gibbs": {"sampler": "gibbs"},
            "block-gibbs": {"sampler": "block-gibbs", "block_schedule": 2}, "mixmatch": {}}
#: not an mhfast sampler: bench_mixmatch's re-implementation of the mixmatch MH loop (cases with energy positions)
MIXMATCH = "mixmatch"


# ---------------------------------------------------------------------------- cases
def toy_case(quick: bool) -> dict:
    model = TabularMLM.random(num_tokens=4, length=5, seed=11, scale=0.5)
    return {"name": "toy", "what": "tabular MLM, 4 tokens, T=5, random logits x 0.5, energy local, random starts",
            "inputs": {"init": torch.full((1, 5), model.mask_id)}, "model": model, "seeds": [0, 1] if quick else [0, 1, 2],
            "options": dict(chains=4, epochs=60 if quick else 1100, burn_in=10 if quick else 100, energy="local",
                            start="random")}


def cmlm_case(quick: bool, device: str = "cpu") -> dict:
    from mhfast.translation import bundled_test_file, load_bundled_model

    tr = load_bundled_model(device)
    lines = Path(bundled_test_file("bundled", "--input")).read_text(encoding="utf-8").splitlines()[:1 if quick else 2]
    return {"name": "cmlm", "what": f"bundled De->En CMLM, {len(lines)} test sentences, main job's settings "
            "(energy raw, 5 chains, burn-in 2) at a fixed temperature", "model": tr.cmlm,
            "inputs": {"source": [tr.source_ids(s) for s in lines]}, "seeds": [0] if quick else [0, 1],
            **({} if quick else {"sizes": CMLM_SIZES}),
            "options": dict(chains=5 if not quick else 2, epochs=8 if quick else 40, burn_in=2, energy="raw")}


#: (epochs, burn-in) per sampler of the cmlm case (the others: 40 (2)). mh's chains had max R-hat 1.26 after 38
#: post-burn-in sweeps (2026-11-25), an ESS that was not yet one of the target, so mh runs 10x longer: ~0.5 s of one
#: core per sweep of 2 sentences x 5 chains, ~8 min per seed.
CMLM_SIZES = {"mh": (400, 40)}


def antiberty_case(kind: str, quick: bool, length: int = 32) -> dict:
    import bench_mixmatch
    from mhfast.models.antiberty import load_antiberty

    lm = load_antiberty()
    T = 8 if quick else length
    start, positions = bench_mixmatch.make_start(lm, T, "parent" if kind == "infill" else "random")
    free = torch.zeros_like(start, dtype=torch.bool)
    free[0, positions[-8:] if kind == "infill" else positions] = True
    name = f"antiberty-{kind}" + ("" if length == 32 else f"-t{length}")
    sizes = {"mh": (6, 1), MIXMATCH: (6, 1)} if quick else ANTIBERTY_SIZES[name.removeprefix("antiberty-")]
    return {"name": name, "model": lm, "seeds": [0, 1] if quick else [0, 1, 2],
            "what": (f"AntiBERTy, T={T} residues of adalimumab's VH, the last 8 free" if kind == "infill" else
                     f"AntiBERTy, T={T} random residues, all free") + ", energy local",
            "inputs": {"init": start, "free_positions": free}, "positions": positions, "sizes": sizes,
            "options": dict(chains=2 if quick or name == "antiberty-random" else 4, epochs=sizes["mh"][0],
                            burn_in=sizes["mh"][1], energy="local")}


#: (epochs, burn-in) per sampler of the AntiBERTy cases (the others: mh's), sized by a timing run to fit about an
#: hour of one core for the AntiBERTy rows (2026-11-26, AMD EPYC, load average 3-8): per sweep, infilling costs mh
#: ~0.6 s (the memo: few proposals change the parent), block-mh ~2.3 s and the mixmatch loop ~44 s (4 chains x 8
#: sites x 65 rows); from a random start mh forwards ~3,600 rows per sweep of 4 chains (~70 s), the mixmatch loop
#: 8,320 (~175 s). So the random case runs 2 chains and few sweeps, and the mixmatch loop is compared there (its
#: chains move every sweep; from the parent, 10 sweeps of 4 chains see almost no change and 12 sweeps cost ~9 min).
#: Measured: 6 post-burn-in sweeps from a random start at T=32 are still burn-in (R-hat 1.5-3.3, an ESS set by the
#: ranks alone, the same in every seed), so the same-law check runs on T=8 (random-t8: 4 chains, 30 sweeps; the
#: mixmatch loop 17 rows per proposal, ~4 s per sweep).
#: The Gibbs baselines forward ~5x mh's rows per infilling sweep (8 sites x 4 chains, then every epoch's rescoring
#: of 32 positions x 4 chains for the statistics: ~160 rows, ~3 s), so they run block-mh's 40 sweeps.
ANTIBERTY_SIZES = {"infill": {"mh": (200, 20), "block-mh": (40, 5), "gibbs": (40, 5), "block-gibbs": (40, 5),
                              MIXMATCH: (12, 2)},
                   "random": {"mh": (8, 2), MIXMATCH: (6, 2)}, "random-t8": {"mh": (30, 5), MIXMATCH: (30, 5)}}


CASES: dict[str, Callable[[bool], dict]] = {
    "toy": toy_case, "cmlm": cmlm_case, "antiberty-infill": lambda q: antiberty_case("infill", q),
    "antiberty-random": lambda q: antiberty_case("random", q),
    "antiberty-random-t8": lambda q: antiberty_case("random", q, length=8)}
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
def options_of(case: dict, sampler: str) -> dict:
    """The case's options for ``sampler``: its own epochs and burn-in where the case sizes them per sampler."""
    sizes = case.get("sizes", {}).get(sampler)
    return {**case["options"], **({} if sizes is None else {"epochs": sizes[0], "burn_in": sizes[1]})}


def one_run(case: dict, sampler: str, seed: int, clock: TraceClock | None = None) -> dict:
    if sampler == MIXMATCH:
        return mixmatch_run(case, seed)
    cpu, wall = time.process_time(), time.perf_counter()
    with clock.installed() if clock is not None else contextlib.nullcontext():
        r = mhfast.sample(case["model"], **case["inputs"], **options_of(case, sampler), **SAMPLERS[sampler], seed=seed)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    draws = window(r, r.burn_in)
    # The same figures as recomputing them from the traces with diagnose (mixmatch_run's way): checked, not assumed.
    if not all(np.allclose(list(diagnostics.diagnose(d, r.trace_names, ("ess_bulk",))["ess_bulk"].values()),
                           list(diag["ess_bulk"].values()), rtol=1e-12, equal_nan=True)
               for d, diag in zip(draws, r.diagnostics)):
        raise RuntimeError("the traces' ESS differs from result.diagnostics")
    # mh against the (shorter) mixmatch chains: also its figures over the mixmatch run's sweeps (the same
    # burn-in and length), since an ESS estimate depends on the chain's length where mixing is slow.
    short = case.get("sizes", {}).get(MIXMATCH) if sampler == "mh" else None
    same_length = {} if short is None else {f"short_{k}": v for k, v in ess_figures(window(r, short[1], short[0]),
                                                                                     r.trace_names).items()}
    return {**ess_figures(draws, r.trace_names), **same_length, "cpu": cpu, "wall": wall, "rows": r.model_rows,
            "accept": float(r.acceptance_rate[r.burn_in:].mean()), "load": os.getloadavg()[0],
            "trace_share": clock.seconds / wall if clock is not None else None}


def window(r: Any, first: int, last: int | None = None) -> list[np.ndarray]:
    """Each input's traced draws [C, D, S] of the sweeps ``first`` .. ``last`` - 1 (``last``: each input's
    ``epochs_run``) of the result ``r``."""
    return [r.traces[b, :, (r.trace_epochs >= first) & (r.trace_epochs < (int(r.epochs_run[b]) if last is None
                                                                             else last))].numpy()
            for b in range(r.traces.shape[0])]


def ess_figures(draws: list, names: list[str]) -> dict:
    """ESS of E_local and the smallest over the projections, summed over the inputs, the post-burn-in draws (all
    chains), the largest R-hat and E_local's largest (``rhat_e``), from each input's draws [C, D, S] (ArviZ's, through mhfast's diagnose)."""
    diags = [diagnostics.diagnose(d, names) for d in draws]
    return {"ess_e": sum(d["ess_bulk"]["e_local"] for d in diags),
            "ess_p": sum(min(v for k, v in d["ess_bulk"].items() if k.startswith("proj_")) for d in diags),
            "draws": sum(d.shape[0] * d.shape[1] for d in draws),
            # NaN: a summary no chain ever changed (ArviZ cannot rank it); the largest of the others
            "rhat": max((v for d in diags for v in d["rhat"].values() if v == v), default=float("nan")),
            "rhat_e": (lambda v: float("nan") if any(x != x for x in v) else max(v))(  # NaN shows, in any order
                [d["rhat"]["e_local"] for d in diags])}


def mixmatch_run(case: dict, seed: int) -> dict:
    """The mixmatch loop (bench_mixmatch.mixmatch_loop: 2T+1 rows per proposal) on the case's model, start, free
    sites and energy, traced as mhfast traces (E_raw, E_local, the same seeded projections) after every sweep."""
    import bench_mixmatch

    lm, opts = case["model"], options_of(case, MIXMATCH)
    start, positions, sites, chains_free = mixmatch_inputs(case, opts["chains"])
    names = traces.summary_names(None)
    kept: list[torch.Tensor] = []

    def on_sweep(sweep: int, x: torch.Tensor, energies: torch.Tensor) -> None:
        if sweep >= opts["burn_in"]:
            kept.append(torch.cat([energies.float(), traces.projections(x, chains_free, lm.vocab_size)], dim=1))
    cpu, wall = time.process_time(), time.perf_counter()
    out = bench_mixmatch.mixmatch_loop(lm, start, positions, sites, torch.float32, seed=seed, energy=opts["energy"],
                                       sweeps=opts["epochs"], on_sweep=on_sweep)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    per_sweep = out["proposals"] // opts["epochs"]
    return {**ess_figures([torch.stack(kept, dim=1).numpy()], names), "cpu": cpu, "wall": wall, "rows": out["rows"],
            "accept": sum(out["accepted"][opts["burn_in"]:]) / (per_sweep * (opts["epochs"] - opts["burn_in"])),
            "load": os.getloadavg()[0], "trace_share": None}


def mixmatch_inputs(case: dict, chains: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """What the mixmatch loop runs on for a one-input case with ``free_positions``, as mhfast's mh gets it: the
    start of every chain Long[C, W], the energy positions (the case's ``positions``: every residue, the fixed ones
    included, as mhfast's energy mask), the proposal sites (the free positions only: the others never change) and
    the chains' free mask Bool[C, W] (the projections sum over it, as mhfast's traces do).
    tests/bench/test_mixmatch_loop.py checks these against mhfast's own Problem of the case.

    Example:
        >>> init, free = torch.tensor([[2, 5, 6, 7, 3]]), torch.tensor([[False, False, True, True, False]])
        >>> case = {"inputs": {"init": init, "free_positions": free}, "positions": torch.arange(1, 4)}
        >>> start, positions, sites, chains_free = mixmatch_inputs(case, 2)
        >>> start.shape, positions.tolist(), sites.tolist(), chains_free.shape
        (torch.Size([2, 5]), [1, 2, 3], [2, 3], torch.Size([2, 5]))
    """
    init, free = case["inputs"]["init"], case["inputs"]["free_positions"]
    if init.shape[0] != 1 or free.shape != init.shape:
        raise ValueError(f"case: one input row with a free_positions mask of its shape, got init {tuple(init.shape)} "
                         f"and free_positions {tuple(free.shape)}")
    return init.repeat(chains, 1), case["positions"], free[0].nonzero()[:, 0], free.expand(chains, -1)


def spread(values: list[float], fmt: str = "{:.1f}") -> str:
    """mean (min-max) of the seeds, or the one value."""
    if len(values) == 1:
        return fmt.format(values[0])
    return f"{fmt.format(statistics.mean(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def case_rows(case: dict, samplers: list[str], store: dict | None = None
              ) -> tuple[list[str], list[float], dict[str, list[dict]]]:
    """The case's table rows, the traces' cost shares (cmlm, mh) and each sampler's runs (one per seed); the load
    average after each run goes to ``case["loads"]``. With a ``store`` (``--runs``: {case: {sampler: [run]}}),
    each new run joins the stored runs of the same sampler and sizes (replacing its seed's), the store is saved
    after every run, and the rows and the runs returned are over all of them."""
    rows, shares, runs_of = [], [], {}
    stored = {} if store is None else store.setdefault(case["name"], {})
    for sampler in samplers:
        if sampler == MIXMATCH and "positions" not in case:
            print(f"  {case['name']}: no mixmatch row (its loop needs an unconditional model's energy positions)")
            continue
        sizes = [options_of(case, sampler)[k] for k in ("chains", "epochs", "burn_in")]
        runs = [r for r in stored.get(sampler, []) if r.get("sizes") == sizes and r["seed"] not in case["seeds"]]
        for seed in case["seeds"]:
            clock = TraceClock() if case["name"] == "cmlm" and sampler == "mh" else None
            runs.append({**one_run(case, sampler, seed, clock), "seed": seed, "sizes": sizes})
            if clock is not None:
                shares.append(runs[-1]["trace_share"])
            print(f"  {case['name']} {sampler} seed {seed}: {runs[-1]}", flush=True)
            if store is not None:
                stored[sampler] = sorted(runs, key=lambda r: r["seed"])
                store["save"]()
        if runs:
            runs_of[sampler] = sorted(runs, key=lambda r: r["seed"])
            rows.append(table_row(case["name"], sampler, runs_of[sampler]))
    if store is not None:
        runs_of = {**stored, **runs_of}
    case["loads"] = [r["load"] for runs in runs_of.values() for r in runs]
    case["seeds"] = sorted({r.get("seed", -1) for runs in runs_of.values() for r in runs}) if store else case["seeds"]
    return rows, shares, runs_of


def table_row(name: str, sampler: str, runs: list[dict]) -> str:
    """One line of the table: each cell the mean (min-max) over the seeds' ``runs``."""
    col = lambda key: [r[key] for r in runs]  # noqa: E731
    per_s = lambda key: [r[key] / r["cpu"] for r in runs]  # noqa: E731
    per_k = lambda key: [1000 * r[key] / max(r["rows"], 1) for r in runs]  # noqa: E731
    seeds = f"{len(runs)} seed" + ("s" if len(runs) > 1 else "")
    return (f"| {name} | {sampler} | {runs[0]['draws']}; {seeds} | {spread(col('accept'), '{:.3f}')} | "
            f"{spread(col('ess_e'), '{:.0f}')} | {spread(col('ess_p'), '{:.0f}')} | "
            f"{spread(per_s('ess_e'), '{:.2f}')} | {spread(per_s('ess_p'), '{:.2f}')} | "
            f"{spread(per_k('ess_e'), '{:.1f}')} | {spread(per_k('ess_p'), '{:.1f}')} | "
            f"{spread(col('rows'), '{:.0f}')} | {spread(col('cpu'), '{:.1f}')} | "
            f"{spread(col('rhat'), '{:.3f}')} |")


def same_law_line(name: str, runs_of: dict[str, list[dict]]) -> str | None:
    """mhfast's mh against the mixmatch loop on one case: the same chain law, so the same ESS per draw up to noise
    (mh's figures over the mixmatch chains' sweeps; the difference of the seeds' means in units of its standard
    error), and the ESS per CPU second compared (each over its own run)."""
    if "mh" not in runs_of or MIXMATCH not in runs_of:
        return None
    mh, mix = runs_of["mh"], runs_of[MIXMATCH]
    parts = []
    # A window in which no chain changed any summary has no ESS (diagnostics: NaN; runs stored before 2026-11-30
    # hold ArviZ's old "ESS = draws" there): left out, and counted in the caveat
    moved = lambda runs, rhat: [r for r in runs if r.get(rhat, 0.0) == r.get(rhat, 0.0)]  # noqa: E731
    for key, what in (("ess_e", "E_local"), ("ess_p", "the smallest projection")):
        a = [100 * r[f"short_{key}"] / r["short_draws"] for r in moved(mh, "short_rhat")]
        b = [100 * r[key] / r["draws"] for r in moved(mix, "rhat")]
        if min(len(a), len(b)) < 2:
            parts.append(f"ESS of {what} per 100 draws: fewer than 2 windows that moved in an arm, nothing to "
                         "compare")
            continue
        diff = statistics.mean(a) - statistics.mean(b)
        se = (statistics.variance(a) / len(a) + statistics.variance(b) / len(b)) ** 0.5
        if math.isnan(se) or se == 0:  # every seed's ESS the same function of the ranks: nothing to compare
            parts.append(f"ESS of {what} per 100 draws {spread(a)} (mh) vs {spread(b)} (mixmatch): not comparable "
                         "at this length (no spread over the seeds)")
            continue
        parts.append(f"ESS of {what} per 100 draws {spread(a)} (mh) vs {spread(b)} (mixmatch), difference "
                     f"{diff:+.1f} = {diff / se:+.1f} standard errors")
    # CPU of the post-burn-in sweeps only (prorated by sweeps): the arms' burn-in shares differ (infilling: mh 20 of
    # 200 sweeps, the loop 2 of 12), and the ESS and the draws count those sweeps alone
    cpu = lambda r: r["cpu"] * (r["sizes"][1] - r["sizes"][2]) / r["sizes"][1]  # noqa: E731
    rate = lambda runs: statistics.mean(r["ess_e"] / cpu(r) for r in runs)  # noqa: E731
    per_draw = lambda runs: statistics.mean(cpu(r) / r["draws"] for r in runs)  # noqa: E731
    return (f"- Same law, `{name}` ({len(mh)} and {len(mix)} seeds; mh's first {mh[0]['short_draws']} post-burn-in "
            f"draws, those of the mixmatch runs' sweeps): " + "; ".join(parts) + window_caveat(mh, mix) +
            ". ESS of E_local per CPU second "
            f"(each over its post-burn-in sweeps, their CPU prorated by sweeps): mh {rate(mh) / rate(mix):.1f}x the "
            f"mixmatch loop's; CPU per draw: mixmatch {per_draw(mix) / per_draw(mh):.1f}x mh's.")


def window_caveat(mh: list[dict], mix: list[dict]) -> str:
    """Why the compared windows' ESS per draw is no test of the law, or "": windows in which no chain changed
    any summary (its R-hat NaN: no ESS, left out of the comparison) and windows whose R-hat
    is above 1.01 (their ESS are not effective sample sizes; the legend).

    >>> window_caveat([{"short_rhat": float("nan")}], [{"rhat": 1.2}])
    ' (1 of the 2 windows never changed: no ESS, left out; R-hat of the others up to 1.20: at this length these ESS are not effective sample sizes, so their difference is no test of the law; tests/bench/test_mixmatch_loop.py tests it by enumeration)'
    """
    rhats = [r.get("short_rhat", float("nan")) for r in mh] + [r["rhat"] for r in mix]
    still = sum(1 for v in rhats if v != v)  # NaN
    worst = max((v for v in rhats if v == v), default=float("nan"))
    parts = [f"{still} of the {len(rhats)} windows never changed: no ESS, left out"] if still else []
    if worst > 1.01:
        parts.append(f"R-hat of the {'others' if still else 'windows'} up to {worst:.2f}")
    return "" if not parts else (" (" + "; ".join(parts) + ": at this length these ESS are not effective sample "
                                 "sizes, so their difference is no test of the law; tests/bench/test_mixmatch_loop.py "
                                 "tests it by enumeration)")


def _merged(old: str, new: dict[str, str], key: Callable[[str], str | None]) -> list[str]:
    """The lines of ``old`` that ``key`` recognises, each replaced by ``new``'s line of the same key, then
    ``new``'s other lines (a run of some cases keeps the other cases' lines of the section). A list item that
    RESULTS.md holds wrapped (continuation lines indented) counts as one line."""
    lines, seen = [], set()
    for line in unwrapped(old):
        k = key(line)
        if k is not None:
            lines.append(new.get(k, line))
            seen.add(k)
    return lines + [line for k, line in new.items() if k not in seen]


def unwrapped(text: str) -> list[str]:
    """The lines of ``text`` with each indented continuation line (results_md.wrap_prose's wrapping of a list
    item) joined to the line before it.

    >>> unwrapped(chr(10).join(["* `a`: one", "  two", "| x |"]))
    ['* `a`: one two', '| x |']
    """
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith("  ") and lines and lines[-1][:2] in ("* ", "- "):
            lines[-1] += " " + line.strip()
        else:
            lines.append(line)
    return lines


def sizes_text(case: dict) -> str:
    """'E epochs (B burn-in)', and each sampler's own where the case sizes them per sampler."""
    opts = case["options"]
    own = ", ".join(f"{k} {e} ({b})" for k, (e, b) in case.get("sizes", {}).items())
    return f"{opts['epochs']} epochs ({opts['burn_in']} burn-in)" + (f"; per sampler: {own}" if own else "")


#: How to read a row's ESS by its max R-hat (ArviZ's threshold is 1.01, Vehtari et al. 2021).
RHAT_LEGEND = (
    "max R-hat: the largest over every input and summary. Read a row's ESS by it: at or below 1.01 (ArviZ's "
    "threshold) the chains agree and the ESS is an effective sample size of the target, to the spread over the "
    "seeds; above 1.01 they have not been shown to agree: ArviZ's ESS then counts the disagreement between the "
    "chains that it sees (it is low for that), but not the parts of the target that no chain has reached, so it "
    "is at best an upper bound, and its spread over the seeds says how unstable it is (below 1.1, good enough to "
    "rank samplers that run the same draws; with a few draws it is set by the ranks alone, the same in every "
    "seed); above 1.1 the chains have not mixed: the ESS columns are ArviZ's figure for those draws, not an "
    "effective sample size of the target (compare such rows by CPU per draw, or as the same-law lines below do, "
    "sampler against sampler on the same target).")


def report(cases: list[dict], rows: list[str], shares: list[float], seconds: float, old: str = "",
           laws: dict[str, str] | None = None) -> str:
    bullet_key = lambda line: line.split("`")[1] if line.startswith("* `") else None  # noqa: E731
    law_key = lambda line: line.split("`")[1] if line.startswith("- Same law, `") else None  # noqa: E731
    row_key = lambda line: "|".join(line.split("|")[1:3]) if line.startswith("| ") and not line.startswith(  # noqa: E731
        "| case") else None
    bullets = {c["name"]: f"* `{c['name']}`: {c['what']}; {c['options']['chains']} chains, {sizes_text(c)}, seeds "
               f"{c['seeds']}; load average {spread(c['loads'])} at the end of its runs" for c in cases}
    lines = [f"Machine: {results_md.machine_description()}.", f"Last run: {seconds / 60:.1f} min of wall time "
             f"({', '.join(c['name'] for c in cases)}).", ""]
    lines += _merged(old, bullets, bullet_key)
    lines += ["", "ESS: ArviZ's bulk-ESS over the post-burn-in sweeps (draws: sweeps x chains), summed over the run's "
              "inputs; `proj` = the "
              "smallest over the 3 traced projections. Per CPU second of the sampling call (one torch thread) "
              "and per 1,000 forwarded rows. Each cell: mean (min-max) over the seeds. gibbs / block-gibbs sample "
              "another distribution (reference only). mixmatch: bench/bench_mixmatch.py's re-implementation of the "
              "mixmatch MH loop (the same model, start, free sites, energy and MLM proposal as mh, one thread; 2T+1 "
              "rows per proposal, both energies from scratch), traced as mhfast traces (E_raw, E_local, the same "
              "seeded projections), its ESS by the same ArviZ functions. " + RHAT_LEGEND, "",
              "| case | sampler | draws | accept | ESS E_local | ESS proj | ESS E_local / s | ESS proj / s | "
              "ESS E_local / 1k rows | ESS proj / 1k rows | rows | CPU s | max R-hat |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += _merged(old, {row_key(r): r for r in rows}, row_key)
    same = _merged(old, laws or {}, law_key)
    lines += [""] + same if same else []
    old_lines = old.splitlines()  # the traces' paragraph, as RESULTS.md holds it wrapped
    start = next((i for i, line in enumerate(old_lines) if line.startswith("Traces' cost")), len(old_lines))
    trace = [" ".join(itertools.takewhile(bool, old_lines[start:]))] if start < len(old_lines) else []
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
    ap.add_argument("--seeds", type=int, nargs="*", default=None,
                    help="these seeds (default: each case's; none, with --runs: only the stored runs, no new ones)")
    ap.add_argument("--runs", type=Path, default=None,
                    help="a JSON file of per-seed runs: the new ones are added (saved after each run), and the rows "
                         "and the mh-vs-mixmatch lines are made from all the stored runs of the same sizes (so "
                         "samplers and seeds can be run one process at a time)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    mhfast.tune_cpu_allocator()
    t0 = time.perf_counter()
    cases, rows, shares, laws = [], [], [], {}
    store = None
    if args.runs is not None:
        store = json.loads(args.runs.read_text()) if args.runs.exists() else {}
        store["save"] = lambda: args.runs.write_text(json.dumps({k: v for k, v in store.items() if k != "save"},
                                                                indent=1))
    for name in args.cases:
        case = CASES[name](args.quick)
        case["seeds"] = case["seeds"] if args.seeds is None else args.seeds
        cases.append(case)
        r, s, runs_of = case_rows(case, args.samplers, store)
        rows += r
        shares += s
        law = same_law_line(name, runs_of)
        if law is not None:
            laws[name] = law
    old = "" if args.no_write else results_md.read_section(START, END)
    text = report(cases, rows, shares, time.perf_counter() - t0, old, laws)
    print(text)
    if not args.no_write:
        results_md.write_section(START, END, "## Effective samples per second (bench/bench_ess.py)\n\n" + text)
        print(f"wrote {results_md.RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
