"""Which cheap first stage could delayed-acceptance MH use? (issue 34's first measurement)

Delayed-acceptance MH (Christen & Fox 2005) screens a proposal X -> X' with a cheap surrogate energy change
dE~ first (stage 1: accept with min(1, exp(-dE~) q(X|X')/q(X'|X))) and pays the exact change dE only for the
survivors (stage 2: accept with min(1, exp(-(dE - dE~)))); the chain keeps the exact target. What it saves
depends on how well dE~ predicts dE on the proposals the sampler really makes. This script measures that on
AntiBERTy with the local energy (E_local = -sum_t log p(X_t | X without t)), on real single-site proposals
drawn from the model's masked conditionals (as mhfast proposes), at states taken from mhfast chains after a
few sweeps, for these surrogates of the change at position i:

* ``own``: the change of position i's own term, log p(x_i | X_-i) - log p(x'_i | X_-i); free (the proposal's
  row, which X and X' share, already holds it);
* ``window k``: own, plus the exact changes of the k nearest positions on each side (their rows of X'); the
  other terms taken as unchanged. Costs 2k rows, which stage 2 reuses (it then forwards T-1-2k more);
* ``maskless``: the change of -sum_t log p_unmasked(X_t | X) (one unmasked forward of X', nothing masked;
  X's cached); 1 row;
* ``maskless+own``: the maskless change at every position but i, plus the exact own term; 1 row.
* ``first k layers``: the change of the local energy (all T terms) under AntiBERTy cut to its first k of 8
  transformer layers with its own MLM head (bench/truncated_mlm.py); X's terms cached, so T-1 rows of the small
  model for X' (row i of X' equals row i of X: i is masked in both), counted at their measured cost relative to a
  full row (printed); stage 2 reuses none of them. ``mhfast.surrogates.model_energy(small)`` is its API form (it
  does not cache X: 2 T rows of the small model per tested proposal); ``--sample-steps`` runs it in mhfast.sample.
* ``distilled``: the same with a small BERT trained to imitate AntiBERTy's conditionals on the infilling case's
  sequences (bench/distilled_mlm.py; ``--distilled FILE``), its rows costed the same way; ``window k + distilled``:
  the window's exact terms (2k rows, reused by stage 2) and the small model's changes of the other terms.

For each: the correlation of dE~ with dE over the proposals that change the state, the stage-1 and overall
acceptance (expected values, from the probabilities, not from draws), and the expected rows per proposal and
per accepted change, against exact MH (T-1 rows per changed proposal, acceptance E[alpha]). Rows per accepted
change is the cost that matters when the accepted moves are what mixes; the DA chain also rejects more
(alpha1 * alpha2 <= alpha), which the row count per accepted change includes.

    python3 bench/delayed_surrogates.py                 # both starts, ~30 min of one busy core with --layers 2 4
    python3 bench/delayed_surrogates.py --quick         # T=8, seconds
    python3 bench/delayed_surrogates.py --layers 2 4    # the truncated-model surrogates (default 2 4; none: --layers)
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mhfast  # noqa: E402
import truncated_mlm  # noqa: E402

WINDOWS = (1, 2, 4, 8)


def masked_rows(seqs: torch.Tensor, positions: torch.Tensor, mask_id: int) -> tuple[torch.Tensor, torch.Tensor,
                                                                                       torch.Tensor]:
    """Every sequence [N, L] masked at each of ``positions`` (T of them): rows Long[N*T, L] (row ``n*T + t``: sequence
    n masked at ``positions[t]``), their masked position Long[N*T], and the token that was there Long[N*T]."""
    N, T = seqs.shape[0], positions.numel()
    rows = seqs.repeat_interleave(T, dim=0)
    pos = positions.repeat(N)
    target = rows[torch.arange(N * T), pos].clone()
    rows[torch.arange(N * T), pos] = mask_id
    return rows, pos, target


def term_matrix(lm, x: torch.Tensor, positions: torch.Tensor, chunk: int = 256) -> torch.Tensor:
    """-log p(x_t | x without t) for every row of ``x`` [N, L] and energy position t: f64 [N, T]."""
    N, T = x.shape[0], positions.numel()
    if N == 0:
        return torch.zeros(0, T, dtype=torch.float64)
    rows, pos, target = masked_rows(x, positions, lm.mask_id)
    out = []
    with torch.no_grad():
        for s in range(0, N * T, chunk):
            logits = lm.masked_logits(rows[s:s + chunk], pos[s:s + chunk]).double()
            out.append(-torch.log_softmax(logits, -1).gather(1, target[s:s + chunk, None])[:, 0])
    return torch.cat(out).view(N, T)


def maskless_terms(lm, x: torch.Tensor, positions: torch.Tensor, chunk: int = 64) -> torch.Tensor:
    """-log p_unmasked(x_t | x) at the energy positions (one forward per row, nothing masked): f64 [N, T]."""
    full = (lambda r: lm.model(input_ids=r).logits) if hasattr(lm.model, "config") else (lambda r: lm.model(r)[0])
    out = []
    with torch.no_grad():
        for s in range(0, x.shape[0], chunk):
            logp = torch.log_softmax(full(x[s:s + chunk]).double(), -1)[:, positions]
            out.append(-logp.gather(2, x[s:s + chunk, positions, None])[..., 0])
    return torch.cat(out)


def proposal_logits(lm, states: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The logits of mhfast's proposal at each state [S, L] and position: the masked conditional there with the
    special tokens at -inf, f64 [S*T, V] (row ``s*T + t``: state s masked at ``positions[t]``)."""
    rows, at, _ = masked_rows(states, positions, lm.mask_id)
    with torch.no_grad():
        logits = lm.masked_logits(rows, at).double()
    logits[:, list(lm.special_ids)] = float("-inf")
    return logits


def proposals(lm, states: torch.Tensor, positions: torch.Tensor, gen: torch.Generator, draws: int = 1) -> dict:
    """``draws`` proposals per state and free position, drawn from the masked conditional (special tokens excluded,
    as mhfast's proposal): the proposals that change the state, with log q forward/reverse."""
    states = states.repeat_interleave(draws, dim=0)  # (a proposal's state index below counts the copies)
    S, T = states.shape[0], positions.numel()
    at = positions.repeat(S)
    logq = torch.log_softmax(proposal_logits(lm, states, positions), -1)
    new = torch.multinomial(logq.exp(), 1, generator=gen)[:, 0]
    old = states.repeat_interleave(T, dim=0)[torch.arange(S * T), at]
    keep = new != old
    idx = torch.arange(S * T)[keep]
    return {"state": idx // T // draws, "i": idx % T, "new": new[keep], "logq_f": logq[idx, new[keep]],
            "logq_r": logq[idx, old[keep]], "made": S * T}


def summarize(m: dict) -> list[dict]:
    dE, lh, T = m["dE"], m["log_hastings"], m["T"]
    n = dE.numel()
    alpha = torch.clamp(torch.exp(-dE + lh), max=1.0)
    exact_rows_acc = (T - 1) / alpha.mean().item()
    out = [{"name": "exact MH", "corr": 1.0, "mae": 0.0, "a1": alpha.mean().item(), "a": alpha.mean().item(),
            "rows": T - 1, "rows_acc": exact_rows_acc, "saving": 1.0}]
    for name, entry in m["surrogates"].items():
        dS, c1 = entry[:2]
        a1 = torch.clamp(torch.exp(-dS + lh), max=1.0)
        a2 = torch.clamp(torch.exp(-(dE - dS)), max=1.0)
        c1 = torch.as_tensor(c1, dtype=torch.float64).expand(n)
        # a window's rows are rows of X' that stage 2 needs anyway (it forwards the other T-1-2k); the maskless
        # row and a smaller model's rows are not: stage 2 still forwards all T-1 (an entry's third element, where
        # given, is the part of its cost that stage 2 reuses)
        if len(entry) > 2:
            reused = torch.as_tensor(entry[2], dtype=torch.float64).expand(n)
        else:
            reused = torch.zeros_like(c1) if name.startswith(("maskless", "first", "distilled")) else c1
        rows = (c1 + a1 * (T - 1 - reused)).mean().item()
        acc = (a1 * a2).mean().item()
        corr = torch.corrcoef(torch.stack([dS, dE]))[0, 1].item() if n > 1 else float("nan")
        out.append({"name": name, "corr": corr, "mae": (dS - dE).abs().mean().item(), "a1": a1.mean().item(),
                    "a": acc, "rows": rows, "rows_acc": rows / acc if acc > 0 else math.inf,
                    "saving": exact_rows_acc / (rows / acc) if acc > 0 else 0.0})
    return out


#: summarize()'s columns: key -> (markdown header, format of one value)
COLUMNS = {"corr": ("corr(dE~, dE)", "{:.3f}"), "mae": ("mean abs error", "{:.2f}"), "a1": ("stage-1 accept", "{:.3f}"),
           "a": ("overall accept", "{:.3f}"), "rows": ("rows / proposal", "{:.1f}"),
           "rows_acc": ("rows / accepted change", "{:.1f}"), "saving": ("vs exact", "{:.2f}x")}


def markdown_table(results: list[list[dict]], columns: tuple[str, ...] = tuple(COLUMNS),
                   geometric_mean: bool = False, name=lambda vals: vals[0]["name"]) -> list[str]:
    """A markdown table of :func:`summarize`'s results of several runs (seeds): one row per first stage, each cell
    the runs' values joined by " / "; ``geometric_mean`` adds a column with the geometric mean of the savings;
    ``name(vals)`` names a row from its runs' entries.

    Example:
        >>> r = [{"name": "exact MH", "corr": 1.0, "saving": 1.0}]
        >>> markdown_table([r, r], columns=("corr", "saving"))[2]
        '| exact MH | 1.000 / 1.000 | 1.00x / 1.00x |'
    """
    head = ["first stage"] + [COLUMNS[c][0] for c in columns] + (["geometric mean"] if geometric_mean else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for j in range(len(results[0])):
        vals = [r[j] for r in results]
        cells = [name(vals)] + [" / ".join(COLUMNS[c][1].format(v[c]) for v in vals) for c in columns]
        if geometric_mean:
            cells.append(f"{torch.tensor([max(v['saving'], 1e-9) for v in vals]).log().mean().exp():.2f}x")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def states_of(lm, kind: str, T: int, chains: int, epochs: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Chain states after ``epochs`` sweeps of mhfast (single-site MH, local energy) from the case's start."""
    import bench_mixmatch

    start, positions = bench_mixmatch.make_start(lm, T, "parent" if kind == "infill" else "random")
    free = torch.zeros_like(start, dtype=torch.bool)
    free[0, positions[-8:] if kind == "infill" else positions] = True
    r = mhfast.sample(lm, init=start, free_positions=free, chains=chains, epochs=epochs, burn_in=0, energy="local",
                      seed=seed)
    states = r.tokens[0]
    free_pos = positions[-8:] if kind == "infill" else positions
    return states, positions, free_pos


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cases", nargs="+", default=["random", "infill"], choices=["random", "infill"])
    ap.add_argument("--layers", type=int, nargs="*", default=[2, 4],
                    help="first-k-layers surrogates to measure (AntiBERTy has 8 layers)")
    ap.add_argument("--distilled", nargs="*", default=[], metavar="FILE",
                    help="students saved by bench/distilled_mlm.py to measure as first stages")
    ap.add_argument("--save", default=None, help="torch.save the per-seed measurements (per-position term changes "
                    "diff [n, T], proposed column i, log Hastings ratio) to this file, for bench/delayed_influence.py")
    ap.add_argument("--sample-steps", type=int, default=2,
                    help="epochs of mhfast.sample(..., delayed=model_energy(first k layers)) per case (0: skip)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from mhfast.models.antiberty import load_antiberty

    lm = load_antiberty()
    T = 8 if args.quick else 32
    small = {f"first {k} layers": truncated_mlm.first_layers(lm, k) for k in args.layers}
    for path in args.distilled:
        import distilled_mlm

        st = distilled_mlm.load_student(path)
        c = st.model.config
        small[f"distilled d={c.hidden_size} x{c.num_hidden_layers} ({Path(path).stem})"] = st
    cost = {}
    if small:  # (the timing forwards 10 x 256 full rows: only when a small model is measured)
        cost = truncated_mlm.row_cost(lm, small, T + 2, rows=64 if args.quick else 256, reps=3 if args.quick else 9)
        print("relative cost of one masked row (T+2 tokens, batch of rows) vs the full 8-layer model: "
              + ", ".join(f"{k} {c:.3f}" for k, c in cost.items()))
    # (from the parent, AntiBERTy mostly proposes the residue already there: many draws per position are needed
    # to see enough proposals that change the state)
    cases = [(kind, chains, epochs, draws) for kind, chains, epochs, draws in
             (("random", 4, 2, 1), ("infill", 4, 6, 32)) if kind in args.cases]
    t0 = time.perf_counter()
    saved = {}
    for kind, chains, epochs, draws in cases:
        rows_all = []
        for seed in args.seeds:
            states, positions, free_pos = states_of(lm, kind, T, chains, 1 if args.quick else epochs, seed)
            m = measure(lm, states, positions, free_pos, seed, draws, small, cost)
            rows_all.append((m, summarize(m)))
            saved[(kind, seed)] = {k: m[k] for k in ("diff", "i", "state", "log_hastings", "T")}
            if args.save:  # (after every seed: a run cut short keeps what it measured)
                torch.save(saved, args.save)
        print(f"\n### AntiBERTy, T={T}, {'random start, all positions free' if kind == 'random' else 'infilling the last 8 of adalimumab VH'}"
              f" ({chains} chains after {epochs} sweeps, seeds {args.seeds}; "
              f"{sum(m['dE'].numel() for m, _ in rows_all)} changing proposals of {sum(m['made'] for m, _ in rows_all)})")
        print("\n".join(markdown_table([rows for _, rows in rows_all])))
        for k in small if args.sample_steps > 0 else ():
            print(sample_with_small(lm, small[k], k, kind, T, 1 if args.quick else args.sample_steps, args.seeds[0]))
    print(f"\n{time.perf_counter() - t0:.0f} s")


def sample_with_small(lm, small, name: str, kind: str, T: int, epochs: int, seed: int) -> str:
    """One line: ``mhfast.sample(lm, ..., delayed=mhfast.surrogates.model_energy(small))`` run for ``epochs`` sweeps
    of the case (4 chains, local energy), its stage-1 and stage-2 acceptance and rows saved."""
    import bench_mixmatch

    start, positions = bench_mixmatch.make_start(lm, T, "parent" if kind == "infill" else "random")
    free_pos = positions[-8:] if kind == "infill" else positions
    free = torch.zeros_like(start, dtype=torch.bool)
    free[0, free_pos] = True
    t = time.perf_counter()
    r = mhfast.sample(lm, init=start, free_positions=free, chains=4, epochs=epochs, burn_in=0, energy="local",
                      seed=seed, delayed=mhfast.surrogates.model_energy(small))
    rate = lambda a, b: f"{a}/{b} = {a / b:.3f}" if b else f"{a}/0"  # noqa: E731
    return (f"mhfast.sample(delayed=model_energy({name})), {kind}, 4 chains x {epochs} sweeps, seed {seed}: "
            f"stage 1 {rate(r.delayed_passed, r.delayed_tested)}, stage 2 {rate(r.delayed_accepted, r.delayed_passed)}, "
            f"rows saved {r.delayed_rows_saved}, {time.perf_counter() - t:.1f} s")


def measure(lm, states: torch.Tensor, positions: torch.Tensor, free_pos: torch.Tensor, seed: int,
            draws: int = 1, small: dict | None = None, cost: dict | None = None) -> dict:
    """Exact and surrogate energy changes of real proposals at ``states`` [S, L]: proposals at the free positions
    ``free_pos``, the energy over every energy position ``positions`` (both Long, positions in the row); ``small``
    {name: small model} adds those surrogates (``first k layers``, ``distilled ...``), their rows costed at
    ``cost[name]`` full rows. Each
    proposal's tokens come back too: ``old``/``new`` at its position, ``x_old``/``x_new`` Long[n, T] (X and X' at
    the energy positions; bench/delayed_movetable.py's tables are keyed by them)."""
    gen = torch.Generator().manual_seed(seed)
    col = {int(p): j for j, p in enumerate(positions.tolist())}
    p = proposals(lm, states, free_pos, gen, draws)
    i = torch.tensor([col[int(free_pos[k])] for k in p["i"].tolist()], dtype=torch.long)
    p["i"] = i
    e_x = term_matrix(lm, states, positions)
    u_x = maskless_terms(lm, states, positions)
    x_new = states[p["state"]].clone()
    x_new[torch.arange(len(i)), positions[i]] = p["new"]
    e_new = term_matrix(lm, x_new, positions)  # all T terms of X' (the sampler forwards T-1: i's row is shared)
    u_new = maskless_terms(lm, x_new, positions)
    diff = e_new - e_x[p["state"]]  # [n, T] per-position term changes
    n, T = diff.shape
    own = diff[torch.arange(n), i]
    dist = (torch.arange(T)[None, :] - i[:, None]).abs()
    # the ceiling: a first stage that knows dE (stage 1 = exact MH, rows only for the proposals it accepts)
    surrogates = {"exact (oracle, a bound)": (diff.sum(1), 0.0), "own": (own, 0.0)}
    for k in WINDOWS:
        if k < T:
            near = (dist <= k).double()
            surrogates[f"window {k}"] = ((diff * near).sum(1), near.sum(1) - 1)
    mdiff = u_new - u_x[p["state"]]
    surrogates["maskless"] = (mdiff.sum(1), 1.0)
    surrogates["maskless+own"] = (mdiff.sum(1) - mdiff[torch.arange(n), i] + own, 1.0)
    for k, sm in (small or {}).items():
        sdiff = term_matrix(sm, x_new, positions) - term_matrix(sm, states, positions)[p["state"]]
        surrogates[k] = (sdiff.sum(1), cost[k] * (T - 1))
        if k.startswith("distilled"):  # the window's exact terms near i, the small model's change elsewhere
            for w in (1, 2):
                near = (dist <= w).double()
                surrogates[f"window {w} + {k}"] = ((diff * near + sdiff * (1 - near)).sum(1),
                                                    near.sum(1) - 1 + cost[k] * (T - 1), near.sum(1) - 1)
    return {"dE": diff.sum(1), "log_hastings": p["logq_r"] - p["logq_f"], "surrogates": surrogates, "T": T,
            "made": p["made"], "diff": diff, "i": i, "state": p["state"], "old": states[p["state"], positions[i]],
            "new": p["new"], "x_old": states[p["state"]][:, positions], "x_new": x_new[:, positions]}


if __name__ == "__main__":
    main()
