"""What the driver does at each epoch's end besides its statistics: traces, per-position tallies, and runs that
stop when converged (options ``until_rhat``, ``min_ess``; ``epochs`` is the cap).

:class:`RunMonitor` records the traces (:mod:`mhfast.sampler.traces`) and the per-position tallies
(:mod:`mhfast.sampler.site_counts`) of every run. With ``until_rhat`` and/or ``min_ess`` it also checks each
input still in the batch, after every traced post-burn-in sweep up to :data:`EVERY_DRAW` draws per chain and then
after every ``D // (EVERY_DRAW // 2)``-th (:func:`check_due`: a check reads all D draws, so checking every sweep made
a run's cost grow with the square of its length: 29x the sampling at 1,000 epochs of a small model; the checks are
at most 0.8% of the draws apart, but R-hat and ESS go up and down from draw to draw, so a criterion met at a skipped
draw can fail at the next checks and the stop come later than that: measured, 42 sweeps later at ~550 draws): the
input has converged when EVERY traced summary (energies, extra terms, projections) that varies has rank-normalized
split R-hat below ``until_rhat`` and bulk and tail ESS of at least ``min_ess`` over its post-burn-in draws
(:mod:`mhfast.sampler.diagnostics`, ArviZ's functions). A summary that takes one value in every draw of every chain
while another varies is left out (a term constant over the states visited, such as a length penalty, says nothing
about mixing, and its NaN would never pass); when none varies, the chains never moved and the input has not
converged. A converged input **leaves the batch**: its chains are no longer stepped or forwarded (the kernel's
``restrict``), its final state is the one at that sweep, and the others go on; the run ends when every input has
left or at ``epochs``. The chains that go on are the chains of a run without the options (the same random
numbers, plans and memo tables: :mod:`mhfast.sampler.subset`), so until an input leaves, everything about it
equals such a run (bit for bit with a model whose rows do not depend on their batch; with float models whose
rounding depends on the batch's size, the same chains up to that rounding, as for ``max_tokens_per_batch``).

What an adaptive stop does and does not guarantee:

* It stops when the diagnostics *first* pass. That is a sequential test: checking after every sweep and
  stopping at the first pass makes a false "converged" likelier than one check of a run of fixed length would
  (R-hat fluctuates around 1 and can dip below the threshold by chance, most easily with few draws). ``min_ess``
  guards against that (ArviZ: at least 100 per chain); so does a generous burn-in.
* R-hat compares chains: with every chain started at the same state (the greedy default) chains stuck in one
  mode agree perfectly. Use dispersed starts (``start="sampled"``/``"random"``, or one ``init`` row per chain)
  for the check to mean something.
* Converged means the traced summaries look stationary and agree between chains. It does not prove the
  chains have found every mode (no diagnostic can), nor that the energy is the right one (degenerate Gibbs
  converges to the wrong distribution and passes).
* ``converged`` is False both for an input that ran to ``epochs`` without meeting the criteria and for an
  input whose diagnostics could not be computed (NaN: e.g. chains that never move).

Example:
    >>> import mhfast
    >>> from mhfast.models.tabular import TabularMLM
    >>> r = mhfast.sample(TabularMLM.random(3, 3, seed=0, scale=0.3), 3, chains=4, epochs=300, burn_in=5, seed=0,
    ...                   start="random", until_rhat=1.05, min_ess=50)
    >>> bool(r.converged[0]), int(r.epochs_run[0]) < 300
    (True, True)
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from . import diagnostics
from .site_counts import SiteCounts
from .state import ChainState
from .subset import merge_chains
from .traces import TraceRecorder


#: checks after every traced post-burn-in sweep up to this many draws per chain (then sparser: :func:`check_due`)
EVERY_DRAW = 256


def check_due(draws: int) -> bool:
    """Whether an input with ``draws`` post-burn-in draws per chain is checked now: every draw up to
    :data:`EVERY_DRAW`, then every ``draws // (EVERY_DRAW // 2)``-th (gaps below 0.8% of the draws; the checks'
    total cost linear in the run's length, not quadratic).

    Example:
        >>> [d for d in range(250, 400) if check_due(d)][:12]
        [250, 251, 252, 253, 254, 255, 256, 258, 260, 262, 264, 266]
    """
    return draws <= EVERY_DRAW or draws % (draws // (EVERY_DRAW // 2)) == 0


class _FullCounts:
    """The proposal counts of every chain (a stopped chain keeps its last totals), as the driver reads them."""

    def __init__(self, totals: torch.Tensor, rows: torch.Tensor, counts: Any):
        self.totals, self.rows, self.counts = totals, rows, counts

    def snapshot(self) -> torch.Tensor:
        out = self.totals.clone()
        out[:, self.rows.cpu()] = self.counts.snapshot()
        return out


class RunMonitor:
    """The epoch-end watcher of one run (see the module doc); the driver calls ``start``, ``view``,
    ``after_epoch`` (and reads ``finished``) and ``finish``."""

    def __init__(self, cfg: Any, num_inputs: int, length: int, vocab_size: int, term_names: Any, uniforms_op: Any):
        self.cfg, self.B, self.C, self.T = cfg, int(num_inputs), int(cfg.chains), int(length)
        self.M = self.B * self.C
        self.recorder = TraceRecorder(self.B, self.C, vocab_size, term_names, cfg.trace_every, uniforms_op)
        self.until_rhat, self.min_ess = cfg.until_rhat, cfg.min_ess
        self.adaptive = self.until_rhat is not None or self.min_ess is not None
        self.stats = diagnostics.needed_stats(self.until_rhat, self.min_ess)
        self.rows: torch.Tensor | None = None  #: the running chains' indices among the M (None: all)
        self.full: ChainState | None = None  #: every chain, as it was when its input left (merged into views)
        self.running = torch.ones(self.B, dtype=torch.bool)
        self.converged = torch.zeros(self.B, dtype=torch.bool)
        self.epochs_run = torch.zeros(self.B, dtype=torch.long)
        self.finished = False
        self.sites: torch.Tensor | None = None  #: post-burn-in per-position tallies (set by finish)
        self._counts = torch.zeros(3, self.M, dtype=torch.long)  # stopped chains' proposal totals
        self._sites = torch.zeros(3, self.M, self.T, dtype=torch.long)  # stopped chains' per-position totals
        self._sites_base = torch.zeros(3, self.M, self.T, dtype=torch.long)  # at the end of burn-in

    @classmethod
    def of(cls, cfg: Any, problem: Any, vocab_size: int) -> "RunMonitor":
        """The monitor of a run of ``cfg`` on ``problem`` (a :class:`~mhfast.sampler.problem.Problem`)."""
        from ..runtime.backend import get_backend

        names = problem.terms.names if problem.terms is not None else None
        return cls(cfg, problem.rows.shape[0], problem.rows.shape[1], vocab_size, names,
                   get_backend(cfg.backend).counter_uniforms)

    def start(self, state: ChainState) -> ChainState:
        """The first state, with per-position tallies attached to its counts."""
        if state.counts is not None:
            state.counts.sites = SiteCounts(state.tokens.shape[0], self.T, state.tokens.device)  # auxiliary rows too
        return state

    def view(self, state: ChainState) -> ChainState:
        """Every chain's state: ``state`` itself while all run, else the stopped chains' last states merged with it."""
        if self.rows is None:
            return state
        merged = merge_chains(self.full, state, self.rows)
        counts = _FullCounts(self._counts, self.rows, state.counts) if state.counts is not None else None
        return dataclasses.replace(merged, counts=counts)

    def after_epoch(self, kernel: Any, state: ChainState, epoch: Any, samples: ChainState | None = None
                    ) -> ChainState:
        """Tallies and traces of the epoch; with the options, the inputs that converged leave the batch.

        ``samples``: the chains of ``state`` that sample the target (``kernel.samples``; None: all of them): what
        is traced; ``kernel.restrict`` gets indices among them."""
        full_state, state = state, (samples if samples is not None else state)
        self.epochs_run[self.running] = epoch.index + 1
        if epoch.index + 1 == self.cfg.burn_in and state.counts is not None:
            self._sites_base = self.site_totals(state)
        recorded = self.recorder.record(state, self.rows, epoch.index)
        if not (self.adaptive and recorded and epoch.post_burn_in):
            return full_state
        newly = self._converged(self.running.nonzero().flatten().tolist())
        if not newly:
            return full_state
        self.converged[newly] = True
        self.running[newly] = False
        full = self.view(state)  # the leaving chains' final states, before they are dropped
        if state.counts is not None:
            self._counts = full.counts.snapshot()
            self._sites = self.site_totals(state)
        # kept to read, never to step: without the [M, T, D] cache (the first time, view is the live state, whose
        # cache of every chain's masked outputs would have stayed alive to the end beside the running chains')
        self.full = dataclasses.replace(full, cache=None, counts=None)
        if not bool(self.running.any()):
            self.finished = True
            return full_state
        rows = self.rows if self.rows is not None else torch.arange(self.M)
        keep = self.running.repeat_interleave(self.C)[rows.cpu()].nonzero().flatten()  # among the current chains
        full_state = kernel.restrict(full_state, keep)
        self.rows = rows.cpu()[keep]
        return full_state

    def _converged(self, inputs: list[int]) -> list[int]:
        """Which of the running ``inputs`` meet the criteria now (all share the same post-burn-in draws count).

        One ArviZ call per diagnostic for all of them (their summaries side by side: ArviZ computes each summary
        on its own), not one per input: a call's overhead, not its arithmetic, dominated with few draws."""
        draws = self.recorder.draws_since(self.cfg.burn_in)
        if not inputs or draws < diagnostics.MIN_DRAWS or not check_due(draws):
            return []  # (before any copy: a sweep not due had copied every input's D draws, O(D) per sweep)
        per_input = [self.recorder.input_draws(b, self.cfg.burn_in).numpy() for b in inputs]  # [C, D, S] each
        columns, owner = [], []
        for i, x in enumerate(per_input):
            x = diagnostics.merge_ties(x)  # once, not again in varying() and in each diagnose() below
            varying = diagnostics.varying(x, ties_merged=True)
            # a summary constant while another varies says nothing about mixing; none varies: the chains never
            # moved, and the NaN of the constant summaries fails below
            kept = x[:, :, varying] if varying.any() and not varying.all() else x
            columns.append(kept)
            owner += [i] * kept.shape[2]
        stacked, labels = np.concatenate(columns, axis=2), [str(k) for k in range(len(owner))]
        passing = set(range(len(inputs)))
        for stat in self.stats:  # one diagnostic at a time: the inputs that fail one are not asked the next
            cols = [k for k, i in enumerate(owner) if i in passing]
            if not cols:
                break
            diag = diagnostics.diagnose(stacked[:, :, cols], [labels[k] for k in cols], (stat,), ties_merged=True)
            for i in list(passing):
                mine = {stat: {labels[k]: diag[stat][labels[k]] for k in cols if owner[k] == i}}
                if not diagnostics.meets(mine, self.until_rhat, self.min_ess):
                    passing.discard(i)
        return [inputs[i] for i in sorted(passing)]

    def site_totals(self, state: ChainState) -> torch.Tensor:
        """Long[3, M, T]: every chain's cumulative per-position tallies (stopped chains: their last)."""
        sites = state.counts.sites if state.counts is not None else None
        if sites is None:
            return self._sites.clone()
        if self.rows is None:
            return sites.snapshot()
        out = self._sites.clone()
        out[:, self.rows] = sites.snapshot()
        return out

    def finish(self, state: ChainState) -> ChainState:
        """Every chain's final state (:meth:`view`); keeps the post-burn-in per-position tallies in ``sites``:
        Long[3, M, T] (proposals, accepted, changed) per chain and position."""
        self.sites = self.site_totals(state) - self._sites_base
        return self.view(state)

    def result_fields(self) -> dict[str, Any]:
        """The :class:`~mhfast.sampler.result.SampleResult` fields of the monitor (per input first, B x ...)."""
        B, C, T = self.B, self.C, self.T
        sites = self.sites if self.sites is not None else torch.zeros(3, self.M, T, dtype=torch.long)
        proposals, accepted, changed = sites.view(3, B, C, T).unbind(0)
        return {"traces": self.recorder.draws(), "trace_names": list(self.recorder.names),
                "trace_epochs": torch.tensor(self.recorder.epochs, dtype=torch.long), "burn_in": int(self.cfg.burn_in),
                "position_proposals": proposals.clone(), "position_accepted": accepted.clone(),
                "position_changed": changed.clone(), "epochs_run": self.epochs_run.clone(),
                "converged": self.converged.clone() if self.adaptive else None}
