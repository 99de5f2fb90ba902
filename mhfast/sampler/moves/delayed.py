"""Delayed acceptance (Christen & Fox 2005): a cheap first MH test, then the exact rows only for its survivors.

Single-site MH with option ``delayed="window:K"`` replaces the step's score -> accept-and-commit phases by two
stages (the argument that the chain keeps the exact target is docs/delayed.md):

1. **surrogate**: forward only the rows of X' at the energy positions within K of the proposed position i (the
   *window*; the term at i comes from the cached row, as always), take every other term as unchanged, add the
   extra energy terms of X' exactly, and test ``min(1, exp(-beta dE~) q(X | X') / q(X' | X))`` with a uniform of
   stream :data:`~mhfast.runtime.rng.DELAYED_FIRST`. dE~ = E~_i(X') - E~_i(X) for the fixed function
   E~_i(X) = sum of the window's terms (+ extra terms), so stage 1 is MH for the target exp(-beta E~_i);
2. **correction**, for the survivors only: forward their other rows (the exact terms of X'), and accept with
   ``min(1, exp(-beta (dE - dE~)))`` (stream :data:`~mhfast.runtime.rng.DELAYED_SECOND`).

Stage 2 runs through the step's fused accept-and-commit op (:func:`.site_commit.commit`), given a target energy of
X' shifted to ``E(X) + dE - dE~`` and equal forward and reverse proposal terms, so the op's test is exactly stage
2's while its commit (tokens, term rows, energies, the cache rows of both stages) is the one every step uses: no
second commit path to keep equal to it. The state's target is a property of the committed energies, so the
shifted number is read by the test only.

Example:
    >>> import mhfast
    >>> from mhfast.models.tabular import TabularMLM
    >>> r = mhfast.sample(TabularMLM.random(3, 6, seed=0), 6, chains=3, epochs=3, burn_in=0, delayed="window:1")
    >>> r.delayed_passed <= r.delayed_tested and r.delayed_accepted <= r.delayed_passed
    True
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from ...op_types import SiteProposal, SiteRows, SiteTerms
from ...runtime import rng
from ...runtime.runner import sum_terms
from ..state import ChainState
from ..step import StepContext
from .accept import beta_rows
from .changed import changed_chains
from .site_commit import commit, with_extra
from .site_score import extra_terms, model_terms
from .site_types import ExtraTerms, TestedSites


@dataclass
class DelayedAcceptance:
    """The run's delayed acceptance: its window half-width and its counters (SampleResult's ``delayed_*``)."""

    window: int  #: K: the surrogate forwards the energy positions within K of the proposed one
    tested: int = 0  #: proposals X' != X that met the first test
    passed: int = 0  #: of them, passed it (their other rows were forwarded)
    accepted: Any = 0  #: of them, accepted by the second test (a device count until read: no host sync)
    rows_saved: int = 0  #: rows the first test's rejections did not forward


class Window(NamedTuple):
    """The surrogate's positions of each tested proposal."""

    near: torch.Tensor  #: Bool[n, T] positions within K of the proposed one (itself included)
    inner: torch.Tensor  #: Bool[n, T] the energy positions of ``near`` but the proposed one: stage 1's rows
    rows_host: torch.Tensor  #: CPU Long[n] ``inner``'s rows per proposal


class Surrogate(NamedTuple):
    """Stage 1's scores of X': the window's terms (the rest the state's), its model energy and extra terms."""

    raw: torch.Tensor  #: f32[n, T]
    local: torch.Tensor  #: f32[n, T]
    model_energy: torch.Tensor  #: f32[n] E~ without the extra terms (raw or local, as the run's energy)
    target: torch.Tensor  #: f32[n] E~ + the weighted extra terms: the first test's energy of X'
    rows: SiteRows  #: the window's rows (for the cache of the chains that accept)
    extra: ExtraTerms | None


def window_of(state: ChainState, proposal: SiteProposal, k: int) -> Window:
    """The window of each proposal: positions within ``k`` of ``proposal.pos`` (one host read: its row counts).

    Example:
        >>> from types import SimpleNamespace
        >>> s = SimpleNamespace(tokens=torch.zeros(1, 5, dtype=torch.long), energy_mask=torch.ones(1, 5, dtype=bool))
        >>> p = SiteProposal(torch.tensor([0]), torch.tensor([1]), torch.tensor([3]), torch.zeros(1), torch.zeros(1))
        >>> w = window_of(s, p, 1)
        >>> w.near.int().tolist(), w.inner.int().tolist(), w.rows_host.tolist()
        ([[1, 1, 1, 0, 0]], [[1, 0, 1, 0, 0]], [2])
    """
    T = state.tokens.shape[1]
    at = torch.arange(T, device=state.tokens.device)
    near = (at[None, :] - proposal.pos[:, None]).abs() <= k
    inner = state.energy_mask.index_select(0, proposal.ch) & near
    inner.scatter_(1, proposal.pos[:, None], False)
    return Window(near, inner, inner.sum(1).cpu())


def _rows_mask(state: ChainState, chains: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """A state-shaped [M, T] energy mask with ``mask`` in the rows ``chains`` (what ``mh_site_rows`` reads)."""
    return torch.zeros_like(state.energy_mask).index_copy_(0, chains, mask)


def surrogate_sites(ctx: StepContext, state: ChainState, tested: TestedSites, window: Window) -> Surrogate:
    """Stage 1's terms of every tested X': the window's rows forwarded, the rest the state's terms."""
    p = tested.proposal
    x_new, raw, local, rows = model_terms(
        ctx, state, chains=p.ch, chains_host=tested.chains_host, pos=p.pos, proposed=p.proposed,
        known_logits=tested.known_logits, num_rows=int(window.rows_host.sum()),
        energy_mask=_rows_mask(state, p.ch, window.inner))
    model_energy = sum_terms(raw) if state.energy == "raw" else sum_terms(local)
    extra = extra_terms(ctx, state, p.ch, x_new)
    target = model_energy + extra.weighted if extra is not None else model_energy
    return Surrogate(raw, local, model_energy, target, rows, extra)


def first_stage(ctx: StepContext, state: ChainState, proposal: SiteProposal, surrogate_target: torch.Tensor, *,
                beta: Any, epoch: int, step: int) -> torch.Tensor:
    """Stage 1's test, Bool[n]: ``log u < beta (E(X) - E~(X')) + log q(X | X') - log q(X' | X)``, as
    ``mh_accept_`` computes it (float32; NaN rejects). E(X) - E~(X') = E~_i(X) - E~_i(X'): the state's terms
    outside the window are those of both sides."""
    ch = proposal.ch
    energy = state.target.index_select(0, ch)
    log_alpha = (beta_rows(beta, ch, state.tokens.device) * (energy - surrogate_target)
                 + proposal.logq_reverse - proposal.logq_forward)
    u = rng.uniforms_from_keys(state.rng_keys.index_select(0, ch), epoch, step, rng.DELAYED_FIRST,
                               op=ctx.backend.counter_uniforms)
    return torch.log(u) < log_alpha


def _survivor_rows(first: SiteRows, passed: torch.Tensor, second: SiteRows) -> SiteRows:
    """The survivors' rows of both stages, numbered by survivor: stage 1's rows of the proposals that ``passed``
    (renumbered) then stage 2's."""
    if first.seq.numel() == 0:
        return second
    keep = passed.index_select(0, first.seq).nonzero().squeeze(1)
    if keep.numel() == 0:  # no survivor had window rows (no empty chunk for the op)
        return second
    renumber = torch.cumsum(passed.long(), 0) - 1
    seq = renumber.index_select(0, first.seq.index_select(0, keep))
    outputs = torch.cat(first.outputs).index_select(0, keep)
    return SiteRows(torch.cat([seq, second.seq]), torch.cat([first.q.index_select(0, keep), second.q]),
                    [outputs, *second.outputs])


def exact_survivors(ctx: StepContext, state: ChainState, tested: TestedSites, window: Window, sur: Surrogate,
                    passed: torch.Tensor, survivors: torch.Tensor, survivors_host: torch.Tensor
                    ) -> tuple[SiteProposal, SiteTerms, SiteRows]:
    """Stage 2's proposal, terms and rows for the commit op: the survivors' rows outside the window forwarded,
    their exact terms, and the target energy shifted so that the op's test is ``min(1, exp(-beta (dE - dE~)))``."""
    p = tested.proposal
    ch, pos = p.ch.index_select(0, survivors), p.pos.index_select(0, survivors)
    proposed, chains_host = p.proposed.index_select(0, survivors), tested.chains_host.index_select(0, survivors_host)
    near = window.near.index_select(0, survivors)
    outer = state.energy_mask.index_select(0, ch) & ~near
    num_rows = (int(state.num_energy_host.index_select(0, chains_host).sum()) - survivors_host.shape[0]
                - int(window.rows_host.index_select(0, survivors_host).sum()))
    _, raw2, local2, rows2 = model_terms(ctx, state, chains=ch, chains_host=chains_host, pos=pos, proposed=proposed,
                                         known_logits=tested.known_logits.index_select(0, survivors),
                                         num_rows=num_rows, energy_mask=_rows_mask(state, ch, outer))
    raw = torch.where(near, sur.raw.index_select(0, survivors), raw2)
    local = torch.where(near, sur.local.index_select(0, survivors), local2)
    e_raw, e_local = sum_terms(raw), sum_terms(local)
    exact_model = e_raw if state.energy == "raw" else e_local
    # the op tests beta (E(X) - target'): target' = E(X) + (dE - dE~) makes it stage 2's test (the extra terms,
    # exact in both stages, cancel); equal proposal terms cancel the Hastings ratio stage 1 already applied
    shifted = state.target.index_select(0, ch) + (exact_model - sur.model_energy.index_select(0, survivors))
    logq = p.logq_forward.index_select(0, survivors)
    proposal = SiteProposal(ch=ch, pos=pos, proposed=proposed, logq_forward=logq, logq_reverse=logq)
    return (proposal, SiteTerms(raw=raw, local=local, e_raw=e_raw, e_local=e_local, target=shifted),
            _survivor_rows(sur.rows, passed, rows2))


def _count(da: DelayedAcceptance, state: ChainState, tested: TestedSites, window: Window,
           passed_host: torch.Tensor, accepted: torch.Tensor) -> None:
    """The run's delayed-acceptance counters and the per-chain counts of the step (``accepted`` Bool[n])."""
    rejected = torch.ones(tested.chains_host.shape[0], dtype=torch.bool)
    rejected[passed_host] = False
    saved = state.num_energy_host.index_select(0, tested.chains_host) - 1 - window.rows_host
    da.tested += int(rejected.shape[0])
    da.passed += int(passed_host.shape[0])
    da.rows_saved += int(saved[rejected].sum())
    da.accepted = da.accepted + accepted.sum()
    if state.counts is not None:
        p = tested.proposal
        state.counts.tested(p.ch, accepted)
        state.counts.tested_at(p.ch, p.pos, accepted)


def delayed_commit(ctx: StepContext, state: ChainState, tested: TestedSites, da: DelayedAcceptance, *, beta: Any,
                   epoch: int, step: int) -> tuple[ChainState, torch.Tensor]:
    """Both stages on the tested proposals and the new state: ``(state, accepted Bool[n])``. ``beta`` is passed on
    as given (a number or a tensor [M]); not None (forced-accept epochs take the plain step: nothing to test)."""
    window = window_of(state, tested.proposal, da.window)
    sur = surrogate_sites(ctx, state, tested, window)
    passed = first_stage(ctx, state, tested.proposal, sur.target, beta=beta, epoch=epoch, step=step)
    survivors, survivors_host = changed_chains(passed)  # a host read: which chains forward the rest
    accepted = torch.zeros_like(passed)
    if survivors_host.shape[0]:
        proposal, terms, rows = exact_survivors(ctx, state, tested, window, sur, passed, survivors, survivors_host)
        new, taken = commit(ctx, state, proposal, terms, rows, beta=beta, epoch=epoch, step=step,
                            stream=rng.DELAYED_SECOND)
        if sur.extra is not None:
            extra = ExtraTerms(*(v.index_select(0, survivors) for v in sur.extra))
            new = with_extra(new, state, proposal.ch, taken, extra)
        accepted = accepted.index_copy(0, survivors, taken)
        state = new
    _count(da, state, tested, window, survivors_host, accepted)
    return state, accepted
