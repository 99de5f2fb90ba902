"""Record every rung's target energy after each sweep (before the swaps) of the AntiBERTy T=8 tempered run, seed 0.

    python3 bench/tempering_runs/2026-11-27-antiberty-t8-seed0/ladder_probe.py 192    # ~22 CPU min; writes probe192.pt
    python3 bench/tempering_runs/2026-11-27-antiberty-t8-seed0/probe_analyze.py probe192.pt   # ladder_probe.txt
"""
import sys, time
import torch
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))  # bench/
import bench_tempering as bt
from mhfast.sampler import tempering as tp

rec = []
orig = tp.Tempered._swap
def _swap(self, state, epoch):
    if epoch.beta is not None:
        rec.append((epoch.index, state.target.double().cpu().clone(), self.label.clone(), self.betas.clone()))
    return orig(self, state, epoch)
tp.Tempered._swap = _swap
torch.set_num_threads(1)
sweeps = int(sys.argv[1])
case = bt.dispersed_case("antiberty", 8, 4, 1.0)
t0 = time.time()
r, rows, cpu = bt.traced_run(case, sweeps, 128, 0, 6, echo=16)
torch.save({"rec": rec, "traces": r.traces, "names": r.trace_names, "rows": rows}, f"probe{sweeps}.pt")
print("done", time.time() - t0)
