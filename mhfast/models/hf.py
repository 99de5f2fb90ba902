"""HuggingFace ``*ForMaskedLM`` models as mhfast energy networks (the :mod:`mhfast.models.base` protocol).

:class:`HFMaskedLM` wraps any transformers masked LM (BERT, RoBERTa, XLM-R, CamemBERT, DistilBERT,
ALBERT, ELECTRA generator, ESM, MPNet, ...), given as a model object or a local directory. For the
architectures listed in ``_HEADS`` it splits the model into its encoder body and its LM head, so
``masked_features`` runs the body and returns only the d-wide hidden states at the masked positions
and ``output_layer`` applies the model's own head to those rows (the sampler caches features and
applies the V-wide head only where it needs a distribution). Other architectures fall back to the
full forward (``model(...).logits`` gathered at the positions) with a one-time warning.

Example (a tiny random BERT; real models load from a local directory, offline):
    >>> import torch, transformers
    >>> from mhfast.models.hf import HFMaskedLM
    >>> cfg = transformers.BertConfig(vocab_size=8, hidden_size=16, num_hidden_layers=1,
    ...                               num_attention_heads=2, intermediate_size=32)
    >>> lm = HFMaskedLM(transformers.BertForMaskedLM(cfg), mask_id=4, pad_id=0, special_ids=(0, 1, 2, 3, 4))
    >>> tokens = torch.tensor([[2, 4, 6, 3]])              # [CLS] [MASK] x [SEP]
    >>> lm.masked_logits(tokens, torch.tensor([1])).shape
    torch.Size([1, 8])
"""
from __future__ import annotations

import contextlib
import os
import re
import threading
import time
import warnings
from typing import Any, Callable, Iterator, Sequence

import torch

from .base import PerThread, _index, check_length, check_reads, decode_ids, weight_dtype

_INSTALL_HINT = "mhfast.models.hf needs the transformers package: pip install transformers"

# Architectures whose LM head we apply ourselves: class name -> function(model) -> head callable
# mapping hidden states [M, d] of the body (model.base_model) to logits [M, V]. Each entry mirrors
# that class's forward() in transformers (checked against transformers 5.x); the tests compare the
# split against the full forward for every entry they can build.
_HEADS: dict[str, Callable[[Any], Callable[[torch.Tensor], torch.Tensor]]] = {
    "BertForMaskedLM": lambda m: m.cls,
    "RobertaForMaskedLM": lambda m: m.lm_head,
    "XLMRobertaForMaskedLM": lambda m: m.lm_head,
    "XLMRobertaXLForMaskedLM": lambda m: m.lm_head,
    "CamembertForMaskedLM": lambda m: m.lm_head,
    "EsmForMaskedLM": lambda m: m.lm_head,
    "MPNetForMaskedLM": lambda m: m.lm_head,
    "AlbertForMaskedLM": lambda m: m.predictions,
    "ElectraForMaskedLM": lambda m: (lambda h: m.generator_lm_head(m.generator_predictions(h))),
    "DistilBertForMaskedLM": lambda m: (
        lambda h: m.vocab_projector(m.vocab_layer_norm(m.activation(m.vocab_transform(h))))),
}

# Position embeddings of these model types start after the padding index (fairseq convention).
_FILLER = re.compile(r"madeupword\d+|<null_\d+>")  #: vocabulary fillers, never real tokens (fairseq, ESM)
_PADDING_OFFSET_TYPES = {"roberta", "xlm-roberta", "xlm-roberta-xl", "camembert"}


def import_transformers():
    """The transformers package, imported on first use (the core runs without it); else an ImportError with the
    install hint."""
    try:
        import transformers
    except ImportError as e:  # pragma: no cover - transformers is installed in CI
        raise ImportError(_INSTALL_HINT) from e
    return transformers


@contextlib.contextmanager
def quiet_transformers():
    """Silence transformers' load report and progress bars; missing weights are checked by us."""
    tf_logging = import_transformers().utils.logging
    verbosity = tf_logging.get_verbosity()
    tf_logging.set_verbosity_error()
    bars = tf_logging.is_progress_bar_enabled()
    tf_logging.disable_progress_bar()
    try:
        yield
    finally:
        tf_logging.set_verbosity(verbosity)
        if bars:
            tf_logging.enable_progress_bar()


@contextlib.contextmanager
def _loader_threads_joined(timeout: float = 10.0):
    """Return from a load only once the threads it started have ended.

    transformers >= 5 loads weights on a thread pool that it shuts down without waiting, so its workers
    outlive ``from_pretrained`` for a moment. A caller that forks then (a DataLoader worker, a test harness,
    a launcher) hands the child locks held by threads it does not have. Idle workers exit within
    milliseconds of the shutdown, so waiting costs nothing; a thread still running after ``timeout``
    seconds is left alone (it is not ours to stop)."""
    before = set(threading.enumerate())
    try:
        yield
    finally:
        deadline = time.monotonic() + timeout
        for thread in set(threading.enumerate()) - before:
            thread.join(max(0.0, deadline - time.monotonic()))


def float32_loading(transformers: Any) -> dict:
    """``from_pretrained``'s keywords for a float32 model whatever dtype the checkpoint was saved in: transformers 5
    loads a saved fp16/bf16 checkpoint in that dtype ("auto"), and then the sampler's dtype=None / "float32" (no
    autocast) had forwarded in half precision, even on a CPU; transformers 4 loads float32 by default (its keyword
    was torch_dtype)."""
    return {"dtype": torch.float32} if int(transformers.__version__.split(".")[0]) >= 5 else {}


def _load_from_dir(path: str) -> Any:
    """``AutoModelForMaskedLM.from_pretrained(path)`` offline, failing loudly on missing weights."""
    transformers = import_transformers()
    if not os.path.isdir(path):
        raise FileNotFoundError(f"model_or_path: no such model directory: {path!r}")
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise FileNotFoundError(f"model_or_path: {path!r} has no config.json (not a HuggingFace model directory)")
    with quiet_transformers(), _loader_threads_joined():
        try:
            model, info = transformers.AutoModelForMaskedLM.from_pretrained(
                path, local_files_only=True, output_loading_info=True, **float32_loading(transformers))
        except ValueError as e:  # config of a model type without a masked-LM class
            raise ValueError(f"model_or_path: {path!r} is not a masked language model: {e}") from None
        except (MemoryError, KeyboardInterrupt):
            raise
        except Exception as e:  # noqa: BLE001 - truncated/corrupt weights: safetensors, pickle, torch errors
            text = (str(e).strip().splitlines() or [""])[0][:300]
            raise ValueError(f"model_or_path: cannot load the model in {path!r} (truncated or corrupt "
                             f"files?): {type(e).__name__}: {text}") from None
    missing = [k for k in info.get("missing_keys", ()) if "position_ids" not in k]
    if missing:
        # A randomly initialized head or layer would make every energy meaningless.
        raise ValueError(f"model_or_path: checkpoint in {path!r} lacks weights: {sorted(missing)[:8]}")
    return model


def _load_tokenizer(path: str) -> Any | None:
    """The tokenizer saved next to a model, or None when there is none (ids then come from kwargs/config)."""
    transformers = import_transformers()
    with quiet_transformers():
        try:
            return transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
        except (OSError, ValueError, TypeError, KeyError):
            return None


def _check_id_arguments(special_ids: Any, **ids: Any) -> None:
    """A ValueError naming the argument unless each given id is an int and ``special_ids`` a sequence of them
    (``mask_id=4.7`` had become 4 and ``True`` 1, silently; ``special_ids=5`` a bare TypeError: a review)."""
    for name, value in ids.items():
        if value is not None and _index(value) is None:
            raise ValueError(f"{name}: must be an int (a token id), got {value!r}")
    if special_ids is not None and (isinstance(special_ids, (str, bytes)) or not hasattr(special_ids, "__iter__")
                                    or any(_index(i) is None for i in special_ids)):
        raise ValueError(f"special_ids: must be a sequence of int token ids, got {special_ids!r}")


class HFMaskedLM:
    """A transformers masked LM behind mhfast's model protocol (``FeatureMaskedLM`` when the head is known).

    Args:
        model_or_path: a ``transformers.PreTrainedModel`` of a ``*ForMaskedLM`` class, or a local
            directory holding one (``save_pretrained`` layout; loaded offline).
        tokenizer: its tokenizer; by default the one saved in the directory, if any. Provides
            ``mask_id``/``pad_id``/special ids and :meth:`encode`/:meth:`decode`.
        device, dtype: move/cast the model (default: leave it as it is).
        mask_id, pad_id, special_ids, bos_id, eos_id: override what the tokenizer/config say
            (needed for a bare model object without tokenizer). ``bos_id``/``eos_id`` are the ids
            :meth:`frame` puts around unconditional samples ([CLS]/[SEP] for BERT, <s>/</s> for RoBERTa).

    Attributes (the protocol): ``vocab_size``, ``mask_id``, ``pad_id``, ``special_ids`` (every
    special token that exists: pad, cls, sep, mask, unk, bos, eos; with a tokenizer also the ids it marks
    special, ``madeupwordN`` / ``<null_N>`` fillers and the output rows past its end: never proposed), plus
    ``model`` (in eval mode),
    ``tokenizer``, ``max_length`` (longest row the position embeddings allow, or None).

    Rows of different lengths are right-padded with ``pad_id`` (as the sampler does); padding is
    masked out of attention, so a padded row scores like the unpadded one (up to float rounding).
    Left padding would shift absolute position embeddings and is not supported.
    """

    def _not_tokens(self, tokenizer: Any) -> list[int]:
        """Ids of the output layer that are no ordinary token of ``tokenizer`` (none without one): every id the
        tokenizer marks special (e.g. CamemBERT's ``<s>NOTUSED``), fairseq-style fillers (``madeupwordN``,
        ESM's ``<null_N>``), and the rows past the tokenizer's end in a model whose embedding matrix was padded
        (``resize_token_embeddings(pad_to_multiple_of=...)``). Why: proposed, they became samples whose
        decoded text silently lacked them (decode drops specials and unknown ids)."""
        if tokenizer is None:
            return []
        ids = [int(i) for i in getattr(tokenizer, "all_special_ids", ()) if 0 <= int(i) < self.vocab_size]
        try:
            vocab = tokenizer.get_vocab()
            size = len(tokenizer)
        except (AttributeError, NotImplementedError, TypeError):
            return ids
        ids += [int(i) for w, i in vocab.items() if 0 <= int(i) < self.vocab_size and _FILLER.fullmatch(w)]
        return ids + list(range(min(size, self.vocab_size), self.vocab_size))

    def __init__(self, model_or_path: Any, tokenizer: Any = None, *, device: str | torch.device | None = None,
                 dtype: torch.dtype | None = None, mask_id: int | None = None, pad_id: int | None = None,
                 special_ids: Sequence[int] | None = None, bos_id: int | None = None,
                 eos_id: int | None = None) -> None:
        transformers = import_transformers()
        _check_id_arguments(mask_id=mask_id, pad_id=pad_id, bos_id=bos_id, eos_id=eos_id, special_ids=special_ids)
        if isinstance(model_or_path, (str, os.PathLike)):
            path = os.fspath(model_or_path)
            model = _load_from_dir(path)
            if tokenizer is None:
                tokenizer = _load_tokenizer(path)
                if tokenizer is None and special_ids is None:  # (an ESM config names only pad and mask)
                    warnings.warn(f"model_or_path: {path!r} has no tokenizer files: the special tokens are only "
                                  "those its config names, so tokens such as <cls> or <unk> may be proposed and "
                                  "frame() adds no BOS; save the tokenizer beside the model, or pass special_ids=",
                                  stacklevel=2)
        elif isinstance(model_or_path, transformers.PreTrainedModel):
            model = model_or_path
            if tokenizer is None and special_ids is None:  # (its config names pad and mask at most)
                warnings.warn("model_or_path: a model object without a tokenizer or special_ids: the special tokens "
                              "are only those its config names, so tokens such as [CLS], [SEP] or [UNK] may be "
                              "proposed and frame() adds none; pass tokenizer= or special_ids=", stacklevel=2)
        else:
            raise TypeError("model_or_path: expected a transformers *ForMaskedLM model or a local model directory, "
                            f"got {type(model_or_path).__name__}")
        dtype = weight_dtype(dtype)
        if device is not None or dtype is not None:
            model = model.to(device=device, dtype=dtype)
        self.model = model.eval()
        self.tokenizer = tokenizer
        config = model.config
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0]) \
            if model.get_output_embeddings() is not None else int(config.vocab_size)

        def pick(explicit: int | None, *names: str) -> int | None:
            if explicit is not None:
                return int(explicit)
            for source in (tokenizer, config):
                for name in names:
                    value = getattr(source, name, None) if source is not None else None
                    if isinstance(value, int) and 0 <= value < self.vocab_size:
                        return value
            return None

        mask = pick(mask_id, "mask_token_id")
        pad = pick(pad_id, "pad_token_id")
        if mask is None:
            raise ValueError("mask_id: the model has no tokenizer or config entry naming its [MASK] token; "
                             "pass mask_id= (and pad_id=, special_ids=)")
        if pad is None:
            raise ValueError("pad_id: the model has no tokenizer or config entry naming its padding token; "
                             "pass pad_id=")
        self.mask_id, self.pad_id = mask, pad
        self.bos_id = pick(bos_id, "cls_token_id", "bos_token_id")
        self.eos_id = pick(eos_id, "sep_token_id", "eos_token_id")
        if special_ids is None:
            named = [pick(None, f"{n}_token_id") for n in ("pad", "cls", "sep", "mask", "unk", "bos", "eos")]
            special_ids = [i for i in named if i is not None] + [mask, pad] + self._not_tokens(tokenizer)
        self.special_ids = tuple(sorted({int(i) for i in special_ids}))
        for name, value in (("mask_id", self.mask_id), ("pad_id", self.pad_id), ("bos_id", self.bos_id),
                            ("eos_id", self.eos_id)):
            if value is not None and not 0 <= value < self.vocab_size:  # (bos, eos: None for a model framing none)
                raise ValueError(f"{name}: {value} outside the vocabulary [0, {self.vocab_size})")
        self.max_length = self._max_length(config)

        head = _HEADS.get(type(model).__name__)
        if head is None:  # a subclass of a supported class (e.g. a user's BertForMaskedLM subclass)
            for klass in type(model).__mro__[1:]:
                if klass.__name__ in _HEADS and hasattr(transformers, klass.__name__):
                    head = _HEADS[klass.__name__]
                    break
        self._head = head(model) if head is not None else None
        self._static_flag = PerThread(None)  #: see static_inputs: None = test each call's rows (per thread)
        self._body = model.base_model if head is not None else None
        if head is None:
            warnings.warn(f"mhfast: no head split known for {type(model).__name__}; using the full forward "
                          "(slower: the LM head runs at every position, no feature caching)", stacklevel=2)

    # -- protocol -------------------------------------------------------------------------------

    @property
    def masked_features(self) -> Callable[..., torch.Tensor] | None:
        """Hidden states at the masked positions: Long[N,T], Long[N] -> float[N,d].

        None for architectures without a known head split, so that
        :func:`mhfast.models.base.has_features` is False and the sampler caches logits instead.
        """
        return self._masked_features if self._head is not None else None

    @property
    def output_layer(self) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """The model's own LM head: float[M,d] -> float[M,V] (None without a known head split)."""
        return self._output_layer if self._head is not None else None

    @torch.no_grad()
    def masked_logits(self, tokens: torch.Tensor, positions: torch.Tensor, context: Any = None,
                      context_index: torch.Tensor | None = None) -> torch.Tensor:
        """Logits at ``positions[n]`` of row ``n``: Long[N,T], Long[N] -> float[N,V]."""
        if self._head is not None:
            return self._output_layer(self._masked_features(tokens, positions, context, context_index))
        tokens, positions, attention_mask = self._prepare(tokens, positions, context, context_index)
        if tokens.shape[0] == 0:
            return torch.empty(0, self.vocab_size, device=self.device, dtype=self.dtype)
        logits = self.model(input_ids=tokens, attention_mask=attention_mask).logits
        return logits[torch.arange(tokens.shape[0], device=tokens.device), positions]

    @torch.no_grad()
    def _masked_features(self, tokens: torch.Tensor, positions: torch.Tensor, context: Any = None,
                         context_index: torch.Tensor | None = None) -> torch.Tensor:
        tokens, positions, attention_mask = self._prepare(tokens, positions, context, context_index)
        if tokens.shape[0] == 0:
            return torch.empty(0, self._feature_dim(), device=self.device, dtype=self.dtype)
        hidden = self._body(input_ids=tokens, attention_mask=attention_mask)[0]
        return hidden[torch.arange(tokens.shape[0], device=tokens.device), positions]

    @property
    def masked_features_at(self) -> Callable[..., torch.Tensor] | None:
        """:meth:`masked_features` for several positions per row (None without a known head split)."""
        return self._masked_features_at if self._head is not None else None

    def _masked_features_at(self, tokens: torch.Tensor, row_index: torch.Tensor, positions: torch.Tensor,
                            context: Any = None, context_index: torch.Tensor | None = None) -> torch.Tensor:
        """Hidden states at ``positions[n]`` of row ``row_index[n]``: several masked positions of one row read
        from a single forward (block proposals, the warm start). Long[R,T], Long[N], Long[N] -> float[N,d]."""
        tokens, row_index, positions, attention_mask = self._prepare_at(tokens, row_index, positions, context,
                                                                        context_index)
        if row_index.shape[0] == 0:
            return torch.empty(0, self._feature_dim(), device=self.device, dtype=self.dtype)
        with torch.no_grad():
            hidden = self._body(input_ids=tokens, attention_mask=attention_mask)[0]
        return hidden[row_index, positions]

    def masked_logits_at(self, tokens: torch.Tensor, row_index: torch.Tensor, positions: torch.Tensor,
                         context: Any = None, context_index: torch.Tensor | None = None) -> torch.Tensor:
        """Logits at ``positions[n]`` of row ``row_index[n]`` (see :meth:`masked_features_at`): float[N,V]."""
        if self._head is not None:
            return self._output_layer(self._masked_features_at(tokens, row_index, positions, context, context_index))
        tokens, row_index, positions, attention_mask = self._prepare_at(tokens, row_index, positions, context,
                                                                        context_index)
        if row_index.shape[0] == 0:
            return torch.empty(0, self.vocab_size, device=self.device, dtype=self.dtype)
        with torch.no_grad():
            logits = self.model(input_ids=tokens, attention_mask=attention_mask).logits
        return logits[row_index, positions]

    def _prepare_at(self, tokens: torch.Tensor, row_index: torch.Tensor, positions: torch.Tensor, context: Any,
                    context_index: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
        """:meth:`_prepare` for the ``*_at`` hooks: also checks ``row_index`` (Long[N], in [0, R))."""
        R = tokens.shape[0] if isinstance(tokens, torch.Tensor) and tokens.dim() == 2 else None
        if self._static_inputs is None:  # (inside static_inputs the caller vouches for them: no host reads)
            check_reads(row_index, positions, R)  # (the positions' values: in _prepare, with its reads)
        # _prepare checks tokens and builds the attention mask; its positions argument is one per row.
        tokens, _, attention_mask = self._prepare(tokens, torch.zeros(R or 0, dtype=torch.long), context,
                                                  context_index, reads=positions)
        return tokens, row_index.to(tokens.device), positions.to(tokens.device), attention_mask

    @torch.no_grad()
    def _output_layer(self, features: torch.Tensor) -> torch.Tensor:
        if features.dim() != 2:
            raise ValueError(f"features: expected [M, d], got shape {tuple(features.shape)}")
        return self._head(features.to(device=self.device, dtype=self.dtype))

    # -- sampler hooks and conveniences -------------------------------------------------------------

    def frame(self, length: int) -> torch.Tensor:
        """Template of an unconditional sample: [CLS] + [MASK]*length + [SEP] (<s>...</s> for RoBERTa).

        The sampler calls it for ``sample(model, length=...)`` so the specials stay fixed at the ends,
        as in training. Missing bos/eos ids are left out.

        Example: ``lm.frame(3)`` -> ``tensor([2, 4, 4, 4, 3])`` for BERT ids (cls 2, mask 4, sep 3).
        """
        if isinstance(length, bool) or not isinstance(length, int) or length < 1:
            raise ValueError(f"length: expected an int >= 1, got {length!r}")
        specials = (self.bos_id is not None) + (self.eos_id is not None)
        check_length(self, length + specials, f"length {length} (+{specials} special tokens)")  # before the list
        ids = ([self.bos_id] if self.bos_id is not None else []) + [self.mask_id] * length \
            + ([self.eos_id] if self.eos_id is not None else [])
        return torch.tensor(ids, dtype=torch.long)

    def encode(self, text: str) -> torch.Tensor:
        """Token ids of ``text`` with the tokenizer's specials (e.g. [CLS] ... [SEP]): Long[T]."""
        if self.tokenizer is None:
            raise ValueError("text: this model has no tokenizer; pass token ids instead")
        return torch.tensor(self.tokenizer(text)["input_ids"], dtype=torch.long)

    def decode(self, ids: torch.Tensor | Sequence[int]) -> str:
        """Text of ``ids`` without special tokens (a ValueError naming ``ids`` unless they are ids of this model)."""
        ids = decode_ids(ids, self.vocab_size)
        if self.tokenizer is None:
            return " ".join(str(i) for i in ids if i not in self.special_ids)
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    # -- internals ------------------------------------------------------------------------------

    def _feature_dim(self) -> int:
        config = self.model.config
        return int(getattr(config, "hidden_size", None) or config.dim)

    def _max_length(self, config: Any) -> int | None:
        table = getattr(getattr(getattr(self.model, "base_model", None), "embeddings", None), "position_embeddings",
                        None)
        # rotary positions (ESM-2): no table, no hard limit. A config naming relative positions is believed only
        # where the model has no table: transformers 5's BERT and RoBERTa ignore the key and keep an absolute table
        # (an old config carrying it had no limit, and 41 positions of a 40-row table failed inside torch)
        if getattr(config, "position_embedding_type", "absolute") != "absolute" and table is None:
            return None
        limit = getattr(config, "max_position_embeddings", None)
        if limit is None:
            return None
        # Models whose positions count from the padding index + 1 (RoBERTa and its kin, MPNet, ESM-1b/1v) say so
        # by a padding_idx on their position embeddings; the type list is for models that hide it.
        offset = getattr(table, "padding_idx", None)
        if offset is not None:
            limit -= int(offset) + 1
        elif getattr(config, "model_type", "") in _PADDING_OFFSET_TYPES:
            limit -= self.pad_id + 1
        return int(limit)

    @contextlib.contextmanager
    def static_inputs(self, has_pad: bool) -> Iterator[None]:
        """Inside: take as given whether rows hold the pad id (``has_pad``) instead of testing each call's rows
        (a host sync on a GPU); with pads the attention mask is built for all columns (none trimmed). The
        protocol's optional ``static_inputs`` hook (mhfast.models.base).

        Example:
            >>> from transformers import BertConfig, BertForMaskedLM
            >>> lm = HFMaskedLM(BertForMaskedLM(BertConfig(vocab_size=9, hidden_size=8, num_hidden_layers=1,
            ...                 num_attention_heads=1, intermediate_size=8)), mask_id=3, pad_id=0)
            >>> with lm.static_inputs(False):
            ...     lm.masked_logits(torch.tensor([[5, 3, 6]]), torch.tensor([1])).shape
            torch.Size([1, 9])
        """
        with self._static_flag.set(bool(has_pad)):
            yield

    @property
    def _static_inputs(self) -> bool | None:
        """This thread's ``static_inputs`` flag (None: outside it)."""
        return self._static_flag.get()

    def _prepare(self, tokens: torch.Tensor, positions: torch.Tensor, context: Any,
                 context_index: torch.Tensor | None, reads: torch.Tensor | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Checks shapes (and, outside :meth:`static_inputs`, that positions lie in the rows), moves to the model's
        device, drops all-pad columns (none that ``reads``, the positions read, or ``positions`` point into),
        builds the attention mask."""
        if context is not None or context_index is not None:
            name = "context" if context is not None else "context_index"
            raise ValueError(f"{name}: HuggingFace masked LMs are unconditional; pass {name}=None")
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.dtype != torch.long:
            raise ValueError(f"tokens: expected a Long[N,T] tensor, got "
                             f"{getattr(tokens, 'dtype', type(tokens).__name__)} {tuple(getattr(tokens, 'shape', ()))}")
        if not isinstance(positions, torch.Tensor) or positions.shape != (tokens.shape[0],) \
                or positions.dtype != torch.long:
            raise ValueError(f"positions: expected Long[{tokens.shape[0]}], got "
                             f"{getattr(positions, 'dtype', type(positions).__name__)} "
                             f"{tuple(getattr(positions, 'shape', ()))}")
        device = self.device
        tokens, positions = tokens.to(device), positions.to(device)
        if tokens.shape[0] == 0:
            return tokens, positions, None
        real = tokens != self.pad_id
        if self._static_inputs is not None:  # the caller said whether rows hold pads: no data-dependent shape
            return self._fits(tokens), positions, (real.long() if self._static_inputs else None)
        read = positions if reads is None else reads.to(device)
        # one host read of the reads' and the ids' bounds (an id past the vocabulary was a bare IndexError in the
        # embedding, a device-side assert on CUDA; the fairseq adapters named it already)

        def bounds(x: torch.Tensor, empty: tuple[int, int]) -> tuple[torch.Tensor, ...]:
            return tuple(torch.aminmax(x)) if x.numel() else tuple(x.new_tensor(v) for v in empty)

        lo, hi, smallest, largest = torch.stack([*bounds(read, (0, -1)), *bounds(tokens, (0, 0))]).tolist()
        if smallest < 0 or largest >= self.vocab_size:
            raise ValueError(f"tokens: ids must lie in [0, {self.vocab_size}) (the vocabulary), got "
                             f"{smallest if smallest < 0 else largest}")
        if lo < 0 or hi >= tokens.shape[1]:
            raise ValueError(f"positions: values must lie in [0, {tokens.shape[1]}) (the rows' width)")
        if bool(real.all()):
            return self._fits(tokens), positions, None  # no padding: skip the attention mask entirely
        # Columns that are padding in every row change nothing (attention mask) but cost compute.
        used = int(real.any(0).nonzero().max()) + 1 if bool(real.any()) else 1
        used = max(used, hi + 1)  # a read of a padding column stays a read of that column
        return self._fits(tokens[:, :used]), positions, real[:, :used].long()

    def _fits(self, tokens: torch.Tensor) -> torch.Tensor:
        """``tokens`` (as the model will get them) if their width fits the position table: a longer row would
        fail deep inside transformers ("expanded size of the tensor ... must match"), so it is a ValueError
        here, whoever calls (shape only: no host sync)."""
        check_length(self, int(tokens.shape[1]), "tokens: a row")
        return tokens
