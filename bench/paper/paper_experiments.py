"""The paper's translation experiments (Goyal et al., ICLR 2022, sections 6-8, appendices B, D, F), one command each.

Every experiment samples translations of a FIXED subset of Multi30k test_2016_flickr with a fairseq CMLM
(default: the bundled De->En model in ``mhfast/data/multi30k_de_en/``) through :func:`mhfast.sample`, and
writes a Markdown section (table, exact command, wall time, a computed check of the paper's finding) into
``<out>/experiments.md`` between ``<!-- paper:NAME:start -->`` / ``<!-- paper:NAME:end -->`` markers, plus
PNG figures into ``<out>/figures/``.

    python3 bench/paper/paper_experiments.py fig1       # E_local / BLEU / acceptance / novel rate per epoch (Figure 1)
    python3 bench/paper/paper_experiments.py table1     # proposal temperature 2.0 .. 0.5, degenerate Gibbs vs local MH
    python3 bench/paper/paper_experiments.py table2     # nucleus top_p 1.0 .. 0.8
    python3 bench/paper/paper_experiments.py table3     # block MH (raw, local) vs block Gibbs, block size -> 1 (+ Figure 4)
    python3 bench/paper/paper_experiments.py table4     # target annealing 0.02 / 0.04 / 0.06, raw and local (+ Figure 2)
    python3 bench/paper/paper_experiments.py table5     # warm start, deg. Gibbs T=0.8, Mask-Predict, annealed MH (appendix F)
    python3 bench/paper/paper_experiments.py all        # all of the above, in this order

Protocol (section 5, appendix B):

* Sources: the first ``--sentences`` lines of the test source file whose RAW text has at most
  ``--max-source-tokens`` whitespace-separated words (the paper's "De-En (20)" counts tokens of its own
  preprocessing; whitespace words of the raw text are a reproducible stand-in, independent of the
  SentencePiece model). ``--max-source-tokens 0`` keeps every sentence.
* One length per source: the length head's most likely length (``length_beam=1``), fixed for all samplers.
* ``--chains`` chains (5), ``--burn-in`` epochs (7), ``--epochs`` epochs in all (33 = 7 + 26).
* ``--seeds 0,1,2``: every configuration runs once per seed (default: ``--seed``, one seed).
* BLEU: for each chain (and seed), sacreBLEU corpus BLEU of that chain's end-of-epoch states after burn-in
  (one hypothesis per source, detokenized with SentencePiece) against the raw references; a table's "avg BLEU"
  is the mean over chains, seeds and post-burn-in epochs (the paper's "averaged statistics"). "best-of BLEU"
  scores each source's lowest-target-energy state after burn-in (``SampleResult.best_tokens``), shown beside
  the average, never instead of it. Acceptance and novel rates are the sampler's pooled per-epoch means.
* Statistics (``bench/paper/paper_stats.py``): every section names n (sentences x chains x post-burn-in epochs x
  seeds) and gives 95% CIs (bootstrap over sentences); each finding is a paired-bootstrap difference whose CI
  decides holds / fails / "inconclusive at n = ..."; the within-sentence Spearman correlation of -energy with
  sentence chrF over the states the runs produced measures section 6's "low energy goes with quality".

Other data: ``--model CKPT --data DICT_DIR [--spm SPM] --src SRC --ref REF``. Without ``--spm`` the
source lines are used as already tokenized text (whitespace-split, looked up in the dictionary) and
hypotheses are the space-joined target tokens (this is how tests run it on a tiny word-level CMLM).
"""
from __future__ import annotations

import argparse
import dataclasses
import fcntl
import gzip
import math
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import sacrebleu
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # paper_runs, paper_stats
import paper_stats as ps  # noqa: E402
from mhfast.mask_predict import mask_predict  # noqa: E402
from paper_runs import CACHE_COUNTS, Run, code_fingerprint, git, candidate_count, energy_quality_correlation, run_sampler, score_energies  # noqa: E402

BUNDLE = ROOT / "mhfast" / "data" / "multi30k_de_en"
SHARED_MULTI30K = ROOT.parent / "shared" / "data" / "multi30k"
EXPERIMENTS = ("fig1", "table1", "table2", "table3", "table4", "table5")
TEMPERATURES = (2.0, 1.5, 1.0, 0.8, 0.5)
TOP_PS = (1.0, 0.99, 0.95, 0.9, 0.8)
ANNEALS = (0.02, 0.04, 0.06)


# ---------------------------------------------------------------------------------------------- data
@dataclasses.dataclass
class Setup:
    """The model, the fixed source subset and how to turn target ids into text.

    Example::

        >>> setup = load_setup(parse_args(["fig1", "--sentences", "2"]))   # doctest: +SKIP
        >>> len(setup.sources), setup.refs[0][:20]                          # doctest: +SKIP
        (2, 'Two young, White mal')
    """

    model: Any                         #: a mhfast.models.fairseq_cmlm.FairseqCMLM
    sources: list[torch.Tensor]        #: [bos] + source ids + [eos] per sentence (translation_lev layout)
    source_text: list[str]
    refs: list[str]
    to_text: Callable[[torch.Tensor], str]
    description: str                   #: one line naming model and data, for the report
    ref_ids: Callable[[str], torch.Tensor] | None = None  #: raw reference -> [bos] + target ids + [eos]


def read_lines(path: Path) -> list[str]:
    """Plain or gzip text, one sentence per line."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle]


def select_sentences(src: list[str], ref: list[str], max_words: int, n: int) -> list[int]:
    """Indices of the first ``n`` sources with at most ``max_words`` whitespace words (0 = no limit).

    >>> select_sentences(["a b", "a b c", "a"], ["x", "y", "z"], 2, 5)
    [0, 2]
    """
    if len(src) != len(ref):
        raise ValueError(f"sources and references differ in length ({len(src)} vs {len(ref)} lines)")
    keep = [i for i, s in enumerate(src) if s.strip() and (max_words <= 0 or len(s.split()) <= max_words)]
    return keep[:n] if n > 0 else keep


def _default_file(lang: str) -> Path:
    bundled = BUNDLE / f"test_2016_flickr.{lang}"
    return bundled if bundled.is_file() else SHARED_MULTI30K / f"test_2016_flickr.{lang}.gz"


def load_setup(args: argparse.Namespace) -> Setup:
    """Load the CMLM (``--model``/``--data``/``--spm``, default: the bundle) and the fixed source subset."""
    from mhfast.translation import load_bundled_model, load_translator

    if args.model is None:
        args.model = BUNDLE / "model.pt"
        try:
            translator = load_bundled_model(device=args.device)
        except FileNotFoundError as e:
            raise SystemExit(f"error: {e}; train/export it (training/README.md) or pass --model CKPT --data DICT_DIR "
                             "--spm SPM") from None
    else:
        if args.data is None:
            raise SystemExit("error: --model needs --data (the folder with dict.de.txt / dict.en.txt)")
        # Without --spm: DATA/spm.model if there, else whitespace tokens as they are.
        plain = args.spm is None and not (Path(args.data) / "spm.model").is_file()
        translator = load_translator(args.model, args.data, args.spm, tokenizer="none" if plain else None,
                                     device=args.device)
    src_path, ref_path = args.src or _default_file("de"), args.ref or _default_file("en")
    src, ref = read_lines(src_path), read_lines(ref_path)
    keep = select_sentences(src, ref, args.max_source_tokens, args.sentences)
    if not keep:
        raise SystemExit(f"error: no source in {src_path} has <= {args.max_source_tokens} words")
    source_text, refs = [src[i] for i in keep], [ref[i] for i in keep]
    # [bos] + tokens + [eos], as translation_lev trained the sources.
    sources = [translator.source_ids(t) for t in source_text]
    model = translator.cmlm
    words = sum(len(s.split()) for s in source_text) / len(source_text)
    desc = (f"model `{args.model}` (vocab {model.vocab_size}), sources `{src_path}` lines {keep[0]}..{keep[-1]}: "
            f"the first {len(keep)} with <= {args.max_source_tokens or 'any'} whitespace words "
            f"(mean {words:.1f} words, {sum(len(s) for s in sources) / len(sources) - 2:.1f} source tokens)")
    return Setup(model, sources, source_text, refs, translator.detokenize, desc, translator.target_ids)


# ---------------------------------------------------------------------------------------------- running
# ---------------------------------------------------------------------------------------------- report
@dataclasses.dataclass
class Section:
    """What one experiment writes: a title, Markdown lines and figure paths."""

    name: str
    title: str
    lines: list[str]
    figures: list[Path]


def fmt(x: float, digits: int = 2) -> str:
    return "nan" if not math.isfinite(x) else f"{x:.{digits}f}"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


def code_description() -> str:
    """The commit the numbers come from, e.g. ``'commit 91da378 (mhfast/ and csrc/ as committed)'``."""
    try:
        head = git("rev-parse", "--short", "HEAD")
    except (OSError, subprocess.CalledProcessError):
        return "not a git checkout"
    state = "as committed" if code_fingerprint() else "WITH UNCOMMITTED CHANGES"
    return f"commit {head} (mhfast/ and csrc/ {state})"


def write_section(md_path: Path, section: Section, command: str, seconds: float, setup: Setup,
                  args: argparse.Namespace) -> None:
    """Replace (or append) the section between this experiment's markers in ``md_path``."""
    start, end = f"<!-- paper:{section.name}:start -->", f"<!-- paper:{section.name}:end -->"
    body = [start, f"## {section.title}", "",
            f"Command: `{command}`  ", f"Wall time: {seconds:.0f} s on {os.cpu_count()} CPU core(s) "
            f"(torch threads: {torch.get_num_threads()}, load average {os.getloadavg()[0]:.1f} at the end, "
            f"{platform.processor() or platform.machine()}), {time.strftime('%Y-%m-%d %H:%M')}  ",
            f"Data: {setup.description}; {args.chains} chains, {args.epochs} epochs of which {args.burn_in} burn-in, "
            f"seed(s) {', '.join(map(str, args.seeds))}.  ",
            f"Code: {code_description()}, torch {torch.__version__}.", ""]
    if CACHE_COUNTS["cached"]:
        body[-1:-1] = [f"{CACHE_COUNTS['cached']} of {sum(CACHE_COUNTS.values())} (configuration, seed) runs were "
                       "read from `--cache` (same code, model, sources, options and torch; their seconds are those "
                       "of their first run).", ""]
    body += section.lines
    for fig in section.figures:
        rel = os.path.relpath(fig, md_path.parent)
        body += ["", f"![{section.name}]({rel})"]
    body += [end]
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
    block = "\n".join(body)
    md_path.parent.mkdir(parents=True, exist_ok=True)
    # Experiments may run as concurrent processes (one per core): the lock makes read-modify-write atomic.
    with open(md_path.with_name(md_path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        text = md_path.read_text(encoding="utf-8") if md_path.is_file() else (
            "# The paper's experiments on the bundled Multi30k CMLM\n\n"
            "Generated by `bench/paper/paper_experiments.py` (see its docstring for the protocol); every number below "
            "was measured by the command printed with it.\n")
        text = pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + block + "\n"
        md_path.write_text(_in_experiment_order(text), encoding="utf-8")


def _in_experiment_order(text: str) -> str:
    """The sections put back in EXPERIMENTS order (fig1, table1, ...) where the first one stands: experiments
    run in parallel processes finish in any order. Text outside the sections stays where it is."""
    any_section = re.compile(r"<!-- paper:(\w+):start -->.*?<!-- paper:\1:end -->\n*", re.S)
    found = {m.group(1): m.group(0).rstrip("\n") for m in any_section.finditer(text)}
    first = any_section.search(text)
    if first is None:
        return text
    rest = any_section.sub("", text)
    order = [n for n in EXPERIMENTS if n in found] + sorted(n for n in found if n not in EXPERIMENTS)
    blocks = "\n\n".join(found[n] for n in order) + "\n"
    head, tail = rest[:first.start()], rest[first.start():]
    return head + blocks + ("\n" + tail if tail.strip() else "")


def _plt():
    import logging

    # fairseq sets the root logger to DEBUG; quiet matplotlib before its import logs its set-up
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt

    return plt


def _save(plt, fig, path: Path, title: str) -> Path:
    """Title, layout and PNG of a finished figure (then freed)."""
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_epochs(path: Path, runs: list[Run], panels: list[tuple[str, Callable[[Run], list[float]]]],
                title: str, all_epochs: bool = False) -> Path:
    """One panel per (name, getter); x = post-burn-in epoch (or every epoch with ``all_epochs``)."""
    plt = _plt()
    cols = 2 if len(panels) == 4 else len(panels)
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.2 * nrows), squeeze=False)
    for ax, (name, get) in zip(axes.flat, panels):
        for run in runs:
            ys = get(run)
            first = 1 if (not all_epochs or len(ys) != len(run.e_local)) else 1 - run.burn_in
            ax.plot(range(first, first + len(ys)), ys, label=run.label, linewidth=1.4)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("epoch after burn-in")
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=7)
    return _save(plt, fig, path, title)


def plot_sweep(path: Path, xs: Sequence[float], series: dict[str, dict[str, list[float]]], xlabel: str,
               title: str) -> Path:
    """``series[panel][label] = ys`` over ``xs``: one panel per metric."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(series), figsize=(4.2 * len(series), 3.4), squeeze=False)
    for ax, (panel, lines) in zip(axes[0], series.items()):
        for label, ys in lines.items():
            ax.plot(list(xs), ys, marker="o", label=label)
        ax.set_title(panel, fontsize=10)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    return _save(plt, fig, path, title)


def plot_bars(path: Path, bars: dict[str, dict[str, float]], title: str) -> Path:
    """``bars[panel][method] = value``: one horizontal bar chart per metric, methods in insertion order."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(bars), figsize=(5.5 * len(bars), 0.45 * max(map(len, bars.values())) + 1.4),
                             squeeze=False)
    for ax, (panel, values) in zip(axes[0], bars.items()):
        labels = list(values)[::-1]  # first method on top
        ax.barh(labels, [values[k] for k in labels], color="tab:blue")
        for y, k in enumerate(labels):
            ax.annotate(f"{values[k]:.2f}", (values[k], y), xytext=(3, 0), textcoords="offset points",
                        va="center", fontsize=8)
        ax.set_title(panel, fontsize=10)
        ax.grid(alpha=0.3, axis="x")
        ax.margins(x=0.15)
    return _save(plt, fig, path, title)


# ---------------------------------------------------------------------------------------------- findings
CI_NOTE = (f"Brackets are 95% confidence intervals: bootstrap over sentences ({ps.RESAMPLES} resamples, seed "
           f"{ps.SEED}); an A-vs-B difference uses the paired bootstrap (the same resampled sentences for A and B, "
           "two-sided p-value of no difference); a finding holds or fails only when the CI of its difference "
           "excludes 0, and is otherwise inconclusive at the number of sentences resampled. BLEU is the paper's averaged statistic: the mean over chains "
           "(seeds) and post-burn-in epochs of each chain's corpus BLEU; best-of BLEU is named as such.")


def n_text(run: Run) -> str:
    """``n`` of a run in words, e.g. ``'8 sentences x 5 chains x 26 post-burn-in epochs x 1 seed(s)'``."""
    return (f"{run.n} sentences x {run.chains} chains x {run.epochs_after_burn_in} post-burn-in epochs x "
            f"{len(run.seeds)} seed(s)")


def combine(verdicts: Sequence[str]) -> str:
    """Several sub-claims that must all hold: fails if one fails, holds if all hold, else inconclusive."""
    if "**fails**" in verdicts:
        return "**fails**"
    if all(v == "**holds**" for v in verdicts):
        return "**holds**"
    return next(v for v in verdicts if "inconclusive" in v).split(" (")[0]


def bleu_diff(a: Run, b: Run) -> ps.Comparison:
    """Paired bootstrap of the averaged BLEU of ``a`` minus that of ``b`` (same sentences)."""
    return ps.paired_bootstrap(a.bleu_stats, b.bleu_stats, "bleu")


def claim(text: str, cmp: ps.Comparison, n: str, digits: int = 2) -> tuple[str, str]:
    """``(line, verdict)`` for the claim "difference > 0" named ``text`` (``digits``: 3 for rates)."""
    v = ps.verdict(cmp.diff, n)
    return f"{text}: {cmp.text(digits)} -> {v}", v


def correlation_lines(runs: Sequence[Run]) -> list[str]:
    """The section-6 claim "low energy goes with high quality", measured within sentences over the states the
    runs produced."""
    n = runs[0].n
    out = []
    for energy in ("raw", "local"):
        est = energy_quality_correlation(runs, energy)
        v = ps.verdict(est, f"{est.n} sentences")
        weak = (" Its CI lies below 0.3: this small model's energy barely tracks quality." if est.high < 0.3 else "")
        per_run = ", ".join(f"{r.label} {energy_quality_correlation([r], energy).text(2)}" for r in runs)
        out.append(f"Energy vs quality ({energy}): within-sentence Spearman of -E_{energy} with sentence chrF over "
                   f"the distinct end-of-epoch states of the runs above pooled ({candidate_count(runs):.1f} per "
                   f"sentence, {est.n} of {n} sentences with varying candidates), mean over sentences "
                   f"{est.text(3)}; claim rho > 0 -> {v}.{weak} Within each run's own states: {per_run}.")
    return out


def has_rates(runs: Sequence[Run]) -> bool:
    """Whether every run has per-sentence acceptance and novel rates (runs cached before mhfast counted
    proposals per chain have only the sampler's pooled means)."""
    return all(r.sent_acceptance is not None for r in runs)


def rate_text(run: Run, which: str) -> str:
    """A run's post-burn-in ``which`` ("acceptance" / "novel") rate: mean over sentences with its CI, or the
    pooled mean (no CI) for a run without per-sentence counts."""
    est = run.rate_ci(which)
    return est.text(3) if est is not None else fmt(run.avg_acceptance if which == "acceptance" else run.avg_novel, 3)


def rate_diff(a: Run, b: Run, which: str) -> ps.Comparison:
    """Paired bootstrap over sentences of a's mean per-sentence ``which`` rate minus b's."""
    return ps.paired_mean(a.sent_rate(which), b.sent_rate(which))


def rates_note(runs: Sequence[Run]) -> str:
    if has_rates(runs):
        return ("Acceptance and novel rates: each sentence's accepted (resp. accepted and state-changing) proposals "
                "over its proposals after burn-in, pooled over its chains and seeds (`SampleResult.chain_accepted` "
                "/ `chain_novel` / `chain_proposals`); tables give the mean over sentences with its bootstrap CI, "
                "claims about them use the paired bootstrap over sentences like BLEU's. The figures plot the "
                "sampler's pooled per-epoch rates.")
    return ("Acceptance and novel rates are the sampler's pooled per-epoch means (no per-sentence breakdown), so "
            "they carry no CI and findings that rest on them alone are not judged; "
            + ("their spread over seeds is in the per-seed table." if len(runs[0].seeds) > 1 else
               "run several `--seeds` to see their spread."))


def seed_lines(runs: Sequence[Run]) -> list[str]:
    if len(runs[0].seeds) < 2:
        return []
    return ["", "Per seed (BLEU averaged over that seed's chains and epochs): "
            + "; ".join(f"{r.label}: {r.seed_spread()}" for r in runs) + "."]


# ---------------------------------------------------------------------------------------------- experiments
def exp_fig1(setup: Setup, args: argparse.Namespace, figdir: Path) -> Section:
    runs = [run_sampler(setup, args, "MH raw", sampler="mh", energy="raw"),
            run_sampler(setup, args, "MH local", sampler="mh", energy="local"),
            run_sampler(setup, args, "degenerate Gibbs", sampler="gibbs", energy="local")]
    fig = plot_epochs(figdir / "fig1.png", runs, [
        ("-E_local", lambda r: [-x for x in r.post(r.e_local)]), ("BLEU", lambda r: r.bleu),
        ("acceptance rate", lambda r: r.post(r.acceptance)), ("novel transition rate", lambda r: r.post(r.novel))],
        "Figure 1: MH (raw, local) vs degenerate Gibbs")
    rows = [[r.label, r.e_local_ci().text(), rate_text(r, "acceptance"), rate_text(r, "novel"), r.bleu_ci().text(),
             r.best_ci().text(), fmt(r.bleu[0]), fmt(r.bleu[-1]), f"{r.seconds:.0f}"] for r in runs]
    (raw, local), deg = runs[:2], runs[2]
    n = f"{deg.n} sentences"
    b1, v1 = claim("BLEU MH raw - degenerate Gibbs", bleu_diff(raw, deg), n)
    b2, v2 = claim("BLEU MH local - degenerate Gibbs", bleu_diff(local, deg), n)
    e1, v3 = claim("E_local degenerate Gibbs - MH raw", ps.paired_mean(deg.sent_e_local, raw.sent_e_local), n)
    e2, v4 = claim("E_local degenerate Gibbs - MH local", ps.paired_mean(deg.sent_e_local, local.sent_e_local), n)
    lines = [f"n = {n_text(deg)}. {CI_NOTE}", ""] + table(
        ["sampler", "avg E_local (95% CI)", "acceptance", "novel", "avg BLEU (95% CI)", "best-of BLEU (95% CI)",
         "BLEU first epoch", "BLEU last epoch", "seconds"], rows) + seed_lines(runs) + [
        "", "Finding (paper: MH keeps low E_local and good BLEU, degenerate Gibbs degrades), judged as four paired "
        f"differences that must all be > 0: {b1}; {b2}; {e1}; {e2} -> overall {combine([v1, v2, v3, v4])}.",
        ""] + correlation_lines(runs) + ["", rates_note(runs)]
    return Section("fig1", "Figure 1: MH raw / MH local / degenerate Gibbs per epoch", lines, [fig])


def range_draws(runs: Sequence[Run], counts) -> tuple[float, "np.ndarray"]:
    """max - min of the runs' averaged BLEU, observed and per bootstrap resample (shared ``counts``)."""
    pairs = [ps.averaged_draws(r.bleu_stats, "bleu", counts) for r in runs]
    values = [v for v, _ in pairs]
    draws = np.stack([d for _, d in pairs])
    return max(values) - min(values), draws.max(axis=0) - draws.min(axis=0)


def _sweep_claims(mh: list[Run], deg: list[Run], values: Sequence[float], xlabel: str) -> list[str]:
    n = f"{mh[0].n} sentences"
    counts = ps.resample_counts(mh[0].n)
    mh_range, mh_draws = range_draws(mh, counts)
    deg_range, deg_draws = range_draws(deg, counts)
    robust = ps.paired(deg_range - mh_range, deg_draws - mh_draws, mh[0].n)
    l1, v1 = claim(f"BLEU range across {xlabel}s, degenerate Gibbs ({fmt(deg_range)}) - MH ({fmt(mh_range)})",
                   robust, n)
    l2, v2 = claim(f"degenerate Gibbs BLEU at {xlabel} {values[-1]} - at {values[0]}", bleu_diff(deg[-1], deg[0]), n)
    return ["", f"Finding (paper: MH is robust across {xlabel}s, degenerate Gibbs degrades at high-entropy "
            f"proposals), two paired claims that must both be > 0: {l1}; {l2} -> overall {combine([v1, v2])}. "
            f"Novel rate of degenerate Gibbs {rate_text(deg[0], 'novel')} -> {rate_text(deg[-1], 'novel')}, of MH "
            f"{rate_text(mh[0], 'novel')} -> {rate_text(mh[-1], 'novel')}"
            + ("." if has_rates(mh + deg) else " (no CI, see below).")]


def _sweep(setup: Setup, args: argparse.Namespace, figdir: Path, name: str, param: str, values: Sequence[float],
           title: str, xlabel: str, mh_options: dict | None = None, note: str = "") -> Section:
    mh = [run_sampler(setup, args, f"MH local {param}={v}", sampler="mh", energy="local", **{param: v},
                      **(mh_options or {})) for v in values]
    deg = [run_sampler(setup, args, f"deg. Gibbs {param}={v}", sampler="gibbs", energy="local", **{param: v})
           for v in values]
    rows = [[f"{v}: {kind}", r.e_local_ci().text(), rate_text(r, "novel"), rate_text(r, "acceptance"),
             r.bleu_ci().text(), f"{r.seconds:.0f}"]
            for v, pair in zip(values, zip(mh, deg)) for kind, r in zip(("local MH", "deg"), pair)]
    fig = plot_sweep(figdir / f"{name}.png", values, {
        "BLEU": {"local MH": [r.bleu_ci().value for r in mh], "deg. Gibbs": [r.bleu_ci().value for r in deg]},
        "avg E_local": {"local MH": [r.e_local_ci().value for r in mh],
                        "deg. Gibbs": [r.e_local_ci().value for r in deg]},
        "novel rate": {"local MH": [r.avg_novel for r in mh], "deg. Gibbs": [r.avg_novel for r in deg]}},
        xlabel, title)
    lines = [f"n = {n_text(mh[0])} per run. {CI_NOTE}" + (f" {note}" if note else ""), ""] + table(
        [xlabel, "avg E_local (95% CI)", "novel", "acceptance", "avg BLEU (95% CI)", "seconds"], rows)
    lines += seed_lines(mh + deg) + _sweep_claims(mh, deg, values, xlabel)
    return Section(name, title, lines + [""] + correlation_lines(mh + deg) + ["", rates_note(mh)], [fig])


def exp_table1(setup: Setup, args: argparse.Namespace, figdir: Path) -> Section:
    return _sweep(setup, args, figdir, "table1", "proposal_temperature", TEMPERATURES,
                  "Table 1: proposal temperature, local-energy MH vs degenerate Gibbs", "proposal temperature")


def exp_table2(setup: Setup, args: argparse.Namespace, figdir: Path) -> Section:
    # The paper's nucleus proposal (uniform_mix=0), which can make MH reducible; mhfast's default mixes in a
    # uniform share when top_p < 1 (uniform_mix="auto"), a different sampler from the one the table reproduces.
    return _sweep(setup, args, figdir, "table2", "top_p", TOP_PS,
                  "Table 2: nucleus (top_p) proposals, local-energy MH vs degenerate Gibbs", "top_p",
                  mh_options={"uniform_mix": 0.0},
                  note="MH runs use the paper's pure nucleus proposal (`uniform_mix=0`): with top_p < 1 it can "
                       "make the chain reducible (tokens outside every nucleus are never reached), which mhfast's "
                       "default (`uniform_mix=\"auto\"`, a 0.01 uniform share) avoids; this table reproduces the "
                       "paper's sampler, not that default.")


def novel_claim(braw: Run, blocal: Run, single_raw: Run, single_local: Run, n: str) -> str:
    """Table 3's second finding: block MH's novel-transition rate above single-site MH's with the same energy
    (paired over sentences, both energies)."""
    head = "Finding (paper: block MH raises the novel-transition rate, ~0.12 -> ~0.41)"
    if not has_rates([braw, blocal, single_raw, single_local]):
        return (f"{head}: novel rate block MH {fmt(braw.avg_novel, 3)} (raw) / {fmt(blocal.avg_novel, 3)} (local) vs "
                f"single-site MH {fmt(single_raw.avg_novel, 3)} / {fmt(single_local.avg_novel, 3)}: not judged "
                "(pooled rates, no CI).")
    l1, v1 = claim("novel rate block MH raw - single-site MH raw", rate_diff(braw, single_raw, "novel"), n, 3)
    l2, v2 = claim("novel rate block MH local - single-site MH local", rate_diff(blocal, single_local, "novel"), n, 3)
    return f"{head}, paired, each against single-site MH with the same energy, both must be > 0: {l1}; {l2} -> " \
           f"overall {combine([v1, v2])}."


def exp_table3(setup: Setup, args: argparse.Namespace, figdir: Path) -> Section:
    # Default block schedule (mhfast.sample): linear shrink from max(2, n // 4) to 1 at the last epoch (appendix D).
    runs = [run_sampler(setup, args, "block Gibbs (deg)", sampler="block-gibbs", energy="local"),
            run_sampler(setup, args, "block MH raw", sampler="block-mh", energy="raw"),
            run_sampler(setup, args, "block MH local", sampler="block-mh", energy="local"),
            run_sampler(setup, args, "single-site MH local (reference)", sampler="mh", energy="local"),
            run_sampler(setup, args, "single-site MH raw (reference)", sampler="mh", energy="raw")]
    rows = [[r.label, r.e_local_ci().text(), rate_text(r, "novel"), rate_text(r, "acceptance"), r.bleu_ci().text(),
             f"{r.seconds:.0f}"] for r in runs]
    fig = plot_epochs(figdir / "table3.png", runs[:3], [
        ("acceptance rate (all epochs)", lambda r: r.acceptance), ("novel rate (all epochs)", lambda r: r.novel),
        ("BLEU", lambda r: r.bleu)], "Table 3 / Figure 4: block samplers (block size shrinking to 1)", all_epochs=True)
    deg, braw, blocal, single, single_raw = runs
    n = f"{deg.n} sentences"
    l1, v1 = claim("BLEU block MH raw - block Gibbs", bleu_diff(braw, deg), n)
    l2, v2 = claim("BLEU block MH local - block Gibbs", bleu_diff(blocal, deg), n)
    lines = [f"n = {n_text(deg)} per run. {CI_NOTE}", ""] + table(
        ["sampler", "avg E_local (95% CI)", "novel", "acceptance", "avg BLEU (95% CI)", "seconds"], rows)
    lines += seed_lines(runs) + [
        "", f"Finding (paper: block MH beats block Gibbs), paired, both must be > 0: {l1}; {l2} -> overall "
        f"{combine([v1, v2])}.",
        "", novel_claim(braw, blocal, single_raw, single, n) + " Averages are over post-burn-in epochs; the figure shows every "
        "epoch (x <= 0: burn-in).", ""] + correlation_lines(runs) + ["", rates_note(runs)]
    return Section("table3", "Table 3: block MH vs block Gibbs (Figure 4: acceptance per epoch)", lines, [fig])


def anneal_claims(runs: dict[tuple[str, float], Run], acc: str, n: str) -> str:
    """Table 4's findings: stronger annealing lowers acceptance (each step of the anneal, both energies), and raw
    energy keeps higher acceptance than local (every anneal): paired differences of per-sentence rates."""
    head = ("Finding (paper: stronger annealing lowers the acceptance rate; raw energy keeps higher acceptance than "
            f"local): acceptance over anneal {', '.join(map(str, ANNEALS))}: {acc}.")
    if not has_rates(list(runs.values())):
        return head + " Not judged: acceptance rates are pooled over sentences by the sampler, so they have no CI here."
    head = head.replace("acceptance over anneal", "acceptance (pooled) over anneal") + (
        " Mean over sentences of each sentence's acceptance: " + "; ".join(
            f"{e}: " + " -> ".join(fmt(runs[e, a].rate_ci("acceptance").value, 3) for a in ANNEALS)
            for e in ("local", "raw")) + ".")
    lower, lv = [], []
    for e in ("local", "raw"):
        for a, b in zip(ANNEALS, ANNEALS[1:]):
            line, v = claim(f"{e}: acceptance at {a} - at {b}", rate_diff(runs[e, a], runs[e, b], "acceptance"), n, 3)
            lower.append(line)
            lv.append(v)
    higher, hv = [], []
    for a in ANNEALS:
        line, v = claim(f"anneal {a}: acceptance raw - local", rate_diff(runs["raw", a], runs["local", a], "acceptance"),
                        n, 3)
        higher.append(line)
        hv.append(v)
    return (f"{head} (1) Stronger annealing lowers acceptance, paired, every step must be > 0: {'; '.join(lower)} -> "
            f"overall {combine(lv)}. (2) Raw above local, paired, at every anneal: {'; '.join(higher)} -> overall "
            f"{combine(hv)}.")


def exp_table4(setup: Setup, args: argparse.Namespace, figdir: Path) -> Section:
    runs: dict[tuple[str, float], Run] = {}
    for energy in ("local", "raw"):
        for a in ANNEALS:
            runs[energy, a] = run_sampler(setup, args, f"MH {energy} anneal {a}", sampler="mh", energy=energy, anneal=a)
    rows = [[r.label, fmt(r.e_local[-1]), rate_text(r, "acceptance"), r.bleu_ci().text(), r.best_ci().text(),
             f"{r.seconds:.0f}"] for r in runs.values()]
    fig = plot_epochs(figdir / "table4.png", list(runs.values()), [
        ("acceptance rate (all epochs)", lambda r: r.acceptance), ("E_local (all epochs)", lambda r: r.e_local),
        ("BLEU", lambda r: r.bleu)], "Table 4 / Figure 2: annealed target temperature", all_epochs=True)
    acc = "; ".join(f"{e}: " + " -> ".join(fmt(runs[e, a].avg_acceptance, 3) for a in ANNEALS)
                    for e in ("local", "raw"))
    first = next(iter(runs.values()))
    lines = [f"n = {n_text(first)} per run. {CI_NOTE}", ""] + table(
        ["run", "E_local last epoch", "acceptance", "avg BLEU (95% CI)", "best-of BLEU (95% CI)", "seconds"], rows)
    lines += seed_lines(list(runs.values())) + [
        "", f"Annealing: target temperature max({args.min_target_temperature}, 1 - anneal * epoch).",
        "", anneal_claims(runs, acc, f"{first.n} sentences"),
        ""] + correlation_lines(list(runs.values())) + ["", rates_note(list(runs.values()))]
    return Section("table4", "Table 4: annealing the target energy (Figure 2)", lines, [fig])


def _baselines(setup: Setup) -> dict[str, list[torch.Tensor]]:
    """Warm start and Mask-Predict (10 passes, length beam 1 = the samplers' length): token rows per source."""
    model = setup.model
    ctx = model.encode(setup.sources)
    lengths = model.predict_lengths(ctx, 1)[:, 0].tolist()
    warm = []
    for b, L in enumerate(lengths):
        row = model.frame(int(L))[None]
        logp = model.decoder_log_probs(row, ctx, torch.tensor([b]))
        logp[..., list(model.special_ids)] = float("-inf")
        warm.append(torch.where(row == model.mask_id, logp.argmax(-1).cpu(), row)[0])
    mp = mask_predict(model, setup.sources, iterations=9, length_beam=1)
    strip = (lambda t: t[t != model.pad_id])
    return {"warm start (greedy fill of all masks, 1 pass)": warm,
            "Mask-Predict (length beam 1, 10 iterations)": [strip(t.cpu()) for t in mp.tokens]}


def _energies(setup: Setup, rows: list[torch.Tensor]) -> tuple[list[float], list[float]]:
    ctx = setup.model.encode(setup.sources)
    pairs = [score_energies(setup.model, ctx, r[None], b) for b, r in enumerate(rows)]
    return [float(p[0][0]) for p in pairs], [float(p[1][0]) for p in pairs]


def _table5_claims(mh: list[Run], mp_stats, n: str) -> tuple[list[str], list[str]]:
    """MH vs Mask-Predict: the paper's per-chain average (the verdict), best-of beside it (named as such)."""
    avg, best, verdicts = [], [], []
    for r in mh:
        line, v = claim(f"{r.label}: avg BLEU - Mask-Predict", ps.paired_bootstrap(r.bleu_stats, mp_stats), n)
        avg.append(line)
        verdicts.append(v)
        line, _ = claim(f"{r.label}: best-of BLEU - Mask-Predict", ps.paired_bootstrap(r.best_stats, mp_stats), n)
        best.append(line)
    lines = ["", "Finding (paper: annealed MH at least matches Mask-Predict with length beam 1), judged on the "
             f"paper's per-chain average BLEU, paired: {'; '.join(avg)} -> overall {combine(verdicts)}. "
             "A CI that straddles 0 cannot tell \"matches\" from \"is worse\"; the finding holds only where MH is "
             "better.",
             "", f"Beside it, best-of selection (each source's lowest-energy state over all chains and steps after "
             f"burn-in, which the paper does not report): {'; '.join(best)}."]
    return lines, verdicts


def exp_table5(setup: Setup, args: argparse.Namespace, figdir: Path) -> Section:
    t0 = time.perf_counter()
    base = _baselines(setup)
    t_base = time.perf_counter() - t0
    base_stats = {k: ps.sentence_stats([setup.to_text(t) for t in rows], setup.refs) for k, rows in base.items()}
    common = dict(proposal_temperature=0.8, force_accept_epochs=2)
    deg = run_sampler(setup, args, "degenerate Gibbs T=0.8", sampler="gibbs", energy="local", proposal_temperature=0.8)
    mh = [run_sampler(setup, args, f"{e}-energy MH, anneal {args.anneal}", sampler="mh", energy=e, anneal=args.anneal,
                      **common) for e in ("local", "raw")]
    rows = [[k, ps.averaged_score(st).text(), "", f"{t_base:.1f} (both)"] for k, st in base_stats.items()]
    rows += [[r.label, r.bleu_ci().text(), r.best_ci().text(), f"{r.seconds:.0f}"] for r in [deg] + mh]
    mp_key = list(base)[1]
    fig = plot_bars(figdir / "table5.png", {
        "avg BLEU (mean over chains and epochs)": {
            "warm start": ps.averaged_score(base_stats[list(base)[0]]).value,
            "Mask-Predict (beam 1)": ps.averaged_score(base_stats[mp_key]).value,
            **{r.label: r.bleu_ci().value for r in [deg] + mh}},
        "best-of BLEU": {r.label: r.best_ci().value for r in [deg] + mh}}, "Table 5: mode finding (appendix F)")
    n = f"{deg.n} sentences"
    claims, _ = _table5_claims(mh, base_stats[mp_key], n)
    lines = [f"n = {n_text(deg)} per sampler (Mask-Predict and the warm start: {deg.n} sentences, "
             f"deterministic). {CI_NOTE}", ""]
    lines += table(["method", "avg BLEU (95% CI)", "best-of BLEU (95% CI)", "seconds"], rows) + seed_lines([deg] + mh)
    lines += [
        "", f"Setup (appendix F): the MH runs use proposal temperature 0.8 and accept every proposal in the first 2 "
        f"epochs after the warm start (force_accept_epochs=2), then MH with target temperature "
        f"max({args.min_target_temperature}, 1 - {args.anneal} * epoch); degenerate Gibbs uses proposal temperature "
        "0.8 (it accepts every proposal anyway). The paper scores the full test set; this scores the subset named "
        "above."] + claims + [""] + _reference_energy_lines(setup, base[mp_key], n) + [""] + correlation_lines(
        [deg] + mh)
    return Section("table5", "Table 5: mode finding by annealed MH vs Mask-Predict (appendix F)", lines, [fig])


def _reference_energy_lines(setup: Setup, mp_rows: list[torch.Tensor], n: str) -> list[str]:
    """Does the model's energy prefer the human references to Mask-Predict's outputs? (paired, per sentence)"""
    if setup.ref_ids is None:
        return []
    ref_raw, ref_local = _energies(setup, [setup.ref_ids(r) for r in setup.refs])
    mp_raw, mp_local = _energies(setup, mp_rows)
    out = []
    for name, ref, mp in (("raw", ref_raw, mp_raw), ("local", ref_local, mp_local)):
        cmp = ps.paired_mean(ref, mp)
        out.append(f"E_{name} of the references - of Mask-Predict's outputs (nats per sentence, paired over "
                   f"{len(ref)} sentences): {cmp.text()}; \"the model's energy prefers Mask-Predict's outputs to the "
                   f"references\" -> {ps.verdict(cmp.diff, f'{len(ref)} sentences')}.")
    return out


RUNNERS: dict[str, Callable[[Setup, argparse.Namespace, Path], Section]] = {
    "fig1": exp_fig1, "table1": exp_table1, "table2": exp_table2, "table3": exp_table3, "table4": exp_table4,
    "table5": exp_table5}


# ---------------------------------------------------------------------------------------------- CLI
def _seed_list(text: str) -> list[int]:
    """``"0,1,2"`` -> ``[0, 1, 2]`` (distinct non-negative ints)."""
    try:
        seeds = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise argparse.ArgumentTypeError(f"expected distinct non-negative integers, got {text!r}")
    return seeds


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("experiment", choices=EXPERIMENTS + ("all",))
    p.add_argument("--model", type=Path, help="fairseq cmlm_transformer checkpoint (default: the bundle)")
    p.add_argument("--data", type=Path, help="folder with dict.de.txt / dict.en.txt")
    p.add_argument("--spm", type=Path, help="SentencePiece model (omit for already-tokenized --src/--ref text)")
    p.add_argument("--src", type=Path, help="source sentences (default: test_2016_flickr.de)")
    p.add_argument("--ref", type=Path, help="reference translations (default: test_2016_flickr.en)")
    p.add_argument("--sentences", type=int, default=2,
                   help="first N sources that pass the length filter (0 = all); 2 keeps `all` near 30 min on 2 "
                        "CPU cores (docs/experiments.md, Cost)")
    p.add_argument("--max-source-tokens", type=int, default=20, help="max whitespace words of the raw source (0 = any)")
    p.add_argument("--chains", type=int, default=5)
    p.add_argument("--burn-in", type=int, default=7)
    p.add_argument("--epochs", type=int, default=33, help="epochs in all, burn-in included")
    p.add_argument("--anneal", type=float, default=0.02, help="annealing step of table5's MH runs")
    p.add_argument("--min-target-temperature", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0, help="the sampler's seed (one seed; see --seeds)")
    p.add_argument("--seeds", type=_seed_list, default=None,
                   help="comma-separated seeds, e.g. 0,1,2: every sampler configuration runs once per seed; chains "
                        "of all seeds are averaged together and each seed's BLEU is reported beside (overrides --seed)")
    p.add_argument("--device", default="cpu", help="where the model and the chains live (cpu, cuda)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads (0 = torch default). Default 1: the decoder batches here are small, "
                        "and on a shared CPU OpenMP threads waiting for each other made runs up to 50x slower")
    p.add_argument("--out", type=Path, default=ROOT / "docs", help="writes OUT/experiments.md and OUT/figures/*.png")
    p.add_argument("--cache", type=Path, default=ROOT / "bench" / ".paper_cache",
                   help="folder where each finished (configuration, seed) run is kept, keyed by the code (git trees "
                        "of mhfast/ and csrc/; nothing is cached while they have uncommitted changes), the model "
                        "file, the sources, the options and torch: a killed or repeated command resumes from there")
    p.add_argument("--chunk", type=int, default=0,
                   help="sample this many sources per call, each chunk kept in --cache once finished (full-scale "
                        "runs spread over sittings lose at most one chunk); 0 = all sources in one call. Sources "
                        "keep their global input ids (the same random streams); the model's batches differ, so "
                        "digits can differ from an unchunked run")
    p.add_argument("--no-cache", dest="cache", action="store_const", const=None, help="neither read nor write --cache")
    args = p.parse_args(argv)
    args.seeds = args.seeds or [args.seed]
    if args.epochs <= args.burn_in:
        p.error("--epochs must exceed --burn-in (BLEU is measured after burn-in)")
    if args.chains < 1 or args.sentences < 0:
        p.error("--chains must be >= 1 and --sentences >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    threads = torch.get_num_threads()
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        return _run(args, argv)
    finally:
        torch.set_num_threads(threads)  # main() is also called in-process (tests): leave torch as found


def _run(args: argparse.Namespace, argv: list[str]) -> int:
    setup = load_setup(args)
    command = "python3 bench/paper/paper_experiments.py " + shlex.join(argv)
    md_path, figdir = args.out / "experiments.md", args.out / "figures"
    args.out.mkdir(parents=True, exist_ok=True)
    print(setup.description, flush=True)
    names = EXPERIMENTS if args.experiment == "all" else (args.experiment,)
    for name in names:
        print(f"[{name}]", flush=True)
        start = time.perf_counter()
        CACHE_COUNTS.update(cached=0, computed=0)
        section = RUNNERS[name](setup, args, figdir)
        seconds = time.perf_counter() - start
        write_section(md_path, section, command, seconds, setup, args)
        print(f"[{name}] {seconds:.1f} s -> {md_path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
