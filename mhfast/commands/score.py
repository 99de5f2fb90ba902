"""``mhfast score``: pseudo-log-likelihood scores of sequences or sentences, one output line per input line.

Reads one sequence per line (records are separated by \\n only; a \\r before it is dropped; an empty line, or
one of only spaces, gives a line of zero scores, its pseudo-perplexities nan) from --input or stdin, and
writes for each, in input order, to stdout or --output: TSV ``PLL E_raw tokens words PPPL PPPL_word`` (+
``token scores`` with --per-token, + ``word scores`` with --per-word, each space-separated log-probabilities),
or with --format jsonl one JSON object per line with the same numbers (and the token/word strings). PLL =
-E_local (natural log), PPPL = exp(-PLL/tokens); specials ([CLS], [SEP], padding) are not scored. At the end
the corpus pseudo-perplexity goes to stderr.

--model: 'antiberty' (residues; every residue a word), a local HuggingFace *ForMaskedLM directory,
a HuggingFace hub id (from the local cache), or 'bundled': the bundled De->En CMLM scoring English
targets given German sources (--source FILE with one source per line, or input lines
``source<TAB>target``). --metric within_word_l2r is minicons' PLL variant (Kauf & Ivanova 2023).

Examples:
    $ python3 -m mhfast score --input seqs.txt                       # AntiBERTy, TSV to stdout
    $ python3 -m mhfast score --model bert-base-cased --input sents.txt --format jsonl --per-word
    $ python3 -m mhfast score --model bundled --source test.de --input test.en --output scores.tsv
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from contextlib import ExitStack
from typing import Any

from ..files import CommittedOutput, OutputLock, describe, file_sha256, read_records
from ..files.journal import StreamOutput, check_output_there, is_special
from ..files.lock import check_distinct

NAME = "score"
HELP = "score sequences by pseudo-log-likelihood (PLL = -E_local, E_raw, pseudo-perplexity)"
DESCRIPTION = " ".join(__doc__.split("\n\n")[1].split())
METRICS = ("original", "within_word_l2r")


def results_on_stdout(args: argparse.Namespace) -> bool:
    """The results go to stdout unless --output names a file (the CLI checks stdout before any work)."""
    return args.output is None


def add_arguments(p: argparse.ArgumentParser) -> None:
    io = p.add_argument_group("input/output")
    io.add_argument("--input", "-i", metavar="FILE", help="sequences, one per line (default: stdin)")
    io.add_argument("--source", metavar="FILE", help="--model bundled: source sentences, one per input line "
                    "(without it, input lines are SOURCE<TAB>TARGET)")
    io.add_argument("--output", "-o", metavar="FILE", help="scores, one line per input line (default: stdout); "
                    "committed per batch, one writer at a time")
    io.add_argument("--resume", action="store_true", help="continue a killed run into the same --output (its "
                    "progress record must match the model, input and options)")
    io.add_argument("--format", choices=("tsv", "jsonl"), default="tsv",
                    help="tsv: the columns above, tab-separated; jsonl: one JSON object per line")
    io.add_argument("--per-token", action="store_true", help="add each scored token's log-probability")
    io.add_argument("--per-word", action="store_true", help="add each word's log-probability (sum of its pieces)")
    io.add_argument("--ids", action="store_true", help="lines are space-separated token ids (models without "
                    "a tokenizer), specials included")
    io.add_argument("--quiet", "-q", action="store_true", help="no progress bar or summary on stderr")
    sc = p.add_argument_group("model and scoring")
    sc.add_argument("--model", default="antiberty", help="'antiberty', 'sapiens-h', 'sapiens-l', 'bundled' (De->En "
                    "CMLM, target side), a fairseq masked_lm checkpoint (dict.txt beside it), a local HuggingFace "
                    "model directory or a hub id")
    sc.add_argument("--metric", choices=METRICS, default="original",
                    help="original: one masked copy per token; within_word_l2r: a word's later pieces masked too")
    sc.add_argument("--batch-size", type=int, default=64, help="input lines per model batch (and per write)")
    sc.add_argument("--max-tokens-per-batch", type=int, default=None,
                    help="tokens of masked copies at once (default: from free memory)")
    sc.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cpu)")
    sc.add_argument("--backend", choices=("compiled", "reference"), default="compiled",
                    help="compiled ops (mhfast.ops) or their pure-PyTorch references (same scores)")


# ---------------------------------------------------------------------------- lines in, records out
def read_input_lines(path: str | None, option: str = "--input") -> list[str]:
    """The records of a file (or stdin): separated by \\n only, a trailing \\r dropped, strict UTF-8
    (:func:`mhfast.files.read_records`; a bad line is a ValueError naming the file and the line)."""
    return read_records(path, option)


def _model_files(args: argparse.Namespace) -> dict[str, str]:
    """The files that make the model (its identity for --resume: by content)."""
    if args.model == "bundled":
        from ..translation import BUNDLE_DIR, BUNDLE_FILES

        return {f: str(BUNDLE_DIR / f) for f in BUNDLE_FILES}
    folder = args.model
    if os.path.isfile(args.model):  # a fairseq checkpoint: it and the dict.txt beside it
        beside = os.path.join(os.path.dirname(os.path.abspath(args.model)), "dict.txt")
        return {os.path.basename(args.model): args.model, **({"dict.txt": beside} if os.path.isfile(beside) else {})}
    if args.model.lower() == "antiberty" and not os.path.exists(args.model):
        from ..models.antiberty import antiberty_dir

        folder = antiberty_dir()
    elif args.model.lower() in ("sapiens-h", "sapiens-l") and not os.path.exists(args.model):
        from ..models.sapiens import CHECKPOINTS, chain_name, sapiens_dir

        root = sapiens_dir()
        return {f: os.path.join(root, f) for f in ("dict.txt", CHECKPOINTS[chain_name(args.model[-1])])}
    elif not os.path.isdir(args.model):
        from ..models.loading import resolve_hub_id

        folder = resolve_hub_id(args.model, option="--model")
    files = {}
    for root, _, names in os.walk(folder):
        for n in sorted(names):
            full = os.path.join(root, n)
            files[os.path.relpath(full, folder)] = full
    return files


def output_spec(args: argparse.Namespace, lines: list[str], sources: list[str] | None) -> dict:
    """Everything that decides the output (what --resume verifies): options, model files, input."""
    import hashlib

    import mhfast

    digest = lambda rs: hashlib.sha256("\n".join(rs).encode("utf-8")).hexdigest()  # noqa: E731
    # (the chunking and the backend change a score's last bits: a resumed file must be one run's bytes)
    options = {f"--{k.replace('_', '-')}": getattr(args, k) for k in ("metric", "format", "per_token", "per_word",
                                                                       "ids", "batch_size", "device",
                                                                       "max_tokens_per_batch", "backend")}
    # a name (antiberty, bundled, a hub id) is part of the run; a local path is not: its files' content below is
    # the model, so a moved or copied model resumes (as translate's --model)
    options["--model"] = None if os.path.exists(args.model) else args.model
    return {"command": "score", "mhfast": mhfast.__version__, "options": options,
            "model": {k: file_sha256(v, "--model") for k, v in sorted(_model_files(args).items())},
            "input": {"lines": len(lines), "sha256": digest(lines)},
            "sources": None if sources is None else {"lines": len(sources), "sha256": digest(sources)}}


def memory_budget(args: argparse.Namespace) -> int | None:
    """The bytes the chunk sizes follow from when --max-tokens-per-batch is left at its default (None when it is
    given): what a resumed run's record holds, else one reading of the device's free memory now
    (:func:`mhfast.scoring.budget.free_memory`). Read once and kept for the whole run (in the record, on every rank:
    the chunking changes a score's last bits, and free memory moves), so a resumed run, and each batch of any run,
    chunks as the run began: a resume with less memory free gave other digits."""
    from ..files.journal import PROGRESS_SUFFIX, read_record
    from ..scoring.budget import free_memory

    if args.max_tokens_per_batch is not None:
        return None
    if args.resume and args.output is not None and os.path.isfile(args.output + PROGRESS_SUFFIX):
        recorded = read_record(args.output + PROGRESS_SUFFIX)["spec"].get("memory_budget")
        if isinstance(recorded, int) and not isinstance(recorded, bool) and recorded > 0:
            return recorded  # (a record without it is refused by the spec's comparison, naming it)
    return int(free_memory(args.device))


def open_output(args: argparse.Namespace, spec: dict, total: int, stack: ExitStack) -> tuple[Any, int | None]:
    """stdout or a device: a stream; a file: locked for this process, then started or verified and resumed.
    With it the run's :func:`memory_budget` (recorded in the file's spec)."""
    if args.output is None or is_special(args.output):
        if args.resume:
            raise ValueError("--resume needs --output FILE (a regular file)")
        budget = memory_budget(args)
        sink: Any = StreamOutput.to(args.output)
    else:
        folder = os.path.dirname(os.path.abspath(args.output))
        if not os.path.isdir(folder):
            raise FileNotFoundError(f"--output: folder {folder!r} does not exist")
        check_distinct({"--output": args.output}, {"--input": args.input, "--source": args.source,
                                                    "--model": [*_model_files(args).values(),
                                                                *([args.model] if os.path.exists(args.model) else [])]})
        if args.resume:
            check_output_there(args.output)  # (before its lock, which would create it)
        stack.enter_context(OutputLock(args.output, "--output"))
        budget = memory_budget(args)  # (a resumed run's from its record: read under the lock)
        spec = {**spec, "memory_budget": budget}
        if args.resume:
            sink = CommittedOutput.resume(args.output, spec, total, lambda data: data.count(b"\n"))
        else:
            sink = CommittedOutput.start(args.output, spec, total)
    stack.callback(sink.close)
    return sink, budget


# ---------------------------------------------------------------------------- records
def _num(x: float) -> str:
    return "nan" if math.isnan(x) else f"{_round(x):.6f}"


def _round(x: float) -> float:
    """``x`` to the 6 digits printed, with no negative zero: a sum of no tokens is -0.0 and a score in
    (-5e-7, 0) rounds to it; both print as 0, the way an empty line's score does (TSV and JSONL alike)."""
    return round(x, 6) + 0.0


def _json_number(x: float) -> float | None:
    """``x`` rounded, or None (JSON's null) for nan and inf: json.dumps wrote inf as ``Infinity``, which is no JSON."""
    return _round(x) if math.isfinite(x) else None


def format_record(s: Any, fmt: str, per_token: bool, per_word: bool) -> str:
    """One output line (without newline) for a :class:`mhfast.scoring.SequenceScore`."""
    if fmt == "jsonl":
        rec: dict = {"pll": _round(s.pll), "e_raw": _round(s.e_raw), "tokens": s.num_tokens,
                     "words": s.num_words, "pppl": _json_number(s.pppl), "pppl_word": _json_number(s.pppl_word)}
        if per_token:
            rec["token_scores"] = [[t, _round(x)] for t, x in zip(s.tokens, s.token_scores)]
        if per_word:
            rec["word_scores"] = [[w, _round(x)] for w, x in zip(s.words, s.word_scores)]
        return json.dumps(rec, ensure_ascii=False)
    cols = [_num(s.pll), _num(s.e_raw), str(s.num_tokens), str(s.num_words), _num(s.pppl), _num(s.pppl_word)]
    if per_token:
        cols.append(" ".join(_num(x) for x in s.token_scores))
    if per_word:
        cols.append(" ".join(_num(x) for x in s.word_scores))
    return "\t".join(cols)


# ---------------------------------------------------------------------------- run
def _check(args: argparse.Namespace) -> None:
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be an int >= 1, got {args.batch_size}")
    from ..sampler.scalars import MAX_SIZE

    if args.max_tokens_per_batch is not None and not 1 <= args.max_tokens_per_batch <= MAX_SIZE:
        raise ValueError(f"--max-tokens-per-batch must be an int in [1, {MAX_SIZE}], got {args.max_tokens_per_batch}")
    if args.source is not None and args.model != "bundled":
        raise ValueError("--source goes with --model bundled (a conditional model)")
    if args.ids and args.metric != "original":  # (ids carry no word boundaries: it scored as original, silently)
        raise ValueError(f"--metric {args.metric} has no effect with --ids (token ids carry no words)")
    if args.ids and args.model == "bundled":
        raise ValueError("--ids is for unconditional models (give the bundled model text)")
    if args.output is not None and os.path.isdir(args.output):
        raise ValueError(f"--output: {args.output!r} is a directory")
    if args.device is not None:
        from ..sampler.options import OptionError, check_device

        try:
            check_device(args.device)
        except OptionError as e:
            raise ValueError(f"--device {e}") from None


def _load(args: argparse.Namespace) -> Any:
    if args.model == "bundled":
        from ..translation import load_bundled_model

        return load_bundled_model(device=args.device)
    from ..models.loading import load_masked_lm

    kwargs = {} if args.device is None else {"device": args.device}
    return load_masked_lm(args.model, **kwargs)


def _split_pairs(lines: list[str], sources: list[str] | None, name: str) -> tuple[list[str], list[str] | None]:
    """(targets, sources) for the conditional model: --source lines, or SOURCE<TAB>TARGET input lines."""
    if sources is not None:
        if len(sources) != len(lines):
            raise ValueError(f"line counts differ: --input {len(lines)}, --source {len(sources)}")
        return lines, sources
    pairs = []
    for number, line in enumerate(lines, 1):
        if line.strip() and "\t" not in line:  # a blank line is an empty pair (zeros), as for the other models
            raise ValueError(f"{name}: line {number} has no TAB (expected SOURCE<TAB>TARGET, or give --source)")
        src, _, tgt = line.partition("\t")
        pairs.append((src, tgt))
    return [t for _, t in pairs], [s for s, _ in pairs]


def _encode_ids(model: Any, line: str) -> Any:
    """A --ids line (space-separated token ids, specials included) -> Encoded; errors name --ids (an id outside
    the vocabulary, one beyond 64 bits too)."""
    from ..scoring.text import encode

    words = line.split()
    # ASCII digits only: int() also reads "1_0" as 10 and other scripts' digits, which no id file means
    bad = next((w for w in words if not re.fullmatch(r"-?[0-9]+", w)), None)
    if bad is not None:
        raise ValueError(f"expected space-separated integer token ids (--ids), got {bad!r}")
    ids = [int(x) for x in words]
    try:
        return encode(model, ids)
    except ValueError as e:
        raise ValueError(f"--ids: {e}") from None


def _encode_lines(model: Any, lines: list[str], first: int, args: argparse.Namespace, name: str,
                  sources: list[str] | None = None) -> list[Any]:
    """Each line as text (or ids) -> Encoded, checked (ids in the vocabulary, no mask, the model's positions; a
    source too); an error names the input line."""
    from ..models.base import check_length
    from ..scoring.api import energy_positions
    from ..scoring.text import encode

    lm = getattr(model, "cmlm", model)
    out = []
    for k, line in enumerate(lines):
        number = first + k + 1
        if not line.strip():
            out.append("")
            continue
        try:
            enc = _encode_ids(model, line) if args.ids else encode(model, line)
            energy_positions(lm, enc.ids[None])  # ids in the vocabulary, no mask: checked per line
            check_length(model, int(enc.ids.numel()), "the sequence")
            if sources is not None:
                check_length(model, int(model.source_ids(sources[k]).numel()), "its source", side="source")
            out.append(enc)
        except ValueError as e:
            raise ValueError(f"{name}: line {number}: {e}") from None
    return out


def _read_inputs(args: argparse.Namespace, name: str) -> tuple[list[str], list[str] | None]:
    """The lines of --input and of --source (None without it); the bundled model's pairs split."""
    lines = read_input_lines(args.input)
    sources = read_input_lines(args.source, "--source") if args.source is not None else None
    if args.model == "bundled":
        lines, sources = _split_pairs(lines, sources, name)
    return lines, sources


def run(args: argparse.Namespace) -> int:
    from .. import distributed
    from ..scoring import corpus_pppl
    from ..scoring.budget import fixed_memory

    # The world first (torchrun: batches shared over the ranks, rank 0 writes): every error below then ends in
    # an agreement of the ranks (distributed.together), so that the job reports it once.
    world = distributed.world(device=args.device)
    name = describe(args.input, "--input")  # how messages name the input
    with distributed.together(world):  # an error every rank sees alike: rank 0 reports it
        _check(args)
    # rank 0 reads the inputs and hands them to every rank: stdin or a FIFO gives its lines once (see translate)
    _, (lines, sources) = distributed.on_main(lambda: _read_inputs(args, name), world, lambda read: read)
    with distributed.together(world):
        spec = output_spec(args, lines, sources)
    args.device = world.rank_device(args.device)  # (after the spec: the record keeps the --device given)
    with ExitStack() as stack:
        opened, (start, budget) = distributed.on_main(lambda: open_output(args, spec, len(lines), stack), world,
                                                      lambda o: (o[0].lines_done, o[1]))
        sink = opened[0] if opened is not None else None
        with distributed.together(world):
            model = _load(args)
        with fixed_memory(budget):  # rank 0's one reading, on every rank and for every batch
            results = _score_batches(args, model, lines, sources, sink, name, start, world)
    if not args.quiet and world.is_main:
        tokens, seconds = sum(s.num_tokens for s in results[0]), results[1]
        # no token scored (empty input): the corpus pseudo-perplexity is undefined, not NaN
        pppl = (f"pseudo-perplexity {corpus_pppl(results[0]):.4f} per token, {corpus_pppl(results[0], 'word'):.4f} "
                "per word" if tokens else "pseudo-perplexity undefined (no tokens)")
        # a resumed run scored the lines after the interrupted one's only: say so rather than pass them as all
        earlier = f" by this run ({start} before it, in --output)" if start else ""
        print(f"{len(results[0])} sequences scored{earlier}, {tokens} tokens, {pppl}; {seconds:.1f} s "
              f"({tokens / max(seconds, 1e-9):.0f} tokens/s)", file=sys.stderr)
    return 0


def _score_batches(args: argparse.Namespace, model: Any, lines: list[str], sources: list[str] | None, sink: Any,
                   name: str, start: int, world: Any) -> tuple[list, float]:
    """Score lines[start:] batch by batch (shared over the ranks by length), committing each batch in
    order on rank 0; (the scores of this run, seconds)."""
    from tqdm import tqdm

    from .. import distributed
    from ..scoring import score

    # every line encoded and checked before the first batch: a bad line stops the run before any work; every rank
    # encodes every line alike, so the ranks agree and rank 0 alone reports it
    with distributed.together(world):
        encoded = _encode_lines(model, lines[start:], start, args, name, None if sources is None else sources[start:])
    with distributed.together(world):  # every rank has the model and every line checked: only now is a fresh
        if world.is_main:  # --output emptied (not inside the block above, where another rank may still fail)
            sink.begin()

    def work(first: int) -> tuple[int, list]:
        chunk = encoded[first - start:first - start + args.batch_size]
        src = None if sources is None else sources[first:first + args.batch_size]
        return first + len(chunk), score(model, chunk, sources=src, metric=args.metric,
                                         max_tokens_per_batch=args.max_tokens_per_batch, backend=args.backend)

    def commit(done: tuple[int, list]) -> None:
        end, scores = done
        text = "".join(format_record(s, args.format, args.per_token, args.per_word) + "\n" for s in scores)
        sink.commit(text.encode("utf-8"), end)
        results.extend(scores)
        bar.update(len(scores))

    cost = lambda first: float(sum(len(x) ** 2 for x in lines[first:first + args.batch_size])) + 1.0  # noqa: E731
    bar = tqdm(total=len(lines), initial=start, unit="seq", file=sys.stderr, disable=args.quiet or not world.is_main,
               dynamic_ncols=True, desc="score")
    t0, results = time.perf_counter(), []
    try:
        distributed.run_in_order(range(start, len(lines), args.batch_size), work, cost, world, commit)
    except BaseException:
        bar.leave = False
        raise
    finally:
        bar.close()
    return results, time.perf_counter() - t0
