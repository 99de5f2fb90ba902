"""The AntiBERTy T=3 case at target temperature 0.5 (RESULTS.md, "AntiBERTy at T=3, target temperature 0.5"): the
enumerated target's basins and barriers, the exact checks of saved runs, and plain MH's figures at the tempered runs'
CPU budgets. Needs the runs' saved traces (``--save`` of bench/tempering_long.py; not kept here, 19 MB a plain run):

    python3 bench/tempering_long.py --model antiberty --length 3 --temperature 0.5 --rungs 6 --seed 0 --epochs 12000 \\
        --burn-in 200 --at 1000 2000 4000 8000 --save t0.pt --out long_t_seed0.json      # and --seed 1
    python3 bench/tempering_long.py --model antiberty --length 3 --temperature 0.5 --plain --seed 0 --epochs 180000 \\
        --burn-in 2000 --at-cpu 154 300 600 1190 1760 1786 --save p0.pt --out long_p_seed0.json   # and --seed 1
    python3 bench/tempering_runs/2026-11-29-antiberty-t3-cold/analysis.py barriers          # barriers.txt (~3 min)
    python3 .../analysis.py exact t0.pt t1.pt p0.pt p1.pt                                   # exact_check.txt
    python3 .../analysis.py match long_t_seed0.json p0.pt long_t_seed1.json p1.pt   # plain_at_tempered_cpu.json

The 3x longer pairs of seeds 0 and 1 (2026-11-29, xlong_*; their first 12,000 sweeps are those of long_t_seed* bit
for bit; seed 1: the same commands with --seed 1, t1.pt, p1.pt and *_seed1 outputs):

    python3 bench/tempering_long.py --model antiberty --length 3 --temperature 0.5 --rungs 6 --seed 0 --epochs 36000 \
        --burn-in 200 --at 1000 2000 4000 8000 12000 16000 20000 24000 28000 32000 --save t0.pt \
        --out xlong_t_seed0.json
    python3 bench/tempering_long.py --model antiberty --length 3 --temperature 0.5 --plain --seed 0 --epochs 540000 \
        --burn-in 2000 --at-cpu 154 600 1787 2380 2980 3570 4170 4760 5360 --save p0.pt --out xlong_p_seed0.json
    python3 .../analysis.py trajectory t0.pt p0.pt 1000                           # xlong_trajectory_seed0.md
    python3 .../analysis.py exact t0.pt p0.pt                                     # xlong_exact_check_seed0.txt

Seed 2 the same length (2026-11-30, an Intel Xeon: its first 4,000 tempered sweeps are long_t_seed2's bit for bit,
then float rounding parts them): the same commands with --seed 2, then

    python3 .../analysis.py trajectory t2.pt - 1000              # xlong_tempered_trajectory_seed2.md (tempered only)
    python3 .../analysis.py trajectory t2.pt p2.pt 1000          # xlong_trajectory_seed2.md (with plain MH)
    python3 .../analysis.py exact t2.pt                          # xlong_exact_check_seed2.txt
"""
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/
import bench_tempering as bt  # noqa: E402
import tempering_long as tl  # noqa: E402

TEMPERATURE = 0.5
V = 20


def enumerated() -> torch.Tensor:
    """E_local of the 8,000 sequences (cached beside this file)."""
    cache = Path(__file__).with_name("enum_t3.pt")
    if not cache.exists():
        torch.set_num_threads(1)
        _, e = bt.enumerated_target(bt.dispersed_case("antiberty", 3, 4, 1.0))
        torch.save(e, cache)
    return torch.load(cache)


def target() -> tuple[torch.Tensor, torch.Tensor, float]:
    """The enumerated energies, the target's probabilities at TEMPERATURE and its mean E_local."""
    e = enumerated()
    p = torch.softmax(-e / TEMPERATURE, 0)
    return e, p, float((p * e).sum())


def at_lowest(x: np.ndarray, low: float) -> np.ndarray:
    """1.0 where an E_local in ``x`` is the lowest sequence's (``low``), else 0.0. The 1e-3 allows for float32
    rounding; the next sequence up is 0.80 nats higher, so the test names one sequence."""
    return (np.asarray(x) < low + 1e-3).astype(float)


def barriers() -> None:
    """Each local minimum's escape barrier (the lowest saddle to a basin with a lower minimum; single-site moves),
    by adding the sequences in order of energy (union-find), and the target's concentration per temperature."""
    e = enumerated()
    parent, added, lowest, escape = list(range(8000)), [False] * 8000, {}, {}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def neighbours(s):
        a, b, c = s // (V * V), (s // V) % V, s % V
        for k in range(V):
            for t in ((k * V + b) * V + c, (a * V + k) * V + c, (a * V + b) * V + k):
                if t != s:
                    yield t
    for s in torch.argsort(e).tolist():
        added[s], lowest[s] = True, s
        roots = sorted({find(t) for t in neighbours(s) if added[t]}, key=lambda r: float(e[lowest[r]]))
        if not roots:
            continue
        for r in roots[1:]:
            escape[lowest[r]] = float(e[s]) - float(e[lowest[r]])
            parent[r] = roots[0]
        parent[s] = find(roots[0])
    print("lowest minima (the global one has no escape): E_local, escape barrier in nats at temperature 1")
    for s, b in sorted(escape.items(), key=lambda kv: float(e[kv[0]]))[:8]:
        print(f"  sequence {s}: E {float(e[s]):.2f}, barrier {b:.2f}")
    for t in (1.0, 0.5, 0.3):
        p = torch.softmax(-e / t, 0)
        print(f"temperature {t}: mean E_local {float((p * e).sum()):.3f}, P(lowest) {float(p.max()):.3f}")


def exact(paths: list[str]) -> None:
    """Mean E_local and P(the lowest sequence, E_local 1.080: its energy is unique) of each saved run's draws at a
    quarter, half and all of its sweeps, against the enumerated target, in MCSE units (ArviZ's bulk-ESS)."""
    from arviz_stats.base import array_stats
    e, p, mean = target()
    low, p_low = float(e.min()), float(p.max())
    print(f"exact: mean E_local {mean:.4f}, P(lowest, E={low:.3f}) {p_low:.4f}")
    for f in paths:
        s = torch.load(f, weights_only=False)
        k, tr, ep = s["names"].index("e_local"), s["traces"][0], s["epochs"]
        for frac in (0.25, 0.5, 1.0):
            last = int(round(frac * len(s["rows_cum"])))
            x = tr[:, ((ep >= s["burn_in"]) & (ep < last)).nonzero().flatten(), k].double().numpy()
            out = []
            for name, v, want in (("mean E", x, mean), ("P(lowest)", at_lowest(x, low), p_low)):
                ess = float(array_stats.ess(v, method="bulk", chain_axis=0, draw_axis=1))
                out.append(f"{name} {v.mean():.4f} (exact {want:.4f}, ESS {ess:.0f}, "
                           f"z {(v.mean() - want) / (v.std() / np.sqrt(ess)):+.2f})")
            cpu = s["cpu_at"][last - 1] if s.get("cpu_at") else s["cpu"] * s["rows_cum"][last - 1] / s["rows_cum"][-1]
            print(f"{Path(f).name} sweeps {last} cpu {cpu:.0f}: " + "; ".join(out))


def match(pairs: list[str]) -> None:
    """Plain MH's figures (bench_tempering.window_figures) at each tempered budget's CPU seconds: the last plain
    sweep within it by the plain run's per-sweep CPU clock."""
    out = {}
    for seed, (tempered, plain) in enumerate(zip(pairs[::2], pairs[1::2])):
        t, (r, d) = json.loads(Path(tempered).read_text()), tl.load_saved(plain)
        out[seed] = {}
        for k in sorted((k for k in t if k.isdigit()), key=int):
            last = bt.last_within(d["cpu_at"], t[k]["cpu"], 0)
            if last > d["burn_in"]:
                out[seed][k] = bt.window_figures(r, d["rows_cum"], d["cpu"], d["burn_in"], last, d["cpu_at"])
    Path("plain_at_tempered_cpu.json").write_text(json.dumps(out, indent=1, default=float))


def trajectory(tempered: str, plain: str, every: int) -> None:
    """Max R-hat (and ESS, error of the mean E_local in MCSE) of a tempered run every ``every`` sweeps, with plain
    MH's at the same CPU seconds (per-sweep CPU clocks of both runs; ``plain`` "-": none), and the first budget from
    which the tempered one stays below 1.01 to the end of the run: does a crossing last?"""
    exact_mean = target()[2]
    (rt, t), (rp, p) = tl.load_saved(tempered), (tl.load_saved(plain) if plain != "-" else (None, None))
    print("| sweeps | CPU s | max R-hat tempered | plain MH | ESS E_local tempered | plain MH | "
          "mean E_local error / MCSE, tempered | plain MH |")
    print("|---|---|---|---|---|---|---|---|")
    below = None
    for last in range(t["burn_in"] + every, len(t["rows_cum"]) + 1, every):
        a = bt.window_figures(rt, t["rows_cum"], t["cpu"], t["burn_in"], last, t["cpu_at"])
        k = bt.last_within(p["cpu_at"], a["cpu"], 0) if p else 0
        b = (bt.window_figures(rp, p["rows_cum"], p["cpu"], p["burn_in"], k, p["cpu_at"]) if p and k > p["burn_in"]
             else None)
        below = (below or last) if a["rhat"] < 1.01 else None
        z = [f"{(f['mean_e'] - exact_mean) / (f['sd_e'] / np.sqrt(f['ess_e'])):+.2f}" if f else "-" for f in (a, b)]
        print(f"| {last} | {a['cpu']:.0f} | {a['rhat']:.4f} | {b['rhat'] if b else float('nan'):.3f} | "
              f"{a['ess_e']:.0f} | {b['ess_e'] if b else float('nan'):.1f} | {z[0]} | {z[1]} |", flush=True)
    print(f"tempered max R-hat below 1.01 from sweep {below} to the end" if below else
          "tempered max R-hat not below 1.01 at the end")


if __name__ == "__main__":
    {"barriers": lambda: barriers(), "exact": lambda: exact(sys.argv[2:]), "match": lambda: match(sys.argv[2:]),
     "trajectory": lambda: trajectory(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 1000)}[
        sys.argv[1]]()
