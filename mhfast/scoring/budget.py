"""How many tokens of masked copies may exist at once: an estimate from free memory.

Scoring a sequence of T tokens forwards T masked copies of it; all at once that is T*T tokens of
activations (and T*V logits), which is what makes the naive method run out of memory on long
inputs. :func:`auto_max_tokens` picks the chunk size from the memory there is: a quarter of the
available CPU RAM (``MemAvailable``), or half of the free GPU memory, divided by an estimate of
the activation bytes one token costs in a transformer forward (hidden states, the 4x feed-forward
and T attention weights per head, float32) plus its row's share of the V-wide logits. The estimate
is deliberately generous; the result is clamped to [T, 65536] (65536 = the sampler's default
``max_tokens_per_batch``: beyond it a CPU forward gets no faster).

The chunking changes a score's last bits (a forward of another batch size rounds otherwise), and free memory
changes from one moment to the next. A caller that needs one run's bytes to repeat (``mhfast score``: a resumed
file must be one run's bytes) reads it once and holds it with :func:`fixed_memory`.

Example:
    >>> auto_max_tokens(None, "cpu", 16) >= 16
    True
    >>> with fixed_memory(1 << 20):
    ...     free_memory("cpu")
    1048576
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Iterator

import torch

from ..models.base import model_width

DEFAULT_CAP = 65536
_FALLBACK_BYTES = 4 << 30  # when free memory cannot be read


#: the bytes :func:`free_memory` returns inside :func:`fixed_memory` (None: read the device)
_FIXED: ContextVar[int | None] = ContextVar("mhfast_scoring_fixed_memory", default=None)


@contextmanager
def fixed_memory(nbytes: int | None) -> Iterator[None]:
    """Within: :func:`free_memory` returns ``nbytes`` (what one reading of it gave) instead of reading the device
    again, so every chunk size follows from one number. None: the device is read as usual."""
    if nbytes is not None and (isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 1):
        raise ValueError(f"fixed_memory: nbytes must be a positive int or None, got {nbytes!r}")
    token = _FIXED.set(nbytes)
    try:
        yield
    finally:
        _FIXED.reset(token)


def free_memory(device: Any) -> int:
    """Bytes that may be used: half the free GPU memory, or a quarter of the available CPU memory
    (:func:`mhfast.sampler.problem.available_memory`, the one reading of it); inside :func:`fixed_memory`, its
    number."""
    fixed = _FIXED.get()
    if fixed is not None:
        return fixed
    from ..sampler.problem import available_memory

    dev = torch.device(device) if device is not None else torch.device("cpu")
    available = available_memory(dev)
    if available is None:
        available = _FALLBACK_BYTES
    return available // 2 if dev.type == "cuda" else available // 4


def _dims(model: Any) -> tuple[int, int, int]:
    """(hidden size, attention heads, vocabulary) of a model, with safe guesses when unknown."""
    config = getattr(getattr(model, "model", None), "config", None)
    hidden = model_width(model) or 1024
    heads = int(getattr(config, "num_attention_heads", 0) or getattr(config, "n_heads", 0) or 16)
    vocab = int(getattr(model, "vocab_size", 0) or 32000)
    return hidden, heads, vocab


def auto_max_tokens(model: Any, device: Any, T: int, cap: int = DEFAULT_CAP, memory: int | None = None) -> int:
    """Tokens of masked copies per chunk for rows of width ``T`` that fit the memory budget (``memory`` bytes; by
    default :func:`free_memory`'s reading).

    Every masked copy has its own V-wide logits whatever its width: a chunk of narrower rows holds more of them
    in the same tokens, so each chunk is sized for its own width (:func:`mhfast.scoring.api.compute_terms`: one
    128-token row beside 400 rows of width 3 had put 291 rows of 250,002 logits, 278 MiB, in one forward of a
    64 MiB budget sized for width 128).

    Example:
        >>> with fixed_memory(64 << 20):
        ...     auto_max_tokens(None, "cpu", 128) // 128 < auto_max_tokens(None, "cpu", 3) // 3
        True
    """
    hidden, heads, vocab = _dims(model)
    per_token = 4 * (12 * hidden + 2 * heads * T)  # hidden states, FFN, q/k/v and T attention weights/head
    per_token += (3 * 4 * vocab) // max(T, 1)  # one row's logits, log-softmax and head output, per token
    tokens = (free_memory(device) if memory is None else memory) // max(per_token, 1)
    return int(max(T, min(cap, tokens)))
