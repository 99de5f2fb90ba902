"""Score: the energy terms of each tested X' = X with position i set to the proposed token.

The term of position i comes from the chain's cached row i at the proposed token (``known_logits``: no model
call); every other energy position of X' is one forwarded masked row (``T_e - 1`` per proposal, made by the
fused ``mh_site_rows`` op), unless the proposal memo knows this X' (then its remembered terms, no rows). The
extra energy terms (option extra_energy) of X' are evaluated in one batch. Energies are :func:`sum_terms` of
the term rows (torch's float64 sum, as every other energy of the state).

Example:
    >>> import mhfast
    >>> from mhfast.models.tabular import TabularMLM
    >>> r = mhfast.sample(TabularMLM.random(3, 4, seed=0), 4, chains=3, epochs=3, burn_in=1, memo=0)
    >>> r.model_rows > r.init_rows    # proposals X' != X forwarded rows
    True
"""
from __future__ import annotations

from typing import Any

import torch

from ...op_types import SiteProposal, SiteRows, SiteTerms
from ...runtime.runner import sum_terms
from ..state import ChainState
from ..step import StepContext
from .site_types import ExtraTerms, Picked, ScoredSites, SiteDraw, SiteMove, TestedSites


def tested_sites(state: ChainState, move: SiteMove, draw: SiteDraw, picked: Picked) -> TestedSites:
    """The proposals of ``move`` that ``picked`` sends to the MH test, with the proposal rows of the memo's misses
    (``draw.logits`` where they were computed, else the cached rows)."""
    index, m = picked.index, picked.misses
    ch, pos = move.chains.index_select(0, index), move.pos.index_select(0, index)
    if picked.hits == 0:  # (no slicing: each slice would be one more dispatched op in every step)
        misses, ch_m, pos_m = index, ch, pos
    else:
        misses, ch_m, pos_m = index[:m], ch[:m], pos[:m]
    known = draw.logits.index_select(0, misses) if draw.logits is not None else state.cache[ch_m, pos_m]
    proposal = SiteProposal(ch=ch, pos=pos, proposed=draw.proposed.index_select(0, index),
                            logq_forward=draw.logq_forward.index_select(0, index),
                            logq_reverse=draw.logq_reverse.index_select(0, index))
    return TestedSites(proposal, move.chains_host.index_select(0, picked.index_host), picked, known)


def model_terms(ctx: StepContext, state: ChainState, *, chains: torch.Tensor, chains_host: torch.Tensor,
                pos: torch.Tensor, proposed: torch.Tensor, known_logits: torch.Tensor, num_rows: int | None = None,
                energy_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, SiteRows]:
    """The per-position terms of X' for the distinct ``chains`` proposing ``proposed`` at ``pos``, from the model:
    ``(x_new Long[n, T], raw f32[n, T], local f32[n, T], rows)``, ``rows`` the forwarded rows and the model's
    outputs for them (a list of sub-batches, for the cache). ``num_rows``: their number, if the caller has counted
    it (else counted here from the host counts: no sync). ``energy_mask``: Bool[M, T] the positions whose rows to
    forward (default the state's energy mask: all; delayed acceptance forwards a part, then the rest), with
    ``num_rows`` counted by the caller; the terms elsewhere stay the state's."""
    runner, be = ctx.runner, ctx.backend
    n = chains.shape[0]
    if num_rows is None:
        num_rows = int(state.num_energy_host.index_select(0, chains_host).sum()) - n
    x_new, raw_new, local_new, seq, q, rows, targets = be.mh_site_rows(
        state.tokens, state.energy_mask if energy_mask is None else energy_mask, state.raw_terms, state.local_terms, chains, pos, proposed, num_rows,
        runner.mask_id)
    if num_rows:
        ci = state.ctx_of(chains.index_select(0, seq)) if state.ctx_index is not None else None
        r, l, outputs = runner.score_rows(be, rows, q, targets, ci, keep_outputs=True, chunks=True)
        raw_new.index_put_((seq, q), r)
        local_new.index_put_((seq, q), l)
    else:
        outputs = []
    r_i, l_i = runner.terms_from_logits(be, known_logits, proposed)  # position i: the cached row
    at = pos[:, None]
    raw_new.scatter_(1, at, r_i[:, None])
    local_new.scatter_(1, at, l_i[:, None])
    return x_new, raw_new, local_new, SiteRows(seq, q, outputs)


def _misses_terms(ctx: StepContext, state: ChainState, tested: TestedSites
                  ) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor, SiteRows]:
    """:func:`model_terms` of the memo's misses (the first ``tested.picked.misses`` proposals); none: no rows."""
    p, m = tested.proposal, tested.picked.misses
    if tested.picked.hits == 0:
        return model_terms(ctx, state, chains=p.ch, chains_host=tested.chains_host, pos=p.pos, proposed=p.proposed,
                           known_logits=tested.known_logits)
    if m == 0:  # every proposal is remembered: no rows at all
        none = p.ch[:0]
        return None, state.raw_terms[:0], state.local_terms[:0], SiteRows(none, none, [])
    return model_terms(ctx, state, chains=p.ch[:m], chains_host=tested.chains_host[:m], pos=p.pos[:m],
                       proposed=p.proposed[:m], known_logits=tested.known_logits)


def extra_terms(ctx: StepContext, state: ChainState, tested: TestedSites, x_new: torch.Tensor | None = None
                ) -> ExtraTerms | None:
    """The extra energy terms of every tested X', batched; None without extra terms. ``x_new``: those sequences
    where the caller has them already (None: made here; the memo keeps the model's terms only, so a remembered X'
    is evaluated too)."""
    if ctx.terms is None or not ctx.terms.terms:
        return None
    if x_new is None:
        x_new = proposed_sequences(state, tested.proposal)
    values = ctx.terms.evaluate(x_new, state.term_index.index_select(0, tested.proposal.ch))
    return ExtraTerms(values, ctx.terms.weighted(values))


def proposed_sequences(state: ChainState, proposal: SiteProposal) -> torch.Tensor:
    """Long[n, T]: each tested X' (the chain's tokens with the proposed token at its position)."""
    x = state.tokens.index_select(0, proposal.ch)
    return x.scatter_(1, proposal.pos[:, None], proposal.proposed[:, None])


def keep_miss_rows(state: ChainState, tested: TestedSites, rows: SiteRows, memo: Any) -> None:
    """The misses' model rows into ``memo`` (where it keeps rows): their X's cache rows (row i is shared) with
    the rows they forwarded over them. Before the commit, which writes the accepted ones' rows into the cache."""
    m, picked = tested.picked.misses, tested.picked
    if memo.rows is None or m == 0:
        return
    sel = picked.index if picked.hits == 0 else picked.index[:m]
    ch = tested.proposal.ch if picked.hits == 0 else tested.proposal.ch[:m]
    memo.keep_rows(sel, state.cache.index_select(0, ch), rows)


def score_sites(ctx: StepContext, state: ChainState, tested: TestedSites, memo: Any) -> ScoredSites:
    """The tested proposals scored: the misses' terms from the model rows (stored into ``memo``), the hits' from
    ``memo`` (:class:`~mhfast.sampler.memo.ProposalMemo` or :data:`~mhfast.sampler.memo.NO_MEMO`), their energies,
    plus their extra energy terms, of every tested X' (the memo keeps the model's terms only). The memo acts with
    extra terms only under delayed acceptance, whose plain epochs (forced-accept or too cold) come here with hits."""
    x_new, raw_m, local_m, rows = _misses_terms(ctx, state, tested)
    raw, local = memo.completed(tested.picked, raw_m, local_m)
    keep_miss_rows(state, tested, rows, memo)
    e_raw, e_local = sum_terms(raw), sum_terms(local)
    target = e_raw if state.energy == "raw" else e_local
    extra = extra_terms(ctx, state, tested, x_new if tested.picked.hits == 0 else None)  # (x_new: the misses')
    if extra is not None:
        target = target + extra.weighted
    return ScoredSites(SiteTerms(raw=raw, local=local, e_raw=e_raw, e_local=e_local, target=target), rows, extra)
