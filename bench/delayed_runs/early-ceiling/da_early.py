"""Would delayed acceptance and exact early rejection together reach issue 34's 2x on AntiBERTy infilling?

Offline, on early_ceiling.py's proposals (terms.pt: AntiBERTy infilling the last 8 of adalimumab VH, T=32, local
energy, beta = 1, proposal temperature 1; 347 proposals that change the state, seeds 0-3; no memo). Each rule's
expected rows per proposal and acceptance per proposal, averaged over the uniforms (400 quantiles each), and the
rows per accepted change against plain MH's (the proxy bench/RESULTS.md's delayed-acceptance tables use):

* ``plain MH``: all 31 rows of X' (the proposed position's is cached), exact MH's acceptance.
* ``early:2``: early_ceiling.py's figure; plain MH's chains, so exact MH's acceptance.
* ``influence:2``: delayed acceptance. Stage 1 forwards the rows of X' at W, the positions whose terms change most
  when the proposed position i changes (mean |t_j(X') - t_j(X)| over the OTHER seeds' proposals at i: leave one
  seed out, as bench/delayed_influence.py; as many as ``window:2`` has at i, ties and unseen i by distance), and
  accepts with min(1, r1), log r1 = -(sum_{i, W} t(X') - t(X)) + log q(X|X') - log q(X'|X); stage 2 forwards the
  rest R and accepts with min(1, r2), log r2 = -(sum_R t(X') - t(X)). r1 r2 is exact MH's ratio.
* ``influence:2, stage 2 stopped early``: stage 2's test with its own uniform u2 rejects iff
  sum_R t_j(X') >= sum_R t_j(X) - log u2; the terms of X' are >= 0, so the rows forwarded so far certify that
  rejection once their sum reaches the right side: forward R in ``early:2``'s rounds (its top 4, top 16, then all,
  ranked by the mean term of X' at each position over the proposals at i, as early_ceiling.py's learnt ranking).
  The decisions are delayed acceptance's, so its acceptance; only the rows change.
* ``influence:2, stage 2 oracle``: stage 2's rejections forward the fewest rows of R that certify them (the floor
  of the composition).
* ``early:2, stage 1 as influence:2``: no surrogate (plain MH's chains); its first round is influence:2's W
  instead of the top 4 by value: does the influence set certify rejections as well?

    python3 bench/delayed_runs/early-ceiling/da_early.py bench/delayed_runs/early-ceiling/terms.pt
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/
from delayed_influence import influence_table, ranked_sets  # noqa: E402
from early_ceiling import LOG_U, RULES, expected_rows, fewest_certifying, staged  # noqa: E402

WINDOW = 2  # influence:2 forwards as many rows as window:2: the positions within 2 of i
ROUNDS = (4, 16)  # early:2's rounds before the rest


def influence_sets(train: list[dict], T: int) -> list[torch.Tensor]:
    """Per proposed column i, the positions W_i (i excluded): bench/delayed_influence.py's ``influence 2`` sets
    (the training proposals' mean |term change|; unseen i: the distance window), as index tensors."""
    table, count = influence_table([{"i": d["i"], "diff": d["e_new"] - d["e_x"]} for d in train], T)
    return [row.nonzero().flatten() for row in ranked_sets(table, count, WINDOW)[1]]


def evaluate(d: dict, sets: list[torch.Tensor], rule: str) -> tuple[float, float]:
    """(rows, acceptances) summed over the seed's proposals, expected over the uniforms."""
    e_x, e_new, i, lh = d["e_x"], d["e_new"], d["i"], d["lh"]
    n, T = e_x.shape
    mean_new = {int(a): e_new[i == a].mean(0) for a in i.unique()}
    rows = acc = 0.0
    for k in range(n):
        tx, tn, a = e_x[k], e_new[k], int(i[k])
        w = sets[a]
        in_w = set(w.tolist())
        rest = torch.tensor([j for j in range(T) if j != a and j not in in_w])
        by_value = rest[mean_new[a][rest].argsort(descending=True, stable=True)]
        if rule == "early-first-influence":  # plain MH's decisions; first round W, then the top 16 by value, all
            others = torch.cat([w, by_value])
            need = tx.sum() - tn[a] + lh[k] - LOG_U
            rows += float(staged(tn[others], need, (len(w), ROUNDS[1]))[0].mean())
            acc += float((tn[others].sum() < need).double().mean())
            continue
        log_r1 = -float((tn[a] + tn[w].sum()) - (tx[a] + tx[w].sum())) + float(lh[k])
        p1 = min(1.0, math.exp(min(log_r1, 0.0)))
        log_r2 = -float(tn[rest].sum() - tx[rest].sum())
        p2 = min(1.0, math.exp(min(log_r2, 0.0)))
        need2 = tx[rest].sum() - LOG_U  # stage 2 rejects iff sum_R t(X') >= need2
        if rule == "influence":
            r2 = float(len(rest))
        elif rule == "influence-early":
            r2 = float(staged(tn[by_value], need2, ROUNDS)[0].mean())
        else:  # "influence-oracle"
            r2 = float(fewest_certifying(tn[rest], need2, tn[rest].sum() < need2).mean())
        rows += len(w) + p1 * r2
        acc += p1 * p2
    return rows, acc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("terms", type=Path, help="early_ceiling.py --save's file")
    args = ap.parse_args()
    data = torch.load(args.terms)
    seeds = sorted(data)
    T = data[seeds[0]]["e_x"].shape[1]
    n_all = {s: data[s]["e_x"].shape[0] for s in seeds}
    per = {}
    for s in seeds:
        d, n = data[s], n_all[s]
        plain_rows, _, plain_acc, _ = expected_rows(d, RULES["plain MH"])
        early_rows, _, _, _ = expected_rows(d, RULES["`early:2` (4, 16), learnt ranking"])
        sets = influence_sets([data[t] for t in seeds if t != s], T)
        got = {"plain MH": (plain_rows, plain_acc), "`early:2`": (early_rows, plain_acc)}
        for name, rule in (("`influence:2`", "influence"), ("`influence:2`, stage 2 stopped early", "influence-early"),
                           ("`influence:2`, stage 2 oracle", "influence-oracle"),
                           ("`early:2`, first round influence:2's set", "early-first-influence")):
            got[name] = evaluate(d, sets, rule)
        per[s] = {k: (r / n, a / n) for k, (r, a) in got.items()}
    names = list(per[seeds[0]])
    print("| rule | rows per proposal | acceptance per proposal | rows per accepted change | fewer rows per accepted "
          "change than plain MH, per seed | geometric mean |")
    print("|---|---|---|---|---|---|")
    tot = sum(n_all.values())
    for name in names:
        rows = sum(per[s][name][0] * n_all[s] for s in seeds) / tot
        acc = sum(per[s][name][1] * n_all[s] for s in seeds) / tot
        ratios = [(per[s]["plain MH"][0] / per[s]["plain MH"][1]) / (per[s][name][0] / per[s][name][1]) for s in seeds]
        gm = math.exp(sum(map(math.log, ratios)) / len(ratios))
        print(f"| {name} | {rows:.2f} | {acc:.3f} | {rows / acc:.1f} | {' / '.join(f'{x:.2f}' for x in ratios)} | "
              f"{gm:.2f}x |")
    print(f"\nseeds {seeds}: {[n_all[s] for s in seeds]} proposals that change the state ({tot}); memo off; "
          f"influence sets learnt leaving the seed out.")


if __name__ == "__main__":
    main()
