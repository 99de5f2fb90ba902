"""Parallel tempering against plain MH (issue 38): effective samples per 1,000 model rows and per CPU second, and
the lowest energy reached per row budget against annealing.

Cases (``--cases``):

* ``antiberty-infill``: AntiBERTy, T = 32 residues of adalimumab's VH (bench_mixmatch.PARENT), the last 8 free,
  energy local, 4 chains from the parent (bench/bench_ess.py's case), single-site MH with today's defaults,
  plain against ``tempering=K`` (a ladder tuned in burn-in), the same seeds and epochs. Figures: bulk-ESS of
  E_local and the smallest bulk-ESS of the traced random projections (ArviZ, ``result.diagnostics``) over the
  post-burn-in sweeps of the target chains, per 1,000 forwarded rows (every replica's rows counted) and per CPU
  second of the call; the largest rank-normalized split R-hat over the summaries; the tempering counters.
* ``antiberty-random``: the same from T random residues, all free (``--random-length``; 32 in the issue; a
  sweep of 4 chains forwards ~4,000 rows at T = 32, so short chains only).
* ``antiberty-dispersed``: AntiBERTy, T random residues (``--dispersed-length``, 8 by default: at T = 32 one
  sweep of 4 chains from noise costs ~75 s of CPU here), all free, energy local, 4 chains each started from its
  own uniformly random residues (``start="random"``: over-dispersed, so R-hat can see chains that have not met),
  plain single-site MH against ``tempering=K`` tuned in burn-in, **at equal model rows**: the tempered run goes
  first (``--dispersed-epochs`` sweeps, ``--dispersed-burn-in``), then plain MH runs ``--plain-factor`` x K
  times as many sweeps and is cut where its forwarded rows reach the tempered run's: its burn-in ends where its
  rows reach those of the tempered burn-in, its draws end at the last sweep within the tempered run's total
  (:func:`equal_rows`).
  Both from their own traces by the same ArviZ functions (``diagnostics.diagnose``); per chain, the lowest and
  the mean E_local of its draws (do all chains reach the same low-energy region?).
* ``sapiens-dispersed``: the same on Sapiens' heavy-chain MLM (``mhfast.models.sapiens``, a 4-layer RoBERTa, ~0.3 ms
  a masked row here against AntiBERTy's ~6-20 ms, so runs of a million rows are affordable): T residues
  (``--dispersed-length``) between ``<s>`` and ``</s>``, all free, 4 chains from their own random residues.
  With ``--exact`` (``antiberty-dispersed`` at T <= 3) the target is enumerated too: each run's mean E_local and
  its error against the exact one in MCSE units (sd / sqrt(ESS)): a check of the estimates, not only of agreement.
  Both dispersed cases sample at ``--dispersed-temperature`` (1 by default; 0.5 sharpens the target, deepening its
  basins: where plain MH stays in the basin it started in, the setting replica exchange is for).
* ``cmlm-fixed``: the same equal-rows comparison on the bundled De->En CMLM at target temperature 1 (energy raw,
  5 chains from the warm start, the first 2 test sentences: bench/bench_ess.py's ``cmlm`` case, where plain MH's
  chains had max R-hat 1.21 after 360 post-burn-in sweeps); sweeps and burn-in from ``--dispersed-epochs`` and
  ``--dispersed-burn-in``.
* ``two-mode``: the coupled two-mode tabular model of tests/exact_checks.py, chains started in both modes
  (cheap; shows the R-hat goal where plain MH provably does not cross).
* ``cmlm``: the bundled De->En CMLM (``mhfast translate``'s model), the first test sentences, energy raw,
  5 chains: the lowest raw energy per token reached by the target chains (their traced E_raw) against the rows
  forwarded so far, for the paper's annealing (target temperature 1 - 0.08 per epoch, the main job's) and for
  tempering at a fixed target temperature (``--cmlm-temperature``) with K rungs.

One torch thread (the shared machine's cores spin against each other otherwise); CPU seconds by
``time.process_time``. Prints a markdown section (``--out`` writes it to a file).

    python3 bench/bench_tempering.py --quick                       # a smoke run (a minute)
    python3 bench/bench_tempering.py --cases antiberty-infill --epochs 60 --out /tmp/infill.md
"""
from __future__ import annotations

import argparse
import datetime
import math
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mhfast  # noqa: E402
from mhfast.sampler.diagnostics import array_stats  # noqa: E402
from mhfast.models.base import ordinary_tokens  # noqa: E402  (replicates.py reads it from here)


def antiberty_case(kind: str, T: int, chains: int, device: str = "cpu") -> dict:
    import bench_mixmatch
    from mhfast.models.antiberty import load_antiberty

    lm = load_antiberty(device=device)
    start, positions = bench_mixmatch.make_start(lm, T, "parent" if kind == "infill" else "random")
    free = torch.zeros_like(start, dtype=torch.bool)
    free[0, positions[-8:] if kind == "infill" else positions] = True
    what = (f"AntiBERTy, T={T} residues of adalimumab's VH, the last 8 free" if kind == "infill" else
            f"AntiBERTy, T={T} random residues, all free") + f", energy local, {chains} chains from the start"
    return {"name": f"antiberty-{kind}", "model": lm, "what": what, "inputs": {"init": start, "free_positions": free},
            "options": dict(chains=chains, energy="local")}


def two_mode_case(chains: int) -> dict:
    """The tests' coupled two-mode tabular model (tests/exact_checks.py, T = 6, J = 2): all-a and all-b have equal
    energy; half of the chains start in each mode, so R-hat sees whether they cross."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from exact_checks import coupled_modes

    model = coupled_modes(J=2.0)
    init = torch.tensor([[0] * 6] * (chains // 2) + [[1] * 6] * (chains - chains // 2))[None]
    return {"name": "two-mode", "model": model, "inputs": {"init": init},
            "what": f"tabular two-mode model (T=6, J=2), {chains} chains, half started in each mode, energy local, "
                    "uniform_mix 0.2", "options": dict(chains=chains, energy="local", uniform_mix=0.2)}


def sapiens_case(T: int, chains: int, device: str = "cpu") -> dict:
    """Sapiens' heavy-chain MLM (a 4-layer fairseq RoBERTa, ~0.3 ms a masked row here: long runs are affordable),
    ``T`` residues between ``<s>`` and ``</s>`` (``model.frame``), all free, energy local."""
    from mhfast.models.sapiens import load_sapiens

    return {"name": "sapiens", "model": load_sapiens("H", device=device), "inputs": {"length": T},
            "what": f"Sapiens heavy-chain MLM (4-layer RoBERTa), T={T} residues, all free, energy local, "
                    f"{chains} chains",
            "options": dict(chains=chains, energy="local")}


def dispersed_case(model: str, T: int, chains: int, temperature: float = 1.0, device: str = "cpu") -> dict:
    """``model``'s (``"antiberty"`` or ``"sapiens"``, loaded on ``device``) T free residues, every chain from its own
    uniformly random residues (``start="random"``: over-dispersed, so R-hat can see chains that have not met), at
    target ``temperature`` (below 1 the target is sharper: its basins are deeper, the case plain MH finds hardest)."""
    case = (antiberty_case("random", T, chains, device) if model == "antiberty" else
            sapiens_case(T, chains, device))
    case["name"] = f"{model}-dispersed"
    case["what"] = (f"{'AntiBERTy' if model == 'antiberty' else 'Sapiens heavy-chain MLM (4-layer RoBERTa)'}, T={T} "
                    f"random residues, all free, energy local, {chains} chains, each from its own random residues "
                    f"(start random), target temperature {temperature:g}")
    case["options"].update(start="random", target_temperature=temperature)
    return case


def enumerated_target(case: dict, max_states: int = 20000) -> tuple[torch.Tensor, torch.Tensor]:
    """Every sequence the case's chains can reach (its ``init`` outside the free positions, ordinary tokens, what the
    sampler proposes, at them) and its E_local by ``mhfast.energy``: ``(states Long[S, W], e_local f64[S])``. Only
    for the ``antiberty-dispersed`` case at small T (20^T sequences, at most ``max_states``)."""
    import itertools

    lm, init = case["model"], case["inputs"].get("init")
    if init is None:
        raise ValueError(f"--exact: the {case['name']} case has no init to enumerate around (antiberty-dispersed only)")
    free = case["inputs"]["free_positions"][0].nonzero().flatten().tolist()
    words = ordinary_tokens(lm)
    if len(words) ** len(free) > max_states:
        raise ValueError(f"--exact: {len(words)}^{len(free)} sequences is more than {max_states}: use a smaller "
                         "--dispersed-length")
    states = init.repeat(len(words) ** len(free), 1)
    states[:, free] = torch.tensor(list(itertools.product(words, repeat=len(free))))
    return states, torch.cat([mhfast.energy(lm, chunk, energy="local").e_local.double()
                              for chunk in states.split(2000)])


def exact_mean_e_local(case: dict, temperature: float = 1.0, max_states: int = 20000) -> float:
    """The target's mean E_local over :func:`enumerated_target`'s sequences, ``exp(-E / temperature)`` normalised."""
    _, e = enumerated_target(case, max_states)
    return float((torch.softmax(-e / temperature, 0) * e).sum())


def cmlm_fixed_case(sentences: int) -> dict:
    """bench_ess.py's ``cmlm`` case: the bundled De->En CMLM at target temperature 1, energy raw, 5 chains from the
    warm start, the first ``sentences`` test sentences (plain MH: max R-hat 1.21 after 360 post-burn-in sweeps)."""
    from mhfast.translation import bundled_test_file, load_bundled_model

    tr = load_bundled_model()
    lines = Path(bundled_test_file("bundled", "--input")).read_text(encoding="utf-8").splitlines()[:sentences]
    return {"name": "cmlm-fixed", "model": tr.cmlm, "inputs": {"source": [tr.source_ids(s) for s in lines]},
            "what": f"bundled De->En CMLM, first {sentences} test sentences, energy raw, target temperature 1, 5 "
                    "chains from the warm start (bench_ess.py's cmlm case)", "options": dict(chains=5, energy="raw")}


def traced_run(case: dict, epochs: int, burn_in: int, seed: int, tempering, echo: int = 0,
               cpu_at: list[float] | None = None) -> tuple:
    """``(result, cumulative model rows after each epoch, CPU s)``; ``echo`` > 0 prints the rows and CPU seconds
    so far every ``echo`` sweeps (long runs: is it on time?); ``cpu_at``: a list that gets the cumulative CPU
    seconds after each sweep (for budgets in seconds: plain MH's sweeps cost about the same whatever their rows)."""
    rows: list[int] = []
    cpu = time.process_time()

    def progress(epoch: int, stats: dict) -> None:
        rows.append(int(stats["model_rows"]))
        if cpu_at is not None:
            cpu_at.append(time.process_time() - cpu)
        if echo and len(rows) % echo == 0:
            print(f"  sweep {len(rows)}: {rows[-1]} rows, {time.process_time() - cpu:.0f} CPU s", flush=True)

    r = mhfast.sample(case["model"], **case["inputs"], **case["options"], epochs=epochs, burn_in=burn_in, seed=seed,
                      tempering=tempering, progress=progress)
    return r, rows, time.process_time() - cpu


def window_figures(r, rows: list[int], cpu: float, first: int, last: int, cpu_at: list[float] | None = None
                   ) -> dict:
    """The figures of the draws of sweeps ``first .. last - 1`` (its traces; rows and CPU up to sweep ``last``,
    CPU prorated by rows where the run went on after it, or read from ``cpu_at``, :func:`traced_run`'s CPU seconds
    after each sweep, where given)."""
    import bench_ess

    keep = ((r.trace_epochs >= first) & (r.trace_epochs < last)).nonzero().flatten()
    # per input (several: ESS summed over them, R-hat their largest: bench_ess.py's figures; chains': input 0's)
    figures = bench_ess.ess_figures([r.traces[b][:, keep].double().numpy() for b in range(r.traces.shape[0])],
                                    r.trace_names)
    e = r.traces[0][:, keep].double().numpy()[:, :, r.trace_names.index("e_local")]  # [C, D]
    used = rows[last - 1]
    return {"rows": used, "cpu": cpu * used / rows[-1] if cpu_at is None else cpu_at[last - 1],
            "sweeps": last, "burn": first,
            "draws": int(keep.numel()) * e.shape[0],
            **{k: figures[k] for k in ("ess_e", "ess_p", "rhat", "rhat_e")},
            "chain_min": e.min(axis=1).round(2).tolist(),
            "chain_mean": e.mean(axis=1).round(2).tolist(),
            "mean_e": float(e.mean()), "sd_e": float(e.std()),
            # ArviZ's MCSE of the mean (its own ESS of the mean, not the rank-normalized bulk-ESS: ~10% apart on
            # sticky chains over a few energy levels)
            "mcse_e": float(array_stats().mcse(e, chain_axis=0, draw_axis=1, method="mean")),
            "accept": float(r.novel_rate[first:last].mean())}


def first_reaching(rows: list[int], target: int) -> int:
    """The first sweep (1-based) whose cumulative ``rows`` reach ``target`` (``len(rows)`` where none does): where
    plain MH's burn-in ends at another run's burn-in rows."""
    return next((i + 1 for i, n in enumerate(rows) if n >= target), len(rows))


def last_within(rows: list[int], budget: int, default: int) -> int:
    """The last sweep (1-based) whose cumulative ``rows`` are within ``budget`` (``default`` where none is): where
    plain MH's draws end at another run's rows."""
    return max((i + 1 for i, n in enumerate(rows) if n <= budget), default=default)


def equal_rows(case: dict, epochs: int, burn_in: int, seed: int, K: int, factor: float) -> list[dict]:
    """The tempered run, then plain MH at the same rows (module doc, ``antiberty-dispersed``): it runs ``factor``
    x K times the sweeps (cut at the tempered run's rows; where that was too few it ends short of them, and the
    table says by how much)."""
    r, rows, cpu = traced_run(case, epochs, burn_in, seed, K)
    pt = {"tempering": K, "seed": seed, **window_figures(r, rows, cpu, burn_in, epochs),
          "ladder": [round(t, 2) for t in r.ladder[0].tolist()], "swap": [round(x, 2) for x in r.swap_rate[0].tolist()],
          "trips": r.round_trips[0].tolist()}
    print(f"  {case['name']} {pt}", flush=True)
    # plain MH forwards fewer rows per sweep than a rung once its chains settle (the hot rungs keep moving):
    # AntiBERTy T=8, K=4: 359 sweeps (factor 1.4) gave 94% of the tempered rows
    p, prow, pcpu = traced_run(case, math.ceil(factor * K * epochs), 0, seed, None)
    first, last = first_reaching(prow, rows[burn_in - 1]), last_within(prow, rows[-1], len(prow))
    plain = {"tempering": None, "seed": seed, **window_figures(p, prow, pcpu, first, last)}
    print(f"  {case['name']} {plain}", flush=True)
    return [plain, pt]


def counters_text(run: dict) -> str:
    """A run's tempering counters for a table cell (empty for plain MH)."""
    return f"ladder {run['ladder']}, swap rates {run['swap']}, round trips {run['trips']}" if "ladder" in run else ""


def equal_rows_lines(case: dict, runs: list[dict]) -> list[str]:
    """The equal-rows table; with ``case["exact_mean"]`` (``--exact``) two more columns: the draws' mean E_local
    and its error against the enumerated target's in units of its MCSE (ArviZ's MCSE of the mean; the runs of
    2026-11-28 in bench/RESULTS.md used sd / sqrt(bulk-ESS of E_local)): an honest MCSE keeps it within about 2."""
    exact = case.get("exact_mean")
    head = " mean E_local (exact {:.3f}) | error / MCSE |".format(exact) if exact is not None else ""
    out = ["| sampler | seed | sweeps (burn-in) | draws (sweeps x chains) | model rows | CPU s | novel rate | "
           "ESS E_local | min ESS proj | ESS E_local / 1k rows | ESS E_local / CPU s | R-hat E_local | "
           "max R-hat (not NaN) | per chain: lowest E_local | per chain: mean E_local |" + head
           + " tempering counters |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if head else "") + "---|"]
    for x in runs:
        extra = counters_text(x)
        cells = ""
        if exact is not None:
            mcse = x.get("mcse_e", x["sd_e"] / max(x["ess_e"], 1e-9) ** 0.5)  # (runs stored before: sd / sqrt(bulk))
            cells = f" {x['mean_e']:.3f} | {(x['mean_e'] - exact) / mcse:+.2f} |"
        out.append(f"| {x['tempering'] or 'plain MH'} | {x['seed']} | {x['sweeps']} ({x['burn']}) | {x['draws']} | "
                   f"{x['rows']} | {x['cpu']:.0f} | {x['accept']:.3f} | {x['ess_e']:.1f} | {x['ess_p']:.1f} | "
                   f"{1000 * x['ess_e'] / x['rows']:.2f} | {x['ess_e'] / x['cpu']:.3f} | {x['rhat_e']:.3f} | "
                   f"{x['rhat']:.3f} | {x['chain_min']} | {x['chain_mean']} |{cells} {extra} |")
    return out


def ess_run(case: dict, epochs: int, burn_in: int, seed: int, tempering) -> dict:
    """One run's figures (module doc)."""
    cpu = time.process_time()
    r = mhfast.sample(case["model"], **case["inputs"], **case["options"], epochs=epochs, burn_in=burn_in, seed=seed,
                      tempering=tempering)
    cpu = time.process_time() - cpu
    d = r.diagnostics[0]
    ess_e = d["ess_bulk"]["e_local"]
    ess_p = min(v for k, v in d["ess_bulk"].items() if k.startswith("proj_"))
    out = {"tempering": tempering, "seed": seed, "rows": r.model_rows, "cpu": cpu, "ess_e": ess_e, "ess_p": ess_p,
           # NaN R-hat: a summary that never varied (e.g. chains sitting in modes of equal energy): left out of the max
           "rhat": max((v for v in d["rhat"].values() if v == v), default=float("nan")), "rhat_e": d["rhat"]["e_local"],
           "accept": float(r.novel_rate[burn_in:].mean())}
    if r.ladder is not None:
        out.update(ladder=[round(t, 2) for t in r.ladder[0].tolist()],
                   swap=[round(x, 2) for x in r.swap_rate[0].tolist()], trips=r.round_trips[0].tolist())
    print(f"  {case['name']} {out}", flush=True)
    return out


def ess_rows(case: dict, runs: list[dict]) -> list[str]:
    rows = []
    for x in runs:
        per_k = lambda v: 1000 * v / max(x["rows"], 1)  # noqa: E731
        extra = counters_text(x)
        rows.append(f"| {case['name']} | {x['tempering'] or 'plain MH'} | {x['seed']} | {x['rows']} | {x['cpu']:.0f} | "
                    f"{x['accept']:.3f} | {x['ess_e']:.1f} | {x['ess_p']:.1f} | {per_k(x['ess_e']):.2f} | "
                    f"{per_k(x['ess_p']):.2f} | {x['ess_e'] / x['cpu']:.3f} | {x['rhat_e']:.3f} | {x['rhat']:.3f} | "
                    f"{extra} |")
    return rows


ESS_HEADER = ("| case | sampler | seed | model rows | CPU s | novel rate | ESS E_local | min ESS proj | "
              "ESS E_local / 1k rows | min ESS proj / 1k rows | ESS E_local / CPU s | R-hat E_local | "
              "max R-hat (not NaN) | tempering counters |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def cmlm_run(sentences: int, epochs: int, tempering, temperature: float, anneal: float, seed: int,
             burn_in: int) -> dict:
    """Lowest E_raw per token of the target chains by the rows forwarded up to each epoch."""
    from mhfast.translation import bundled_test_file, load_bundled_model

    tr = load_bundled_model()
    lines = Path(bundled_test_file("bundled", "--input")).read_text(encoding="utf-8").splitlines()[:sentences]
    rows: list[int] = []
    cpu = time.process_time()
    r = mhfast.sample(tr.cmlm, source=[tr.source_ids(s) for s in lines], chains=5, epochs=epochs, burn_in=burn_in,
                      energy="raw", seed=seed, target_temperature=temperature, anneal=anneal,
                      min_target_temperature=0.05 if anneal else mhfast.sampler.options.OPTIONS[
                          "min_target_temperature"].default,
                      tempering=tempering, progress=lambda e, s: rows.append(s["model_rows"]))
    cpu = time.process_time() - cpu
    e_raw = r.traces[:, :, :, r.trace_names.index("e_raw")]  # [B, C, D]
    n_tok = (r.tokens[:, 0] != tr.cmlm.pad_id).sum(dim=1).clamp(min=1)  # length with specials: a fixed scale
    best = (e_raw.amin(dim=1).cummin(dim=1).values / n_tok[:, None]).mean(dim=0)  # [D] mean over sentences
    out = {"tempering": tempering, "anneal": anneal, "temperature": temperature, "rows": rows, "best": best.tolist(),
           "cpu": cpu, "final_best": float((r.best_energy / n_tok).mean())}
    if r.ladder is not None:  # the sentences' tuned ladders, rounded
        out["ladder"] = [[round(t, 2) for t in row] for row in r.ladder.tolist()]
    print(f"  cmlm {tempering} anneal {anneal}: rows {rows[-1]}, best/token {out['final_best']:.3f}", flush=True)
    return out


def at_budget(run: dict, budget: int) -> str:
    """The lowest energy per token reached once ``budget`` rows were forwarded (the last epoch within it)."""
    within = [i for i, n in enumerate(run["rows"]) if n <= budget]
    return f"{run['best'][within[-1]]:.3f}" if within else "-"


def machine() -> str:
    import os

    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    return (f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__}, {torch.get_num_threads()} intra-op thread(s), "
            f"load average {os.getloadavg()[0]:.1f} at the end")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", nargs="+", default=["antiberty-infill", "cmlm"],
                    choices=["two-mode", "antiberty-infill", "antiberty-random", "antiberty-dispersed",
                             "sapiens-dispersed", "cmlm", "cmlm-fixed"])
    ap.add_argument("--epochs", type=int, default=60)
    ap.add_argument("--burn-in", type=int, default=10)
    ap.add_argument("--rungs", type=int, default=4)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--random-length", type=int, default=32)
    ap.add_argument("--random-epochs", type=int, default=6)
    ap.add_argument("--dispersed-length", type=int, default=8)
    ap.add_argument("--dispersed-epochs", type=int, default=64)
    ap.add_argument("--dispersed-burn-in", type=int, default=32)
    ap.add_argument("--dispersed-temperature", type=float, default=1.0,
                    help="the dispersed cases' target temperature (tempering's ladder starts there)")
    ap.add_argument("--plain-factor", type=float, default=1.8,
                    help="the dispersed cases: plain MH runs this x K times the tempered sweeps, then is cut")
    ap.add_argument("--cmlm-sentences", type=int, default=3)
    ap.add_argument("--cmlm-epochs", type=int, default=12)
    ap.add_argument("--cmlm-burn-in", type=int, default=4)
    ap.add_argument("--cmlm-temperature", type=float, default=0.2)
    ap.add_argument("--two-mode-epochs", type=int, default=3000)
    ap.add_argument("--exact", action="store_true",
                    help="antiberty-dispersed at small --dispersed-length (20^T sequences): also the enumerated "
                         "target's mean E_local, and each run's error against it in MCSE units")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", type=str, default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    t0 = time.time()
    if args.quick:
        args.epochs, args.burn_in, args.random_length, args.random_epochs = 6, 2, 6, 4
        args.cmlm_sentences, args.cmlm_epochs = 1, 4
    lines = [f"Run {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC: `python3 "
             f"bench/bench_tempering.py {' '.join(sys.argv[1:])}`."]
    ess: list[str] = []
    if "two-mode" in args.cases:
        case = two_mode_case(4)
        epochs = 40 if args.quick else args.two_mode_epochs
        lines.append(f"- two-mode: {case['what']}; {epochs} epochs, burn-in {epochs // 10}, seeds {args.seeds}, "
                     f"tempering={args.rungs} (tuned) against plain single-site MH.")
        ess += ess_rows(case, [ess_run(case, epochs, epochs // 10, seed, t) for seed in args.seeds
                               for t in (None, args.rungs)])
    for kind in ("infill", "random"):
        if f"antiberty-{kind}" not in args.cases:
            continue
        case = antiberty_case(kind, 32 if kind == "infill" else args.random_length, 4)
        epochs = args.epochs if kind == "infill" else args.random_epochs
        burn = args.burn_in if kind == "infill" else max(1, epochs // 3)
        lines.append(f"- {case['name']}: {case['what']}; {epochs} epochs, burn-in {burn}, seeds {args.seeds}, "
                     f"tempering={args.rungs} (tuned) against plain single-site MH (defaults).")
        runs = [ess_run(case, epochs, burn, seed, t) for seed in args.seeds for t in (None, args.rungs)]
        ess += ess_rows(case, runs)
    if ess:
        lines += ["", ESS_HEADER, *ess]
    for model in ("antiberty", "sapiens"):
        if f"{model}-dispersed" not in args.cases:
            continue
        case = dispersed_case(model, args.dispersed_length, 4, args.dispersed_temperature)
        epochs, burn = (6, 2) if args.quick else (args.dispersed_epochs, args.dispersed_burn_in)
        if args.exact:
            case["exact_mean"] = exact_mean_e_local(case, args.dispersed_temperature)
        lines += ["", f"- {case['name']}: {case['what']}; tempering={args.rungs} (tuned), {epochs} sweeps, burn-in "
                  f"{burn}, against plain single-site MH (defaults) cut at the same model rows; seeds {args.seeds}.",
                  "", *equal_rows_lines(case, [x for seed in args.seeds
                                               for x in equal_rows(case, epochs, burn, seed, args.rungs,
                                                                  args.plain_factor)])]
    if "cmlm-fixed" in args.cases:
        case = cmlm_fixed_case(1 if args.quick else 2)
        epochs, burn = (6, 2) if args.quick else (args.dispersed_epochs, args.dispersed_burn_in)
        lines += ["", f"- {case['name']}: {case['what']}; tempering={args.rungs} (tuned), {epochs} sweeps, burn-in "
                  f"{burn}, against plain single-site MH (defaults) cut at the same model rows; seeds {args.seeds}; "
                  "ESS summed over the sentences, R-hat their largest, per-chain figures sentence 0's.",
                  "", *equal_rows_lines(case, [x for seed in args.seeds
                                               for x in equal_rows(case, epochs, burn, seed, args.rungs,
                                                                  args.plain_factor)])]
    if "cmlm" in args.cases:
        K, burn = args.rungs, args.cmlm_burn_in
        runs = [(seed, cmlm_run(args.cmlm_sentences, args.cmlm_epochs, None, 1.0, 0.08, seed, burn),
                 cmlm_run(args.cmlm_sentences, args.cmlm_epochs, K, args.cmlm_temperature, 0.0, seed, burn))
                for seed in args.seeds]
        ann0 = runs[0][1]
        budgets = sorted({ann0["rows"][len(ann0["rows"]) // 4], ann0["rows"][len(ann0["rows"]) // 2],
                          ann0["rows"][-1], runs[0][2]["rows"][-1]})
        lines += ["", f"- cmlm: bundled De->En CMLM, first {args.cmlm_sentences} test sentences, energy raw, 5 chains, "
                  f"{args.cmlm_epochs} epochs (burn-in {burn}), seeds {args.seeds}: annealing (target temperature 1, "
                  f"-0.08 per epoch, floor 0.05) against tempering={K} (tuned in burn-in) at a fixed target "
                  f"temperature {args.cmlm_temperature}. Lowest E_raw per token (length with specials) of the target "
                  "chains at the end of the last epoch within each row budget (burn-in included), mean over "
                  "sentences:", "",
                  "| sampler | seed | " + " | ".join(f"{b} rows" for b in budgets)
                  + " | rows in all | CPU s | ladder |",
                  "|---|---|" + "---|" * (len(budgets) + 3)]
        for seed, ann, pt in runs:
            for name, x in (("annealing", ann), (f"tempering={K} at {args.cmlm_temperature}", pt)):
                lines.append(f"| {name} | {seed} | " + " | ".join(at_budget(x, b) for b in budgets)
                             + f" | {x['rows'][-1]} | {x['cpu']:.0f} | {x.get('ladder', '')} |")
    lines += ["", f"Machine: {machine()}; {time.time() - t0:.0f} s in all."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
