"""Block steps: block MH and degenerate block Gibbs (paper, section 4.1 "Block MH sampling", 7.3).

For a block I of positions, X masked at every position of I is forwarded once (one row,
logits at |I| positions) and each X'_i, i in I, is drawn independently from
``q(X'_i | X without I)`` (temperature and top_p apply per position). The reverse proposal
``prod_i q(X_i | X' without I)`` uses the same row, because X' without I = X without I, so
the MH ratio is exact: ``log q_reverse = sum_i log q(X_i)``, ``log q_forward = sum_i log q(X'_i)``.
The energy of X' needs its ``T_e`` masked rows (nothing of the current state's rows can be
reused once two or more positions change); the current energy is kept per chain.
"block-gibbs" uses the same proposal and always accepts (with proposal temperature -> 0 this
is Mask-Predict-like iterative refinement).

Example:
    >>> import mhfast
    >>> from mhfast.models.tabular import TabularMLM
    >>> r = mhfast.sample(TabularMLM.random(3, 3, seed=0), 3, sampler="block-mh", block_schedule=2,
    ...                   chains=2, epochs=2, burn_in=0, backend="reference")
    >>> r.tokens.shape
    torch.Size([1, 2, 3])
"""
from __future__ import annotations

import torch

from . import rng
from .runner import sum_terms
from .single_site import StepConfig, _accept, commit_accepted
from .state import ChainState, EpochStats, score_states


def block_step(cfg: StepConfig, state: ChainState, blocks: torch.Tensor, beta: float | None, epoch: int,
               step: int, stats: EpochStats, gibbs: bool) -> None:
    """One block step; ``blocks`` Long[M, K] positions (-1: unused slot; a row of -1: chain idle).

    ``gibbs=True``: accept always and skip the energy of X' (block Gibbs). ``beta=None``
    (force-accept epochs): accept always but keep energies exact.
    """
    runner, be = cfg.runner, cfg.backend
    dev = state.tokens.device
    act = (blocks >= 0).any(dim=1).nonzero().squeeze(1)
    A = act.shape[0]
    if A == 0:
        return
    blk = blocks.index_select(0, act)  # [A, K]
    K = blk.shape[1]
    r, slot = (blk >= 0).nonzero(as_tuple=True)  # row-major: r ascending
    pos = blk[r, slot]
    x = state.tokens.index_select(0, act)
    rows = x.clone()
    rows[r, pos] = runner.mask_id  # X masked at every position of its block
    logits = runner.to_logits(runner.outputs_at(rows, r, pos, state.ctx_of(act)))
    cur = x[r, pos]
    chain_of = act.index_select(0, r)
    u = rng.uniforms(cfg.seed, state.inputs[chain_of], state.chain_ids[chain_of], epoch, step, rng.PROPOSE,
                     slot)
    prop, logq_f, logq_r = be.propose(runner.proposal_logits(logits), cur, cfg.proposal_temperature, cfg.top_p, u)
    # Sum over the block in float64 (order-independent, so batch-independent).
    lf = torch.zeros(A, dtype=torch.float64, device=dev).index_add_(0, r, logq_f.double()).float()
    lr = torch.zeros(A, dtype=torch.float64, device=dev).index_add_(0, r, logq_r.double()).float()
    diff = torch.zeros(A, dtype=torch.long, device=dev).index_add_(0, r, (prop != cur).long())
    proposed = torch.zeros_like(blk)
    proposed[r, slot] = prop
    changed_local = (diff > 0).nonzero().squeeze(1)
    n = changed_local.shape[0]
    stats.proposals += A
    stats.accepted += A - n  # X' = X: accepted with probability 1
    if n == 0:
        return
    ch = act.index_select(0, changed_local)
    blk_ch, prop_ch = blk.index_select(0, changed_local), proposed.index_select(0, changed_local)
    if gibbs:
        zeros = torch.zeros(n, device=dev)
        _accept(cfg, state, ch, blk_ch, prop_ch, zeros, lf[changed_local], lf[changed_local], None, epoch, step)
        stats.accepted += n
        stats.novel += n
        return
    x_new = x.index_select(0, changed_local)
    valid = blk_ch >= 0
    rr, ss = valid.nonzero(as_tuple=True)
    x_new[rr, blk_ch[rr, ss]] = prop_ch[rr, ss]
    raw_new, local_new, _ = score_states(runner, be, x_new, state.energy_mask.index_select(0, ch), state.ctx_of(ch))
    target_new = sum_terms(raw_new if state.energy == "raw" else local_new)
    accepted = _accept(cfg, state, ch, blk_ch, prop_ch, target_new, lf[changed_local], lr[changed_local], beta,
                       epoch, step)
    commit_accepted(state, ch, accepted, raw_new, local_new)
    k = accepted.sum()
    stats.accepted += k
    stats.novel += k
