"""All model calls of the sampler: sub-batching, features vs logits, energy terms, row counting.

The sampler talks to the model only through :class:`ModelRunner`:

* ``outputs(rows, positions)``: one masked position per row -> ``masked_features`` (when the
  model has the feature/output-layer split, :func:`mhfast.models.base.has_features`) or
  ``masked_logits``; these d- or V-wide outputs are what the single-site MH cache stores.
* ``outputs_at(rows, row_index, positions)``: several positions read from one row (block
  proposals, greedy warm start); uses the optional protocol hooks ``masked_features_at`` /
  ``masked_logits_at`` when the model has them, otherwise repeats each row once per position.
* ``terms(...)``: per-row energy terms ``-logit[target]`` (raw) and ``-log softmax[target]``
  (local) through the backend's ``gather_energies``.

Rows are forwarded in sub-batches of at most ``max(1, max_tokens_per_batch // T)`` rows;
``model_rows`` counts every masked row forwarded (the cost unit of the benchmarks).

Example:
    >>> import torch
    >>> from mhfast.models.tabular import TabularMLM
    >>> from mhfast.runtime.backend import get_backend
    >>> model = TabularMLM.random(num_tokens=3, length=2, seed=0)
    >>> runner = ModelRunner(model, None, 65536)
    >>> rows = torch.tensor([[model.mask_id, 0], [1, model.mask_id]])
    >>> runner.outputs(rows, torch.tensor([0, 1])).shape, runner.model_rows
    (torch.Size([2, 5]), 2)
"""
from __future__ import annotations

import contextlib
import math
from typing import Any

import torch

from ..models.base import has_features, model_width, never_proposed
from . import cpu_info
from .attention import without_cudnn_attention


def sum_terms(terms: torch.Tensor) -> torch.Tensor:
    """Per-chain energy from per-position terms [M, T]: summed in float64, returned as float32.

    float64 makes the sum (practically) independent of the summation order and of the padded
    width, so the sum adds no batch dependence of its own. (The terms themselves come from the model, whose
    outputs for a row may differ in the last bits with the batch it is in or the sub-batch size: a real
    model's energies are equal across batches up to float rounding; a tabular model's exactly.)
    """
    return terms.double().sum(dim=1).float()


#: A CPU sub-batch's hidden states (tokens x d x element size) fill about this many times one core's L2 cache,
#: the sub-batches bench/bench_forward.py found fastest on AntiBERTy (d = 512) on two CPUs (bench/RESULTS.md): an
#: Intel Xeon with 2 MiB of L2 (fp32: 2048 tokens = 2x L2; bf16 on AMX: 8192 = 4x) and an AMD EPYC with 1 MiB,
#: AVX512-BF16 and no AMX (fp32: 1024 and 2048 tokens equal within noise; bf16: 2048 = 2x L2, fastest at T=64,
#: where 4096 and 16384 tokens, around the Xeon's 8192, were 1% and 4-13% slower per row; T=16-32: all within 2%).
L2_MULTIPLE = 2
L2_MULTIPLE_AMX = 4  # AMX tiles keep larger lower-precision batches fast
GPU_MAX_TOKENS = 65536


def default_max_tokens(model: Any, device: Any, dtype: torch.dtype | None = None) -> int:
    """``max_tokens_per_batch`` when the user gives none, from the model's width d and this CPU's caches: on CPU
    ``L2_MULTIPLE x L2 // (d x element size)`` tokens (fp32: 2048 at d = 512 with 2 MiB of L2 per core, 1024 with
    1 MiB; a bf16 (fp16) forward on an AMX-BF16 (AMX-FP16) CPU: 4x L2, 8192 tokens), never below 256; on GPUs,
    and for models whose width cannot be read (custom adapters, tabular test models), 65536 (large batches fill a
    GPU; few calls for a cheap custom model). The L2 size is read once per process
    (:func:`mhfast.runtime.cpu_info.l2_bytes`).

    >>> default_max_tokens(None, "cpu"), default_max_tokens(None, "cuda")
    (65536, 65536)
    """
    width = model_width(model)
    if torch.device(device if device is not None else "cpu").type != "cpu" or width is None:
        return GPU_MAX_TOKENS
    return cpu_max_tokens(width, dtype)


def cpu_max_tokens(width: int, dtype: torch.dtype | None = None) -> int:
    """The CPU rule of :func:`default_max_tokens` for a model of hidden width ``width``.

    >>> cpu_max_tokens(512) == 2 * cpu_info.l2_bytes() // (512 * 4)
    True
    """
    dtype = dtype or torch.float32
    # AMX tiles of the dtype's own kind (AMX-BF16 runs no fp16; an fp16 forward on AMX was never measured)
    amx = {torch.bfloat16: "amx_bf16", torch.float16: "amx_fp16"}.get(dtype)
    multiple = L2_MULTIPLE_AMX if amx is not None and amx in cpu_info.flags() else L2_MULTIPLE
    return max(256, multiple * cpu_info.l2_bytes() // (width * dtype.itemsize))


class ModelRunner:
    def __init__(self, model: Any, context: Any, max_tokens_per_batch: int, device: torch.device | None = None,
                 dtype: torch.dtype | None = None):
        self.model = model
        # Lower precision for the model's forward only (autocast); energies are accumulated in fp32.
        self.dtype = dtype if dtype not in (None, torch.float32) else None
        self.device_type = torch.device(device).type if device is not None else "cpu"
        self.context = context
        self.conditional = context is not None
        self.use_features = has_features(model)
        self.max_tokens = int(max_tokens_per_batch)
        self.model_rows = 0
        self.model_calls = 0
        V = int(model.vocab_size)
        self.vocab_size = V
        self.feature_dim: int | None = None  #: width of masked_features, fixed by the first call
        self.special = never_proposed(model, device)  #: Bool[V], token ids never proposed (get -inf before propose)
        self.mask_id = int(model.mask_id)
        #: 0-d Bool on the device while output checks are deferred (:meth:`defer_output_checks`), else None
        self._bad: torch.Tensor | None = None
        self._deferred_names: set[str] = set()
        self._device = device

    # ------------------------------------------------------------------ model calls
    def _call(self, name: str, *args: Any, ctx_index: torch.Tensor | None) -> torch.Tensor:
        fn = getattr(self.model, name)
        self.model_calls += 1
        with self._precision():
            if self.conditional:
                out = fn(*args, context=self.context, context_index=ctx_index)
            else:
                out = fn(*args)
        rows = args[-1].shape[0]  # one output row per requested position (the last argument)
        return self._checked(name, out, rows, None if name.startswith("masked_features") else self.vocab_size)

    def _checked(self, name: str, out: Any, rows: int, width: int | None) -> torch.Tensor:
        """``out`` if it is a float[rows, width] tensor without NaN or +inf, else a ValueError naming the
        model and what it returned (never a wrong sample from a broken model).

        Shape and dtype are metadata (free). The value check is one ``aminmax`` pass over the output
        and one scalar read: on CPU that pass is far cheaper than the forward that made the output
        (d or V values per row against a whole transformer row); on a GPU the scalar read would be a
        host sync, so the sampler's epochs there defer it (:meth:`defer_output_checks`: a device flag,
        read once per epoch). Logits may hold -inf (a token the model rules out) but not NaN or +inf;
        features must be finite. ``width`` None: features, whose width is fixed by the first call.
        """
        what = f"{type(self.model).__name__}.{name}"
        if not isinstance(out, torch.Tensor):
            raise ValueError(f"{what} returned {type(out).__name__}, expected a float tensor")
        if width is None:
            width = self.feature_dim if self.feature_dim is not None else (out.shape[-1] if out.dim() else -1)
        if not out.is_floating_point() or out.dim() != 2 or tuple(out.shape) != (rows, width):
            raise ValueError(f"{what} returned {out.dtype} of shape {tuple(out.shape)}, expected a float tensor "
                             f"of shape ({rows}, {width})")
        if name.startswith("masked_features"):
            self.feature_dim = width
        features = name.startswith("masked_features")
        if out.numel() and self._bad is not None:  # deferred: a flag on the device, read once per epoch
            lo, hi = torch.aminmax(out)
            bad = lo.isnan() | hi.isnan() | (hi == math.inf)
            self._bad |= (bad | (lo == -math.inf)) if features else bad
            self._deferred_names.add(what)
        elif out.numel():
            lo, hi = torch.aminmax(out)
            lo, hi = float(lo), float(hi)
            if math.isnan(lo) or math.isnan(hi) or hi == math.inf or (features and lo == -math.inf):
                raise ValueError(f"{what} returned non-finite values (min {lo}, max {hi})")
        return out

    def defer_output_checks(self) -> None:
        """From now on the value check of :meth:`_checked` (NaN / +inf) raises no error at once: it sets a flag
        on the device (no host sync, so a step can be captured as a CUDA graph), and :meth:`raise_deferred`
        raises the error the check would have raised. Shape and dtype are still checked at once."""
        if self._bad is None:
            self._bad = torch.zeros((), dtype=torch.bool, device=self._device)

    def raise_deferred(self) -> None:
        """A ValueError if an output checked since :meth:`defer_output_checks` held NaN or +inf (one host read).

        Example:
            >>> from mhfast.models.tabular import TabularMLM
            >>> runner = ModelRunner(TabularMLM.random(3, 2, seed=0), None, 64)
            >>> runner.defer_output_checks()
            >>> _ = runner._checked("masked_logits", torch.tensor([[float("nan"), 0.0]]), 1, 2)
            >>> runner.raise_deferred()
            Traceback (most recent call last):
            ...
            ValueError: TabularMLM.masked_logits returned non-finite values (NaN or +inf; features: -inf too) in a step
        """
        if self._bad is not None and bool(self._bad):
            names = ", ".join(sorted(self._deferred_names))
            raise ValueError(f"{names} returned non-finite values (NaN or +inf; features: -inf too) in a step")

    def holds_pads(self, tokens: torch.Tensor) -> bool:
        """Whether any row of ``tokens`` holds the model's pad id (True for a model that names none): one host read,
        made once per run by the callers of :meth:`static_inputs` (the sampler never proposes a pad)."""
        pad = getattr(self.model, "pad_id", None)
        return pad is None or bool((tokens == pad).any())

    def static_inputs(self, has_pad: bool) -> Any:
        """A context in which the model may take its inputs as valid and as holding pads or not (``has_pad``,
        checked once by the caller) instead of checking every call's (host syncs): the model's optional
        ``static_inputs(has_pad)`` hook (HuggingFace and fairseq CMLM adapters), else nothing changes."""
        hook = getattr(self.model, "static_inputs", None)
        return hook(bool(has_pad)) if callable(hook) else contextlib.nullcontext()

    def session(self) -> Any:
        """The context of a whole run: with a lower-precision ``dtype``, every fp32 weight is cast once per run
        instead of once per model call.

        ``torch.autocast`` caches the casts of weights (leaf tensors that require grad, as a model's
        parameters do by default) until the outermost autocast context exits; each call's own autocast
        context (:meth:`_precision`) is outermost unless something holds one open. This holds one open
        that changes nothing else (the autocast state as it is: enabled or not, same dtype). The cached
        values are the same casts, so outputs are bit-identical; the run keeps a lower-precision copy of
        the weights it used (half of an fp32 model's size in bf16) until it ends. Measured on AntiBERTy in
        bf16 (AMX CPU, T=32): 1.33x fewer ms per row at 31 rows per call, 1.11-1.27x at 155-496 rows
        (bench/bench_forward.py, bench/RESULTS.md). Weights that do not require grad are not cached by
        autocast (each call casts them, as before).

        Example:
            >>> from mhfast.models.tabular import TabularMLM
            >>> runner = ModelRunner(TabularMLM.random(3, 2, seed=0), None, 64, dtype=torch.bfloat16)
            >>> with runner.session():
            ...     runner.outputs(torch.tensor([[runner.mask_id, 0]]), torch.tensor([0])).shape
            torch.Size([1, 5])
        """
        if self.dtype is None:
            return contextlib.nullcontext()
        device = self.device_type
        return torch.autocast(device, dtype=torch.get_autocast_dtype(device), enabled=torch.is_autocast_enabled(device),
                              cache_enabled=torch.is_autocast_cache_enabled())

    def _precision(self) -> Any:
        """The context of every model computation: no autograd, and autocast to ``dtype`` if one is set."""
        stack = contextlib.ExitStack()
        stack.enter_context(torch.no_grad())
        stack.enter_context(without_cudnn_attention(self.device_type))  # a plan per shape: see attention.py
        if self.dtype is not None:
            stack.enter_context(torch.autocast(self.device_type, dtype=self.dtype))
        return stack

    def _chunk(self, T: int) -> int:
        return max(1, self.max_tokens // max(T, 1))

    def outputs(self, rows: torch.Tensor, positions: torch.Tensor, ctx_index: torch.Tensor | None = None
                ) -> torch.Tensor:
        """Features (or logits) at ``positions[n]`` of masked row ``n``: [N, D]."""
        name = "masked_features" if self.use_features else "masked_logits"
        N, T = rows.shape
        step = self._chunk(T)
        if N <= step:  # one sub-batch: no slicing (the same call on the same rows)
            out = self._call(name, rows, positions, ctx_index=ctx_index)
            self.model_rows += N
            return out
        parts = []
        for s in range(0, N, step):
            ci = ctx_index[s:s + step] if ctx_index is not None else None
            parts.append(self._call(name, rows[s:s + step], positions[s:s + step], ctx_index=ci))
        self.model_rows += N
        return torch.cat(parts) if len(parts) != 1 else parts[0]

    def outputs_at(self, rows: torch.Tensor, row_index: torch.Tensor, positions: torch.Tensor,
                   ctx_index: torch.Tensor | None = None, row_index_host: torch.Tensor | None = None
                   ) -> torch.Tensor:
        """Features (or logits) at ``positions[n]`` of row ``row_index[n]`` (sorted ascending): [N, D].

        With the optional hook ``masked_features_at``/``masked_logits_at(tokens[R,T], row_index[N],
        positions[N], context=, context_index=[R])`` each row is forwarded once; otherwise each
        row is repeated once per requested position (same result, more rows).
        ``row_index_host``: a CPU copy of ``row_index``, if the caller has one (the sub-batch
        bounds are then found without a device->host sync).
        """
        hook = "masked_features_at" if self.use_features else "masked_logits_at"
        if not callable(getattr(self.model, hook, None)):
            ci = ctx_index.index_select(0, row_index) if ctx_index is not None else None
            return self.outputs(rows.index_select(0, row_index), positions, ci)
        R, T = rows.shape
        if R == 0:  # one call on the empty batch (the adapter's empty [0, D]), as outputs() makes
            return self._call(hook, rows, row_index, positions, ctx_index=ctx_index)
        step = self._chunk(T)
        host = row_index_host if row_index_host is not None else row_index
        bounds = torch.searchsorted(host, torch.arange(0, R + step, step, device=host.device)).tolist()
        parts = []
        for j, s in enumerate(range(0, R, step)):
            lo, hi = bounds[j], bounds[j + 1]
            ci = ctx_index[s:s + step] if ctx_index is not None else None
            parts.append(self._call(hook, rows[s:s + step], row_index[lo:hi] - s, positions[lo:hi], ctx_index=ci))
        self.model_rows += R
        return torch.cat(parts) if len(parts) != 1 else parts[0]

    def to_logits(self, outputs: torch.Tensor) -> torch.Tensor:
        """V-wide logits from cached outputs (applies the LM head when outputs are features)."""
        if not self.use_features:
            return outputs
        with self._precision():
            logits = self.model.output_layer(outputs)
        return self._checked("output_layer", logits, outputs.shape[0], self.vocab_size)

    def proposal_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """Logits with special ids at -inf (never proposed, never chosen by the warm start)."""
        return logits.masked_fill(self.special, float("-inf"))

    # ------------------------------------------------------------------ energies
    def terms_from_logits(self, backend: Any, logits: torch.Tensor, targets: torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-row energy terms (raw, local) = (-logit[target], -log_softmax[target]): f32[N] each."""
        n = logits.shape[0]
        idx = torch.arange(n, device=logits.device)
        e_raw, e_local, _ = backend.gather_energies(logits, targets, idx, n)
        return e_raw, e_local

    def score_rows(self, backend: Any, rows: torch.Tensor, positions: torch.Tensor, targets: torch.Tensor,
                   ctx_index: torch.Tensor | None, keep_outputs: bool, chunks: bool = False
                   ) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """Energy terms of masked rows (chunked so V-wide logits never exceed one sub-batch).

        Returns ``(raw f32[N], local f32[N], outputs [N, D] or None)``; with ``chunks`` (and
        ``keep_outputs``), outputs is the list of the sub-batches' outputs (no concatenation).
        """
        N, T = rows.shape
        step = self._chunk(T)
        if 0 < N <= step:  # one sub-batch: no slicing (the same calls on the same rows)
            out = self.outputs(rows, positions, ctx_index)
            r, l = self.terms_from_logits(backend, self.to_logits(out), targets)
            return r, l, (([out] if chunks else out) if keep_outputs else None)
        raws, locals_, outs = [], [], []
        for s in range(0, N, step):
            ci = ctx_index[s:s + step] if ctx_index is not None else None
            out = self.outputs(rows[s:s + step], positions[s:s + step], ci)
            r, l = self.terms_from_logits(backend, self.to_logits(out), targets[s:s + step])
            raws.append(r)
            locals_.append(l)
            if keep_outputs:
                outs.append(out)
        if N == 0:
            empty = torch.zeros(0, device=rows.device)
            return empty, empty.clone(), None
        cat = (lambda xs: xs[0] if len(xs) == 1 else torch.cat(xs))
        return cat(raws), cat(locals_), ((outs if chunks else cat(outs)) if keep_outputs else None)
