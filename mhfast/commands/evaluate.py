"""``mhfast evaluate``: sacreBLEU and chrF of translations against references (and sampler statistics).

Scores --hyp (one detokenized hypothesis per line, e.g. the output of ``mhfast translate``)
against --ref (raw references; ``--ref bundled`` = the bundled Multi30k test_2016_flickr.en) with
sacreBLEU's corpus BLEU and chrF, printing each score with its sacreBLEU signature. With --src the
source file must have the same number of lines too. Differing line counts are an error.
``--stats F`` also prints the per-epoch sampler statistics that ``mhfast translate --stats-out F``
wrote (acceptance rate, novel rate, E_raw, E_local: means over sentences, weighted by chunk size).

Examples:
    $ python3 -m mhfast evaluate --hyp test.hyp --ref bundled
    $ python3 -m mhfast evaluate --hyp out.en --ref ref.en --src src.de --stats out.stats.json
"""
from __future__ import annotations

import argparse
import json
from typing import Any

from ..files import stdout_print

NAME = "evaluate"
HELP = "sacreBLEU/chrF of translations against references; per-epoch sampler statistics"
DESCRIPTION = " ".join(__doc__.split("\n\n")[1].split())
STAT_KEYS = ("acceptance_rate", "novel_rate", "e_raw", "e_local", "target_temperature")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hyp", metavar="FILE", help="hypotheses, one per line")
    p.add_argument("--ref", metavar="FILE", help="references, one per line, or 'bundled' (test_2016_flickr.en)")
    p.add_argument("--src", metavar="FILE", help="sources (only checked to have as many lines)")
    p.add_argument("--stats", metavar="FILE", help="JSON written by 'mhfast translate --stats-out'")
    p.add_argument("--lowercase", action="store_true", help="case-insensitive BLEU")


def read_lines(path: str, option: str) -> list[str]:
    """Records of ``path`` separated by "\\n" only ("\\r\\n" tolerated; other separators such as U+2028
    stay inside their line, as in sacreBLEU); a missing file or bad UTF-8 is a one-line error naming
    the option, file and line."""
    from ..files import read_records

    return read_records(path, option)


def score(hyps: list[str], refs: list[str], lowercase: bool = False) -> list[tuple[str, Any, str]]:
    """``[(name, sacrebleu score, signature)]`` for corpus BLEU and chrF."""
    import sacrebleu

    out = []
    for metric in (sacrebleu.metrics.BLEU(lowercase=lowercase), sacrebleu.metrics.CHRF()):
        result = metric.corpus_score(hyps, [refs])
        out.append((type(metric).__name__, result, str(metric.get_signature())))
    return out


def epoch_table(stats: dict) -> list[dict]:
    """Per-epoch means over all sentences of the run (each chunk weighted by its sentence count)."""
    rows: dict[int, dict] = {}
    for batch in stats.get("batches", []):
        n = int(batch.get("sentences", 0))
        for ep in batch.get("epochs", []):
            row = rows.setdefault(int(ep["epoch"]), {"weight": 0, **{k: 0.0 for k in STAT_KEYS}})
            row["weight"] += n
            for k in STAT_KEYS:
                row[k] += float(ep[k]) * n
    table = []
    for e in sorted(rows):
        w = rows[e]["weight"]
        if w:
            table.append({"epoch": e, "sentences": w, **{k: rows[e][k] / w for k in STAT_KEYS}})
    return table


def _read_stats(path: str) -> dict:
    from ..files import check_input, describe, named

    check_input(path, "--stats")
    try:
        with named(describe(path, "--stats"), "read"), open(path, encoding="utf-8") as f:
            stats = json.load(f)
        if not isinstance(stats, dict) or not isinstance(stats.get("batches"), list):
            raise ValueError
        epoch_table(stats)  # the fields are there and numeric
    except (ValueError, KeyError, TypeError):
        raise ValueError(f"--stats: {path!r} is not a statistics file of 'mhfast translate --stats-out'") from None
    return stats


def print_stats(stats: dict) -> None:
    from ..sampler.result import summary_epochs

    table = epoch_table(stats)
    if not table:
        stdout_print(f"sampler statistics: none (method {stats.get('method')!r} records no epochs)")
        return
    burn_in = stats.get("burn_in") or 0
    stdout_print(f"sampler statistics per epoch (method {stats.get('method')}, {table[0]['sentences']} sentences, "
                 f"burn-in {burn_in}):")
    stdout_print(f"{'epoch':>5} {'accept':>8} {'novel':>8} {'E_raw':>11} {'E_local':>10} {'tau':>6}")
    for row in table:
        mark = "*" if row["epoch"] < burn_in else " "
        stdout_print(f"{row['epoch'] + 1:>4}{mark} {row['acceptance_rate']:8.4f} {row['novel_rate']:8.4f} "
                     f"{row['e_raw']:11.3f} {row['e_local']:10.3f} {row['target_temperature']:6.3f}")
    first, which = summary_epochs(burn_in, len(table))
    post = [r for r in table if r["epoch"] >= first]
    mean = lambda k: sum(r[k] for r in post) / len(post)  # noqa: E731
    label = "post-burn-in mean" if first == burn_in else f"mean over {which}"
    stdout_print(f"{label}: accept {mean('acceptance_rate'):.4f}  novel {mean('novel_rate'):.4f}  "
                 f"E_raw {mean('e_raw'):.3f}  E_local {mean('e_local'):.3f}   (* = burn-in epoch)")


def run(args: argparse.Namespace) -> int:
    """Scores (and statistics) on stdout; every file is read and checked before anything is printed."""
    if args.hyp is None and args.stats is None:
        raise ValueError("give --hyp FILE --ref FILE (and/or --stats FILE)")
    if (args.hyp is None) != (args.ref is None):
        raise ValueError("--hyp and --ref go together")
    stats = _read_stats(args.stats) if args.stats else None  # check every file before printing anything
    if args.hyp is not None:
        hyps = read_lines(args.hyp, "--hyp")
        from ..translation import bundled_test_file

        ref_path = bundled_test_file(args.ref, "--ref")
        refs = read_lines(ref_path, "--ref")
        counts = {"--hyp": len(hyps), "--ref": len(refs)}
        if args.src:
            counts["--src"] = len(read_lines(args.src, "--src"))
        if len(set(counts.values())) > 1:
            raise ValueError("line counts differ: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
        if not hyps:
            raise ValueError(f"--hyp: {args.hyp!r} is empty")
        stdout_print(f"{len(hyps)} sentences  hyp {args.hyp}  ref {ref_path}")
        for name, result, signature in score(hyps, refs, args.lowercase):
            stdout_print(f"{result}")
            stdout_print(f"  signature: {signature}")
    if stats is not None:
        print_stats(stats)
    return 0
