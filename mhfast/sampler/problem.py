"""What to sample: the starting rows, energy and free positions, RNG identities and the model context.

:func:`build_problem` turns ``length`` / ``init`` (+ ``free_positions``) / ``source`` into a
:class:`Problem` and checks every model-dependent input (token ids inside the vocabulary, padding
at the end, free positions that can be free, what ``frame``/``predict_lengths`` return), naming
the argument in a ``ValueError``/``TypeError``.

Example:
    >>> from mhfast.models.tabular import TabularMLM
    >>> from mhfast.sampler.options import config_from_kwargs
    >>> p = build_problem(TabularMLM.random(3, 4, seed=0), config_from_kwargs({}), length=4)
    >>> p.rows.shape, p.free.tolist()
    (torch.Size([1, 4]), [[True, True, True, True]])
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from ..ids import INT64_MAX, long_tensor
from ..energy_terms import normalize as normalize_terms
from ..models.base import check_model_ids, check_rows_fit, has_features, model_width, never_proposed
from ..runtime.attention import without_cudnn_attention
from .ladder import rungs
from .memo import ROWS_BUDGET_BYTES
from .options import display_name, resolved_memo
from .traces import PROJECTIONS
from .scalars import MAX_SIZE, as_int


def _err(name: str, msg: str) -> ValueError:
    return ValueError(f"mhfast.sample: {name} {msg}")


@dataclass(frozen=True)
class Problem:
    """The B sampler inputs (a source with a length beam of k counts as k inputs)."""

    rows: torch.Tensor  #: Long[B, T] starting rows (pad-padded at the end), on ``device``
    energy_mask: torch.Tensor  #: Bool[B, T] positions in the energy sum
    free: torch.Tensor  #: Bool[B, T] positions that get proposals
    is_pad: torch.Tensor  #: Bool[B, T]
    input_index: torch.Tensor  #: Long[B] RNG identity of each input
    device: torch.device
    context: Any = None  #: ``model.encode(source)`` for conditional models
    ctx_rows: torch.Tensor | None = None  #: Long[B] source of each input
    candidate_lengths: torch.Tensor | None = None  #: Long[S, k] (``source=`` only)
    inputs_per_source: int = 1
    term_index: torch.Tensor | None = None  #: Long[B] the input index energy terms see (init row / source)
    terms: Any = None  #: mhfast.energy_terms.EnergyTerms, or None without extra_energy

    @property
    def allowed(self) -> torch.Tensor | None:
        """Bool[B, T, V] allowed tokens per input row (AllowedTokens), or None."""
        if self.terms is None or self.terms.allowed is None:
            return None
        a = self.terms.allowed.to(self.device)
        return a.expand(self.rows.shape[0], -1, -1) if a.shape[0] == 1 else a[self.term_index]


def check_model(model: Any, where: str = "mhfast.sample") -> Any:
    """``model`` as the sampler takes it: a name, a directory, a hub id or a plain transformers model object is
    loaded (:func:`mhfast.models.loading.load_masked_lm`); then a TypeError naming ``where`` unless it implements
    :class:`mhfast.models.base.MaskedLM`."""
    if isinstance(model, (str, os.PathLike)) or (hasattr(model, "config") and not hasattr(model, "masked_logits")):
        from ..models.loading import load_masked_lm

        model = load_masked_lm(model)
    for attr in ("vocab_size", "mask_id", "pad_id", "special_ids"):
        if not hasattr(model, attr):
            raise TypeError(f"{where}: model has no attribute {attr!r} (see mhfast.models.base.MaskedLM)")
    if not callable(getattr(model, "masked_logits", None)):
        raise TypeError(f"{where}: model has no masked_logits method (see mhfast.models.base.MaskedLM)")
    check_model_ids(model, where)
    check_model_dtype(model, where)
    return model


def check_model_dtype(model: Any, where: str) -> None:
    """A ValueError naming the model's dtype for a float64 model (one whose ``dtype`` says so): the ops take
    float32, float16 or bfloat16 outputs, and without this the first op call failed deep inside, naming none of
    the caller's arguments (``mhfast.gather_energies: logits must be Float ...``)."""
    if getattr(model, "dtype", None) == torch.float64:
        raise ValueError(f"{where}: model is float64; mhfast computes in float32, float16 or bfloat16: load it "
                         "with dtype=torch.float32 (or one of the others)")


def _tensors_of(name: str, value: Any) -> list[tuple[str, torch.Tensor]]:
    """The tensors of an argument, named as messages show them: the tensor itself, or each tensor of a list."""
    if isinstance(value, torch.Tensor):
        return [(name, value)]
    if isinstance(value, (list, tuple)):
        return [(f"{name}[{i}]", v) for i, v in enumerate(value) if isinstance(v, torch.Tensor)]
    return []


def check_devices(where: str, **arguments: Any) -> None:
    """Every tensor argument (or tensor in a list argument) must hold values: a ValueError naming the argument
    and its device for one on the meta device (shapes only), before anything reads it; torch's own error, deep
    inside, names neither. Tensors on another device than the run's are fine: they are copied to it."""
    from .._validate import holds_values

    for name, value in arguments.items():
        for label, tensor in _tensors_of(name, value):
            holds_values(where, label, tensor)


def run_device(where: str, *candidates: tuple[str, Any], hint: str = "") -> torch.device:
    """The device a run computes on: the first device set among ``candidates`` (``(name, device)`` pairs in order
    of precedence, e.g. the ``device`` option, then ``model.device``, then ``init``'s device), else the CPU.
    Whatever it came from, it passes the ``device`` option's check (a cpu or cuda device that mhfast has kernels
    for); an error names where it came from, then ``hint``.

    Example:
        >>> run_device("f", ("device", None), ("model.device", "cpu"))
        device(type='cpu')
        >>> run_device("f", ("model.device", torch.device("meta")))
        Traceback (most recent call last):
        ...
        ValueError: f: model.device must be a cpu or cuda device, got 'meta'
    """
    from .options import OPTIONS

    for name, device in candidates:
        if device is None:
            continue
        try:
            OPTIONS["device"].check(str(device))
        except ValueError as e:
            raise ValueError(f"{where}: {name} {e}{hint}") from None
        return torch.device(device)
    return torch.device("cpu")


def check_model_device(where: str, model: Any, device: torch.device) -> None:
    """Raises where a model that says where its weights are (``model.device``) is elsewhere than the chains: the
    ``device`` option places the chains, not the model, and without this check the first forward fails deep inside
    with torch's "expected ... on the same device" (found on a GPU: a model loaded on the CPU, ``device="cuda"``).
    ``cuda`` and ``cuda:N`` match when N is the current CUDA device; a model without ``.device`` (e.g. a tabular one
    that follows its inputs) is not checked.

    Example:
        >>> class M: device = torch.device("cpu")
        >>> check_model_device("f", M(), torch.device("cpu"))
        >>> check_model_device("f", M(), torch.device("cuda"))
        Traceback (most recent call last):
        ...
        ValueError: f: device='cuda' but model.device is cpu: the chains would run where the model's weights are not; load the model on cuda (the loaders' device=, e.g. mhfast.models.sapiens.load_sapiens(device='cuda')) or leave device unset
    """
    model_device = getattr(model, "device", None)
    if model_device is None:
        return
    model_device = torch.device(model_device)

    def index(d: torch.device) -> int | None:
        if d.type != "cuda":
            return None
        return d.index if d.index is not None else (torch.cuda.current_device() if torch.cuda.is_available() else 0)

    if model_device.type != device.type or index(model_device) != index(device):
        raise ValueError(f"{where}: device={str(device)!r} but model.device is {model_device}: the chains would run "
                         f"where the model's weights are not; load the model on {device} (the loaders' device=, e.g. "
                         f"mhfast.models.sapiens.load_sapiens(device={str(device)!r})) or leave device unset")


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


def _input_index(input_ids: Any, num_ids: int, per_id: int, device: torch.device) -> torch.Tensor:
    """Long[num_ids * per_id]: the RNG input index of every sampler input (see ``input_ids``)."""
    if input_ids is None:
        return torch.arange(num_ids * per_id, device=device)
    if isinstance(input_ids, torch.Tensor):
        if input_ids.dtype not in (torch.int32, torch.int64) or input_ids.dim() != 1:
            raise _err("input_ids", f"must be a 1-D integer tensor, got {input_ids.dtype} of shape "
                       f"{tuple(input_ids.shape)}")
        ids = input_ids.to("cpu", torch.long)
        if bool((ids >= INT64_MAX // per_id).any()):  # as a list's ids: times per_id must stay an int64
            raise _err("input_ids:", f"value {int(ids.max())} is outside [0, {INT64_MAX // per_id})")
    else:
        if isinstance(input_ids, (str, bytes)) or not hasattr(input_ids, "__iter__"):
            raise TypeError(f"mhfast.sample: input_ids must be a sequence of ints or a 1-D integer tensor, got "
                            f"{type(input_ids).__name__}")
        given = list(input_ids)
        values = [as_int(v) for v in given]
        if any(v is None for v in values):
            raise _err("input_ids", f"must be ints, got {given!r}")
        if any(v < 0 for v in values):
            raise _err("input_ids", "must be >= 0")
        # each id times per_id (plus j) is the RNG's int64 input index
        ids = long_tensor(values, "mhfast.sample: input_ids: value", 0, INT64_MAX // per_id)
    if ids.numel() != num_ids:
        raise _err("input_ids", f"has {ids.numel()} entries, expected one per input/source ({num_ids})")
    if bool((ids < 0).any()):  # a tensor's ids
        raise _err("input_ids", "must be >= 0")
    return (ids[:, None] * per_id + torch.arange(per_id)[None, :]).reshape(-1).to(device)


def rows_from_init(init: Any, where: str = "mhfast.sample") -> torch.Tensor:
    """``init`` checked to be a Long[B, T] tensor with B, T >= 1; errors read ``"<where>: init ..."``."""
    if not isinstance(init, torch.Tensor):
        raise TypeError(f"{where}: init must be a LongTensor, got {type(init).__name__}")
    if init.dtype != torch.long:
        raise TypeError(f"{where}: init must be int64, got {init.dtype}")
    if init.dim() != 2 or init.shape[0] == 0 or init.shape[1] == 0:
        raise ValueError(f"{where}: init must have shape [B, T] with B, T >= 1, got {tuple(init.shape)}")
    return init


def _rows_from_source(model: Any, source: Any, length_beam: int, free_positions: Any):
    """(context, candidate lengths Long[S, k], rows Long[S*k, T]) of a conditional model."""
    if not (callable(getattr(model, "encode", None)) and callable(getattr(model, "predict_lengths", None))):
        raise TypeError("mhfast.sample: source= needs a conditional model with encode and predict_lengths")
    if free_positions is not None:
        raise _err("free_positions", "cannot be combined with source")
    with without_cudnn_attention(getattr(model, "device", None)):  # a plan per new shape: runtime/attention.py
        context = model.encode(source)
    candidate_lengths = torch.as_tensor(model.predict_lengths(context, length_beam), dtype=torch.long).cpu()
    if candidate_lengths.dim() != 2 or candidate_lengths.shape[1] != length_beam:
        raise ValueError(f"mhfast.sample: model.predict_lengths must return Long[S, {length_beam}], got "
                         f"shape {tuple(candidate_lengths.shape)}")
    if bool((candidate_lengths < 1).any()):
        raise ValueError("mhfast.sample: model.predict_lengths returned a length < 1")
    rows = _pad_rows([_template(model, int(L)) for L in candidate_lengths.flatten().tolist()], int(model.pad_id))
    return context, candidate_lengths, rows


def checked_padding(model: Any, rows: torch.Tensor, where: str = "mhfast.sample", name: str = "init") -> torch.Tensor:
    """Bool[B, T], where ``rows`` (Long[B, T]) hold ``model.pad_id``, after checking that every id is in the
    vocabulary, that padding comes only at the end of a row and that no row is padding only; errors read
    ``"<where>: <name> ..."``. Shared by :func:`mhfast.sample` (its inputs and per-chain starts) and
    :func:`mhfast.energy` (the sequences it scores), so both refuse the same rows in the same words.

        >>> from mhfast.models.tabular import TabularMLM
        >>> m = TabularMLM.random(3, 4, seed=0)  # vocabulary 5, pad_id 4
        >>> checked_padding(m, torch.tensor([[0, 1, 4]])).tolist()
        [[False, False, True]]
        >>> checked_padding(m, torch.tensor([[4, 1]]), "f", "rows")
        Traceback (most recent call last):
        ValueError: f: rows must be padded at the end of each row (pad_id=4 followed by a token)
    """
    V, pad_id = int(model.vocab_size), int(model.pad_id)
    bad = (rows < 0) | (rows >= V)
    if bool(bad.any()):
        raise ValueError(f"{where}: {name} contains token id {int(rows[bad][0])}, outside the vocabulary [0, {V})")
    is_pad = rows == pad_id
    if bool((is_pad[:, :-1] & ~is_pad[:, 1:]).any()):
        raise ValueError(f"{where}: {name} must be padded at the end of each row (pad_id={pad_id} followed by a "
                         "token)")
    if bool(is_pad.all(dim=1).any()):
        raise ValueError(f"{where}: {name} has a row of length 0 (only padding)")
    return is_pad


def _energy_mask(model: Any, rows: torch.Tensor, name: str = "init") -> tuple[torch.Tensor, torch.Tensor]:
    """(is_pad, energy positions) of checked rows (:func:`checked_padding`, whose errors name the rows ``name``):
    non-pad positions holding an ordinary token (``never_proposed``'s complement) or ``mask_id``."""
    is_pad = checked_padding(model, rows, name=name)
    return is_pad, ~is_pad & (~never_proposed(model, rows.device)[rows] | (rows == int(model.mask_id)))


def checked_positions(free_positions: Any, energy_mask: torch.Tensor, where: str, like: str, allowed: str
                      ) -> torch.Tensor:
    """``free_positions`` checked to be a Bool tensor shaped like ``energy_mask`` that marks only energy
    positions, on its device; errors read ``"<where>: free_positions ..."`` (``like``: the argument it must
    match, ``allowed``: what may be marked). Shared by :func:`mhfast.sample` and :func:`mhfast.energy`."""
    if not isinstance(free_positions, torch.Tensor) or free_positions.dtype != torch.bool:
        raise TypeError(f"{where}: free_positions must be a BoolTensor")
    if tuple(free_positions.shape) != tuple(energy_mask.shape):
        raise ValueError(f"{where}: free_positions must have shape {tuple(energy_mask.shape)} like {like}, got "
                         f"{tuple(free_positions.shape)}")
    free_positions = free_positions.to(energy_mask.device)
    if bool((free_positions & ~energy_mask).any()):
        raise ValueError(f"{where}: free_positions marks a position holding a special id or padding ({allowed})")
    return free_positions


def _free(free_positions: Any, rows: torch.Tensor, energy_mask: torch.Tensor, mask_id: int) -> torch.Tensor:
    """The free positions: ``free_positions`` checked against the rows, else every energy position."""
    if free_positions is None:
        return energy_mask.clone()
    free_positions = checked_positions(free_positions, energy_mask, "mhfast.sample", "init",
                                       "only ordinary tokens or mask_id can be free")
    if bool(((rows == mask_id) & ~free_positions).any()):
        raise _err("free_positions", "leaves a mask_id position fixed (masks must be free to be filled)")
    return free_positions & energy_mask


def build_problem(model: Any, cfg: Any, *, length: int | None = None, init: torch.Tensor | None = None,
                  free_positions: torch.Tensor | None = None, source: Any = None,
                  input_ids: Sequence[int] | torch.Tensor | None = None) -> Problem:
    """The :class:`Problem` of one :func:`mhfast.sample` call (exactly one of length/init/source)."""
    given = [name for name, v in (("length", length), ("init", init), ("source", source)) if v is not None]
    if len(given) != 1:
        raise ValueError("mhfast.sample: give exactly one of length, init or source"
                         + (f" (got {', '.join(given)})" if given else " (got none)"))
    check_devices("mhfast.sample", init=init, free_positions=free_positions, source=source, input_ids=input_ids)
    context = candidate_lengths = None
    if length is not None:
        if as_int(length) is None or not 1 <= length <= MAX_SIZE:  # (beyond: float overflow in the memory check)
            raise _err("length", f"must be an int in [1, {MAX_SIZE}], got {length!r}")
        length = as_int(length)
        if free_positions is not None:  # the row is all masks, and masks must be free: nothing to choose
            raise _err("free_positions", "cannot be combined with length (every masked position is free); pass "
                                         "init= with the fixed tokens in place to fix some")
        check_slots(model, 1, int(cfg.chains), length, cfg.device, "length",  # before the template row exists
                    rungs(cfg.tempering), **footprint(cfg))
        rows = _template(model, length)[None]
    elif init is not None:
        rows = rows_from_init(init)
    else:
        context, candidate_lengths, rows = _rows_from_source(model, source, cfg.length_beam, free_positions)
    device = run_device("mhfast.sample", ("device", cfg.device), ("model.device", getattr(model, "device", None)),
                        ("init's device", init.device if init is not None else None),
                        hint=" (the chains live there unless device= says otherwise)")
    check_model_device("mhfast.sample", model, device)
    given = "init" if init is not None else "length" if length is not None else "source"  # the argument named
    _check_size(model, cfg, rows, given, device)
    rows = rows.to(device)
    # the rows' origin, as errors about them name it (a frame the model made is not the user's init)
    origin = {"init": "init", "length": f"model.frame({length})", "source": "the rows model.frame made for source"}
    is_pad, energy_mask = _energy_mask(model, rows, origin[given])
    free = _free(free_positions, rows, energy_mask, int(model.mask_id))
    _check_each_row_moves(free, "free_positions" if free_positions is not None else given)
    per_source = cfg.length_beam if source is not None else 1
    B = rows.shape[0]
    term_index = torch.arange(B, device=device) // per_source
    terms = normalize_terms(cfg.extra_energy, B // per_source, rows.shape[1], int(model.vocab_size))
    if terms is not None:
        try:
            terms.check_rows(rows, term_index, int(model.pad_id))
        except ValueError as e:
            raise _err("extra_energy:", str(e)) from None
    problem = Problem(rows=rows, energy_mask=energy_mask, free=free, is_pad=is_pad,
                      input_index=_input_index(input_ids, B // per_source, per_source, device), device=device,
                      context=context, ctx_rows=term_index if source is not None else None,
                      candidate_lengths=candidate_lengths, inputs_per_source=per_source, term_index=term_index,
                      terms=terms)
    _check_allowed(problem, model)
    return problem


def _check_each_row_moves(free: torch.Tensor, what: str) -> None:
    """Every input must have a free position. Checked per row, not for the batch: whether a call fails must not
    depend on which rows share it (mhfast.distributed and ``mhfast sample`` under torchrun shard the rows)."""
    still = ~free.any(dim=1)
    if bool(still.any()):
        row = int(still.nonzero()[0, 0])
        raise _err(f"{what} row {row}" if free.shape[0] > 1 else what, "leaves no free position to sample")


#: Most token slots (inputs x chains x positions) one call may hold: index arithmetic of the ops and
#: torch's own kernels is only tested up to 2**31 elements, and far fewer fit in memory anyway.
MAX_TOKEN_SLOTS = 2 ** 31 - 1
#: Bytes the sampler's state holds per token slot at least: the token (8), three position masks (3),
#: the raw and local energy terms (8), the best state's tokens (8).
BYTES_PER_SLOT = 27
#: Bytes of per-chain vectors (input and chain ids, RNG key, energies, best energy, proposal counts, ...).
BYTES_PER_CHAIN = 96


def available_memory(device: Any) -> int | None:
    """Bytes that can still be allocated on ``device``: free GPU memory, or ``MemAvailable`` of /proc/meminfo on
    CPU (physical RAM where that cannot be read); None where neither can be asked."""
    try:
        dev = torch.device(device if device is not None else "cpu")
        if dev.type == "cuda":
            return int(torch.cuda.mem_get_info(dev)[0])
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (AttributeError, ValueError, OSError, RuntimeError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError):
        return None


def state_bytes(model: Any, inputs: int, chains: int, T: int, *, replicas: int = 1, memo: int = 0) -> int:
    """What ``inputs x chains`` chains (``replicas`` each, under tempering) of rows of ``T`` tokens hold at once,
    about: per token slot the state (:data:`BYTES_PER_SLOT`), the masked copies the first scoring builds (a row of
    T tokens per position) and the model output kept per position (the MH cache: d features, or V logits); per
    chain its vectors and what a step builds for it (a masked row and the V-wide proposal logits and
    probabilities); the proposal memo's ``memo`` entries per chain (:mod:`mhfast.sampler.memo`: ids and two
    terms per position, and the model rows it keeps where they fit its rows budget); per returned chain the random
    projections' float64 temporaries of a traced sweep.

    Not counted: the traces, which grow as the run goes (5 or more floats per chain and traced sweep, in a buffer
    that doubles), since ``epochs`` may be a cap the run never reaches (``until_rhat``, a ``progress`` callback
    that stops it). Measured (the peak RSS of two epochs with 2,000 to 80,000 chains, 2026-12-02) the marginal
    cost of a chain is 0.9-1.6x this on the tests' tiny models (T <= 16, d = 16; memo on and off, tempered) and
    1.4x on Sapiens (T=22, d=128); it had been 3-6x and 1.7x before the memo counted. The model's sub-batch
    activations come on top. An estimate, then: a run the check lets through may still need about 1.6x this, and
    one it refuses would have needed at least about 0.9x of it.

    Example:
        >>> from mhfast.models.tabular import TabularMLM
        >>> lm = TabularMLM.random(3, 4, seed=0)
        >>> state_bytes(lm, 1, 10, 4, memo=8) > state_bytes(lm, 1, 10, 4)   # the memo's entries count
        True
    """
    vocab = int(model.vocab_size)
    width = (model_width(model) if has_features(model) else None) or vocab
    returned = inputs * chains
    chains_total = returned * replicas
    per_slot = BYTES_PER_SLOT + 8 * T + 4 * width
    per_chain = BYTES_PER_CHAIN + 8 * T + 8 * vocab + memo * (16 + 16 * T)  # memo: stamp, hash, ids, two terms
    memo_rows = chains_total * memo * T * width * 4  # kept only within the memo's rows budget
    memo_rows = memo_rows if memo_rows <= ROWS_BUDGET_BYTES else 0
    projections = PROJECTIONS * T * 5 * 8  # a traced sweep's lanes, uniforms and normals
    return chains_total * (T * per_slot + per_chain) + memo_rows + returned * projections


def check_slots(model: Any, inputs: int, chains: int, T: int, device: Any, what: str, replicas: int = 1, *,
                memo: int = 0) -> None:
    """Reject ``inputs x chains x replicas`` chains of ``T`` tokens that cannot be held (index range, or more bytes
    than :func:`state_bytes` says they need than ``device`` has available) before anything of that size is
    allocated: a ValueError naming ``what`` and the chains option (``--chains`` from the command line), and the
    tempering option where ``replicas`` (its K rungs: every chain runs K replicas in the same batch) is above 1;
    never an allocation failure or an out-of-memory kill halfway through. ``memo``: the proposal memo's entries
    per chain (:func:`footprint`).

    Example:
        >>> from mhfast.models.tabular import TabularMLM
        >>> check_slots(TabularMLM.random(3, 3, seed=0), 1, 5, 3, "cpu", "length", replicas=4)  # fits: nothing
        >>> check_slots(TabularMLM.random(3, 3, seed=0), 1, 5, 3, "cpu", "length", replicas=10 ** 9)
        Traceback (most recent call last):
        ...
        ValueError: mhfast.sample: length x chains x tempering: 1 input(s) x 5 chains x 1000000000 replicas x 3 ...
    """
    rows = inputs * chains * replicas
    slots = rows * T
    need = state_bytes(model, inputs, chains, T, replicas=replicas, memo=memo)
    memory = available_memory(device)
    if slots <= MAX_TOKEN_SLOTS and (memory is None or need <= memory):
        return
    chains_name, tempering_name = display_name("chains"), display_name("tempering")
    limit = f"the index limit of {MAX_TOKEN_SLOTS} token slots" if slots > MAX_TOKEN_SLOTS else \
        f"the {memory / 2 ** 30:.1f} GiB available on {torch.device(device or 'cpu')}"
    names, lower = (f"{chains_name} x {tempering_name}", f"{chains_name} or {tempering_name}") if replicas > 1 else \
        (chains_name, chains_name)
    many = f" x {replicas} replicas" if replicas > 1 else ""
    raise _err(what, f"x {names}: {inputs} input(s) x {chains} chains{many} x {T} positions = {slots} token slots "
               f"need about {need / 2 ** 30:.1f} GiB (chain state, masked copies, per-position model outputs), "
               f"more than {limit}: lower {lower}, or use shorter rows or fewer inputs at once")


def footprint(cfg: Any) -> dict[str, int]:
    """The options that size a run's memory beside its chains: ``memo``, the proposal memo's entries per chain
    (as ``memo="auto"`` resolves where the memo acts).

    Example:
        >>> from mhfast.sampler.options import config_from_kwargs
        >>> footprint(config_from_kwargs({})), footprint(config_from_kwargs({"sampler": "gibbs"}))
        ({'memo': 8}, {'memo': 0})
    """
    return {"memo": resolved_memo(cfg, extra_terms=cfg.extra_energy is not None, delayed=cfg.delayed is not None)}


def _check_size(model: Any, cfg: Any, rows: torch.Tensor, what: str, device: Any) -> None:
    """Reject rows longer than the model's position table (:func:`mhfast.models.base.check_rows_fit`, naming
    the row) and chains that cannot be held, before any allocation (never a crash deep inside the model)."""
    check_rows_fit(model, rows, int(model.pad_id), lambda b: f"mhfast.sample: {what} row {b}")
    # a tempered chain is K replicas in the same batch (tempering.Tempered.init copies each chain's start K times)
    check_slots(model, int(rows.shape[0]), int(cfg.chains), int(rows.shape[1]), device, what, rungs(cfg.tempering),
                **footprint(cfg))


def _check_allowed(problem: Problem, model: Any) -> None:
    """An AllowedTokens mask must leave every free position a token, and allow what init holds there."""
    allowed = problem.allowed
    if allowed is None:
        return
    usable = (allowed & ~never_proposed(model, allowed.device)).any(dim=2)
    if bool((problem.free & ~usable).any()):
        b, t = (problem.free & ~usable).nonzero()[0].tolist()
        raise _err("extra_energy", f"AllowedTokens allows no ordinary token at free position {t} of input {b}")
    fixed_tok = problem.free & (problem.rows != int(model.mask_id))
    held = allowed.gather(2, problem.rows[:, :, None]).squeeze(2)
    if bool((fixed_tok & ~held).any()):
        b, t = (fixed_tok & ~held).nonzero()[0].tolist()
        raise _err("extra_energy", f"AllowedTokens forbids token {int(problem.rows[b, t])} that init holds at free "
                   f"position {t} of input {b} (start from allowed tokens, or mask that position)")
