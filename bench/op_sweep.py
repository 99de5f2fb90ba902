"""A short sweep of every op over odd shapes, each result compared with the reference.

Made to run under compute-sanitizer (memcheck, racecheck, synccheck) on a GPU: small but awkward
sizes (V = 1, odd V, V not a multiple of the vector width, unaligned row strides, the propose
shared-memory edge V ~ 11.7k-12.3k, a V that needs the global scratch row, ties, -inf columns,
NaN rows under validate=False), fp32/fp16/bf16; then the ops added later (bench/op_sweep_site.py):
propose with uniform_mix > 0, mh_propose_site (incl. out-of-range act/pos under validate=False),
mh_commit_site_ (forced accept, several output sub-batches) and the proposal memo's two ops. Every output is
checked against mhfast.reference (exact for indices, 1e-4 for floats, away from fp32 boundaries where the two may
legitimately differ by rounding). On CPU it runs the same sweep on the CPU kernels.

Exit code 0 iff every case matched. Prints one line per case.

Example:
    compute-sanitizer --tool memcheck python3 bench/op_sweep.py --device cuda --small
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import mhfast.ops as ops  # noqa: E402
import mhfast.reference as reference  # noqa: E402
from op_sweep_site import (check_commit_site, check_memo_ops, check_memo_out_of_range,  # noqa: E402
                           check_propose_mix, check_propose_site, check_propose_site_out_of_range)

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def logits_rows(B: int, V: int, seed: int, dtype: torch.dtype, offset: int = 0) -> torch.Tensor:
    """[B, V] logits with ties and -inf entries; offset > 0 makes the rows start unaligned."""
    g = torch.Generator().manual_seed(seed)
    x = ((torch.randn(B, V + offset, generator=g) * 3 * 2).round() / 2)
    x[torch.rand(B, V + offset, generator=g) < 0.1] = float("-inf")
    x[:, offset] = 2.0
    return x.to(dtype)[:, offset:]


def check_propose(B: int, V: int, dtype: torch.dtype, top_p: float, device: str, offset: int) -> str | None:
    logits = logits_rows(B, V, B * 7 + V, dtype, offset)
    g = torch.Generator().manual_seed(V)
    current = torch.randint(0, V, (B,), generator=g)
    u = torch.rand(B, generator=g)
    exp = reference.propose(logits, current, 0.9, top_p, u)
    got = [t.cpu() for t in ops.propose(logits.to(device), current.to(device), 0.9, top_p, u.to(device))]
    # Agreement may fail only where u or a nucleus boundary sits within rounding: allow 2% of rows.
    bad = (got[0] != exp[0]).float().mean().item()
    if bad > 0.02:
        return f"proposed differs on {bad:.1%} of rows"
    same = got[0] == exp[0]
    if not torch.allclose(got[1][same], exp[1][same], rtol=1e-3, atol=1e-3):
        return "logq_proposed differs"
    if not torch.isfinite(logits.float().gather(1, got[0][:, None])).all():
        return "proposed a -inf logit"
    return None


def check_propose_nan_rows(device: str) -> str | None:
    """validate=False: a NaN / +inf / all -inf row proposes current with NaN log q (never -1)."""
    logits = logits_rows(4, 300, 1, torch.float32)
    logits[1, 7] = float("nan")
    logits[2, 9] = float("inf")
    logits[3] = float("-inf")
    current = torch.tensor([5, 6, 7, 8])
    if device == "cpu":
        return None  # the CPU kernel raises instead (checked in tests/test_propose.py)
    prop, lp, lc = (t.cpu() for t in ops.propose(logits.to(device), current.to(device), 1.0, 0.9,
                                                    torch.full((4,), 0.5, device=device), validate=False))
    if not (torch.equal(prop[1:], current[1:]) and torch.isnan(lp[1:]).all() and torch.isnan(lc[1:]).all()):
        return f"bad rows gave {prop.tolist()} {lp.tolist()}"
    return None


def check_gather(N: int, V: int, S: int, dtype: torch.dtype, device: str, offset: int, sorted_seq: bool) -> str | None:
    logits = logits_rows(N, V, N + V, dtype, offset).clamp(min=-30)
    g = torch.Generator().manual_seed(N)
    targets = torch.randint(0, V, (N,), generator=g)
    seq = torch.randint(0, max(S, 1), (N,), generator=g) if S else torch.zeros(N, dtype=torch.long)
    if sorted_seq:
        seq = seq.sort().values
    exp = reference.gather_energies(logits, targets, seq, S)
    got = [t.cpu() for t in ops.gather_energies(logits.to(device), targets.to(device), seq.to(device), S)]
    for name, a, b in zip(("e_raw", "e_local", "token_logp"), got, exp):
        if not torch.allclose(a, b, rtol=1e-4, atol=1e-3 * max(1, N // max(S, 1))):
            return f"{name} differs (max {(a - b).abs().max().item():.3g})"
    return None


def check_small_ops(device: str) -> str | None:
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 50, (7, 13), generator=g)
    seq = torch.randint(0, 7, (29,), generator=g)
    pos = torch.randint(0, 13, (29,), generator=g)
    if not torch.equal(ops.masked_copies(tokens.to(device), seq.to(device), pos.to(device), 3).cpu(),
                       reference.masked_copies(tokens, seq, pos, 3)):
        return "masked_copies differs"
    B = 37
    args = [tokens[:1].repeat(B, 1), torch.randint(0, 13, (B,), generator=g), torch.randint(0, 50, (B,), generator=g),
            *[torch.randn(B, generator=g) for _ in range(4)], torch.ones(B), torch.rand(B, generator=g)]
    ref_args = [a.clone() for a in args]
    exp = reference.mh_accept_(*ref_args)
    dev_args = [a.to(device) for a in args]
    got = ops.mh_accept_(*dev_args).cpu()
    if not (torch.equal(got, exp) and torch.equal(dev_args[0].cpu(), ref_args[0])):
        return "mh_accept_ differs"
    return None


def sweep(device: str, small: bool, tiny: bool = False) -> list[tuple[str, str | None]]:
    results = [("masked_copies + mh_accept_", check_small_ops(device)),
               ("propose NaN/+inf/-inf rows", check_propose_nan_rows(device))]
    if tiny:  # a smoke run of every check (CI)
        vs, dtypes, top_ps = [1, 37, 2049], (torch.float32, torch.bfloat16), (1.0, 0.3)
    elif small:
        vs, dtypes, top_ps = [1, 3, 37, 1000, 2049, 11_700, 12_288], DTYPES, (1.0, 0.9, 0.3)
    else:
        vs, dtypes, top_ps = [1, 3, 37, 1000, 2049, 4097, 11_700, 11_999, 12_288, 12_300, 33_000, 70_000], DTYPES, \
            (1.0, 0.9, 0.3)
    for V in vs:
        for dtype in dtypes:
            for top_p in top_ps:
                offset = 1 if V % 2 else 0
                results.append((f"propose B=5 V={V} {dtype} top_p={top_p} offset={offset}",
                                check_propose(5, V, dtype, top_p, device, offset)))
    shapes = ((0, 5, 3), (1, 1, 1), (17, 33, 5)) if tiny else ((0, 5, 3), (1, 1, 1), (17, 33, 5), (64, 4097, 64),
                                                                (300, 129, 300))
    for N, V, S in shapes:
        for dtype in dtypes:
            for sorted_seq in (True, False):
                results.append((f"gather N={N} V={V} S={S} {dtype} sorted={sorted_seq}",
                                check_gather(N, V, S, dtype, device, 1 if V % 2 else 0, sorted_seq)))
    return results + sweep_site_ops(device, vs, dtypes, tiny)


def sweep_site_ops(device: str, vs: list[int], dtypes: tuple, tiny: bool) -> list[tuple[str, str | None]]:
    """The ops added after the sweep was written: propose with a uniform share, the fused single-site step."""
    results = []
    # Rows past ~10k are slow under racecheck (every shared-memory access is tracked): fp32 only there.
    dtypes_for = lambda V: dtypes[:1] if V > 10_000 else dtypes  # noqa: E731
    vs = [V for V in vs if V != 11_700]  # the shared-memory edge once (12_288) is enough for the mixture
    for V in vs:  # uniform_mix > 0: odd V with unaligned rows, -inf entries, top_p < 1 and = 1
        for dtype in dtypes_for(V):
            for top_p in (1.0, 0.3):
                offset = 1 if V % 2 else 0
                results.append((f"propose uniform_mix=0.05 B=8 V={V} {dtype} top_p={top_p} offset={offset}",
                                check_propose_mix(8, logits_rows(8, V, V + 5, dtype, offset), top_p, 0.05, device)))
    results.append(("mh_propose_site out-of-range act/pos (validate=False)", check_propose_site_out_of_range(device)))
    for V in ((2, 37) if tiny else (2, 37, 1001, 12_289)):  # odd V: every cache row starts unaligned
        for dtype in dtypes_for(V):
            for top_p in (1.0, 0.8):
                results.append((f"mh_propose_site M=6 T=3 V={V} A=5 {dtype} top_p={top_p}",
                                check_propose_site(6, 3, V, 5, dtype, top_p, device)))
    shapes = ((9, 6, 5, 5, 3), (1, 1, 2, 1, 2)) if tiny else ((9, 6, 5, 5, 3), (1, 1, 2, 1, 2), (40, 12, 33, 17, 5),
                                                              (16, 8, 1001, 16, 4))
    for M, T, D, n, chunks in shapes:
        for dtype in dtypes:
            for beta in (1.0, None, "rows"):  # "rows": a beta per chain row (parallel tempering's ladder)
                results.append((f"mh_commit_site_ M={M} T={T} D={D} n={n} chunks={chunks} {dtype} beta={beta}",
                                check_commit_site(M, T, D, n, dtype, beta, chunks, device)))
    memo_shapes = ((1, 1, 1, 1, 1), (2, 8, 4, 6, 5)) + (() if tiny else ((3, 24, 40, 300, 200),))
    for G, S, L, M, A in memo_shapes:
        results.append((f"mh_memo_lookup_ + mh_memo_store_ G={G} S={S} L={L} M={M} A={A} (30 steps)",
                        check_memo_ops(G, S, L, M, A, 30, device)))
    results.append(("mh_memo ops out-of-range act/group/slot/sel (validate=False)", check_memo_out_of_range(device)))
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--small", action="store_true", help="fewer sizes (for the slow sanitizer tools)")
    p.add_argument("--tiny", action="store_true", help="a few sizes only (smoke run)")
    args = p.parse_args(argv)
    failures = 0
    for name, err in sweep(args.device, args.small, args.tiny):
        print(f"{'ok  ' if err is None else 'FAIL'} {name}{'' if err is None else ': ' + err}", flush=True)
        failures += err is not None
    print(f"op sweep on {args.device}: {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
