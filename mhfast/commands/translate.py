"""``mhfast translate``: translate sentences with a CMLM by Metropolis-Hastings (or Mask-Predict).

Reads raw source sentences (one per line) from --input or stdin and writes one translation per
line, in input order, to stdout or --output: the best sample per source (lowest target energy
after burn-in), detokenized. The bundled Multi30k De->En model is used unless --model/--data name
another fairseq cmlm_transformer. Empty source lines give empty output lines.

Work is done in fixed chunks of --batch-size input lines (chunk k = lines k*N .. k*N+N-1). Every
sentence samples with its GLOBAL line index as the sampler's input index, so its chains do not
depend on which chunk it is in. Input lines are separated by "\\n" only ("\\r\\n" tolerated; a U+2028
or form feed stays inside its line) and must be UTF-8. One process at a time writes an --output (a
second is refused while the first runs). After each chunk the output is fsynced, then the sidecar
OUTPUT.progress (the run's options, sha256 of the model files and input, lines done, committed
output bytes and their sha256, and its own checksum) is replaced atomically. A killed run continued
with --resume cuts the output to the committed bytes and goes on with the next chunk: the result
equals an uninterrupted run byte for byte. --resume refuses, naming the difference, when the
options, model files or input differ, or when the record or the output's committed bytes fail
their checks.

--format fairseq writes per sentence i (0-based), like fairseq-generate:
``S-i<TAB>source``, ``H-i<TAB>score<TAB>tokens`` (model tokens), ``D-i<TAB>score<TAB>detokenized``
and ``E-i<TAB>E_<energy>=best<TAB>raw=c1 c2 ..<TAB>local=c1 c2 ..`` (the best sample's target energy,
labelled ``E_<energy>+terms`` when energy terms are on since it includes their weighted sum, and every
chain's final raw/local energy) for MH, or ``P-i<TAB>positional log-probs`` for
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
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from ..files import (PROGRESS_VERSION, check_input, describe, file_sha256, line_of, read_records,
                     write_json_atomic)
from ..files.journal import CommittedOutput, StreamOutput, check_output_there, is_special, spec_sha256
from ..files.lock import OutputLock, check_distinct
from ..sampler import options
from ..sampler.result import target_label
from ..sampler.scalars import MAX_SIZE
from . import _diagnostics

ITERATIONS_DEFAULT = 10  #: --iterations (Mask-Predict's decoder passes)
NAME = "translate"
HELP = "translate sentences with a conditional MLM (bundled De->En CMLM) by MH sampling or Mask-Predict"
DESCRIPTION = " ".join(__doc__.split("\n\n")[1].split())


def results_on_stdout(args: argparse.Namespace) -> bool:
    """The results go to stdout unless --output names a file (the CLI checks stdout before any work)."""
    return args.output is None


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
                       help=f"CPU threads of torch, 0..{max_threads()} (4 x the CPUs; 0: torch's default); 1 is "
                            "fastest on a busy machine")

    dec = p.add_argument_group("decoding")
    dec.add_argument("--method", choices=("mh", "mask-predict"), default="mh",
                     help="mh: Metropolis-Hastings under the CMLM's energy; mask-predict: fairseq's decoder")
    dec.add_argument("--iterations", type=int, default=ITERATIONS_DEFAULT,
                     help="mask-predict: decoder passes (the paper's T; fairseq --iter-decode-max-iter T-1)")
    dec.add_argument("--length-beam", type=int, default=1, help="length candidates per source")
    dec.add_argument("--batch-size", type=int, default=16, help="sentences per sampler call (and per saved chunk)")

    options.add_arguments(p.add_argument_group("MH sampler (mhfast.sample; defaults = paper section 5)"))
    _diagnostics.add_arguments(p)


# ---------------------------------------------------------------------------- options
def max_threads() -> int:
    """The largest --threads: 4 threads per CPU. More only oversubscribes, and torch tries to start
    whatever it is given (--threads 100000 exhausts memory or crashes inside its thread pool)."""
    return 4 * (os.cpu_count() or 1)


#: the most --iterations Mask-Predict takes (one past int64 ran for hours: a decoding of T tokens re-masks fewer each
#: round, and fairseq's own runs use 4-10)
MAX_MASK_PREDICT_ITERATIONS = 10_000


def _check(args: argparse.Namespace, main: bool = True) -> None:
    """Every option checked before any work (the sampler's by the option spec); errors name the flag. ``main``:
    this process reads the input files and writes the output (torchrun: rank 0 only; the other ranks get the
    lines from it, so a file that only rank 0's machine has is no error on theirs)."""
    # (a huge beam had overflowed a float in the chunks' costs: a traceback)
    for name, high in (("batch_size", MAX_SIZE), ("length_beam", MAX_SIZE),
                       ("iterations", MAX_MASK_PREDICT_ITERATIONS)):
        if not 1 <= getattr(args, name) <= high:
            raise ValueError(f"--{name.replace('_', '-')} must be an int in [1, {high}], got {getattr(args, name)}")
    options.config_from_args(args, length_beam=args.length_beam)
    _check_method(args)
    _diagnostics.check(args)
    if not 0 <= args.threads <= max_threads():
        raise ValueError(f"--threads must be in [0, {max_threads()}] (0: torch's default), got {args.threads}")
    if args.resume and not args.output:
        raise ValueError("--resume needs --output (a run to stdout cannot be continued)")
    if args.model is None and any(v is not None for v in (args.data, args.spm, args.tokenizer)):  # ("" as well)
        raise ValueError("--data/--spm/--tokenizer go with --model CHECKPOINT (the bundled model has its own)")
    if args.model is not None and not args.data:
        raise ValueError("--model needs --data DICT_DIR (the folder with its dict.<lang>.txt files)")
    if args.limit is not None and args.limit < 0:
        raise ValueError(f"--limit must be >= 0, got {args.limit}")
    if not main:
        return
    for option, path in (("--input", args.input), ("--ref", args.ref)):
        if path is not None and path != "bundled":
            check_input(path, option)
    if args.output is not None and os.path.isdir(args.output):
        raise ValueError(f"--output: {args.output!r} is a directory")


#: The option-spec flags Mask-Predict uses too (where the model runs); the other sampler flags are MH's alone.
MASK_PREDICT_OPTIONS = ("device",)


def _check_method(args: argparse.Namespace) -> None:
    """A flag that the chosen --method ignores is an error naming both (not a run that silently drops it)."""
    if args.method == "mask-predict":
        for opt in options.SPEC:
            if opt.cli and opt.name not in MASK_PREDICT_OPTIONS and getattr(args, opt.name) != opt.default:
                raise ValueError(f"{opt.flag} has no effect with --method mask-predict (it is an MH sampler "
                                 "option; use --method mh)")
    elif args.iterations != ITERATIONS_DEFAULT:
        raise ValueError(f"--iterations ({args.iterations}) has no effect with --method {args.method} (it is "
                         "Mask-Predict's; use --method mask-predict, or --epochs for MH)")


def sampler_options(args: argparse.Namespace) -> dict:
    """The keyword arguments of mhfast.sample given by the sampler flags (model/source/input_ids aside)."""
    return options.as_kwargs(options.config_from_args(args), cli_only=True)


#: the option that names each model file (in I/O errors); dictionaries come from --data
MODEL_FILE_OPTIONS = {"checkpoint": "--model", "spm": "--spm"}


def _model_files(args: argparse.Namespace) -> dict[str, Any]:
    """The files that make the model: checkpoint, dictionaries and the SentencePiece model in use."""
    from ..translation import BUNDLE_DIR

    model_dir = BUNDLE_DIR if args.model is None else Path(args.data)
    files: dict[str, Any] = {"checkpoint": args.model or BUNDLE_DIR / "model.pt"}
    if model_dir.is_dir():
        files.update((f.name, f) for f in sorted(model_dir.glob("dict.*.txt")))
    spm = args.spm or (model_dir / "spm.model" if (model_dir / "spm.model").is_file() else None)
    files["spm"] = None if args.tokenizer == "none" else spm
    return files


def _records_sha256(records: list[str]) -> str:
    h = hashlib.sha256(str(len(records)).encode())
    for r in records:  # a record holds no "\n": the joined text is unambiguous
        h.update(b"\n" + r.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def output_spec(args: argparse.Namespace, lines: list[str], refs: list[str] | None = None,
                references: list[str] | None = None) -> dict:
    """Everything that decides the output, as the progress record keeps it: the options (by their
    CLI names), the sha256 of every model file (content, not path and size), the input and the
    references (--format fairseq writes them), the statistics file and the mhfast version; ``references``:
    the --hamming-reference lines read (recorded by them where the option names no regular file)."""
    import mhfast

    options: dict[str, Any] = {"--method": args.method, "--format": args.format, "--batch-size": args.batch_size,
                               "--length-beam": args.length_beam, "--device": args.device,
                               "--iterations": args.iterations if args.method == "mask-predict" else None}
    if args.method == "mh":
        options.update(("--" + k.replace("_", "-"), v) for k, v in sampler_options(args).items())
        options.update(_energy_term_spec(args, references))
        options["--diagnostics"] = args.diagnostics  # (--stats-out's records hold its tables or not)
    return {"mhfast": getattr(mhfast, "__version__", None), "options": options, "--tokenizer": args.tokenizer,
            "model": {name: file_sha256(path, MODEL_FILE_OPTIONS.get(name, "--data"))
                      for name, path in _model_files(args).items()},
            "input": {"lines": len(lines), "sha256": _records_sha256(lines)},
            "references": None if refs is None else {"lines": len(refs), "sha256": _records_sha256(refs)},
            "--stats-out": None if args.stats_out is None else os.path.abspath(args.stats_out)}


def _energy_term_spec(args: argparse.Namespace, references: list[str] | None = None) -> dict:
    """The energy-term flags (CLI-only entries of the option spec); the values of those that name a file or a
    folder (metavar FILE, DIR) by content alone, as the model's files: the same reference reached by another path
    resumes, and a label that happens to name a file in the working folder stays a label. A --hamming-reference
    that is no regular file (a FIFO, ``<(cmd)``) is recorded by the ``references`` lines read from it: its path
    alone had let a resume continue under other references."""
    out: dict[str, Any] = {}
    for opt in options.SPEC:
        if opt.cli and not opt.api:
            value = getattr(args, opt.name)
            if opt.flag == "--hamming-reference" and isinstance(value, str) and references is not None \
                    and not os.path.isfile(value):
                value = {"lines": len(references), "sha256": _records_sha256(references)}
            elif opt.metavar in ("FILE", "DIR") and isinstance(value, str):
                if os.path.isfile(value):
                    value = {"sha256": file_sha256(value, opt.flag)}
                elif os.path.isdir(value):
                    value = {"sha256": {f: file_sha256(os.path.join(value, f), opt.flag)
                                        for f in sorted(os.listdir(value)) if os.path.isfile(os.path.join(value, f))}}
            out[opt.flag] = value
    return out


# ---------------------------------------------------------------------------- files
def read_lines(path: str | None, option: str = "--input") -> list[str]:
    """Source lines of a file or stdin, records separated by "\\n" only (mhfast.files.lines: a U+2028
    or form feed stays inside its line), surrounding whitespace stripped; bad UTF-8 is an error
    naming the file and line."""
    return [line.strip() for line in read_records(path, option)]


def format_sentence(index: int, source: str, hyp: Any, fmt: str, ref: str | None = None) -> str:
    """The output text of one sentence (with trailing newline)."""
    if fmt == "plain":
        return hyp.text + "\n"
    lines = [f"S-{index}\t{source}"] + ([f"T-{index}\t{ref}"] if ref is not None else [])
    lines += [f"H-{index}\t{hyp.score:.6f}\t{' '.join(hyp.tokens)}", f"D-{index}\t{hyp.score:.6f}\t{hyp.text}"]
    d = hyp.details
    if "best_energy" in d:
        best = target_label(d["energy"], d.get("with_terms", False))  # the best energy includes the terms
        lines.append(f"E-{index}\t{best}={d['best_energy']:.4f}\traw="
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


def sentences_in_output(data: bytes, fmt: str) -> int:
    """How many sentences an output written by this command holds (plain: lines; fairseq: S- lines)."""
    if fmt == "plain":
        return data.count(b"\n")
    return sum(1 for line in data.split(b"\n") if line.startswith(b"S-"))


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


def _reference_ids(translator: Any, number: int, text: str) -> Any:
    """A --hamming-reference line's target ids; a piece the target dictionary lacks names the line."""
    try:
        return translator.target_ids(text)
    except ValueError as e:
        raise ValueError(f"--hamming-reference: line {number}: {e}") from None


def _terms_factory(args: argparse.Namespace, translator: Any, lines: list[str] | None) -> Any:
    """``f(global line ids) -> extra_energy`` for --hamming (the --hamming-reference ``lines``: targets) and
    --classifier."""
    from . import _energy_terms as et

    if not args.hamming and args.classifier is None:
        et.hamming_term(args, None, 0)  # --hamming-reference alone is an error
        return None
    refs = et.padded([_reference_ids(translator, n, t) for n, t in enumerate(lines, 1)],
                     translator.cmlm.pad_id) if lines else None
    pad = translator.cmlm.pad_id
    clf = et.classifier_term(args, pad, translator.detokenize)
    return lambda ids: et.extra_energy(et.hamming_term(args, refs[ids] if refs is not None else None, pad,
                                                       et.reference_names(args, ids)), clf)


def _check_sources(args: argparse.Namespace, translator: Any, lines: list[str]) -> None:
    """Every source line fits the model's source positions, checked before the first chunk (a long line in a
    late chunk would otherwise stop the run halfway); the message names the line."""
    from ..models.base import check_length

    for number, line in enumerate(lines, 1):
        if line:
            check_length(translator, int(translator.source_ids(line).numel()), line_of(args.input, "--input", number),
                         side="source")


def _progress_bar(args: argparse.Namespace, total: int, initial: int) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, unit="sent", file=sys.stderr,
                disable=args.quiet or sys.stderr is None or initial >= total, dynamic_ncols=True, desc="translate")


def _read_texts(args: argparse.Namespace) -> tuple[list[str], list[str] | None, list[str] | None]:
    """The lines of --input, --ref and (with --hamming) --hamming-reference, each file read once."""
    from . import _energy_terms

    lines, refs = _read_inputs(args)
    return lines, refs, _energy_terms.reference_lines(args, len(lines), args.limit) if args.hamming else None


def _read_inputs(args: argparse.Namespace) -> tuple[list[str], list[str] | None]:
    from ..translation import bundled_test_file

    lines = read_lines(None if args.input is None else bundled_test_file(args.input, "--input"), "--input")
    refs = None if args.ref is None else read_lines(bundled_test_file(args.ref, "--ref"), "--ref")
    if args.limit is not None:
        lines = lines[:args.limit]
        refs = None if refs is None else refs[:args.limit]
    if refs is not None and len(refs) != len(lines):
        raise ValueError(f"line counts differ: --input {len(lines)}, --ref {len(refs)}"
                         + (f" (after --limit {args.limit})" if args.limit is not None else ""))
    return lines, refs


def _open_output(args: argparse.Namespace, spec: dict, total: int, stack: ExitStack) -> Any:
    """stdout, or --output locked for this process (and --stats-out with it), started or verified
    and resumed: the lock is taken before the progress record is read or anything is written."""
    from ..translation import bundled_test_file

    check_distinct({"--output": args.output, "--stats-out": args.stats_out, "--plot-traces": args.plot_traces},
                   {"--input": None if args.input is None else bundled_test_file(args.input, "--input"),
                    "--ref": None if args.ref is None else bundled_test_file(args.ref, "--ref"),
                    # the files read, not --data's folder: an output beside the dictionaries harms nothing
                    "--model": [str(p) for p in _model_files(args).values() if p is not None],
                    "--hamming-reference": args.hamming_reference,
                    "--classifier": args.classifier})
    if args.stats_out is not None and is_special(args.stats_out):  # it is replaced by rename: never a device
        raise ValueError(f"--stats-out: {args.stats_out!r} is not a regular file")
    special = args.output is not None and is_special(args.output)  # /dev/null, a FIFO: a stream
    if special and args.resume:
        raise ValueError(f"--resume: --output {args.output!r} is not a regular file (nothing to continue)")
    if args.resume and args.output is not None and not special:
        check_output_there(args.output)  # (before its lock, which would create it)
    for option, path in (("--output", None if special else args.output), ("--stats-out", args.stats_out)):
        if path is not None:
            folder = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(folder):
                raise FileNotFoundError(f"{option}: folder {folder!r} does not exist")
            stack.enter_context(OutputLock(path, option))
    if args.output is None or special:
        opened: Any = StreamOutput.to(args.output if special else None)
    elif args.resume:
        opened = CommittedOutput.resume(args.output, spec, total, lambda data: sentences_in_output(data, args.format))
    else:
        opened = CommittedOutput.start(args.output, spec, total)
    stack.callback(opened.close)
    return opened


def _write_stats(args: argparse.Namespace, stats: dict) -> None:
    """Replace --stats-out atomically by ``stats`` (an I/O error names --stats-out and the path)."""
    write_json_atomic(args.stats_out, stats, describe(args.stats_out, "--stats-out"))


def _resumed_stats(args: argparse.Namespace, stats: dict, start: int) -> None:
    """Chunks of the statistics file committed before the kill (later ones are dropped: they may
    have been written before the kill without their output being committed)."""
    if not (args.stats_out and args.resume):
        return
    try:
        with open(args.stats_out, encoding="utf-8") as f:
            old = json.load(f)
        batches = [b for b in old["batches"] if b["end"] <= start]
        ok = old.get("options_hash") == stats["options_hash"] and [b["start"] for b in batches] == \
            [0] + [b["end"] for b in batches[:-1]] and (batches[-1]["end"] if batches else 0) == start
    except (OSError, ValueError, KeyError, TypeError, RecursionError):  # (RecursionError: JSON nested deep)
        ok = False
    if not ok and start > 0:
        raise ValueError(f"--resume: --stats-out {args.stats_out!r} does not hold the statistics of the first "
                         f"{start} committed lines; rerun without --resume to start over")
    stats["batches"] = batches if ok else []


def run(args: argparse.Namespace) -> int:
    from .. import distributed

    # The world first (torchrun: every rank runs this; else a world of one): every error below then ends in an
    # agreement of the ranks (distributed.together), so that the job reports it once.
    world = distributed.world(device=args.device)
    with distributed.together(world):  # an error every rank sees alike: rank 0 reports it
        _check(args, world.is_main)
    # rank 0 reads the input files and hands their lines to every rank: stdin or a FIFO gives its lines once (under
    # torchrun each rank had read its own share of them, and the job wrote some lines, or waited for a rank with none)
    _, (lines, refs, references) = distributed.on_main(lambda: _read_texts(args), world, lambda read: read)
    with distributed.together(world):
        spec = output_spec(args, lines, refs, references)
    args.device = world.rank_device(args.device)  # (after the spec: the record keeps the --device given)
    digest = spec_sha256(spec)
    if args.threads:  # before --resume compares the record's torch threads with this run's
        import torch

        torch.set_num_threads(args.threads)
    with ExitStack() as stack:
        sink = _open_output_on_main(args, spec, len(lines), stack, world)
        with distributed.together(world):
            work, stats, hyps = _start(args, world, sink, lines, refs, references, digest)
        # A fresh --output is emptied at its first commit (CommittedOutput.commit begins it), with the statistics of
        # that chunk beside it: a run that fails before then (a rank's load, a line too long, a --hamming-reference
        # of another length than its sentence's, found in the first chunk) leaves the previous results and their
        # statistics as they were (it had emptied the output once the model loaded).
        _translate_chunks(work, sink, stats, hyps, world)
        with distributed.together(world):
            if world.is_main and not args.resume and not lines:  # nothing to translate: the empty output now
                sink.begin()
                if args.stats_out:
                    _write_stats(args, stats)
    if refs is not None and lines and world.is_main:
        report_scores(hyps, refs)
    return 0


def _start(args: argparse.Namespace, world: Any, sink: Any, lines: list[str], refs: list[str] | None,
           references: list[str] | None, digest: str) -> tuple["ChunkWork", dict, list[str]]:
    """The model, the energy terms (``references``: the --hamming-reference lines), the statistics so far and
    (rank 0) the translations already committed."""
    translator = _load(args)
    _check_sources(args, translator, lines)
    terms_for = _terms_factory(args, translator, references)
    stats: dict = {"version": PROGRESS_VERSION, "method": args.method, "options_hash": digest,
                   "burn_in": args.burn_in if args.method == "mh" else None, "batches": []}
    hyps: list[str] = []
    if world.is_main:
        _resumed_stats(args, stats, sink.lines_done)
        # every translation of the run for the scores at the end: the committed ones first
        hyps = hypotheses_in_output(sink.committed.decode("utf-8"), args.format) if refs is not None else []
    return ChunkWork(args, translator, lines, refs, terms_for), stats, hyps


def _open_output_on_main(args: argparse.Namespace, spec: dict, total: int, stack: ExitStack, world: Any) -> Any:
    """Rank 0 opens (locks, verifies, resumes) the output; the others learn where it starts, or its error."""
    from .. import distributed

    sink, start = distributed.on_main(lambda: _open_output(args, spec, total, stack), world, lambda s: s.lines_done)
    return sink if world.is_main else _Start(start)


@dataclass(frozen=True)
class _Start:
    """What a rank other than 0 knows of the output: where the run starts."""

    lines_done: int


@dataclass
class ChunkWork:
    """What translating one chunk needs (every rank has all of it)."""

    args: argparse.Namespace
    translator: Any
    lines: list[str]
    refs: list[str] | None
    terms_for: Any

    def cost(self, first: int) -> float:
        """An MH chunk's cost: sum of its sentences' squared lengths (an epoch forwards ~T^2 rows), x length beam."""
        chunk = self.lines[first:first + self.args.batch_size]
        return float(sum(len(s.split()) ** 2 for s in chunk) * self.args.length_beam) + 1.0

    def translate(self, first: int, progress: Any = None) -> dict:
        """The chunk starting at line ``first``: its output text, hypotheses and statistics (picklable)."""
        from .. import distributed

        args, chunk = self.args, self.lines[first:first + self.args.batch_size]
        result = self.translator.translate(  # checking_peers: a peer failed, so stop within an epoch
            chunk, method=args.method, input_ids=range(first, first + len(chunk)),
            sampler_options=sampler_options(args), iterations=args.iterations, length_beam=args.length_beam,
            progress=distributed.checking_peers(progress), extra_energy=self.terms_for,
            diagnostics=_diagnostics.wanted(args))
        text = "".join(format_sentence(first + j, src, hyp, args.format, None if self.refs is None
                                       else self.refs[first + j])
                       for j, (src, hyp) in enumerate(zip(chunk, result.hypotheses)))
        return {"first": first, "end": first + len(chunk), "text": text, "hyps": [h.text for h in result.hypotheses],
                "stats": {"start": first, "end": first + len(chunk), "sentences": result.sentences,
                          "epochs": result.epochs,
                          **({"compile_seconds": result.compile_seconds} if getattr(args, "compile", False) else {}),
                          "memo_hits": result.memo_hits, **({"delayed": result.delayed} if result.delayed else {}),
                          **_convergence_stats(args, result.hypotheses)},
                "acceptance": result.acceptance, "sentences": result.sentences,
                "diagnostics": [h.details.get("diagnostics") for h in result.hypotheses]}


def _convergence_stats(args: argparse.Namespace, hypotheses: list) -> dict:
    """--stats-out's per-sentence convergence figures of a chunk (None for an empty sentence): with --diagnostics
    R-hat, ESS, MCSE per summary, draws, epochs run, converged; with --until-rhat/--min-ess epochs run and converged;
    with --tempering the ladder, swap rates and round trips.
    NaN (a diagnostic ArviZ cannot compute) is written as null."""
    out: dict = {}
    if args.method != "mh":
        return out
    if args.diagnostics:
        clean = lambda v: {k: clean(x) for k, x in v.items()} if isinstance(v, dict) else (  # noqa: E731
            None if isinstance(v, float) and v != v else v)
        out["diagnostics"] = [clean(h.details["diagnostics"]["report"]) if "diagnostics" in h.details else None
                              for h in hypotheses]
    if args.until_rhat is not None or args.min_ess is not None:
        out["epochs_run"] = [h.details.get("epochs_run") for h in hypotheses]
        out["converged"] = [h.details.get("converged") for h in hypotheses]
    if args.tempering is not None:  # per sentence: final ladder, swap rate per pair, round trips per chain
        out["tempering"] = [h.details.get("tempering") for h in hypotheses]
    return out


def _translate_chunks(work: ChunkWork, sink: Any, stats: dict, hyps: list[str], world: Any) -> None:
    """Translate lines[sink.lines_done:] chunk by chunk, committing each chunk to ``sink`` in order.

    With several ranks, chunks go out in windows of 4 per rank, shared by cost; every chunk is the
    same batch as in one process (so the same bytes), and rank 0 commits them in order once the
    window is gathered (a killed run loses at most the window being translated).
    """
    from .. import distributed

    args = work.args
    firsts = list(range(sink.lines_done, len(work.lines), args.batch_size))
    bar = _progress_bar(args, len(work.lines), sink.lines_done) if world.is_main else None
    done = {"decoded": 0, "acc_sum": 0.0, "panels": []}
    try:
        distributed.run_in_order(firsts, lambda f: work.translate(f, _on_epoch(args, bar, done)), work.cost, world,
                                 lambda res: _commit_chunk(args, sink, stats, hyps, res, bar, done))
        if world.is_main and args.plot_traces:
            _diagnostics.plot_traces(args.plot_traces, done["panels"])
    except BaseException:
        if bar is not None:
            bar.leave = False  # clear the bar: the error is the last line the user sees
        raise
    finally:
        if bar is not None:
            bar.close()


def _on_epoch(args: argparse.Namespace, bar: Any, done: dict) -> Any:
    if bar is None or args.quiet:
        return None

    def on_epoch(epoch: int, s: dict) -> None:
        acc = done["acc_sum"] / done["decoded"] if done["decoded"] else s["acceptance_rate"]
        bar.set_postfix_str(f"epoch {epoch + 1}/{args.epochs} accept {acc:.3f}", refresh=True)
    return on_epoch


def _commit_chunk(args: argparse.Namespace, sink: Any, stats: dict, hyps: list[str], res: dict, bar: Any,
                  done: dict) -> None:
    """The commit of one chunk: output bytes durable, then the statistics, then the progress record."""
    hyps += res["hyps"]
    _report_diagnostics(args, res, bar, done)
    if args.stats_out and not getattr(sink, "begun", True):
        # a fresh run's first commit: the output emptied and this run's statistics (none yet) beside it before the
        # chunk is appended, so a failure or a kill from here on never leaves the previous run's statistics beside
        # this run's output
        sink.begin()
        _write_stats(args, stats)
    if args.stats_out:
        stats["batches"].append(res["stats"])
    sink.commit(res["text"].encode("utf-8"), res["end"],
                before_record=(lambda: _write_stats(args, stats)) if args.stats_out else None)
    if res["acceptance"] is not None:
        done["decoded"] += res["sentences"]
        done["acc_sum"] += res["acceptance"] * res["sentences"]
    bar.update(res["end"] - res["first"])
    if done["decoded"]:
        bar.set_postfix_str(f"accept {done['acc_sum'] / done['decoded']:.3f}", refresh=False)


def _report_diagnostics(args: argparse.Namespace, res: dict, bar: Any, done: dict) -> None:
    """--diagnostics: one line per sentence of the chunk on stderr (above the progress bar); --plot-traces: keep
    the first sentences' energy traces for the figure drawn at the end."""
    for j, d in enumerate(res.get("diagnostics") or []):
        if d is None:
            continue
        label = f"sentence {res['first'] + j}"
        if args.diagnostics:
            from ..sampler.diagnostics import verdict_line

            r = d["report"]
            bar.write(verdict_line(label, r, r["draws"], args.chains, r["epochs_run"], r["converged"]), file=sys.stderr)
        if args.plot_traces and len(done["panels"]) < _diagnostics.MAX_PANELS:
            done["panels"].append({**d["panel"], "label": label})
