"""The main job's first stage offline: how much do the proposal's own row and its neighbours' rows tell? (issue 34)

A probe, kept with its output (``report.md`` beside it) rather than landed as a benchmark. The main job (the bundled
De->En CMLM on the first 5 test sentences, raw energy, 5 chains, anneal 0.08 per epoch, burn-in 2) is run for e =
1, 3, 5, 7, 9, 11 epochs; at each chain state, one proposal per energy position is drawn from the masked conditional
(proposal temperature 1, special tokens excluded, as mhfast proposes), and the proposals that change the state get
their exact raw-term changes at every position (``mhfast.energy(..., per_position=True)`` of X and X'). Each is
judged at the next epoch's inverse temperature beta = 1 / max(0.05, 1 - 0.08 e).

The first stages compared (expected values from the probabilities, as bench/delayed_surrogates.py; the figure is
exact MH's rows per accepted change over the first stage's, pooled over every proposal):

* ``window k``: the own term plus the k nearest energy positions on each side (k = 0: the own term only, from the
  cached row: no rows in stage 1); the sampler's ``window:k``;
* ``window k + c own``: the same, the terms outside the window predicted as ``c`` times the own term's change, ``c``
  the least-squares fit over the other seeds (leave one seed out; no intercept, so dE~ stays antisymmetric);
* ``s(beta)``: the window's terms scaled so that beta s = 1 + g, g in 0, 0.25, ..., 10 chosen per epoch by that
  epoch's own figure (an oracle choice: no rule of beta does better in any one epoch; pooled over the epochs it
  need not beat s = 1, which weighs the epochs differently);
* ``window k + maskless outside``: the terms outside the window predicted by issue 34's *maskless* surrogate: the
  change of -logit_j(x_j) in ONE unmasked decoder forward of X' against the same of X (cached), at each energy
  position j outside the window; 1 row per proposal, which stage 2 cannot reuse; ``c maskless``: scaled by the
  least-squares ``c`` as above;
* ``own term, then window k``: three stages, each tested against the previous one's energy: the own term (no
  rows), then the window's rows for its survivors, then the rest (:func:`cascade`); the sampler's `cascade:k`;
* ``exact``: the ceiling (stage 1 knows dE).

A second figure, for an annealed run: rows per unit of descent (the energy the accepted moves shed, ``-sum a dE``),
exact MH's over the first stage's. A first stage rejects some moves exact MH accepts, downhill ones among them
(``min(1, r1) min(1, r2) <= min(1, r1 r2)``), so its accepted moves may shed less each than exact MH's.

Besides each proposal's changes, ``measure`` saves X, X' and the source index, so a later first stage can be
judged on the same proposals without rerunning the chains.

    python3 bench/delayed_runs/cmlm-own-term/probe.py measure --seeds 0 1 2 3 --save probe.pt   # ~26 min, 1 thread
    python3 bench/delayed_runs/cmlm-own-term/probe.py report probe.pt [more.pt ...]   # several files: pooled
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

ANNEAL, EPOCHS = 0.08, (1, 3, 5, 7, 9, 11)


def measure(seed: int, epochs: int, cmlm, sources: list, ctx) -> dict:
    """The changing proposals at the chain states after ``epochs`` epochs of the main job (seed ``seed``)."""
    import mhfast
    from mhfast.scoring.api import energy_positions

    r = mhfast.sample(cmlm, source=sources, energy="raw", chains=5, epochs=epochs, burn_in=min(2, epochs),
                      anneal=ANNEAL, seed=seed)
    B, C, L = r.tokens.shape
    X = r.tokens.reshape(B * C, L)
    b = torch.arange(B).repeat_interleave(C)
    emask = energy_positions(cmlm, X)
    st, pos = emask.nonzero(as_tuple=True)
    rows = X[st].clone()
    rows[torch.arange(len(st)), pos] = cmlm.mask_id
    with torch.no_grad():
        logits = cmlm.masked_logits(rows, pos, context=ctx, context_index=b[st]).double()
    logits[:, list(cmlm.special_ids)] = float("-inf")
    logq = torch.log_softmax(logits, -1)
    new = torch.multinomial(logq.exp(), 1, generator=torch.Generator().manual_seed(1000 + seed))[:, 0]
    old = X[st, pos]
    keep = new != old
    st, pos, new, old, logq = st[keep], pos[keep], new[keep], old[keep], logq[keep]
    k = torch.arange(len(st))

    def terms(tokens: torch.Tensor, which: torch.Tensor) -> torch.Tensor:
        e = mhfast.energy(cmlm, tokens, source=[sources[j] for j in which.tolist()], energy="raw", per_position=True)
        return e.raw_terms.double()

    def maskless(tokens: torch.Tensor, which: torch.Tensor) -> torch.Tensor:
        """-logit of each token in ONE unmasked forward of its sequence (issue 34's *maskless*): float64[R, L]."""
        with torch.no_grad():
            logits = cmlm.output_layer(cmlm.decoder_features(tokens, ctx, context_index=which))
        return -logits.gather(-1, tokens[..., None])[..., 0].double()

    Xn = X[st].clone()
    Xn[k, pos] = new
    diff = terms(Xn, b[st]) - terms(X, b)[st]
    mdiff = (maskless(Xn, b[st]) - maskless(X, b)[st]) * emask[st]
    return {"diff": diff, "mdiff": mdiff, "i": pos, "lh": logq[k, old] - logq[k, new], "emask": emask[st],
            "beta": 1.0 / max(1.0 - ANNEAL * epochs, 0.05), "seed": seed, "epochs": epochs,
            "x": X[st], "xn": Xn, "source": b[st]}


def parts(m: dict, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(own change, the window's other changes, the changes outside the window, the window's rows)."""
    diff, i = m["diff"], m["i"]
    n, L = diff.shape
    near = ((torch.arange(L)[None, :] - i[:, None]).abs() <= k) & m["emask"]
    own = diff[torch.arange(n), i]
    win = (diff * near).sum(1)
    return own, win - own, diff.sum(1) - win, (near.sum(1) - 1).double()


def maskless_far(m: dict, k: int) -> torch.Tensor:
    """The maskless change of the terms outside ``window k`` (the same positions as ``parts``'s third)."""
    i, L = m["i"], m["diff"].shape[1]
    near = ((torch.arange(L)[None, :] - i[:, None]).abs() <= k) & m["emask"]
    return (m["mdiff"] * ~near).sum(1)


def staged(m: dict, changes: list[torch.Tensor], rows: list[torch.Tensor]) -> torch.Tensor:
    """[exact rows, exact accepted, rows, accepted, exact descent, descent] summed over ``m``'s proposals (expected
    values; descent: minus the energy change the accepted moves make, -sum a dE) for a chain of
    stages: stage j forwards ``rows[j]`` for the survivors of the stages before it, then tests its energy change
    ``changes[j]`` against the previous stage's (the first with the proposal's Hastings term). The last change is
    the exact one, so the stages' ratios multiply to exact MH's and each is antisymmetric: the chain keeps the
    exact target (Christen & Fox; docs/delayed.md, "Why the chain keeps the exact target", one factor a stage)."""
    dE, lh, beta, T = m["diff"].sum(1), m["lh"], m["beta"], m["emask"].sum(1).double()
    a = torch.clamp(torch.exp(-beta * dE + lh), max=1)
    passed, paid, before = torch.ones_like(dE), torch.zeros_like(dE), torch.zeros_like(dE)
    for j, (change, cost) in enumerate(zip(changes, rows)):
        paid = paid + passed * cost
        passed = passed * torch.clamp(torch.exp(-beta * (change - before) + (lh if j == 0 else 0)), max=1)
        before = change
    return torch.stack([(T - 1).sum(), a.sum(), paid.sum(), passed.sum(), -(a * dE).sum(), -(passed * dE).sum()])


def cost(m: dict, dS: torch.Tensor, c1: torch.Tensor) -> torch.Tensor:
    """Two stages: the surrogate change ``dS`` after ``c1`` rows, then the rest (:func:`staged`)."""
    return staged(m, [dS, m["diff"].sum(1)], [c1, m["emask"].sum(1).double() - 1 - c1])


def cascade(m: dict, k: int) -> torch.Tensor:
    """Three stages (:func:`staged`): the own term (no rows), then ``window k`` (its rows, for the survivors of the
    first), then the rest."""
    own, nb, _, c1 = parts(m, k)
    return staged(m, [own, own + nb, m["diff"].sum(1)], [torch.zeros_like(c1), c1, m["emask"].sum(1).double() - 1 - c1])


def saving(v: torch.Tensor) -> float:
    return float((v[0] / v[1]) / (v[2] / v[3]))


def descent_saving(v: torch.Tensor) -> float:
    """Exact MH's rows per unit of descent over the first stage's: the saving for an annealed run, where what the
    rows buy is the energy the accepted moves shed, not their number."""
    return float((v[0] / v[4]) / (v[2] / v[5]))


def report(runs: list[dict]) -> str:
    seeds = sorted({m["seed"] for m in runs})
    maskless = all("mdiff" in m for m in runs)  # (measured since 2026-11-28 12:00; older files lack it)
    out = [f"{sum(m['i'].numel() for m in runs)} changing proposals, seeds {seeds}, epochs {list(EPOCHS)}", "",
           "| first stage | k = 0 | k = 1 | k = 2 |", "|---|---|---|---|"]
    table: dict[str, list[str]] = {}
    for k in (0, 1, 2):
        tot = {"window k": torch.zeros(6), "window k + c own (fitted)": torch.zeros(6), "exact": torch.zeros(6),
               "window k, s(beta) best per epoch": torch.zeros(6)}
        tot["own term, then window k, then the rest (three stages)"] = torch.zeros(6)
        if maskless:
            tot |= {"window k + maskless outside (1 row)": torch.zeros(6),
                    "window k + c maskless outside (fitted, 1 row)": torch.zeros(6)}
        for s in seeds:
            train = [parts(m, k) for m in runs if m["seed"] != s]
            own = torch.cat([p[0] for p in train])
            c = float(torch.linalg.lstsq(own[:, None], torch.cat([p[2] for p in train])[:, None]).solution)
            if maskless:
                mf = torch.cat([maskless_far(m, k) for m in runs if m["seed"] != s])
                cm = float(torch.linalg.lstsq(mf[:, None], torch.cat([p[2] for p in train])[:, None]).solution)
            for m in (m for m in runs if m["seed"] == s):
                o, nb, _, c1 = parts(m, k)
                tot["window k"] += cost(m, o + nb, c1)
                tot["window k + c own (fitted)"] += cost(m, o + nb + c * o, c1)
                tot["exact"] += cost(m, m["diff"].sum(1), torch.zeros_like(c1))
                tot["own term, then window k, then the rest (three stages)"] += cascade(m, k)
                if maskless:  # (its row is X''s unmasked one: stage 2 cannot reuse it)
                    tot["window k + maskless outside (1 row)"] += cost(m, o + nb + maskless_far(m, k), c1 + 1)
                    tot["window k + c maskless outside (fitted, 1 row)"] += cost(m, o + nb + cm * maskless_far(m, k),
                                                                                 c1 + 1)
        for e in EPOCHS:
            ms = [(m, parts(m, k)) for m in runs if m["epochs"] == e]  # (once, not once per scale tried)
            best = max((sum(cost(m, (1 + g / 4) / m["beta"] * (o + nb), c1) for m, (o, nb, _, c1) in ms)
                        for g in range(41)), key=saving)
            tot["window k, s(beta) best per epoch"] += best
        for name, v in tot.items():
            table.setdefault(name, []).append(f"{saving(v):.2f}x")
    out += [f"| {name} | {' | '.join(v)} |" for name, v in table.items()]
    out += ["", "Per epoch (k = 0 / k = 1 / the own term, then window 1 / exact):", "",
            "| epoch | beta | exact MH's acceptance | k = 0 | k = 1 | own, then k = 1 | exact |",
            "|---|---|---|---|---|---|---|"]
    descent = []  # (the same stage sums, per unit of descent: a second table below)
    for e in (*EPOCHS, None):
        ms = [m for m in runs if e is None or m["epochs"] == e]
        vs = [sum(cost(m, parts(m, 0)[0], parts(m, 0)[3]) for m in ms),
              sum(cost(m, sum(parts(m, 1)[:2]), parts(m, 1)[3]) for m in ms), sum(cascade(m, 1) for m in ms),
              sum(cost(m, m["diff"].sum(1), torch.zeros(m["i"].numel(), dtype=torch.float64)) for m in ms)]
        if e is not None:
            n = sum(m["i"].numel() for m in ms)
            out.append(f"| {e} | {ms[0]['beta']:.2f} | {float(vs[3][1]) / n:.3f} | "
                       + " | ".join(f"{saving(v):.2f}x" for v in vs) + " |")
        descent.append(f"| {'all' if e is None else e} | "
                       + " | ".join(f"{descent_saving(v):.2f}x ({float((v[5] / v[3]) / (v[4] / v[1])):.2f})"
                                    for v in vs) + " |")
    out += ["", "Per unit of descent (exact MH's rows per unit of the energy its accepted moves shed, -sum a dE, over "
            "the first stage's; the descent per accepted change, first stage's over exact MH's, in brackets):", "",
            "| epoch | window 0 | window 1 | own term, then window 1 | exact |", "|---|---|---|---|---|", *descent]
    if maskless:
        out += ["", "Correlation of the maskless change outside the window with the exact one, by epoch (all seeds):",
                "", "| epoch | k = 0 | k = 1 | k = 2 |", "|---|---|---|---|"]
        for e in EPOCHS:
            ms = [m for m in runs if m["epochs"] == e]
            r = [float(torch.corrcoef(torch.stack([torch.cat([parts(m, k)[2] for m in ms]),
                                                   torch.cat([maskless_far(m, k) for m in ms])]))[0, 1])
                 for k in (0, 1, 2)]
            out.append(f"| {e} | " + " | ".join(f"{v:.2f}" for v in r) + " |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["measure", "report"])
    ap.add_argument("file", nargs="*", help="report: measure's --save files (their runs pooled)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    ap.add_argument("--save", default="probe.pt")
    args = ap.parse_args()
    if args.what == "report":
        print(report([m for f in args.file for m in torch.load(f, weights_only=False)]))
        return
    from bench_delayed import bundled_sources

    torch.set_num_threads(1)
    cmlm, sources = bundled_sources(5)
    ctx = cmlm.encode(sources)
    runs = []
    for seed in args.seeds:
        for e in EPOCHS:
            runs.append(measure(seed, e, cmlm, sources, ctx))
            torch.save(runs, args.save)  # (after every state set: a run cut short keeps what it measured)
    print(report(runs))


if __name__ == "__main__":
    main()
