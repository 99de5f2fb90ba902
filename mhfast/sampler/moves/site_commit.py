"""Accept and commit: the MH test of the scored proposals and the new state, in one fused op.

``mh_commit_site_`` draws each tested chain's uniform, runs the MH test (the target energies of X and X', the
forward and reverse proposal probabilities, beta = 1 / target temperature; ``beta=None`` accepts every
proposal) and writes the accepted chains' tokens, term rows, energies and cache rows (the model rows of X',
in place: the cache stays the current state's). Around it, the values the op does not carry: the extra energy
terms of accepted chains, the per-chain counts, and the cache rows of remembered proposals that were accepted
(copied from the memo where it keeps model rows, else forwarded: :func:`refresh_remembered_rows`).

Example:
    >>> import mhfast
    >>> from mhfast.models.tabular import TabularMLM
    >>> r = mhfast.sample(TabularMLM.random(3, 2, seed=0), 2, chains=4, epochs=3, burn_in=1, backend="reference")
    >>> r.tokens.shape
    torch.Size([1, 4, 2])
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch

from ...op_types import ChainRows, SiteProposal, SiteRows, SiteTerms
from ...runtime import rng
from ..state import ChainState
from ..step import StepContext
from .changed import changed_chains
from .site_types import ExtraTerms, ScoredSites, TestedSites


def chain_rows(state: ChainState) -> ChainRows:
    """The state's rows the fused step reads and updates."""
    return ChainRows(tokens=state.tokens, raw_terms=state.raw_terms, local_terms=state.local_terms,
                     e_raw=state.e_raw, e_local=state.e_local, target=state.target, cache=state.cache,
                     keys=state.rng_keys)


def commit(ctx: StepContext, state: ChainState, proposal: SiteProposal, terms: SiteTerms, rows: SiteRows, *,
           beta: Any, epoch: Any, step: Any, stream: int = rng.ACCEPT) -> tuple[ChainState, torch.Tensor]:
    """The MH test of ``proposal`` scored as ``terms`` and the state with the accepted ones (their ``rows`` into
    the cache, in place): ``(state, accepted Bool[n])``. ``beta``: passed on as given (None: accept all);
    ``stream``: the test's uniforms (delayed acceptance's second stage has its own)."""
    tokens, raw, local, e_raw, e_local, accepted = ctx.backend.mh_commit_site_(chain_rows(state), proposal, terms, rows,
                                                                               beta, epoch, step, stream)
    return dataclasses.replace(state, tokens=tokens, raw_terms=raw, local_terms=local, e_raw=e_raw,
                               e_local=e_local), accepted


def with_extra(state: ChainState, old: ChainState, chains: torch.Tensor, accepted: torch.Tensor,
                extra: ExtraTerms) -> ChainState:
    """``state`` with the extra-term values of the chains that accepted (the op does not carry them: optional)."""
    pick = lambda new, before: before.index_copy(0, chains, torch.where(  # noqa: E731
        accepted[:, None] if new.dim() == 2 else accepted, new, before.index_select(0, chains)))
    return dataclasses.replace(state, term_values=pick(extra.values, old.term_values),
                               e_extra=pick(extra.weighted, old.e_extra))


def commit_sites(ctx: StepContext, state: ChainState, tested: TestedSites, scored: ScoredSites, *, beta: Any,
                 epoch: int, step: int) -> tuple[ChainState, torch.Tensor]:
    """:func:`commit` of the tested proposals, with their extra-term values and counts: ``(state, accepted)``."""
    new, accepted = commit(ctx, state, tested.proposal, scored.terms, scored.rows, beta=beta, epoch=epoch, step=step)
    if scored.extra is not None:
        new = with_extra(new, state, tested.proposal.ch, accepted, scored.extra)
    if state.counts is not None:
        state.counts.tested(tested.proposal.ch, accepted)
        state.counts.tested_at(tested.proposal.ch, tested.proposal.pos, accepted)
    return new, accepted


def refresh_remembered_rows(ctx: StepContext, state: ChainState, tested: TestedSites, accepted: torch.Tensor,
                            memo: Any) -> None:
    """The cache rows of the chains that accepted a proposal the memo knew (the last ``tested.picked.hits``): the
    commit wrote none (the hits forwarded no rows), so they come from ``memo`` where it keeps model rows
    (:meth:`~mhfast.sampler.memo.ProposalMemo.rows_of`: a copy, no model call, no host sync), else they are
    forwarded now (:func:`refresh_rows`). No hits: nothing."""
    h = tested.picked.hits
    if h == 0:
        return
    m, p = tested.picked.misses, tested.proposal
    remembered = memo.rows_of(tested.picked.index[m:])
    if remembered is None:
        refresh_rows(ctx, state, chains=p.ch[m:], chains_host=tested.chains_host[m:], pos=p.pos[m:],
                     accepted=accepted[m:])
        return
    ch = p.ch[m:]  # (distinct chains: a move draws one position per chain)
    state.cache.index_copy_(0, ch, torch.where(accepted[m:, None, None], remembered.to(state.cache.dtype),
                                               state.cache.index_select(0, ch)))


def refresh_rows(ctx: StepContext, state: ChainState, *, chains: torch.Tensor, chains_host: torch.Tensor,
                 pos: torch.Tensor, accepted: torch.Tensor) -> None:
    """The cache rows of the ``chains`` that ``accepted`` the sequence they now hold (their proposal at ``pos``):
    forwards them (the rows ``mh_site_rows`` makes: every energy position but ``pos``, whose row X and X' share)
    and writes them into ``state.cache`` in place. A host read of ``accepted``."""
    which, which_host = changed_chains(accepted)
    if which_host.numel() == 0:
        return
    runner, be = ctx.runner, ctx.backend
    moved, at = chains.index_select(0, which), pos.index_select(0, which)
    num_rows = int(state.num_energy_host.index_select(0, chains_host.index_select(0, which_host)).sum()) - len(
        which_host)
    if num_rows == 0:
        return
    _, _, _, seq, q, rows, _ = be.mh_site_rows(state.tokens, state.energy_mask, state.raw_terms, state.local_terms,
                                               moved, at, state.tokens[moved, at], num_rows, runner.mask_id)
    outputs = runner.outputs(rows, q, state.ctx_of(moved.index_select(0, seq)))
    state.cache[moved.index_select(0, seq), q] = outputs.to(state.cache.dtype)
