"""The model protocol: what mhfast needs from a masked language model.

Any object with these attributes and methods can be sampled from; adapters for HuggingFace
masked LMs (:mod:`mhfast.models.hf`) and fairseq CMLM translation models
(:mod:`mhfast.models.fairseq_cmlm`) implement it for real models, and
:mod:`mhfast.models.tabular` for small models whose conditionals are given explicitly.

Shapes: ``N`` masked rows, each a sequence of length ``T`` (padded with ``pad_id`` where the
sequences of one call differ in length), ``V`` vocabulary entries, ``d`` feature width.

Example (a user-defined model):
    >>> import torch
    >>> class Uniform:
    ...     vocab_size, mask_id, pad_id, special_ids = 4, 3, 0, (0, 3)
    ...     def masked_logits(self, tokens, positions, context=None, context_index=None):
    ...         return torch.zeros(tokens.shape[0], self.vocab_size)
    >>> isinstance(Uniform(), MaskedLM)
    True
"""
from __future__ import annotations

import contextlib
import operator
import threading
from typing import Any, Iterator, Protocol, Sequence, runtime_checkable

import torch

#: The 20 standard amino acids, one letter each: the residues of the protein models (AntiBERTy, Sapiens) and what
#: a humanized framework may take (mhfast.humanize)
AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWY"


def residue_letters(text: str) -> str:
    """A protein sequence's characters without whitespace, ASCII letters upper-cased. Only ASCII: ``str.upper``
    turns some other letters into ASCII ones (``ß`` into ``SS``, ``ı`` into ``I``), which had read them as amino
    acids and shifted every later residue (and the CDR spans) by one.

    Example:
        >>> residue_letters("ev qL"), residue_letters("aßc")
        ('EVQL', 'AßC')
    """
    return "".join(c.upper() if c.isascii() else c for c in "".join(text.split()))


@runtime_checkable
class MaskedLM(Protocol):
    """A masked language model seen as an energy network (paper, section 2).

    Attributes:
        vocab_size: V, the number of logits per position.
        mask_id: the token id of [MASK] (``<unk>`` for fairseq CMLMs).
        pad_id: the token id that pads rows of different lengths; ``masked_logits`` must
            ignore padded positions (attention mask).
        special_ids: token ids never sampled (mask, pad, BOS/EOS, ...); the sampler gives
            them -inf logits in proposals.
    """

    vocab_size: int
    mask_id: int
    pad_id: int
    special_ids: Sequence[int]

    def masked_logits(self, tokens: torch.Tensor, positions: torch.Tensor, context: Any = None,
                      context_index: torch.Tensor | None = None) -> torch.Tensor:
        """Raw scores at ``positions[n]`` of row ``n``: Long[N,T], Long[N] -> float[N,V].

        Row ``n`` already holds ``mask_id`` at ``positions[n]`` (and possibly elsewhere, for
        block proposals). The LM head should be applied only at the requested positions.
        ``context``/``context_index`` are for conditional models: row ``n`` is conditioned on
        source ``context_index[n]`` of the encoded ``context``.
        """
        ...


@runtime_checkable
class FeatureMaskedLM(MaskedLM, Protocol):
    """Optional split of :meth:`masked_logits` that lets the sampler cache d-wide features.

    ``masked_logits(...) == output_layer(masked_features(...))``. With it the sampler caches
    the current state's per-position features (T x d per chain) instead of V-wide logits and
    applies ``output_layer`` only where it needs a distribution.
    """

    def masked_features(self, tokens: torch.Tensor, positions: torch.Tensor, context: Any = None,
                        context_index: torch.Tensor | None = None) -> torch.Tensor:
        """Hidden features at ``positions[n]`` of row ``n``: Long[N,T], Long[N] -> float[N,d]."""
        ...

    def output_layer(self, features: torch.Tensor) -> torch.Tensor:
        """The LM head: float[M,d] -> float[M,V]."""
        ...


@runtime_checkable
class ConditionalMaskedLM(MaskedLM, Protocol):
    """A conditional MLM (e.g. a CMLM translation model): encode once, predict target lengths."""

    def encode(self, sources: Any) -> Any:
        """Encode a batch of S sources once; the result is passed back as ``context``."""
        ...

    def predict_lengths(self, context: Any, k: int) -> torch.Tensor:
        """The k most likely target lengths per source: Long[S, k], best first."""
        ...


@runtime_checkable
class RefinementModel(ConditionalMaskedLM, Protocol):
    """A conditional MLM that decodes whole rows at once: what :func:`mhfast.mask_predict` needs.

    Attributes:
        bos_id, eos_id: the ids that frame every target row (``[bos] + tokens + [eos]``).
    """

    bos_id: int
    eos_id: int

    def decoder_log_probs(self, tokens: torch.Tensor, context: Any, context_index: torch.Tensor) -> torch.Tensor:
        """Log-probabilities at every position of every row: Long[R, L] -> float[R, L, V]."""
        ...

    def predict_lengths(self, context: Any, k: int, strategy: str = "topk") -> torch.Tensor:
        """k target lengths per source (without bos/eos): Long[S, k]; ``strategy`` "topk" or "fairseq"."""
        ...


# Optional methods the sampler (:func:`mhfast.sample`) uses when a model has them:
#
# * ``frame(length) -> Long[T']``: the starting row of an unconditional sample of ``length`` free
#   tokens, e.g. ``[CLS] + [MASK]*length + [SEP]``; tokens that are special ids stay fixed and are
#   left out of the energy. Default: ``[MASK]*length``.
# * ``masked_logits_at(tokens Long[R,T], row_index Long[N], positions Long[N], context=None,
#   context_index=None) -> float[N,V]``: logits at ``positions[n]`` of row ``row_index[n]``
#   (ascending), reading several masked positions of one row from a single forward (block
#   proposals, greedy warm start); ``context_index`` is Long[R], one per row. Without it the
#   sampler repeats each row once per position. ``masked_features_at`` (same arguments,
#   -> float[N,d]) is its :class:`FeatureMaskedLM` twin, used when the model has features.
# * ``static_inputs(has_pad: bool) -> context manager``: inside it, the caller vouches that its rows
#   and indices are valid (the sampler built them) and states whether rows hold ``pad_id`` (checked
#   once): the model skips its value checks and data-dependent shapes, each a host sync on a GPU. The
#   static-shape sampler step (``capture=``) needs a forward without host syncs.


class PerThread:
    """A value an adapter's context manager sets for the calling thread only (``static_inputs``' flag). One
    attribute for every thread had let a second thread's call on the same adapter, during a sampler's run, take
    the sampler's word for its rows: padded rows read as unpadded (a helper's review, 2026-12-02: logits off by
    9.24 on a tiny BERT). A dict keyed by thread, not ``threading.local``, so that the adapter can still be
    copied and pickled.

    Example:
        >>> flag = PerThread(None)
        >>> with flag.set(True):
        ...     flag.get()
        True
        >>> flag.get() is None
        True
    """

    def __init__(self, default: Any = None) -> None:
        self.default = default
        self._values: dict[int, Any] = {}

    def get(self) -> Any:
        return self._values.get(threading.get_ident(), self.default)

    @contextlib.contextmanager
    def set(self, value: Any) -> Iterator[None]:
        me = threading.get_ident()
        had, before = me in self._values, self._values.get(me)
        self._values[me] = value
        try:
            yield
        finally:
            if had:
                self._values[me] = before
            else:
                self._values.pop(me, None)


def check_positions(tokens: Any, positions: Any) -> None:
    """``masked_features``' arguments: ``positions`` holds one position per row of ``tokens`` (a ValueError naming
    it otherwise; its values are checked where the rows are read, :func:`check_reads`).

    >>> check_positions(torch.zeros(2, 5, dtype=torch.long), torch.tensor([1, 3]))
    """
    if not isinstance(positions, torch.Tensor) or not isinstance(tokens, torch.Tensor) \
            or positions.shape != tokens.shape[:1]:
        raise ValueError(f"positions: expected Long[{getattr(tokens, 'shape', (0,))[0]}], one per row, got "
                         f"{tuple(getattr(positions, 'shape', ()))}")


def check_reads(row_index: Any, positions: Any, rows: int | None, length: int | None = None) -> None:
    """The read indices of the ``*_at`` hooks: ``row_index`` Long[N] in [0, ``rows``) and ``positions`` of its
    shape in [0, ``length``) (a bound of None is not checked); a ValueError naming the argument otherwise.

    >>> check_reads(torch.tensor([0, 0, 1]), torch.tensor([1, 2, 1]), rows=2, length=4)
    """
    if not isinstance(row_index, torch.Tensor) or row_index.dim() != 1 or row_index.dtype != torch.long:
        raise ValueError(f"row_index: expected a Long[N] tensor, got "
                         f"{getattr(row_index, 'dtype', type(row_index).__name__)} "
                         f"{tuple(getattr(row_index, 'shape', ()))}")
    if not isinstance(positions, torch.Tensor) or positions.shape != row_index.shape or positions.dtype != torch.long:
        raise ValueError(f"positions: expected Long[{row_index.shape[0]}] like row_index, got "
                         f"{getattr(positions, 'dtype', type(positions).__name__)} "
                         f"{tuple(getattr(positions, 'shape', ()))}")
    if rows is not None and row_index.numel() and (int(row_index.min()) < 0 or int(row_index.max()) >= rows):
        raise ValueError(f"row_index: values must lie in [0, {rows})")
    if length is not None and positions.numel() and (int(positions.min()) < 0 or int(positions.max()) >= length):
        raise ValueError(f"positions: values must lie in [0, {length})")


#: the floating dtypes a model runs in, by name (the ``dtype`` option of :func:`mhfast.sample`, the loaders' ``dtype``)
DTYPE_NAMES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def weight_dtype(value: Any) -> torch.dtype | None:
    """The ``dtype`` argument of a loader: None, a torch dtype (as given: mhfast.sample, energy and score name a
    float64 model, which a model object cast by its user can be too) or one of :data:`DTYPE_NAMES`; a ValueError
    naming ``dtype`` otherwise (the name ``"bfloat16"``, which mhfast.sample and the CLI take, had reached
    ``model.to(dtype=...)`` as a string: a bare TypeError of torch's).

    Example:
        >>> weight_dtype("bfloat16"), weight_dtype(None)
        (torch.bfloat16, None)
    """
    if value is None or isinstance(value, torch.dtype):
        return value
    if isinstance(value, str) and value in DTYPE_NAMES:
        return DTYPE_NAMES[value]
    raise ValueError(f"dtype: must be None or one of {', '.join(DTYPE_NAMES)} (a name or a torch dtype), "
                     f"got {value!r}")


def decode_ids(ids: torch.Tensor | Sequence[int], vocab_size: int) -> list[int]:
    """``ids`` as a list of ints in ``[0, vocab_size)`` for an adapter's ``decode``: a ValueError naming ``ids``
    otherwise (a negative id had wrapped around to the dictionary's last symbols, one past the end was a bare
    IndexError).

    Example:
        >>> decode_ids(torch.tensor([2, 0]), 5), decode_ids([-1], 5)
        Traceback (most recent call last):
        ...
        ValueError: ids: values must lie in [0, 5), got -1
        >>> decode_ids(torch.tensor(2), 5)
        Traceback (most recent call last):
        ...
        ValueError: ids: expected a 1-D sequence of ids, got a tensor of shape ()
    """
    # a 0-d tensor or an int had failed with "'int' object is not iterable", naming nothing
    if isinstance(ids, torch.Tensor) and ids.dim() != 1:
        raise ValueError(f"ids: expected a 1-D sequence of ids, got a tensor of shape {tuple(ids.shape)}")
    if not isinstance(ids, torch.Tensor) and (isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__")):
        raise ValueError(f"ids: expected a 1-D sequence of ids, got {type(ids).__name__}")
    out = []
    for i in ids.tolist() if isinstance(ids, torch.Tensor) else ids:
        index = _index(i)
        if index is None:
            raise ValueError(f"ids: expected ints, got {i!r}")
        if not 0 <= index < vocab_size:
            raise ValueError(f"ids: values must lie in [0, {vocab_size}), got {i}")
        out.append(index)
    return out


def _index(value: Any) -> int | None:
    """``value`` as an int if it is one (``operator.index``: Python, numpy and 0-d torch integers), not a bool;
    else None."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def never_proposed(model: Any, device: torch.device | str | None = None) -> torch.Tensor:
    """Bool[V]: the token ids the sampler never proposes at a free position (``special_ids``, ``mask_id`` and
    ``pad_id``; ids outside ``[0, V)`` are ignored here: :func:`check_model_ids` refuses a mask or pad id there and
    lets special ids there be, as tokens the model cannot emit anyway). The one
    definition of an ordinary token: proposals, ``AllowedTokens`` checks and the enumerations of the exactness
    tests all read it.

    Example:
        >>> class M:
        ...     vocab_size, mask_id, pad_id, special_ids = 5, 4, 0, (1,)
        >>> (~never_proposed(M())).nonzero().flatten().tolist()
        [2, 3]
    """
    V = int(model.vocab_size)
    ids = {int(i) for i in model.special_ids} | {int(model.mask_id), int(model.pad_id)}
    out = torch.zeros(V, dtype=torch.bool, device=device)
    out[torch.tensor(sorted(i for i in ids if 0 <= i < V), dtype=torch.long, device=device)] = True
    return out


def check_model_ids(model: Any, where: str, sampling: bool = True) -> None:
    """A user's model states its ids as the protocol asks: ``vocab_size`` an int >= 1, ``mask_id`` and ``pad_id``
    ints in ``[0, vocab_size)``, ``special_ids`` a sequence of ints; for ``sampling``, a pad id of its own. Otherwise
    a TypeError or ValueError naming ``where`` and the attribute (a None id had failed with a bare ``int() argument
    must be ... not 'NoneType'``, a mask id outside the vocabulary was handed to the model, and a pad id equal to
    the mask id made ``mhfast.sample``'s all-masked start read as "a row of length 0 (only padding)"; scoring
    complete sequences, which hold no mask, is unaffected by that one, so it stays allowed there).

    Example:
        >>> class M:
        ...     vocab_size, mask_id, pad_id, special_ids = 5, 5, 0, (1,)
        >>> check_model_ids(M(), "mhfast.sample")
        Traceback (most recent call last):
        ...
        ValueError: mhfast.sample: model.mask_id (5) lies outside the vocabulary [0, 5)
    """
    def integer(name: str, value: Any) -> int:
        index = _index(value)
        if index is None:
            raise TypeError(f"{where}: model.{name} must be an int, got {value!r}")
        return index

    V = integer("vocab_size", model.vocab_size)
    if V < 1:
        raise ValueError(f"{where}: model.vocab_size must be >= 1, got {V}")
    ids = {}
    for name in ("mask_id", "pad_id"):
        ids[name] = i = integer(name, getattr(model, name))
        if not 0 <= i < V:
            raise ValueError(f"{where}: model.{name} ({i}) lies outside the vocabulary [0, {V})")
    if sampling and ids["mask_id"] == ids["pad_id"]:
        # rows end in padding and masked positions are tokens to fill: one id cannot mean both
        raise ValueError(f"{where}: model.pad_id equals model.mask_id ({ids['mask_id']}): a masked position would "
                         "read as padding; give the model a pad id of its own")
    special = model.special_ids
    if isinstance(special, (str, bytes)) or not hasattr(special, "__iter__") or getattr(special, "ndim", 1) == 0:
        raise TypeError(f"{where}: model.special_ids must be a sequence of ints, got {special!r}")
    for i in special:
        integer("special_ids", i)


def ordinary_tokens(model: Any) -> list[int]:
    """The token ids the sampler proposes at a free position, in id order: the complement of
    :func:`never_proposed` (the enumerations of the exactness tests and benchmarks run through them in this order).

    Example:
        >>> class M:
        ...     vocab_size, mask_id, pad_id, special_ids = 5, 4, 0, (1,)
        >>> ordinary_tokens(M())
        [2, 3]
    """
    return (~never_proposed(model)).nonzero().flatten().tolist()


def has_features(model: Any) -> bool:
    """Whether ``model`` offers the feature/output-layer split of :class:`FeatureMaskedLM`."""
    return callable(getattr(model, "masked_features", None)) and callable(getattr(model, "output_layer", None))


def model_width(model: Any) -> int | None:
    """The hidden width d of a model adapter, when it can be read (HF config, fairseq decoder, the adapter's own
    ``width``), else None.

    One reading for everything sized by d (the sampler's CPU sub-batches, the scorer's memory budget).

    Example:
        >>> model_width(None) is None
        True
    """
    inner = getattr(model, "model", None)
    config = getattr(inner, "config", None)
    width = getattr(config, "hidden_size", None) or getattr(config, "dim", None)
    if width is None:
        width = getattr(getattr(inner, "decoder", None), "embed_dim", None)
    if width is None:  # an adapter that reads it itself (the fairseq masked LM, Sapiens: no config, no decoder)
        width = getattr(model, "width", None)
    return int(width) if isinstance(width, int) and width > 0 else None


def position_limit(model: Any, side: str = "target") -> int | None:
    """The longest row, special tokens included, that ``model``'s position table takes, or None where the model
    states none (rotary/relative positions, tabular and custom models).

    One reading for every length check of the API and the commands: ``max_length`` of the HuggingFace adapters
    (AntiBERTy included), ``max_target_positions`` / ``max_source_positions`` of a fairseq CMLM (``side``
    "target" or "source"), also seen through a :class:`mhfast.translation.Translator` (its ``cmlm``).

    Example:
        >>> class Short:
        ...     max_length = 40
        >>> position_limit(Short()), position_limit(object())
        (40, None)
    """
    if side not in ("target", "source"):
        raise ValueError(f"side: expected 'target' or 'source', got {side!r}")
    model = getattr(model, "cmlm", model)
    names = ("max_length", "max_target_positions") if side == "target" else ("max_source_positions",)
    for name in names:
        limit = getattr(model, name, None)
        if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
            return limit
    return None


def check_length(model: Any, length: int, what: str, side: str = "target") -> None:
    """A ValueError ``"<what> has <length> tokens (special tokens included), more than the model's maximum of
    <limit> positions"`` when a row of ``length`` tokens does not fit the model's position table
    (:func:`position_limit`); nothing otherwise. ``what`` names the input (``"--input 'a.txt' line 3"``,
    ``"mhfast.energy: tokens row 0"``), so the message says what to shorten.

    Example:
        >>> class Short:
        ...     max_length = 4
        >>> check_length(Short(), 6, "sequences[0]")
        Traceback (most recent call last):
        ...
        ValueError: sequences[0] has 6 tokens (special tokens included), more than the model's maximum of 4 positions
    """
    limit = position_limit(model, side)
    if limit is not None and length > limit:
        kind = "source positions" if side == "source" else "positions"
        raise ValueError(f"{what} has {length} tokens (special tokens included), more than the model's maximum of "
                         f"{limit} {kind}")


def check_rows_fit(model: Any, rows: torch.Tensor, pad_id: int, name_row: Any, side: str = "target") -> None:
    """:func:`check_length` of every row of ``rows`` (Long[B, T], padded at the end with ``pad_id``: a row's length
    is its non-pad tokens); ``name_row(b)`` names row ``b`` in the message. Rows no wider than the limit cost no
    look at the values (no host sync)."""
    limit = position_limit(model, side)
    if limit is None or rows.shape[-1] <= limit:
        return
    lengths = (rows != int(pad_id)).sum(dim=-1).reshape(-1)
    over = (lengths > limit).nonzero().flatten()
    if over.numel():
        b = int(over[0])
        check_length(model, int(lengths[b]), name_row(b), side)
