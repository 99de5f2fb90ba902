"""A first stage learnt from the model's own rows: move tables (issue 34), offline, on AntiBERTy infilling.

The window surrogates forward a few rows of X' exactly and take every other term as unchanged. The terms they leave
out are not unknown, though: a chain near a mode proposes the same few moves (position i, residue a -> b) again and
again, and whenever the sampler has paid for every row of X' it has seen how much each other term moved. Two
tables kept from such proposals (burn-in's, then frozen) predict a new proposal's change from them:

* ``move table``: per move (i, a, b), the mean change of every other term j;
* ``context table``: per move and per other position j *with its residue* x_j, the mean change of term j (a
  pairwise model of the MLM around the chains' states): a move seen before in other contexts is predicted at the
  positions whose residue matches, and its other terms are taken as unchanged.

Stage 1 then forwards no rows for a move the table knows (dE~ = own change at i + the table's changes), and the
``influence 2`` window's rows for one it does not. An entry for (i, b, a) is the negated entry for (i, a, b) (the
reverse move from X' undoes the same change in the same context), so dE~ is a fixed, antisymmetric function of
(X, X') once frozen, and each position's two-stage kernel stays reversible for the exact target (docs/delayed.md:
that is all stage 2's formula needs; a table need not be an energy).

Measured as bench/delayed_influence.py measures (leave one seed out: the tables and rankings fitted on the other
seeds' proposals, evaluated on this seed's; expected values from the probabilities, memo off), on all proposals and
on the *memo-novel* ones: those whose X' is none of the other seeds' states or proposals. In the sampler the proposal
memo already makes a repeated X' free, so only the novel ones show what a table would add to it. Data:
bench/delayed_surrogates.py's infilling case (4 chains after 6 sweeps infilling the last 8 residues of adalimumab's
VH, 32 proposals per free position and state), with the tokens of each move kept.

    python3 bench/delayed_movetable.py --seeds 0 1 2 3 4 5 --save moves.pt   # ~25 min of one core
    python3 bench/delayed_movetable.py --load moves.pt
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from delayed_influence import influence_table, ranked_sets  # noqa: E402
from delayed_surrogates import markdown_table, measure, states_of, summarize  # noqa: E402


def measure_moves(lm, seed: int, T: int = 32, chains: int = 4, epochs: int = 6, draws: int = 32) -> dict:
    """The changing proposals of one seed of the infilling case: ``diff`` f64[n, T] (term changes), ``i`` (the
    proposed energy column), ``old``/``new`` (its tokens), ``x_old``/``x_new`` Long[n, T] (X and X' at the energy
    positions), ``log_hastings``, ``T``."""
    states, positions, free_pos = states_of(lm, "infill", T, chains, epochs, seed)
    m = measure(lm, states, positions, free_pos, seed, draws)
    return {k: m[k] for k in ("diff", "i", "old", "new", "x_old", "x_new", "log_hastings", "T")}


def _moves(m: dict):
    """(k, i, a, b) of each proposal of ``m``."""
    for k in range(m["i"].numel()):
        yield k, int(m["i"][k]), int(m["old"][k]), int(m["new"][k])


def _antisymmetric_means(observed) -> dict:
    """{key: mean value} over ``observed`` ``(key, reverse key, value)``: each value counts for its key and, negated,
    for the reverse move's key, so the table is antisymmetric by construction."""
    sums: dict = {}
    for key, reverse, value in observed:
        for k, v in ((key, value), (reverse, -value)):
            s, c = sums.get(k, (0.0, 0))
            sums[k] = (s + v, c + 1)
    return {key: s / c for key, (s, c) in sums.items()}


def move_table(train: list[dict]) -> dict:
    """{(i, a, b): mean term changes f64[T]} over the training proposals and their reverses (negated)."""
    return _antisymmetric_means(((i, a, b), (i, b, a), m["diff"][k]) for m in train for k, i, a, b in _moves(m))


def context_table(train: list[dict]) -> dict:
    """{(i, a, b, j, x_j): mean change of term j} over the training proposals and their reverses (negated): the
    reverse move from X' sees the same residues at every j != i."""
    return _antisymmetric_means(((i, a, b, j, int(m["x_old"][k, j])), (i, b, a, j, int(m["x_old"][k, j])),
                                 float(m["diff"][k, j]))
                                for m in train for k, i, a, b in _moves(m) for j in range(m["T"]) if j != i)


def predicted(test: dict, train: list[dict]) -> dict:
    """Each table's prediction of ``test``'s term changes: ``{name: (f64[n, T] predicted changes, Bool[n] move
    known)}`` (0 at i and where unknown)."""
    n, T = test["diff"].shape
    moves, cells = move_table(train), context_table(train)
    pm, km = torch.zeros(n, T, dtype=torch.float64), torch.zeros(n, dtype=torch.bool)
    pc, kc = torch.zeros(n, T, dtype=torch.float64), torch.zeros(n, dtype=torch.bool)
    for k, i, a, b in _moves(test):
        if (i, a, b) in moves:
            pm[k], km[k] = moves[(i, a, b)], True
            pm[k, i] = 0.0
        for j in range(T):
            v = cells.get((i, a, b, j, int(test["x_old"][k, j]))) if j != i else None
            if v is not None:
                pc[k, j], kc[k] = v, True
    return {"move table": (pm, km), "context table": (pc, kc)}


def first_stages(test: dict, train: list[dict]) -> dict:
    """The first stages of ``test``'s proposals, ``{name: (dE~ f64[n], stage-1 rows f64[n])}``, fitted on
    ``train``: the oracle, the distance and influence windows, and the two tables (a move they do not know: the
    ``influence 2`` window)."""
    diff, i = test["diff"], test["i"]
    n, T = diff.shape
    own = diff[torch.arange(n), i]
    infl, count = influence_table(train, T)
    out = {"exact (oracle, a bound)": (diff.sum(1), torch.zeros(n, dtype=torch.float64))}
    for k in (1, 2):
        window, influence = ranked_sets(infl, count, k)
        for name, sets in ((f"window {k}", window), (f"influence {k}", influence)):
            s = sets[i].double()
            out[name] = (own + (diff * s).sum(1), s.sum(1))
    fallback = ranked_sets(infl, count, 2)[1][i].double()
    for name, (pred, known) in predicted(test, train).items():
        s = torch.where(known[:, None], torch.zeros_like(fallback), fallback)
        out[f"{name} (else influence 2)"] = (own + (diff * s).sum(1) + (pred * (1 - s)).sum(1), s.sum(1))
    return out


def novel(test: dict, train: list[dict]) -> torch.Tensor:
    """Bool[n]: the proposals whose X' is none of ``train``'s states or proposals (what the memo would not have)."""
    seen = {tuple(r.tolist()) for m in train for key in ("x_old", "x_new") for r in m[key]}
    return torch.tensor([tuple(r.tolist()) not in seen for r in test["x_new"]], dtype=torch.bool)


def report(data: dict) -> str:
    """Two markdown tables (all proposals; the memo-novel ones), one number per left-out seed, and the geometric
    means of the savings."""
    seeds = sorted(data)
    lines = []
    for subset in ("all proposals", "memo-novel proposals"):
        results, counts = [], []
        for seed in seeds:
            test, train = data[seed], [data[s] for s in seeds if s != seed]
            keep = novel(test, train) if subset != "all proposals" else torch.ones(test["i"].numel(), dtype=torch.bool)
            stages = {k: (d[keep], r[keep]) for k, (d, r) in first_stages(test, train).items()}
            counts.append(f"{int(keep.sum())}")
            results.append(summarize({"dE": test["diff"].sum(1)[keep], "log_hastings": test["log_hastings"][keep],
                                      "T": test["T"], "surrogates": stages}))
        lines.append(f"\n{subset}, seeds {seeds} (proposals per seed: {', '.join(counts)}):")
        lines += markdown_table(results, columns=("corr", "mae", "a", "rows", "rows_acc", "saving"),
                                geometric_mean=True)
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    ap.add_argument("--save", default=None, help="torch.save the measured moves (after every seed)")
    ap.add_argument("--load", default=None, help="report on a --save file instead of measuring")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.load:
        data = torch.load(args.load)
    else:
        from mhfast.models.antiberty import load_antiberty
        lm = load_antiberty()
        data = {}
        for seed in args.seeds:
            data[seed] = measure_moves(lm, seed)
            if args.save:
                torch.save(data, args.save)
    print(report(data))


if __name__ == "__main__":
    main()
