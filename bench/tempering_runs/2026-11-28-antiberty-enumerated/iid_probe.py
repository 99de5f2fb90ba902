"""Tempering's target chains on the real model, checked without any ESS estimate: n independent chains, each one
final state, against the enumerated target. AntiBERTy, T=3 random residues all free (20^3 = 8,000 sequences),
energy local, target temperature 1, every chain from its own random residues; the final states' mean E_local against
the exact mean (z from the iid standard error sd / sqrt(n)) and the three per-position marginals' TV against the
bound of tests/exact_checks.tv_and_bound (3 x the expected TV of n draws).

    python3 bench/tempering_runs/2026-11-28-antiberty-enumerated/iid_probe.py [chains] [sweeps]   # ~15 CPU min
"""
import sys, time
from pathlib import Path
import torch
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/
import bench_tempering as bt
import mhfast

torch.set_num_threads(1)
n = int(sys.argv[1]) if len(sys.argv) > 1 else 400
sweeps = int(sys.argv[2]) if len(sys.argv) > 2 else 200
case = bt.dispersed_case("antiberty", 3, n, 1.0)
lm, init, free = case["model"], case["inputs"]["init"], case["inputs"]["free_positions"]
pos = free[0].nonzero().flatten().tolist()
t0 = time.time()
states, e = bt.enumerated_target(case)
p = torch.softmax(-e, 0)
mu, sd = float((p * e).sum()), float((p * (e - (p * e).sum()) ** 2).sum().sqrt())
V = int(lm.vocab_size)
marg = [torch.zeros(V, dtype=torch.float64).index_add_(0, states[:, q], p) for q in pos]
print(f"enumerated {states.shape[0]} sequences in {time.time() - t0:.0f} s: exact mean E_local {mu:.4f}, sd {sd:.4f}",
      flush=True)
lut = {tuple(s): k for k, s in enumerate(states[:, pos].tolist())}
for name, temp in (("fixed [1, 1.19, 1.43, 1.93, 3.45, 16]", [1.0, 1.19, 1.43, 1.93, 3.45, 16.0]),
                   ("tuned 6", 6), ("plain MH", None)):
    t0 = time.perf_counter()
    r = mhfast.sample(lm, init=init, free_positions=free, chains=n, energy="local", start="random", epochs=sweeps,
                      burn_in=sweeps // 4, seed=11, tempering=temp)
    final = r.tokens[0]
    ed = e[torch.tensor([lut[tuple(s)] for s in final[:, pos].tolist()])]
    z = (float(ed.mean()) - mu) / (sd / n ** 0.5)
    tvs = []
    for j, q in enumerate(pos):
        emp = torch.bincount(final[:, q], minlength=V).double() / n
        tv = 0.5 * float((emp - marg[j]).abs().sum())
        bound = 3 * 0.5 * float(torch.sqrt(marg[j] * (1 - marg[j]) / n).sum())
        tvs.append(f"{tv:.3f} (bound {bound:.3f})")
    print(f"{name}: {n} chains x {sweeps} sweeps, {time.perf_counter() - t0:.0f} s, {r.model_rows} rows: mean E_local "
          f"{float(ed.mean()):.4f} (exact {mu:.4f}, z {z:+.2f}); marginal TV {', '.join(tvs)}", flush=True)
