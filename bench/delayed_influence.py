"""A better first stage for delayed acceptance? Influence-ranked windows and scaled windows, offline (issue 34).

Reads the per-position term changes of real AntiBERTy proposals that ``bench/delayed_surrogates.py --save FILE``
measured (``diff [n, T]``: E_t(X') - E_t(X) for every energy position t, the proposed column i, the log Hastings
ratio) and compares first stages that forward the SAME number of rows as the distance window ``window k`` (the
2k positions nearest i, fewer at the ends):

* ``influence k``: at a proposal at i, the positions j whose terms change most when i changes, ranked by
  ``mean |diff[:, j]|`` over the proposals at i of the OTHER seeds (leave one seed out: estimated on the other
  seeds' proposals, evaluated on this seed's: no peeking; a case of one seed is split in two halves by chain),
  as many as ``window k`` has at i (ties and positions
  never proposed at: by distance). A table learnt in burn-in and then frozen would be this (a fixed function of
  (X, X', i) during the chain, so the kernel stays reversible);
* ``window k x s`` / ``influence k x s``: the same rows, the other terms' sum scaled by a fixed ``s`` (least
  squares of dE - own on that sum over the other seeds' proposals): E~_i(X) = E_i(X) + s sum_{j in S_i} E_j(X),
  still a fixed function of the state for each i, so dE~ stays antisymmetric;
* ``exact (oracle, a bound)``: dE itself; stage 1 is then exact MH's test: the ceiling.

Columns as bench/delayed_surrogates.py's table (expected values from the probabilities; "vs exact" is exact MH's
rows per accepted change, memo off, over the first stage's); one number per evaluated seed.

    python3 bench/delayed_surrogates.py --seeds 0 1 2 3 --cases infill --layers --sample-steps 0 --save infill.pt
    python3 bench/delayed_influence.py infill.pt
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from delayed_surrogates import markdown_table, summarize  # noqa: E402

KS = (1, 2, 4)


def influence_table(train: list[dict], T: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean |diff| f64[T, T]: row i = proposals at column i, column j = the change of term j; count Long[T])."""
    total, count = torch.zeros(T, T, dtype=torch.float64), torch.zeros(T, dtype=torch.long)
    for m in train:
        total.index_add_(0, m["i"], m["diff"].abs())
        count += torch.bincount(m["i"], minlength=T)
    return total / count.clamp(min=1)[:, None], count


def ranked_sets(table: torch.Tensor, count: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(window Bool[T, T], influence Bool[T, T]): row i = the positions forwarded for a proposal at i (i itself
    excluded): the distance window, and as many of the most influential (by distance where never proposed at)."""
    T = table.shape[0]
    dist = (torch.arange(T)[None, :] - torch.arange(T)[:, None]).abs()
    window = (dist <= k) & (dist > 0)
    score = torch.where(count[:, None] > 0, table, torch.zeros_like(table)) - dist * 1e-9  # ties: the nearest
    score.fill_diagonal_(-float("inf"))
    influence = torch.zeros_like(window)
    for i in range(T):
        influence[i, score[i].topk(int(window[i].sum())).indices] = True
    return window, influence


def scale_of(train: list[dict], sets: torch.Tensor) -> float:
    """The least-squares s of dE - own ~ s * (sum of the set's term changes) over the training proposals."""
    num = den = 0.0
    for m in train:
        n = m["diff"].shape[0]
        own = m["diff"][torch.arange(n), m["i"]]
        w = (m["diff"] * sets[m["i"]]).sum(1)
        num += float((w * (m["diff"].sum(1) - own)).sum())
        den += float((w * w).sum())
    return num / den if den > 0 else 1.0


def first_stages(test: dict, train: list[dict]) -> dict:
    """The surrogates of ``test``'s proposals, each ``(dE~ f64[n], rows of stage 1 f64[n])``, fitted on ``train``."""
    diff, i = test["diff"], test["i"]
    n, T = diff.shape
    own = diff[torch.arange(n), i]
    table, count = influence_table(train, T)
    out = {"exact (oracle, a bound)": (diff.sum(1), torch.zeros(n, dtype=torch.float64))}
    for k in KS:
        window, influence = ranked_sets(table, count, k)
        for name, sets in ((f"window {k}", window), (f"influence {k}", influence)):
            rows = sets[i].double().sum(1)
            others = (diff * sets[i]).sum(1)
            out[name] = (own + others, rows)
            s = scale_of(train, sets)
            out[f"{name} x {s:.2f}"] = (own + s * others, rows)
    return out


def folds_of(data: dict, kind: str) -> dict:
    """``data`` with a case of one seed split in two halves by chain (the even chains' states and the odd ones':
    keys ``"<seed>a"``/``"<seed>b"``), so that one half is fitted and the other evaluated."""
    seeds = [s for k, s in data if k == kind]
    if len(seeds) != 1:
        return data
    m = data.pop((kind, seeds[0]))
    for half, name in ((0, "a"), (1, "b")):
        keep = (m["state"] % 2) == half
        data[(kind, f"{seeds[0]}{name}")] = {**{k: v[keep] for k, v in m.items() if k in ("diff", "i", "state",
                                                                                           "log_hastings")},
                                             "T": m["T"]}
    return data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", help="bench/delayed_surrogates.py --save's output")
    args = ap.parse_args()
    data = torch.load(args.file)
    for kind in sorted({k for k, _ in data}):
        data = folds_of(data, kind)
        seeds = sorted(s for k, s in data if k == kind)
        results = []
        for seed in seeds:  # leave one seed out: fitted on the others, evaluated on this one
            test = data[(kind, seed)]
            train = [data[(kind, s)] for s in seeds if s != seed]
            m = {"dE": test["diff"].sum(1), "log_hastings": test["log_hastings"], "T": test["T"],
                 "surrogates": first_stages(test, train)}
            results.append(summarize(m))
        n = sum(data[(kind, s)]["diff"].shape[0] for s in seeds)
        print(f"\n### {kind}: seeds {seeds}, {n} changing proposals; each seed's (or half's) first stages fitted on the others")
        print("\n".join(markdown_table(results, name=row_name)))


def row_name(vals: list[dict]) -> str:
    """A first stage's name; one whose scale differs by seed ("influence 2 x 0.91") as "influence 2 x s (0.91, ...)"."""
    if len({v["name"] for v in vals}) == 1:
        return vals[0]["name"]
    return vals[0]["name"].split(" x ")[0] + " x s (" + ", ".join(v["name"].split(" x ")[1] for v in vals) + ")"


if __name__ == "__main__":
    main()
