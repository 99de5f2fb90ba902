"""A figure of the energy traces: each input's E_raw or E_local trace per chain, R-hat in the title.

The commands draw the run's ``--energy``; ``result.plot_traces`` draws ``energy="local"`` unless told otherwise. The
weighted extra terms are not added (their own traces are in ``result.traces``; R-hat of each is in the title's max).

Used by ``result.plot_traces(path)`` and by ``--plot-traces`` of both commands. matplotlib is imported here, when a
figure is drawn (``pip install "mhfast[plots]"``), into a Figure of its own (pyplot's state is not touched).

Example:
    >>> import mhfast, tempfile, os
    >>> from mhfast.models.tabular import TabularMLM
    >>> r = mhfast.sample(TabularMLM.random(3, 3, seed=0), 3, chains=3, epochs=20, burn_in=4, seed=0)
    >>> path = os.path.join(tempfile.mkdtemp(), "traces.png")
    >>> r.plot_traces(path)
    >>> open(path, "rb").read(4)
    b'\x89PNG'
"""
from __future__ import annotations

from typing import Any, Sequence

MAX_PANELS = 12  #: inputs drawn (the first ones): more panels would be unreadable


def plot_result(result: Any, path: str, energy: str | None = None, inputs: Sequence[int] | None = None) -> None:
    """``result``'s traces of ``energy`` ("raw" or "local", default "local") for ``inputs`` (default: the first
    :data:`MAX_PANELS`) into the image ``path`` (its suffix picks the format: .png, .pdf, .svg)."""
    from .diagnostics_report import trace_panel

    chosen = list(inputs) if inputs is not None else list(range(min(result.traces.shape[0], MAX_PANELS)))
    plot_traces(path, [{**trace_panel(result, b, energy or "local"), "label": f"input {b}"} for b in chosen])


def plot_traces(path: str, panels: Sequence[dict]) -> None:
    """One panel per input (the first :data:`MAX_PANELS`): energy per chain over the traced sweeps, burn-in
    shaded, a stop (until_rhat) marked, R-hat of that energy and the largest over all summaries in the title."""
    from matplotlib.figure import Figure  # a Figure of its own: no pyplot, no change to the user's backend

    from .diagnostics import format_rhat

    panels = list(panels)[:MAX_PANELS]
    cols = min(3, max(len(panels), 1))
    rows = -(-max(len(panels), 1) // cols)
    fig = Figure(figsize=(4.2 * cols, 2.8 * rows))
    axes = fig.subplots(rows, cols, squeeze=False)
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


