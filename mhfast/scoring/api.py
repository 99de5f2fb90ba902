"""``mhfast.energy``: the paper's two energies (and PLL) of given sequences, no sampling.

``E_raw(X) = -sum_t logit_t(x_t | X\\t)`` and ``E_local(X) = -sum_t log p(x_t | X\\t)`` over the
energy positions (non-pad, non-special tokens; paper, sections 2.1-2.2). ``-E_local`` is the
pseudo-log-likelihood (PLL) of Wang & Cho 2019 / Salazar et al. 2020. The terms are computed by
:func:`mhfast.scoring.terms.masked_terms` on the sampler's own runner and ops, so they equal the
energies :func:`mhfast.sample` reports for the same states.

Example:
    >>> import torch, mhfast
    >>> from mhfast.models.tabular import TabularMLM
    >>> model = TabularMLM.random(num_tokens=3, length=3, seed=0)
    >>> e = mhfast.energy(model, torch.tensor([[0, 1, 2], [2, 2, 1]]))
    >>> e_raw, e_local = e                      # a named tuple: by position or by name
    >>> e.e_local.shape, bool((e.e_local > 0).all())
    (torch.Size([2]), True)
"""
from __future__ import annotations

import functools
from collections import namedtuple
from typing import Any, Sequence

import torch

from ..ids import id_row
from ..models.base import check_length, check_model_ids, check_rows_fit, never_proposed
from ..runtime.backend import get_backend
from ..sampler.problem import check_devices, check_model_dtype, checked_padding, checked_positions, run_device
from ..sampler.scalars import MAX_SIZE, as_int
from ..runtime.runner import ModelRunner, sum_terms
from . import budget as memory_budget
from ..models.fast_forward import fast_forward_model
from .terms import masked_terms

ENERGIES = ("raw", "local")


class Energies(namedtuple("Energies", ["e_raw", "e_local"])):
    """``(e_raw, e_local)``, each f32[B] (None for an energy not asked for).

    With ``per_position=True`` also ``raw_terms`` / ``local_terms`` f32[B, T] (the per-token
    terms, 0 at positions outside the energy); otherwise these attributes are None. With
    ``extra_energy=`` also ``terms`` f32[B, K] (each term's unweighted value), ``term_names`` and
    ``e_extra`` f32[B] (the weighted sum: the sampler's target energy is ``e_raw`` or ``e_local``
    plus ``e_extra``). Unpacks as a pair: ``e_raw, e_local = mhfast.energy(...)``.
    """

    def __new__(cls, e_raw: Any, e_local: Any, raw_terms: Any = None, local_terms: Any = None,
                terms: Any = None, term_names: Any = None, e_extra: Any = None) -> "Energies":
        self = super().__new__(cls, e_raw, e_local)
        self.raw_terms, self.local_terms = raw_terms, local_terms
        self.terms, self.term_names, self.e_extra = terms, term_names, e_extra
        return self

    _EXTRA = ("raw_terms", "local_terms", "terms", "term_names", "e_extra")

    def _replace(self, **changes: Any) -> "Energies":
        """A copy with ``changes`` (any field, the extra ones too): the namedtuple's own dropped the extras."""
        fields = {name: getattr(self, name) for name in (*self._fields, *self._EXTRA)}
        unknown = set(changes) - set(fields)
        if unknown:
            raise ValueError(f"Energies._replace: unknown field(s) {sorted(unknown)}")
        return type(self)(**{**fields, **changes})


def _err(name: str, msg: str, where: str = "mhfast.energy") -> ValueError:
    return ValueError(f"{where}: {name} {msg}")


def translator_of(model: Any) -> Any:
    """``model`` when it is a :class:`mhfast.translation.Translator` (a CMLM with its text processing), else None."""
    return model if hasattr(model, "cmlm") and hasattr(model, "processor") else None


def translator_sources(translator: Any, source: Any) -> Any:
    """``source`` with each string encoded as the translator encodes a raw sentence (SentencePiece for the bundled
    model). A CMLM alone looks a string's words up in its dictionary as they are (its own ``tokenizer``, if any,
    first): raw text there would become mostly ``<unk>``. Anything but a list is left for the checks to name."""
    if translator is None or isinstance(source, (str, torch.Tensor)) or not isinstance(source, Sequence):
        return source
    return [translator.source_ids(s) if isinstance(s, str) else s for s in source]


def as_model(model: Any, where: str = "mhfast.energy") -> Any:
    """The model protocol object of anything the sampler accepts, a transformers model object, a
    local directory or a hub id (``mhfast.models.loading.load_masked_lm``)."""
    from ..models.loading import load_masked_lm

    lm = load_masked_lm(model)
    for attr in ("vocab_size", "mask_id", "pad_id", "special_ids"):
        if not hasattr(lm, attr):
            raise TypeError(f"{where}: model has no attribute {attr!r} (see mhfast.models.base.MaskedLM)")
    check_model_ids(lm, where, sampling=False)
    check_model_dtype(lm, where)
    return lm


def check_options(where: str, max_tokens_per_batch: Any, backend: Any, **flags: Any) -> int | None:
    """The plain options of :func:`energy` and :func:`mhfast.score`, before any work; errors name ``where`` and
    the option (``flags``: options that must be True or False, e.g. ``per_position``). Returns
    ``max_tokens_per_batch`` as a Python int (numpy's ints taken, as :func:`mhfast.sample` takes them) or None."""
    if max_tokens_per_batch is not None:
        budget = as_int(max_tokens_per_batch)
        if budget is None or not 1 <= budget <= MAX_SIZE:
            raise _err("max_tokens_per_batch", f"must be an int in [1, {MAX_SIZE}] or None (from free memory), got "
                       f"{max_tokens_per_batch!r}", where)
        max_tokens_per_batch = budget
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise TypeError(f"{where}: {name} must be True or False, got {value!r}")
    get_backend(backend, where)
    return max_tokens_per_batch


def pad_sequences(tokens: Any, pad_id: int, vocab_size: int | None = None) -> torch.Tensor:
    """Long[B, T] from a Long[B, T] tensor (returned as is) or a list of 1-D token id sequences (ids checked to
    lie in the vocabulary [0, ``vocab_size``) before they become a tensor)."""
    if isinstance(tokens, torch.Tensor):
        if tokens.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"mhfast.energy: tokens must be an int64 or int32 tensor, got {tokens.dtype}")
        if tokens.dim() == 1:
            tokens = tokens[None]
        if tokens.dim() != 2 or 0 in tokens.shape:
            raise _err("tokens", f"must have shape [B, T] with B, T >= 1, got {tuple(tokens.shape)}")
        return tokens.long()
    if isinstance(tokens, (str, bytes)) or not isinstance(tokens, Sequence) or len(tokens) == 0:
        raise TypeError("mhfast.energy: tokens must be a LongTensor [B, T] or a non-empty list of token id sequences")
    rows = []
    for b, seq in enumerate(tokens):
        row = id_row(seq, f"mhfast.energy: tokens[{b}]", vocab_size, f"mhfast.energy: tokens[{b}]: token id")
        if row.numel() == 0:
            raise _err(f"tokens[{b}]", "must be a non-empty 1-D sequence of token ids")
        rows.append(row)
    out = torch.full((len(rows), max(len(r) for r in rows)), int(pad_id), dtype=torch.long)
    for b, row in enumerate(rows):
        out[b, :len(row)] = row
    return out


def energy_positions(model: Any, tokens: torch.Tensor, where: str = "mhfast.energy", name: str = "tokens"
                     ) -> torch.Tensor:
    """Bool[B, T]: the positions in the energy (the sampler's rule: non-pad, non-special), checked; errors read
    ``"<where>: <name> ..."``."""
    checked_padding(model, tokens, where, name)
    mask_id = int(model.mask_id)
    if bool((tokens == mask_id).any()):
        b, t = (tokens == mask_id).nonzero()[0].tolist()
        raise _err(name, f"holds mask_id ({mask_id}) at row {b}, position {t}: scoring needs complete "
                   "sequences (for a CMLM, a word missing from the target dictionary becomes <unk>, its mask)", where)
    return ~never_proposed(model, tokens.device)[tokens]  # (mask_id is refused above: the ordinary tokens)


def checked_sources(model: Any, source: Sequence[Any], where: str, name: str,
                    indices: Sequence[int] | None = None) -> list[Any]:
    """Each source as the conditional model's token ids (``model.source_ids``, framed as it encodes them), checked
    to fit its source positions; an error names ``where`` and ``name[k]``, ``k`` the caller's index of the
    source (``indices[j]`` for the j-th; the kept sources of a batch with empty targets). Errors had come from
    the batch collation, naming the position among the kept sources and no caller ("sources[0] has 1030
    tokens" for sources[1]), and a tensor source was measured before its EOS was added. A model without
    ``source_ids`` (a test's tabular one) gets its sources as given.

    Example:
        >>> class Cmlm:
        ...     max_source_positions = 3
        ...     def source_ids(self, s): return torch.tensor(s + [2])
        >>> checked_sources(Cmlm(), [[5], [5, 6, 7]], "mhfast.energy", "source")
        Traceback (most recent call last):
        ...
        ValueError: mhfast.energy: source[1] has 4 tokens (special tokens included), more than the model's maximum ...
    """
    if not callable(getattr(model, "source_ids", None)):
        return list(source)
    out = []
    for j, s in enumerate(source):
        label = f"{where}: {name}[{indices[j] if indices is not None else j}]"
        try:
            ids = model.source_ids(s)
        except (ValueError, TypeError) as e:
            msg = str(e)
            msg = msg[len("sources: "):] if msg.startswith("sources: ") else msg  # the adapter's own prefix
            raise type(e)(f"{label}: {msg}") from None
        check_length(model, int(ids.numel()), label, side="source")
        out.append(ids)
    return out


def _score_mask(free_positions: Any, energy_mask: torch.Tensor) -> torch.Tensor:
    if free_positions is None:
        return energy_mask
    return checked_positions(free_positions, energy_mask, "mhfast.energy", "tokens", "only ordinary tokens are scored")


def _context(model: Any, source: Any, B: int, device: torch.device) -> tuple[Any, torch.Tensor | None]:
    if source is None:
        if callable(getattr(model, "predict_lengths", None)):
            raise _err("source", "is required: the model is conditional (one source per sequence)")
        return None, None
    if not callable(getattr(model, "encode", None)) or not callable(getattr(model, "predict_lengths", None)):
        raise _err("source", "needs a conditional model (with encode and predict_lengths)")
    if isinstance(source, (str, torch.Tensor)) or not isinstance(source, Sequence) or len(source) != B:
        raise _err("source", f"must be a list of one source per sequence ({B})")
    encoded = model.encode(checked_sources(model, list(source), "mhfast.energy", "source"))
    return encoded, torch.arange(B, device=device)


def _check_energy(energy: Any) -> tuple[str, ...]:
    names = (energy,) if isinstance(energy, str) else tuple(energy) if isinstance(energy, (list, tuple)) else None
    if not names or any(n not in ENERGIES for n in names):
        raise _err("energy", f"must be 'raw', 'local' or a tuple of them, got {energy!r}")
    return names


def compute_terms(model: Any, tokens: torch.Tensor, score_mask: torch.Tensor, *, source: Any = None,
                  word_ids: torch.Tensor | None = None, max_tokens_per_batch: int | None = None,
                  backend: str = "compiled") -> tuple[torch.Tensor, torch.Tensor]:
    """(raw, local) terms f32[B, T] of checked inputs; rows are scored longest first, returned in order."""
    device = run_device("mhfast.energy", ("model.device", getattr(model, "device", None)),
                        ("tokens' device", tokens.device), hint=" (the sequences are scored there)")
    tokens, score_mask = tokens.to(device), score_mask.to(device)
    context, ctx_index = _context(model, source, tokens.shape[0], device)
    lengths = (tokens != int(model.pad_id)).sum(dim=1)
    order = torch.argsort(lengths, descending=True, stable=True)
    T = int(lengths.max())
    budget, tokens_for = max_tokens_per_batch, None
    if budget is None:  # each chunk sized for its own rows' width (auto_max_tokens says why), from one reading
        tokens_for = functools.partial(memory_budget.auto_max_tokens, model, device,
                                       memory=memory_budget.free_memory(device))
        budget = tokens_for(T)
    runner = ModelRunner(fast_forward_model(model), context, budget, device)  # same terms, less work
    raw, local = masked_terms(runner, get_backend(backend), tokens.index_select(0, order)[:, :T],
                              score_mask.index_select(0, order)[:, :T], max_tokens=budget, tokens_for=tokens_for,
                              ctx_index=None if ctx_index is None else ctx_index.index_select(0, order),
                              word_ids=None if word_ids is None else word_ids.to(device).index_select(0, order)[:, :T],
                              lengths=lengths.index_select(0, order))
    full = tokens.shape[1]
    out_raw, out_local = raw.new_zeros(tokens.shape[0], full), local.new_zeros(tokens.shape[0], full)
    out_raw[order, :T], out_local[order, :T] = raw, local
    return out_raw, out_local


def energy(model: Any, tokens: Any, *, free_positions: torch.Tensor | None = None, source: Any = None,
           energy: str | Sequence[str] = ENERGIES, per_position: bool = False,
           max_tokens_per_batch: int | None = None, backend: str = "compiled", extra_energy: Any = None
           ) -> Energies:
    """The raw and local energies of whole sequences (``-e_local`` is their pseudo-log-likelihood).

    Args:
        model: anything :func:`mhfast.sample` accepts, a transformers ``*ForMaskedLM`` object
            (wrapped; its tokenizer is found where it was loaded from), a local model directory,
            a HuggingFace hub id, ``"antiberty"``, or a :class:`mhfast.translation.Translator` (its CMLM,
            with string sources encoded as the translator encodes raw text).
        tokens: Long[B, T] padded at the end with ``model.pad_id``, or a list of token id sequences.
            Special tokens ([CLS], [SEP], padding, ...) are not scored; ``mask_id`` is refused.
        free_positions: Bool[B, T]: score only these positions (default: every energy position,
            the energy :func:`mhfast.sample` reports).
        source: conditional models (a CMLM): one source per row (a string or token ids); scores the
            targets given it. Raw text needs the Translator as ``model``, or a CMLM with its tokenizer (a
            Translator's ``cmlm`` has it): a CMLM without one looks a string's words up in its dictionary as
            they are (:func:`translator_sources`).
        energy: the energies to return ("raw", "local" or both; both cost the same).
        per_position: also return the per-token terms (``raw_terms``/``local_terms`` f32[B, T]).
        max_tokens_per_batch: tokens of masked copies at once (and per forward), but at least one
            whole row (a budget below the row width runs one row at a time); None: from free
            memory (:func:`mhfast.scoring.budget.auto_max_tokens`).
        backend: "compiled" (the C++/CUDA ops) or "reference" (pure PyTorch).
        extra_energy: the energy terms of :func:`mhfast.sample` (see :mod:`mhfast.energy_terms`),
            evaluated on the rows (``input_index`` = the row); reported as ``terms``/``e_extra``. An
            :class:`~mhfast.energy_terms.AllowedTokens` constraint is not an energy (it restricts the
            sampler's proposals): rows are not checked against it here.

    Returns:
        :class:`Energies` ``(e_raw, e_local)``: f32[B] each, summed in float64 like the sampler.
    """
    names = _check_energy(energy)
    max_tokens_per_batch = check_options("mhfast.energy", max_tokens_per_batch, backend, per_position=per_position)
    check_devices("mhfast.energy", tokens=tokens, free_positions=free_positions, source=source)
    translator = translator_of(model)
    lm = as_model(translator.cmlm if translator is not None else model)
    source = translator_sources(translator, source)
    rows = pad_sequences(tokens, int(lm.pad_id), int(lm.vocab_size))
    check_rows_fit(lm, rows, int(lm.pad_id), lambda b: f"mhfast.energy: tokens row {b}")
    mask = _score_mask(free_positions, energy_positions(lm, rows))
    terms = _extra_terms(extra_energy, rows, lm)  # checked before any model work, as in mhfast.sample
    raw, local = compute_terms(lm, rows, mask, source=source, max_tokens_per_batch=max_tokens_per_batch,
                               backend=backend)
    keep = (lambda name, value: value if name in names else None)  # noqa: E731
    extra = (None, None, None) if terms is None else _evaluate_terms(terms, rows.to(raw.device))
    return Energies(keep("raw", sum_terms(raw)), keep("local", sum_terms(local)),
                    keep("raw", raw) if per_position else None, keep("local", local) if per_position else None,
                    *extra)


def _extra_terms(extra_energy: Any, rows: torch.Tensor, lm: Any) -> Any:
    """``extra_energy`` as the sampler reads it (:func:`mhfast.energy_terms.normalize`: a tuple of terms is a
    list of them, as in :func:`mhfast.sample`), its rows checked; None without terms. Errors name
    ``mhfast.energy: extra_energy``."""
    from ..energy_terms import check_extra_energy, normalize

    if extra_energy is None:
        return None
    try:
        terms = normalize(check_extra_energy(extra_energy), rows.shape[0], rows.shape[1], int(lm.vocab_size),
                          traced=False)
    except ValueError as e:
        raise _renamed(e) from None
    try:
        terms.check_rows(rows, torch.arange(rows.shape[0], device=rows.device), int(lm.pad_id))
    except ValueError as e:
        raise _err("extra_energy:", str(e)) from None
    return terms


def _evaluate_terms(terms: Any, rows: torch.Tensor) -> tuple:
    """(values f32[B, K], names, weighted sum f32[B]) of the terms on ``rows`` (on the device the energies were
    computed on, where the sampler evaluates them too: ``e_local + e_extra`` needs no move)."""
    index = torch.arange(rows.shape[0], device=rows.device)
    try:
        with torch.no_grad():  # (a term of modules with parameters: results that require grad, as sample's had)
            values = terms.evaluate(rows, index)
            return values, terms.names, terms.weighted(values)
    except (TypeError, ValueError) as e:  # a term's bad value, or a weighted sum past float32
        raise _renamed(e) from None


def _renamed(e: Exception) -> Exception:
    """An error of :mod:`mhfast.energy_terms` (whose messages name ``mhfast.sample: extra_energy``) named as this
    call's: ``mhfast.energy: extra_energy ...``, of the same type."""
    text = str(e)
    if text.startswith("mhfast.sample: "):  # "extra_energy term ...", "extra_energy: the weighted sum ..."
        return type(e)("mhfast.energy: " + text.removeprefix("mhfast.sample: "))
    return type(e)(f"mhfast.energy: extra_energy {text}")  # the option's structural check names no caller
