"""``mhfast sample``: sample sequences from a masked LM with Metropolis-Hastings and print them.

The defaults run AntiBERTy, single-site MH on the raw energy, 10 residues, with the paper's chains and
epochs (5 chains, 33 epochs, 7 burn-in; the same sampler flags and defaults as ``mhfast translate``,
both made from mhfast.sampler.options).

Examples:
    $ python3 -m mhfast sample                                  # 10-residue AntiBERTy samples
    $ python3 -m mhfast sample --energy both --length 20 --anneal 0.04
    $ python3 -m mhfast sample --init EVQLVESGGGLVQPGGSLRLSCAASGFNIKDTYIH --free 25:33
    $ python3 -m mhfast sample --model path/to/bert_dir --init "the cat sat on the mat" --free 1:3
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from typing import Any

import torch

from ..sampler import options
from . import _energy_terms

NAME = "sample"
HELP = "sample sequences from a masked LM (AntiBERTy, Sapiens, a fairseq checkpoint or a HuggingFace model) with MH"
DESCRIPTION = __doc__.split("\n\n")[0] + " " + __doc__.split("\n\n")[1].replace("\n", " ")


def _span(text: str) -> tuple[int, int]:
    try:
        start, end = (int(x) for x in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected START:END (0-based, END exclusive), got {text!r}") from None
    if not 0 <= start < end:
        raise argparse.ArgumentTypeError(f"expected 0 <= START < END, got {text!r}")
    return start, end


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="antiberty",
                   help="'antiberty' (the model of the antiberty package), 'sapiens-h' / 'sapiens-l' (the Sapiens "
                        "heavy/light-chain models), a fairseq masked_lm checkpoint (dict.txt beside it) or a local "
                        "HuggingFace *ForMaskedLM directory")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--length", type=int, help="unconditional sampling of this many tokens (default 10 when no "
                      "--init/--init-file)")
    what.add_argument("--init", nargs="+", metavar="SEQ", help="start sequence(s); for AntiBERTy one-letter residues "
                      "with '_' for a residue to fill in; for other models text for its tokenizer")
    what.add_argument("--init-file", metavar="FILE", help="start sequences, one per line (FASTA accepted)")
    p.add_argument("--free", type=_span, action="append", metavar="START:END",
                   help="infilling: only these token spans (0-based over the sequence's ordinary tokens, END "
                        "exclusive, repeatable) are resampled; the rest stays fixed but counts in the energy")
    options.add_arguments(p.add_argument_group("MH sampler (mhfast.sample; defaults = paper section 5)"),
                          extra_choices={"energy": ("both",)},
                          help_suffix={"energy": "; 'both' runs raw-MH then local-MH"})
    p.add_argument("--quiet", action="store_true", help="print only the final samples")


def read_sequences(path: str) -> list[str]:
    """One sequence per non-empty line, or FASTA records (lines after a '>' header are joined)."""
    from ..files import read_records

    # "\n"-separated records (a text-mode file would also split at a lone "\r"); bad UTF-8 names the line
    lines = [line.strip() for line in read_records(path, "--init-file")]
    if any(line.startswith(">") for line in lines):
        records, current = [], None
        for line in lines:
            if line.startswith(">"):
                current = []
                records.append(current)
            elif line and current is not None:
                current.append(line)
        seqs = ["".join(r) for r in records if r]
    else:
        seqs = [line for line in lines if line and not line.startswith("#")]
    if not seqs:
        raise ValueError(f"--init-file: no sequences in {path!r}")
    return seqs


def _inputs(lm: Any, args: argparse.Namespace) -> dict:
    """The ``init``/``free_positions`` or ``length`` arguments of mhfast.sample from the options."""
    texts = args.init if args.init is not None else (read_sequences(args.init_file) if args.init_file else None)
    if texts is None:
        if args.free:
            raise ValueError("--free needs --init or --init-file (infilling keeps the rest of a given sequence)")
        return {"length": 10 if args.length is None else args.length}
    if not callable(getattr(lm, "encode", None)):
        raise ValueError("--init: this model has no tokenizer to encode text")
    encoded = [lm.encode(t) for t in texts]
    if any(len(e) == 0 for e in encoded):
        raise ValueError("--init: empty sequence")
    T = max(len(e) for e in encoded)
    init = torch.full((len(encoded), T), lm.pad_id, dtype=torch.long)
    for b, e in enumerate(encoded):
        init[b, :len(e)] = e
    out: dict = {"init": init}
    if args.free:
        special = torch.zeros(lm.vocab_size, dtype=torch.bool)
        special[[i for i in lm.special_ids if i != lm.mask_id]] = True
        free = torch.zeros_like(init, dtype=torch.bool)
        for b, e in enumerate(encoded):
            ordinary = (~special[e]).nonzero().flatten()  # token index of each ordinary token
            for start, end in args.free:
                if end > len(ordinary):
                    raise ValueError(f"--free {start}:{end}: sequence {b + 1} has only {len(ordinary)} tokens")
                free[b, ordinary[start:end]] = True
            # Masked tokens ('_') must be filled, so they are free whatever the spans say.
            free[b, :len(e)] |= e == lm.mask_id
        out["free_positions"] = free
    return out


def _check(args: argparse.Namespace) -> Any:
    """The validated sampler config (``--energy both`` checked as raw); errors name the flag."""
    if args.length is not None and args.length < 1:
        raise ValueError(f"--length must be an int >= 1, got {args.length}")
    return options.config_from_args(args, energy="raw" if args.energy == "both" else args.energy)


def _terms(lm: Any, args: argparse.Namespace, inputs: dict, rows: list[int] | None = None) -> list | None:
    """The extra energy terms of --hamming (reference: --hamming-reference, else the --init rows) and
    --classifier; ``rows``: the inputs this process samples (their references, in that order)."""
    count = inputs["init"].shape[0] if "init" in inputs else 1
    lines = _energy_terms.reference_lines(args, count)
    if lines is not None:
        references = _energy_terms.padded([lm.encode(t) for t in lines], lm.pad_id)
    else:
        references = inputs.get("init")
    if references is not None and rows is not None:
        references = references[rows]
    decode = lm.decode if callable(getattr(lm, "decode", None)) else None
    return _energy_terms.extra_energy(_energy_terms.hamming_term(args, references, lm.pad_id),
                                      _energy_terms.classifier_term(args, lm.pad_id, decode))


def _shard(inputs: dict, world: Any, pad_id: int) -> tuple[dict, list[int]]:
    """This rank's inputs (cost-balanced: length squared) and their global indices (the RNG's input ids)."""
    from .. import distributed

    if "init" not in inputs:  # one unconditional input: rank 0 samples it
        return (inputs, [0]) if world.is_main else ({}, [])
    init = inputs["init"]
    mine = distributed.shard([float(int((r != pad_id).sum())) ** 2 for r in init], world.size)[world.rank]
    sub = {k: v[mine] for k, v in inputs.items()}
    return sub, mine


def _epoch_line(args: argparse.Namespace, epoch: int, s: dict) -> str:
    return (f"  epoch {epoch + 1:3d}/{args.epochs}  E_raw {s['e_raw_sum'] / s['chains']:10.3f}  "
            f"E_local {s['e_local_sum'] / s['chains']:9.3f}  accept {s['accepted'] / max(s['proposals'], 1):.3f}  "
            f"novel {s['novel'] / max(s['proposals'], 1):.3f}  tau {s['target_temperature']:.3f}")


def run(args: argparse.Namespace) -> int:
    from .. import distributed
    from ..models.loading import load_masked_lm
    from ..sampler.problem import build_problem

    cfg = _check(args)
    if args.model.startswith(("/", "./", "../", "~")) and not os.path.exists(os.path.expanduser(args.model)):
        raise FileNotFoundError(f"--model: no such model directory: {args.model!r} (give 'antiberty', 'sapiens-h', "
                                "'sapiens-l', a fairseq checkpoint, a local HuggingFace model directory or a hub id)")
    world = distributed.world(device=args.device)  # torchrun: inputs shared over ranks, rank 0 prints
    if world.backend == "nccl":
        args.device = str(world.device)
    t0 = time.perf_counter()
    lm = load_masked_lm(args.model, device=args.device)
    inputs = _inputs(lm, args)
    terms = _terms(lm, args, inputs)
    # every model-dependent check (lengths against the model, token ids, sizes) before any output
    build_problem(lm, dataclasses.replace(cfg, extra_energy=terms), **inputs)
    mine_inputs, mine = _shard(inputs, world, int(lm.pad_id))
    say = (lambda *a: None) if args.quiet or not world.is_main else (lambda *a: print(*a, flush=True))
    say(f"# model {args.model} loaded in {time.perf_counter() - t0:.1f} s (vocab {lm.vocab_size})")
    for energy in ["raw", "local"] if args.energy == "both" else [args.energy]:
        say(f"# {args.sampler} on the {energy} energy: {args.chains} chains, {args.epochs} epochs "
            f"({args.burn_in} burn-in), seed {args.seed}")
        t0 = time.perf_counter()
        live = world.size == 1
        part = _sample_part(lm, mine_inputs, mine, dataclasses.replace(
            cfg, energy=energy, extra_energy=_terms(lm, args, inputs, mine) if mine else None),
            (lambda e, s: say(_epoch_line(args, e, s))) if live else None)
        parts = distributed.gather({world.rank: part}, world.size, world, dst=0)
        if world.is_main:
            result = _combine([p for p in parts if p is not None], args, energy, say if not live else None)
            print_result(lm, result, energy, args, time.perf_counter() - t0)
    return 0


def _sample_part(lm: Any, inputs: dict, ids: list[int], cfg: Any, say_epoch: Any) -> dict | None:
    """This rank's share: its inputs' chains and the per-epoch sums and counts (None without inputs)."""
    import mhfast

    if not ids:
        return None
    epochs: list[dict] = []

    def progress(epoch: int, s: dict) -> None:
        epochs.append(s)
        if say_epoch is not None:
            say_epoch(epoch, s)

    r = mhfast.sample(lm, **inputs, input_ids=ids if "init" in inputs else None, config=cfg, progress=progress)
    return {"ids": ids, "tokens": r.tokens.cpu(), "energy_raw": r.energy_raw.cpu(), "energy_local": r.energy_local.cpu(),
            "best_tokens": r.best_tokens.cpu(), "best_energy": r.best_energy.cpu(), "model_rows": r.model_rows,
            "compile_seconds": r.compile_seconds, "memo_hits": r.memo_hits, "epochs": epochs}


def _combine(parts: list[dict], args: argparse.Namespace, energy: str, say: Any) -> Any:
    """One result from the ranks' parts: inputs in order, per-epoch rates from the summed counts (the numbers
    one process computes), and the epoch lines (printed after the run under torchrun)."""
    import types

    import torch

    order = sorted((i, p, j) for p in parts for j, i in enumerate(p["ids"]))
    pick = lambda key: torch.stack([p[key][j] for _, p, j in order])  # noqa: E731
    rates = {"acceptance_rate": [], "novel_rate": []}
    for e in range(args.epochs):
        s = {k: sum(p["epochs"][e][k] for p in parts) for k in ("chains", "e_raw_sum", "e_local_sum", "proposals",
                                                                 "accepted", "novel")}
        s["target_temperature"] = parts[0]["epochs"][e]["target_temperature"]
        if say is not None:
            say(_epoch_line(args, e, s))
        rates["acceptance_rate"].append(float(s["accepted"]) / max(s["proposals"], 1))
        rates["novel_rate"].append(float(s["novel"]) / max(s["proposals"], 1))
    return types.SimpleNamespace(
        tokens=pick("tokens"), energy_raw=pick("energy_raw"), energy_local=pick("energy_local"),
        best_tokens=pick("best_tokens"), best_energy=pick("best_energy"),
        model_rows=sum(p["model_rows"] for p in parts),
        compile_seconds=max(p["compile_seconds"] for p in parts),  # the ranks compile at the same time
        memo_hits=sum(p["memo_hits"] for p in parts),
        **{k: torch.tensor(v, dtype=torch.float32) for k, v in rates.items()})


def print_result(lm: Any, result: Any, energy: str, args: argparse.Namespace, seconds: float) -> None:
    """Samples with their energies, the best sample per input, and the run's rates."""
    B, C, _ = result.tokens.shape
    post = slice(args.burn_in, None) if args.burn_in < args.epochs else slice(None)
    acc = float(result.acceptance_rate[post].mean())
    novel = float(result.novel_rate[post].mean())
    out = sys.stdout
    for b in range(B):
        print(f"[{energy}] input {b + 1}", file=out)
        for c in range(C):
            print(f"  {lm.decode(result.tokens[b, c])}\tE_raw={float(result.energy_raw[b, c]):.3f}\t"
                  f"E_local={float(result.energy_local[b, c]):.3f}", file=out)
        print(f"  best: {lm.decode(result.best_tokens[b])}\tE_{energy}={float(result.best_energy[b]):.3f}", file=out)
    print(f"[{energy}] acceptance {acc:.3f}  novel {novel:.3f} (mean over post-burn-in epochs)  "
          f"model rows {result.model_rows}"
          + (f" (memo hits {result.memo_hits})" if result.memo_hits else "") + f"  {seconds:.1f} s"
          + (f" (compiling {result.compile_seconds:.1f} s)" if getattr(args, "compile", False) else ""),
          file=out, flush=True)
