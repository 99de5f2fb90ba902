"""Delayed acceptance (option delayed, issue 34) against plain single-site MH: rows, time and ESS per row.

Runs ``mhfast.sample`` on the same case with the same seeds under several settings, interleaved per seed (so the
shared machine's load hits them alike), and reports per setting: rows per proposal (model rows after the initial
scoring / proposals), rows per accepted change (the same rows / accepted proposals with X' != X), wall and CPU
seconds of the call, ArviZ's bulk-ESS of E_local over the post-burn-in sweeps (summed over inputs) per 1,000
rows and per CPU second, and delayed acceptance's stage-1 / stage-2 acceptance and rows saved.

Settings: ``mh`` (today's default: memo auto), ``mh-nomemo`` (memo 0: the rows plain MH forwards when the memo
cannot help), ``delayed-wK`` (option delayed window:K, the memo on as by default: it supplies remembered proposals'
terms to both stages; K = 0: the own term alone, no rows in stage 1), ``delayed-wK-nomemo`` (window:K with memo 0),
``delayed-iK`` (influence:K: as many rows as window:K, at the positions ranked by influence in burn-in), and
``oracle``: A BOUND, NOT A USABLE SAMPLER: ``delayed=`` a callable that returns each sequence's exact energy (bench/oracle_surrogate.py), so stage 1 is exact
MH's test and the sampler forwards rows only for the proposals that will be accepted; no first stage of any kind
forwards fewer rows per accepted change. Its own forwards are not in ``result.model_rows`` (it scores through
``mhfast.energy``, another runner); they are reported apart (``oracle rows``). ``block-mh`` and
``block-mh-delayed-wK``: block MH with blocks of 2 (bench_ess.py's), without and with its two-stage move (window:K
around the block; block MH has no memo); compare them with each other, not with ``mh`` (another move).
``distilled`` (an AntiBERTy case, ``--student FILE``): ``delayed=`` a small model's local energy
(``mhfast.surrogates.model_energy`` of a student trained by bench/distilled_mlm.py); its own rows are charged to the
run's ``rows`` at their measured cost in AntiBERTy rows, and listed apart (``student rows``); ``distilled-nomemo``
the same with memo 0 (compare it with ``mh-nomemo``).

Cases: ``antiberty-infill`` is bench/bench_ess.py's: AntiBERTy, T = 32 residues of adalimumab's VH, the last 8
free, energy local, 4 chains starting from the parent; ``cmlm-translate`` the main job (scripts/main.sh's
``mhfast translate`` sampler settings: the bundled De->En CMLM on the first 5 test sentences, energy raw, 5 chains,
12 epochs, burn-in 2, anneal 0.08; through ``mhfast.sample`` with the same options: its ESS is not meaningful, the
target moves each epoch, so compare rows per accepted change and the best energy); ``cmlm-fixed`` bench_ess.py's
``cmlm`` case (the first 2 sentences, energy raw, 5 chains, burn-in 2, a fixed temperature: its ESS is that of
one target); ``cmlm-table5`` / ``cmlm-table5-local`` the same 5 sentences with appendix F's Table 5 settings
(bench/paper/paper_experiments.py: energy raw / local, proposal temperature 0.8, the first 2 epochs forced to accept,
anneal 0.02 per epoch, 33 epochs, burn-in 7; a moving target, as cmlm-translate's); ``antiberty-random`` AntiBERTy,
T = 32 random residues, all free, energy local, 5 chains each from its own uniformly random residues (issue 34's
random start: ~90 CPU s a sweep, so 8 epochs, burn-in 2 by default; rows per accepted change is its figure, its
chains have not mixed); ``toy`` a tabular MLM (seconds, for a smoke run).

    python3 bench/bench_delayed.py --epochs 100 --seeds 0 1        # ~30 min on a loaded 2-core machine
    python3 bench/bench_delayed.py --case cmlm-translate --seeds 0 1 --settings mh mh-nomemo delayed-w2
    python3 bench/bench_delayed.py --case cmlm-fixed --epochs 40 --seeds 0 1 --settings mh delayed-w1 delayed-w2
    python3 bench/bench_delayed.py --case toy                      # seconds
    python3 bench/bench_delayed.py --case cmlm-fixed --epochs 40 --target-temperature 0.2 --settings mh early-2 delayed-i2
    python3 bench/bench_delayed.py --case cmlm-translate --device cuda --seeds 0 1 --settings mh delayed-i2 delayed-w1
    python3 bench/bench_delayed.py --epochs 100 --seeds 0 1 2 3 --settings mh delayed-w2 oracle   # the ceiling
    python3 bench/bench_delayed.py --epochs 100 --chains 5 --seeds 0 1 --settings mh delayed-i2 oracle   # 5 chains
    python3 bench/bench_delayed.py --case cmlm-translate --seeds 0 1 --settings block-mh block-mh-delayed-w1 block-mh-delayed-w2
    python3 bench/bench_delayed.py --from-log bench/delayed_runs/infill5-*.log      # RESULTS' tables from the logs
    python3 bench/bench_delayed.py --from-log bench/delayed_runs/translate-*.log --against delayed-w2

With ``mh`` among the settings (or ``--against``'s) a second table gives each setting's per-seed gains over it, as
geometric means over the seeds with 95% t-intervals, and its best energy's difference from it (:func:`seed_ratios`);
a run's stderr lines are what ``--from-log`` reads. At equal rows on the main job (the delayed settings given more
epochs on the same schedule stretched), the logs of the two runs together:

    python3 bench/bench_delayed.py --case cmlm-translate --epochs 30 --anneal 0.0303 --seeds 0 1 --settings delayed-w0
    python3 bench/bench_delayed.py --from-log mh.log stretched.log --settings mh delayed-w0   # later lines win

The best energy per row budget (a curve per setting: each setting at several epoch counts, each invocation's
stdout and stderr in a file of its own, against plain MH at the main job's 12 epochs; :func:`budget_table`):

    python3 bench/bench_delayed.py --case cmlm-translate --epochs 6 --anneal 0.176 --settings mh > mh6.log 2>&1
    python3 bench/bench_delayed.py --from-log mh6.log mh12.log c1-18.log c1-36.log --budget 12

Delayed acceptance only while warm (option ``delayed_min_temperature``; on an annealed case ``delayed-auto`` is
``delayed-i2-t0.25``):

    python3 bench/bench_delayed.py --case cmlm-translate --seeds 0 1 --settings delayed-auto delayed-i2-t0.5 > w 2>&1
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mhfast  # noqa: E402
from bench_ess import SAMPLERS as ESS_SAMPLERS  # noqa: E402
from bench_mixmatch import sync  # noqa: E402
from oracle_surrogate import ExactEnergyOracle, greedy_starts  # noqa: E402

SETTINGS = {"mh": {}, "mh-nomemo": {"memo": 0},
            **{f"delayed-w{k}": {"delayed": f"window:{k}"} for k in (0, 1, 2, 3, 4)},
            **{f"delayed-w{k}-nomemo": {"delayed": f"window:{k}", "memo": 0} for k in (2, 4)},
            **{f"delayed-i{k}": {"delayed": f"influence:{k}"} for k in (1, 2, 3)},
            # exact early rejection (delayed="early:K"): plain MH's chains, fewer rows (local energy only)
            **{f"early-{k}": {"delayed": f"early:{k}"} for k in (0, 1, 2, 4, 8)},
            # a cascade (delayed="cascade:K"): the own term first (no rows), then window:K's rows, then the rest
            **{f"delayed-c{k}": {"delayed": f"cascade:{k}"} for k in (1, 2)},
            # what delayed="auto" runs (CPU): influence:2, in an annealed run in the epochs at target temperature
            # >= 0.25 only
            "delayed-auto": {"delayed": "auto"},
            # delayed acceptance only while warm: plain MH's step in the epochs colder than the bound
            **{f"delayed-{k}-t{t}": {"delayed": d, "delayed_min_temperature": float(t)}
               for k, d in (("i2", "influence:2"), ("c1", "cascade:1")) for t in ("0.5", "0.33", "0.25", "0.17")},
            # block MH as bench_ess runs it (blocks of 2) with and without its two-stage move (the window around
            # the block; influence:K and callables are single-site only)
            "block-mh": ESS_SAMPLERS["block-mh"],
            **{f"block-mh-delayed-w{k}": {**ESS_SAMPLERS["block-mh"], "delayed": f"window:{k}"} for k in (1, 2)}}
DEFAULT_SETTINGS = ["mh", "mh-nomemo", "delayed-w1", "delayed-w2", "delayed-w3"]
#: epochs per case where not 100: the main job's 12, appendix F's 33, and 8 from a random start (~90 CPU s a sweep)
DEFAULT_EPOCHS = {"cmlm-translate": 12, "cmlm-table5": 33, "cmlm-table5-local": 33, "antiberty-random": 8}


def max_or_nan(values) -> float:
    """The largest value, or NaN where any is NaN (an input whose R-hat could not be computed is not hidden behind the
    others; plain ``max`` gave NaN or not depending on the order).

    >>> max_or_nan([1.3, float("nan")]), max_or_nan([1.3, 1.1])
    (nan, 1.3)
    """
    values = [float(v) for v in values]
    return float("nan") if any(v != v for v in values) else max(values)


def oracle_setting(model, inputs: dict, options: dict) -> dict:
    """``oracle``: A BOUND, NOT A SAMPLER. delayed=<the exact energy> (bench/oracle_surrogate.py): stage 1 is exact
    MH's test, so rows are forwarded only for proposals that will be accepted: no first stage forwards fewer."""
    sources = inputs.get("source")
    starts = greedy_starts(model, inputs, options) if sources is not None else None
    return {"delayed": ExactEnergyOracle(model, options["energy"], sources, starts)}


SETTINGS["oracle"] = oracle_setting

#: ``--student FILE``: the small model of the ``distilled`` setting (bench/distilled_mlm.py) and the measured cost of
#: one of its masked rows in rows of the sampled model
STUDENT: dict = {}


class CountingSurrogate:
    """``mhfast.surrogates.model_energy(small)`` that also counts the masked rows ``small`` forwards (one per energy
    position of every sequence it scores: X and X' of each tested proposal). Counting changes no value, so the
    surrogate stays a fixed function of the sequence."""

    def __init__(self, small, energy: str):
        from mhfast.models.base import never_proposed

        self.inner, self.rows = mhfast.surrogates.model_energy(small, energy), 0
        self.ordinary = ~never_proposed(small)  # (the energy positions of a complete sequence: the scoring rule)

    def __call__(self, tokens: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        self.rows += int(self.ordinary.to(tokens.device)[tokens].sum())
        return self.inner(tokens, pos)


def distilled_setting(model, inputs: dict, options: dict) -> dict:
    """``distilled``: delayed=<the student's local energy> (``--student FILE``). Its rows are charged to the run at
    their measured cost (:func:`one_run`): a first stage is judged with what it costs."""
    if "model" not in STUDENT:
        raise SystemExit("bench_delayed.py: setting distilled needs --student FILE (bench/distilled_mlm.py)")
    return {"delayed": CountingSurrogate(STUDENT["model"], options["energy"])}


SETTINGS["distilled"] = distilled_setting
# the same with memo 0: against mh-nomemo, what the student saves where the memo spares nothing
SETTINGS["distilled-nomemo"] = lambda model, inputs, options: {**distilled_setting(model, inputs, options), "memo": 0}
# "-terms": the memo as it was before it kept model rows (terms only: an accepted remembered X' forwards its rows)
SETTINGS.update({f"{k}-terms": SETTINGS[k] for k in ("mh", "delayed-w2", "delayed-i2", "oracle")})


@contextlib.contextmanager
def memo_rows_budget(setting: str):
    """Within: the memo keeps no model rows where ``setting`` ends in ``-terms`` (its byte budget set to 0)."""
    from mhfast.sampler import memo

    kept = memo.ROWS_BUDGET_BYTES
    memo.ROWS_BUDGET_BYTES = 0 if setting.endswith("-terms") else kept
    try:
        yield
    finally:
        memo.ROWS_BUDGET_BYTES = kept


def bundled_sources(n: int, device: str = "cpu") -> tuple:
    """``(the bundled CMLM on device, the source ids of its first n test sentences)``: the CMLM cases' inputs."""
    from mhfast.translation import bundled_test_file, load_bundled_model

    tr = load_bundled_model(device)
    lines = Path(bundled_test_file("bundled", "--input")).read_text(encoding="utf-8").splitlines()[:n]
    return tr.cmlm, [tr.source_ids(s) for s in lines]


def case_inputs(name: str, epochs: int, anneal: float = 0.08, device: str = "cpu") -> tuple:
    """(model, inputs, options, description) of case ``name`` (``anneal``: cmlm-translate's, per epoch), the model
    on ``device`` (the CMLM cases; AntiBERTy's weights do not travel to the GPU machine, the toy has no weights)."""
    if name == "toy":
        from mhfast.models.tabular import TabularMLM

        model = TabularMLM.random(num_tokens=3, length=8, seed=11, scale=0.5)
        return (model, {"init": torch.full((1, 8), model.mask_id)},
                dict(chains=4, epochs=epochs, burn_in=max(1, epochs // 8), energy="local", start="random"),
                "tabular MLM, 3 tokens, T=8, energy local, random starts")
    if name == "cmlm-fixed":  # bench/bench_ess.py's cmlm case: a fixed target, so its ESS means something
        from bench_ess import cmlm_case

        case = cmlm_case(False, device)
        return (case["model"], case["inputs"], {**case["options"], "epochs": epochs}, case["what"])
    if name == "cmlm-translate":
        cmlm, sources = bundled_sources(5, device)
        return (cmlm, {"source": sources}, dict(energy="raw", chains=5, epochs=epochs, burn_in=2, anneal=anneal),
                "bundled De->En CMLM, the first 5 test sentences, scripts/main.sh's sampler settings")
    if name in ("cmlm-table5", "cmlm-table5-local"):  # appendix F's Table 5 settings (bench/paper/paper_experiments.py)
        cmlm, sources = bundled_sources(5, device)
        energy = "local" if name.endswith("-local") else "raw"
        return (cmlm, {"source": sources},
                dict(energy=energy, chains=5, epochs=epochs, burn_in=7, anneal=anneal, proposal_temperature=0.8,
                     force_accept_epochs=2),
                f"bundled De->En CMLM, the first 5 test sentences, appendix F's Table 5 settings (energy {energy}, "
                f"proposal temperature 0.8, 2 forced-accept epochs, anneal {anneal}, burn-in 7)")
    from bench_ess import antiberty_case

    if name == "antiberty-random":  # issue 34's other AntiBERTy case: T=32, 5 chains, each from its own residues
        case = antiberty_case("random", False)
        return (case["model"], case["inputs"], {**case["options"], "chains": 5, "start": "random", "epochs": epochs,
                                                "burn_in": max(1, epochs // 4)},
                case["what"] + ", 5 chains each from its own uniformly random residues (start random)")
    case = antiberty_case("infill", False)
    return (case["model"], case["inputs"], {**case["options"], "epochs": epochs, "burn_in": max(1, epochs // 8)},
            case["what"])


def merged_runs(parts: list[dict]) -> dict:
    """One run's figures from runs of its inputs one at a time (counts and seconds summed, the rates weighted)."""
    out = {k: sum(p[k] for p in parts) for k in ("rows", "proposals", "changes", "cpu", "wall", "ess", "tested",
                                                 "passed", "accepted", "saved", "hits", "oracle rows")}
    out["accept"] = sum(p["accept"] * p["proposals"] for p in parts) / max(1, out["proposals"])
    out["best each"] = [v for p in parts for v in p["best each"]]
    out["best"] = sum(out["best each"]) / len(out["best each"])
    return out


def one_run(model, inputs: dict, options: dict, setting: str, seed: int) -> dict:
    if (setting.startswith("oracle") and options.get("force_accept_epochs") and len(inputs.get("source") or []) > 1):
        # the oracle tells a CMLM's inputs apart by lineage (bench/oracle_surrogate.py), which a forced-accept
        # epoch breaks (it moves the chains without a test, so the oracle never sees those states): one input
        # at a time instead, the same law; rows, changes and ESS add up
        return merged_runs([one_run(model, {**inputs, "source": [src]}, options, setting, seed)
                            for src in inputs["source"]])
    extra = SETTINGS[setting]
    extra = extra(model, inputs, options) if callable(extra) else extra  # (the oracle: a fresh memo per run)
    sync(model)
    cpu, wall = time.process_time(), time.perf_counter()
    with memo_rows_budget(setting):
        r = mhfast.sample(model, **inputs, **options, **extra, seed=seed)
    sync(model)  # the wall time of a device's run ends when its work does
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    oracle = extra.get("delayed") if isinstance(extra.get("delayed"), ExactEnergyOracle) else None
    rows = sampler_rows = r.model_rows - r.init_rows
    student = extra.get("delayed") if isinstance(extra.get("delayed"), CountingSurrogate) else None
    if student is not None:  # the student's rows at their cost in the sampled model's rows, charged to the run
        rows += round(student.rows * STUDENT["cost"])
    changes = int(r.chain_novel.sum())
    try:
        ess = sum(d["ess_bulk"]["e_local"] for d in r.diagnostics)
        rhat = max_or_nan(d["rhat"]["e_local"] for d in r.diagnostics)  # whether that ESS is one of mixed chains
    except ImportError:  # no arviz-stats (the GPU machine): the run's other figures still count
        ess = rhat = float("nan")
    best_each = r.energy.min(1).values.double()  # each input's lowest final energy
    best = float(best_each.mean())
    return {"rows": rows, "proposals": r.proposals, "changes": changes, "cpu": cpu, "wall": wall, "ess": ess, "rhat": rhat,
            "accept": float(r.acceptance_rate[r.burn_in:].mean()), "tested": r.delayed_tested,
            "passed": r.delayed_passed, "accepted": r.delayed_accepted, "saved": r.delayed_rows_saved,
            "hits": r.memo_hits, "best": best, "oracle rows": oracle.rows if oracle else 0,
            "best each": [round(v, 3) for v in best_each.tolist()],
            **({"student rows": student.rows, "sampler rows": sampler_rows} if student else {})}


def summary(runs: list[dict]) -> dict:
    """Sums over the seeds, then the ratios (ESS summed: the seeds are independent runs)."""
    s = {k: sum(r[k] for r in runs) for k in runs[0] if k not in ("best each", "rhat")}
    return {"rows/proposal": s["rows"] / s["proposals"], "rows/change": s["rows"] / max(s["changes"], 1),
            "accept": statistics.mean(r["accept"] for r in runs), "ESS": s["ess"],
            "ESS/1k rows": 1000 * s["ess"] / max(s["rows"], 1), "ESS/CPU s": s["ess"] / s["cpu"],
            "wall s": s["wall"], "CPU s": s["cpu"], "rows": s["rows"],
            "stage 1": s["passed"] / s["tested"] if s["tested"] else None,
            "stage 2": s["accepted"] / s["passed"] if s["passed"] else None, "rows saved": s["saved"],
            "memo hits": s["hits"], "best E": statistics.mean(r["best"] for r in runs),
            "oracle rows": s["oracle rows"] or None, "student rows": s.get("student rows"),
            # the largest R-hat of E_local over the seeds' inputs (logs before 2026-11-29 have none)
            "max R-hat": max_or_nan(r["rhat"] for r in runs) if all("rhat" in r for r in runs) else None}


def table(results: dict[str, dict]) -> str:
    cols = ["rows", "rows/proposal", "rows/change", "accept", "ESS", "ESS/1k rows", "ESS/CPU s", "wall s", "CPU s",
            "stage 1", "stage 2", "rows saved", "memo hits", "best E"]
    if any(s["oracle rows"] for s in results.values()):  # the oracle's own rows: not the sampler's (a bound)
        cols.append("oracle rows")
    if any(s["student rows"] for s in results.values()):  # the student's own rows (charged in rows at their cost)
        cols.append("student rows")
    if all(s["max R-hat"] is not None for s in results.values()):
        cols.append("max R-hat")
    fmt = lambda v: "-" if v is None else (f"{v:.3f}" if isinstance(v, float) and v < 10 else  # noqa: E731
                                           f"{v:.1f}" if isinstance(v, float) else str(v))
    lines = ["| setting | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for name, s in results.items():
        lines.append(f"| {name} | " + " | ".join(fmt(s[c]) for c in cols) + " |")
    return "\n".join(lines)


def seed_ratios(base: dict[int, dict], runs: dict[int, dict]) -> dict:
    """A setting's gains over ``base`` seed by seed (the runs of one seed share the seed, so each pair is a matched
    comparison): ``fewer rows/change`` = base's rows per accepted change over the setting's, ``ESS per row`` = the
    setting's ESS of E_local per row over base's, over the seeds both ran (``{seed: run}``). Each as the geometric
    mean over those seeds with a 95% t-interval of the mean log ratio (the seeds are independent runs), and the
    per-seed values. A seed where either side has no accepted change or no ESS is left out of that figure.
    ``best E`` = the setting's ``best`` (the mean over inputs of each input's lowest final energy) minus base's: an
    arithmetic mean over the seeds with its 95% t-interval (negative: the setting found lower energies), the figure
    of an annealed, mode-seeking run, where ESS is of a moving target.

    Example:
        >>> b = {0: {"rows": 100, "changes": 4, "ess": 10.0, "best": 1.0}, 1: {"rows": 100, "changes": 5, "ess": 10.0,
        ...                                                                    "best": 2.0}}
        >>> s = {0: {"rows": 50, "changes": 4, "ess": 10.0, "best": 0.5}, 1: {"rows": 50, "changes": 5, "ess": 20.0,
        ...                                                                   "best": 1.0}, 2: {}}
        >>> r = seed_ratios(b, s)
        >>> r["fewer rows/change"]["per seed"], r["ESS per row"]["per seed"], r["best E"]["per seed"]
        ([2.0, 2.0], [2.0, 4.0], [-0.5, -1.0])
        >>> round(r["ESS per row"]["mean"], 3), r["ESS per row"]["n"], r["best E"]["mean"]
        (2.828, 2, -0.75)
    """
    from scipy.stats import t as student_t

    def figure(values: list[float], log: bool = True) -> dict:
        x = torch.tensor(values, dtype=torch.float64)
        x = x.log() if log else x
        back = torch.exp if log else (lambda v: v)
        n = len(values)
        out = {"per seed": [round(v, 3) for v in values], "n": n, "mean": float(back(x.mean())) if n else None,
               "low": None, "high": None}
        if n >= 2:
            half = float(student_t.ppf(0.975, n - 1)) * float(x.std()) / n ** 0.5
            out["low"], out["high"] = float(back(x.mean() - half)), float(back(x.mean() + half))
        return out

    fewer, per_row, best = [], [], []
    for b, s in ((base[k], runs[k]) for k in sorted(set(base) & set(runs))):
        if b["changes"] and s["changes"]:
            fewer.append((b["rows"] / b["changes"]) / (s["rows"] / s["changes"]))
        if b["ess"] > 0 and s["ess"] > 0:
            per_row.append((s["ess"] / s["rows"]) / (b["ess"] / b["rows"]))
        if "best" in b and "best" in s:
            best.append(s["best"] - b["best"])
    return {"fewer rows/change": figure(fewer), "ESS per row": figure(per_row), "best E": figure(best, log=False)}


def _interval(f: dict) -> str:
    """A figure's 95% interval as " [low, high]" (empty where there is none: fewer than two seeds); an end beyond
    what the data can show (:func:`equal_energy_saving`'s resamples beyond its curve) reads "open"."""
    if f["low"] is None:
        return ""
    end = lambda v: "open" if v in (0.0, float("inf")) else f"{v:.2f}"  # noqa: E731
    return f" [{end(f['low'])}, {end(f['high'])}]"


def _figure_cell(f: dict, unit: str = "x") -> str:
    """One :func:`seed_ratios` figure as a table cell: mean, interval, per seed."""
    if f["mean"] is None:
        return "-"
    return f"{f['mean']:.2f}{unit}{_interval(f)}; " + ", ".join(f"{v:.2f}" for v in f["per seed"])


def ratio_table(runs: dict[str, dict[int, dict]], base: str) -> str:
    """The :func:`seed_ratios` of every setting but ``base``, as a markdown table."""
    lines = [f"| setting | seeds | fewer rows per accepted change than {base} (geometric mean [95% CI]; per seed) "
             f"| ESS of E_local per row over {base}'s (same) | best E minus {base}'s (mean [95% CI]; per seed) |",
             "|---|---|---|---|---|"]
    for name, r in runs.items():
        shared = set(runs[base]) & set(r)
        if name != base and shared:  # (settings that share no seed with base: nothing to pair)
            f = seed_ratios(runs[base], r)
            lines.append(f"| {name} | {len(shared)} | {_figure_cell(f['fewer rows/change'])} | "
                         f"{_figure_cell(f['ESS per row'])} | {_figure_cell(f['best E'], '')} |")
    return "\n".join(lines)


def print_tables(runs: dict[str, dict[int, dict]], against: str, label: bool = False) -> None:
    """The summary table of ``runs`` ({setting: {seed: run}}; ``label``: each setting's seed count in its name),
    then, with ``against`` among two or more settings, the per-seed gains over it (:func:`ratio_table`)."""
    print(table({f"{s} ({len(r)} seeds)" if label else s: summary(list(r.values())) for s, r in runs.items() if r}))
    if against in runs and len(runs) > 1:
        print()
        print(ratio_table(runs, against))


def logged_runs(paths: list[Path]) -> dict[str, dict[int, dict]]:
    """The runs logged by :func:`main` (stderr lines ``# seed S SETTING: {...}``) in ``paths``, as ``{setting:
    {seed: run}}`` in order of first appearance; the same (setting, seed) twice keeps the later line, with a warning on
    stderr where the two differ (logs of other runs of the same seeds, e.g. another epoch count or diagnostics from
    another version of the estimator: name the files to read explicitly, in order).

    Example:
        >>> import tempfile
        >>> log = Path(tempfile.mkdtemp()) / "a.log"
        >>> _ = log.write_text("# seed 3 mh: {'rows': 5, 'best each': [1.0]}\\nother output\\n")
        >>> logged_runs([log])
        {'mh': {3: {'rows': 5, 'best each': [1.0]}}}
    """
    import ast
    out: dict[str, dict[int, dict]] = {}
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("# seed "):
                head, _, run = line[len("# seed "):].partition(": ")
                seed, setting = head.split(" ", 1)
                runs, value = out.setdefault(setting, {}), ast.literal_eval(run)
                if int(seed) in runs and runs[int(seed)] != value:
                    differ = sorted(k for k in value if runs[int(seed)].get(k) != value[k])[:4]
                    print(f"warning: {path}: seed {seed} {setting} logged again with other values ({', '.join(differ)}):"
                          " the later line is kept", file=sys.stderr)
                runs[int(seed)] = value
    return out


Schedule = tuple[str, int, "float | None"]  #: a budget point: (setting, epochs, anneal per epoch, if logged)


def budget_points(paths: list[Path]) -> dict[Schedule, dict[int, dict]]:
    """The runs logged in ``paths`` (:func:`logged_runs`) keyed by (setting, epochs, anneal), so that one setting's
    runs on several schedules (stretched, squeezed, or with cold epochs added at the floor) stay apart. Each file must
    be the log of one invocation, or of several with the same schedule: it is read off the options its run printed
    (``'epochs': N``, ``'anneal': A``).

    Example:
        >>> import tempfile
        >>> log = Path(tempfile.mkdtemp()) / "a.log"
        >>> _ = log.write_text("# seed 3 mh: {'rows': 5}\\nbundled ...; {'epochs': 24, 'anneal': 0.04}; seeds [3]\\n")
        >>> budget_points([log])
        {('mh', 24, 0.04): {3: {'rows': 5}}}
    """
    import re
    out: dict[Schedule, dict[int, dict]] = {}
    for path in paths:
        text = path.read_text(encoding="utf-8")
        epochs = {int(e) for e in re.findall(r"'epochs': (\d+)", text)}
        anneal = {float(a) for a in re.findall(r"'anneal': ([0-9.e-]+)", text)}
        if len(epochs) != 1 or len(anneal) > 1:
            raise SystemExit(f"--budget: {path} logs runs of {sorted(epochs) or 'no'} epochs (anneal "
                             f"{sorted(anneal) or 'not logged'}); it needs the log of runs of one schedule (the stdout "
                             "and stderr of one invocation, e.g. 2>&1)")
        key = (next(iter(epochs)), next(iter(anneal)) if anneal else None)
        for setting, runs in logged_runs([path]).items():
            out.setdefault((setting, *key), {}).update(runs)
    return out


def equal_energy_saving(curve: list[dict[int, dict]], point: dict[int, dict], n_boot: int = 2000,
                        seed: int = 0) -> dict | None:
    """How many times fewer rows ``point`` ({seed: run}) needs than ``curve`` (the base setting's runs at several
    budgets, each {seed: run}) for the same best energy: the curve's rows at the point's mean best energy
    (interpolated linearly in log rows between the budgets that bracket it, the first such pair: the fewest rows,
    so the smallest saving) over the point's mean rows, over the seeds all of them ran. A 95% interval from
    resampling those seeds (paired: one resample serves every budget), the resamples whose energy falls outside the
    curve counted. When the point's own energy lies outside the curve (no budget brackets it), only which side:
    ``{"outside": "lower"}`` (below the largest budget's energy) or ``"higher"`` (above the smallest's); None when
    the curve has fewer than two budgets or no seed in common with the point.

    Example:
        >>> run = lambda rows, best: {k: {"rows": rows, "best": best + 0.1 * k} for k in range(4)}
        >>> curve = [run(100, 2.0), run(200, 1.0), run(400, 0.0)]  # each doubling of the rows: one nat
        >>> f = equal_energy_saving(curve, run(100, 1.0))  # plain MH's 200 rows' energy with 100
        >>> round(f["mean"], 3), f["seeds"], f["outside"]
        (2.0, 4, 0)
        >>> equal_energy_saving(curve, run(100, -1.0))  # lower than the curve's lowest: no figure, only the side
        {'outside': 'lower'}
    """
    import math
    import random

    seeds = sorted(set(point).intersection(*curve))
    if len(curve) < 2 or not seeds:
        return None

    def saving(picked: list[int]) -> float:
        """The saving for these seeds; beyond the curve's energies, 0 (a higher energy than all its budgets: fewer
        rows than its smallest would do) or inf (a lower one: more than its largest): a side, not a number."""
        stats = sorted((statistics.mean(c[k]["rows"] for k in picked), statistics.mean(c[k]["best"] for k in picked))
                       for c in curve)
        e = statistics.mean(point[k]["best"] for k in picked)
        for (r0, e0), (r1, e1) in zip(stats, stats[1:]):
            if e0 != e1 and (e0 - e) * (e1 - e) <= 0:
                t = (e0 - e) / (e0 - e1)
                return math.exp(math.log(r0) + t * (math.log(r1) - math.log(r0))) / statistics.mean(
                    point[k]["rows"] for k in picked)
        return math.inf if e < min(energy for _, energy in stats) else 0.0

    mean = saving(seeds)
    if mean in (0.0, math.inf):
        return {"outside": "lower" if mean == math.inf else "higher"}
    rng = random.Random(seed)
    # Percentiles over every resample, those beyond the curve kept on their side: dropping them (as this did before
    # 2026-11-30) moved the interval away from the side they were on (1.31x [1.06, 1.80] was [open, 1.80]).
    boot = sorted(saving([rng.choice(seeds) for _ in seeds]) for _ in range(n_boot))
    low, high = boot[int(0.025 * n_boot)], boot[min(n_boot - 1, int(0.975 * n_boot))]
    outside = sum(1 for v in boot if v in (0.0, math.inf))
    return {"mean": mean, "low": low, "high": high, "seeds": len(seeds), "outside": outside, "resamples": n_boot}


def _saving_cell(f: dict | None) -> str:
    if f is None:
        return "-"
    if isinstance(f["outside"], str):  # (no figure: a bound from noisy ends of a curve would read as one)
        return f"outside its curve ({f['outside']} energy than all its budgets)"
    out = f" ({f['outside']} of {f['resamples']:,} resamples beyond its curve)" if f["outside"] else ""
    return f"{f['mean']:.2f}x{_interval(f)}, {f['seeds']} seeds{out}"


def budget_table(points: dict[Schedule, dict[int, dict]], base: tuple[str, int]) -> str:
    """Each (setting, epochs, anneal) point's rows and best energy against ``base``'s ((setting, epochs): the one
    point of that setting at that many epochs), over the seeds it shares with base: the rows for the same seeds (a
    row budget, as a multiple of base's) and the best energy's paired difference (mean [95% t-interval]; per seed;
    negative: lower energies), and, where base's setting has two budgets or more, how many times fewer rows than its
    curve the point needs for its best energy (:func:`equal_energy_saving`). Sorted by setting, then rows: a curve of
    best energy against row budget per setting, the measure of an annealed, mode-seeking run.

    Example:
        >>> run = dict(changes=5, ess=1.0, cpu=1.0)
        >>> b = {k: {**run, "rows": 100, "best": 1.0 + k} for k in (0, 1)}
        >>> s = {k: {**run, "rows": 50, "best": 1.5 + 1.5 * k} for k in (0, 1)}
        >>> print(budget_table({("mh", 12, 0.08): b, ("delayed-c1", 18, 0.05): s}, ("mh", 12)).splitlines()[-1])
        | delayed-c1 | 18 | 0.05 | 2 | 100 (0.50x) | 2.0 | 2.250 | 0.75 [-2.43, 3.93]; 0.50, 1.00 | - |
    """
    found = [k for k in points if k[:2] == base]
    if len(found) != 1:
        raise SystemExit(f"--budget: {len(found)} logged schedules of {base[0]} at {base[1]} epochs "
                         f"({[k[2] for k in found]}); it needs one to compare with")
    ref = points[found[0]]
    curve = [runs for key, runs in points.items() if key[0] == base[0]]
    lines = [f"| setting | epochs | anneal | seeds | rows (vs {base[0]} at {base[1]} epochs) | CPU s | best E | best E "
             f"minus {base[0]}'s at {base[1]} epochs (mean [95% CI]; per seed) | {base[0]}'s rows for the same best E "
             f"over these (its curve; bootstrap 95% CI) |", "|---|---|---|---|---|---|---|---|---|"]
    # (by rows per seed: points may have run different numbers of seeds)
    order = sorted(points, key=lambda k: (k[0] != base[0], k[0],
                                          statistics.mean(r["rows"] for r in points[k].values())))
    for key in order:
        runs = points[key]
        seeds = sorted(set(runs) & set(ref))
        if not seeds:
            continue
        rows, ref_rows = sum(runs[k]["rows"] for k in seeds), sum(ref[k]["rows"] for k in seeds)
        best = seed_ratios({k: ref[k] for k in seeds}, {k: runs[k] for k in seeds})["best E"]
        diff = "-" if key == found[0] else _figure_cell(best, "")
        cpu, best_e = sum(runs[k]["cpu"] for k in seeds), statistics.mean(runs[k]["best"] for k in seeds)
        saving = "-" if key[0] == base[0] or len(curve) < 2 else _saving_cell(equal_energy_saving(curve, runs))
        lines.append(f"| {key[0]} | {key[1]} | {'-' if key[2] is None else key[2]} | {len(seeds)} | {rows} "
                     f"({rows / ref_rows:.2f}x) | {cpu:.1f} | {best_e:.3f} | {diff} | {saving} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", default="antiberty-infill", choices=(
        "antiberty-infill", "antiberty-random", "cmlm-translate", "cmlm-table5", "cmlm-table5-local", "cmlm-fixed",
        "toy"))
    ap.add_argument("--epochs", type=int, default=None, help="default: 100 (cmlm-translate: 12, the main job's; "
                    "cmlm-table5: 33, appendix F's; antiberty-random: 8, ~12 CPU min a setting and seed)")
    ap.add_argument("--anneal", type=float, default=None, help="the CMLM cases' decrease of the target temperature "
                    "per epoch (default: the main job's 0.08, Table 5's 0.02; e.g. 0.08 * 11 / (epochs - 1) "
                    "stretches the main job's schedule)")
    ap.add_argument("--chains", type=int, default=None, help="chains per input (default: the case's)")
    ap.add_argument("--target-temperature", type=float, default=None, help="the fixed-target cases' target "
                    "temperature (default: 1; cmlm-fixed, antiberty-infill, antiberty-random, toy: the annealed "
                    "cases refuse it)")
    ap.add_argument("--burn-in", type=int, default=None, help="burn-in epochs (default: the case's); what the "
                    "influence ranking (delayed-iK) learns from")
    ap.add_argument("--device", default="cpu", help="where the chains run (cuda: wall s is the figure; the "
                    "oracle setting is CPU-only)")
    ap.add_argument("--seeds", type=int, nargs="+", default=None, help="default: 0 1 (with --from-log: every seed "
                    "logged)")
    ap.add_argument("--against", default="mh", choices=list(SETTINGS), help="the setting the per-seed gains are "
                    "over (default: mh, today's default)")
    ap.add_argument("--settings", nargs="+", default=None, choices=list(SETTINGS),
                    help=f"default: {' '.join(DEFAULT_SETTINGS)} (with --from-log: every setting logged)")
    ap.add_argument("--student", default=None, metavar="FILE", help="the distilled setting's small model, saved by "
                    "bench/distilled_mlm.py (its rows are charged to the run at their measured cost)")
    ap.add_argument("--cost-reps", type=int, default=9, metavar="N",
                    help="timings of 256 rows (each model, interleaved) whose median is the student's row cost; "
                         "a smoke run takes 1")
    ap.add_argument("--from-log", type=Path, nargs="+", default=None, metavar="LOG",
                    help="run nothing: print the tables of the runs that earlier invocations logged to stderr "
                         "(their '# seed S SETTING: {...}' lines; a later line for the same seed and setting wins)")
    ap.add_argument("--budget", type=int, default=None, metavar="EPOCHS",
                    help="with --from-log: the best energy per row budget instead, each (setting, epochs) of the "
                         "logs against --against's runs at EPOCHS epochs (one invocation's stdout and stderr a file)")
    args = ap.parse_args()
    if args.cost_reps < 1:
        ap.error(f"--cost-reps: must be >= 1, got {args.cost_reps}")
    if args.budget is not None:
        if not args.from_log:
            ap.error("--budget reads logs: give them with --from-log")
        points = {k: {s: r for s, r in v.items() if args.seeds is None or s in args.seeds}
                  for k, v in budget_points(args.from_log).items() if args.settings is None or k[0] in args.settings}
        print(budget_table(points, (args.against, args.budget)))
        return 0
    if args.from_log:
        print_tables({s: {k: v for k, v in r.items() if args.seeds is None or k in args.seeds}
                      for s, r in logged_runs(args.from_log).items() if args.settings is None or s in args.settings},
                     args.against, label=True)
        return 0
    if args.seeds is None:
        args.seeds = [0, 1]
    if args.settings is None:
        args.settings = DEFAULT_SETTINGS
    if args.epochs is None:
        args.epochs = DEFAULT_EPOCHS.get(args.case, 100)
    if args.anneal is None:
        args.anneal = 0.02 if args.case.startswith("cmlm-table5") else 0.08
    torch.set_num_threads(1)
    model, inputs, options, what = case_inputs(args.case, args.epochs, args.anneal, args.device)
    if args.chains is not None:
        options = {**options, "chains": args.chains}
    if args.burn_in is not None:
        options = {**options, "burn_in": args.burn_in}
    if args.target_temperature is not None:
        if options.get("anneal"):
            ap.error(f"--target-temperature: case {args.case} is annealed (its schedule sets the temperature)")
        options = {**options, "target_temperature": args.target_temperature}
    if args.student:
        if "init" not in inputs:
            ap.error("--student: the distilled setting needs an AntiBERTy case (the student has its vocabulary)")
        import distilled_mlm
        import truncated_mlm

        STUDENT["model"] = distilled_mlm.load_student(args.student)
        length = int(inputs["init"].shape[1])
        STUDENT["cost"] = truncated_mlm.row_cost(model, {"s": STUDENT["model"]}, length, reps=args.cost_reps)["s"]
        print(f"# student {args.student}: one of its rows costs {STUDENT['cost']:.4f} of a row of the sampled model "
              f"({length} tokens, median of {args.cost_reps} interleaved timings)", file=sys.stderr, flush=True)
    runs: dict[str, dict[int, dict]] = {s: {} for s in args.settings}
    if args.device != "cpu":  # the device's warm-up (context, cuBLAS, kernels loaded: ~4 s on an H200), discarded
        for setting in args.settings:
            one_run(model, inputs, {**options, "epochs": 2, "burn_in": 1}, setting, 99)
    t0 = time.perf_counter()
    for seed in args.seeds:  # interleaved: every setting of a seed before the next seed
        for setting in args.settings:
            runs[setting][seed] = one_run(model, inputs, options, setting, seed)
            print(f"# seed {seed} {setting}: {runs[setting][seed]}", file=sys.stderr, flush=True)
    print(f"{what}; {options}; seeds {args.seeds}; {time.perf_counter() - t0:.0f} s in all\n")
    print_tables(runs, args.against)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
