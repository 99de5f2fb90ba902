"""How far is exact early rejection (``delayed="early:K"``) from the fewest rows any early rejection could forward?

Offline, on the proposals bench/delayed_surrogates.py measures (AntiBERTy infilling the last 8 of adalimumab VH,
T=32, local energy, beta = 1, proposal temperature 1; 4 chains after 6 sweeps, 32 draws per free position; the
proposals that change the state): each proposal's terms of X and X' at all 32 energy positions, then the expected
rows per proposal under each rule, averaged over the uniform u of exact MH's test (400 quantiles). No memo: every
proposal is a miss.

Exact MH rejects iff log u >= L = E(X) - E(X') + log q(X|X') - log q(X'|X). Early rejection forwards the rows of
X' at a set S (the proposed position's term is free: its row is cached) and stops once the terms known so far
certify it: sum_S t_j(X') >= need(u) = E(X) - t_i(X') + log q(X|X') - log q(X'|X) - log u (every other term of
X' taken as 0, its lower bound). Rules:

* ``staged(rank, sizes)``: what ``early:K`` does: the top sizes[0] positions of a ranking, the bound, the top
  sizes[1], the bound, then all (``early:2`` = (4, 16)). Rankings: the mean term of X' at each position over the
  proposals at the same proposed position (the sampler's learnt ranking, here from the same proposals: a slight
  advantage), the distance window, and the state's own terms t_j(X) (per proposal, known for free).
* ``slack(k1, gamma)``: the top k1 of the learnt ranking, then, sized per proposal from what that round saw, the
  largest remaining state terms until the mass of X left out is at most 1/gamma of the increase found so far
  (plus log u): an adaptive second round; then all.
* ``oracle``: a rejected proposal forwards the fewest rows of X' that certify it (its largest terms first, known
  in advance), an accepted one all: the floor of any early rejection.
* ``free rejection``: rejected proposals forward nothing: the floor of any exact scheme (a perfect first stage).

    python3 bench/delayed_runs/early-ceiling/early_ceiling.py --save terms.pt      # ~4 min of one idle core
    python3 bench/delayed_runs/early-ceiling/early_ceiling.py --load terms.pt      # the table again, seconds
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/
import delayed_surrogates as ds  # noqa: E402

U = 400
LOG_U = torch.log((torch.arange(U, dtype=torch.float64) + 0.5) / U)


def collect(seeds: list[int]) -> dict:
    """Per seed: the terms of X and X' [n, 32], the proposed column i, the log Hastings ratio."""
    from mhfast.models.antiberty import load_antiberty

    lm = load_antiberty()
    out = {}
    for seed in seeds:
        states, positions, free_pos = ds.states_of(lm, "infill", 32, 4, 6, seed)
        p = ds.proposals(lm, states, free_pos, torch.Generator().manual_seed(seed), 32)
        col = {int(q): j for j, q in enumerate(positions.tolist())}
        i = torch.tensor([col[int(free_pos[k])] for k in p["i"].tolist()], dtype=torch.long)
        x_new = states[p["state"]].clone()
        x_new[torch.arange(len(i)), positions[i]] = p["new"]
        out[seed] = {"e_x": ds.term_matrix(lm, states, positions)[p["state"]],
                     "e_new": ds.term_matrix(lm, x_new, positions), "i": i, "lh": p["logq_r"] - p["logq_f"]}
    return out


def _const(n: int, value: float) -> torch.Tensor:
    return torch.full((n,), float(value), dtype=torch.float64)


def fewest_certifying(terms: torch.Tensor, need: torch.Tensor, accept: torch.Tensor) -> torch.Tensor:
    """Rows per quantile of u when a rejection forwards the fewest terms of X' that reach ``need`` (the largest first,
    known in advance: the oracle), an acceptance all of ``terms``."""
    full = float(len(terms))
    c = torch.cumsum(terms.sort(descending=True).values, 0)
    fewest = (torch.searchsorted(c, need.contiguous()) + 1).double().clamp(max=full)
    return torch.where(accept, _const(len(need), full), fewest)


def staged(ranked: torch.Tensor, need: torch.Tensor, sizes: tuple) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, forwards) per quantile of u when the terms of X' (``ranked``, in forwarding order) come in rounds of
    the top ``sizes[0]``, the top ``sizes[1]``, ..., then all, and a round whose sum reaches ``need`` stops it."""
    c = torch.cumsum(ranked, 0)
    r, f = _const(len(need), len(ranked)), _const(len(need), len(sizes) + 1)
    for s_idx in range(len(sizes) - 1, -1, -1):  # (the first round that stops it wins)
        stop = c[sizes[s_idx] - 1] >= need
        r = torch.where(stop, _const(len(need), sizes[s_idx]), r)
        f = torch.where(stop, _const(len(need), s_idx + 1), f)
    return r, f


def expected_rows(d: dict, rule: tuple) -> tuple[float, float, float, int]:
    """(rows, forwards, acceptance) summed over the seed's proposals (expectations over u), and their number."""
    e_x, e_new, i, lh = d["e_x"], d["e_new"], d["i"], d["lh"]
    n, T = e_x.shape
    mean_new = {int(a): e_new[i == a].mean(0) for a in i.unique()}
    rows = forwards = accepted = 0.0
    for k in range(n):
        tx, tn, a = e_x[k], e_new[k], int(i[k])
        others = torch.tensor([j for j in range(T) if j != a])
        full = len(others)
        need = tx.sum() - tn[a] + lh[k] - LOG_U  # [U]
        accept = tn[others].sum() < need
        accepted += float(accept.double().mean())
        kind = rule[0]
        if kind == "plain":
            r, f = _const(U, full), _const(U, 1)
        elif kind == "free":
            r, f = torch.where(accept, _const(U, full), _const(U, 0)), accept.double()
        elif kind == "oracle":
            r, f = fewest_certifying(tn[others], need, accept), _const(U, 1)
        elif kind == "staged":
            _, rank, sizes = rule
            order = others[rank(tx, a, others, mean_new).argsort(descending=True, stable=True)]
            r, f = staged(tn[order], need, sizes)
        elif kind == "slack":
            _, k1, gamma = rule
            order = others[by_mean_of_new(tx, a, others, mean_new).argsort(descending=True, stable=True)]
            s1, rest = order[:k1], order[k1:]
            rest = rest[tx[rest].argsort(descending=True, stable=True)]
            stop1 = float(tn[s1].sum()) >= need
            # what round 1 found beyond X's terms, less what the own term and the Hastings ratio take, plus log u
            slack = float((tn[s1] - tx[s1]).sum()) - float(tx[a] - tn[a] + lh[k]) + LOG_U
            left = torch.cat([tx[rest].flip(0).cumsum(0).flip(0), torch.zeros(1, dtype=tx.dtype)])  # mass not taken
            m2 = torch.where(slack > 0, (left[None, :] <= (slack / gamma)[:, None]).double().argmax(1),
                             torch.full((U,), len(rest), dtype=torch.long))
            c2 = torch.cat([torch.zeros(1, dtype=tn.dtype), torch.cumsum(tn[rest], 0)])
            stop2 = float(tn[s1].sum()) + c2[m2] >= need
            r = torch.where(stop1, _const(U, k1), torch.where(stop2, (k1 + m2).double(), _const(U, full)))
            f = torch.where(stop1, _const(U, 1), torch.where(stop2 | (m2 == len(rest)), _const(U, 2), _const(U, 3)))
        else:
            raise ValueError(rule)
        rows += float(r.mean())
        forwards += float(f.mean())
    return rows, forwards, accepted, n


def by_mean_of_new(tx, a, others, mean_new):
    return mean_new[a][others]


def by_distance(tx, a, others, mean_new):
    return -(others - a).abs().double()


def by_state_terms(tx, a, others, mean_new):
    return tx[others]


RULES = {
    "plain MH": ("plain",),
    "`early:2` (4, 16), learnt ranking": ("staged", by_mean_of_new, (4, 16)),
    "(4, 16), distance window": ("staged", by_distance, (4, 16)),
    "(4, 16), ranked by the state's terms t_j(X)": ("staged", by_state_terms, (4, 16)),
    "`early:1` (2, 8), learnt ranking": ("staged", by_mean_of_new, (2, 8)),
    "(4, 12), learnt ranking": ("staged", by_mean_of_new, (4, 12)),
    "(6, 24), learnt ranking": ("staged", by_mean_of_new, (6, 24)),
    "(4, 10, 20): a stage more, learnt ranking": ("staged", by_mean_of_new, (4, 10, 20)),
    "adaptive second round, k1 = 4, gamma 1": ("slack", 4, 1.0),
    "adaptive second round, k1 = 4, gamma 2": ("slack", 4, 2.0),
    "adaptive second round, k1 = 2, gamma 1.5": ("slack", 2, 1.5),
    "oracle: the fewest rows that certify": ("oracle",),
    "free rejection (a perfect first stage)": ("free",),
}


def table(data: dict) -> list[str]:
    res = {name: [expected_rows(data[s], rule) for s in sorted(data)] for name, rule in RULES.items()}
    plain = [r[0] for r in res["plain MH"]]
    n = sum(r[3] for r in res["plain MH"])
    lines = ["| rule | rows per proposal | forwards per proposal | fewer rows than plain MH, per seed | "
             "geometric mean |", "|---|---|---|---|---|"]
    for name, per in res.items():
        ratios = [pl / r[0] for pl, r in zip(plain, per)]
        gm = math.exp(sum(map(math.log, ratios)) / len(ratios))
        lines.append(f"| {name} | {sum(r[0] for r in per) / n:.2f} | {sum(r[1] for r in per) / n:.2f} | "
                     f"{' / '.join(f'{x:.2f}' for x in ratios)} | {gm:.2f}x |")
    acc = sum(r[2] for r in res["plain MH"]) / n
    lines.append(f"\nseeds {sorted(data)}: {[r[3] for r in res['plain MH']]} proposals that change the state "
                 f"({n}); exact MH accepts {acc:.3f} of them (expected over u).")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    ap.add_argument("--save", type=Path, default=None, help="torch.save the measured terms here")
    ap.add_argument("--load", type=Path, default=None, help="read the terms instead of measuring them")
    args = ap.parse_args()
    torch.set_num_threads(1)
    data = torch.load(args.load) if args.load else collect(args.seeds)
    if args.save:
        torch.save(data, args.save)
    print("\n".join(table(data)))


if __name__ == "__main__":
    main()
