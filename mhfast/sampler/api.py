"""``mhfast.sample``: Metropolis-Hastings sampling from a masked LM's energy (Goyal et al., ICLR 2022).

Example (a tabular model whose conditionals are given explicitly):
    >>> import mhfast
    >>> from mhfast.models.tabular import TabularMLM
    >>> model = TabularMLM.random(num_tokens=3, length=3, seed=0)
    >>> result = mhfast.sample(model, 3, chains=4, epochs=10, burn_in=2, seed=1, backend="reference")
    >>> result.tokens.shape, result.best_tokens.shape, result.e_local.shape
    (torch.Size([1, 4, 3]), torch.Size([1, 3]), torch.Size([10]))
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from . import schedules
from .backend import get_backend
from .block import block_step
from .rng import seed_from_generator
from .runner import ModelRunner
from .single_site import StepConfig, gibbs_step, mh_step
from .state import ChainState, EpochStats, rescore, warm_start

SAMPLERS = ("mh", "gibbs", "block-mh", "block-gibbs")
ENERGIES = ("raw", "local")
ORDERS = ("random", "left-to-right")
RECORDS = ("final", "epoch")
SELECTS = ("energy_per_token", "energy")


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
        target_temperature: f32[E] target temperature used in each epoch (section 8).
        model_rows: masked rows forwarded through the model (the cost unit of the benchmarks).
        model_calls: model invocations (sub-batches).
        history: Long[E - burn_in, B, C, T] end-of-epoch states after burn-in (``record="epoch"``).
        candidate_lengths: Long[B, length_beam] length candidates (``source=`` only).
        chosen_candidate: Long[B] index of the kept candidate per source (``source=`` only).
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
    candidate_lengths: torch.Tensor | None = None
    chosen_candidate: torch.Tensor | None = None


def _err(name: str, msg: str) -> ValueError:
    return ValueError(f"mhfast.sample: {name} {msg}")


def _check_choice(name: str, value: Any, choices: Sequence[str]) -> None:
    if value not in choices:
        raise _err(name, f"must be one of {', '.join(map(repr, choices))}, got {value!r}")


def _check_int(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise _err(name, f"must be an int >= {low}, got {value!r}")


def _check_positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise _err(name, f"must be a finite number > 0, got {value!r}")


def _check_model(model: Any) -> None:
    for attr in ("vocab_size", "mask_id", "pad_id", "special_ids"):
        if not hasattr(model, attr):
            raise TypeError(f"mhfast.sample: model has no attribute {attr!r} (see mhfast.models.base.MaskedLM)")
    if not callable(getattr(model, "masked_logits", None)):
        raise TypeError("mhfast.sample: model has no masked_logits method (see mhfast.models.base.MaskedLM)")


def _template(model: Any, length: int) -> torch.Tensor:
    """The unconditional starting row: ``model.frame(length)`` if the model has it, else all masks."""
    frame = getattr(model, "frame", None)
    if callable(frame):
        t = torch.as_tensor(frame(length), dtype=torch.long).cpu()
        if t.dim() != 1:
            raise ValueError(f"mhfast.sample: model.frame({length}) must return a 1-D LongTensor")
        return t
    return torch.full((length,), int(model.mask_id), dtype=torch.long)


def _pad_rows(rows: list[torch.Tensor], pad_id: int) -> torch.Tensor:
    T = max(r.shape[0] for r in rows)
    out = torch.full((len(rows), T), pad_id, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, :r.shape[0]] = r
    return out


def _block_schedule_check(block_schedule: Any, epochs: int) -> None:
    if block_schedule is None or callable(block_schedule):
        return
    if isinstance(block_schedule, bool):
        raise _err("block_schedule", f"must be None, an int, a list of ints or a callable, got {block_schedule!r}")
    if isinstance(block_schedule, int):
        _check_int("block_schedule", block_schedule, 1)
        return
    if isinstance(block_schedule, (list, tuple)):
        if len(block_schedule) != epochs:
            raise _err("block_schedule", f"has {len(block_schedule)} entries, expected one per epoch ({epochs})")
        for b in block_schedule:
            _check_int("block_schedule entries", b, 1)
        return
    raise _err("block_schedule", f"must be None, an int, a list of ints or a callable, got {block_schedule!r}")


def _input_index(input_ids: Any, num_ids: int, per_id: int, device: torch.device) -> torch.Tensor:
    """Long[num_ids * per_id]: the RNG input index of every sampler input (see ``input_ids``)."""
    if input_ids is None:
        return torch.arange(num_ids * per_id, device=device)
    if isinstance(input_ids, torch.Tensor):
        if input_ids.dtype not in (torch.int32, torch.int64) or input_ids.dim() != 1:
            raise _err("input_ids", f"must be a 1-D integer tensor, got {input_ids.dtype} of shape "
                       f"{tuple(input_ids.shape)}")
        ids = input_ids.to("cpu", torch.long)
    else:
        values = list(input_ids)
        if any(isinstance(v, bool) or not isinstance(v, int) for v in values):
            raise _err("input_ids", f"must be ints, got {values!r}")
        ids = torch.tensor(values, dtype=torch.long)
    if ids.numel() != num_ids:
        raise _err("input_ids", f"has {ids.numel()} entries, expected one per input/source ({num_ids})")
    if bool((ids < 0).any()):
        raise _err("input_ids", "must be >= 0")
    return (ids[:, None] * per_id + torch.arange(per_id)[None, :]).reshape(-1).to(device)


def sample(model: Any, length: int | None = None, *, init: torch.Tensor | None = None,
           free_positions: torch.Tensor | None = None, source: Any = None, length_beam: int = 1,
           energy: str = "raw", sampler: str = "mh", chains: int = 5, epochs: int = 33, burn_in: int = 7,
           order: str = "random", proposal_temperature: float = 1.0, top_p: float = 1.0,
           block_schedule: schedules.BlockSchedule = None, target_temperature: float = 1.0,
           anneal: float = 0.0, min_target_temperature: float = 0.05, force_accept_epochs: int = 0,
           seed: int = 0, generator: torch.Generator | None = None, device: Any = None,
           backend: str = "compiled", max_tokens_per_batch: int = 65536, record: str = "final",
           progress: Callable[[int, dict], None] | None = None,
           select: str = "energy_per_token", input_ids: Sequence[int] | torch.Tensor | None = None
           ) -> SampleResult:
    """Sample sequences from the energy network behind a masked LM with Metropolis-Hastings.

    Exactly one of ``length`` / ``init`` / ``source`` says what to sample:

    * ``length=T``: unconditional, one input of T free positions (``model.frame(T)`` may add
      fixed special tokens, e.g. ``[CLS] + [MASK]*T + [SEP]``).
    * ``init=Long[B, T]``: start from these rows (padded at the end with ``model.pad_id``; a
      row's length is its number of non-pad tokens). Energy positions: non-pad positions whose
      token is not special (``mask_id`` counts as not special: it is filled greedily first).
      ``free_positions`` (Bool[B, T]) restricts proposals for infilling; fixed positions still
      count in the energy.
    * ``source=...``: conditional generation (section 5): ``context = model.encode(source)``
      once, ``model.predict_lengths(context, length_beam)`` gives length candidates, each
      (source, length) pair is an input with its own chains, rows reuse the encoder output
      by ``context_index``. Per source the result keeps the candidate whose best sample has
      the lowest energy per token (``select="energy_per_token"``) or lowest energy
      (``select="energy"``).

    Args:
        energy: target energy, "raw" (section 2.1, -sum of raw logits) or "local" (section 2.2,
            -sum of masked log-probabilities).
        sampler: "mh" (single-site MH, Algorithm 1), "gibbs" (degenerate Gibbs of Wang & Cho,
            section 6: MLM proposal always accepted), "block-mh" (section 4.1 block proposal,
            exact MH ratio), "block-gibbs" (block proposal, always accepted; section 7.3).
        chains: Markov chains per input (section 5: 5). epochs: sweeps over the free positions
            (section 5: 7 burn-in + 26). burn_in: epochs before ``best_*``/``history`` record.
        order: "random" (a fresh permutation per chain and epoch) or "left-to-right" (section 4).
        proposal_temperature, top_p: the proposal variants of section 4.1 (7.1, 7.2).
        block_schedule: block size per epoch for the block samplers: an int, one int per epoch,
            or ``callable(epoch) -> int``; default linear shrink from ``max(1, n // 4)`` to 1 at
            the last epoch (appendix D), n = the input's free-position count. Blocks are
            successive chunks of the epoch's position order.
        target_temperature, anneal, min_target_temperature: target ``exp(-E / tau_e)`` with
            ``tau_e = max(min_target_temperature, target_temperature - anneal * e)`` in epoch e
            (section 8 uses anneal 0.02 / 0.04 / 0.06).
        force_accept_epochs: accept every proposal in the first F epochs (appendix F uses 2).
        seed / generator: all randomness is a hash of (seed, input, chain, epoch, step, stream),
            so chains do not depend on batch composition or ``max_tokens_per_batch``;
            ``generator`` (a torch.Generator) draws the seed instead.
        device: where chains live (default: ``model.device`` if it has one, else the device of
            ``init``, else CPU). backend: "compiled" (mhfast.ops) or "reference" (mhfast.reference);
            same seed -> same chains.
        max_tokens_per_batch: masked rows are forwarded in sub-batches of at most
            ``max(1, max_tokens_per_batch // T)`` rows.
        record: "final", or "epoch" to also return the end-of-epoch states after burn-in.
        progress: called as ``progress(epoch, stats_dict)`` after every epoch.
        input_ids: the RNG identity of each input (ints >= 0): one per ``init`` row (or the one
            ``length`` input), or one per source for ``source=`` (length candidate j of source
            ``s`` then draws as input ``input_ids[s] * length_beam + j``). Default ``0, 1, ...``.
            Sampling a long list in pieces with each piece's GLOBAL indices gives every input the
            random numbers it gets in one big call (``mhfast translate`` relies on it to resume).

    Returns:
        :class:`SampleResult`.
    """
    _check_model(model)
    given = [name for name, v in (("length", length), ("init", init), ("source", source)) if v is not None]
    if len(given) != 1:
        raise ValueError("mhfast.sample: give exactly one of length, init or source"
                         + (f" (got {', '.join(given)})" if given else " (got none)"))
    _check_choice("sampler", sampler, SAMPLERS)
    _check_choice("energy", energy, ENERGIES)
    _check_choice("order", order, ORDERS)
    _check_choice("record", record, RECORDS)
    _check_choice("select", select, SELECTS)
    _check_choice("backend", backend, ("compiled", "reference"))
    _check_int("chains", chains, 1)
    _check_int("epochs", epochs, 1)
    _check_int("burn_in", burn_in, 0)
    if epochs < burn_in:
        raise _err("epochs", f"({epochs}) must be >= burn_in ({burn_in})")
    _check_int("force_accept_epochs", force_accept_epochs, 0)
    _check_int("length_beam", length_beam, 1)
    _check_int("max_tokens_per_batch", max_tokens_per_batch, 1)
    _check_positive("proposal_temperature", proposal_temperature)
    _check_positive("target_temperature", target_temperature)
    _check_positive("min_target_temperature", min_target_temperature)
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not (0 < top_p <= 1):
        raise _err("top_p", f"must be in (0, 1], got {top_p!r}")
    if isinstance(anneal, bool) or not isinstance(anneal, (int, float)) or not math.isfinite(anneal) or anneal < 0:
        raise _err("anneal", f"must be a finite number >= 0, got {anneal!r}")
    _block_schedule_check(block_schedule, epochs)
    if generator is not None:
        seed = seed_from_generator(generator)
    elif isinstance(seed, bool) or not isinstance(seed, int):
        raise _err("seed", f"must be an int, got {seed!r}")
    if progress is not None and not callable(progress):
        raise _err("progress", "must be callable or None")

    V, mask_id, pad_id = int(model.vocab_size), int(model.mask_id), int(model.pad_id)
    context, candidate_lengths = None, None
    if length is not None:
        _check_int("length", length, 1)
        rows = _template(model, length)[None]
    elif init is not None:
        if not isinstance(init, torch.Tensor):
            raise TypeError(f"mhfast.sample: init must be a LongTensor, got {type(init).__name__}")
        if init.dtype != torch.long:
            raise TypeError(f"mhfast.sample: init must be int64, got {init.dtype}")
        if init.dim() != 2 or init.shape[0] == 0 or init.shape[1] == 0:
            raise _err("init", f"must have shape [B, T] with B, T >= 1, got {tuple(init.shape)}")
        rows = init
    else:
        if not (callable(getattr(model, "encode", None)) and callable(getattr(model, "predict_lengths", None))):
            raise TypeError("mhfast.sample: source= needs a conditional model with encode and predict_lengths")
        if free_positions is not None:
            raise _err("free_positions", "cannot be combined with source")
        context = model.encode(source)
        candidate_lengths = torch.as_tensor(model.predict_lengths(context, length_beam), dtype=torch.long).cpu()
        if candidate_lengths.dim() != 2 or candidate_lengths.shape[1] != length_beam:
            raise ValueError(f"mhfast.sample: model.predict_lengths must return Long[S, {length_beam}], got "
                             f"shape {tuple(candidate_lengths.shape)}")
        if bool((candidate_lengths < 1).any()):
            raise ValueError("mhfast.sample: model.predict_lengths returned a length < 1")
        rows = _pad_rows([_template(model, int(L)) for L in candidate_lengths.flatten().tolist()], pad_id)

    if device is None:
        device = getattr(model, "device", None) or (init.device if init is not None else torch.device("cpu"))
    device = torch.device(device)
    rows = rows.to(device)
    B, T = rows.shape
    if bool(((rows < 0) | (rows >= V)).any()):
        bad = int(rows[(rows < 0) | (rows >= V)][0])
        raise _err("init", f"contains token id {bad}, outside the vocabulary [0, {V})")
    is_pad = rows == pad_id
    if bool((is_pad[:, :-1] & ~is_pad[:, 1:]).any()):
        raise _err("init", f"must be padded at the end of each row (pad_id={pad_id} followed by a token)")
    if bool(is_pad.all(dim=1).any()):
        raise _err("init", "has a row of length 0 (only padding)")
    special = torch.zeros(V, dtype=torch.bool, device=device)
    special[torch.tensor([int(i) for i in model.special_ids if 0 <= int(i) < V], dtype=torch.long,
                         device=device)] = True
    special[pad_id] = True
    is_mask = rows == mask_id
    energy_mask = ~is_pad & (~special[rows] | is_mask)
    if free_positions is not None:
        if not isinstance(free_positions, torch.Tensor) or free_positions.dtype != torch.bool:
            raise TypeError("mhfast.sample: free_positions must be a BoolTensor")
        if tuple(free_positions.shape) != (B, T):
            raise _err("free_positions", f"must have shape {(B, T)} like init, got {tuple(free_positions.shape)}")
        free_positions = free_positions.to(device)
        if bool((free_positions & ~energy_mask).any()):
            raise _err("free_positions", "marks a position holding a special id or padding (only ordinary "
                       "tokens or mask_id can be free)")
        if bool((is_mask & ~free_positions).any()):
            raise _err("free_positions", "leaves a mask_id position fixed (masks must be free to be filled)")
        free = free_positions & energy_mask
    else:
        free = energy_mask.clone()
    if not bool(free.any()):
        raise _err("init" if init is not None else "length", "leaves no free position to sample")

    inputs_per_source = length_beam if source is not None else 1
    input_index = _input_index(input_ids, B // inputs_per_source, inputs_per_source, device)
    ctx_rows = (torch.arange(B, device=device) // inputs_per_source) if source is not None else None
    be = get_backend(backend)
    runner = ModelRunner(model, context, max_tokens_per_batch, device)
    start = warm_start(runner, rows, free, ctx_rows)

    M = B * chains
    rep = lambda t: t.repeat_interleave(chains, dim=0)  # noqa: E731
    state = ChainState(
        tokens=rep(start), energy_mask=rep(energy_mask), free=rep(free),
        inputs=rep(input_index), chain_ids=torch.arange(chains, device=device).repeat(B),
        ctx_index=rep(ctx_rows) if ctx_rows is not None else None, num_inputs=B, chains=chains, energy=energy,
        seed=seed)
    cfg = StepConfig(proposal_temperature, top_p, be, runner)
    is_gibbs = sampler in ("gibbs", "block-gibbs")
    is_block = sampler in ("block-mh", "block-gibbs")
    # Block sizes per epoch, on the host copy of the free counts (no device sync in the loop).
    block_sizes = [schedules.block_sizes(block_schedule, e, epochs, state.num_free_host) for e in range(epochs)
                   ] if is_block else []
    # Block MH makes single-site moves (from the cache) for one-position blocks: then it keeps
    # the cache, which costs no extra rows (accepted block moves store the rows of X' they computed).
    block_single_site = sampler == "block-mh" and any(
        schedules.uses_single_site(state.num_free_host, sizes) for sizes in block_sizes)
    if sampler in ("mh", "block-mh"):
        rescore(state, runner, be, keep_cache=sampler == "mh" or block_single_site)

    # Chains with a k-th free position take part in step k of every epoch (fixed: computed once).
    active_host = [(state.num_free_host > k).nonzero().squeeze(1) for k in range(int(state.num_free_host.max()))]
    active_at_step = [a.to(device) for a in active_host]
    e_raw_hist, e_local_hist, acc_hist, novel_hist, temps, history = [], [], [], [], [], []
    plans: list[schedules.BlockStep] = []
    plans_for = None  # the block sizes ``plans`` were made for
    for e in range(epochs):
        tau = schedules.target_temperature(float(target_temperature), float(anneal), float(min_target_temperature), e)
        temps.append(tau)
        beta = None if (is_gibbs or e < force_accept_epochs) else 1.0 / tau
        post = e >= burn_in
        stats = EpochStats()
        order_e = schedules.epoch_order(seed, state.free, state.inputs, state.chain_ids, e, order)
        if sampler in ("mh", "gibbs"):
            for k, act in enumerate(active_at_step):
                pos = order_e[act, k]
                if sampler == "mh":
                    mh_step(cfg, state, act, active_host[k], pos, beta, e, k, stats)
                    if post:
                        state.track_best()
                else:
                    gibbs_step(cfg, state, act, pos, e, k, stats)
        else:
            if plans_for is None or not torch.equal(block_sizes[e], plans_for):  # sizes repeat across epochs
                plans_for = block_sizes[e]
                plans = [schedules.block_step_plan(state.num_free_host, plans_for, k, block_single_site, device)
                         for k in range(schedules.steps_per_epoch(state.num_free_host, plans_for))]
            for k, plan in enumerate(plans):
                block_step(cfg, state, plan, order_e, beta, e, k, stats, gibbs=is_gibbs)
                if post and not is_gibbs:
                    state.track_best()
        if is_gibbs:
            rescore(state, runner, be)  # one T_e-row pass per epoch, for the statistics only
            if post:
                state.track_best()
        proposals = max(int(stats.proposals), 1)
        e_raw_hist.append(float(state.e_raw.mean()))
        e_local_hist.append(float(state.e_local.mean()))
        acc_hist.append(float(stats.accepted) / proposals)
        novel_hist.append(float(stats.novel) / proposals)
        if record == "epoch" and post:
            history.append(state.tokens.view(B, chains, T).clone())
        if progress is not None:
            progress(e, {"e_raw": e_raw_hist[-1], "e_local": e_local_hist[-1], "acceptance_rate": acc_hist[-1],
                         "novel_rate": novel_hist[-1], "target_temperature": tau, "model_rows": runner.model_rows})
    if epochs == burn_in:  # no post-burn-in epoch: the best state is the best final state
        state.track_best()

    best_e = state.best_energy.view(B, chains)
    best_chain = best_e.argmin(dim=1)
    ar = torch.arange(B, device=device)
    result = dict(
        tokens=state.tokens.view(B, chains, T),
        lengths=(~is_pad).sum(dim=1),
        best_tokens=state.best_tokens.view(B, chains, T)[ar, best_chain],
        best_energy=best_e[ar, best_chain],
        energy=state.target.view(B, chains).clone(),
        energy_raw=state.e_raw.view(B, chains).clone(),
        energy_local=state.e_local.view(B, chains).clone(),
        history=torch.stack(history) if history else None,  # [E - burn_in, B, C, T]
    )
    if record == "epoch" and result["history"] is None:
        result["history"] = torch.zeros(0, B, chains, T, dtype=torch.long, device=device)
    chosen = None
    if source is not None:
        S = B // length_beam
        num_energy = energy_mask.sum(dim=1).clamp(min=1).float()
        score = result["best_energy"] / num_energy if select == "energy_per_token" else result["best_energy"]
        chosen = score.view(S, length_beam).argmin(dim=1)
        keep = torch.arange(S, device=device) * length_beam + chosen
        for key in ("tokens", "lengths", "best_tokens", "best_energy", "energy", "energy_raw", "energy_local"):
            result[key] = result[key][keep]
        if result["history"] is not None:
            result["history"] = result["history"][:, keep]
    f32 = lambda xs: torch.tensor(xs, dtype=torch.float32)  # noqa: E731
    return SampleResult(
        **result, e_raw=f32(e_raw_hist), e_local=f32(e_local_hist), acceptance_rate=f32(acc_hist),
        novel_rate=f32(novel_hist), target_temperature=f32(temps), model_rows=runner.model_rows,
        model_calls=runner.model_calls, candidate_lengths=candidate_lengths, chosen_candidate=chosen)
