"""The convergence flags both commands share: ``--diagnostics`` and ``--plot-traces FILE.png``.

(``--until-rhat``, ``--min-ess``, ``--trace-every`` and ``--start`` are sampler options: they come from the option
spec like every other.) ``--diagnostics`` prints, per input, ArviZ's R-hat / ESS / MCSE of every traced summary
(``mhfast sample``: a table and a line per input; ``mhfast translate``: a line per sentence on stderr, and the
figures in ``--stats-out``). ``--plot-traces`` draws each input's target-energy trace per chain (burn-in shaded,
R-hat in the title) with matplotlib.

Example:
    >>> import argparse
    >>> p = argparse.ArgumentParser(); add_arguments(p)
    >>> a = p.parse_args(["--diagnostics"]); a.diagnostics, a.plot_traces
    (True, None)
"""
from __future__ import annotations

import argparse
import os
from typing import Any, Sequence

MAX_PANELS = 12  #: inputs drawn by --plot-traces (the first ones): more panels would be unreadable


def add_arguments(p: Any) -> None:
    g = p.add_argument_group("convergence (see also --until-rhat, --min-ess, --trace-every, --start)")
    g.add_argument("--diagnostics", action="store_true",
                   help="per input: rank-normalized split R-hat, bulk/tail ESS and MCSE of every traced summary "
                        "(energies, extra terms, random projections) over the post-burn-in sweeps, by ArviZ's "
                        "functions (needs --chains >= 2 and arviz-stats: mhfast[diagnostics])")
    g.add_argument("--plot-traces", metavar="FILE.png",
                   help=f"draw each input's target-energy trace per chain (first {MAX_PANELS} inputs; burn-in shaded, "
                        "R-hat in the title) into this image (matplotlib)")


def check(args: argparse.Namespace) -> None:
    """The flags' own checks (errors name the flag): two chains, arviz-stats, matplotlib, a writable folder."""
    from ..sampler.diagnostics import check_available

    asked = [flag for flag, on in (("--diagnostics", args.diagnostics), ("--plot-traces", args.plot_traces)) if on]
    if getattr(args, "method", "mh") != "mh":
        if asked:
            raise ValueError(f"{asked[0]} needs --method mh (Mask-Predict has no chains)")
        return
    if args.diagnostics:
        if args.chains < 2:
            raise ValueError(f"--diagnostics needs --chains >= 2 (R-hat compares chains), got {args.chains}")
        check_available("--diagnostics")
    if args.plot_traces:
        if args.chains < 2:
            raise ValueError(f"--plot-traces needs --chains >= 2 (its titles give R-hat), got {args.chains}")
        check_available("--plot-traces")
        folder = os.path.dirname(os.path.abspath(args.plot_traces))
        if not os.path.isdir(folder):
            raise FileNotFoundError(f"--plot-traces: folder {folder!r} does not exist")
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise ValueError("--plot-traces needs matplotlib (pip install \"mhfast[plots]\")") from None


def wanted(args: argparse.Namespace) -> bool:
    """Whether the run must keep per-input diagnostics (for printing or plotting)."""
    return bool(args.diagnostics or args.plot_traces)


def plot_traces(path: str, panels: Sequence[dict]) -> None:
    """One panel per input (the first :data:`MAX_PANELS`): energy per chain over the traced sweeps, burn-in
    shaded, a stop (until_rhat) marked, R-hat of that energy and the largest over all summaries in the title."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    from ..sampler.diagnostics import format_rhat

    panels = list(panels)[:MAX_PANELS]
    cols = min(3, max(len(panels), 1))
    rows = -(-max(len(panels), 1) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.8 * rows), squeeze=False)
    for ax, p in zip(axes.flat, panels):
        x = [e + 1 for e in p["epochs"]]
        for c, ys in enumerate(p["trace"]):
            ax.plot(x, ys, lw=0.9, label=f"chain {c}")
        ax.axvspan(0.5, p["burn_in"] + 0.5, color="0.9", lw=0)  # burn-in epochs: not in the diagnostics
        if p["converged"]:
            ax.axvline(p["epochs_run"], color="k", ls=":", lw=0.8)
        ax.set_title(f"{p['label']}: R-hat({p['energy']}) {format_rhat(p['rhat'])}, max {format_rhat(p['max_rhat'])}",
                     fontsize=9)
        ax.set_xlabel("epoch (sweep)", fontsize=8)
        ax.set_ylabel(p["energy"].replace("e_", "E_"), fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    if panels and len(panels[0]["trace"]) <= 8:
        axes.flat[0].legend(fontsize=6, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def energy_path(path: str, energy: str, energies: Sequence[str]) -> str:
    """``path`` itself, or with several energies (``mhfast sample --energy both``) the energy before its suffix.

    Example:
        >>> energy_path("t.png", "raw", ["raw"]), energy_path("t.png", "local", ["raw", "local"])
        ('t.png', 't.local.png')
    """
    if len(energies) == 1:
        return path
    root, ext = os.path.splitext(path)
    return f"{root}.{energy}{ext}"


def print_report(entries: Sequence[dict], labels: Sequence[str], chains: int, file: Any = None) -> None:
    """The table of every input's summaries and one verdict line per input (entries of
    :func:`mhfast.sampler.diagnostics_report.per_input_reports`)."""
    from ..sampler.diagnostics import format_table, verdict_line

    print(format_table([(label, e["rows"]) for label, e in zip(labels, entries)], chains), file=file)
    for label, e in zip(labels, entries):
        r = e["report"]
        print(verdict_line(label, r, r["draws"], chains, r["epochs_run"], r["converged"]), file=file)
