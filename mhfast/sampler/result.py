"""What :func:`mhfast.sample` returns, and how it is assembled from the final state and the trace.

Example:
    >>> import mhfast
    >>> from mhfast.models.tabular import TabularMLM
    >>> r = mhfast.sample(TabularMLM.random(3, 2, seed=0), 2, chains=3, epochs=2, burn_in=1)
    >>> type(r).__name__, r.tokens.shape, r.best_tokens.shape
    ('SampleResult', torch.Size([1, 3, 2]), torch.Size([1, 2]))
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from . import diagnostics_report, tempering
from .driver import Trace
from .problem import Problem
from .state import ChainCounts, ChainState


@dataclass
class SampleResult:
    """What :func:`sample` returns (B inputs, C chains, T padded length, E epochs).

    Attributes:
        tokens: Long[B, C, T] final state of every chain (``pad_id`` padded).
        lengths: Long[B] real length (non-pad tokens) of each input.
        best_tokens: Long[B, T] lowest-target-energy state seen after burn-in (over chains, and
            over steps for "mh"/"block-mh", over epoch ends for the Gibbs variants).
        best_energy: f32[B] its target energy (unscaled by the target temperature).
        energy, energy_raw, energy_local: f32[B, C] final target / raw / local energy per chain.
        e_raw, e_local: f32[E] mean energies over all chains at the end of each epoch.
        acceptance_rate: f32[E] accepted proposals / proposals (a proposal equal to the current
            state counts as accepted, as in the paper's section 6).
        novel_rate: f32[E] accepted proposals that differ from the current state / proposals.
        chain_proposals, chain_accepted, chain_novel: Long[E, B, C] each chain's proposals, accepted
            proposals and accepted proposals that changed its state, per epoch: the counts behind
            ``acceptance_rate`` and ``novel_rate`` (which pool them over chains and inputs), per chain,
            so that rates can be compared between inputs (:meth:`rates_per_input`). With ``source=``
            and a length beam, those of the kept candidate's chains (the pooled rates count all).
        target_temperature: f32[E] target temperature used in each epoch (section 8).
        model_rows: masked rows forwarded through the model (the cost unit of the benchmarks).
        model_calls: model invocations (sub-batches).
        proposals: proposals made (one per moving chain and step, summed over epochs).
        init_rows: the rows of ``model_rows`` spent before the first step (warm start, initial
            energies); ``rows_per_proposal`` = the others / ``proposals``.
        history: Long[E - burn_in, B, C, T] end-of-epoch states after burn-in (``record="epoch"``). An input that
            left the batch (``until_rhat``/``min_ess``) repeats its last state from then on, here, in
            ``terms_per_epoch`` and in the pooled ``e_raw``/``e_local``: read it up to ``epochs_run[b]``.
        terms: f32[B, C, K] final (unweighted) value of each ``extra_energy`` term per chain; ``energy``
            and ``best_energy`` include the weighted terms, ``energy_raw``/``energy_local`` do not.
        terms_per_epoch: f32[E, B, C, K] the same at the end of every epoch.
        term_names: the K terms' names (``None``, like ``terms``, without ``extra_energy``).
        candidate_lengths: Long[B, length_beam] length candidates (``source=`` only).
        chosen_candidate: Long[B] index of the kept candidate per source (``source=`` only).
        compiled_blocks: the model blocks ``compile=True`` compiled (0 without it).
        compile_seconds: the run's time spent compiling them (first calls and recompiles for new
            shapes, by torch's compile callbacks; 0.0 without ``compile``): part of the run's wall time.
        memo_hits: proposals decided from the proposal memo (option ``memo``; :mod:`mhfast.sampler.memo`): proposals
            X' that a chain of the same input had evaluated before (in an earlier step, or earlier in the same
            step), whose ``T_e - 1`` rows were therefore not forwarded (an accepted one forwards them afterwards,
            for the cache).
        delayed_tested, delayed_passed, delayed_accepted: with delayed acceptance (option ``delayed``;
            :mod:`mhfast.sampler.moves.delayed`): proposals X' != X that met its first (surrogate) test, those that
            passed it, and those the second (exact) test then accepted (0 without it; forced-accept epochs test
            nothing). Stage-1 acceptance = passed / tested, stage-2 = accepted / passed.
        delayed_rows_saved: the model rows the first test's rejections did not forward (each rejected proposal's
            ``T_e - 1`` rows but its window's).
        traces: f32[B, C, D, S] each chain's traced summaries after each of D traced sweeps (option
            ``trace_every``; :mod:`mhfast.sampler.traces`), NaN after its input left the batch (``until_rhat``).
        trace_names: the S summaries' names: ``e_raw``, ``e_local``, the extra terms', ``proj_0``, ...
        trace_epochs: Long[D] the epoch of each traced sweep (the diagnostics use those >= ``burn_in``).
        burn_in: the run's burn-in epochs.
        position_proposals, position_accepted, position_changed: Long[B, C, T] after burn-in, per chain and
            position: proposals, accepted proposals, and accepted proposals that changed the token there
            (:mod:`mhfast.sampler.site_counts`; rates pooled over chains: :meth:`position_rates`).
        epochs_run: Long[B] epochs each input ran (``epochs`` unless ``until_rhat``/``min_ess`` stopped it).
        converged: Bool[B] whether each input met ``until_rhat``/``min_ess`` (None without them;
            :mod:`mhfast.sampler.adaptive` says what it does and does not guarantee).
        ladder: f64[B, K] the temperatures of each input's ladder at the end (option ``tempering``; None without):
            rung 0 is the target, whose chains are the samples above; :mod:`mhfast.sampler.tempering`.
        swap_rate: f64[B, K-1] after burn-in, the share of accepted swaps between rungs k and k+1 (NaN: none
            proposed). With tempering ``proposals`` and ``model_rows`` count every replica's moves (the cost);
            the pooled ``acceptance_rate``/``novel_rate``, ``chain_*`` and ``position_*`` the target chains'.
        round_trips: Long[B, C] after burn-in, per chain, how many times a replica's state went from the target
            rung to the hottest and back (how often the hot replicas' exploration reaches the samples).
        replica_tokens: Long[B, K, C, T] with ``tempering`` and ``replicas=True`` (None without): the final states
            at every rung k of ``ladder`` (rung 0: ``tokens``); rung k's chains sample ``exp(-E / ladder[b, k])``,
            the auxiliary targets. An input that left the batch early (``until_rhat``): its last states.
        replica_energy: f32[B, K, C, E] likewise: the target energy (as ``energy``: unscaled by the temperature) of
            the state at every rung after each epoch's swaps (NaN after an input left the batch).
        diagnostics: (property) per input, ArviZ's R-hat, bulk/tail ESS and MCSE of the mean of every traced
            summary (:mod:`mhfast.sampler.diagnostics`); also :meth:`summary`, :meth:`to_arviz`.
    """

    tokens: torch.Tensor
    lengths: torch.Tensor
    best_tokens: torch.Tensor
    best_energy: torch.Tensor
    energy: torch.Tensor
    energy_raw: torch.Tensor
    energy_local: torch.Tensor
    e_raw: torch.Tensor
    e_local: torch.Tensor
    acceptance_rate: torch.Tensor
    novel_rate: torch.Tensor
    target_temperature: torch.Tensor
    model_rows: int
    model_calls: int
    history: torch.Tensor | None = None
    terms: torch.Tensor | None = None
    terms_per_epoch: torch.Tensor | None = None
    term_names: list[str] | None = None
    candidate_lengths: torch.Tensor | None = None
    chosen_candidate: torch.Tensor | None = None
    proposals: int = 0
    init_rows: int = 0
    chain_proposals: torch.Tensor | None = None
    chain_accepted: torch.Tensor | None = None
    chain_novel: torch.Tensor | None = None
    compiled_blocks: int = 0
    compile_seconds: float = 0.0
    memo_hits: int = 0
    delayed_tested: int = 0
    delayed_passed: int = 0
    delayed_accepted: int = 0
    delayed_rows_saved: int = 0
    traces: torch.Tensor | None = None
    trace_names: list[str] | None = None
    trace_epochs: torch.Tensor | None = None
    burn_in: int = 0
    position_proposals: torch.Tensor | None = None
    position_accepted: torch.Tensor | None = None
    position_changed: torch.Tensor | None = None
    epochs_run: torch.Tensor | None = None
    converged: torch.Tensor | None = None
    ladder: torch.Tensor | None = None
    swap_rate: torch.Tensor | None = None
    round_trips: torch.Tensor | None = None
    replica_tokens: torch.Tensor | None = None
    replica_energy: torch.Tensor | None = None
    #: (the inputs it was computed from, per_input's list): recomputed when burn_in or the traces change
    _diagnostics: tuple | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def diagnostics(self) -> list[dict[str, dict[str, float]]]:
        """Per input ``{"rhat": {...}, "ess_bulk": {...}, "ess_tail": {...}, "mcse_mean": {...}}``, each keyed by
        summary name (``trace_names``), over the post-burn-in draws by ArviZ's functions (computed once).
        A ValueError with fewer than 2 chains; an ImportError naming ``mhfast[diagnostics]`` without arviz-stats."""
        # (cached, but for these inputs: a cache of the result as it was had outlived r.burn_in = 150, the old
        # figures beside a summary() of the new draws: a review)
        used = (self.burn_in, self.traces, self.trace_epochs, self.epochs_run)
        cached = self._diagnostics
        if cached is None or len(cached[0]) != len(used) or any(a is not b for a, b in zip(cached[0], used)):
            self._diagnostics = (used, diagnostics_report.per_input(self))
        return self._diagnostics[1]

    def summary(self, inputs: Any = None) -> str:
        """A compact diagnostics table (mean, sd, mcse_mean, ess_bulk, ess_tail, r_hat per input and summary, in
        the spirit of ``arviz.summary``) and a line per input; ``inputs``: which (default all)."""
        return diagnostics_report.summary(self, inputs)

    def arviz_dict(self) -> dict:
        """The post-burn-in traces as plain arrays (what :meth:`to_arviz` is built from): ``posterior`` {name:
        [C, D, B]}, ``sample_stats``, ``dims``, ``coords``."""
        return diagnostics_report.arviz_dict(self)

    def to_arviz(self) -> Any:
        """The traces as ArviZ data (DataTree with arviz >= 1, InferenceData with 0.x); needs xarray and ArviZ."""
        return diagnostics_report.to_arviz(self)

    def plot_traces(self, path: str, energy: str = "local", inputs: Any = None) -> None:
        """Each input's ``energy`` trace per chain (burn-in shaded, R-hat in the title) into the image ``path``
        (:mod:`mhfast.sampler.trace_plot`; needs matplotlib); ``inputs``: which (default the first 12)."""
        from .trace_plot import plot_result

        plot_result(self, path, energy, inputs)

    def position_rates(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Per input and position (pooled over chains, after burn-in): ``(acceptance f32[B, T], changed f32[B, T])``."""
        return diagnostics_report.position_rates(self)

    def rates_per_input(self, first_epoch: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """Each input's acceptance and novel rate over epochs ``first_epoch..E-1``, pooled over its chains:
        ``(acceptance f32[B], novel f32[B])`` (NaN for an input without proposals, e.g. nothing free).

        Example:
            >>> import mhfast
            >>> from mhfast.models.tabular import TabularMLM
            >>> import torch
            >>> model = TabularMLM.random(3, 2, seed=0)
            >>> r = mhfast.sample(model, init=torch.full((2, 2), model.mask_id), chains=4, epochs=3, burn_in=1)
            >>> acc, novel = r.rates_per_input(first_epoch=1)
            >>> acc.shape, bool((novel <= acc).all())
            (torch.Size([2]), True)
        """
        if self.chain_proposals is None:
            raise ValueError("rates_per_input: this result has no per-chain counts")
        if not 0 <= first_epoch < self.chain_proposals.shape[0]:
            raise ValueError(f"rates_per_input: first_epoch must be in [0, {self.chain_proposals.shape[0]}), "
                             f"got {first_epoch}")
        total = lambda x: x[first_epoch:].sum(dim=(0, 2)).double()  # noqa: E731
        proposals = total(self.chain_proposals)
        return (total(self.chain_accepted) / proposals).float(), (total(self.chain_novel) / proposals).float()

    @property
    def rows_per_proposal(self) -> float:
        """Masked rows the model forwarded per proposal, after the warm start and initial energies."""
        return (self.model_rows - self.init_rows) / max(self.proposals, 1)


def target_label(energy: str, with_terms: bool) -> str:
    """The name printed for a target energy (``best_energy``, ``energy``) of the ``energy`` option: ``E_raw`` /
    ``E_local``, or ``E_raw+terms`` when extra energy terms are on, since their weighted sum is part of it.

    Example:
        >>> target_label("local", False), target_label("raw", True)
        ('E_local', 'E_raw+terms')
    """
    return f"E_{energy}+terms" if with_terms else f"E_{energy}"


def summary_epochs(burn_in: int, epochs: int) -> tuple[int, str]:
    """``(first epoch, name)`` of the epochs a run's rates and means are taken over: the ones after burn-in, or
    all of them when burn-in takes every epoch (there is none after it); the name says which.

    Example:
        >>> summary_epochs(2, 5), summary_epochs(5, 5)
        ((2, 'post-burn-in epochs'), (0, 'all epochs, as burn-in takes every epoch'))
    """
    return (burn_in, "post-burn-in epochs") if burn_in < epochs else (0, "all epochs, as burn-in takes every epoch")


def _choose_candidates(problem: Problem, result: dict, select: str) -> torch.Tensor:
    """Per source, the length candidate whose best sample has the lowest energy (per token); keeps it."""
    k = problem.inputs_per_source
    S = result["tokens"].shape[0] // k
    num_energy = problem.energy_mask.sum(dim=1).clamp(min=1).float()
    score = result["best_energy"] / num_energy if select == "energy_per_token" else result["best_energy"]
    chosen = score.view(S, k).argmin(dim=1)
    keep = torch.arange(S, device=problem.device) * k + chosen
    for key in ("tokens", "lengths", "best_tokens", "best_energy", "energy", "energy_raw", "energy_local", "terms"):
        if result[key] is not None:
            result[key] = result[key][keep]
    for key in PER_INPUT:  # the monitor's (adaptive.RunMonitor.result_fields): inputs first
        if result.get(key) is not None:
            result[key] = result[key][keep.to(result[key].device)]
    for key in ("history", "terms_per_epoch", *ChainCounts.FIELDS):
        if result[key] is not None:
            result[key] = result[key][:, keep.to(result[key].device)]
    return chosen


#: the per-input fields of :meth:`mhfast.sampler.adaptive.RunMonitor.result_fields` and of the tempering kernel's
#: (:meth:`mhfast.sampler.tempering.Tempered.result_fields`): a kept candidate's are kept
PER_INPUT = ("traces", "position_proposals", "position_accepted", "position_changed", "epochs_run", "converged",
             *tempering.per_input_fields())


def assemble(problem: Problem, state: ChainState, trace: Trace, cfg, model_rows: int, model_calls: int,
             init_rows: int = 0, monitor: Any = None, kernel: Any = None) -> SampleResult:
    """The :class:`SampleResult` of a finished run (best chain per input; best candidate per source)."""
    B, T = problem.rows.shape
    C = cfg.chains
    best_e = state.best_energy.view(B, C)
    best_chain = best_e.argmin(dim=1)
    ar = torch.arange(B, device=problem.device)
    history = None
    if cfg.record == "epoch":
        history = (torch.stack([h.view(B, C, T) for h in trace.history]) if trace.history
                   else torch.zeros(0, B, C, T, dtype=torch.long, device=problem.device))
    result = dict(
        tokens=state.tokens.view(B, C, T), lengths=(~problem.is_pad).sum(dim=1),
        best_tokens=state.best_tokens.view(B, C, T)[ar, best_chain], best_energy=best_e[ar, best_chain],
        energy=state.target.view(B, C).clone(), energy_raw=state.e_raw.view(B, C).clone(),
        energy_local=state.e_local.view(B, C).clone(), history=history, terms=None, terms_per_epoch=None)
    if trace.chain_counts:  # cumulative Long[3, M] per epoch -> per-epoch counts Long[E, B, C] (on the CPU)
        cum = torch.stack(trace.chain_counts)
        per_epoch = torch.cat((cum[:1], cum[1:] - cum[:-1])).view(-1, 3, B, C)
        result.update(zip(ChainCounts.FIELDS, per_epoch.unbind(1)))
    else:
        result.update(dict.fromkeys(ChainCounts.FIELDS))
    if problem.terms is not None:
        K = state.term_values.shape[1]
        result["terms"] = state.term_values.view(B, C, K).clone()
        result["terms_per_epoch"] = torch.stack([v.view(B, C, K) for v in trace.term_values])
    if monitor is not None:
        result.update(monitor.result_fields())
    if hasattr(kernel, "result_fields"):  # parallel tempering: its ladder and counters
        result.update(kernel.result_fields())
    chosen = _choose_candidates(problem, result, cfg.select) if problem.candidate_lengths is not None else None
    f32 = lambda xs: torch.tensor(xs, dtype=torch.float32)  # noqa: E731
    return SampleResult(
        **result, e_raw=f32(trace.e_raw), e_local=f32(trace.e_local), acceptance_rate=f32(trace.acceptance_rate),
        novel_rate=f32(trace.novel_rate), target_temperature=f32(trace.target_temperature), model_rows=model_rows,
        model_calls=model_calls, candidate_lengths=problem.candidate_lengths, chosen_candidate=chosen,
        term_names=problem.terms.names if problem.terms is not None else None, proposals=trace.proposals,
        init_rows=init_rows)
