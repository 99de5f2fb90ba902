"""The moves the kernels are made of: propose from a conditional, score X', accept or reject.

Single-site MH with a cache (the efficient inner loop). For each chain the state keeps, per energy
position t, the model output of X masked at t (``state.cache``) and the energy terms. At position i:

* the proposal distribution is the cached row i (the LM head applied to one row): X and X'
  masked at i are the same sequence, so no model call is needed to propose;
* a proposal equal to the current token is X' = X, accepted with probability 1: no model call;
* otherwise X' needs ``T_e - 1`` new masked rows (X' masked at every other energy position);
  the term of position i comes from the cached row i at the proposed token. Accepted
  chains copy the new rows into the cache, so E(X) is never recomputed.

Block moves (section 4.1) propose several positions from one row of X masked at the whole block
and need all ``T_e`` rows of X' (:func:`evaluate_and_accept` handles both).

Every function returns a new :class:`~mhfast.sampler.state.ChainState` (the cache buffer is
updated in place and donated, see :mod:`mhfast.sampler.state`) and a
:class:`~mhfast.sampler.kernels.base.StepInfo`.

Example:
    >>> import mhfast
    >>> from mhfast.models.tabular import TabularMLM
    >>> r = mhfast.sample(TabularMLM.random(3, 2, seed=0), 2, chains=4, epochs=3, burn_in=1, backend="reference")
    >>> r.tokens.shape
    torch.Size([1, 4, 2])
"""
from __future__ import annotations

import bisect
import dataclasses

import torch

from ..op_types import ChainRows, SiteProposal, SiteRows, SiteTerms
from . import rng
from .step import StepContext, StepInfo
from .runner import sum_terms
from .memo import ProposalMemo
from .state import ChainState


def accept(ctx: StepContext, state: ChainState, chains: torch.Tensor, positions: torch.Tensor,
           proposed: torch.Tensor, energy_proposed: torch.Tensor, logq_forward: torch.Tensor,
           logq_reverse: torch.Tensor, beta: float | torch.Tensor | None, epoch: int, step: int
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """mh_accept_ on the chains ``chains``: returns ``(new tokens Long[M, T], accepted Bool[n])``.

    ``beta=None`` accepts always: the same op with beta = 0 and logq_reverse = logq_forward, so
    log_alpha = 0 > log(u) for every u in (0, 1).
    """
    n = chains.shape[0]
    dev = state.tokens.device
    tokens = state.tokens.index_select(0, chains)
    energy = state.target.index_select(0, chains)
    if beta is None:
        beta_t = torch.zeros(n, device=dev)
        energy_proposed = energy.clone()
        logq_reverse = logq_forward
    elif isinstance(beta, torch.Tensor):  # one beta per chain row (parallel tempering: f64[M])
        beta_t = beta.index_select(0, chains).float()
    else:
        beta_t = torch.full((n,), float(beta), device=dev)
    u = rng.uniforms_from_keys(state.rng_keys[chains], epoch, step, rng.ACCEPT,
                               op=ctx.backend.counter_uniforms)
    accepted = ctx.backend.mh_accept_(tokens, positions, proposed, energy, energy_proposed, logq_forward,
                                      logq_reverse, beta_t, u)
    return state.tokens.index_copy(0, chains, tokens), accepted


def _commit(state: ChainState, tokens: torch.Tensor, chains: torch.Tensor, accepted: torch.Tensor,
            raw_new: torch.Tensor, local_new: torch.Tensor, extra: tuple | None) -> ChainState:
    """The state with the accepted chains' new tokens, energy terms and extra-term values (no host sync)."""
    keep = accepted[:, None]
    pick = lambda new, old: old.index_copy(0, chains, torch.where(  # noqa: E731
        keep if new.dim() == 2 else accepted, new, old.index_select(0, chains)))
    more = {} if extra is None else dict(term_values=pick(extra[0], state.term_values), e_extra=pick(extra[1],
                                                                                                      state.e_extra))
    return dataclasses.replace(
        state, tokens=tokens, raw_terms=pick(raw_new, state.raw_terms), local_terms=pick(local_new, state.local_terms),
        e_raw=pick(sum_terms(raw_new), state.e_raw), e_local=pick(sum_terms(local_new), state.e_local), **more)


def changed_chains(changed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices of the step's chains whose proposal differs from their state (of any mask's True entries): the
    one host sync of a step (the caller then knows how many rows to forward). Returns ``(device, CPU)`` copies."""
    if changed.device.type == "cpu":  # no copies to make (each would still be a dispatched call)
        local = changed.nonzero().squeeze(1)
        return local, local
    local_host = changed.cpu().nonzero().squeeze(1)
    return local_host.to(changed.device), local_host


def _score_proposals(ctx: StepContext, state: ChainState, ch: torch.Tensor, ch_host: torch.Tensor,
                     x_new: torch.Tensor, positions: torch.Tensor, proposed: torch.Tensor,
                     known_logits: torch.Tensor):
    """Energy terms of X' for the chains ``ch``: ``(raw f32[n,T], local f32[n,T], (seq, q, outputs))``.

    The first ``len(known_logits)`` chains make single-site moves: their term at ``positions[:, 0]``
    comes from the cached row; every other energy position of X' is one forwarded masked row.
    """
    runner, be = ctx.runner, ctx.backend
    nk = known_logits.shape[0]
    known, p_known, w_known = torch.arange(nk, device=ch.device), positions[:nk, 0], proposed[:nk, 0]
    need = state.energy_mask.index_select(0, ch)
    need[known, p_known] = False
    num_rows = int(state.num_energy_host.index_select(0, ch_host).sum()) - nk  # host counts: no sync
    raw_new = state.raw_terms.index_select(0, ch)
    local_new = state.local_terms.index_select(0, ch)
    seq = q = outputs = None
    if num_rows:
        seq, q = torch.nonzero_static(need, size=num_rows).unbind(1)
        rows = be.masked_copies(x_new, seq, q, runner.mask_id)
        ci = state.ctx_of(ch.index_select(0, seq)) if state.ctx_index is not None else None
        r, l, outputs = runner.score_rows(be, rows, q, x_new[seq, q], ci, keep_outputs=state.cache is not None)
        raw_new[seq, q] = r
        local_new[seq, q] = l
    if nk:  # single-site moves: the cached row read at the proposed token
        r_i, l_i = runner.terms_from_logits(be, known_logits, w_known)
        raw_new[known, p_known] = r_i
        local_new[known, p_known] = l_i
    return raw_new, local_new, (seq, q, outputs)


def evaluate_and_accept(ctx: StepContext, state: ChainState, ch: torch.Tensor, ch_host: torch.Tensor,
                        positions: torch.Tensor, proposed: torch.Tensor, logq_forward: torch.Tensor,
                        logq_reverse: torch.Tensor, known_logits: torch.Tensor, beta: float | None, epoch: int,
                        step: int) -> tuple[ChainState, torch.Tensor]:
    """The MH test of proposals X' != X of the chains ``ch`` (single-site and block moves alike).

    ``positions``/``proposed``: Long[n, K] (-1: unused slot). See :func:`_score_proposals` for
    ``known_logits``. With a cache, accepted chains store the new rows: the cache stays the
    current state's. Returns the new state and the number of accepted chains (a 0-d tensor).
    """
    # X': unused slots repeat slot 0, so the scatter never writes two different values to one cell.
    valid = positions >= 0
    x_new = state.tokens.index_select(0, ch).scatter_(1, torch.where(valid, positions, positions[:, :1]),
                                                      torch.where(valid, proposed, proposed[:, :1]))
    raw_new, local_new, (seq, q, outputs) = _score_proposals(ctx, state, ch, ch_host, x_new, positions, proposed,
                                                             known_logits)
    target_new = sum_terms(raw_new if state.energy == "raw" else local_new)
    extra = None
    if ctx.terms is not None and ctx.terms.terms:  # extra energy terms of X', batched over the chains
        values = ctx.terms.evaluate(x_new, state.term_index.index_select(0, ch))
        extra = (values, ctx.terms.weighted(values))
        target_new = target_new + extra[1]
    tokens, accepted = accept(ctx, state, ch, positions, proposed, target_new, logq_forward, logq_reverse, beta,
                              epoch, step)
    new_state = _commit(state, tokens, ch, accepted, raw_new, local_new, extra)
    if outputs is not None:  # accepted chains: the rows of X' become the cache (a known row is unchanged)
        m_rows = ch.index_select(0, seq)
        old = state.cache[m_rows, q]
        state.cache[m_rows, q] = torch.where(accepted.index_select(0, seq)[:, None], outputs.to(old.dtype), old)
    if state.counts is not None:
        state.counts.tested(ch, accepted)
        state.counts.tested_at(ch, positions, accepted, proposed=proposed, current=state.tokens)
    return new_state, accepted.sum()


def can_fuse_propose(ctx: StepContext, state: ChainState) -> bool:
    """Whether :func:`propose_sites` runs as one ``mh_propose_site`` op: the cache holds V-wide logits
    (not features, which need the model's output layer), no AllowedTokens mask applies (it
    depends on the input and the position; the op blocks one id set for every row) and the proposal
    is the plain nucleus (uniform_mix = 0: a uniform share goes through ``propose``)."""
    allowed = ctx.terms.allowed if ctx.terms is not None else None
    return (not ctx.runner.use_features and allowed is None and state.cache.shape[2] == ctx.runner.vocab_size
            and ctx.uniform_mix == 0.0)


def propose_sites(ctx: StepContext, state: ChainState, act: torch.Tensor, pos: torch.Tensor, epoch: int,
                  step: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Proposals of the chains ``act`` at ``pos`` from their cached rows: ``(proposed, logq_forward,
    logq_reverse, changed, logits)``.

    When the cache holds logits and no AllowedTokens mask applies, one fused op
    (``mh_propose_site``: gather, special ids at -inf, RNG, propose) and ``logits`` None (the
    caller reads the few rows it needs from the cache). Otherwise (a feature cache needs the
    model's output layer; an AllowedTokens mask is per input and position) the same numbers
    from the unfused ops, and ``logits`` the rows' logits.
    """
    runner, be = ctx.runner, ctx.backend
    if can_fuse_propose(ctx, state):
        return (*be.mh_propose_site(state.cache, state.tokens, state.rng_keys, act, pos, runner.special, epoch,
                                    step, rng.PROPOSE, ctx.proposal_temperature, ctx.top_p), None)
    logits = runner.to_logits(state.cache[act, pos])  # proposal = cached conditional of row i
    cur = state.tokens[act, pos]
    u = rng.uniforms_from_keys(state.rng_keys[act], epoch, step, rng.PROPOSE, op=be.counter_uniforms)
    prop, logq_f, logq_r = be.propose(ctx.proposal_logits(logits, state.term_index[act], pos), cur,
                                      ctx.proposal_temperature, ctx.top_p, u, ctx.uniform_mix)
    return prop, logq_f, logq_r, prop != cur, logits


def site_terms(ctx: StepContext, state: ChainState, ch: torch.Tensor, ch_host: torch.Tensor, pos: torch.Tensor,
               prop: torch.Tensor, known_logits: torch.Tensor, num_rows: int | None = None):
    """Per-position terms of X' for single-site moves of the distinct chains ``ch``: ``(x_new, raw_new,
    local_new, seq, q, outputs)`` (the same numbers as :func:`_score_proposals`, in fewer ops; outputs:
    the model's outputs as a list of sub-batches, for the cache).

    The term at ``pos`` comes from the cached row (``known_logits``) at the proposed token; every
    other energy position of X' is one forwarded masked row ``(seq, q)`` (outputs: for the cache).
    ``num_rows``: their number, if the caller has counted it (else counted here from host counts: no sync).
    """
    runner, be = ctx.runner, ctx.backend
    n = ch.shape[0]
    at = pos[:, None]
    if num_rows is None:
        num_rows = int(state.num_energy_host.index_select(0, ch_host).sum()) - n
    x_new, raw_new, local_new, seq, q, rows, targets = be.mh_site_rows(
        state.tokens, state.energy_mask, state.raw_terms, state.local_terms, ch, pos, prop, num_rows, runner.mask_id)
    if num_rows:
        ci = state.ctx_of(ch.index_select(0, seq)) if state.ctx_index is not None else None
        r, l, outputs = runner.score_rows(be, rows, q, targets, ci, keep_outputs=True, chunks=True)
        raw_new.index_put_((seq, q), r)
        local_new.index_put_((seq, q), l)
    else:
        outputs = []
    r_i, l_i = runner.terms_from_logits(be, known_logits, prop)
    raw_new.scatter_(1, at, r_i[:, None])
    local_new.scatter_(1, at, l_i[:, None])
    return x_new, raw_new, local_new, seq, q, outputs


def chain_rows(state: ChainState) -> ChainRows:
    """The state as the fused ops take it (:class:`mhfast.op_types.ChainRows`; the same tensors)."""
    return ChainRows(state.tokens, state.raw_terms, state.local_terms, state.e_raw, state.e_local, state.target,
                     state.cache, state.rng_keys)


def site_evaluate_and_accept(ctx: StepContext, state: ChainState, ch: torch.Tensor, ch_host: torch.Tensor,
                             pos: torch.Tensor, prop: torch.Tensor, logq_forward: torch.Tensor,
                             logq_reverse: torch.Tensor, known_logits: torch.Tensor, beta: float | None, epoch: int,
                             step: int, memo: ProposalMemo | None = None, memo_sel: torch.Tensor | None = None,
                             memo_hits: int = 0) -> tuple[ChainState, torch.Tensor]:
    """:func:`evaluate_and_accept` for single-site moves (``pos``/``prop`` Long[n], distinct chains ``ch``):
    the same chains, with the MH test, the state update and the cache rows in one op (``mh_commit_site_``).

    Energies stay :func:`sum_terms` of the term rows (torch's float64 sum, as every other energy of
    the state), computed here once per moving chain and handed to the op.

    ``memo`` (:mod:`mhfast.sampler.memo`): ``memo_sel`` are the chains' proposals in its lookup, the first
    ``n - h`` chains missed (their terms go into the memo once computed) and the last ``h = memo_hits`` hit: their
    terms are read from it and no rows are forwarded for them (``known_logits`` then covers the first ``n - h``
    chains only); the remembered proposals that are accepted forward their rows for the cache
    (:func:`_refresh_rows`).
    """
    h = memo_hits
    m = ch.shape[0] - h
    if h == 0:  # (no slicing: each slice would be one more dispatched op in every step)
        x_new, raw_new, local_new, seq, q, outputs = site_terms(ctx, state, ch, ch_host, pos, prop, known_logits)
        if memo is not None:
            memo.store(memo_sel, raw_new, local_new, m)
    else:
        assert not (ctx.terms is not None and ctx.terms.terms), "the memo does not keep extra-term values"
        x_new, raw_new, local_new, seq, q, outputs = _remembered_terms(ctx, state, ch, ch_host, pos, prop,
                                                                       known_logits, memo, memo_sel, m)
    e_raw_new, e_local_new = sum_terms(raw_new), sum_terms(local_new)
    target_new = e_raw_new if state.energy == "raw" else e_local_new
    extra = None
    if ctx.terms is not None and ctx.terms.terms:  # extra energy terms of X', batched over the chains
        values = ctx.terms.evaluate(x_new, state.term_index.index_select(0, ch))
        extra = (values, ctx.terms.weighted(values))
        target_new = target_new + extra[1]
    tokens, raw, local, e_raw, e_local, accepted = ctx.backend.mh_commit_site_(
        chain_rows(state), SiteProposal(ch, pos, prop, logq_forward, logq_reverse),
        SiteTerms(raw_new, local_new, e_raw_new, e_local_new, target_new), SiteRows(seq, q, outputs), beta, epoch,
        step, rng.ACCEPT)
    more = {}
    if extra is not None:  # the extra terms' values of accepted chains (not in the op: optional, rare)
        pick = lambda new, old: old.index_copy(0, ch, torch.where(  # noqa: E731
            accepted[:, None] if new.dim() == 2 else accepted, new, old.index_select(0, ch)))
        more = dict(term_values=pick(extra[0], state.term_values), e_extra=pick(extra[1], state.e_extra))
    if state.counts is not None:
        state.counts.tested(ch, accepted)
        state.counts.tested_at(ch, pos, accepted)
    state = dataclasses.replace(state, tokens=tokens, raw_terms=raw, local_terms=local, e_raw=e_raw, e_local=e_local,
                                **more)
    if h:
        memo.hits += h
        _refresh_rows(ctx, state, ch[m:], ch_host[m:], pos[m:], accepted[m:])
    return state, accepted.sum()


def _remembered_terms(ctx: StepContext, state: ChainState, ch: torch.Tensor, ch_host: torch.Tensor, pos: torch.Tensor,
                      prop: torch.Tensor, known_logits: torch.Tensor, memo: ProposalMemo, memo_sel: torch.Tensor,
                      m: int):
    """:func:`site_terms` of the first ``m`` chains (forwarded rows, stored into the memo) followed by the memo's
    terms of the others: ``(x_new or None, raw_new, local_new, seq, q, outputs)``, rows for the first ones only.
    The store comes first: a hit may be a miss of this very step (the same X' proposed by two chains)."""
    if m:
        x_new, raw_new, local_new, seq, q, outputs = site_terms(ctx, state, ch[:m], ch_host[:m], pos[:m], prop[:m],
                                                                known_logits)
        memo.store(memo_sel[:m], raw_new, local_new, m)
    else:  # every proposal is remembered: no rows at all
        x_new, seq, q, outputs = None, ch[:0], ch[:0], []
        raw_new = local_new = state.raw_terms[:0]
    raw_h, local_h = memo.terms(memo_sel[m:])
    return x_new, torch.cat([raw_new, raw_h]), torch.cat([local_new, local_h]), seq, q, outputs


def _refresh_rows(ctx: StepContext, state: ChainState, ch: torch.Tensor, ch_host: torch.Tensor, pos: torch.Tensor,
                  accepted: torch.Tensor) -> None:
    """The cache rows of the chains ``ch`` (``ch_host``: CPU copy) that ``accepted`` a remembered proposal (at
    ``pos``): their state is the X' whose terms the memo held, but not its model rows. Forwards them (the rows
    ``mh_site_rows`` makes: every energy position but ``pos``, whose row X and X' share) and writes them into
    ``state.cache`` in place. A host read of ``accepted``."""
    which, which_host = changed_chains(accepted)
    if which_host.numel() == 0:
        return
    runner, be = ctx.runner, ctx.backend
    chains, at = ch.index_select(0, which), pos.index_select(0, which)
    num_rows = int(state.num_energy_host.index_select(0, ch_host.index_select(0, which_host)).sum()) - len(which_host)
    if num_rows == 0:
        return
    _, _, _, seq, q, rows, _ = be.mh_site_rows(state.tokens, state.energy_mask, state.raw_terms, state.local_terms,
                                               chains, at, state.tokens[chains, at], num_rows, runner.mask_id)
    outputs = runner.outputs(rows, q, state.ctx_of(chains.index_select(0, seq)))
    state.cache[chains.index_select(0, seq), q] = outputs.to(state.cache.dtype)


def single_site_mh(ctx: StepContext, state: ChainState, act: torch.Tensor, act_host: torch.Tensor,
                   pos: torch.Tensor, beta: float | None, epoch: int, step: int, memo: ProposalMemo | None = None
                   ) -> tuple[ChainState, StepInfo]:
    """One single-site MH step of the chains ``act`` (``act_host``: CPU copy) at positions ``pos``:
    :func:`propose_sites`, one host sync (how many chains changed), :func:`site_evaluate_and_accept`.

    ``beta=None``: force accept (energies are still computed, so the cache stays valid). ``memo``: proposals
    whose sequence a chain of the same input evaluated before (or earlier in this step) are decided from their
    remembered terms, without rows (:mod:`mhfast.sampler.memo`).
    """
    A = act.shape[0]
    if A == 0:
        return state, StepInfo(0, 0, 0, scored=True)
    if state.counts is not None:
        state.counts.proposed(act_host)
        state.counts.proposed_at(act, pos)
    prop, logq_f, logq_r, changed, logits = propose_sites(ctx, state, act, pos, epoch, step)
    if memo is None:
        local, local_host = changed_chains(changed)
        h = 0
    else:  # the changed chains, those whose proposal the memo knows last
        order = memo.lookup(state.tokens, act, pos, prop, changed)
        local, local_host, h = _misses_then_hits(order)
    ch_host = act_host.index_select(0, local_host)
    n = ch_host.shape[0]
    if n == 0:  # X' = X everywhere: accepted with probability 1, nothing to compute
        return state, StepInfo(A, A, 0, scored=True)
    ch, pos_ch = act.index_select(0, local), pos.index_select(0, local)
    m = n - h
    misses, ch_m, pos_m = (local, ch, pos_ch) if h == 0 else (local[:m], ch[:m], pos_ch[:m])  # no slice ops if no hit
    known = logits.index_select(0, misses) if logits is not None else state.cache[ch_m, pos_m]
    with_memo = {} if memo is None else dict(memo=memo, memo_sel=local, memo_hits=h)
    state, k = site_evaluate_and_accept(ctx, state, ch, ch_host, pos_ch, prop.index_select(0, local),
                                        logq_f.index_select(0, local), logq_r.index_select(0, local), known, beta,
                                        epoch, step, **with_memo)
    return state, StepInfo(A, A - n + k, k, scored=True)


def _misses_then_hits(order: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Indices of the changed proposals, the memo's misses first and its hits last, on the device and the host,
    and the number of hits, from the memo's ``order`` mask (misses then hits, ``2A`` entries): it goes through
    :func:`changed_chains` (the step's one host sync), so hit ``j`` comes back as ``A + j``. The host side is
    a list (sorted indices: one bisection), so a step without hits makes no torch call more than without the memo."""
    A = order.shape[0] // 2
    both, both_host = changed_chains(order)
    flat = both_host.tolist()  # (a fraction of a microsecond here, where any torch op costs a few)
    h = len(flat) - bisect.bisect_left(flat, A)
    if h == 0:
        return both, both_host, 0
    local_host = both_host.remainder(A)
    return (local_host if both is both_host else both.remainder(A)), local_host, h


def single_site_gibbs(ctx: StepContext, state: ChainState, act: torch.Tensor, act_host: torch.Tensor,
                      pos: torch.Tensor, epoch: int, step: int) -> tuple[ChainState, StepInfo]:
    """One degenerate-Gibbs step of the chains ``act`` (``act_host``: CPU copy) at ``pos``: sample X_i from
    the MLM conditional, accept.

    The state changes every step, so there is no cache: one fresh masked row per chain and step;
    the energies are left stale (``scored=False``) until the kernel rescores at the epoch's end.
    """
    runner, be = ctx.runner, ctx.backend
    A = act.shape[0]
    if A == 0:
        return state, StepInfo(0, 0, 0, scored=False)
    rows = be.masked_copies(state.tokens, act, pos, runner.mask_id)
    logits = runner.to_logits(runner.outputs(rows, pos, state.ctx_of(act)))
    cur = state.tokens[act, pos]
    u = rng.uniforms_from_keys(state.rng_keys[act], epoch, step, rng.PROPOSE,
                               op=ctx.backend.counter_uniforms)
    prop, logq_f, _ = be.propose(ctx.proposal_logits(logits, state.term_index[act], pos), cur,
                                 ctx.proposal_temperature, ctx.top_p, u, ctx.uniform_mix)
    zeros = torch.zeros(A, device=state.tokens.device)
    tokens, _ = accept(ctx, state, act, pos, prop, zeros, logq_f, logq_f, None, epoch, step)
    changed = prop != cur
    if state.counts is not None:
        state.counts.proposed(act_host)
        state.counts.taken(act, changed)
        state.counts.proposed_at(act, pos)
        state.counts.taken_at(act, pos, changed=changed)
    return dataclasses.replace(state, tokens=tokens), StepInfo(A, A, changed.sum(), scored=False)
