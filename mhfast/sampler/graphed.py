"""Single-site MH steps replayed from static buffers: eagerly (``capture="static"``) or as CUDA graphs
(``capture="cuda-graph"``).

A step of :func:`~mhfast.sampler.static_step.static_single_site_mh` has shapes fixed by the
number of moving chains and no host sync, so it can be captured once and replayed. What a replay
cannot change is baked in at capture: the tensors it reads and writes, and every Python number.
So the step runs as a *body* over buffers this class owns:

* the state's tokens, terms and energies (copied back in place at the body's end) and the cache
  (already updated in place by the commit op);
* the positions of the step (``pos`` buffer, one per moving-chain count), and the epoch and step
  counters as 0-d device tensors, folded into the chains' keys on the device by
  :func:`~mhfast.runtime.rng.counters_into_keys`, so the ops draw with epoch = step = 0 exactly the
  numbers the dynamic step draws (the chains stay the same);
* the MH test's outcome (accepted, changed), copied out of the graph after each replay.

One graph per (moving-chain count, beta): the first step of a pair runs the body eagerly (it
warms the model's kernels up, and is a real step), the second captures it, every later one
replays it. Annealing changes beta every epoch, so it re-captures once per epoch. A beta that is a
tensor (parallel tempering: one per row, :mod:`~mhfast.sampler.tempering`) is copied into a buffer
of its own before each step instead, so one graph serves every ladder the tuning makes. A state
whose step fields are not the buffers (a swap of parallel tempering exchanged rows: new tensors)
has them copied into the buffers in place (:meth:`StaticSiteSteps.state_of`). The model's
output check is deferred to a device flag read once per epoch (:meth:`ModelRunner.defer_output_checks`),
and the model is told that the sampler vouches for its inputs and whether rows hold pads
(:meth:`ModelRunner.static_inputs`: the HF adapters' padding test, the fairseq fast decoder's bounds
checks and ``torch.unique``): the host syncs a step would otherwise make. A model whose forward still
syncs cannot be captured: the capture's error is re-raised naming the model.

With ``capture="static"`` (any device) the same body runs eagerly at every step: that is how the
CPU tests check what the graph replays (tests/sampler/test_static_step.py).

Example:
    >>> import mhfast
    >>> from mhfast.models.tabular import TabularMLM
    >>> r = mhfast.sample(TabularMLM.random(3, 2, seed=0), 2, chains=2, epochs=2, burn_in=0, capture="static")
    >>> r.tokens.shape
    torch.Size([1, 2, 2])
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch

from ..runtime import rng
from .state import ChainState
from .static_step import static_single_site_mh
from .step import StepContext, StepInfo

#: the state's fields a step writes (the cache is written in place by the commit op)
STEP_FIELDS = ("tokens", "raw_terms", "local_terms", "e_raw", "e_local")


class StaticSiteSteps:
    """Replays single-site MH steps over static buffers (see the module docstring).

    ``state``: the scored state the run starts from (its step fields are copied into buffers owned
    here); ``graphs``: capture CUDA graphs (the state must be on a CUDA device) or run eagerly;
    ``has_pad``: whether any chain's row holds the model's pad id (None: read from the state, one host read;
    the sampler never proposes pads, so it stays true or false for the run).
    """

    def __init__(self, ctx: StepContext, state: ChainState, graphs: bool, has_pad: bool | None = None):
        if graphs and state.tokens.device.type != "cuda":
            raise ValueError(f"mhfast.sample: capture='cuda-graph' needs the chains on a CUDA device, not "
                             f"{state.tokens.device}")
        self.ctx, self.graphs = ctx, graphs
        dev = state.tokens.device
        self.buffers = dataclasses.replace(state, counts=None, **{f: getattr(state, f).clone() for f in STEP_FIELDS})
        self.keys = state.rng_keys
        self.epoch_t = torch.zeros((), dtype=torch.long, device=dev)
        self.step_t = torch.zeros((), dtype=torch.long, device=dev)
        self.pos: dict[int, torch.Tensor] = {}  # per moving-chain count A: Long[A]
        self.rows: dict[int, int] = {}  # per moving-chain count A: the masked rows of a step
        self.beta_t: torch.Tensor | None = None  # a tensor beta's buffer (f64[M]: parallel tempering's rungs)
        # (A, beta) pairs that ran eagerly once; beta "rows" for a tensor beta (its buffer)
        self.seen: set[tuple[int, float | str | None]] = set()
        self.graphs_by_key: dict[tuple[int, float | str | None], tuple[Callable, int, int]] = {}  # replay, rows, calls
        self.pool: Any = None  # the memory pool every graph of one beta shares (see capture)
        # the side stream that runs each graph's warm-up step and its capture (torch's recipe: lazy per-stream
        # initializations, e.g. cuBLAS workspaces, happen in the warm-up, never inside a capture)
        self.stream = torch.cuda.Stream(dev) if graphs and dev.type == "cuda" else None
        self.has_pad = ctx.runner.holds_pads(state.tokens) if has_pad is None else has_pad
        ctx.runner.defer_output_checks()

    def state_of(self, state: ChainState) -> ChainState:
        """``state`` (the driver's: its best-state fields may be newer) with the buffers' step fields. A step field
        of ``state`` that is another tensor than the buffer (parallel tempering's swap made new ones; the cache it
        permutes in place) is copied into the buffer first: the buffers are what a replay reads."""
        if state.cache is not self.buffers.cache:
            raise ValueError("StaticSiteSteps: a state this object did not produce (each state is used once)")
        for f in STEP_FIELDS:
            new, buf = getattr(state, f), getattr(self.buffers, f)
            if new is not buf:
                buf.copy_(new)
        return dataclasses.replace(state, **{f: getattr(self.buffers, f) for f in STEP_FIELDS})

    def step(self, state: ChainState, act: torch.Tensor, act_host: torch.Tensor, pos: torch.Tensor,
             beta: float | torch.Tensor | None, epoch: int, step: int) -> tuple[ChainState, StepInfo]:
        """One step of the chains ``act`` at ``pos``: eager body, capture, or replay (see the module)."""
        A = act.shape[0]
        if A == 0:
            return state, StepInfo(0, 0, 0, scored=True)
        if state.counts is not None:
            state.counts.proposed(act_host)
            state.counts.proposed_at(act, pos)  # the move's own tensor: ``buf`` is overwritten by the next step
        buf = self.pos.get(A)
        if buf is None:
            buf = self.pos[A] = torch.empty(A, dtype=torch.long, device=act.device)
        buf.copy_(pos)
        self.epoch_t.fill_(epoch)
        self.step_t.fill_(step)
        num_rows = self.rows.get(A)
        if num_rows is None:  # host counts, once per moving-chain count (the body then touches no host tensor)
            num_rows = self.rows[A] = int(self.buffers.num_energy_host.index_select(0, act_host).sum()) - A
        state = self.state_of(state)  # (a swap's rows into the buffers)
        if isinstance(beta, torch.Tensor):  # one per row: a buffer the graphs read, refilled at every step
            if self.beta_t is None or self.beta_t.shape != beta.shape:
                self.beta_t = torch.empty_like(beta)
                self.seen.clear()  # (a new buffer: graphs must read the new one)
                self.graphs_by_key.clear()
                self.pool = None
            self.beta_t.copy_(beta)
            beta = self.beta_t
        body = lambda: self._body(act, act_host, buf, beta, num_rows)  # noqa: E731
        key = (A, "rows" if isinstance(beta, torch.Tensor) else beta)
        if not self.graphs:
            accepted, changed = body()
        elif key not in self.seen:  # the warm-up: a real step, on the stream that will capture (lazy inits there)
            self.seen.add(key)
            accepted, changed = self._on_capture_stream(body)
        else:
            accepted, changed = self._replay(key, body)
        if state.counts is not None:
            state.counts.tested(act, accepted, where=changed)
            state.counts.tested_at(act, pos, accepted, where=changed)
        return self.state_of(state), StepInfo(A, accepted.sum(), (accepted & changed).sum(), scored=True)

    def _body(self, act: torch.Tensor, act_host: torch.Tensor, pos: torch.Tensor, beta: float | torch.Tensor | None,
              num_rows: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The step over the buffers, epoch = step = 0 with the counters folded into the keys; writes in place."""
        keys = rng.counters_into_keys(self.keys, self.epoch_t, self.step_t)
        with self.ctx.runner.static_inputs(self.has_pad):
            new, accepted, changed = static_single_site_mh(self.ctx, dataclasses.replace(self.buffers, rng_keys=keys),
                                                           act, act_host, pos, beta, 0, 0, num_rows)
        for f in STEP_FIELDS:
            getattr(self.buffers, f).copy_(getattr(new, f))
        return accepted, changed

    def _on_capture_stream(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` run on :attr:`stream`, ordered after and before the current stream's work (no stream: as is)."""
        if self.stream is None:
            return fn()
        current = torch.cuda.current_stream(self.stream.device)
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream):
            out = fn()
        current.wait_stream(self.stream)
        return out

    def _replay(self, key: tuple[int, float | str | None], body: Callable) -> tuple[torch.Tensor, torch.Tensor]:
        """Replay the graph of ``key``, capturing it first; the runner's row and call counters advance as the
        captured step's did (a replay runs no Python)."""
        runner = self.ctx.runner
        entry = self.graphs_by_key.get(key)
        if entry is None:
            if self.graphs_by_key and key[1] != next(iter(self.graphs_by_key))[1]:
                self.graphs_by_key.clear()  # a new beta (annealing): the old epoch's graphs are done
                self.pool = None
            rows, calls = runner.model_rows, runner.model_calls
            replay = self.capture(body)
            entry = (replay, runner.model_rows - rows, runner.model_calls - calls)
            runner.model_rows, runner.model_calls = rows, calls
            self.graphs_by_key[key] = entry
        replay, rows, calls = entry
        outputs = replay()
        runner.model_rows += rows
        runner.model_calls += calls
        return outputs

    def capture(self, body: Callable[[], tuple[torch.Tensor, torch.Tensor]]
                ) -> Callable[[], tuple[torch.Tensor, torch.Tensor]]:
        """``body`` captured as a CUDA graph, without running it: returns ``replay() -> (accepted, changed)``, new
        tensors at each replay.

        (A test may replace this method by another capture with the same contract: Python runs once, at
        capture; the buffers are read and written at each replay; tests/sampler/test_static_step.py does so with
        ``torch.fx`` on CPU.)
        """
        graph = torch.cuda.CUDAGraph()
        torch.cuda.synchronize()
        caller_stream = torch.cuda.current_stream()
        try:
            # One pool for all graphs (one per moving-chain count): safe because replays never overlap and each
            # replay's outputs are copied out before the next (replay below); it bounds memory to one step's.
            with torch.cuda.graph(graph, pool=self.pool, stream=self.stream):
                outputs = body()
        except RuntimeError as e:
            # After the body fails, torch.cuda.graph's exit ends the capture, which fails in turn ("operation failed
            # due to a previous error during capture"): the body's error, its context, is the one that says why
            cause = e.__context__ if isinstance(e.__context__, Exception) else e
            raise RuntimeError(f"mhfast.sample: capture='cuda-graph' could not capture a step of "
                               f"{type(self.ctx.runner.model).__name__} (does its forward synchronize with the host, "
                               f"e.g. .item(), .tolist(), nonzero, or a Python branch on a tensor?): {cause}") from e
        finally:
            torch.cuda.set_stream(caller_stream)  # that failed exit never leaves the side stream
        self.pool = graph.pool() if self.pool is None else self.pool

        def replay() -> tuple[torch.Tensor, torch.Tensor]:
            graph.replay()
            return outputs[0].clone(), outputs[1].clone()  # the graph's buffers: the next replay overwrites them
        return replay
