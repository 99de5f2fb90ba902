"""Energy terms added to the MLM's energy (product of experts), and hard token constraints.

``mhfast.sample(model, ..., extra_energy=terms)`` samples ``exp(-(E_mlm(X) + sum_k w_k f_k(X)) / tau)``
exactly: the Metropolis-Hastings ratio includes every term (single-site and block MH, with annealing
and forced acceptance as usual). ``terms`` is one callable, or a list whose items are callables,
``(callable, weight)`` pairs or :class:`AllowedTokens` constraints. A term is called as
``f(tokens)`` on ``tokens: Long[N, T]`` (the model's token ids, frame and padding included) or, if
it declares a second parameter, as ``f(tokens, input_index)`` with ``input_index: Long[N]`` the
input each row belongs to (the row of ``init``, or the source for ``source=``); it returns
``Float[N]`` on the tokens' device. Terms are evaluated once per proposed state (batched over
chains and inputs), never for a proposal equal to the current state, and the current state's
values are cached like its MLM energy.

Built in: :class:`Hamming` (distance to a reference, mixmatch's ``delta`` term),
:class:`HFClassifier` (``-log p(label | X)`` of a HuggingFace sequence classifier) and
:class:`AllowedTokens` (a per-position allowed-token mask: proposals never leave it, so the
target is the MLM energy restricted to the allowed sequences; not an energy).

Example (keep an infilled antibody close to its parent, then forbid cysteine at two positions):
    >>> import torch, mhfast
    >>> from mhfast.models.tabular import TabularMLM
    >>> model = TabularMLM.random(num_tokens=3, length=4, seed=0)
    >>> parent = torch.tensor([[0, 1, 2, 0]])
    >>> r = mhfast.sample(model, init=parent, chains=2, epochs=3, burn_in=1,
    ...                   extra_energy=[(Hamming(parent), 2.0)])
    >>> r.terms.shape, r.term_names                       # [B, C, K] final values per chain
    (torch.Size([1, 2, 1]), ['hamming'])
"""
from __future__ import annotations

import inspect
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from ._validate import holds_values


def _lengths(rows: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Long[N]: each row's length, up to and including its last token that is not ``pad_id`` (rows are padded
    at the end; a pad-valued id inside a row, e.g. a BOS of id 0 with the default pad_id, still counts)."""
    positions = torch.arange(1, rows.shape[1] + 1, device=rows.device)
    return torch.where(rows != pad_id, positions, 0).amax(dim=1) if rows.shape[1] else rows.new_zeros(rows.shape[0])


class Hamming:
    """Number of positions where a sequence differs from a reference (mixmatch's ``delta`` term).

    Args:
        reference: Long[T] (one reference for every input) or Long[B, T] (row b for input b). A reference must
            have the length of the sequences it is compared with (special tokens included): the sampler and
            :func:`mhfast.energy` check it before any work (:meth:`check_rows`), since a distance across
            different lengths would count padding and specials as differences.
        pad_id: the id that pads the rows of a Long[B, T] reference at the end (a row's length: up to its last
            other id); None (default): the rows are not padded, each is T long.
        names: how messages name each reference row (e.g. ``"--hamming-reference 'r.txt': line 3"``); default
            ``"Hamming reference row b"``.

    Example:
        >>> h = Hamming(torch.tensor([1, 2, 3]))
        >>> h(torch.tensor([[1, 2, 3], [1, 0, 0]]), torch.tensor([0, 0])).tolist()
        [0.0, 2.0]
    """

    name = "hamming"

    def __init__(self, reference: torch.Tensor, pad_id: int | None = None, names: Sequence[str] | None = None):
        reference = torch.as_tensor(reference)
        holds_values("Hamming", "reference", reference)
        if reference.dtype != torch.long or reference.dim() not in (1, 2):
            raise ValueError(f"Hamming: reference must be a Long[T] or Long[B, T] tensor, got {reference.dtype} "
                             f"of shape {tuple(reference.shape)}")
        self.reference = reference if reference.dim() == 2 else reference[None]
        self.pad_id = None if pad_id is None else int(pad_id)
        if names is not None and len(names) != self.reference.shape[0]:
            raise ValueError(f"Hamming: names has {len(names)} entries, expected one per reference row "
                             f"({self.reference.shape[0]})")
        self.names = list(names) if names is not None else [f"Hamming reference row {b}" for b in
                                                             range(self.reference.shape[0])]

    def check_inputs(self, num_inputs: int) -> None:
        """A ValueError unless there is one reference for all inputs or one per input: with more rows than inputs,
        the first rows had been used silently (references of another batch, or one line too many in a file).
        Called once with the number of inputs of the whole run (:func:`normalize`; under torchrun before the
        inputs are shared out)."""
        R = self.reference.shape[0]
        if R not in (1, num_inputs):
            raise ValueError(f"Hamming has {R} reference rows for {num_inputs} inputs: give one reference for all "
                             "inputs, or one per input")

    def check_vocab(self, vocab_size: int) -> None:
        """A ValueError naming the row and the id unless every reference id (padding aside) is one of the model's
        ``vocab_size`` ids: an id no sequence can hold counted as a difference wherever it stood, silently (a
        review). Called once by :func:`normalize`."""
        ref = self.reference.cpu()  # (once, before sampling: a reference on a GPU is checked here too)
        inside = torch.arange(ref.shape[1]) < self._lengths().cpu()[:, None]
        bad = (inside & ((ref < 0) | (ref >= vocab_size))).nonzero()
        if bad.numel():
            r, t = (int(i) for i in bad[0])
            raise ValueError(f"{self.names[r]} holds id {int(ref[r, t])} at position {t}, outside the "
                             f"model's vocabulary [0, {vocab_size})")

    def check_rows(self, tokens: torch.Tensor, input_index: torch.Tensor, pad_id: int) -> None:
        """A ValueError naming the reference and both lengths unless every row of ``tokens`` (Long[N, T],
        padded at the end with the model's ``pad_id``) has the length of its reference (row
        ``input_index[n]``). Called once, before sampling or scoring, by :meth:`EnergyTerms.check_rows`."""
        which = self._rows_of(input_index.to(tokens.device))
        refs = self._lengths().to(tokens.device)
        rows = _lengths(tokens, pad_id)
        bad = (rows != refs[which]).nonzero().flatten()
        if bad.numel():
            n = int(bad[0])
            r = int(which[n])
            raise ValueError(f"{self.names[r]} has {int(refs[r])} tokens, the sequence it is compared with "
                             f"{int(rows[n])} (special tokens included): a Hamming distance compares position by "
                             "position, so the reference must have the sequence's length")

    def _lengths(self) -> torch.Tensor:
        """Long[R]: each reference row's length (its width without ``pad_id``)."""
        if self.pad_id is None:
            return torch.full((self.reference.shape[0],), self.reference.shape[1], dtype=torch.long)
        return _lengths(self.reference, self.pad_id)

    def _rows_of(self, input_index: torch.Tensor) -> torch.Tensor:
        """Long[N]: the reference row each input is compared with (row 0 for all with one reference)."""
        R = self.reference.shape[0]
        if R == 1:
            return torch.zeros_like(input_index)
        if bool((input_index >= R).any()):
            raise ValueError(f"Hamming: an input index is >= the {R} references given")
        return input_index

    def __call__(self, tokens: torch.Tensor, input_index: torch.Tensor) -> torch.Tensor:
        which = self._rows_of(input_index.to(tokens.device))
        ref = self.reference.to(tokens.device)
        ref = ref[which] if ref.shape[0] > 1 else ref.expand(tokens.shape[0], -1)
        # Only the positions inside the reference's length count (check_rows: the row has that length too):
        # past it both are padding, each with its own pad id (the model's and the reference's, which may
        # differ, e.g. a reference given unpadded to a RoBERTa whose rows are padded with 1).
        width = min(ref.shape[1], tokens.shape[1])
        inside = torch.arange(width, device=tokens.device) < self._lengths().to(tokens.device)[which][:, None]
        return ((tokens[:, :width] != ref[:, :width]) & inside).sum(dim=1).float()


def _load_classifier(path: str) -> Any:
    """``AutoModelForSequenceClassification`` from a local directory; a ValueError naming it when the
    files are damaged or the checkpoint has no classification head (a randomly initialized head
    would steer toward noise, silently)."""
    from .models.hf import float32_loading, import_transformers, quiet_transformers

    transformers = import_transformers()
    try:
        with quiet_transformers():
            model, info = transformers.AutoModelForSequenceClassification.from_pretrained(
                path, local_files_only=True, output_loading_info=True, **float32_loading(transformers))
    except (MemoryError, KeyboardInterrupt):
        raise
    except Exception as e:  # noqa: BLE001 - bad config, missing or truncated weights
        text = (str(e).strip().splitlines() or [""])[0][:300]
        raise ValueError(f"classifier: cannot load {path!r}: {type(e).__name__}: {text}") from None
    missing = [k for k in info.get("missing_keys", ()) if "position_ids" not in k]
    if missing:
        raise ValueError(f"classifier: {path!r} is not a trained sequence classifier (no weights for "
                         f"{sorted(missing)[:4]})")
    return model


class HFClassifier:
    """``-log p(label | X)`` of a HuggingFace ``*ForSequenceClassification`` model (controlled generation).

    Args:
        model: a transformers sequence-classification model object, or a local directory.
        label: the class to steer toward (an int, or a name from ``config.label2id``).
        token_map: how MLM token ids become classifier inputs: None (shared vocabulary: the ids are fed
            as they are), a Long[V] lookup tensor, or a callable ``Long[N, T] -> dict`` of model inputs
            (e.g. ``input_ids`` and ``attention_mask`` from the classifier's tokenizer on decoded text).
        pad_id: the sampled MLM's padding id (positions holding it are masked out of attention). Default: with
            a shared vocabulary (no ``token_map``), the classifier's ``config.pad_token_id`` (1 for RoBERTa and
            ESM, where 0 is ``<s>``/``<cls>``: a fixed 0 masked that token out); else, or without one, 0. Give it
            with a ``token_map``: the rows are padded with the MLM's id, which the classifier cannot know.

    Example:
        >>> import transformers
        >>> cfg = transformers.BertConfig(vocab_size=8, hidden_size=8, num_hidden_layers=1,
        ...                               num_attention_heads=2, intermediate_size=8, num_labels=2)
        >>> clf = HFClassifier(transformers.BertForSequenceClassification(cfg).eval(), label=1)
        >>> clf(torch.tensor([[2, 5, 6, 3]])).shape
        torch.Size([1])
    """

    name = "classifier"

    def __init__(self, model: Any, label: int | str = 0, token_map: Any = None, pad_id: int | None = None):
        if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
            model = _load_classifier(os.fspath(model) if not isinstance(model, bytes) else model.decode())
        self.model = model.eval()
        label2id = dict(getattr(model.config, "label2id", {}) or {})
        if isinstance(label, str):
            if label not in label2id:
                raise ValueError(f"HFClassifier: label {label!r} is not one of {sorted(label2id)}")
            label = int(label2id[label])
        num_labels = int(model.config.num_labels)
        if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < num_labels:
            raise ValueError(f"HFClassifier: label must be in [0, {num_labels}), got {label!r}")
        if pad_id is None:
            config_pad = getattr(model.config, "pad_token_id", None) if token_map is None else None
            pad_id = config_pad if config_pad is not None else 0
        self.label, self.token_map, self.pad_id = label, token_map, int(pad_id)

    def check_vocab(self, vocab_size: int) -> None:
        """A ValueError unless every id of the sampled model's ``vocab_size`` has a classifier input: a shared
        vocabulary at least as large, or a lookup ``token_map`` of at least ``vocab_size`` entries that are
        classifier ids (a smaller one failed mid-run with a bare IndexError: a review). A callable ``token_map``
        is the user's to check. Called once by :func:`normalize`."""
        own = int(getattr(self.model.config, "vocab_size", 0) or 0)
        if self.token_map is None and own and own < vocab_size:
            raise ValueError(f"HFClassifier: the classifier's vocabulary has {own} ids, the sampled model's "
                             f"{vocab_size}: without a token_map the ids are fed as they are (give a token_map)")
        if isinstance(self.token_map, torch.Tensor):
            table = self.token_map
            if table.dim() != 1 or table.numel() < vocab_size or table.is_floating_point() or table.is_complex() \
                    or table.dtype == torch.bool:
                raise ValueError(f"HFClassifier: token_map must be a Long[V] lookup of at least the sampled "
                                 f"model's {vocab_size} ids, got {table.dtype} of shape {tuple(table.shape)}")
            if own and bool(((table[:vocab_size] < 0) | (table[:vocab_size] >= own)).any()):
                raise ValueError(f"HFClassifier: token_map maps ids outside the classifier's vocabulary [0, {own})")

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        device = next(self.model.parameters()).device
        if callable(self.token_map) and not isinstance(self.token_map, torch.Tensor):
            inputs = {k: v.to(device) for k, v in self.token_map(tokens).items()}
        else:
            ids = self.token_map.to(tokens.device)[tokens] if self.token_map is not None else tokens
            inputs = dict(input_ids=ids.to(device), attention_mask=(tokens != self.pad_id).to(device).long())
        with torch.inference_mode():
            logits = self.model(**inputs).logits
        return -torch.log_softmax(logits.float(), dim=-1)[:, self.label].to(tokens.device)


class AllowedTokens:
    """A hard constraint: at each position only the allowed tokens are ever proposed.

    ``mask``: Bool[T, V] (every input) or Bool[B, T, V] (one per input), over the padded width T
    of the sampler's rows. Proposals are drawn from the MLM conditional restricted to the allowed
    tokens (with the matching proposal probabilities in the MH ratio), so the chain samples the
    target restricted to sequences whose free positions are all allowed. Tokens already in the
    starting sequence at free positions must be allowed (masks are filled with allowed tokens).

    Example:
        >>> mask = torch.ones(3, 5, dtype=torch.bool); mask[1, 2] = False   # never token 2 at position 1
        >>> AllowedTokens(mask).mask.shape
        torch.Size([1, 3, 5])
    """

    name = "allowed"

    def __init__(self, mask: torch.Tensor):
        mask = torch.as_tensor(mask)
        holds_values("AllowedTokens", "mask", mask)
        if mask.dtype != torch.bool or mask.dim() not in (2, 3):
            raise ValueError(f"AllowedTokens: mask must be a Bool[T, V] or Bool[B, T, V] tensor, got {mask.dtype} "
                             f"of shape {tuple(mask.shape)}")
        self.mask = mask if mask.dim() == 3 else mask[None]


# ---------------------------------------------------------------------------- the sampler's view
@dataclass(frozen=True)
class Term:
    """One weighted term as the sampler calls it."""

    fn: Callable[..., torch.Tensor]
    weight: float
    name: str
    wants_index: bool


@dataclass(frozen=True)
class EnergyTerms:
    """The normalized ``extra_energy`` argument: weighted terms plus an optional allowed-token mask."""

    terms: tuple[Term, ...] = ()
    allowed: torch.Tensor | None = None  #: Bool[B or 1, T, V]

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.terms]

    def evaluate(self, tokens: torch.Tensor, input_index: torch.Tensor) -> torch.Tensor:
        """Every term's value on ``tokens``: f32[N, K], checked (shape, dtype, device, finiteness)."""
        cols = []
        for t in self.terms:
            v = t.fn(tokens, input_index) if t.wants_index else t.fn(tokens)
            cols.append(_checked(t, v, tokens))
        return torch.stack(cols, dim=1) if cols else tokens.new_zeros((tokens.shape[0], 0), dtype=torch.float32)

    def check_rows(self, tokens: torch.Tensor, input_index: torch.Tensor, pad_id: int) -> None:
        """Each term that can check rows (an optional ``check_rows(tokens, input_index, pad_id)`` hook, e.g.
        :meth:`Hamming.check_rows`) checks the rows it will be evaluated on, once, before any work."""
        for t in self.terms:
            check = getattr(t.fn, "check_rows", None)
            if callable(check):
                check(tokens, input_index, pad_id)

    def weighted(self, values: torch.Tensor) -> torch.Tensor:
        """sum_k w_k values[:, k], in float64 (order-independent), as f32[N]."""
        w = torch.tensor([t.weight for t in self.terms], dtype=torch.float64, device=values.device)
        out = (values.double() * w).sum(dim=1).float()
        if not bool(torch.isfinite(out).all()):  # (an infinite energy made every MH test inf - inf = NaN: no move)
            raise ValueError("mhfast.sample: extra_energy: the weighted sum of the terms overflows float32 (beyond "
                             "3.4e38 in magnitude): scale the terms or their weights down")
        return out


def _checked(term: Term, v: Any, tokens: torch.Tensor) -> torch.Tensor:
    where = f"mhfast.sample: extra_energy term {term.name!r}"
    if not isinstance(v, torch.Tensor):
        raise TypeError(f"{where} returned {type(v).__name__}, expected a Float[N] tensor")
    if not v.is_floating_point():
        raise TypeError(f"{where} returned dtype {v.dtype}, expected a floating-point tensor")
    if tuple(v.shape) != (tokens.shape[0],):
        raise ValueError(f"{where} returned shape {tuple(v.shape)}, expected ({tokens.shape[0]},) (one per row)")
    if v.device != tokens.device:
        raise ValueError(f"{where} returned a tensor on {v.device}, expected {tokens.device} (the tokens' device)")
    if not bool(torch.isfinite(v).all()):
        raise ValueError(f"{where} returned NaN or infinite values")
    v = v.float()
    if not bool(torch.isfinite(v).all()):  # a float64 value past float32's range: inf once cast
        raise ValueError(f"{where} returned values beyond float32's range (3.4e38 in magnitude)")
    return v


def term_name(fn: Callable) -> str:
    """How results and messages name a term: its ``name``, else its ``__name__``, else its type's name."""
    return str(getattr(fn, "name", None) or getattr(fn, "__name__", None) or type(fn).__name__)


def _parameters(fn: Callable) -> list[inspect.Parameter] | None:
    """``fn``'s parameters (a ``torch.nn.Module``'s ``forward``'s: its ``__call__`` takes ``*args``); None for
    builtins without a signature (called with the tokens only)."""
    if isinstance(fn, torch.nn.Module):
        fn = fn.forward
    try:
        return list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None


def check_callable_as_term(fn: Callable) -> None:
    """A ValueError naming the term unless ``fn(tokens)`` or ``fn(tokens, input_index)`` can bind: a third
    argument without a default, or a keyword-only one, had failed at the first call with a bare TypeError.

    Example:
        >>> check_callable_as_term(lambda t, i, k: 0)
        Traceback (most recent call last):
        ValueError: term '<lambda>' needs argument 'k': a term is called as f(tokens) or f(tokens, input_index)
    """
    params = _parameters(fn)
    if params is None:
        return
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    needed = [p for p in positional[2:] if p.default is p.empty]
    needed += [p for p in params if p.kind is p.KEYWORD_ONLY and p.default is p.empty]
    if needed or not (positional or any(p.kind is p.VAR_POSITIONAL for p in params)):
        what = f"argument {needed[0].name!r}" if needed else "a positional argument"
        raise ValueError(f"term {term_name(fn)!r} needs {what}: a term is called as f(tokens) or "
                         "f(tokens, input_index)")


def wants_index(fn: Callable) -> bool:
    """Whether a term is called as ``fn(tokens, input_index)``: after the tokens it declares a positional parameter
    without a default, one named ``input_index``, or ``*args``. A parameter with a default under another name keeps
    its default (``lambda t, w=w: ...`` binds a loop's value: handing it the index would silently change the term).

    A ``torch.nn.Module`` is read by its ``forward`` (its ``__call__`` takes ``*args``).

    Example:
        >>> [wants_index(f) for f in (lambda t: 0, lambda t, i: 0, lambda t, input_index=None: 0,
        ...                           lambda t, scale=2.0: 0, lambda *a: 0)]
        [False, True, True, False, True]
    """
    params = [p for p in _parameters(fn) or ()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
    if params and params[0].kind is params[0].VAR_POSITIONAL:
        return True
    return any(p.kind is p.VAR_POSITIONAL or p.default is p.empty or p.name == "input_index" for p in params[1:])


def check_extra_energy(value: Any) -> Any:
    """The option's structural check (the spec calls it): None, a callable, or a list of items."""
    if value is None or callable(value) or isinstance(value, AllowedTokens):
        return value
    if isinstance(value, (list, tuple)):
        for item in value:
            _term_or_constraint(item)
        return list(value)
    raise ValueError(f"must be a callable, an AllowedTokens or a list of callables / (callable, weight) pairs, "
                     f"got {type(value).__name__}")


def _term_or_constraint(item: Any) -> Term | AllowedTokens:
    if isinstance(item, AllowedTokens):
        return item
    fn, weight = (item if isinstance(item, tuple) and len(item) == 2 else (item, 1.0))
    if not callable(fn):
        raise ValueError(f"items must be callables or (callable, weight) pairs, got {item!r}")
    check_callable_as_term(fn)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
        raise ValueError(f"weights must be finite numbers, got {weight!r}")
    return Term(fn, float(weight), term_name(fn), wants_index(fn))


def _unique(names: list[str]) -> list[str]:
    """Terms' names, a name given twice numbered ``name_0``, ``name_1``, ... in order, skipping any number that
    another term's own name already takes (``x, x, x_0`` made ``x_0, x_1, x_0``: one summary hid the other).

    Example:
        >>> _unique(["hamming", "hamming", "len"]), _unique(["x", "x", "x_0"])
        (['hamming_0', 'hamming_1', 'len'], ['x_1', 'x_2', 'x_0'])
    """
    out: list[str] = []
    for i, name in enumerate(names):
        if names.count(name) > 1:
            k = names[:i].count(name)
            while f"{name}_{k}" in names or f"{name}_{k}" in out:
                k += 1
            name = f"{name}_{k}"
        out.append(name)
    return out


def normalize(value: Any, num_inputs: int, width: int, vocab_size: int, traced: bool = True) -> EnergyTerms | None:
    """The sampler's :class:`EnergyTerms` for ``extra_energy=value`` (None: no terms). ``traced``: the terms'
    values are traced beside e_raw, e_local and proj_N (the sampler), so those names are refused."""
    if value is None:
        return None
    items = [_term_or_constraint(i) for i in (value if isinstance(value, list) else [value])]
    terms = tuple(i for i in items if isinstance(i, Term))
    masks = [i.mask for i in items if isinstance(i, AllowedTokens)]
    if len(masks) > 1:
        raise ValueError("mhfast.sample: extra_energy has more than one AllowedTokens (combine the masks)")
    allowed = masks[0] if masks else None
    if allowed is not None and (allowed.shape[1:] != (width, vocab_size) or allowed.shape[0] not in (1, num_inputs)):
        raise ValueError(f"mhfast.sample: extra_energy AllowedTokens mask has shape {tuple(allowed.shape)}, expected "
                         f"[{width}, {vocab_size}] or [{num_inputs}, {width}, {vocab_size}] (inputs, width, vocab)")
    terms = tuple(Term(t.fn, t.weight, name, t.wants_index) for t, name in zip(terms, _unique([t.name for t in terms])))
    for t in terms:  # (a term of per-input data, e.g. Hamming's references: as many as there are inputs; ids)
        for hook, arg in (("check_inputs", num_inputs), ("check_vocab", vocab_size)):
            check = getattr(t.fn, hook, None)
            if callable(check):
                try:
                    check(arg)
                except ValueError as e:
                    raise ValueError(f"mhfast.sample: extra_energy: {e}") from None
    for t in terms if traced else ():  # the traces and diagnostics are keyed by name: it would hide that summary
        if t.name in ("e_raw", "e_local") or re.fullmatch(r"proj_\d+", t.name):
            raise ValueError(f"mhfast.sample: extra_energy: a term is named {t.name!r}, the name of a traced summary "
                             "(e_raw, e_local, proj_N); give it another (its `name` attribute)")
    return EnergyTerms(terms, allowed)
