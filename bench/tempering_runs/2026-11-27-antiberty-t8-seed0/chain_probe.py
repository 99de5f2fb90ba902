"""Each chain's own distribution against the enumerated target, plain MH and the AntiBERTy run's ladder (fixed, tuned).

    python3 bench/tempering_runs/2026-11-27-antiberty-t8-seed0/chain_probe.py    # from the repository root; seconds
"""
import sys
sys.path.insert(0, "tests"); sys.path.insert(0, "tests/sampler")
import torch, mhfast
from mhfast.models.tabular import TabularMLM
from exact_checks import enumerate_states, masks, target_distribution, empirical
torch.set_num_threads(1)
model = TabularMLM.random(num_tokens=3, length=3, seed=11, scale=1.5, features=True)
template, free = masks(model, 3)
states = enumerate_states(model, template, free)
p = target_distribution(model, states, torch.ones(3, dtype=torch.bool), "local", 1.0)
for temp in (None, [1.0, 1.19, 1.43, 1.93, 3.45, 16.0], 6):
    r = mhfast.sample(model, init=template[None], chains=4, epochs=3000, burn_in=100, seed=0, energy="local",
                      tempering=temp, record="epoch")
    h = r.history  # expect [D, B, C, T] or similar
    print("history", tuple(h.shape))
    for c in range(4):
        toks = h[:, 0, c] if h.dim() == 4 else h[:, c]
        q = empirical(states, toks)
        print(temp, c, "TV", round(float(0.5 * (p - q).abs().sum()), 4))
