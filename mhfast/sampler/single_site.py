"""Single-site steps: Metropolis-Hastings (paper, Algorithm 1) and degenerate Gibbs (section 6).

One step moves every active chain (one position each) at once.

MH with a cache (the efficient inner loop). For each chain the state keeps, per energy
position t, the model output of X masked at t (``state.cache``) and the energy terms. At
position i:

* the proposal distribution is the cached row i (the LM head applied to one row): X and X'
  masked at i are the same sequence, so no model call is needed to propose;
* a proposal equal to the current token is X' = X, accepted with probability 1: no model call;
* otherwise X' needs ``T_e - 1`` new masked rows (X' masked at every other energy position);
  the term of position i comes from the cached row i at the proposed token. Accepted
  chains copy the new rows into the cache, so E(X) is never recomputed.

Degenerate Gibbs (Wang & Cho) proposes from the same conditional and always accepts; the
state changes every step, so there is no cache: one fresh masked row per chain and step.

Example:
    >>> import mhfast, torch
    >>> from mhfast.models.tabular import TabularMLM
    >>> r = mhfast.sample(TabularMLM.random(3, 2, seed=0), 2, chains=4, epochs=3, burn_in=1, backend="reference")
    >>> r.tokens.shape
    torch.Size([1, 4, 2])
"""
from __future__ import annotations

import torch

from . import rng
from .runner import ModelRunner, sum_terms
from .state import ChainState, EpochStats


class StepConfig:
    """The per-call constants a step needs."""

    def __init__(self, proposal_temperature: float, top_p: float, backend, runner: ModelRunner):
        self.proposal_temperature = float(proposal_temperature)
        self.top_p = float(top_p)
        self.backend = backend
        self.runner = runner


def _accept(cfg: StepConfig, state: ChainState, chains: torch.Tensor, positions: torch.Tensor,
            proposed: torch.Tensor, energy_proposed: torch.Tensor, logq_forward: torch.Tensor,
            logq_reverse: torch.Tensor, beta: float | None, epoch: int, step: int) -> torch.Tensor:
    """mh_accept_ on the chains ``chains`` (tokens written back); ``beta=None`` accepts always.

    Accept-always uses the same op with beta = 0 and logq_reverse = logq_forward, so
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
    else:
        beta_t = torch.full((n,), float(beta), device=dev)
    u = rng.uniforms_from_keys(state.rng_keys[chains], epoch, step, rng.ACCEPT)
    accepted = cfg.backend.mh_accept_(tokens, positions, proposed, energy, energy_proposed, logq_forward,
                                      logq_reverse, beta_t, u)
    state.tokens[chains] = tokens
    return accepted


def commit_accepted(state: ChainState, chains: torch.Tensor, accepted: torch.Tensor, raw_new: torch.Tensor,
                    local_new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Copy the proposal's energy terms into the accepted chains (masked, without a host sync)."""
    keep = accepted[:, None]
    state.raw_terms.index_copy_(0, chains, torch.where(keep, raw_new, state.raw_terms.index_select(0, chains)))
    state.local_terms.index_copy_(0, chains, torch.where(keep, local_new, state.local_terms.index_select(0, chains)))
    e_raw_new, e_local_new = sum_terms(raw_new), sum_terms(local_new)
    state.e_raw.index_copy_(0, chains, torch.where(accepted, e_raw_new, state.e_raw.index_select(0, chains)))
    state.e_local.index_copy_(0, chains, torch.where(accepted, e_local_new, state.e_local.index_select(0, chains)))
    return e_raw_new, e_local_new


def changed_chains(changed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices of the step's chains whose proposal differs from their state: the one host sync of
    a step (the caller then knows how many rows to forward). Returns ``(device, CPU)`` copies."""
    local_host = changed.cpu().nonzero().squeeze(1)
    return local_host.to(changed.device), local_host


def evaluate_and_accept(cfg: StepConfig, state: ChainState, ch: torch.Tensor, ch_host: torch.Tensor,
                        positions: torch.Tensor, proposed: torch.Tensor, logq_forward: torch.Tensor,
                        logq_reverse: torch.Tensor, known_logits: torch.Tensor, beta: float | None, epoch: int,
                        step: int, stats: EpochStats) -> None:
    """The MH test of proposals X' != X of the chains ``ch`` (single-site and block moves alike).

    ``positions``/``proposed``: Long[n, K] (-1: unused slot). The first ``len(known_logits)``
    chains make single-site moves at ``positions[:, 0]``: X' masked there is X masked there, so
    that energy term comes from the cached row (``known_logits``, its V logits) and only the
    other ``T_e - 1`` rows of X' are forwarded; the other chains forward all ``T_e`` rows.
    With a cache, accepted chains store the new rows: the cache stays the current state's.
    """
    runner, be = cfg.runner, cfg.backend
    n = ch.shape[0]
    nk = known_logits.shape[0]
    dev = state.tokens.device
    # X': unused slots repeat slot 0, so the scatter never writes two different values to one cell.
    valid = positions >= 0
    x_new = state.tokens.index_select(0, ch).scatter_(1, torch.where(valid, positions, positions[:, :1]),
                                                      torch.where(valid, proposed, proposed[:, :1]))
    known, p_known, w_known = torch.arange(nk, device=dev), positions[:nk, 0], proposed[:nk, 0]
    need = state.energy_mask.index_select(0, ch)
    need[known, p_known] = False
    num_rows = int(state.num_energy_host.index_select(0, ch_host).sum()) - nk  # host counts: no sync
    raw_new = state.raw_terms.index_select(0, ch)
    local_new = state.local_terms.index_select(0, ch)
    outputs = None
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
    target_new = sum_terms(raw_new if state.energy == "raw" else local_new)
    accepted = _accept(cfg, state, ch, positions, proposed, target_new, logq_forward, logq_reverse, beta, epoch,
                       step)
    commit_accepted(state, ch, accepted, raw_new, local_new)
    if outputs is not None:  # accepted chains: the rows of X' become the cache (a known row is unchanged)
        m_rows = ch.index_select(0, seq)
        old = state.cache[m_rows, q]
        state.cache[m_rows, q] = torch.where(accepted.index_select(0, seq)[:, None], outputs.to(old.dtype), old)
    k = accepted.sum()
    stats.accepted += k
    stats.novel += k


def mh_step(cfg: StepConfig, state: ChainState, act: torch.Tensor, act_host: torch.Tensor, pos: torch.Tensor,
            beta: float | None, epoch: int, step: int, stats: EpochStats) -> None:
    """One single-site MH step of the chains ``act`` (``act_host``: CPU copy) at positions ``pos``.

    ``beta=None``: force accept (energies are still computed, so the cache stays valid).
    """
    runner, be = cfg.runner, cfg.backend
    A = act.shape[0]
    if A == 0:
        return
    logits = runner.to_logits(state.cache[act, pos])  # proposal = cached conditional of row i
    cur = state.tokens[act, pos]
    u = rng.uniforms_from_keys(state.rng_keys[act], epoch, step, rng.PROPOSE)
    prop, logq_f, logq_r = be.propose(runner.proposal_logits(logits), cur, cfg.proposal_temperature, cfg.top_p, u)
    local, local_host = changed_chains(prop != cur)
    ch_host = act_host.index_select(0, local_host)
    n = ch_host.shape[0]
    stats.proposals += A
    stats.accepted += A - n  # X' = X: accepted with probability 1, nothing to compute
    if n == 0:
        return
    evaluate_and_accept(cfg, state, act.index_select(0, local), ch_host, pos.index_select(0, local)[:, None],
                        prop.index_select(0, local)[:, None], logq_f.index_select(0, local),
                        logq_r.index_select(0, local), logits.index_select(0, local), beta, epoch, step, stats)


def gibbs_step(cfg: StepConfig, state: ChainState, act: torch.Tensor, pos: torch.Tensor, epoch: int, step: int,
               stats: EpochStats) -> None:
    """One degenerate-Gibbs step of the chains ``act`` at ``pos``: sample X_i from the MLM conditional, accept."""
    runner, be = cfg.runner, cfg.backend
    A = act.shape[0]
    if A == 0:
        return
    rows = be.masked_copies(state.tokens, act, pos, runner.mask_id)
    logits = runner.to_logits(runner.outputs(rows, pos, state.ctx_of(act)))
    cur = state.tokens[act, pos]
    u = rng.uniforms_from_keys(state.rng_keys[act], epoch, step, rng.PROPOSE)
    prop, logq_f, _ = be.propose(runner.proposal_logits(logits), cur, cfg.proposal_temperature, cfg.top_p, u)
    zeros = torch.zeros(A, device=state.tokens.device)
    _accept(cfg, state, act, pos, prop, zeros, logq_f, logq_f, None, epoch, step)
    stats.proposals += A
    stats.accepted += A
    stats.novel += (prop != cur).sum()
