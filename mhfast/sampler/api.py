"""``mhfast.sample``: Metropolis-Hastings sampling from a masked LM's energy (Goyal et al., ICLR 2022).

The function wires the layers together and does nothing else: options are validated into a
:class:`~mhfast.sampler.options.SamplerConfig` (:mod:`.options`), the inputs into a
:class:`~mhfast.sampler.problem.Problem` (:mod:`.problem`), the sampler is a kernel from the
registry (:mod:`.kernels`), the epoch loop is the driver's (:mod:`.driver`) and the result is
assembled by :mod:`.result`.

Example (a tabular model whose conditionals are given explicitly):
    >>> import mhfast
    >>> from mhfast.models.tabular import TabularMLM
    >>> model = TabularMLM.random(num_tokens=3, length=3, seed=0)
    >>> result = mhfast.sample(model, 3, chains=4, epochs=10, burn_in=2, seed=1, backend="reference")
    >>> result.tokens.shape, result.best_tokens.shape, result.e_local.shape
    (torch.Size([1, 4, 3]), torch.Size([1, 3]), torch.Size([10]))
"""
from __future__ import annotations

import contextlib
import inspect
import warnings
from typing import Any, Callable, Sequence

import torch

from ..models.compiled_blocks import CompileReport, compiled_blocks
from ..models.fast_forward import fast_forward_model
from ..runtime import precision
from . import driver, options, schedules, starts, tempering
from .adaptive import RunMonitor
from ..runtime.backend import get_backend
from .kernels import KERNELS
from .memo import NO_MEMO
from .problem import build_problem, check_model
from .result import SampleResult, assemble
from ..runtime.rng import seed_from_generator
from ..runtime.runner import ModelRunner, default_max_tokens
from .state import ChainState
from .step import StepContext

__all__ = ["sample", "SampleResult"]


def sample(model: Any, length: int | None = None, *, init: torch.Tensor | None = None,
           free_positions: torch.Tensor | None = None, source: Any = None,
           input_ids: Sequence[int] | torch.Tensor | None = None, generator: torch.Generator | None = None,
           progress: Callable[[int, dict], None] | None = None, config: Any = None,
           **sampler_options: Any) -> SampleResult:
    """Sample sequences from the energy network behind a masked LM with Metropolis-Hastings.

    Exactly one of ``length`` / ``init`` / ``source`` says what to sample:

    * ``length=T``: unconditional, one input of T free positions (``model.frame(T)`` may add
      fixed special tokens, e.g. ``[CLS] + [MASK]*T + [SEP]``).
    * ``init=Long[B, T]``: start from these rows (padded at the end with ``model.pad_id``; a
      row's length is its number of non-pad tokens). Energy positions: non-pad positions whose
      token is not special (``mask_id`` counts as not special: it is filled first, by the start: ``start=``).
      ``free_positions`` (Bool[B, T]) restricts proposals for infilling; fixed positions still
      count in the energy.
    * ``init=Long[B, C, T]`` (C = ``chains``): one start per chain, e.g. in different modes for R-hat
      (:mod:`mhfast.sampler.starts`, which also explains the dispersed starts of ``start=``).
    * ``source=...``: conditional generation (section 5): ``context = model.encode(source)``
      once, ``model.predict_lengths(context, length_beam)`` gives length candidates, each
      (source, length) pair is an input with its own chains, rows reuse the encoder output
      by ``context_index``. Per source the result keeps the candidate whose best sample has
      the lowest energy per token (``select="energy_per_token"``) or lowest energy
      (``select="energy"``).

    Args:
        model: anything implementing :class:`mhfast.models.base.MaskedLM`, or what
            :func:`mhfast.models.loading.load_masked_lm` turns into one: ``"antiberty"``, a local
            HuggingFace model directory, a hub id (from the local cache), a transformers model object.
        generator: a torch.Generator that draws the seed (instead of ``seed``).
        config: a :class:`~mhfast.sampler.options.SamplerConfig` (validated options, e.g. from the
            CLI); keyword options given too override its fields.
        progress: called as ``progress(epoch, stats_dict)`` after every epoch.
        input_ids: the RNG identity of each input (ints >= 0): one per ``init`` row (or the one
            ``length`` input), or one per source for ``source=`` (length candidate j of source
            ``s`` then draws as input ``input_ids[s] * length_beam + j``). Default ``0, 1, ...``.
            Sampling a long list in pieces with each piece's GLOBAL indices gives every input the
            random numbers it gets in one big call (``mhfast translate`` relies on it to resume).

    Returns:
        :class:`SampleResult`.

    Sampler options (keyword arguments; declared once in :data:`mhfast.sampler.options.SPEC`, which
    also makes the CLI flags and ``docs/options.md``). All randomness is a hash of (seed, input,
    chain, epoch, step, stream), so the random numbers do not depend on batch composition or
    ``max_tokens_per_batch``, and both backends draw the same ones: the chains are the same up to
    the model's float rounding, which may differ in the last bits with the batch (an MH test that
    close to its threshold could go the other way; with a tabular model they are identical):
    """
    model = check_model(model)  # a name, a directory, a hub id or a plain transformers model object: loaded
    cfg = options.config_from_kwargs(merged_options(config, generator, sampler_options))
    if progress is not None and not callable(progress):
        raise ValueError("mhfast.sample: progress must be callable or None")
    # No autograd: a user's extra energy term or surrogate built of modules with parameters had grown one graph
    # over the whole run (memory without end) and handed back results that require grad (no .numpy()).
    with torch.no_grad():
        problem, chain_rows = _problem(model, cfg, length=length, init=init, free_positions=free_positions,
                                       source=source, input_ids=input_ids)
        precision.check_native(cfg.dtype, problem.device)
        forward_model = fast_forward_model(model) if cfg.forward == "fast" else model
        budget = cfg.max_tokens_per_batch or default_max_tokens(model, problem.device, cfg.dtype)
        runner = ModelRunner(forward_model, problem.context, budget, problem.device, cfg.dtype)
        kernel = _kernel(cfg, runner, problem)
        monitor = RunMonitor.of(cfg, problem, runner.vocab_size)  # traces; until_rhat/min_ess
        with _compiled(cfg, forward_model) as compiled, runner.session():  # session: weights cast once per run
            state = kernel.init(_initial_state(problem, cfg, runner, chain_rows))
            _check_finite_start(state)
            init_rows = runner.model_rows  # warm start + initial energies: not part of any proposal
            with _without_syncs(runner, state):
                state, trace = driver.run(kernel, state, schedules.epoch_schedule(cfg), record=cfg.record == "epoch",
                                          progress=progress, counters=lambda: {"model_rows": runner.model_rows},
                                          after_epoch=runner.raise_deferred, monitor=monitor)
        result = assemble(problem, state, trace, cfg, runner.model_rows, runner.model_calls, init_rows, monitor, kernel)
    _warn_infinite_end(result.energy)
    return _with_counters(result, compiled, kernel)


def _with_counters(result: SampleResult, compiled: Any, kernel: Any) -> SampleResult:
    """``result`` with the counters of the compiled blocks, the memo and delayed acceptance."""
    result.compiled_blocks, result.compile_seconds = compiled.blocks, compiled.seconds
    result.memo_hits = getattr(kernel, "memo", NO_MEMO).hits
    delayed = getattr(kernel, "delayed", None)
    if delayed is not None:
        result.delayed_tested, result.delayed_passed = delayed.tested, delayed.passed
        result.delayed_accepted, result.delayed_rows_saved = int(delayed.accepted), delayed.rows_saved
    return result


def merged_options(config: Any, generator: torch.Generator | None, given: dict) -> dict:
    """The sampler options of one call: ``config``'s fields, overridden by the keyword options ``given``, with the
    seed drawn from ``generator`` when there is one (then no seed may be given: one of them would be ignored)."""
    merged = dict(given)
    if config is not None:  # validated options (e.g. from the CLI); keyword arguments override them
        if not isinstance(config, options.SamplerConfig):
            raise TypeError(f"mhfast.sample: config must be a SamplerConfig, got {type(config).__name__}")
        merged = {**options.as_kwargs(config), **given}
    if generator is not None:
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"mhfast.sample: generator must be a torch.Generator, got {type(generator).__name__}")
        if "seed" in given or merged.get("seed", options.OPTIONS["seed"].default) != options.OPTIONS["seed"].default:
            raise ValueError(f"mhfast.sample: seed ({merged['seed']!r}) and generator cannot both be given: the "
                             "generator draws the seed, so the seed would be ignored (give one of them)")
        merged["seed"] = seed_from_generator(generator)
    return merged


def _problem(model: Any, cfg, init: Any = None, **inputs: Any) -> tuple[Any, torch.Tensor | None]:
    """The checked :class:`~.problem.Problem` and, for ``init=Long[B, C, T]``, the per-chain rows (else None)."""
    init, chain_init = starts.split_init(init, cfg.chains)  # init Long[B, C, T]: one start per chain
    problem = build_problem(model, cfg, init=init, **inputs)
    _check_problem(cfg, problem)
    chain_rows = starts.check_chain_rows(model, problem, chain_init, cfg.start) if chain_init is not None else None
    if cfg.start == "sampled":
        starts.check_sampled_start(problem, chain_rows, int(model.mask_id), cfg.chains)
    return problem, chain_rows


@contextlib.contextmanager
def _compiled(cfg, model: Any) -> Any:
    """``compile=True``: the run inside :func:`mhfast.models.compiled_blocks.compiled_blocks` (its report; its errors
    name the option), else an empty report."""
    if not cfg.compile:
        yield CompileReport()
        return
    with compiled_blocks(model, context="mhfast.sample: compile=True: ") as report:
        yield report


def _without_syncs(runner: ModelRunner, state: ChainState) -> Any:
    """On a GPU, the context of the sampling epochs with two of a step's three host syncs gone: the model's output
    check becomes a device flag read at each epoch's end (the run still raises, before it returns a sample) and
    the model takes its inputs as the sampler's (``static_inputs``: no padding test, no bounds checks); what is
    left is the one read of which chains changed. On CPU a sync costs nothing: nothing changes."""
    if state.tokens.device.type == "cpu":
        return contextlib.nullcontext()
    runner.defer_output_checks()
    return runner.static_inputs(runner.holds_pads(state.tokens))


def _check_problem(cfg, problem) -> None:
    """The options that depend on the inputs: ``length_beam``/``select`` need ``source=``, extra energy terms meet
    :func:`options.terms_conflict`'s rules (whether delayed acceptance acts depends on the inputs' lengths),
    ``capture='cuda-graph'`` chains on a CUDA device."""
    if problem.candidate_lengths is None:  # no source: no length candidates to make or choose from
        for name in ("length_beam", "select"):
            if getattr(cfg, name) != options.OPTIONS[name].default:
                raise ValueError(f"mhfast.sample: {name} ({getattr(cfg, name)!r}) has no effect without source= "
                                 "(it acts on the length candidates of a conditional model; init and length fix "
                                 "the lengths)")
    elif cfg.select != options.OPTIONS["select"].default and cfg.length_beam == 1:
        raise ValueError(f"mhfast.sample: select ({cfg.select!r}) has no effect with length_beam 1 (one length "
                         "candidate per source: nothing to choose)")
    if problem.terms is not None:  # (the rules are options.terms_conflict's; a command names its flags)
        # delayed="auto" acts on an input by its own length (auto_fewest_energy), so the shortest input decides
        # whether it acts on all of them: an input fails here alone or not at all, whatever shares the call
        num_energy = int(problem.energy_mask.sum(1).min())
        delayed = options.resolved_delayed(cfg, num_energy, problem.device) is not None
        conflict = options.terms_conflict(cfg.sampler, cfg.capture, cfg.memo, delayed, options.display_name,
                                          scored=bool(problem.terms.terms))
        if conflict is not None:
            at, reason = conflict
            terms, other = options.terms_name(), options.shown(at, getattr(cfg, at))
            if at == "memo" and cfg.delayed is not None:
                reason += f"; {options.shown('delayed', cfg.delayed)} is off for these inputs"
            raise ValueError(f"mhfast.sample: {other} cannot be used with {terms}: {reason}" if at == "memo" else
                             f"mhfast.sample: {terms} cannot be used with {other}: {reason}")
    if (cfg.until_rhat is not None or cfg.min_ess is not None) and not hasattr(KERNELS[cfg.sampler], "restrict"):
        raise ValueError(f"mhfast.sample: {options.display_name('until_rhat')}/{options.display_name('min_ess')} "
                         f"need a sampler whose chains can leave the batch; {options.shown('sampler', cfg.sampler)} "
                         "cannot")
    if cfg.capture == "cuda-graph" and torch.device(problem.device).type != "cuda":
        raise ValueError(f"mhfast.sample: {options.shown('capture', 'cuda-graph')} needs the chains on a CUDA "
                         f"device, not {problem.device} ({options.shown('capture', 'static')} runs the same step "
                         "eagerly on any device)")


def _kernel(cfg, runner: ModelRunner, problem):
    """The sampler kernel of ``cfg`` with its step constants: ``uniform_mix="auto"`` resolved to the proposal's
    uniform share (warned about where fp32 uniforms cannot realize it), ``memo="auto"`` to the proposal memo's size
    (:func:`mhfast.sampler.options.resolved_memo`), ``delayed`` to what delayed acceptance runs
    (:func:`mhfast.sampler.options.resolved_delayed`, from the inputs' energy positions and the device) and
    ``delayed_min_temperature`` to the coldest epoch it acts in."""
    uniform_mix = options.resolved_uniform_mix(cfg, runner.vocab_size)
    _warn_coarse_mixture(uniform_mix, runner.vocab_size)
    extra_terms = problem.terms is not None and bool(problem.terms.terms)
    num_energy = problem.energy_mask.sum(1)
    delayed = options.resolved_delayed(cfg, int(num_energy.max()), problem.device)  # (acts on some input)
    if callable(getattr(cfg.delayed, "check_model", None)):  # a surrogate of another model (mhfast.surrogates)
        cfg.delayed.check_model(runner.model)
    # with extra terms the memo acts only where delayed acceptance does: for every input (memo "auto" is off
    # otherwise; the memo changes no chain, only rows)
    everywhere = options.resolved_delayed(cfg, int(num_energy.min()), problem.device) is not None
    memo = options.resolved_memo(cfg, extra_terms=extra_terms, delayed=everywhere)
    fewest = options.auto_fewest_energy(delayed) if cfg.delayed == "auto" and delayed is not None else None
    backend = get_backend(cfg.backend)
    kernel = KERNELS[cfg.sampler](StepContext(cfg, backend, runner, uniform_mix, problem.terms, memo, delayed,
                                              options.resolved_delayed_min_temperature(cfg), fewest))
    # parallel tempering: the kernel on replicas of every chain, and swaps
    return tempering.wrap(kernel, cfg, backend.counter_uniforms)


def _warn_coarse_mixture(uniform_mix: float, vocab_size: int) -> None:
    """A warning (not silence) when the fp32 uniforms cannot realize the per-token uniform share of the mixture:
    below options.FINEST_SHARE it spans fewer than 8 of their 2^23 levels (> ~12% relative error)."""
    finest = options.FINEST_SHARE
    if 0 < uniform_mix and uniform_mix / vocab_size < finest:
        warnings.warn(f"mhfast.sample: uniform_mix={uniform_mix:g} over a vocabulary of {vocab_size} gives each token "
                      f"{uniform_mix / vocab_size:.2g} of proposal probability, below what the fp32 uniforms realize "
                      f"accurately (2^-20 = {finest:.2g}): the drawn proposal then differs from the one the MH "
                      f"ratio uses for those tokens; use uniform_mix >= {vocab_size * finest:.3g}",
                      stacklevel=4)


def _check_finite_start(state: ChainState) -> None:
    """A ValueError if a chain starts at a sequence of infinite target energy (one host read per run).

    MH cannot leave such a state: every move's log-ratio is ``inf - inf`` = NaN or ``-inf``, both rejected, so the
    chain would never move and its "samples" would all be its start. The energy is +inf where a token's logit is
    -inf (a token the model rules out, e.g. in a given ``init`` or a random start) and -inf or +inf where finite
    logits of ~1e38 sum past float32's range. Gibbs-style kernels that keep no energies pass (zeros)."""
    bad = ~torch.isfinite(state.target)
    if not bool(bad.any()):
        return
    i = int(bad.nonzero()[0, 0])
    terms = state.raw_terms if state.energy == "raw" else state.local_terms
    cause = (~torch.isfinite(terms[i])).nonzero()
    why = (f"its E_{state.energy} term at position {int(cause[0, 0])} is {float(terms[i, cause[0, 0]])}: a token "
           "the model rules out (logit -inf)" if cause.numel() else
           f"its E_{state.energy} terms are finite but their sum overflows float32 (logits near 1e38)")
    raise ValueError(f"mhfast.sample: {int(bad.sum())} chain(s) start at a sequence of infinite energy (first: chain "
                     f"{int(state.chain_ids[i])} of input {int(state.inputs[i])}, energy {float(state.target[i])}; "
                     f"{why}). MH cannot move from a state of infinite energy (every move's log-ratio is NaN or -inf): "
                     "the chain would never move. Start from sequences of finite energy (init, start)")


def _warn_infinite_end(energy: torch.Tensor) -> None:
    """A warning if a chain ended at infinite target energy: a proposal whose energy overflowed float32 to -inf
    (finite logits near 1e38, summed) is always accepted and never left, so that chain's samples are not the
    target's. (A start of infinite energy is an error before the run: :func:`_check_finite_start`.)"""
    bad = ~torch.isfinite(energy)
    if bool(bad.any()):
        b, c = (int(x) for x in bad.nonzero()[0])
        warnings.warn(f"mhfast.sample: {int(bad.sum())} chain(s) ended at infinite energy (first: chain {c} of input "
                      f"{b}, energy {float(energy[b, c])}): the model's logits are so large that the energy "
                      "overflows float32, and MH cannot move from such a state: those chains' samples are not from "
                      "the target", RuntimeWarning, stacklevel=3)


def _initial_state(problem, cfg, runner: ModelRunner, chain_rows: torch.Tensor | None = None) -> ChainState:
    """Every chain of every input at its start (:mod:`.starts`: the greedy warm start of Algorithm 1, line 3, by
    default; ``chain_rows``: one given row per chain)."""
    rep = lambda t: t.repeat_interleave(cfg.chains, dim=0)  # noqa: E731
    B = problem.rows.shape[0]
    return ChainState.create(
        tokens=starts.initial_tokens(runner, problem, cfg, get_backend(cfg.backend).counter_uniforms, chain_rows),
        energy_mask=rep(problem.energy_mask), free=rep(problem.free),
        inputs=rep(problem.input_index), chain_ids=torch.arange(cfg.chains, device=problem.device).repeat(B),
        ctx_index=rep(problem.ctx_rows) if problem.ctx_rows is not None else None, energy=cfg.energy,
        seed=cfg.seed, term_index=rep(problem.term_index),
        num_terms=len(problem.terms.terms) if problem.terms is not None else 0)


def _signature() -> inspect.Signature:
    """sample's signature with every option of the spec as a keyword argument (for help() and IDEs)."""
    sig = inspect.signature(sample)
    params = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    params += [inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY, default=o.default) for o in options.SPEC
               if o.api]
    return sig.replace(parameters=params)


sample.__signature__ = _signature()
sample.__doc__ = (sample.__doc__ or "").rstrip() + "\n" + options.docstring(indent=8) + "\n"
