"""Exact early rejection (option ``delayed="early:K"``, the local energy; Solonen et al. 2012): the parts of
:mod:`.delayed`'s machinery that bound E(X') from below instead of approximating it.

A local term ``-log p`` is >= 0, so the terms of X' forwarded so far, with every other taken as 0, bound E(X')
from below (:func:`lower_bound`). Met with the uniform exact MH's test of this step draws, the bound rejects only
proposals that exact MH rejects, so the chains are plain MH's, bit for bit (docs/delayed.md, "Exact early
rejection"). Here: the bound, the middle stage that widens the survivors' windows before the rest
(:func:`middle_stage`, :data:`EARLY_WIDEN`), and the completion of the memo's partial entries, which remember a
stopped proposal's known terms with NaN elsewhere (:func:`complete_partial`). The first test itself is
:func:`.delayed.first_stage` with ``early=True``.

Example:
    >>> from types import SimpleNamespace
    >>> state = SimpleNamespace(energy="local")
    >>> terms = torch.tensor([[0.5, 2.0, 3.0]])
    >>> lower_bound(state, terms, terms, torch.tensor([[True, False, True]])).tolist()    # 0.5 + 3.0; 2.0 not known
    [3.5]
"""
from __future__ import annotations

from typing import Any

import torch

from ...op_types import SiteRows
from ..state import ChainState
from ..step import StepContext
from .changed import changed_chains
from .site_score import model_terms
from .site_types import TestedSites
from .site_windows import Window, joined, model_energy, rows_mask


#: Early rejection's middle stage (option delayed="early:K"): the survivors of its first stage forward this many
#: times its rows before the rest (the top of the same ranking, so the sets nest) and meet the bound again.
#: Measured on AntiBERTy infilling (bench/RESULTS.md, "Exact early rejection"): see docs/delayed.md.
EARLY_WIDEN = 4


def lower_bound(state: ChainState, raw: torch.Tensor, local: torch.Tensor, near: torch.Tensor) -> torch.Tensor:
    """Early rejection's bound of E(X'): the terms of X' at ``near`` (the forwarded rows and the proposed
    position) and 0 for every other (a local term -log p is >= 0; options.py refuses early rejection with the raw
    energy, whose logits have no bound)."""
    zero = torch.zeros((), dtype=raw.dtype, device=raw.device)
    return model_energy(state, torch.where(near, raw, zero), torch.where(near, local, zero))


def middle_stage(ctx: StepContext, state: ChainState, tested: TestedSites, window: Window, wide: Window,
                 raw: torch.Tensor, local: torch.Tensor, rows: SiteRows, which: torch.Tensor, which_host: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor, SiteRows, Window]:
    """Early rejection's middle stage for the misses ``which`` (indices into the misses, whose window terms are
    ``raw``/``local`` and window rows ``rows``): their rows in ``wide`` but not in ``window`` forwarded.
    Returns the misses' terms and rows with those added, and ``window`` with ``which``'s windows widened."""
    p = tested.proposal
    ch = p.ch.index_select(0, which)
    new_rows = wide.inner.index_select(0, which) & ~window.near.index_select(0, which)
    num_rows = int(wide.rows_host.index_select(0, which_host).sum()
                   - window.rows_host.index_select(0, which_host).sum())
    if num_rows:
        _, raw2, local2, mid = model_terms(
            ctx, state, chains=ch, chains_host=tested.chains_host.index_select(0, which_host),
            pos=p.pos.index_select(0, which), proposed=p.proposed.index_select(0, which),
            known_logits=tested.known_logits.index_select(0, which), num_rows=num_rows,
            energy_mask=rows_mask(state, ch, new_rows))
        raw = raw.index_copy(0, which, torch.where(new_rows, raw2, raw.index_select(0, which)))
        local = local.index_copy(0, which, torch.where(new_rows, local2, local.index_select(0, which)))
        rows = joined(rows, SiteRows(which.index_select(0, mid.seq), mid.q, mid.outputs))
    window = Window(window.near.index_copy(0, which, wide.near.index_select(0, which)),
                    window.inner.index_copy(0, which, wide.inner.index_select(0, which)),
                    window.rows_host.index_copy(0, which_host, wide.rows_host.index_select(0, which_host)))
    return raw, local, rows, window


def complete_partial(ctx: StepContext, state: ChainState, tested: TestedSites, memo: Any,
                     which: torch.Tensor | None = None, terms: tuple[torch.Tensor, torch.Tensor] | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Early rejection remembers the misses it stopped with partial terms (NaN where no row was forwarded): the
    hits of this step on such entries (those of ``which`` Bool[hits], default all) forward their missing rows
    now, and their entries get the full terms and rows. ``terms``: the hits' remembered ``(raw, local)`` where
    the caller has read them. Returns the hits' terms with those completed (one host read; none without hits)."""
    m, h = tested.picked.misses, tested.picked.hits
    if h == 0:  # (no memo at all, or none of its entries met: nothing to read)
        return terms if terms is not None else (state.raw_terms[:0], state.local_terms[:0])
    index = tested.picked.index[m:]
    raw, local = terms if terms is not None else memo.terms(index)
    missing = local.isnan() | raw.isnan()
    partial = missing.any(1) if which is None else missing.any(1) & which
    idx, idx_host = changed_chains(partial)
    if idx_host.shape[0] == 0:
        return raw, local
    p, at = tested.proposal, idx + m
    ch, pos, missing = p.ch.index_select(0, at), p.pos.index_select(0, at), missing.index_select(0, idx)
    # the term at this hit's own position comes from its cached row (the entry's first proposer may have changed
    # another position, so it need not know this one), the other missing ones from forwarded rows
    rows_at = missing.scatter(1, pos[:, None], False)
    _, raw2, local2, rows = model_terms(
        ctx, state, chains=ch, chains_host=tested.chains_host.index_select(0, idx_host + m), pos=pos,
        proposed=p.proposed.index_select(0, at), known_logits=ctx.runner.to_logits(state.cache[ch, pos]),
        num_rows=int(rows_at.sum()), energy_mask=rows_mask(state, ch, rows_at))
    sel = index.index_select(0, idx)
    raw_full = torch.where(missing, raw2, raw.index_select(0, idx))
    local_full = torch.where(missing, local2, local.index_select(0, idx))
    memo.complete(sel, raw_full, local_full)
    # the entry's rows: the forwarded ones, and this hit's cached row at its position (X' and X agree off it, so
    # it is X''s; the entry's row there may be its first proposer's X's, which is not)
    own = SiteRows(torch.arange(ch.shape[0], device=ch.device), pos, [state.cache[ch, pos]])
    memo.keep_rows(sel, None, joined(rows, own))
    return raw.index_copy(0, idx, raw_full), local.index_copy(0, idx, local_full)
