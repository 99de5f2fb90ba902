"""Per chain and rung, the energies ladder_probe.py recorded (before each sweep's swaps)."""
import sys, torch, numpy as np
d = torch.load(sys.argv[1], weights_only=False)
K, C = 6, 4
ep = np.array([e for e, *_ in d["rec"]])
E = torch.stack([t for _, t, _, _ in d["rec"]]).numpy()  # [S, K*C] by row (b=0): row k*C+c
post = ep >= 128
print("sweeps recorded", len(ep), "post-burn-in", post.sum())
print("model rows at the last sweep:", d["rows"][-1], "(the long run's: 190,032 at sweep 192)")
for c in range(C):
    line = []
    for k in range(K):
        x = E[post, k * C + c]
        line.append(f"{x.mean():5.2f}/{x.min():5.2f}")
    print(f"chain {c}: mean/min per rung (post-burn-in)", " ".join(line))
for c in range(C):
    line = []
    for k in range(K):
        x = E[:, k * C + c]
        line.append(f"{x.mean():5.2f}")
    print(f"chain {c}: mean per rung, all sweeps", " ".join(line))
print("ladder", (1 / d["rec"][-1][3]).numpy().round(2))
