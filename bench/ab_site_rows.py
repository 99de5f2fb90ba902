"""A/B in one process: the single-site step with the fused ``mh_site_rows`` op vs the op sequence it replaced.

The sampler's own cost per step (bench/bench_floor.py's NullMLM, so the model costs ~nothing), CPU time per
marginal step (time.process_time: less sensitive to other jobs than wall time), the two versions alternating,
median of the rounds. The "unfused" version is the rows phase as mhfast/sampler/moves.py ran it before the op
(selects, scatters, nonzero_static, masked_copies, an index); both give the same chains (tests/guards/test_golden.py).

    python3 bench/ab_site_rows.py [--rounds 4]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_floor import alternating_cpu_ms  # noqa: E402
import results_md  # noqa: E402

from mhfast.sampler import moves  # noqa: E402

FUSED = moves.site_terms


def unfused(ctx, state, ch, ch_host, pos, prop, known_logits):
    """moves.site_terms before mh_site_rows (unconditional models only: no context index)."""
    runner, be = ctx.runner, ctx.backend
    n = ch.shape[0]
    at = pos[:, None]
    x_new = state.tokens.index_select(0, ch).scatter_(1, at, prop[:, None])
    need = state.energy_mask.index_select(0, ch).scatter_(1, at, False)
    num_rows = int(state.num_energy_host.index_select(0, ch_host).sum()) - n
    raw_new = state.raw_terms.index_select(0, ch)
    local_new = state.local_terms.index_select(0, ch)
    if num_rows:
        seq, q = torch.nonzero_static(need, size=num_rows).unbind(1)
        rows = be.masked_copies(x_new, seq, q, runner.mask_id)
        r, l, outputs = runner.score_rows(be, rows, q, x_new[seq, q], None, keep_outputs=True, chunks=True)
        raw_new.index_put_((seq, q), r)
        local_new.index_put_((seq, q), l)
    else:
        seq = q = torch.zeros(0, dtype=torch.long, device=ch.device)
        outputs = []
    r_i, l_i = runner.terms_from_logits(be, known_logits, prop)
    raw_new.scatter_(1, at, r_i[:, None])
    local_new.scatter_(1, at, l_i[:, None])
    return x_new, raw_new, local_new, seq, q, outputs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3, help="runs per measurement (per_step_ms takes their median)")
    args = p.parse_args()
    torch.set_num_threads(1)
    print(f"Machine: {results_md.machine_description()}")
    print("| chains | T | unfused (CPU ms / step) | mh_site_rows (CPU ms / step) | unfused / fused | rounds (unfused; fused) |")
    print("|---|---|---|---|---|---|")
    use = lambda fn: lambda: setattr(moves, "site_terms", fn)  # noqa: E731
    for C, T in ((5, 10), (5, 20), (5, 40), (500, 40)):
        got = alternating_cpu_ms(C, T, {"unfused": use(unfused), "fused": use(FUSED)}, use(FUSED), args.rounds,
                                 args.repeats)
        u, f = statistics.median(got["unfused"]), statistics.median(got["fused"])
        rounds = ", ".join(f"{x:.3f}" for x in got["unfused"]) + "; " + ", ".join(f"{x:.3f}" for x in got["fused"])
        print(f"| {C} | {T} | {u:.3f} | {f:.3f} | {u / f:.2f}x | {rounds} |", flush=True)


if __name__ == "__main__":
    main()
