"""mhfast humanize's sampler call on Sapiens (heavy chain, adalimumab's VH, CDRs kept): delayed None / early:2 /
influence:2 (what auto ran before) / auto, CPU seconds and model rows, 2 seeds."""
import sys, time, torch, mhfast
from mhfast.humanize import Hamming, _parent_and_free
from mhfast.models.sapiens import load_sapiens
torch.set_num_threads(1)
lm = load_sapiens("H")
VH = "EVQLVESGGGLVQPGRSLRLSCAASGFTFDDYAMHWVRQAPGKGLEWVSAITWNSGHIDYADSVEGRFTISRDNAKNSLYLQMNSLRAEDTAVYYCAKVSYLSTASSLDYWGQGTLVTVSS"
ids, free, _ = _parent_and_free(lm, VH, [(26, 35), (49, 66), (98, 110)])
terms = [(Hamming(ids, pad_id=lm.pad_id), 1.0)]
kw = dict(init=ids, free_positions=free, energy="local", extra_energy=terms, chains=8, epochs=6, burn_in=2)
mhfast.sample(lm, **{**kw, "epochs": 1, "burn_in": 0}, seed=99)  # warm-up
for seed in (0, 1):
    for d in (None, "early:2", "influence:2", "auto"):
        t = time.process_time()
        r = mhfast.sample(lm, **kw, seed=seed, **({} if d is None else {"delayed": d}))
        t = time.process_time() - t
        print(f"seed {seed} {str(d):12s} rows {r.model_rows - r.init_rows:6d} cpu {t:6.2f} s accept "
              f"{float(r.acceptance_rate[2:].mean()):.3f} E {float(r.energy.min()):.3f}", flush=True)
