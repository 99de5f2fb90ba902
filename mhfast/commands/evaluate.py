"""``mhfast evaluate``: sacreBLEU and chrF of translations against references (and sampler statistics).

Scores --hyp (one detokenized hypothesis per line, e.g. the output of ``mhfast translate``)
against --ref (raw references; ``--ref bundled`` = the bundled Multi30k test_2016_flickr.en) with
sacreBLEU's corpus BLEU and chrF, printing each score with its sacreBLEU signature. With --src the
source file must have the same number of lines too. Differing line counts are an error.
``--stats F`` also prints the per-epoch sampler statistics that ``mhfast translate --stats-out F``
wrote (acceptance rate, novel rate, E_raw, E_local: means over sentences, weighted by chunk size) and, when
it was written with --diagnostics or --until-rhat/--min-ess, how many sentences' chains mixed: per sentence the
worst R-hat and the lowest ESS over its traced summaries, summarised over the sentences.

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
    p.add_argument("--src", metavar="FILE", help="sources (only checked to have as many lines), or 'bundled' "
                   "(test_2016_flickr.de)")
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
        table = epoch_table(stats)  # the fields are there and numeric
        # epochs 0..n-1 and no negative sentence count: the table's burn-in marks and means assume them (epochs
        # -2..0 had divided by zero after half the table was printed; epochs 0 and 7 were called "every epoch")
        if [row["epoch"] for row in table] != list(range(len(table))) or \
                any(int(b.get("sentences", 0)) < 0 for b in stats["batches"]):
            raise ValueError
        convergence_rows(stats)
        burn_in = stats.get("burn_in")  # an int >= 0 or null (a string failed after half the table was printed)
        if burn_in is not None and (type(burn_in) is not int or burn_in < 0):
            raise ValueError
    # (1e400 sentences: inf, not an int; IndexError: a batch's per-sentence lists of different lengths)
    # (RecursionError: JSON nested thousands deep)
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError, IndexError, RecursionError):
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


def convergence_rows(stats: dict) -> list[dict]:
    """One row per sentence that has convergence figures in a --stats-out file: ``sentence`` (its line index),
    ``diagnosed`` (it has --diagnostics figures), ``max_rhat``, ``min_ess_bulk``, ``min_ess_tail`` (over its
    summaries; NaN where ArviZ could not compute one, written as null, or without figures), ``epochs_run``,
    ``converged`` (None without --until-rhat/--min-ess).

    Example:
        >>> d = {"rhat": {"e_raw": 1.2, "proj_0": None}, "ess_bulk": {"e_raw": 30.0}, "ess_tail": {"e_raw": 20.0}}
        >>> convergence_rows({"batches": [{"start": 4, "diagnostics": [None, d], "converged": [None, False]}]})
        [{'sentence': 5, 'diagnosed': True, 'max_rhat': nan, 'min_ess_bulk': 30.0, 'min_ess_tail': 20.0,
          'epochs_run': None, 'converged': False}]
    """
    from ..sampler.diagnostics import worst_item

    nan = float("nan")
    num = lambda v: nan if v is None else float(v)  # noqa: E731
    whole = lambda v: None if v is None else int(v)  # noqa: E731
    worst = lambda vs, f: worst_item(enumerate(vs), largest=f is max)[1] if vs else nan  # noqa: E731
    rows = []
    for batch in stats.get("batches", []):
        diag, conv, ran = (batch.get(k) for k in ("diagnostics", "converged", "epochs_run"))
        n = max(len(x) for x in (diag or [], conv or [], ran or [])) if (diag or conv or ran) else 0
        for j in range(n):
            d = diag[j] if diag else None
            c = conv[j] if conv else None
            if d is None and c is None:
                continue  # an empty sentence, or no figures asked for
            rhat, bulk, tail = ([num(v) for v in (d or {}).get(k, {}).values()] for k in ("rhat", "ess_bulk", "ess_tail"))
            rows.append({"sentence": int(batch.get("start", 0)) + j, "diagnosed": d is not None,
                         "max_rhat": worst(rhat, max) if d else nan,
                         "min_ess_bulk": worst(bulk, min) if d else nan, "min_ess_tail": worst(tail, min) if d else nan,
                         "epochs_run": whole(ran[j] if ran else (d or {}).get("epochs_run")),
                         "converged": None if c is None else bool(c)})
    return rows


def print_convergence(stats: dict) -> None:
    """The convergence lines of ``evaluate --stats`` (nothing when the file has no convergence figures).

    Every sentence with figures counts, also one whose R-hat is NaN (chains that never moved, or a summary that
    never changed: not judged): it is the worst, as :func:`~mhfast.sampler.diagnostics.worst_item` has it, and
    not below the threshold; the medians are over the numbers, and the line says how many are NaN.
    """
    import statistics

    from ..sampler.diagnostics import RHAT_GOOD, format_rhat, worst_item

    rows = convergence_rows(stats)
    with_diag = [r for r in rows if r["diagnosed"]]
    if with_diag:
        hi = worst_item(((r, r["max_rhat"]) for r in with_diag), largest=True)[0]
        lo = worst_item(((r, r["min_ess_bulk"]) for r in with_diag), largest=False)[0]
        good = sum(r["max_rhat"] < RHAT_GOOD for r in with_diag)

        def med(key: str) -> float:  # statistics.median of a list with NaN depends on where the NaN sits
            numbers = [r[key] for r in with_diag if r[key] == r[key]]
            return statistics.median(numbers) if numbers else float("nan")

        unjudged = sum(r["max_rhat"] != r["max_rhat"] for r in with_diag)
        nan_note = f" ({unjudged} with R-hat nan: not judged)" if unjudged else ""
        stdout_print(f"convergence of {len(with_diag)} sentences (--diagnostics; per sentence the worst of its "
                     f"traced summaries){nan_note}:")
        stdout_print(f"  max r_hat: median {format_rhat(med('max_rhat'))}, worst {format_rhat(hi['max_rhat'])} "
                     f"(sentence {hi['sentence']}); below {RHAT_GOOD}: {good} of {len(with_diag)}")
        stdout_print(f"  min ess_bulk: median {med('min_ess_bulk'):.0f}, lowest {lo['min_ess_bulk']:.0f} "
                     f"(sentence {lo['sentence']});  min ess_tail: median {med('min_ess_tail'):.0f}")
    stopped = [r for r in rows if r["converged"] is not None]
    if stopped:
        ran = [r["epochs_run"] for r in stopped if r["epochs_run"] is not None]
        mean = f", epochs run: mean {sum(ran) / len(ran):.1f}, max {max(ran)}" if ran else ""
        stdout_print(f"converged (--until-rhat / --min-ess): {sum(r['converged'] for r in stopped)} of "
                     f"{len(stopped)} sentences{mean}")


def run(args: argparse.Namespace) -> int:
    """Scores (and statistics) on stdout; every file is read and checked before anything is printed."""
    if args.hyp is None and args.stats is None:
        raise ValueError("give --hyp FILE --ref FILE (and/or --stats FILE)")
    if (args.hyp is None) != (args.ref is None):
        raise ValueError("--hyp and --ref go together")
    if args.hyp is None and (args.src is not None or args.lowercase):
        raise ValueError(f"{'--src' if args.src is not None else '--lowercase'} needs --hyp and --ref (it was "
                         "ignored with --stats alone)")
    stats = _read_stats(args.stats) if args.stats else None  # check every file before printing anything
    if args.hyp is not None:
        hyps = read_lines(args.hyp, "--hyp")
        from ..translation import bundled_test_file

        ref_path = bundled_test_file(args.ref, "--ref")
        refs = read_lines(ref_path, "--ref")
        counts = {"--hyp": len(hyps), "--ref": len(refs)}
        if args.src:
            counts["--src"] = len(read_lines(bundled_test_file(args.src, "--src"), "--src"))
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
        print_convergence(stats)
    return 0
