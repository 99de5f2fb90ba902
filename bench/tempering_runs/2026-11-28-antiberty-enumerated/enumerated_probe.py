"""Does tempering sample the exact target on the real model? AntiBERTy, T=3 random residues all free (20^3 = 8,000
sequences, enumerated), energy local, 4 chains each from its own random residues, target temperature 1, the long
run's ladder [1, 1.19, 1.43, 1.93, 3.45, 16] fixed, a tuned 6-rung ladder, and plain MH; the memo on (default).

Per chain: mean E_local against the exact mean (z: the error over sd / sqrt(ESS of the chain), ArviZ's bulk ESS),
the TV of the three per-position marginals (20 residues each) against the exact ones, and P(E_local <= the target's
median) against the exact one. Each chain's draws are every post-burn-in sweep (burn-in 200).

    python3 bench/tempering_runs/2026-11-28-antiberty-enumerated/enumerated_probe.py 3000 3   # ~45 CPU min; .txt
"""
import itertools, sys, time
from pathlib import Path
import torch
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))
import bench_tempering as bt
import exact_checks
import mhfast
from arviz_stats.base import array_stats

torch.set_num_threads(1)
epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
T = int(sys.argv[2]) if len(sys.argv) > 2 else 3
burn = 200
case = bt.dispersed_case("antiberty", T, 4, 1.0)
lm, init = case["model"], case["inputs"]["init"]
free = case["inputs"]["free_positions"][0]
words = exact_checks.ordinary_tokens(lm)
print("init", init.tolist(), "free", free.nonzero().flatten().tolist(), "words", words, flush=True)
pos = free.nonzero().flatten().tolist()
states = []
for combo in itertools.product(words, repeat=len(pos)):
    x = init[0].clone(); x[pos] = torch.tensor(combo); states.append(x)
states = torch.stack(states)
K = states.shape[0]
t0 = time.time()
emask = ~torch.isin(init[0], torch.tensor(sorted(set(lm.special_ids))))
_, e = exact_checks.energies(lm, states, emask)  # the reference ops, one masked row per energy position
print("enumerated", K, "states in", round(time.time() - t0, 1), "s; E range", float(e.min()), float(e.max()),
      flush=True)
p = torch.softmax(-e, 0)
mu = float((p * e).sum())
med = float(e[torch.argsort(e)][int((torch.cumsum(p[torch.argsort(e)], 0) < 0.5).sum())])
p_low = float(p[e <= med].sum())
marg = [torch.zeros(lm.vocab_size, dtype=torch.float64).index_add_(0, states[:, q], p) for q in pos]
print(f"exact mean E_local {mu:.4f}, P(E <= {med:.3f}) = {p_low:.4f}", flush=True)
for name, temp in (("plain", None), ("fixed", [1.0, 1.19, 1.43, 1.93, 3.45, 16.0]), ("tuned", 6)):
    t0 = time.time()
    r = mhfast.sample(lm, init=init, free_positions=case["inputs"]["free_positions"], chains=4, energy="local",
                      start="random", epochs=epochs, burn_in=burn, seed=0, tempering=temp, record="epoch")
    h = r.history[:, 0]  # [D, C, L]
    D = h.shape[0]
    # energies of the drawn states, looked up in the enumeration (checks the traced ones as well)
    idx = torch.zeros(D, 4, dtype=torch.long)
    code = lambda x: sum(x[..., q] * (lm.vocab_size ** i) for i, q in enumerate(pos))  # noqa: E731
    lut = {int(c): k for k, c in enumerate(code(states).tolist())}
    idx = torch.tensor([[lut[int(c)] for c in row] for row in code(h).tolist()])
    ed = e[idx]  # [D, C]
    ess = float(array_stats.ess(ed.T.numpy(), chain_axis=0, draw_axis=1))
    rhat = float(array_stats.rhat(ed.T.numpy(), chain_axis=0, draw_axis=1))
    print(f"{name}: {time.time() - t0:.0f} s, {D} draws/chain, ESS(E) {ess:.0f}, R-hat(E) {rhat:.4f}, "
          f"ladder {None if r.ladder is None else [round(x, 2) for x in r.ladder[0].tolist()]}", flush=True)
    for c in range(4):
        x = ed[:, c].numpy()
        ess_c = float(array_stats.ess(x[None], chain_axis=0, draw_axis=1))
        mcse = float(x.std()) / max(ess_c, 1) ** 0.5
        low = float((ed[:, c] <= med).double().mean())
        tvs = []
        for j, q in enumerate(pos):
            emp = torch.bincount(h[:, c, q], minlength=lm.vocab_size).double() / D
            tvs.append(0.5 * float((emp - marg[j]).abs().sum()))
        print(f"  chain {c}: mean E {x.mean():.3f} (exact {mu:.3f}, z {(x.mean() - mu) / mcse:+.2f}, ESS {ess_c:.0f})"
              f" P(E<=med) {low:.3f} (exact {p_low:.3f}) marginal TV {' '.join(f'{t:.3f}' for t in tvs)}",
              flush=True)
    pooled = ed.flatten().numpy()
    print(f"  pooled: mean E {pooled.mean():.3f} z {(pooled.mean() - mu) / (pooled.std() / ess ** 0.5):+.2f}",
          flush=True)
