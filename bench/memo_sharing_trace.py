"""How many more proposals a proposal memo shared between chains would answer than the per-chain one (a trace).

Runs ``mhfast.sample`` on AntiBERTy with the memo off and logs every state-changing proposal (chain, state X,
proposal X', accepted) as the single-site step evaluates it. It then replays the log through three policies:

* **per-chain**: what ``memo=8`` does (mhfast/sampler/memo.py). Each chain keeps up to 8 proposals it rejected
  from its current state, first in first out, and forgets them when it moves.
* **shared, rejected**: one table keyed by the sequence X', holding every rejected proposal of every chain of the
  same input, kept for the whole run. E(X') depends on X' alone, so a chain may reuse another chain's numbers,
  and its own from an earlier visit to the same state.
* **shared, any known**: the same, plus every state a chain has been in.

Each count is the number of state-changing proposals the policy would have answered without forwarding their T-1
rows. Counts only, nothing timed: this measures whether a shared memo is worth building.

    python3 bench/memo_sharing_trace.py          # parent T=32 at 5 and 16 chains, random T=16 at 5 chains
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_mixmatch  # noqa: E402

import mhfast  # noqa: E402
from mhfast.sampler import moves  # noqa: E402

SLOTS = 8


def traced_run(lm, kind: str, T: int, chains: int, epochs: int) -> list[tuple[int, bytes, bytes, bool]]:
    """(chain, X, X', accepted) of every state-changing proposal of one run with memo=0, in the order evaluated."""
    log: list[tuple[int, bytes, bytes, bool]] = []
    real = moves.site_evaluate_and_accept

    def logged(ctx, state, ch, ch_host, pos, prop, *args, **kw):
        before = state.tokens.index_select(0, ch)
        after_state, k = real(ctx, state, ch, ch_host, pos, prop, *args, **kw)
        moved = (after_state.tokens.index_select(0, ch) != before).any(1)
        for j in range(ch.shape[0]):
            x_new = before[j].clone()
            x_new[pos[j]] = prop[j]
            log.append((int(ch[j]), before[j].numpy().tobytes(), x_new.numpy().tobytes(), bool(moved[j])))
        return after_state, k

    start, positions = bench_mixmatch.make_start(lm, T, kind)
    _, free = bench_mixmatch.evenly_spaced_sites(start, positions, positions.numel())
    moves.site_evaluate_and_accept = logged
    try:
        mhfast.sample(lm, init=start, free_positions=free, chains=chains, epochs=epochs, burn_in=1, seed=0, memo=0)
    finally:
        moves.site_evaluate_and_accept = real
    return log


def replay(log: list[tuple[int, bytes, bytes, bool]]) -> dict[str, int]:
    """Hits of the three policies (see the module doc) over one run's log (one input: every chain shares)."""
    per_chain: dict[int, list[tuple[bytes, bytes]]] = {}
    rejected: set[bytes] = set()
    known: set[bytes] = set()
    hits = {"per-chain": 0, "shared, rejected": 0, "shared, any known": 0}
    for chain, x, x_new, moved in log:
        mine = per_chain.setdefault(chain, [])
        hits["per-chain"] += (x, x_new) in mine
        hits["shared, rejected"] += x_new in rejected
        hits["shared, any known"] += x_new in known
        known.update((x, x_new))
        if moved:
            mine.clear()
        else:
            rejected.add(x_new)
            if (x, x_new) not in mine:
                mine.append((x, x_new))
                del mine[:-SLOTS]
    return hits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", nargs="+", default=["parent:32:5:12", "parent:32:16:6", "random:16:5:12"],
                    help="start:T:chains:epochs")
    args = ap.parse_args()
    torch.set_num_threads(1)
    lm = bench_mixmatch.load_model("antiberty", "cpu")
    print("| start | T | chains | epochs | state-changing proposals | per-chain memo (memo=8) | shared, rejected "
          "| shared, any known |")
    print("|---|---|---|---|---|---|---|---|")
    for case in args.cases:
        kind, T, C, E = case.split(":")
        log = traced_run(lm, kind, int(T), int(C), int(E))
        h = replay(log)
        n = len(log)
        cell = lambda k: f"{h[k]} ({h[k] / max(n, 1):.0%})"  # noqa: E731
        print(f"| {kind} | {T} | {C} | {E} | {n} | {cell('per-chain')} | {cell('shared, rejected')} | "
              f"{cell('shared, any known')} |", flush=True)


if __name__ == "__main__":
    main()
