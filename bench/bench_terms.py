"""What extra energy terms cost: rows and wall time per proposal with and without a term.

AntiBERTy infills residues of a heavy chain (single-site MH, local energy) with no term, with a
Hamming penalty to the parent, with a small random sequence classifier (a BERT of 2 layers, d=128,
sharing AntiBERTy's vocabulary: a stand-in for a fitness predictor) and with a Python callable. The
runs alternate in one process (A, B, C, D, A, B, ...) so load drift hits all alike; each figure is the
median over ``--repeats`` rounds. Terms are timed by wrapping them, so the table also shows the share
of a proposal spent in the term. Writes its section of bench/RESULTS.md.

    python3 bench/bench_terms.py                 # ~2 min on 2 cores
    python3 bench/bench_terms.py --repeats 1 --epochs 2 --no-write
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results_md  # noqa: E402

import mhfast  # noqa: E402
from mhfast.energy_terms import Hamming, HFClassifier, _wants_index  # noqa: E402

PARENT = "EVQLVESGGGLVQPGGSLRLSCAASGFNIKDTYIHWVRQ"
START, END = "<!-- bench_terms:start -->", "<!-- bench_terms:end -->"


class Timed:
    """A term wrapper that counts rows and seconds spent in the term."""

    def __init__(self, fn, name: str):
        self.fn, self.name, self.seconds, self.rows = fn, name, 0.0, 0
        self.wants_index = _wants_index(fn)

    def __call__(self, tokens, input_index):
        t0 = time.perf_counter()
        out = self.fn(tokens, input_index) if self.wants_index else self.fn(tokens)
        self.seconds += time.perf_counter() - t0
        self.rows += tokens.shape[0]
        return out


def terms_under_test(model, parent: torch.Tensor) -> dict:
    import transformers

    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=model.vocab_size, hidden_size=128, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=256, num_labels=2)
    clf = HFClassifier(transformers.BertForSequenceClassification(cfg).eval(), label=1, pad_id=model.pad_id)
    hydrophobic = torch.zeros(model.vocab_size)
    for aa in "AILMFVW":
        hydrophobic[int(model.encode(aa)[1])] = 1.0
    return {
        "none": None,
        "Hamming to the parent (w=1)": lambda: Timed(Hamming(parent), "hamming"),
        "random BERT classifier, 2 layers d=128 (w=1)": lambda: Timed(clf, "classifier"),
        "Python callable: hydrophobic count (w=0.5)": lambda: Timed(lambda t: hydrophobic[t].sum(1), "callable"),
    }


def run_once(model, init, free, term, args) -> dict:
    extra = None if term is None else [(term, 0.5 if term.name == "callable" else 1.0)]
    t0 = time.perf_counter()
    r = mhfast.sample(model, init=init, free_positions=free, chains=args.chains, epochs=args.epochs, burn_in=0,
                      energy="local", seed=0, extra_energy=extra)
    wall = time.perf_counter() - t0
    proposals = args.chains * int(free.sum()) * args.epochs
    return {"wall_ms": 1e3 * wall / proposals, "rows": r.model_rows / proposals,
            "term_ms": 0.0 if term is None else 1e3 * term.seconds / proposals,
            "term_rows": 0.0 if term is None else term.rows / proposals}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--chains", type=int, default=5)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(1)
    from mhfast.models.antiberty import load_antiberty

    model = load_antiberty()
    init = model.encode(PARENT)[None]
    free = torch.zeros_like(init, dtype=torch.bool)
    free[0, 28:36] = True  # 8 residues of CDR-H1/FR2
    cases = terms_under_test(model, init)
    runs: dict[str, list[dict]] = {name: [] for name in cases}
    for _ in range(args.repeats):
        for name, make in cases.items():
            runs[name].append(run_once(model, init, free, make() if make else None, args))
    med = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in runs.items()}
    base = med["none"]["wall_ms"]
    lines = [f"AntiBERTy infilling 8 of {init.shape[1] - 2} residues, single-site MH, local energy, "
             f"{args.chains} chains x {args.epochs} epochs, 1 thread; median of {args.repeats} alternating rounds. "
             f"Machine: {results_md.machine_description()}.", "",
             "| term | model rows / proposal | term rows / proposal | ms / proposal | of which in the term | vs none |",
             "|---|---|---|---|---|---|"]
    for name, m in med.items():
        lines.append(f"| {name} | {m['rows']:.2f} | {m['term_rows']:.2f} | {m['wall_ms']:.2f} | "
                     f"{m['term_ms']:.2f} | {m['wall_ms'] / base:.2f}x |")
    lines += ["", "Term rows per proposal < 1: a term is evaluated once per proposed sequence that differs from "
              "the current one (no-op proposals cost nothing), batched over the chains; the MLM rows do not change "
              "with a term (the chains differ, so the counts differ slightly)."]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        results_md.write_section(START, END, "## Extra energy terms (bench/bench_terms.py)\n\n" + text)


if __name__ == "__main__":
    main()
