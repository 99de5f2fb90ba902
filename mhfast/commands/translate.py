"""``mhfast translate``: translate sentences with a CMLM by Metropolis-Hastings (or Mask-Predict).

Reads raw source sentences (one per line) from --input or stdin and writes one translation per
line, in input order, to stdout or --output: the best sample per source (lowest target energy
after burn-in), detokenized. The bundled Multi30k De->En model is used unless --model/--data name
another fairseq cmlm_transformer. Empty source lines give empty output lines.

Work is done in fixed chunks of --batch-size input lines (chunk k = lines k*N .. k*N+N-1). Every
sentence samples with its GLOBAL line index as the sampler's input index, so its chains do not
depend on which chunk it is in. After each chunk the output is flushed and fsynced, then the
sidecar OUTPUT.progress (JSON: options hash, lines done, output bytes) is replaced atomically. A
killed run continued with --resume truncates the output to the committed bytes and goes on with
the next chunk: the result equals an uninterrupted run line for line. --resume refuses to go on
when the options, the model or the input differ.

--format fairseq writes per sentence i (0-based), like fairseq-generate:
``S-i<TAB>source``, ``H-i<TAB>score<TAB>tokens`` (model tokens), ``D-i<TAB>score<TAB>detokenized``
and ``E-i<TAB>E_<energy>=best<TAB>raw=c1 c2 ..<TAB>local=c1 c2 ..`` (the best sample's target energy
and every chain's final raw/local energy) for MH, or ``P-i<TAB>positional log-probs`` for
Mask-Predict. score = -best energy per token for MH, the mean token log-probability for
Mask-Predict (higher is better). Empty sources get ``S-i``/``H-i``/``D-i`` with score 0 and no
tokens.

--stats-out F writes per-chunk, per-epoch sampler statistics as JSON (read by ``mhfast evaluate
--stats F``).

--ref FILE (or ``bundled``: the bundled test_2016_flickr.en) gives one reference per input line:
--format fairseq then adds ``T-i<TAB>reference`` lines (as fairseq-generate does), and at the end
sacreBLEU and chrF of all translations against the references, with their signatures, go to stderr.
``--input bundled`` reads the bundled test_2016_flickr.de; --limit N keeps the first N input lines
(and references).

Examples:
    $ python3 -m mhfast translate --input test.de --output test.hyp --chains 2 --epochs 10 --burn-in 3
    $ echo "Ein Hund läuft." | python3 -m mhfast translate --method mask-predict --quiet
    $ python3 -m mhfast translate --model ckpt.pt --data data-bin --tokenizer none --input src.tok --output out
    $ python3 -m mhfast translate --input test.de --output test.hyp --resume     # after a crash
    $ python3 -m mhfast translate --input bundled --ref bundled --limit 5 --format fairseq
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from ..sampler import options

NAME = "translate"
HELP = "translate sentences with a conditional MLM (bundled De->En CMLM) by MH sampling or Mask-Predict"
DESCRIPTION = " ".join(__doc__.split("\n\n")[1].split())
PROGRESS_SUFFIX = ".progress"
PROGRESS_VERSION = 1


def add_arguments(p: argparse.ArgumentParser) -> None:
    io = p.add_argument_group("input/output")
    io.add_argument("--input", "-i", metavar="FILE",
                    help="source sentences, one per line (default: stdin); 'bundled': test_2016_flickr.de")
    io.add_argument("--ref", metavar="FILE",
                    help="references, one per input line ('bundled': test_2016_flickr.en): T- lines with "
                         "--format fairseq, BLEU and chrF on stderr at the end")
    io.add_argument("--limit", type=int, default=None, metavar="N", help="translate only the first N input lines")
    io.add_argument("--output", "-o", metavar="FILE", help="translations (default: stdout)")
    io.add_argument("--format", choices=("plain", "fairseq"), default="plain",
                    help="plain: one hypothesis per line; fairseq: S-/T-/H-/D-/E- lines like fairseq-generate")
    io.add_argument("--resume", action="store_true",
                    help="continue a killed run into the same --output (needs OUTPUT.progress, same options)")
    io.add_argument("--stats-out", metavar="FILE", help="write per-epoch sampler statistics as JSON")
    io.add_argument("--quiet", "-q", action="store_true", help="no progress bar on stderr")

    model = p.add_argument_group("model")
    model.add_argument("--model", metavar="CHECKPOINT", default=None,
                       help="a fairseq cmlm_transformer checkpoint (default: the bundled Multi30k De->En model)")
    model.add_argument("--data", metavar="DICT_DIR", help="folder with the checkpoint's dict.<src>.txt/dict.<tgt>.txt")
    tok = model.add_mutually_exclusive_group()
    tok.add_argument("--spm", metavar="SPM_MODEL", help="SentencePiece model (default: DICT_DIR/spm.model)")
    tok.add_argument("--tokenizer", choices=("none",), help="'none': inputs are already tokenized")
    model.add_argument("--threads", type=int, default=0,
                       help="CPU threads of torch (0: torch's default); 1 is fastest on a busy machine")

    dec = p.add_argument_group("decoding")
    dec.add_argument("--method", choices=("mh", "mask-predict"), default="mh")
    dec.add_argument("--iterations", type=int, default=10,
                     help="mask-predict: decoder passes (the paper's T; fairseq --iter-decode-max-iter T-1)")
    dec.add_argument("--length-beam", type=int, default=1, help="length candidates per source")
    dec.add_argument("--batch-size", type=int, default=16, help="sentences per sampler call (and per saved chunk)")

    options.add_arguments(p.add_argument_group("MH sampler (mhfast.sample; defaults = paper section 5)"))


# ---------------------------------------------------------------------------- options
def _check(args: argparse.Namespace) -> None:
    """Every option checked before any work (the sampler's by the option spec); errors name the flag."""
    options.config_from_args(args, length_beam=args.length_beam)
    for name in ("batch_size", "length_beam", "iterations"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be an int >= 1, got {getattr(args, name)}")
    if args.threads < 0:
        raise ValueError(f"--threads must be >= 0, got {args.threads}")
    if args.resume and not args.output:
        raise ValueError("--resume needs --output (a run to stdout cannot be continued)")
    if args.model is None and (args.data or args.spm or args.tokenizer):
        raise ValueError("--data/--spm/--tokenizer go with --model CHECKPOINT (the bundled model has its own)")
    if args.model is not None and not args.data:
        raise ValueError("--model needs --data DICT_DIR (the folder with its dict.<lang>.txt files)")
    if args.limit is not None and args.limit < 0:
        raise ValueError(f"--limit must be >= 0, got {args.limit}")
    for option, path in (("--input", args.input), ("--ref", args.ref)):
        if path is not None and path != "bundled" and not os.path.isfile(path):
            raise FileNotFoundError(f"{option}: no such file: {path!r}")
    if args.output is not None and os.path.isdir(args.output):
        raise ValueError(f"--output: {args.output!r} is a directory")


def sampler_options(args: argparse.Namespace) -> dict:
    """The keyword arguments of mhfast.sample given by the sampler flags (model/source/input_ids aside)."""
    return options.as_kwargs(options.config_from_args(args), cli_only=True)


def _file_identity(path: str | os.PathLike | None) -> Any:
    if path is None:
        return None
    p = Path(path).resolve()
    return [str(p), p.stat().st_size] if p.exists() else [str(p), None]


def options_hash(args: argparse.Namespace, lines: list[str], refs: list[str] | None = None) -> str:
    """sha256 of everything that decides the output: decoding options, model files, the input text
    (and the references, which --format fairseq writes)."""
    from ..translation import BUNDLE_DIR

    model_dir = BUNDLE_DIR if args.model is None else Path(args.data)
    spec = {
        "version": PROGRESS_VERSION, "method": args.method, "format": args.format, "batch_size": args.batch_size,
        "length_beam": args.length_beam,
        "iterations": args.iterations if args.method == "mask-predict" else None,
        "sampler": sampler_options(args) if args.method == "mh" else None,
        "model": _file_identity(args.model or BUNDLE_DIR / "model.pt"),
        "dicts": [_file_identity(f) for f in sorted(model_dir.glob("dict.*.txt"))] if model_dir.is_dir() else None,
        "spm": _file_identity(args.spm), "tokenizer": args.tokenizer, "stats_out": args.stats_out,
        "input": hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest(), "lines": len(lines),
    }
    if refs is not None:  # keeps the hashes of runs without --ref unchanged
        spec["refs"] = hashlib.sha256("\n".join(refs).encode("utf-8")).hexdigest()
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()


# ---------------------------------------------------------------------------- files
def read_lines(path: str | None) -> list[str]:
    """Source lines (newline and surrounding whitespace stripped) from a file or stdin."""
    if path is None:
        text = sys.stdin.read()
    else:
        with open(path, encoding="utf-8", newline="") as f:
            text = f.read()
    lines = text.splitlines()
    return [line.strip() for line in lines]


def _write_json_atomic(path: str, data: Any) -> None:
    """Write ``data`` to ``path`` so a reader sees the old or the new file, never half of one."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _read_progress(output: str, digest: str) -> dict:
    path = output + PROGRESS_SUFFIX
    if not os.path.isfile(path):
        raise ValueError(f"--resume: no progress file {path!r} (was the run started with --output {output!r}?)")
    try:
        with open(path, encoding="utf-8") as f:
            progress = json.load(f)
        lines_done, size = int(progress["lines_done"]), int(progress["output_bytes"])
    except (ValueError, KeyError, TypeError):
        raise ValueError(f"--resume: {path!r} is not a valid progress file") from None
    if progress.get("options_hash") != digest:
        raise ValueError("--resume: the options, model or input differ from the interrupted run "
                         f"(see {path!r}); rerun without --resume to start over")
    if not os.path.isfile(output) or os.path.getsize(output) < size:
        raise ValueError(f"--resume: {output!r} is shorter than the {size} bytes {path!r} records as written")
    return {"lines_done": lines_done, "output_bytes": size}


def format_sentence(index: int, source: str, hyp: Any, fmt: str, ref: str | None = None) -> str:
    """The output text of one sentence (with trailing newline)."""
    if fmt == "plain":
        return hyp.text + "\n"
    lines = [f"S-{index}\t{source}"] + ([f"T-{index}\t{ref}"] if ref is not None else [])
    lines += [f"H-{index}\t{hyp.score:.6f}\t{' '.join(hyp.tokens)}", f"D-{index}\t{hyp.score:.6f}\t{hyp.text}"]
    d = hyp.details
    if "best_energy" in d:
        lines.append(f"E-{index}\tE_{d['energy']}={d['best_energy']:.4f}\traw="
                     + " ".join(f"{x:.4f}" for x in d["chains_raw"]) + "\tlocal="
                     + " ".join(f"{x:.4f}" for x in d["chains_local"]))
    elif "positional_scores" in d:
        lines.append(f"P-{index}\t" + " ".join(f"{x:.4f}" for x in d["positional_scores"]))
    return "\n".join(lines) + "\n"


def hypotheses_in_output(text: str, fmt: str) -> list[str]:
    """The detokenized hypotheses of an output written by this command (plain lines or D- lines)."""
    if fmt == "plain":
        return text.split("\n")[:-1] if text else []
    return [line.split("\t", 2)[2] for line in text.split("\n") if line.startswith("D-")]


def report_scores(hyps: list[str], refs: list[str]) -> None:
    """sacreBLEU and chrF (with signatures) on stderr: stdout stays the translations only."""
    from .evaluate import score

    print(f"{len(hyps)} sentences", file=sys.stderr)
    for _, result, signature in score(hyps, refs):
        print(f"{result}\n  signature: {signature}", file=sys.stderr)


# ---------------------------------------------------------------------------- run
def _load(args: argparse.Namespace) -> Any:
    from ..translation import load_bundled_model, load_translator

    if args.model is None:
        return load_bundled_model(device=args.device)
    return load_translator(args.model, args.data, spm=args.spm, tokenizer=args.tokenizer, device=args.device)


def _terms_factory(args: argparse.Namespace, translator: Any, count: int) -> Any:
    """``f(global line ids) -> extra_energy`` for --hamming (targets of --hamming-reference) and --classifier."""
    from . import _energy_terms as et

    lines = et.reference_lines(args, count, args.limit) if args.hamming else None
    refs = et.padded([translator.target_ids(t) for t in lines], translator.cmlm.pad_id) if lines else None
    pad = translator.cmlm.pad_id
    clf = et.classifier_term(args, pad, translator.detokenize)
    if not args.hamming and clf is None:
        et.hamming_term(args, None, pad)  # --hamming-reference alone is an error
        return None
    return lambda ids: et.extra_energy(et.hamming_term(args, refs[ids] if refs is not None else None, pad), clf)


def _progress_bar(args: argparse.Namespace, total: int, initial: int) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, unit="sent", file=sys.stderr, disable=args.quiet,
                dynamic_ncols=True, desc="translate")


def run(args: argparse.Namespace) -> int:
    _check(args)
    from ..translation import bundled_test_file

    lines = read_lines(None if args.input is None else bundled_test_file(args.input, "--input"))
    refs = None if args.ref is None else read_lines(bundled_test_file(args.ref, "--ref"))
    if args.limit is not None:
        lines = lines[:args.limit]
        refs = None if refs is None else refs[:args.limit]
    if refs is not None and len(refs) != len(lines):
        raise ValueError(f"line counts differ: --input {len(lines)}, --ref {len(refs)}"
                         + (f" (after --limit {args.limit})" if args.limit is not None else ""))
    digest = options_hash(args, lines, refs)
    start, out_bytes = 0, 0
    if args.resume:
        state = _read_progress(args.output, digest)
        start, out_bytes = state["lines_done"], state["output_bytes"]
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    translator = _load(args)
    terms_for = _terms_factory(args, translator, len(lines))

    stats: dict = {"version": PROGRESS_VERSION, "method": args.method, "options_hash": digest,
                   "burn_in": args.burn_in if args.method == "mh" else None, "batches": []}
    if args.stats_out and args.resume and os.path.isfile(args.stats_out):
        with open(args.stats_out, encoding="utf-8") as f:
            old = json.load(f)
        # Chunks after the committed ones may have been recorded before the kill: drop them.
        stats["batches"] = [b for b in old.get("batches", []) if b["end"] <= start]

    hyps: list[str] = []  # every translation of the run, for the scores at the end
    out: Any
    if args.output is None:
        out = sys.stdout
    else:  # binary: tell() is a byte offset, the unit of the progress file
        out = open(args.output, "r+b" if args.resume else "wb")
        if args.resume:  # drop what a killed run wrote after its last committed chunk
            out.truncate(out_bytes)
            if refs is not None:  # the committed translations count in the scores too
                hyps = hypotheses_in_output(out.read().decode("utf-8"), args.format)
            out.seek(out_bytes)
        else:
            _write_json_atomic(args.output + PROGRESS_SUFFIX, {"options_hash": digest, "lines_done": 0,
                                                               "output_bytes": 0, "total_lines": len(lines)})
    bar = _progress_bar(args, len(lines), start)
    decoded, acc_sum = 0, 0.0
    try:
        for first in range(start, len(lines), args.batch_size):
            chunk = lines[first:first + args.batch_size]

            def on_epoch(epoch: int, s: dict) -> None:
                bar.set_postfix_str(f"epoch {epoch + 1}/{args.epochs} accept "
                                    + (f"{acc_sum / decoded:.3f}" if decoded else f"{s['acceptance_rate']:.3f}"),
                                    refresh=True)

            result = translator.translate(
                chunk, method=args.method, input_ids=range(first, first + len(chunk)),
                sampler_options=sampler_options(args), iterations=args.iterations, length_beam=args.length_beam,
                progress=None if args.quiet else on_epoch, extra_energy=terms_for)
            text = "".join(format_sentence(first + j, src, hyp, args.format,
                                           None if refs is None else refs[first + j])
                           for j, (src, hyp) in enumerate(zip(chunk, result.hypotheses)))
            hyps += [hyp.text for hyp in result.hypotheses]
            out.write(text if out is sys.stdout else text.encode("utf-8"))
            out.flush()
            if args.output is not None:
                os.fsync(out.fileno())
            end = first + len(chunk)
            if args.stats_out:
                stats["batches"].append({"start": first, "end": end, "sentences": result.sentences,
                                         "epochs": result.epochs})
                _write_json_atomic(args.stats_out, stats)
            if args.output is not None:  # the commit point: this chunk is done for --resume
                _write_json_atomic(args.output + PROGRESS_SUFFIX, {
                    "options_hash": digest, "lines_done": end, "output_bytes": out.tell(),
                    "total_lines": len(lines)})
            if result.acceptance is not None:
                decoded += result.sentences
                acc_sum += result.acceptance * result.sentences
            bar.update(len(chunk))
            if decoded:
                bar.set_postfix_str(f"accept {acc_sum / decoded:.3f}", refresh=False)
        if args.stats_out and not stats["batches"] and not args.resume:
            _write_json_atomic(args.stats_out, stats)
    except BaseException:
        bar.leave = False  # clear the bar: the error is the last line the user sees
        raise
    finally:
        bar.close()
        if out is not sys.stdout:
            out.close()
    if refs is not None and lines:
        report_scores(hyps, refs)
    return 0
