"""The enumerated AntiBERTy T=3 target's basins: its single-site local minima (a sequence with no lower neighbour
among the 57 that differ from it at one residue), and the mass of each steepest-descent basin (every sequence
follows its lowest neighbour down to a minimum).

    python3 bench/tempering_runs/2026-11-28-antiberty-enumerated/basins.py    # ~3 CPU min; basins.txt
"""
import itertools, sys
from pathlib import Path
import torch
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/
import bench_tempering as bt

torch.set_num_threads(1)
case = bt.dispersed_case("antiberty", 3, 4, 1.0)
lm = case["model"]
states, e = bt.enumerated_target(case)  # in itertools.product order over the ordinary tokens
words = sorted(set(states[:, 1].tolist()))
V = len(words)
E, p = e.view(V, V, V), torch.softmax(-e, 0).view(V, V, V)
inv = {v: k for k, v in lm.vocab.items()}
name = lambda a, b, c: "".join(inv[words[i]] for i in (a, b, c))  # noqa: E731


def lowest_neighbour(a, b, c):
    best = (float(E[a, b, c]), a, b, c)
    for k in range(V):
        for cand in ((k, b, c), (a, k, c), (a, b, k)):
            if float(E[cand]) < best[0]:
                best = (float(E[cand]), *cand)
    return best[1:]


minima, basin = [], {}
for a, b, c in itertools.product(range(V), repeat=3):
    if lowest_neighbour(a, b, c) == (a, b, c):
        minima.append((float(E[a, b, c]), name(a, b, c)))
    x = (a, b, c)
    while (y := lowest_neighbour(*x)) != x:
        x = y
    basin[x] = basin.get(x, 0.0) + float(p[a, b, c])
print(f"exact mean E_local {float((p.flatten() * e).sum()):.4f}; {len(minima)} single-site local minima; lowest: "
      + ", ".join(f"{n} {v:.2f}" for v, n in sorted(minima)[:6]))
top = sorted(basin.items(), key=lambda kv: -kv[1])[:10]
print("ten largest basins (minimum, E_local, mass): " + ", ".join(f"{name(*k)} {float(E[k]):.2f} {m:.3f}" for k, m in top)
      + f"; together {sum(m for _, m in top):.3f}")
