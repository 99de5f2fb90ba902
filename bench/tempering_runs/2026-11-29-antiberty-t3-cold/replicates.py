"""The AntiBERTy T=3 case at target temperature 0.5, checked by independent replications instead of one long run's ESS.

Seed 1's 3x longer tempered run ended 1.9 MCSE below the exact mean E_local (xlong_exact_check_seed1.txt, 2.6 at
half its length), with an MCSE from the ESS of 4 chains. Is that the kernel or the error bar? Here the error bar
needs no ESS estimate: one run of ``tempering=6`` with many chains (the ladder tuned in the first ``--burn-in``
sweeps, as in the long runs, and fixed after), every chain from its own uniformly random residues, is as many
independent replications. Each chain's average over the sweeps ``[--discard, --sweeps)`` is one estimate; the chains'
averages are independent given the ladder, and any fixed ladder leaves the target exact, so their mean has the plain
standard error sd / sqrt(n) (no autocorrelation model). Two more checks, as free of assumptions:

- the transient: the same average over the sweeps ``[--burn-in, --discard)``: if the first window's chains had not
  forgotten their start, the two windows would differ;
- the final states: one draw per chain, iid, their mean E_local and P(lowest) with the binomial/iid error;
- the MCSE a user is shown: the chains taken 4 at a time (``--group``) as so many independent runs of 4 chains (the
  long runs' number), each diagnosed as ``mhfast.sample`` does; if its MCSE is right, 95.4% of those runs' means lie
  within 2 MCSE of the exact value.

With ``--rungs 0`` the same chains run plain MH instead: the test's power (it must fail a sampler that has not mixed).
With ``--delayed`` they run delayed acceptance (issue 34) as well: its exactness on a real model.
The windows and the statistics were fixed before the first runs (the MCSE check was added after them, and the runs
repeated: the same chains bit for bit; then two seeds 5x longer, whose 11,000 averaged sweeps are about a 30-minute
run's). One core each. With the memo each of the 8,000 sequences is scored about once (~26,000 rows in a run), so
512 chains cost ~6 CPU minutes tempered and ~1.5 plain (AMD EPYC):

    python3 .../replicates.py --seed 10 --out replicates_seed10.json     # and --seed 11
    python3 .../replicates.py --report replicates_seed10.json replicates_seed11.json       # replicates.txt
    python3 .../replicates.py --rungs 0 --seed 10 --out replicates_plain_seed10.json       # and --seed 11
    python3 .../replicates.py --report replicates_plain_seed1?.json                         # replicates_plain.txt
    python3 .../replicates.py --seed 12 --sweeps 12000 --out replicates_12k_seed12.json    # and 13: ~25-35 min each
    python3 .../replicates.py --report replicates_12k_seed1?.json                           # replicates_12k.txt
    python3 .../replicates.py --group 16 --seed 10 --out replicates_g16_seed10.json       # and 11: 16 to a run
    python3 .../replicates.py --report replicates_g16_seed1?.json                           # replicates_g16.txt
    python3 .../replicates.py --group 16 --seed 12 --sweeps 12000 --out replicates_g16_12k_seed12.json  # and 13
    python3 .../replicates.py --report replicates_g16_12k_seed1?.json                       # replicates_g16_12k.txt
    python3 .../replicates.py --delayed window:0 --seed 20 --out replicates_delayed_seed20.json   # and 21
    python3 .../replicates.py --report replicates_delayed_seed2?.json                       # replicates_delayed.txt

Needs the enumerated energies (analysis.py's ``enum_t3.pt``, made on first use: ~3 min).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/
sys.path.insert(0, str(Path(__file__).resolve().parent))
import analysis  # noqa: E402
import bench_tempering as bt  # noqa: E402
import mhfast  # noqa: E402


def run(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    e, _, _ = analysis.target()
    low = float(e.min())
    case = bt.dispersed_case("antiberty", 3, args.chains, analysis.TEMPERATURE)
    lm, free = case["model"], case["inputs"]["free_positions"]
    pos = free[0].nonzero().flatten().tolist()
    cpu, wall = time.process_time(), time.perf_counter()

    def progress(epoch: int, stats: dict) -> None:
        if (epoch + 1) % 200 == 0:  # is it on time?
            print(f"  sweep {epoch + 1}: {time.process_time() - cpu:.0f} CPU s", flush=True)

    r = mhfast.sample(lm, **case["inputs"], **case["options"], epochs=args.sweeps, burn_in=args.burn_in,
                      seed=args.seed, tempering=args.rungs or None, delayed=args.delayed, progress=progress)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    x = r.traces[0][:, :, r.trace_names.index("e_local")].double().numpy()  # [C, sweeps]
    ep = r.trace_epochs.numpy()
    late, early = (ep >= args.discard), (ep >= args.burn_in) & (ep < args.discard)
    at_low = analysis.at_lowest(x, low)
    # the final states' energies from the enumeration (the same 8,000 sequences, in itertools.product order; the
    # report checks them against the sampler's own, "final_e_sampler")
    words = bt.ordinary_tokens(lm)
    index = {w: i for i, w in enumerate(words)}
    final = r.tokens[0][:, pos].tolist()
    e_final = [float(e[sum(index[t] * len(words) ** (len(pos) - 1 - j) for j, t in enumerate(s))]) for s in final]
    out = {"seed": args.seed, "chains": args.chains, "sweeps": args.sweeps, "burn_in": args.burn_in,
           "discard": args.discard, "rungs": args.rungs, "group": args.group, "cpu": cpu, "wall": wall,
           "rows": r.model_rows, "delayed": args.delayed,
           "delayed_counts": [r.delayed_tested, r.delayed_passed, r.delayed_accepted, r.delayed_rows_saved],
           "ladder": r.ladder[0].tolist() if args.rungs else [analysis.TEMPERATURE],
           "swap": r.swap_rate[0].tolist() if args.rungs else [],
           "trips": r.round_trips[0].tolist() if args.rungs else [],
           "late_mean": x[:, late].mean(1).tolist(), "late_low": at_low[:, late].mean(1).tolist(),
           "early_mean": x[:, early].mean(1).tolist(), "early_low": at_low[:, early].mean(1).tolist(),
           "final_e": e_final, "final_e_sampler": r.energy_local[0].tolist(),
           "groups": groups(x[:, late], low, args.group),
           # every chain's mean over each block of 100 sweeps: the approach to the target, sweep by sweep
           "blocks": x[:, : x.shape[1] // 100 * 100].reshape(x.shape[0], -1, 100).mean(2).tolist()}
    # per chain, 5 decimals are plenty (the report's figures do not change); the runs' MCSEs, some tiny, in full
    out = {k: (np.round(v, 5).tolist() if isinstance(v, list) and k not in ("ladder", "swap") else v)
           for k, v in out.items()}
    args.out.write_text(json.dumps(out, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"seed {args.seed}: {args.chains} chains x {args.sweeps} sweeps, {cpu:.0f} CPU s, {r.model_rows} rows",
          flush=True)


def groups(x: np.ndarray, low: float, size: int) -> dict:
    """The chains taken ``size`` at a time, as so many independent runs of ``size`` chains, each diagnosed as
    :func:`mhfast.sample` diagnoses a run (ArviZ's rank R-hat, bulk-ESS and MCSE of the mean): per run the mean of
    E_local and of the lowest sequence's indicator, and those three figures of each (is the MCSE a user gets right?)."""
    from mhfast.sampler.diagnostics import diagnose

    out: dict = {}
    for g in range(x.shape[0] // size):
        chunk = x[g * size:(g + 1) * size]
        draws = np.stack([chunk, analysis.at_lowest(chunk, low)], axis=2)  # [size, D, 2]
        d = diagnose(draws, ["e", "low"], ("rhat", "ess_bulk", "mcse_mean"))
        for name in ("e", "low"):
            out.setdefault(f"{name}_mean", []).append(float(draws[:, :, ("e", "low").index(name)].mean()))
            for stat in ("rhat", "ess_bulk", "mcse_mean"):
                out.setdefault(f"{name}_{stat}", []).append(d[stat][name])
    return out


def coverage_line(g: dict, name: str, want: float) -> str:
    """How often a run's mean lies within 2 of its MCSEs of the exact value (0.954 if the MCSE is right)."""
    mcse = np.asarray(g[f"{name}_mcse_mean"])
    # a summary constant over a run's draws (its chains all stuck on or off the lowest sequence) has MCSE 0 or NaN:
    # such a run claims no error at all, so it counts as outside (it is, unless exactly right)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(mcse > 0, (np.asarray(g[f"{name}_mean"]) - want) / mcse, np.inf)
    n, inside, finite = len(z), float((np.abs(z) < 2).mean()), np.isfinite(z)
    zero = "" if finite.all() else f", MCSE 0 or NaN in {int((~finite).sum())} (counted outside)"
    # Wilson's 95% interval (the share may sit near 1)
    c = (inside + 1.92 / n) / (1 + 3.84 / n)
    h = 1.96 * (inside * (1 - inside) / n + 0.96 / n ** 2) ** 0.5 / (1 + 3.84 / n)
    sd = f"{z[finite].std(ddof=1):.2f}" if finite.sum() > 1 else "-"
    return (f"z = (mean - exact) / MCSE: sd {sd} (1 if right){zero}, |z| < 2 in "
            f"{inside:.3f} [{c - h:.3f}, {c + h:.3f}] of runs (0.954 if right)")


def _line(name: str, v: np.ndarray, want: float) -> str:
    se = v.std(ddof=1) / len(v) ** 0.5
    return f"{name}: {v.mean():.4f} +- {se:.4f} (exact {want:.4f}, z {(v.mean() - want) / se:+.2f}, n {len(v)})"


def report(paths: list[Path]) -> None:
    e, p, mean = analysis.target()
    p_low = float(p.max())
    runs = [json.loads(q.read_text(encoding="utf-8")) for q in paths]
    print(f"exact at target temperature {analysis.TEMPERATURE}: mean E_local {mean:.4f}, P(lowest) {p_low:.4f}")
    for q in runs:
        how = (f"ladder tuned in {q['burn_in']}), {q['cpu']:.0f} CPU s, {q['rows']} rows; ladder "
               f"{[round(t, 2) for t in q['ladder']]}, swap rates {min(q['swap']):.2f}-{max(q['swap']):.2f}, round "
               f"trips per chain {np.mean(q['trips']):.1f}" if q["rungs"] else
               f"plain MH), {q['cpu']:.0f} CPU s, {q['rows']} rows")
        if q.get("delayed"):
            tested, passed, accepted, saved = q["delayed_counts"]
            how += (f"; delayed={q['delayed']}: stage 1 {passed}/{tested} = {passed / max(tested, 1):.3f}, stage 2 "
                    f"{accepted}/{passed} = {accepted / max(passed, 1):.3f}, {saved} rows saved")
        print(f"seed {q['seed']}: {q['chains']} chains x {q['sweeps']} sweeps ({how}")
    cat = {k: np.concatenate([np.asarray(q[k], dtype=float) for q in runs])
           for k in ("late_mean", "late_low", "early_mean", "early_low", "final_e")}
    a, b = runs[0]["discard"], runs[0]["sweeps"]
    print(f"each chain's average over sweeps [{a}, {b}), one estimate per chain:")
    print("  " + _line("mean E_local", cat["late_mean"], mean))
    print("  " + _line("P(lowest)", cat["late_low"], p_low))
    print(f"the transient: the same over sweeps [{runs[0]['burn_in']}, {a}):")
    print("  " + _line("mean E_local", cat["early_mean"], mean))
    print("  " + _line("P(lowest)", cat["early_low"], p_low))
    fin = cat["final_e"]
    # the final states' energies come from the enumeration by a mixed-radix index that assumes enumerated_target's
    # order; the sampler's own energies of the same states check it (float32 against float64: ~1e-5 apart)
    off = np.abs(fin - np.concatenate([np.asarray(q["final_e_sampler"], dtype=float) for q in runs])).max()
    if off > 1e-3:
        raise SystemExit(f"the final states' enumerated energies differ from the sampler's by {off:.3g}: the lookup "
                         "no longer follows bench_tempering.enumerated_target's order")
    print("each chain's final state, one iid draw per chain:")
    print("  " + _line("mean E_local", fin, mean))
    print("  " + _line("P(lowest)", analysis.at_lowest(fin, float(e.min())), p_low))
    size = runs[0]["group"]
    g = {k: np.concatenate([np.asarray(q["groups"][k], dtype=float) for q in runs]) for k in runs[0]["groups"]}
    rhat = np.maximum(g["e_rhat"], g["low_rhat"])
    print(f"the chains {size} at a time, {len(rhat)} runs of {size} chains over sweeps [{a}, {b}), diagnosed as "
          "mhfast.sample does:")
    nan = "" if np.isfinite(rhat).all() else (f" (NaN, a summary constant in all its chains, in "
                                               f"{int(np.isnan(rhat).sum())}: counted above 1.2)")
    rhat = np.where(np.isnan(rhat), np.inf, rhat)
    print(f"  max R-hat of E_local and the lowest's indicator: median {np.median(rhat):.4g}, below 1.01 in "
          f"{(rhat < 1.01).mean():.3f}, above 1.2 in {(rhat > 1.2).mean():.3f}{nan}; bulk-ESS of E_local median "
          f"{np.median(g['e_ess_bulk']):.0f}")
    print(f"  mean E_local: {coverage_line(g, 'e', mean)}")
    print(f"  P(lowest): {coverage_line(g, 'low', p_low)}")
    blocks = np.concatenate([np.asarray(q["blocks"]) for q in runs])  # [chains, sweeps // 100]
    print("mean E_local of all chains per block of 100 sweeps (from sweep 0):")
    print("  " + " ".join(f"{v:.3f}" for v in blocks.mean(0)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=10)
    ap.add_argument("--chains", type=int, default=512)
    ap.add_argument("--sweeps", type=int, default=2400, help="sweeps in all, burn-in included")
    ap.add_argument("--burn-in", type=int, default=400, help="sweeps that tune the ladder")
    ap.add_argument("--discard", type=int, default=1000, help="first sweep of the averaged window")
    ap.add_argument("--rungs", type=int, default=6, help="the ladder's rungs (0: plain MH, the test's power check)")
    ap.add_argument("--delayed", default=None,
                    help="delayed acceptance's first stage (option delayed), e.g. window:0 (the proposal's own row "
                         "only: at T=3 the one first stage that is not the exact energy)")
    ap.add_argument("--group", type=int, default=4, help="chains per run in the MCSE check (4: the long runs')")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--report", type=Path, nargs="*", default=None, help="summarise these runs' JSON files")
    args = ap.parse_args()
    if args.report:
        report(args.report)
    elif args.out is None:
        ap.error("--out is needed to run")
    else:
        run(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
