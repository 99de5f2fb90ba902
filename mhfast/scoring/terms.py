"""Per-position PLL terms of whole sequences, chunked to a memory budget.

One masked copy per scored position (the paper's section 2; Salazar et al. 2020's PLL), built by
the backend's ``masked_copies`` op, forwarded by the sampler's :class:`~mhfast.runtime.runner.ModelRunner`
(LM head only at the masked position when the model has the feature/head split) and reduced by the
``gather_energies`` op: exactly the path :func:`mhfast.sampler.state.score_states` takes, so the
energies equal what :func:`mhfast.sample` reports. Unlike ``score_states`` the masked copies are
made chunk by chunk (at most ``max_tokens`` tokens at a time), never all T x T at once, so a long
sequence costs memory for one chunk only.

``within_word=True`` is minicons' ``within_word_l2r`` PLL (Kauf & Ivanova 2023): when a piece of a
word is scored, the later pieces of the same word are masked too.

Example:
    >>> import torch
    >>> from mhfast.models.tabular import TabularMLM
    >>> from mhfast.runtime.backend import get_backend
    >>> from mhfast.runtime.runner import ModelRunner
    >>> m = TabularMLM.random(3, 2, seed=0)
    >>> raw, local = masked_terms(ModelRunner(m, None, 64), get_backend("reference"),
    ...                           torch.tensor([[0, 2]]), torch.ones(1, 2, dtype=torch.bool), max_tokens=64)
    >>> raw.shape, bool((local > 0).all())
    (torch.Size([1, 2]), True)
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from ..runtime.runner import ModelRunner


def later_pieces(word_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Bool[N, T]: positions after ``positions[n]`` in the same word (``word_ids`` Long[N, T], -1 = none).

    Example:
        >>> later_pieces(torch.tensor([[-1, 0, 0, 1, -1]]), torch.tensor([1])).tolist()
        [[False, False, True, False, False]]
    """
    T = word_ids.shape[1]
    own = word_ids.gather(1, positions[:, None])
    after = torch.arange(T, device=word_ids.device)[None, :] > positions[:, None]
    return (word_ids == own) & (own >= 0) & after


def masked_terms(runner: ModelRunner, backend: Any, tokens: torch.Tensor, score_mask: torch.Tensor, *,
                 max_tokens: int, ctx_index: torch.Tensor | None = None, word_ids: torch.Tensor | None = None,
                 lengths: torch.Tensor | None = None, tokens_for: Callable[[int], int] | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """(raw, local) f32[B, T]: ``-logit`` and ``-log p`` of each scored token given the rest (0 elsewhere).

    Args:
        tokens: Long[B, T] padded at the end; best sorted by length, longest first (each chunk is
            then cut to its own longest row, and HF models skip all-pad columns).
        score_mask: Bool[B, T] the positions to score.
        max_tokens: at most this many tokens of masked copies exist at once (and per forward), but at
            least one row (a budget below the row width runs one row at a time).
        ctx_index: Long[B] source of each row (conditional models).
        word_ids: Long[B, T] word of each position (-1: none); given = the within-word variant.
        lengths: Long[B] non-pad length of each row (default: all T).
        tokens_for: the token budget of a chunk of rows of a given width (default: ``max_tokens`` for every
            width); the memory budget's chunks (every masked copy has its own V-wide logits, so narrow rows
            take fewer tokens each).
    """
    B, T = tokens.shape
    dev = tokens.device
    raw = torch.zeros(B, T, device=dev)
    local = torch.zeros(B, T, device=dev)
    seq, pos = score_mask.nonzero(as_tuple=True)
    width = lengths.to(dev) if lengths is not None else torch.full((B,), T, device=dev)
    row_width = width.index_select(0, seq).cpu() if seq.numel() else None
    s = 0
    while s < seq.numel():
        Tc = int(row_width[s])  # rows are in sequence order: the first row of a chunk is its widest
        n = max(1, (tokens_for(Tc) if tokens_for is not None else max_tokens) // max(Tc, 1))
        sq, ps = seq[s:s + n], pos[s:s + n]
        Tc = max(Tc, int(row_width[s:s + n].max()))
        rows = backend.masked_copies(tokens[:, :Tc].contiguous(), sq, ps, runner.mask_id)
        if word_ids is not None:
            rows = rows.masked_fill(later_pieces(word_ids[:, :Tc].index_select(0, sq), ps), runner.mask_id)
        ci = ctx_index.index_select(0, sq) if ctx_index is not None else None
        r, l, _ = runner.score_rows(backend, rows, ps, tokens[sq, ps], ci, False)
        raw[sq, ps] = r.to(raw.dtype)
        local[sq, ps] = l.to(local.dtype)
        s += n
    return raw, local
