"""fairseq RoBERTa-family masked LMs (task ``masked_lm``) as mhfast energy networks.

:func:`load_fairseq_mlm` loads a checkpoint written by ``fairseq-train --task masked_lm --arch roberta_*``
(RoBERTa, and models built the same way such as the Sapiens antibody models, :mod:`mhfast.models.sapiens`) and
its ``dict.txt``, and returns a :class:`FairseqMaskedLM` implementing :class:`mhfast.models.base.FeatureMaskedLM`:
``masked_features`` runs the encoder (``encoder.sentence_encoder``) and returns the d-wide features at the
masked positions only; ``output_layer`` is the model's own LM head (``encoder.lm_head``, the dense + activation
+ layer norm + tied projection of RoBERTa), applied by the sampler only where it needs a distribution. The
last encoder layer at the masked positions only (``forward="fast"``) is :mod:`mhfast.models.fast_encoder`.

What the checkpoint names is checked by name, before any weight is read:

* the task must be ``masked_lm`` (a model fine-tuned for another task has an LM head no loss trained);
* the criterion must be a masked-LM loss: ``masked_lm``, ``legacy_masked_lm_loss`` or Sapiens'
  ``smooth_masked_lm`` (label smoothing: a training-time change of the loss, not of the model); another is
  refused by name, since its LM head may not be a masked-LM head;
* the architecture must build a ``RobertaModel`` (``roberta``, ``roberta_base``, ``roberta_large``, ``xlm``,
  ``roberta_prenorm``, any arch a plugin registered for the ``roberta`` model). ``roberta_small`` (Sapiens'
  4 layers, d=128, registered by the sapiens package) is built here without the package, from the sizes the
  checkpoint itself stores; any other unregistered name is refused naming it (import the plugin that registers
  it first).

The mask symbol is ``<mask>``, which fairseq's masked_lm task appends to ``dict.txt``; the checkpoint stores
``args`` (an ``argparse.Namespace``) or ``cfg``: it is unpickled with ``torch.load(weights_only=False)``, so
load only checkpoints you trust.

Example (a checkpoint and the dict.txt beside it)::

    >>> from mhfast.models.fairseq_mlm import load_fairseq_mlm        # doctest: +SKIP
    >>> lm = load_fairseq_mlm("roberta/model.pt")                     # dict.txt from roberta/  # doctest: +SKIP
    >>> lm.masked_logits(lm.frame(4)[None], torch.tensor([2])).shape  # doctest: +SKIP
    torch.Size([1, 50265])
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import os
from typing import Any, Callable, Iterator, Sequence

import torch

from .base import PerThread, check_positions, check_reads, decode_ids, weight_dtype
from .fairseq_cmlm import INSTALL_COMMAND, _first_line, import_fairseq

_INSTALL_HINT = "mhfast.models.fairseq_mlm needs fairseq (on Python 3.11 the 'fairseq-fixed' fork): " + INSTALL_COMMAND

#: Training criteria that are masked-LM losses: the model they trained is an MLM whatever else they change.
MLM_CRITERIA = ("masked_lm", "legacy_masked_lm_loss", "smooth_masked_lm")
#: Architectures of the ``roberta`` model that fairseq itself does not register, built here by name: the sizes
#: their registering package would default to (the checkpoint's own values win, as fairseq's arch functions do).
KNOWN_ARCHS = {
    # sapiens/roberta.py (Prihoda et al. 2022) registers it; the Sapiens checkpoints also store these values
    "roberta_small": dict(encoder_layers=4, encoder_embed_dim=128, encoder_ffn_embed_dim=256,
                          encoder_attention_heads=8),
}


def _fairseq() -> Any:
    """Import fairseq's RoBERTa model and masked_lm task lazily (mhfast works without fairseq)."""
    return import_fairseq(("fairseq.models.roberta", "fairseq.tasks.masked_lm"), _INSTALL_HINT)


class FairseqMaskedLM:
    """A fairseq ``RobertaModel`` trained with ``masked_lm`` behind mhfast's ``FeatureMaskedLM`` protocol.

    Build it with :func:`load_fairseq_mlm`, or from a fairseq model and its dictionary (``<mask>`` included).
    Rows are ``<s> tokens </s>`` right-padded with ``<pad>``; the model runs in eval mode without autograd.

    Attributes:
        vocab_size, mask_id (``<mask>``), pad_id, bos_id (``<s>``), eos_id (``</s>``): from the dictionary.
        special_ids: pad, bos, eos, unk, mask and fairseq's ``madeupword`` fillers (never sampled).
        max_length: the most positions a row may have (the model's ``max_positions``).
        symbols: the dictionary's symbols, in id order.
    """

    def __init__(self, model: Any, dictionary: Any, device: str | torch.device | None = None,
                 dtype: torch.dtype | None = None) -> None:
        _fairseq()
        self.model = model.eval()
        dtype = weight_dtype(dtype)
        if device is not None or dtype is not None:
            self.model.to(device=device, dtype=dtype)
        self.dictionary = dictionary
        self.symbols = list(dictionary.symbols)
        if "<mask>" not in dictionary.indices:
            raise ValueError("dictionary: has no <mask> symbol (fairseq's masked_lm task adds it to dict.txt)")
        self.vocab_size = len(dictionary)
        self.mask_id = dictionary.index("<mask>")
        self.pad_id, self.bos_id, self.eos_id = dictionary.pad(), dictionary.bos(), dictionary.eos()
        fillers = [i for i, s in enumerate(self.symbols) if s.startswith("madeupword")]
        self.special_ids = tuple(sorted({self.pad_id, self.bos_id, self.eos_id, dictionary.unk(), self.mask_id,
                                         *fillers}))
        self.encoder = self.model.encoder.sentence_encoder
        self.max_length = int(self.model.encoder.max_positions())
        self._static_flag = PerThread(None)  #: see static_inputs: None = test each call's rows (per thread)
        self._stock_encoder = stock_encoder(self.encoder)  #: run_encoder may repeat its forward sync-free

    # -- protocol -------------------------------------------------------------------------------
    @torch.no_grad()
    def masked_features_at(self, tokens: torch.Tensor, row_index: torch.Tensor, positions: torch.Tensor,
                           context: Any = None, context_index: torch.Tensor | None = None) -> torch.Tensor:
        """Encoder features at ``positions[n]`` of row ``row_index[n]``, one forward per row: float[N, d]."""
        tokens = self._prepare(tokens, context, context_index)
        if self._static_inputs is None:
            check_reads(row_index, positions, tokens.shape[0], tokens.shape[1])
        row_index, positions = row_index.to(tokens.device), positions.to(tokens.device)
        if row_index.numel() == 0:
            return torch.zeros(0, self.width, device=self.device, dtype=self.dtype)
        return self.run_encoder(tokens)[positions, row_index]

    def run_encoder(self, tokens: torch.Tensor, stop_before: Any = None) -> torch.Tensor | tuple:
        """The encoder's output [T, R, d] for rows already prepared (on the device, checked), as fairseq's
        ``encoder(tokens)["encoder_out"][0]``; with ``stop_before`` (one of its layers), that layer's input
        ``(x [T, R, d], key padding mask or None)`` instead, the layer itself not run.

        Outside ``static_inputs`` this is the encoder's own forward. Inside, the caller has said whether the
        rows hold pads, and :func:`encoder_forward` runs the same modules in the same order with that answer in
        place of fairseq's ``encoder_padding_mask.any()``: its ``if`` on a device tensor is a host sync, which a
        CUDA graph cannot capture (``capture="cuda-graph"`` failed on Sapiens on an H200) and which costs every
        model call of the sampler a round trip."""
        if self._static_inputs is None or not self._stock_encoder:
            if stop_before is None:
                return self.encoder(tokens)["encoder_out"][0]
            return _stopped(self.encoder, tokens, stop_before)
        return encoder_forward(self.encoder, tokens, self._static_inputs, stop_before)

    def masked_features(self, tokens: torch.Tensor, positions: torch.Tensor, context: Any = None,
                        context_index: torch.Tensor | None = None) -> torch.Tensor:
        """Encoder features at ``positions[n]`` of row ``n``: Long[N, T], Long[N] -> float[N, d]."""
        check_positions(tokens, positions)
        return self.masked_features_at(tokens, torch.arange(tokens.shape[0]), positions, context, context_index)

    @torch.no_grad()
    def output_layer(self, features: torch.Tensor) -> torch.Tensor:
        """The model's LM head (``encoder.lm_head``): float[M, d] -> float[M, V]."""
        if not isinstance(features, torch.Tensor) or features.dim() != 2:
            raise ValueError(f"features: expected [M, d], got shape {tuple(getattr(features, 'shape', ()))}")
        return self.model.encoder.lm_head(features.to(device=self.device, dtype=self.dtype))

    def masked_logits(self, tokens: torch.Tensor, positions: torch.Tensor, context: Any = None,
                      context_index: torch.Tensor | None = None) -> torch.Tensor:
        """Logits at ``positions[n]`` of row ``n`` (LM head only there): float[N, V]."""
        return self.output_layer(self.masked_features(tokens, positions, context, context_index))

    def masked_logits_at(self, tokens: torch.Tensor, row_index: torch.Tensor, positions: torch.Tensor,
                         context: Any = None, context_index: torch.Tensor | None = None) -> torch.Tensor:
        """Logits at ``positions[n]`` of row ``row_index[n]`` (several reads of a row from one forward)."""
        return self.output_layer(self.masked_features_at(tokens, row_index, positions, context, context_index))

    @torch.no_grad()
    def position_logits(self, tokens: torch.Tensor) -> torch.Tensor:
        """The LM head at EVERY position of the rows as given, nothing masked: Long[N, T] -> float[N, T, V].

        What ``sapiens.predict_scores`` (and BioPhi's humanization) reads: each position's prediction with
        its own residue visible. Not an energy term (those mask the position they read)."""
        tokens = self._prepare(tokens, None, None)
        return self.model.encoder.lm_head(self.run_encoder(tokens).transpose(0, 1))

    # -- sampler hooks and conveniences -------------------------------------------------------------
    def frame(self, length: int) -> torch.Tensor:
        """``<s> + <mask> * length + </s>``: the template of an unconditional sample."""
        if isinstance(length, bool) or not isinstance(length, int) or length < 1:
            raise ValueError(f"length: expected an int >= 1, got {length!r}")
        if length + 2 > self.max_length:
            raise ValueError(f"length: {length} (+2 for <s> and </s>) exceeds the model's {self.max_length} "
                             "positions")
        return torch.tensor([self.bos_id] + [self.mask_id] * length + [self.eos_id], dtype=torch.long)

    def encode(self, text: str) -> torch.Tensor:
        """``<s>`` + the ids of the whitespace-separated symbols of ``text`` + ``</s>``: Long[T]. A symbol not in
        the dictionary is a ValueError naming it (a BPE model needs its BPE applied first)."""
        if not isinstance(text, str):
            raise TypeError(f"text: expected a str of space-separated symbols, got {type(text).__name__}")
        ids = [self.bos_id]
        for k, sym in enumerate(text.split()):
            if sym not in self.dictionary.indices:
                raise ValueError(f"text: symbol {sym!r} (number {k + 1}) is not in the model's dictionary")
            ids.append(self.dictionary.index(sym))
        return torch.tensor(ids + [self.eos_id], dtype=torch.long)

    def decode(self, ids: torch.Tensor | Sequence[int]) -> str:
        """The symbols of ``ids`` without specials, space-separated (``<mask>`` shown as ``<mask>``)."""
        ids = decode_ids(ids, self.vocab_size)
        return " ".join(self.symbols[i] for i in ids if i == self.mask_id or i not in self.special_ids)

    @contextlib.contextmanager
    def static_inputs(self, has_pad: bool) -> Iterator[None]:
        """Inside: the caller vouches for its rows and read indices (no value checks, no host syncs); the
        protocol's optional hook (mhfast.models.base). ``has_pad`` stands in for fairseq's own padding test, a
        host sync (:func:`encoder_forward`)."""
        with self._static_flag.set(bool(has_pad)):
            yield

    @property
    def _static_inputs(self) -> bool | None:
        """This thread's ``static_inputs`` flag (None: outside it)."""
        return self._static_flag.get()

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @property
    def width(self) -> int:
        """d, the encoder's feature width."""
        return int(self.model.encoder.lm_head.dense.in_features)

    def _prepare(self, tokens: Any, context: Any, context_index: Any) -> torch.Tensor:
        """Checks the rows (Long[R, T], at most max_length wide) and moves them to the model's device."""
        if context is not None or context_index is not None:
            name = "context" if context is not None else "context_index"
            raise ValueError(f"{name}: fairseq masked LMs are unconditional; pass {name}=None")
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.dtype != torch.long:
            raise ValueError(f"tokens: expected a Long[N, T] tensor, got {getattr(tokens, 'dtype', type(tokens).__name__)}"
                             f" {tuple(getattr(tokens, 'shape', ()))}")
        if tokens.shape[1] > self.max_length:
            raise ValueError(f"tokens: rows of {tokens.shape[1]} positions exceed the model's {self.max_length}")
        tokens = tokens.to(self.device)
        if self._static_inputs is None and tokens.numel() and \
                (int(tokens.min()) < 0 or int(tokens.max()) >= self.vocab_size):
            raise ValueError(f"tokens: ids must lie in [0, {self.vocab_size})")
        return tokens


# ---------------------------------------------------------------------------- the encoder, sync-free
def _stopped(encoder: Any, tokens: torch.Tensor, layer: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``layer``'s input ``(x, encoder_padding_mask)`` from the encoder's own forward, stopped there by a hook."""
    from .layer_input import layer_input

    return layer_input(layer, lambda: encoder(tokens), ("x", "encoder_padding_mask"))


def stock_encoder(encoder: Any) -> bool:
    """Whether ``encoder``'s forward is fairseq's own ``TransformerEncoderBase`` one, which
    :func:`encoder_forward` repeats (a subclass that changes it keeps its own forward)."""
    try:
        from fairseq.models.transformer.transformer_encoder import TransformerEncoderBase
    except ImportError:  # pragma: no cover - fairseq without the class: its own forward
        return False
    return isinstance(encoder, TransformerEncoderBase) and all(
        getattr(type(encoder), f) is getattr(TransformerEncoderBase, f) for f in ("forward", "forward_scriptable"))


def encoder_forward(encoder: Any, tokens: torch.Tensor, has_pads: bool, stop_before: Any = None) -> Any:
    """fairseq's ``TransformerEncoderBase.forward_scriptable`` (0.12) for rows whose caller knows whether they
    hold pads: the same modules, calls and arithmetic, with ``has_pads`` given instead of computed. fairseq's
    own ``encoder_padding_mask.any()`` feeds a Python ``if``, a host sync. With ``has_pads`` false this is
    fairseq's no-pad path bit for bit (its ``x * (1 - 0)`` is ``x``). With it true and a batch that happens
    to hold no pad, the layers get an all-false mask where fairseq passes None: the same attention up to
    float rounding. Returns ``encoder_out`` [T, R, d], or with ``stop_before`` that layer's input and mask."""
    mask = tokens.eq(encoder.padding_idx)
    x, _ = encoder.forward_embedding(tokens, None)
    if has_pads:
        x = x * (1 - mask.unsqueeze(-1).type_as(x))
    x = x.transpose(0, 1)
    mask = mask if has_pads else None
    for layer in encoder.layers:
        if layer is stop_before:
            return x, mask
        out = layer(x, encoder_padding_mask=mask)
        x = out[0] if isinstance(out, tuple) and len(out) == 2 else out
    return encoder.layer_norm(x) if encoder.layer_norm is not None else x


# ---------------------------------------------------------------------------- loading
def _read(checkpoint: str) -> dict:
    """The unpickled checkpoint; a damaged or foreign file is a ValueError naming it."""
    try:
        with open(checkpoint, "rb") as f:
            state = torch.load(f, map_location="cpu", weights_only=False)  # fairseq stores argparse/omegaconf
    except MemoryError:
        raise
    except Exception as e:  # a damaged pickle raises nearly anything (EOFError, UnpicklingError, RuntimeError...)
        raise ValueError(f"checkpoint: {checkpoint} is not a readable torch checkpoint (truncated or corrupt?): "
                         f"{type(e).__name__}: {_first_line(e)}") from None
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict) or \
            (state.get("args") is None and state.get("cfg") is None):
        keys = repr(sorted(map(str, state))[:6]) if isinstance(state, dict) else type(state).__name__
        raise ValueError(f"checkpoint: {checkpoint} is not a fairseq checkpoint (expected a dict with 'model' and "
                         f"'args' or 'cfg', got {keys})")
    return state


def _section(cfg: Any, name: str) -> Any:
    """``cfg[name]`` of a new-style checkpoint config (a dict or an omegaconf DictConfig), or None."""
    try:
        return cfg[name] if name in cfg else None
    except TypeError:
        return getattr(cfg, name, None)


def checkpoint_args(checkpoint: str, state: dict) -> argparse.Namespace:
    """The model's arguments (a copy) with ``task`` and ``criterion`` set, from either checkpoint layout: old
    (``args``, a Namespace) or new (``cfg``, whose ``model`` is a Namespace or a dict with ``_name``)."""
    if state.get("args") is not None:
        if not isinstance(state["args"], argparse.Namespace):
            raise ValueError(f"checkpoint: {checkpoint}: 'args' is a {type(state['args']).__name__}, not a Namespace")
        return copy.deepcopy(state["args"])
    cfg = state["cfg"]
    model, task, criterion = (_section(cfg, k) for k in ("model", "task", "criterion"))
    if isinstance(model, argparse.Namespace):
        args = copy.deepcopy(model)
    elif model is not None:
        items = {k: model[k] for k in model}
        args = argparse.Namespace(**items)
        args.arch = items.get("arch") or items.get("_name")
    else:
        raise ValueError(f"checkpoint: {checkpoint}: its config has no model section")
    name = lambda s: getattr(s, "_name", None) if not hasattr(s, "keys") else s.get("_name")  # noqa: E731
    args.task = name(task) if task is not None else getattr(args, "task", None)
    args.criterion = name(criterion) if criterion is not None else getattr(args, "criterion", None)
    return args


def _model_class(checkpoint: str, args: argparse.Namespace) -> Any:
    """The RobertaModel (sub)class of ``args.arch``, after its arch function has filled in ``args``; by name,
    a ValueError for a task, criterion or architecture this adapter cannot stand behind."""
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY
    from fairseq.models.roberta import RobertaModel
    from fairseq.models.roberta.model import base_architecture

    task, criterion, arch = getattr(args, "task", None), getattr(args, "criterion", None), getattr(args, "arch", None)
    if task != "masked_lm":
        raise ValueError(f"checkpoint: {checkpoint} was trained with task {task!r}; this adapter loads masked_lm "
                         "checkpoints (its LM head is what the energies read)")
    if criterion not in MLM_CRITERIA:
        raise ValueError(f"checkpoint: {checkpoint} was trained with criterion {criterion!r}, not a masked-LM loss "
                         f"({', '.join(MLM_CRITERIA)}): its LM head may not predict masked tokens")
    if arch in ARCH_MODEL_REGISTRY:
        klass = ARCH_MODEL_REGISTRY[arch]
        if not (isinstance(klass, type) and issubclass(klass, RobertaModel)):
            raise ValueError(f"checkpoint: {checkpoint} has architecture {arch!r} of model {klass.__name__}, not "
                             "a RoBERTa-family model")
        ARCH_CONFIG_REGISTRY[arch](args)
        return klass
    if arch in KNOWN_ARCHS:
        for key, value in KNOWN_ARCHS[arch].items():
            if not hasattr(args, key):
                setattr(args, key, value)
        base_architecture(args)
        return RobertaModel
    raise ValueError(f"checkpoint: {checkpoint} names architecture {arch!r}, which fairseq does not know: import "
                     "the package that registers it first (a fairseq --user-dir plugin)")


def read_dictionary(path: str, option: str = "dictionary") -> Any:
    """A fairseq ``dict.txt`` with ``<mask>`` appended (as the masked_lm task does); a ValueError naming the file
    (and ``option``) when it is missing or not a fairseq dictionary."""
    from fairseq.data import Dictionary

    if not os.path.isfile(path):
        raise ValueError(f"{option}: {path} not found (the dict.txt the checkpoint was trained with)")
    try:
        dictionary = Dictionary.load(path)
    except (ValueError, RuntimeError, UnicodeDecodeError, IndexError, OSError) as e:
        raise ValueError(f"{option}: {path} is not a fairseq dictionary ({_first_line(e)})") from None
    dictionary.add_symbol("<mask>")
    return dictionary


def build_model(checkpoint: str, state: dict, dictionary: Any, dictionary_path: str) -> Any:
    """The RobertaModel of ``state`` with its weights loaded, or a ValueError naming the file that does not fit."""
    from fairseq.tasks.masked_lm import MaskedLMConfig, MaskedLMTask

    args = checkpoint_args(checkpoint, state)
    klass = _model_class(checkpoint, args)
    if not hasattr(args, "max_positions"):
        args.max_positions = getattr(args, "tokens_per_sample", 512)
    weights = state["model"]
    embed = next((v for k, v in weights.items() if k.endswith("sentence_encoder.embed_tokens.weight")), None)
    if embed is not None and embed.shape[0] != len(dictionary):
        raise ValueError(f"dictionary: {dictionary_path} has {len(dictionary)} symbols with <mask> and the specials, "
                         f"but {checkpoint}'s embeddings have {embed.shape[0]} rows: not its dictionary")
    # the task adds <mask> again: add_symbol of a symbol it has returns its id, no new entry
    task = MaskedLMTask(MaskedLMConfig(data="", tokens_per_sample=args.max_positions), dictionary)
    try:
        model = klass.build_model(args, task)
        model.load_state_dict(copy.copy(weights), strict=True)
    except (RuntimeError, KeyError, TypeError, ValueError, AttributeError) as e:  # weights that do not fit
        raise ValueError(f"checkpoint: {checkpoint}: its weights do not fit its config and dictionary "
                         f"({type(e).__name__}: {_first_line(e)})") from None
    return model


def load_fairseq_mlm(checkpoint: str | os.PathLike, dictionary: str | os.PathLike | None = None,
                     device: str | torch.device | None = None, dtype: torch.dtype | None = None,
                     adapter: Callable[..., FairseqMaskedLM] = FairseqMaskedLM) -> FairseqMaskedLM:
    """Load a fairseq masked_lm checkpoint as a :class:`FairseqMaskedLM`.

    Args:
        checkpoint: the checkpoint file (``checkpoint_best.pt``, ``model.pt``). Unpickled with
            ``torch.load(weights_only=False)`` (fairseq stores its config objects in it): trusted files only.
        dictionary: its ``dict.txt`` (or the folder holding it); default: the dict.txt beside the checkpoint.
        device, dtype: where and in which precision to put the model (default: CPU, as saved).
        adapter: the class to build (a subclass such as :class:`mhfast.models.sapiens.SapiensMaskedLM`).

    A missing, truncated or foreign checkpoint or dictionary is a ValueError naming the argument and the file.

    Example::

        >>> lm = load_fairseq_mlm("checkpoints/checkpoint_best.pt", "data-bin/dict.txt")   # doctest: +SKIP
    """
    _fairseq()
    checkpoint = os.fspath(checkpoint)
    if not os.path.isfile(checkpoint):
        raise ValueError(f"checkpoint: file not found: {checkpoint}")
    path = os.fspath(dictionary) if dictionary is not None else os.path.dirname(os.path.abspath(checkpoint))
    if os.path.isdir(path):
        path = os.path.join(path, "dict.txt")
    state = _read(checkpoint)  # first: a file that is no checkpoint is named as such, not by its missing dict.txt
    vocab = read_dictionary(path)
    model = build_model(checkpoint, state, vocab, path)
    return adapter(model, vocab, device=device, dtype=dtype)
