"""The paper's translation experiments (Goyal et al., ICLR 2022, sections 6-8, appendices B, D, F), one command each.

Every experiment samples translations of a FIXED subset of Multi30k test_2016_flickr with a fairseq CMLM
(default: the bundled De->En model in ``mhfast/data/multi30k_de_en/``) through :func:`mhfast.sample`, and
writes a Markdown section (table, exact command, wall time, a computed check of the paper's finding) into
``<out>/experiments.md`` between ``<!-- paper:NAME:start -->`` / ``<!-- paper:NAME:end -->`` markers, plus
PNG figures into ``<out>/figures/``.

    python3 bench/paper_experiments.py fig1       # E_local / BLEU / acceptance / novel rate per epoch (Figure 1)
    python3 bench/paper_experiments.py table1     # proposal temperature 2.0 .. 0.5, degenerate Gibbs vs local MH
    python3 bench/paper_experiments.py table2     # nucleus top_p 1.0 .. 0.8
    python3 bench/paper_experiments.py table3     # block MH (raw, local) vs block Gibbs, block size -> 1 (+ Figure 4)
    python3 bench/paper_experiments.py table4     # target annealing 0.02 / 0.04 / 0.06, raw and local (+ Figure 2)
    python3 bench/paper_experiments.py table5     # warm start, deg. Gibbs T=0.8, Mask-Predict, annealed MH (appendix F)
    python3 bench/paper_experiments.py all        # all of the above, in this order

Protocol (section 5, appendix B):

* Sources: the first ``--sentences`` lines of the test source file whose RAW text has at most
  ``--max-source-tokens`` whitespace-separated words (the paper's "De-En (20)" counts tokens of its own
  preprocessing; whitespace words of the raw text are a reproducible stand-in, independent of the
  SentencePiece model). ``--max-source-tokens 0`` keeps every sentence.
* One length per source: the length head's most likely length (``length_beam=1``), fixed for all samplers.
* ``--chains`` chains (5), ``--burn-in`` epochs (7), ``--epochs`` epochs in all (33 = 7 + 26).
* BLEU at an epoch: for each chain, sacreBLEU corpus BLEU of that chain's end-of-epoch states (one
  hypothesis per source, detokenized with SentencePiece) against the raw references; then the mean over
  chains (the paper's "averaged statistics"). A table's BLEU is the mean of that over the post-burn-in
  epochs (the paper's "across interleaved epochs"). E_local, acceptance and novel rates are the
  sampler's per-epoch means over all chains (:class:`mhfast.SampleResult`), averaged the same way.
  "best-sample BLEU" is the BLEU of each source's lowest-target-energy state after burn-in
  (``SampleResult.best_tokens``): the mode-finding output of sections 8 / Table 5.

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
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import sacrebleu
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import mhfast  # noqa: E402
from mhfast.mask_predict import mask_predict  # noqa: E402

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
    return Setup(model, sources, source_text, refs, translator.detokenize, desc)


# ---------------------------------------------------------------------------------------------- running
@dataclasses.dataclass
class Run:
    """Statistics of one sampler configuration; per-epoch lists cover the post-burn-in epochs."""

    label: str
    bleu: list[float]              #: mean-over-chains corpus BLEU per post-burn-in epoch
    e_local: list[float]           #: per epoch (ALL epochs, burn-in included)
    e_raw: list[float]
    acceptance: list[float]
    novel: list[float]
    target_temperature: list[float]
    best_bleu: float               #: BLEU of best_tokens (lowest target energy after burn-in)
    seconds: float
    burn_in: int

    def post(self, xs: list[float]) -> list[float]:
        return xs[self.burn_in:]

    @property
    def avg_bleu(self) -> float:
        return mean(self.bleu)

    @property
    def avg_e_local(self) -> float:
        return mean(self.post(self.e_local))

    @property
    def avg_acceptance(self) -> float:
        return mean(self.post(self.acceptance))

    @property
    def avg_novel(self) -> float:
        return mean(self.post(self.novel))


def mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def corpus_bleu(hyps: list[str], refs: list[str]) -> float:
    return float(sacrebleu.corpus_bleu(hyps, [refs]).score)


def run_sampler(setup: Setup, args: argparse.Namespace, label: str, **kwargs: Any) -> Run:
    """One mhfast.sample call over all sources (record="epoch") and its BLEU/energy statistics."""
    start = time.perf_counter()
    res = mhfast.sample(setup.model, source=setup.sources, length_beam=1, chains=args.chains, epochs=args.epochs,
                        burn_in=args.burn_in, seed=args.seed, record="epoch", **kwargs)
    seconds = time.perf_counter() - start
    hist = res.history.cpu()  # [E - burn_in, S, C, T]
    bleu = []
    for e in range(hist.shape[0]):
        per_chain = [corpus_bleu([setup.to_text(hist[e, s, c]) for s in range(hist.shape[1])], setup.refs)
                     for c in range(hist.shape[2])]
        bleu.append(mean(per_chain))
    best = corpus_bleu([setup.to_text(t) for t in res.best_tokens.cpu()], setup.refs)
    run = Run(label, bleu, res.e_local.tolist(), res.e_raw.tolist(), res.acceptance_rate.tolist(),
              res.novel_rate.tolist(), res.target_temperature.tolist(), best, seconds, args.burn_in)
    print(f"  {label:<38} BLEU {run.avg_bleu:6.2f}  best-sample BLEU {best:6.2f}  E_local {run.avg_e_local:8.2f}  "
          f"acc {run.avg_acceptance:.3f}  novel {run.avg_novel:.3f}  ({seconds:.1f} s)", flush=True)
    return run


def warm_start_text(setup: Setup) -> list[str]:
    """The chains' common starting point (section 5): one decoder pass over ``[bos] + [mask]*L + [eos]``
    with the length head's best L, every mask replaced by its most likely non-special token."""
    model = setup.model
    ctx = model.encode(setup.sources)
    lengths = model.predict_lengths(ctx, 1)[:, 0].tolist()
    rows = torch.full((len(lengths), max(lengths) + 2), model.pad_id, dtype=torch.long)
    for r, L in enumerate(lengths):
        rows[r, :L + 2] = model.frame(int(L))
    logp = model.decoder_log_probs(rows, ctx, torch.arange(len(lengths)))
    logp[..., list(model.special_ids)] = float("-inf")
    filled = torch.where(rows == model.mask_id, logp.argmax(-1).cpu(), rows)
    return [setup.to_text(r) for r in filled]


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


def verdict(holds: bool) -> str:
    return "**holds here**" if holds else "**does not hold here**"


def write_section(md_path: Path, section: Section, command: str, seconds: float, setup: Setup,
                  args: argparse.Namespace) -> None:
    """Replace (or append) the section between this experiment's markers in ``md_path``."""
    start, end = f"<!-- paper:{section.name}:start -->", f"<!-- paper:{section.name}:end -->"
    body = [start, f"## {section.title}", "",
            f"Command: `{command}`  ", f"Wall time: {seconds:.0f} s on {os.cpu_count()} CPU core(s) "
            f"(torch threads: {torch.get_num_threads()}, load average {os.getloadavg()[0]:.1f} at the end, "
            f"{platform.processor() or platform.machine()}), {time.strftime('%Y-%m-%d %H:%M')}  ",
            f"Data: {setup.description}; {args.chains} chains, {args.epochs} epochs of which {args.burn_in} burn-in, "
            f"seed {args.seed}.", ""]
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
            "Generated by `bench/paper_experiments.py` (see its docstring for the protocol); every number below "
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


# ---------------------------------------------------------------------------------------------- experiments
def exp_fig1(setup: Setup, args: argparse.Namespace, figdir: Path) -> Section:
    runs = [run_sampler(setup, args, "MH raw", sampler="mh", energy="raw"),
            run_sampler(setup, args, "MH local", sampler="mh", energy="local"),
            run_sampler(setup, args, "degenerate Gibbs", sampler="gibbs", energy="local")]
    fig = plot_epochs(figdir / "fig1.png", runs, [
        ("-E_local", lambda r: [-x for x in r.post(r.e_local)]), ("BLEU", lambda r: r.bleu),
        ("acceptance rate", lambda r: r.post(r.acceptance)), ("novel transition rate", lambda r: r.post(r.novel))],
        "Figure 1: MH (raw, local) vs degenerate Gibbs")
    rows = [[r.label, fmt(r.avg_e_local), fmt(r.avg_acceptance, 3), fmt(r.avg_novel, 3), fmt(r.avg_bleu),
             fmt(r.bleu[0]), fmt(r.bleu[-1]), f"{r.seconds:.0f}"] for r in runs]
    mh, deg = runs[:2], runs[2]
    holds = min(r.avg_bleu for r in mh) > deg.avg_bleu and max(r.avg_e_local for r in mh) < deg.avg_e_local
    lines = table(["sampler", "avg E_local", "acceptance", "novel", "avg BLEU", "BLEU first epoch",
                   "BLEU last epoch", "seconds"], rows) + [
        "", f"Finding (paper: MH keeps low E_local and good BLEU, degenerate Gibbs degrades): MH BLEU "
        f"{fmt(mh[0].avg_bleu)} (raw) / {fmt(mh[1].avg_bleu)} (local) vs degenerate Gibbs {fmt(deg.avg_bleu)}; "
        f"avg E_local {fmt(mh[0].avg_e_local)} / {fmt(mh[1].avg_e_local)} vs {fmt(deg.avg_e_local)}; "
        f"degenerate Gibbs BLEU first -> last post-burn-in epoch {fmt(deg.bleu[0])} -> {fmt(deg.bleu[-1])} "
        f"-> {verdict(holds)} (criterion: both MH BLEU > deg BLEU and both MH E_local < deg E_local)."]
    return Section("fig1", "Figure 1: MH raw / MH local / degenerate Gibbs per epoch", lines, [fig])


def _sweep(setup: Setup, args: argparse.Namespace, figdir: Path, name: str, param: str, values: Sequence[float],
           title: str, xlabel: str) -> Section:
    mh = [run_sampler(setup, args, f"MH local {param}={v}", sampler="mh", energy="local", **{param: v}) for v in values]
    deg = [run_sampler(setup, args, f"deg. Gibbs {param}={v}", sampler="gibbs", energy="local", **{param: v})
           for v in values]
    header = [""] + [f"{v}: {s}" for v in values for s in ("local MH", "deg")]
    pairs = list(zip(mh, deg))
    rows = [["avg E_local"] + [fmt(r.avg_e_local) for p in pairs for r in p],
            ["novel rate"] + [fmt(r.avg_novel, 3) for p in pairs for r in p],
            ["acceptance"] + [fmt(r.avg_acceptance, 3) for p in pairs for r in p],
            ["BLEU"] + [fmt(r.avg_bleu) for p in pairs for r in p],
            ["seconds"] + [f"{r.seconds:.0f}" for p in pairs for r in p]]
    fig = plot_sweep(figdir / f"{name}.png", values, {
        "BLEU": {"local MH": [r.avg_bleu for r in mh], "deg. Gibbs": [r.avg_bleu for r in deg]},
        "avg E_local": {"local MH": [r.avg_e_local for r in mh], "deg. Gibbs": [r.avg_e_local for r in deg]},
        "novel rate": {"local MH": [r.avg_novel for r in mh], "deg. Gibbs": [r.avg_novel for r in deg]}},
        xlabel, title)
    mh_range = max(r.avg_bleu for r in mh) - min(r.avg_bleu for r in mh)
    deg_range = max(r.avg_bleu for r in deg) - min(r.avg_bleu for r in deg)
    hi, lo = deg[0], deg[-1]  # values are ordered from the highest-entropy proposal to the lowest
    holds = mh_range < deg_range and hi.avg_bleu < lo.avg_bleu
    lines = table(header, rows) + [
        "", f"Finding (paper: MH is robust across {xlabel}s, degenerate Gibbs degrades at high-entropy proposals): "
        f"MH BLEU range across {xlabel}s {fmt(mh_range)} vs degenerate Gibbs range {fmt(deg_range)}; degenerate Gibbs "
        f"BLEU at {xlabel} {values[0]} = {fmt(hi.avg_bleu)} vs {values[-1]} = {fmt(lo.avg_bleu)}; novel rate of deg "
        f"{fmt(hi.avg_novel, 3)} -> {fmt(lo.avg_novel, 3)}, of MH {fmt(mh[0].avg_novel, 3)} -> {fmt(mh[-1].avg_novel, 3)} "
        f"-> {verdict(holds)} (criterion: MH range < deg range and deg BLEU at {values[0]} < at {values[-1]})."]
    return Section(name, title, lines, [fig])


def exp_table1(setup: Setup, args: argparse.Namespace, figdir: Path) -> Section:
    return _sweep(setup, args, figdir, "table1", "proposal_temperature", TEMPERATURES,
                  "Table 1: proposal temperature, local-energy MH vs degenerate Gibbs", "proposal temperature")


def exp_table2(setup: Setup, args: argparse.Namespace, figdir: Path) -> Section:
    return _sweep(setup, args, figdir, "table2", "top_p", TOP_PS,
                  "Table 2: nucleus (top_p) proposals, local-energy MH vs degenerate Gibbs", "top_p")


def exp_table3(setup: Setup, args: argparse.Namespace, figdir: Path) -> Section:
    # Default block schedule (mhfast.sample): linear shrink from max(1, n // 4) to 1 at the last epoch (appendix D).
    runs = [run_sampler(setup, args, "block Gibbs (deg)", sampler="block-gibbs", energy="local"),
            run_sampler(setup, args, "block MH raw", sampler="block-mh", energy="raw"),
            run_sampler(setup, args, "block MH local", sampler="block-mh", energy="local"),
            run_sampler(setup, args, "single-site MH local (reference)", sampler="mh", energy="local")]
    rows = [[r.label, fmt(r.avg_e_local), fmt(r.avg_novel, 3), fmt(r.avg_acceptance, 3), fmt(r.avg_bleu),
             f"{r.seconds:.0f}"] for r in runs]
    fig = plot_epochs(figdir / "table3.png", runs[:3], [
        ("acceptance rate (all epochs)", lambda r: r.acceptance), ("novel rate (all epochs)", lambda r: r.novel),
        ("BLEU", lambda r: r.bleu)], "Table 3 / Figure 4: block samplers (block size shrinking to 1)", all_epochs=True)
    deg, braw, blocal, single = runs
    holds = min(braw.avg_novel, blocal.avg_novel) > single.avg_novel
    lines = table(["sampler", "avg E_local", "novel", "acceptance", "avg BLEU", "seconds"], rows) + [
        "", f"Finding (paper: block MH raises the novel-transition rate, ~0.12 -> ~0.41, and beats block Gibbs): "
        f"novel rate block MH {fmt(braw.avg_novel, 3)} (raw) / {fmt(blocal.avg_novel, 3)} (local) vs single-site "
        f"MH {fmt(single.avg_novel, 3)} -> {verdict(holds)} (criterion: both block MH novel rates > single-site). "
        f"BLEU block MH {fmt(braw.avg_bleu)} / {fmt(blocal.avg_bleu)} vs block Gibbs {fmt(deg.avg_bleu)} -> "
        f"block MH {'beats' if min(braw.avg_bleu, blocal.avg_bleu) > deg.avg_bleu else 'does not beat'} block Gibbs "
        f"here. Averages are over post-burn-in epochs; the figure shows every epoch (x <= 0: burn-in)."]
    return Section("table3", "Table 3: block MH vs block Gibbs (Figure 4: acceptance per epoch)", lines, [fig])


def exp_table4(setup: Setup, args: argparse.Namespace, figdir: Path) -> Section:
    runs: dict[tuple[str, float], Run] = {}
    for energy in ("local", "raw"):
        for a in ANNEALS:
            runs[energy, a] = run_sampler(setup, args, f"MH {energy} anneal {a}", sampler="mh", energy=energy, anneal=a)
    header = ["energy"] + [f"{a}: {m}" for a in ANNEALS for m in ("E_local last epoch", "accept", "best-sample BLEU",
                                                                   "avg BLEU")]
    rows = [[energy] + [x for a in ANNEALS for x in (fmt(runs[energy, a].e_local[-1]),
                                                     fmt(runs[energy, a].avg_acceptance, 3),
                                                     fmt(runs[energy, a].best_bleu), fmt(runs[energy, a].avg_bleu))]
            for energy in ("local", "raw")]
    fig = plot_epochs(figdir / "table4.png", list(runs.values()), [
        ("acceptance rate (all epochs)", lambda r: r.acceptance), ("E_local (all epochs)", lambda r: r.e_local),
        ("BLEU", lambda r: r.bleu)], "Table 4 / Figure 2: annealed target temperature", all_epochs=True)
    acc_drops = all(runs[e, ANNEALS[i]].avg_acceptance >= runs[e, ANNEALS[i + 1]].avg_acceptance
                    for e in ("local", "raw") for i in range(len(ANNEALS) - 1))
    raw_higher = all(runs["raw", a].avg_acceptance >= runs["local", a].avg_acceptance for a in ANNEALS)
    acc = "; ".join(f"{e}: " + " -> ".join(fmt(runs[e, a].avg_acceptance, 3) for a in ANNEALS) for e in ("local", "raw"))
    lines = table(header, rows) + [
        "", f"Annealing: target temperature max({args.min_target_temperature}, 1 - anneal * epoch). Seconds per run: "
        + ", ".join(f"{r.label} {r.seconds:.1f}" for r in runs.values()) + ".",
        "", f"Finding (paper: stronger annealing lowers the acceptance rate; raw energy keeps higher acceptance than "
        f"local): acceptance over anneal {', '.join(map(str, ANNEALS))}: {acc} -> acceptance falls with annealing "
        f"strength: {verdict(acc_drops)}; raw >= local at every strength: {verdict(raw_higher)}."]
    return Section("table4", "Table 4: annealing the target energy (Figure 2)", lines, [fig])


def exp_table5(setup: Setup, args: argparse.Namespace, figdir: Path) -> Section:
    t0 = time.perf_counter()
    warm = corpus_bleu(warm_start_text(setup), setup.refs)
    t_warm = time.perf_counter() - t0
    t0 = time.perf_counter()
    # Mask-Predict with 10 decoder passes (fairseq --iter-decode-max-iter 9, as training/evaluate_mask_predict.py)
    # and length beam 1 = the greedy length, the same length the samplers use.
    mp = mask_predict(setup.model, setup.sources, iterations=9, length_beam=1)
    mp_bleu = corpus_bleu([setup.to_text(t) for t in mp.tokens], setup.refs)
    t_mp = time.perf_counter() - t0
    common = dict(proposal_temperature=0.8, force_accept_epochs=2)
    deg = run_sampler(setup, args, "degenerate Gibbs T=0.8", sampler="gibbs", energy="local", proposal_temperature=0.8)
    local = run_sampler(setup, args, f"local-energy MH, anneal {args.anneal}", sampler="mh", energy="local",
                        anneal=args.anneal, **common)
    raw = run_sampler(setup, args, f"raw-energy MH, anneal {args.anneal}", sampler="mh", energy="raw",
                      anneal=args.anneal, **common)
    rows = [["warm start (greedy fill of all masks, 1 pass)", fmt(warm), "", f"{t_warm:.1f}"],
            ["Mask-Predict (length beam 1, 10 iterations)", fmt(mp_bleu), "", f"{t_mp:.1f}"]]
    rows += [[r.label, fmt(r.best_bleu), fmt(r.avg_bleu), f"{r.seconds:.0f}"] for r in (deg, local, raw)]
    fig = plot_bars(figdir / "table5.png", {"BLEU (best sample per source)": {
        "warm start": warm, "Mask-Predict (beam 1)": mp_bleu, "deg. Gibbs T=0.8": deg.best_bleu,
        f"local MH, anneal {args.anneal}": local.best_bleu, f"raw MH, anneal {args.anneal}": raw.best_bleu}},
        "Table 5: mode finding (appendix F)")
    best_mh = max(local.best_bleu, raw.best_bleu)
    lines = table(["method", "BLEU (best sample per source)", "avg BLEU over post-burn-in epochs", "seconds"], rows) + [
        "", f"Setup (appendix F): proposal temperature 0.8, every proposal accepted in the first 2 epochs, then MH "
        f"with target temperature max({args.min_target_temperature}, 1 - {args.anneal} * epoch). The paper scores the "
        "full test set; this runs the same fixed subset as the other tables.",
        "", f"Finding (paper: annealed MH at least matches Mask-Predict with beam 1): best annealed MH BLEU "
        f"{fmt(best_mh)} (local {fmt(local.best_bleu)}, raw {fmt(raw.best_bleu)}) vs Mask-Predict {fmt(mp_bleu)} -> "
        f"{verdict(best_mh >= mp_bleu)}; vs degenerate Gibbs T=0.8 {fmt(deg.best_bleu)} and warm start {fmt(warm)}."]
    return Section("table5", "Table 5: mode finding by annealed MH vs Mask-Predict (appendix F)", lines, [fig])


RUNNERS: dict[str, Callable[[Setup, argparse.Namespace, Path], Section]] = {
    "fig1": exp_fig1, "table1": exp_table1, "table2": exp_table2, "table3": exp_table3, "table4": exp_table4,
    "table5": exp_table5}


# ---------------------------------------------------------------------------------------------- CLI
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
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", help="where the model and the chains live (cpu, cuda)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads (0 = torch default). Default 1: the decoder batches here are small, "
                        "and on a shared CPU OpenMP threads waiting for each other made runs up to 50x slower")
    p.add_argument("--out", type=Path, default=ROOT / "docs", help="writes OUT/experiments.md and OUT/figures/*.png")
    args = p.parse_args(argv)
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
    command = "python3 bench/paper_experiments.py " + shlex.join(argv)
    md_path, figdir = args.out / "experiments.md", args.out / "figures"
    args.out.mkdir(parents=True, exist_ok=True)
    print(setup.description, flush=True)
    names = EXPERIMENTS if args.experiment == "all" else (args.experiment,)
    for name in names:
        print(f"[{name}]", flush=True)
        start = time.perf_counter()
        section = RUNNERS[name](setup, args, figdir)
        seconds = time.perf_counter() - start
        write_section(md_path, section, command, seconds, setup, args)
        print(f"[{name}] {seconds:.1f} s -> {md_path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
