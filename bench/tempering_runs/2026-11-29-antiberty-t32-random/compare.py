"""Issue 38's AntiBERTy case from a random start at T=32: a tempered run against plain MH on the same chains, both
saved by bench/tempering_long.py (``--save``), compared at equal model rows and at equal CPU seconds.

AntiBERTy, 32 free residues, energy local, target temperature 1, 4 chains each from its own uniformly random residues
(bench_tempering.dispersed_case). Both runs at once, one core each (AMD EPYC, one torch thread):

    python3 bench/tempering_long.py --model antiberty --length 32 --temperature 1 --rungs 4 --seed 0 --epochs 20 \\
        --burn-in 8 --at 12 16 --echo 1 --save tempered_seed0.pt --out tempered_seed0.json   # ~80 CPU min
    python3 bench/tempering_long.py --model antiberty --length 32 --temperature 1 --plain --seed 0 --epochs 120 \\
        --burn-in 8 --echo 2 --save plain_seed0.pt --out plain_seed0.json                    # ~60 CPU min
    python3 .../compare.py tempered_seed0.pt plain_seed0.pt 12 16 20 > compare_seed0.md

(run 2026-11-29 21:19-22:40 UTC, commit e00af4f, AMD EPYC; the saved runs are kept here, a few kB each; the logs
are the two runs' output).

At each of the tempered run's budgets (sweeps, burn-in excluded from the draws) plain MH is cut twice: where its
forwarded rows reach the tempered run's (its burn-in ends where its rows reach those of the tempered burn-in, its
draws at the last sweep within the budget's rows: bench_tempering.equal_rows' rule), and where its CPU seconds do
(the same rule on the per-sweep CPU clocks). Figures: bench_tempering.window_figures (ArviZ's bulk-ESS and rank
split-R-hat through mhfast's diagnose) and each chain's lowest E_local over the whole run, burn-in included.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/
import bench_tempering as bt  # noqa: E402
import tempering_long as tl  # noqa: E402


def lowest(r) -> list[float]:
    """Each chain's lowest E_local over every traced sweep."""
    return r.traces[0][:, :, r.trace_names.index("e_local")].min(dim=1).values.double().round(decimals=2).tolist()


def main(tempered: str, plain: str, budgets: list[int]) -> None:
    (rt, t), (rp, p) = tl.load_saved(tempered), tl.load_saved(plain)
    burn = t["burn_in"]
    print(f"tempered: ladder {[round(x, 2) for x in t['ladder'][0].tolist()]}, swap rates "
          f"{[round(x, 2) for x in t['swap'][0].tolist()]}, round trips {t['trips'][0].tolist()}; "
          f"{len(t['rows_cum'])} sweeps, {t['rows_cum'][-1]} rows, {t['cpu']:.0f} CPU s")
    print(f"plain MH: {len(p['rows_cum'])} sweeps, {p['rows_cum'][-1]} rows, {p['cpu']:.0f} CPU s")
    print(f"lowest E_local per chain over the whole run: tempered {lowest(rt)}, plain MH {lowest(rp)}")
    # where no swap ever reaches rung 0, its chains run plain MH's kernel with plain MH's random numbers (the chain
    # ids are the same): the same trajectories, up to the rounding of a differently composed batch
    k, n = rt.trace_names.index("e_local"), rt.traces.shape[2]
    same = float((rt.traces[0][:, :, k] - rp.traces[0][:, :n, k]).abs().max())
    print(f"tempered target chains against plain MH's first {n} sweeps: E_local at most {same:.2g} apart\n")
    runs = []
    for last in budgets:
        a = bt.window_figures(rt, t["rows_cum"], t["cpu"], burn, last, t["cpu_at"])
        runs.append({"tempering": f"tempering={t['ladder'].shape[1]}, {last} sweeps", "seed": 0, **a})
        for how, clock in (("rows", "rows_cum"), ("CPU s", "cpu_at")):
            first = bt.first_reaching(p[clock], t[clock][burn - 1])
            end = bt.last_within(p[clock], t[clock][last - 1], 0)
            if end <= first:
                continue
            b = bt.window_figures(rp, p["rows_cum"], p["cpu"], first, end, p["cpu_at"])
            short = t[clock][last - 1] - p[clock][end - 1]
            runs.append({"tempering": f"plain MH at equal {how}" + (f" ({short:.0f} short)" if end == len(
                p[clock]) and short > 0.02 * t[clock][last - 1] else ""), "seed": 0, **b})
    print("\n".join(bt.equal_rows_lines({}, runs)))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3:]])
