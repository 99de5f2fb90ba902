"""A distilled small MLM for delayed acceptance's first stage (issue 34's "a smaller model"), trained here.

AntiBERTy cut to its first layers (bench/truncated_mlm.py) predicts the energy change of a proposal badly, because
its head was fitted to layer 8's features (bench/RESULTS.md, "Which first stage?"). This script trains a small BERT
of AntiBERTy's vocabulary to imitate AntiBERTy's masked conditionals (knowledge distillation: the KL divergence from
the teacher's conditional at the masked position to the student's, Hinton et al. 2015) on the sequences one job
visits: the issue's infilling case (the last 8 of 32 residues of adalimumab's VH free). So it is a per-job surrogate:
its training costs teacher rows, which a run must amortise (printed).

Training sequences (seeds 100, ...; the evaluations use seeds 0-5): the end-of-epoch states of plain MH chains of
the case (local energy), then rounds of single-site proposals drawn from the teacher's masked conditionals (as mhfast
proposes; ``--hops``: 32 per state and free position, then 2 per new sequence), so both X and X' of real moves;
duplicates dropped, at most ``--max-sequences`` kept. Each sequence gives T rows (one masked position each), labelled
with the teacher's log-probabilities there. A tenth of the sequences is held out: the script reports the held-out KL
and the correlation of the student's local-energy change with the teacher's over held-out pairs one site apart.

The student is a ``transformers.BertForMaskedLM`` wrapped as an :class:`~mhfast.models.antiberty.AntiBERTyMaskedLM`,
so it is an ordinary mhfast model adapter (``mhfast.energy``, ``mhfast.surrogates.model_energy`` take it).
Bench-only: nothing here is in the library.

    python3 bench/distilled_mlm.py --out student.pt --minutes 12 --max-sequences 1500   # ~22 min of one core
    python3 bench/distilled_mlm.py --quick --out /tmp/s.pt             # seconds (T=8, a few sequences)
    python3 bench/delayed_surrogates.py --cases infill --distilled student.pt --layers --seeds 0 1 2 3   # offline
    python3 bench/bench_delayed.py --chains 5 --seeds 0 1 --settings mh distilled --student student.pt  # sampler

The measured student and its logs: bench/delayed_runs/distilled/ (bench/RESULTS.md, "A distilled small model as the
first stage"); ``--steps`` makes a rerun's schedule reproducible (the measured one was timed: 12 minutes).

Example:
    >>> student = load_student("student.pt")                         # doctest: +SKIP
    >>> student.model.config.num_hidden_layers                        # doctest: +SKIP
    2
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import delayed_surrogates  # noqa: E402
from delayed_surrogates import masked_rows  # noqa: E402  (every sequence masked at each energy position)


def neighbours(lm, seqs: torch.Tensor, free_pos: torch.Tensor, draws: int, gen: torch.Generator) -> tuple[
        torch.Tensor, int]:
    """Single-site proposals from each sequence: at every free position ``draws`` residues drawn from the teacher's
    masked conditional there (special tokens excluded, as mhfast proposes); those that change the sequence, unique,
    and the teacher rows spent (one per sequence and free position)."""
    S, F = seqs.shape[0], free_pos.numel()
    at = free_pos.repeat(S)
    logits = delayed_surrogates.proposal_logits(lm, seqs, free_pos)
    new = torch.multinomial(torch.softmax(logits, -1), draws, replacement=True, generator=gen)  # [S*F, draws]
    out = seqs.repeat_interleave(F, dim=0)[:, None, :].repeat(1, draws, 1)
    out[torch.arange(S * F)[:, None], torch.arange(draws)[None, :], at[:, None]] = new
    out = out.reshape(-1, seqs.shape[1])
    changed = (out != seqs.repeat_interleave(F * draws, dim=0)).any(1)
    return torch.unique(out[changed], dim=0), S * F


def job_sequences(lm, T: int, seeds: list[int], chains: int, epochs: int, hops: list[int]) -> tuple[torch.Tensor,
                                                                                                     dict]:
    """Unique sequences Long[N, T+2] of the infilling case: plain MH states (every epoch's end, ``chains`` chains per
    seed), then ``len(hops)`` rounds of single-site proposals (:func:`neighbours`, ``hops[k]`` draws per sequence
    and free position in round k, from the previous round's new sequences); and a count dict."""
    import bench_mixmatch
    import mhfast

    start, positions = bench_mixmatch.make_start(lm, T, "parent")
    free_pos = positions[-8:]
    free = torch.zeros_like(start, dtype=torch.bool)
    free[0, free_pos] = True
    states, rows = [], 0
    for seed in seeds:
        r = mhfast.sample(lm, init=start, free_positions=free, chains=chains, epochs=epochs, burn_in=0,
                          energy="local", seed=seed, record="epoch")
        states.append(r.history[:, 0].reshape(-1, start.shape[1]))
        rows += r.model_rows
    states = torch.unique(torch.cat(states), dim=0)
    gen = torch.Generator().manual_seed(seeds[0])
    seqs, frontier, per_hop = states, states, []
    for draws in hops:
        nb, spent = neighbours(lm, frontier, free_pos, draws, gen)
        rows += spent
        seen = torch.cat([seqs, nb])
        uniq, inverse = torch.unique(seen, dim=0, return_inverse=True)
        first = torch.full((len(uniq),), len(seen), dtype=torch.long).scatter_reduce(
            0, inverse, torch.arange(len(seen)), "amin")
        frontier = uniq[first >= len(seqs)]  # the sequences this round added
        seqs = uniq
        per_hop.append(len(frontier))
    return seqs, {"states": len(states), "new_per_hop": per_hop, "sequences": len(seqs), "rows": rows}


def teacher_logprobs(lm, rows: torch.Tensor, pos: torch.Tensor, chunk: int = 256) -> torch.Tensor:
    """The teacher's log-probabilities at each row's masked position: f32[N, V]."""
    out = []
    with torch.no_grad():
        for s in range(0, rows.shape[0], chunk):
            out.append(torch.log_softmax(lm.masked_logits(rows[s:s + chunk], pos[s:s + chunk]).float(), -1))
    return torch.cat(out)


def new_student(lm, d: int, layers: int, heads: int, ff: int, seed: int):
    """A randomly initialised BERT MLM with ``lm``'s vocabulary and positions, as an mhfast adapter."""
    from mhfast.models.antiberty import AntiBERTyMaskedLM
    from mhfast.models.hf import import_transformers

    transformers = import_transformers()
    torch.manual_seed(seed)
    cfg = transformers.BertConfig(vocab_size=lm.vocab_size, hidden_size=d, num_hidden_layers=layers,
                                  num_attention_heads=heads, intermediate_size=ff,
                                  max_position_embeddings=lm.model.config.max_position_embeddings,
                                  pad_token_id=lm.pad_id)
    return AntiBERTyMaskedLM(transformers.BertForMaskedLM(cfg).eval(), lm.vocab)


def student_logprobs(student, rows: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """The student's log-probabilities at the masked positions, with gradients (rows unpadded): f32[N, V]."""
    hidden = student.model.bert(input_ids=rows).last_hidden_state[torch.arange(rows.shape[0]), pos]
    return torch.log_softmax(student.model.cls(hidden), -1)


def train(student, rows: torch.Tensor, pos: torch.Tensor, teacher: torch.Tensor, seconds: float, batch: int,
          lr: float, seed: int, steps: int | None = None) -> list[tuple[int, float]]:
    """AdamW on KL(teacher || student) over random batches of rows, ``steps`` steps (reproducible) or, without them,
    until ``seconds`` have passed (the step count then depends on the machine); a cosine learning rate over the
    steps (estimated from the first 20 when timed). Returns (step, mean KL of the last 100 steps) every 200 steps."""
    gen = torch.Generator().manual_seed(seed)
    model = student.model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    p_t = teacher.exp()
    log, recent, t0, step, planned = [], [], time.perf_counter(), 0, steps
    while True:
        elapsed = time.perf_counter() - t0
        if (step >= steps) if steps else (elapsed >= seconds):
            break
        if step == 20 and not steps:  # (the step rate is known after a few steps: plan the cosine schedule from it)
            planned = max(21, int(seconds / (elapsed / 20)))
        if planned:
            for g in opt.param_groups:
                g["lr"] = lr * 0.5 * (1 + math.cos(math.pi * min(1.0, step / planned)))
        idx = torch.randint(rows.shape[0], (batch,), generator=gen)
        logq = student_logprobs(student, rows[idx], pos[idx])
        loss = (p_t[idx] * (teacher[idx] - logq)).sum(1).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        recent = (recent + [loss.item()])[-100:]
        step += 1
        if step % 200 == 0:
            log.append((step, sum(recent) / len(recent)))
    model.eval()
    log.append((step, sum(recent) / max(1, len(recent))))
    return log


def held_out_report(lm, student, seqs: torch.Tensor, positions: torch.Tensor, rows, pos, teacher) -> dict:
    """Held-out KL per row, and how the student's energies track the teacher's: the correlation of the local energy
    differences between random pairs of held-out sequences that differ at one position (as a proposal does)."""
    with torch.no_grad():
        kl = (teacher.exp() * (teacher - student_logprobs(student, rows, pos))).sum(1).mean().item()
    e_t = delayed_surrogates.term_matrix(lm, seqs, positions).sum(1)
    e_s = delayed_surrogates.term_matrix(student, seqs, positions).sum(1)
    diff = (seqs[:, None, :] != seqs[None, :, :]).sum(2)
    a, b = torch.nonzero(torch.triu(diff == 1), as_tuple=True)
    corr = torch.corrcoef(torch.stack([e_s[a] - e_s[b], e_t[a] - e_t[b]]))[0, 1].item() if len(a) > 1 else math.nan
    mae = (e_s[a] - e_s[b] - (e_t[a] - e_t[b])).abs().mean().item() if len(a) else math.nan
    return {"kl": kl, "pairs": len(a), "corr_dE": corr, "mae_dE": mae,
            "corr_E": torch.corrcoef(torch.stack([e_s, e_t]))[0, 1].item()}


def save_student(student, path: str, meta: dict) -> None:
    """The student's config, weights, vocabulary and how it was made, in one file (read by :func:`load_student`)."""
    torch.save({"config": student.model.config.to_dict(), "state_dict": student.model.state_dict(),
                "vocab": student.vocab, "meta": meta}, path)


def load_student(path: str):
    """The student saved by :func:`save_student`, as an mhfast adapter with AntiBERTy's vocabulary."""
    from mhfast.models.antiberty import AntiBERTyMaskedLM
    from mhfast.models.hf import import_transformers

    transformers = import_transformers()
    saved = torch.load(path, map_location="cpu", weights_only=True)
    model = transformers.BertForMaskedLM(transformers.BertConfig.from_dict(saved["config"]))
    model.load_state_dict(saved["state_dict"])
    student = AntiBERTyMaskedLM(model.eval(), saved["vocab"])
    student.meta = saved["meta"]
    return student


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="where to save the student")
    ap.add_argument("--quick", action="store_true",
                    help="T=8, one seed, 2 epochs, at most 200 labelled sequences, 100 training steps")
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(100, 104)))
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=25, help="MH epochs per seed whose end states are kept")
    ap.add_argument("--hops", type=int, nargs="+", default=[32, 2], help="rounds of single-site proposals from "
                    "the states, each round from the last one's new sequences: draws per sequence and free position")
    ap.add_argument("--max-sequences", type=int, default=1200,
                    help="a random subset of at most this many sequences is labelled (T teacher rows each)")
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ff", type=int, default=256)
    ap.add_argument("--minutes", type=float, default=10.0, help="training time (without --steps)")
    ap.add_argument("--steps", type=int, default=None, help="training steps (reproducible; default: --minutes)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from mhfast.models.antiberty import load_antiberty

    lm = load_antiberty()
    T = 8 if args.quick else 32
    seeds, epochs = (args.seeds[:1], 2) if args.quick else (args.seeds, args.epochs)
    t0 = time.perf_counter()
    seqs, counts = job_sequences(lm, T, seeds, args.chains, epochs, args.hops)
    positions = torch.arange(1, T + 1)
    labelled = min(args.max_sequences, 200) if args.quick else args.max_sequences  # quick: a smoke run's labels
    perm = torch.randperm(len(seqs), generator=torch.Generator().manual_seed(0))[:labelled]
    n_val = max(2, len(perm) // 10)  # a tenth of the labelled sequences
    val, tr = seqs[perm[:n_val]], seqs[perm[n_val:]]
    counts["labelled"] = len(perm)
    rows, pos, _ = masked_rows(tr, positions, lm.mask_id)
    vrows, vpos, _ = masked_rows(val, positions, lm.mask_id)
    teacher, vteacher = teacher_logprobs(lm, rows, pos), teacher_logprobs(lm, vrows, vpos)
    t_data = time.perf_counter() - t0
    teacher_rows = counts["rows"] + rows.shape[0] + vrows.shape[0]
    print(f"data: {counts['states']} states, new per round of proposals {counts['new_per_hop']}, {counts['sequences']} unique sequences, "
          f"{len(perm)} labelled ({len(tr)} train, {len(val)} held out); teacher rows {teacher_rows} (sampling {counts['rows']}, "
          f"labels {rows.shape[0] + vrows.shape[0]}); {t_data:.0f} s", flush=True)
    student = new_student(lm, args.d, args.layers, args.heads, args.ff, seed=0)
    n_params = sum(p.numel() for p in student.model.parameters())
    log = train(student, rows, pos, teacher, 60 * args.minutes, args.batch, args.lr, seed=0,
                steps=args.steps or (100 if args.quick else None))
    t_train = time.perf_counter() - t0 - t_data
    for step, kl in log[::5] + log[-1:]:
        print(f"  step {step}: train KL {kl:.4f}")
    rep = held_out_report(lm, student, val, positions, vrows, vpos, vteacher)
    print(f"student: d={args.d}, {args.layers} layers, {args.heads} heads, ff {args.ff}, {n_params} parameters; "
          f"{log[-1][0]} steps of {args.batch} rows in {t_train:.0f} s; held out: KL {rep['kl']:.4f} per row, "
          f"corr of E {rep['corr_E']:.3f}, of dE over {rep['pairs']} one-site pairs {rep['corr_dE']:.3f} "
          f"(mean abs error {rep['mae_dE']:.2f} nats)")
    meta = {**counts, "teacher_rows": teacher_rows, "T": T, "seeds": seeds, "epochs": epochs, "chains": args.chains,
            "hops": args.hops, "d": args.d, "layers": args.layers, "heads": args.heads, "ff": args.ff,
            "parameters": n_params, "steps": log[-1][0], "batch": args.batch, "lr": args.lr,
            "train_seconds": t_train, "data_seconds": t_data, **{f"held_out_{k}": v for k, v in rep.items()}}
    save_student(student, args.out, meta)
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
