"""The driver loop: epochs, burn-in, best-state tracking, recording and per-epoch statistics.

It runs any :class:`~mhfast.sampler.kernels.base.Kernel` and knows none by name: per epoch it asks
the kernel for its moves, applies them, and remembers each chain's best state after burn-in
whenever a step leaves the energies exact (``StepInfo.scored``).

Example:
    >>> import mhfast
    >>> from mhfast.models.tabular import TabularMLM
    >>> mhfast.sample(TabularMLM.random(3, 2, seed=0), 2, chains=2, epochs=3, burn_in=1).e_raw.shape
    torch.Size([3])
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from .kernels.base import Kernel
from .schedules import Epoch
from .state import ChainState
from .step import NO_STEP


@dataclass
class Trace:
    """Per-epoch statistics (means over all chains) and, when recording, end-of-epoch states."""

    e_raw: list[float] = field(default_factory=list)
    e_local: list[float] = field(default_factory=list)
    acceptance_rate: list[float] = field(default_factory=list)
    novel_rate: list[float] = field(default_factory=list)
    target_temperature: list[float] = field(default_factory=list)
    history: list[torch.Tensor] = field(default_factory=list)  #: Long[M, T] per post-burn-in epoch
    term_values: list[torch.Tensor] = field(default_factory=list)  #: f32[M, K] extra energy terms per epoch
    proposals: int = 0  #: proposals made in all epochs (one per moving chain and step)
    #: Long[3, M] per epoch: each chain's proposals, accepted and novel proposals up to the epoch's end
    chain_counts: list[torch.Tensor] = field(default_factory=list)

    def last(self) -> dict:
        return {"e_raw": self.e_raw[-1], "e_local": self.e_local[-1], "acceptance_rate": self.acceptance_rate[-1],
                "novel_rate": self.novel_rate[-1], "target_temperature": self.target_temperature[-1]}


def run(kernel: Kernel, state: ChainState, schedule: Sequence[Epoch], record: bool = False,
        progress: Callable[[int, dict], None] | None = None, counters: Callable[[], dict] = dict,
        after_epoch: Callable[[], None] | None = None, monitor: Any = None) -> tuple[ChainState, Trace]:
    """Run ``kernel`` from ``state`` through the epochs of ``schedule``; returns the final state and trace.

    ``progress(epoch, stats)`` is called after every epoch with the trace's last entries plus
    ``counters()`` (e.g. the model rows forwarded so far). ``after_epoch()`` runs after each epoch's
    steps, before anything reads the state (e.g. the model runner's deferred output check, which raises).
    A kernel with auxiliary chains (parallel tempering: :mod:`mhfast.sampler.tempering`) says which chains are the
    samples with ``kernel.samples(state)``: only those are traced, recorded and returned, and
    ``kernel.sample_info(state, info)`` gives the epoch's counts of those chains, of which the pooled acceptance
    rates are (``Trace.proposals`` still counts every chain's proposals: the cost).
    ``monitor`` (:class:`mhfast.sampler.adaptive.RunMonitor`) watches every epoch's end: it records the
    traces and may let converged inputs leave the batch (then the trace and the result still see every
    chain, through ``monitor.view``), or end the run once every input has left.
    """
    trace = Trace()
    samples = getattr(kernel, "samples", None) or (lambda s: s)  # a kernel with auxiliary chains: the others
    sample_info = getattr(kernel, "sample_info", None) or (lambda s, i: i)
    if monitor is not None:
        state = monitor.start(state)
    for epoch in schedule:
        info = NO_STEP
        for move in kernel.sweep(state, epoch):
            state, step_info = kernel.step(state, epoch, move)
            info = info + step_info
            if epoch.post_burn_in and step_info.scored:
                state = state.with_best()
        if after_epoch is not None:
            after_epoch()
        view = samples(state)
        trace.proposals += int(info.proposals)
        _append(trace, view if monitor is None else monitor.view(view), sample_info(state, info), epoch, record,
                progress, counters)
        if monitor is not None:
            state = monitor.after_epoch(kernel, state, epoch, view)
            if monitor.finished:
                break
    state = samples(state) if monitor is None else monitor.finish(samples(state))
    # no post-burn-in epoch (they are the schedule's last ones): the best state is the final one; read from the last
    # epoch, not by walking the schedule, which may be 2**31 epochs long where the run stopped early
    if not (len(schedule) and schedule[-1].post_burn_in):
        state = state.with_best()
    return state, trace


def _append(trace: Trace, state: ChainState, info: Any, epoch: Epoch, record: bool,
            progress: Callable[[int, dict], None] | None, counters: Callable[[], dict]) -> None:
    """The epoch's statistics (of every chain of ``state``; ``info``: their proposals) into ``trace``, then
    ``progress``."""
    proposals = max(int(info.proposals), 1)
    trace.e_raw.append(float(state.e_raw.mean()))
    trace.e_local.append(float(state.e_local.mean()))
    trace.acceptance_rate.append(float(info.accepted) / proposals)
    trace.novel_rate.append(float(info.novel) / proposals)
    trace.target_temperature.append(epoch.target_temperature)
    if state.counts is not None:
        trace.chain_counts.append(state.counts.snapshot())
    trace.term_values.append(state.term_values)
    if record and epoch.post_burn_in:
        trace.history.append(state.tokens.clone())
    if progress is not None:  # the means, and the sums and counts they come from (to combine over ranks)
        progress(epoch.index, {**trace.last(), **counters(), "chains": int(state.e_raw.shape[0]),
                               "e_raw_sum": float(state.e_raw.double().sum()),
                               "e_local_sum": float(state.e_local.double().sum()),
                               "proposals": int(info.proposals), "accepted": int(info.accepted),
                               "novel": int(info.novel)})
