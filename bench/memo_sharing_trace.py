"""How many more proposals a proposal memo shared between chains would answer than the per-chain one (a trace).

Runs ``mhfast.sample`` on AntiBERTy with the memo off and logs every state-changing proposal (step, chain, state X,
proposal X', accepted) as the single-site step evaluates it. It then replays the log through four policies:

* **per-chain**: what ``memo=8`` did before the memo became a table per input (commit 406d239). Each chain keeps up
  to 8 proposals it rejected from its current state, first in first out, and forgets them when it moves.
* **shared, rejected**: one table keyed by the sequence X', holding every rejected proposal of every chain of the
  same input, kept for the whole run. E(X') depends on X' alone, so a chain may reuse another chain's numbers,
  and its own from an earlier visit to the same state.
* **shared, any known**: the same, plus every state a chain has been in.
* **as built**: what ``memo=8`` does now (mhfast/sampler/memo.py), replayed through the lookup's reference: one
  table per input of 8 x chains entries in buckets of 8, least recently used out, holding every evaluated X'
  (rejected or accepted), a proposal of the same step included. Counted as two numbers: the hits rejected (their
  rows saved) and those accepted (which forward their rows anyway, for the cache).

Each count is the number of state-changing proposals the policy would have answered without forwarding their T-1
rows. Counts only, nothing timed: this measures whether a shared memo is worth building.

    python3 bench/memo_sharing_trace.py          # parent T=32 at 5 and 16 chains, random T=16 at 5 chains
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_mixmatch  # noqa: E402

import mhfast  # noqa: E402
from mhfast import reference  # noqa: E402
from mhfast.sampler.kernels import mh  # noqa: E402
from mhfast.sampler.memo import WAYS  # noqa: E402

SLOTS = 8


def traced_run(lm, kind: str, T: int, chains: int, epochs: int) -> list[tuple[int, int, bytes, bytes, bool]]:
    """(step, chain, X, X', accepted) of every state-changing proposal of one run with memo=0, in the order
    evaluated (step: the number of the step-evaluating call)."""
    log: list[tuple[int, int, bytes, bytes, bool]] = []
    real = mh.commit_sites
    calls = [0]

    def logged(ctx, state, tested, scored, **kw):  # the single-site step's accept-and-commit phase
        ch, pos, prop = tested.proposal.ch, tested.proposal.pos, tested.proposal.proposed
        before = state.tokens.index_select(0, ch)
        after_state, k = real(ctx, state, tested, scored, **kw)
        moved = (after_state.tokens.index_select(0, ch) != before).any(1)
        for j in range(ch.shape[0]):
            x_new = before[j].clone()
            x_new[pos[j]] = prop[j]
            log.append((calls[0], int(ch[j]), before[j].numpy().tobytes(), x_new.numpy().tobytes(), bool(moved[j])))
        calls[0] += 1
        return after_state, k

    start, positions = bench_mixmatch.make_start(lm, T, kind)
    _, free = bench_mixmatch.evenly_spaced_sites(start, positions, positions.numel())
    mh.commit_sites = logged
    try:
        mhfast.sample(lm, init=start, free_positions=free, chains=chains, epochs=epochs, burn_in=1, seed=0, memo=0)
    finally:
        mh.commit_sites = real
    return log


def replay(log: list[tuple[int, int, bytes, bytes, bool]]) -> dict[str, int]:
    """Hits of the three policies (see the module doc) over one run's log (one input: every chain shares)."""
    per_chain: dict[int, list[tuple[bytes, bytes]]] = {}
    rejected: set[bytes] = set()
    known: set[bytes] = set()
    hits = {"per-chain": 0, "shared, rejected": 0, "shared, any known": 0}
    for _, chain, x, x_new, moved in log:
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


def as_built(log: list[tuple[int, int, bytes, bytes, bool]], chains: int, ways: int = WAYS) -> tuple[int, int]:
    """(rejected hits, accepted hits) of the memo as built (memo=8: one input, 8 x chains entries in buckets of
    ``ways``), replayed through the lookup's own reference (:func:`mhfast.reference.memo_lookup_one`); a miss's
    terms are stored at once, as the step does before any hit reads them."""
    S = -(-SLOTS * chains // ways) * ways
    L = len(log[0][3]) // 8 if log else 0
    stamp, hashes, stored = [-1] * S, [0] * S, [[0] * L for _ in range(S)]
    rejected = accepted = 0
    for step, _, _, x_new, moved in log:
        entry, hit = reference.memo_lookup_one(stamp, hashes, stored, numpy.frombuffer(x_new, numpy.int64).tolist(),
                                               ways, step)
        if hit:
            accepted += moved
            rejected += not moved
        elif entry >= 0:
            stamp[entry] = step  # the store: ready
    return rejected, accepted


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", nargs="+", default=["parent:32:5:12", "parent:32:16:6", "random:16:5:12"],
                    help="start:T:chains:epochs")
    args = ap.parse_args()
    torch.set_num_threads(1)
    lm = bench_mixmatch.load_model("antiberty", "cpu")
    print("| start | T | chains | epochs | state-changing proposals | per-chain memo (first memo=8) | shared, rejected "
          "| shared, any known | as built (memo=8): hits rejected, accepted |")
    print("|---|---|---|---|---|---|---|---|---|")
    for case in args.cases:
        kind, T, C, E = case.split(":")
        log = traced_run(lm, kind, int(T), int(C), int(E))
        h = replay(log)
        n = len(log)
        cell = lambda k: f"{h[k]} ({h[k] / max(n, 1):.0%})"  # noqa: E731
        rej, acc = as_built(log, int(C))
        print(f"| {kind} | {T} | {C} | {E} | {n} | {cell('per-chain')} | {cell('shared, rejected')} | "
              f"{cell('shared, any known')} | {rej} ({rej / max(n, 1):.0%}), {acc} |", flush=True)


if __name__ == "__main__":
    main()
