"""Runs propose at ops_floor's size for ncu: B=1320 V=32000 fp32, top_p 1 then 0.9 (launch 3 of each profiled)."""
import sys, torch
from mhfast import ops
B, V = 1320, 32000
g = torch.Generator().manual_seed(1)
x = (torch.randn(B, V, generator=g) * 3).cuda()
cur = torch.randint(0, V, (B,), generator=g).cuda()
u = torch.rand(B, generator=g).cuda()
for top_p in (1.0, 0.9):
    for _ in range(3):
        ops.propose(x, cur, 1.0, top_p, u, 0.0, validate=False)
    torch.cuda.synchronize()
print("done")
