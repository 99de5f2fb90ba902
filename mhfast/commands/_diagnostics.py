"""The convergence flags both commands share: ``--diagnostics`` and ``--plot-traces FILE.png``.

(``--until-rhat``, ``--min-ess``, ``--trace-every`` and ``--start`` are sampler options: they come from the option
spec like every other.) ``--diagnostics`` prints, per input, ArviZ's R-hat / ESS / MCSE of every traced summary
(``mhfast sample``: a table and a line per input; ``mhfast translate``: a line per sentence on stderr, and the
figures in ``--stats-out``). ``--plot-traces`` draws each input's ``--energy`` trace per chain (burn-in shaded,
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

from ..files.errors import named
from ..files.lines import describe
from ..sampler.trace_plot import MAX_PANELS
from ..sampler.trace_plot import plot_traces as _plot_traces


def plot_traces(path: str, panels: Sequence[dict]) -> None:
    """The commands' plotter: :func:`mhfast.sampler.trace_plot.plot_traces`, a write error naming --plot-traces and
    the path (it was a bare "[Errno 28] No space left on device")."""
    with named(describe(path, "--plot-traces"), "write"):
        _plot_traces(path, panels)


def add_arguments(p: Any) -> None:
    g = p.add_argument_group("convergence (see also --until-rhat, --min-ess, --trace-every, --start)")
    g.add_argument("--diagnostics", action="store_true",
                   help="per input: rank-normalized split R-hat, bulk/tail ESS and MCSE of every traced summary "
                        "(energies, extra terms, random projections) over the post-burn-in sweeps, by ArviZ's "
                        "functions (needs --chains >= 2 and arviz-stats: mhfast[diagnostics])")
    g.add_argument("--plot-traces", metavar="FILE.png",
                   help=f"draw each input's --energy trace per chain (first {MAX_PANELS} inputs; burn-in shaded, "
                        "R-hat in the title) into this image (matplotlib)")


def check(args: argparse.Namespace) -> None:
    """The flags' own checks (errors name the flag): two chains, arviz-stats, matplotlib, a writable folder."""
    from ..sampler.diagnostics import check_available

    if args.plot_traces == "":  # (every later test reads the flag as true or false: "" had silently drawn nothing)
        raise ValueError("--plot-traces: '' is no file name")
    asked = [flag for flag, on in (("--diagnostics", args.diagnostics), ("--plot-traces", args.plot_traces)) if on]
    if getattr(args, "method", "mh") != "mh":
        if asked:
            raise ValueError(f"{asked[0]} needs --method mh (Mask-Predict has no chains)")
        return
    check_trace_every(args)
    if args.diagnostics:
        if args.chains < 2:
            raise ValueError(f"--diagnostics needs --chains >= 2 (R-hat compares chains), got {args.chains}")
        from ..sampler.options import post_burn_in_draws

        # none at all: every figure NaN over "draws 0" (--burn-in past --epochs: that flag's own error). Fewer than
        # ArviZ's 4 still run (NaN R-hat, said so in the table): short smoke runs of the flag
        if 0 <= args.burn_in <= args.epochs and post_burn_in_draws(args.epochs, args.burn_in, args.trace_every) < 1:
            raise ValueError(f"--diagnostics needs a traced sweep after --burn-in ({args.burn_in}) within --epochs "
                             f"({args.epochs}): there is none to diagnose")
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
        check_image_path(args.plot_traces)
        energies = ["raw", "local"] if getattr(args, "energy", None) == "both" else ["one"]
        for path in dict.fromkeys(energy_path(args.plot_traces, e, energies) for e in energies):
            check_writable(path)


def check_writable(path: str) -> None:
    """``--plot-traces`` can write ``path`` (one image of the run; ``sample --energy both`` writes two), tried
    before the run: a file created (and removed) in its folder, and an existing ``path`` opened for writing (not
    truncated). The images are written after the samples are printed, so a read-only folder had failed only then,
    after a run of any length; the check runs as root too, where the permission bits (``os.access``) say nothing."""
    import tempfile

    with named(describe(path, "--plot-traces"), "write"):
        folder = os.path.dirname(os.path.abspath(path))
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".mhfast-", suffix=".probe"):
            pass
        if os.path.exists(path):
            os.close(os.open(path, os.O_WRONLY | os.O_CLOEXEC))


def check_image_path(path: str) -> None:
    """``--plot-traces PATH`` names a file matplotlib can write, by its extension, checked before the run (it is
    written after it): not a folder (matplotlib would write ``PATH.png`` beside it), no unknown extension.

    Example:
        >>> check_image_path("t.txt")
        Traceback (most recent call last):
        ...
        ValueError: --plot-traces: 't.txt' does not end in an image format matplotlib writes (.png, .pdf, .svg, ...)
    """
    from matplotlib.backend_bases import FigureCanvasBase

    if os.path.isdir(path):
        raise ValueError(f"--plot-traces: {path!r} is a folder, not an image file")
    ext = os.path.splitext(path)[1].lstrip(".").lower()
    if ext not in FigureCanvasBase.get_supported_filetypes():
        raise ValueError(f"--plot-traces: {path!r} does not end in an image format matplotlib writes (.png, .pdf, "
                         ".svg, ...)")


#: The flags that read the traces --trace-every thins, by their argparse names (a command has some of them)
TRACE_READERS = (("diagnostics", "--diagnostics"), ("plot_traces", "--plot-traces"), ("until_rhat", "--until-rhat"),
                 ("min_ess", "--min-ess"))


def check_trace_every(args: argparse.Namespace) -> None:
    """--trace-every set while none of the command's readers of the traces is on has no effect there (the API
    returns the traces; a command shows them only so): an error naming the readers the command has.

    Example:
        >>> check_trace_every(argparse.Namespace(trace_every=3, until_rhat=None, min_ess=None))
        Traceback (most recent call last):
        ...
        ValueError: --trace-every (3) has no effect without --until-rhat or --min-ess (the traces it thins feed them)
    """
    readers = [(dest, flag) for dest, flag in TRACE_READERS if hasattr(args, dest)]
    if args.trace_every != 1 and all(getattr(args, dest) in (None, False) for dest, _ in readers):
        flags = [flag for _, flag in readers]
        raise ValueError(f"--trace-every ({args.trace_every}) has no effect without {', '.join(flags[:-1])} or "
                         f"{flags[-1]} (the traces it thins feed them)")


def wanted(args: argparse.Namespace) -> bool:
    """Whether the run must keep per-input diagnostics (for printing or plotting)."""
    return bool(args.diagnostics or args.plot_traces)


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
