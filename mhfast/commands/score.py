"""``mhfast score``: pseudo-log-likelihood scores of sequences or sentences, one output line per input line.

Reads one sequence per line (records are separated by \\n only; a \\r before it is dropped; an empty
line gives a line of zero scores) from --input or stdin, and writes for each, in input order, to
stdout or --output: TSV ``PLL  E_raw  tokens  words  PPPL  PPPL_word`` (+ ``token scores`` with
--per-token, + ``word scores`` with --per-word, each space-separated log-probabilities), or with
--format jsonl one JSON object per line with the same numbers (and the token/word strings).
PLL = -E_local (natural log), PPPL = exp(-PLL/tokens); specials ([CLS], [SEP], padding) are not
scored. At the end the corpus pseudo-perplexity goes to stderr.

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
import sys
import time
from typing import Any, Iterable

NAME = "score"
HELP = "score sequences by pseudo-log-likelihood (PLL = -E_local, E_raw, pseudo-perplexity)"
DESCRIPTION = " ".join(__doc__.split("\n\n")[1].split())
METRICS = ("original", "within_word_l2r")


def add_arguments(p: argparse.ArgumentParser) -> None:
    io = p.add_argument_group("input/output")
    io.add_argument("--input", "-i", metavar="FILE", help="sequences, one per line (default: stdin)")
    io.add_argument("--source", metavar="FILE", help="--model bundled: source sentences, one per input line "
                    "(without it, input lines are SOURCE<TAB>TARGET)")
    io.add_argument("--output", "-o", metavar="FILE", help="scores, one line per input line (default: stdout)")
    io.add_argument("--format", choices=("tsv", "jsonl"), default="tsv")
    io.add_argument("--per-token", action="store_true", help="add each scored token's log-probability")
    io.add_argument("--per-word", action="store_true", help="add each word's log-probability (sum of its pieces)")
    io.add_argument("--ids", action="store_true", help="lines are space-separated token ids (models without "
                    "a tokenizer), specials included")
    io.add_argument("--quiet", "-q", action="store_true", help="no progress bar or summary on stderr")
    sc = p.add_argument_group("model and scoring")
    sc.add_argument("--model", default="antiberty", help="'antiberty', 'bundled' (De->En CMLM, target side), a "
                    "local HuggingFace model directory or a hub id")
    sc.add_argument("--metric", choices=METRICS, default="original",
                    help="original: one masked copy per token; within_word_l2r: a word's later pieces masked too")
    sc.add_argument("--batch-size", type=int, default=64, help="input lines per model batch (and per write)")
    sc.add_argument("--max-tokens-per-batch", type=int, default=None,
                    help="tokens of masked copies at once (default: from free memory)")
    sc.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cpu)")
    sc.add_argument("--backend", choices=("compiled", "reference"), default="compiled")


# ---------------------------------------------------------------------------- lines in, records out
def read_input_lines(path: str | None, option: str = "--input") -> list[str]:
    """The records of a file (or stdin): separated by \\n only, a trailing \\r dropped, strict UTF-8.

    Never ``str.splitlines`` (it would also split at \\x0b, \\x1c, U+2028 ... inside a line). A
    non-UTF-8 line is a ValueError naming the file and the line. (mhfast.files will replace this.)
    """
    if path is None:
        data, name = sys.stdin.buffer.read(), "<stdin>"
    else:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{option}: no such file: {path!r}")
        with open(path, "rb") as f:
            data, name = f.read(), path
    raw = data.split(b"\n")
    if raw and raw[-1] == b"":
        raw.pop()  # the newline that ends the last record
    lines = []
    for number, line in enumerate(raw, 1):
        try:
            lines.append((line[:-1] if line.endswith(b"\r") else line).decode("utf-8"))
        except UnicodeDecodeError as e:
            raise ValueError(f"{option}: {name} line {number} is not valid UTF-8 (byte {e.start + 1})") from None
    return lines


class RecordWriter:
    """Writes output records (one line each) to stdout or a file; :meth:`commit` makes a batch durable.

    Plain writing for now; the integrator swaps in mhfast.files (lock, fsync'ed commits, --resume).
    """

    def __init__(self, path: str | None):
        self.path = path
        self.out = sys.stdout if path is None else open(path, "w", encoding="utf-8", newline="\n")

    def commit(self, records: Iterable[str]) -> None:
        self.out.write("".join(r + "\n" for r in records))
        self.out.flush()
        if self.path is not None:
            os.fsync(self.out.fileno())

    def close(self) -> None:
        if self.out is not sys.stdout:
            self.out.close()


# ---------------------------------------------------------------------------- records
def _num(x: float) -> str:
    return "nan" if math.isnan(x) else f"{x:.6f}"


def format_record(s: Any, fmt: str, per_token: bool, per_word: bool) -> str:
    """One output line (without newline) for a :class:`mhfast.scoring.SequenceScore`."""
    if fmt == "jsonl":
        rec: dict = {"pll": round(s.pll, 6), "e_raw": round(s.e_raw, 6), "tokens": s.num_tokens,
                     "words": s.num_words, "pppl": None if math.isnan(s.pppl) else round(s.pppl, 6),
                     "pppl_word": None if math.isnan(s.pppl_word) else round(s.pppl_word, 6)}
        if per_token:
            rec["token_scores"] = [[t, round(x, 6)] for t, x in zip(s.tokens, s.token_scores)]
        if per_word:
            rec["word_scores"] = [[w, round(x, 6)] for w, x in zip(s.words, s.word_scores)]
        return json.dumps(rec, ensure_ascii=False)
    cols = [_num(s.pll), _num(s.e_raw), str(s.num_tokens), str(s.num_words), _num(s.pppl), _num(s.pppl_word)]
    if per_token:
        cols.append(" ".join(f"{x:.6f}" for x in s.token_scores))
    if per_word:
        cols.append(" ".join(f"{x:.6f}" for x in s.word_scores))
    return "\t".join(cols)


# ---------------------------------------------------------------------------- run
def _check(args: argparse.Namespace) -> None:
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be an int >= 1, got {args.batch_size}")
    if args.max_tokens_per_batch is not None and args.max_tokens_per_batch < 1:
        raise ValueError(f"--max-tokens-per-batch must be an int >= 1, got {args.max_tokens_per_batch}")
    if args.source is not None and args.model != "bundled":
        raise ValueError("--source goes with --model bundled (a conditional model)")
    if args.ids and args.model == "bundled":
        raise ValueError("--ids is for unconditional models (give the bundled model text)")
    if args.output is not None and os.path.isdir(args.output):
        raise ValueError(f"--output: {args.output!r} is a directory")
    if args.device is not None:
        from ..sampler.options import OptionError, _device

        try:
            _device(args.device)
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
        if line and "\t" not in line:
            raise ValueError(f"--input: {name} line {number} has no TAB (expected SOURCE<TAB>TARGET, or give --source)")
        src, _, tgt = line.partition("\t")
        pairs.append((src, tgt))
    return [t for _, t in pairs], [s for s, _ in pairs]


def _encode_lines(model: Any, lines: list[str], first: int, args: argparse.Namespace, name: str) -> list[Any]:
    """Each line as text (or ids) -> Encoded; an error names the input line."""
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
            item: Any = line
            if args.ids:
                try:
                    item = [int(x) for x in line.split()]
                except ValueError:
                    raise ValueError("expected space-separated integer token ids") from None
            enc = encode(model, item)
            energy_positions(lm, enc.ids[None])  # ids in the vocabulary, no mask: checked per line
            out.append(enc)
        except ValueError as e:
            raise ValueError(f"--input: {name} line {number}: {e}") from None
    return out


def run(args: argparse.Namespace) -> int:
    _check(args)
    from tqdm import tqdm

    from ..scoring import corpus_pppl, score

    name = args.input or "<stdin>"
    lines = read_input_lines(args.input)
    sources = read_input_lines(args.source, "--source") if args.source is not None else None
    if args.model == "bundled":
        lines, sources = _split_pairs(lines, sources, name)
    model = _load(args)
    writer = RecordWriter(args.output)
    bar = tqdm(total=len(lines), unit="seq", file=sys.stderr, disable=args.quiet, dynamic_ncols=True, desc="score")
    t0, results = time.perf_counter(), []
    try:
        for first in range(0, len(lines), args.batch_size):
            chunk = _encode_lines(model, lines[first:first + args.batch_size], first, args, name)
            src = None if sources is None else sources[first:first + args.batch_size]
            scores = score(model, chunk, sources=src, metric=args.metric,
                           max_tokens_per_batch=args.max_tokens_per_batch, backend=args.backend)
            writer.commit(format_record(s, args.format, args.per_token, args.per_word) for s in scores)
            results += scores
            bar.update(len(chunk))
    except BaseException:
        bar.leave = False
        raise
    finally:
        bar.close()
        writer.close()
    if not args.quiet:
        tokens, seconds = sum(s.num_tokens for s in results), time.perf_counter() - t0
        print(f"{len(results)} sequences, {tokens} tokens, pseudo-perplexity {corpus_pppl(results):.4f} per token, "
              f"{corpus_pppl(results, 'word'):.4f} per word; {seconds:.1f} s ({tokens / max(seconds, 1e-9):.0f} "
              "tokens/s)", file=sys.stderr)
    return 0
