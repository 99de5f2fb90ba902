"""A result's convergence diagnostics per input, its summary table, and its traces as ArviZ data.

:class:`~mhfast.sampler.result.SampleResult` calls these: ``result.diagnostics`` (one mapping per input, see
:func:`per_input`), ``result.summary()`` (:func:`summary`), ``result.arviz_dict()`` and ``result.to_arviz()``.
The draws of input ``b`` are its traced sweeps after burn-in and before it left the batch
(``result.epochs_run[b]``); the numbers are ArviZ's (:mod:`mhfast.sampler.diagnostics`).

Example:
    >>> import mhfast
    >>> from mhfast.models.tabular import TabularMLM
    >>> r = mhfast.sample(TabularMLM.random(3, 3, seed=0), 3, chains=4, epochs=60, burn_in=10, seed=0)
    >>> d = r.diagnostics[0]
    >>> sorted(d), sorted(d["rhat"])
    (['ess_bulk', 'ess_tail', 'mcse_mean', 'rhat'], ['e_local', 'e_raw', 'proj_0', 'proj_1', 'proj_2'])
    >>> print(r.summary().splitlines()[0])
    input      summary             mean        sd mcse_mean  ess_bulk  ess_tail   r_hat
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from . import diagnostics
from .tempering import counters_line


def input_draws(result: Any, b: int) -> np.ndarray:
    """float64 [C, D_b, S]: input ``b``'s post-burn-in draws (sweeps ``burn_in .. epochs_run[b] - 1``)."""
    if result.traces is None:
        raise ValueError("this result has no traces")
    epochs = result.trace_epochs
    last = int(result.epochs_run[b]) if result.epochs_run is not None else int(epochs.max()) + 1
    keep = ((epochs >= result.burn_in) & (epochs < last)).nonzero().flatten()
    return result.traces[b][:, keep].double().numpy()


def _check_chains(result: Any) -> None:
    C = result.traces.shape[1] if result.traces is not None else 0
    if C < 2:
        raise ValueError(f"diagnostics need chains >= 2 (R-hat compares chains), this result has chains={C}")


def per_input(result: Any) -> list[dict[str, dict[str, float]]]:
    """Per input ``{"rhat": {...}, "ess_bulk": {...}, "ess_tail": {...}, "mcse_mean": {...}}``, each keyed by
    summary name (``result.trace_names``)."""
    _check_chains(result)
    return [diagnostics.diagnose(input_draws(result, b), result.trace_names) for b in range(result.traces.shape[0])]


def summary(result: Any, inputs: Any = None) -> str:
    """A compact table in the spirit of ``arviz.summary``: per input and summary the mean, sd, mcse_mean, ess_bulk,
    ess_tail and r_hat of the post-burn-in draws, then one line per input (epochs run, converged; with tempering
    also its counters, since a ladder that never brings a state down to the target explains a high R-hat)."""
    _check_chains(result)
    B = result.traces.shape[0]
    chosen = range(B) if inputs is None else list(inputs)
    diags = result.diagnostics
    rows = [(str(b), diagnostics.summary_rows(input_draws(result, b), result.trace_names, diags[b])) for b in chosen]
    lines = [input_line(result, b) for b in chosen]
    if getattr(result, "ladder", None) is not None:
        lines = [f"{line}\n  {counters_line(result.ladder[b], result.swap_rate[b], result.round_trips[b])}"
                 for b, line in zip(chosen, lines)]
    return "\n".join([diagnostics.format_table(rows, result.traces.shape[1])] + lines)


def input_line(result: Any, b: int, label: str | None = None) -> str:
    """One line per input (:func:`mhfast.sampler.diagnostics.verdict_line`): worst R-hat and ESS, draws, epochs,
    converged; ``label`` default ``"input b"``."""
    epochs = int(result.epochs_run[b]) if result.epochs_run is not None else len(result.e_raw)
    return diagnostics.verdict_line(label or f"input {b}", result.diagnostics[b], input_draws(result, b).shape[1],
                                    result.traces.shape[1], epochs,
                                    None if result.converged is None else bool(result.converged[b]))


def input_report(result: Any, b: int) -> dict[str, Any]:
    """Input ``b``'s diagnostics as plain data (for files and the commands): ``rhat``, ``ess_bulk``, ``ess_tail``,
    ``mcse_mean`` (per summary), ``draws``, ``epochs_run``, ``converged`` (None without until_rhat/min_ess)."""
    return {**result.diagnostics[b], "draws": int(input_draws(result, b).shape[1]),
            "epochs_run": int(result.epochs_run[b]) if result.epochs_run is not None else len(result.e_raw),
            "converged": None if result.converged is None else bool(result.converged[b])}


def arviz_dict(result: Any) -> dict[str, Any]:
    """What :func:`to_arviz` builds from: ``{"posterior": {name: float64 [C, D, B]}, "dims": {name: ["input"]},
    "coords": {"input": [...]}}`` with the post-burn-in draws (NaN after an input left the batch; rounding ties
    merged per input and summary, as the diagnostics see them: :func:`mhfast.sampler.diagnostics.merge_rounding_ties`,
    so ArviZ's own functions on this data agree with ``result.diagnostics``, except for an input that left the batch
    early, where ArviZ sees the NaN padding and gives NaN: select its draws up to ``epochs_run`` first; and for a
    summary constant in every draw, where ``result.diagnostics`` gives NaN ESS and MCSE), plus ``"sample_stats"``:
    each chain's acceptance and novel rate per epoch of those draws (``[C, D, B]``)."""
    if result.traces is None:
        raise ValueError("this result has no traces")
    B, C, _, S = result.traces.shape
    keep = (result.trace_epochs >= result.burn_in).nonzero().flatten()
    x = result.traces[:, :, keep].double().numpy()  # [B, C, D, S]
    x = np.stack([diagnostics.merge_ties(x[b]) for b in range(B)])
    posterior = {name: np.moveaxis(x[..., s], 0, -1) for s, name in enumerate(result.trace_names)}
    stats = {}
    if result.chain_proposals is not None:
        epochs = result.trace_epochs[keep]
        prop = result.chain_proposals[epochs].double()  # [D, B, C]; 0 after an input left: NaN rates
        for key, counts in (("acceptance_rate", result.chain_accepted), ("novel_rate", result.chain_novel)):
            rate = torch.where(prop > 0, counts[epochs].double() / prop.clamp(min=1), float("nan"))
            stats[key] = rate.permute(2, 0, 1).numpy()  # [C, D, B]
    return {"posterior": posterior, "sample_stats": stats, "dims": {name: ["input"] for name in [*posterior, *stats]},
            "coords": {"input": list(range(B))}}


def to_arviz(result: Any) -> Any:
    """The traces as ArviZ data: a DataTree with arviz >= 1 (``arviz_base.from_dict``), an InferenceData with
    arviz 0.x (``arviz.from_dict``). Needs xarray and ArviZ (``pip install "mhfast[arviz]"``), imported here."""
    data = arviz_dict(result)
    try:
        from arviz_base import from_dict
    except ImportError:
        try:
            import arviz
        except ImportError as e:
            raise ImportError("to_arviz needs ArviZ and xarray: pip install \"mhfast[arviz]\" (arviz-base or "
                              f"arviz; the numbers alone: result.arviz_dict() or result.diagnostics); {e}") from None
        return arviz.from_dict(posterior=data["posterior"], sample_stats=data["sample_stats"] or None,
                               dims=data["dims"], coords=data["coords"])
    groups = {"posterior": data["posterior"], **({"sample_stats": data["sample_stats"]} if data["sample_stats"]
                                                 else {})}
    return from_dict(groups, dims=data["dims"], coords=data["coords"])


def position_rates(result: Any) -> tuple[Any, Any]:
    """Per input and position, pooled over chains (post-burn-in): ``(acceptance f32[B, T], changed f32[B, T])``,
    the share of proposals accepted and the share that changed the token (NaN where nothing was proposed)."""
    if result.position_proposals is None:
        raise ValueError("this result has no per-position counts")
    proposals = result.position_proposals.sum(dim=1).double()
    return ((result.position_accepted.sum(dim=1) / proposals).float(),
            (result.position_changed.sum(dim=1) / proposals).float())


def trace_panel(result: Any, b: int, energy: str) -> dict[str, Any]:
    """Input ``b``'s ``energy`` ("raw"/"local") trace per chain with its R-hat, as plain data for a plot
    (``mhfast ... --plot-traces``): ``energy``, ``trace`` [C][D], ``epochs``, ``burn_in``, ``rhat``, ``max_rhat``,
    ``converged``, ``epochs_run``."""
    name = f"e_{energy}"
    report = input_report(result, b)
    return {"energy": name, "trace": result.traces[b, :, :, result.trace_names.index(name)].tolist(),
            "epochs": result.trace_epochs.tolist(), "burn_in": int(result.burn_in), "rhat": report["rhat"][name],
            "max_rhat": max(report["rhat"].values(), key=lambda v: float("inf") if v != v else v),
            "converged": report["converged"], "epochs_run": report["epochs_run"]}


def per_input_reports(result: Any, energy: str) -> list[dict[str, Any]]:
    """Per input, plain data for the commands: ``report`` (:func:`input_report`), ``rows`` (the summary table's,
    :func:`mhfast.sampler.diagnostics.summary_rows`) and ``panel`` (:func:`trace_panel` of ``energy``)."""
    out = []
    for b in range(result.traces.shape[0]):
        out.append({"report": input_report(result, b), "panel": trace_panel(result, b, energy),
                    "rows": diagnostics.summary_rows(input_draws(result, b), result.trace_names,
                                                     result.diagnostics[b])})
    return out
