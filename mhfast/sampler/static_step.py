"""The single-site MH step with static shapes and no host sync: the step a CUDA graph can capture.

The dynamic step (:func:`mhfast.sampler.moves.single_site_mh`) reads which chains' proposals
changed their state (one device->host sync) and forwards only those chains' rows, so its shapes
depend on data. This step forwards the rows of every moving chain, changed or not (``T_e - 1``
each, counted on the host from ``num_energy_host``), and then puts back, for the chains whose
proposal is X' = X, their old energy terms, energies and cache rows. Such a chain then meets the
MH test with ``log alpha = 0`` (same energy, and forward = reverse proposal probability: both are
read from the same cached row at the same token), which every uniform in (0, 1) passes; so it
keeps its state bit for bit, as in the dynamic step, and every other chain sees the same numbers
(the random numbers are counter-based, per chain: who else is in the batch changes nothing).
With a model whose output rows do not depend on the rest of their batch (e.g.
:class:`~mhfast.models.tabular.TabularMLM`) the chains equal the dynamic step's exactly
(tests/test_static_step.py); a real network's matmuls may round differently at other batch sizes.

The price: rows of unchanged chains are forwarded for nothing (the proposals that keep their state,
``1 - P(X' != X)`` of them). It pays where a step's launch and sync overheads dominate, i.e.
on a GPU with few chains, once the step is captured (:mod:`mhfast.sampler.graphed`).

Example:
    >>> import mhfast
    >>> from mhfast.models.tabular import TabularMLM
    >>> model = TabularMLM.random(3, 3, seed=1)
    >>> a = mhfast.sample(model, 3, chains=3, epochs=4, burn_in=1)
    >>> b = mhfast.sample(model, 3, chains=3, epochs=4, burn_in=1, capture="static")
    >>> torch.equal(a.tokens, b.tokens), a.model_rows < b.model_rows
    (True, True)
"""
from __future__ import annotations

import dataclasses

import torch

from ..op_types import SiteProposal, SiteRows, SiteTerms
from . import rng
from .moves import chain_rows, propose_sites, site_terms
from .runner import sum_terms
from .state import ChainState
from .step import StepContext


def static_single_site_mh(ctx: StepContext, state: ChainState, act: torch.Tensor, act_host: torch.Tensor,
                          pos: torch.Tensor, beta: float | None, epoch: int, step: int, num_rows: int | None = None
                          ) -> tuple[ChainState, torch.Tensor, torch.Tensor]:
    """One single-site MH step of the chains ``act`` at ``pos`` with shapes fixed by ``act_host`` alone
    (``num_rows``: the rows that makes, ``num_energy_host[act_host].sum() - A``, if the caller has counted them).

    Returns ``(state, accepted Bool[A], changed Bool[A])``: ``changed`` marks the proposals X' != X,
    ``accepted`` the chains that passed the MH test or proposed X' = X (accepted without a test).
    Counts are left to the caller (:meth:`ChainCounts.tested` with ``where=changed``). Extra energy
    terms are not supported (their values would be recomputed for unchanged chains; the caller
    refuses them).
    """
    prop, logq_f, logq_r, changed, logits = propose_sites(ctx, state, act, pos, epoch, step)
    known = logits if logits is not None else state.cache[act, pos]
    x_new, raw_new, local_new, seq, q, outputs = site_terms(ctx, state, act, act_host, pos, prop, known, num_rows)
    keep_row = changed[:, None]
    raw_new = torch.where(keep_row, raw_new, state.raw_terms.index_select(0, act))
    local_new = torch.where(keep_row, local_new, state.local_terms.index_select(0, act))
    e_raw_new = torch.where(changed, sum_terms(raw_new), state.e_raw.index_select(0, act))
    e_local_new = torch.where(changed, sum_terms(local_new), state.e_local.index_select(0, act))
    target_new = e_raw_new if state.energy == "raw" else e_local_new
    outputs = _unchanged_rows_kept(state.cache, act, changed, seq, q, outputs)
    tokens, raw, local, e_raw, e_local, accepted = ctx.backend.mh_commit_site_(
        chain_rows(state), SiteProposal(act, pos, prop, logq_f, logq_r),
        SiteTerms(raw_new, local_new, e_raw_new, e_local_new, target_new), SiteRows(seq, q, outputs), beta, epoch,
        step, rng.ACCEPT)
    state = dataclasses.replace(state, tokens=tokens, raw_terms=raw, local_terms=local, e_raw=e_raw, e_local=e_local)
    return state, accepted, changed


def _unchanged_rows_kept(cache: torch.Tensor, act: torch.Tensor, changed: torch.Tensor, seq: torch.Tensor,
                         q: torch.Tensor, outputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """The model's output chunks with the rows of unchanged chains replaced by their cached rows (the op writes
    an accepted chain's rows into the cache: an unchanged chain's must stay the ones it has)."""
    kept, start = [], 0
    for out in outputs:
        end = start + out.shape[0]
        s, p = seq[start:end], q[start:end]
        kept.append(torch.where(changed.index_select(0, s)[:, None], out.to(cache.dtype),
                                cache[act.index_select(0, s), p]))
        start = end
    return kept
