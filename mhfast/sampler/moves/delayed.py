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

With the proposal memo (:mod:`mhfast.sampler.memo`) the kernel stays the same two-stage test for every proposal;
the memo only supplies numbers (docs/delayed.md): a remembered X' (a *hit*) reads its window terms and its exact
terms from the remembered full terms (no rows at all); a *miss* forwards its window rows, its other rows only if
it passes stage 1, and only then are its full terms stored (a miss stopped at stage 1 has partial terms: its entry
stays unfilled, and an unfilled reservation counts as empty at the next lookup). A hit of an X' that a miss of
the same step reserved (two chains proposing one X') needs that miss's full terms, so such a miss forwards all
its rows whatever its stage 1 says (:meth:`~mhfast.sampler.memo.ProposalMemo.read_by_hits`).

**Exact early rejection** (``delayed="early:K"``, the local energy) runs the same machinery with another first
test: the terms of X' not forwarded are taken as 0 (a local term -log p is >= 0), which bounds E(X') from below,
and the uniform is the one exact MH's test of this step draws (stream ``ACCEPT``). A proposal stops only if even
the bound rejects it, that is, only if exact MH rejects it; the survivors meet exact MH's own test. The chains are
plain MH's, bit for bit; only the rows differ (Solonen et al. 2012's early rejection, for sums of non-negative
terms). It forwards in three steps: the first ``2K`` rows ranked by the terms of X' (learnt all run long: a
ranking never changes a decision), then :data:`~.early_rejection.EARLY_WIDEN` times as many
(:func:`~.early_rejection.middle_stage`), then the rest.
The memo remembers a stopped proposal with partial terms (NaN where no row was forwarded); a return that the
bound stops again costs no rows, and one that passes forwards only the missing rows
(:func:`~.early_rejection.complete_partial`; :mod:`.early_rejection` holds these parts).

**A cascade** (``delayed="cascade:K"``) puts a free stage in front of ``window:K``: stage 1 tests the proposal's
own term alone (the cached row: no rows, as ``window:0``), the survivors forward ``window:K``'s rows and meet a
middle test, ``min(1, exp(-beta (E~_K(X') - E~_0(X'))))`` (stream :data:`~mhfast.runtime.rng.DELAYED_MIDDLE`),
and that stage's survivors forward the rest for the correction against E~_K. The three log-ratios are
antisymmetric and multiply to exact MH's, so the argument of two stages holds (docs/delayed.md). Why: the own term
screens best when beta is well above 1 / the proposal temperature (late in an annealed run), the window's rows
when it is near it; the cascade pays the rows only for what the free stage lets through. It reuses early
rejection's middle-stage forward (:func:`~.early_rejection.middle_stage`).

Example:
    >>> import mhfast
    >>> from mhfast.models.tabular import TabularMLM
    >>> r = mhfast.sample(TabularMLM.random(3, 6, seed=0), 6, chains=3, epochs=3, burn_in=0, delayed="window:1")
    >>> r.delayed_passed <= r.delayed_tested and r.delayed_accepted <= r.delayed_passed
    True
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import torch

from ...op_types import SiteProposal, SiteRows, SiteTerms
from ...runtime import rng
from ...runtime.runner import sum_terms
from ..state import ChainState
from ..step import StepContext
from .accept import beta_rows
from .changed import changed_chains
from .early_rejection import EARLY_WIDEN, complete_partial, lower_bound, middle_stage
from .influence import InfluenceWindows, early_rejection, influence_ranked
from .site_commit import commit, refresh_remembered_rows, with_extra
from .site_score import extra_terms, keep_miss_rows, proposed_sequences
from .site_types import ExtraTerms, TestedSites
from .site_windows import Window, empty_rows, head, joined, model_energy, outer_terms, window_of, window_terms
from .user_surrogate import surrogate_delta, user_surrogate


@dataclass
class DelayedAcceptance:
    """The run's delayed acceptance: its window half-width and its counters (SampleResult's ``delayed_*``)."""

    window: int  #: K: the surrogate forwards the energy positions within K of the proposed one
    #: a user's surrogate ``E~(tokens Long[n, T], pos Long[n]) -> f32[n]`` (option ``delayed=<callable>``): it
    #: replaces the window (``window`` is then 0: stage 1 forwards no rows; :mod:`.user_surrogate`)
    surrogate: Callable[..., Any] | None = None
    #: option delayed="influence:K": the window's positions ranked by influence in burn-in, then frozen
    #: (:mod:`.influence`; until then the distance window)
    influence: InfluenceWindows | None = None
    #: option delayed="early:K": exact early rejection (:func:`first_stage`'s bound with the MH test's own uniform)
    #: instead of a surrogate: stage 1 rejects only proposals exact MH rejects, and stage 2 is exact MH's test
    early: bool = False
    #: early rejection's middle stage: the survivors of stage 1 forward ``widen`` times its rows (the top of the
    #: same ranking) and meet the bound again before the rest; 1: no middle stage
    widen: int = 1
    #: option delayed="cascade:K": the own term first (no rows), then the window's rows for its survivors
    #: (:func:`middle_test`), then the rest
    cascade: bool = False
    #: option delayed_min_temperature: an epoch with a colder target runs plain MH's step (:meth:`acts`)
    min_temperature: float = 0.0
    #: option delayed="auto": the fewest energy positions of an input it acts on (options.auto_fewest_energy); the
    #: chains of shorter inputs take plain MH's step, as they would alone (:meth:`acts_on`). None: every input
    fewest_energy: int | None = None
    tested: int = 0  #: proposals X' != X that met the first test
    passed: int = 0  #: of them, passed it (their other rows were forwarded)
    accepted: Any = 0  #: of them, accepted by the second test (a device count until read: no host sync)
    rows_saved: int = 0  #: rows the first test's rejections did not forward (a remembered proposal forwards none)

    def acts(self, epoch: Any) -> bool:
        """Whether this run's steps in ``epoch`` (a :class:`~mhfast.sampler.schedules.Epoch`) are delayed
        acceptance's: not on a forced-accept epoch (nothing to screen) nor below the coldest temperature it acts
        at. Each epoch's kernel, either one, is reversible for that epoch's target, so the switch keeps it.

        Example:
            >>> from mhfast.sampler.schedules import Epoch
            >>> da = DelayedAcceptance(2, min_temperature=0.25)
            >>> [da.acts(Epoch(0, t, b, True)) for t, b in ((0.3, 1 / 0.3), (0.25, 4.0), (0.2, 5.0), (1.0, None))]
            [True, True, False, False]
        """
        return epoch.beta is not None and epoch.target_temperature >= self.min_temperature

    def acts_on(self, state: Any, chains_host: torch.Tensor) -> torch.Tensor | None:
        """CPU Bool[A]: which of the chains ``chains_host`` (CPU Long[A]) it acts on, by their input's energy
        positions (option ``auto``); None: all of them.

        Example:
            >>> from types import SimpleNamespace
            >>> state = SimpleNamespace(num_energy_host=torch.tensor([12, 12, 6, 6]))
            >>> DelayedAcceptance(2, fewest_energy=10).acts_on(state, torch.tensor([0, 2, 3])).tolist()
            [True, False, False]
        """
        if self.fewest_energy is None:
            return None
        on = state.num_energy_host.index_select(0, chains_host) >= self.fewest_energy
        return None if bool(on.all()) else on


def delayed_acceptance(ctx: StepContext) -> DelayedAcceptance | None:
    """The run's :class:`DelayedAcceptance` for option ``delayed`` as resolved in ``ctx`` (None: off): the window,
    a user's surrogate, the ranking of ``influence:K`` (by the change, learnt in burn-in, then frozen) or of
    ``early:K`` (by the terms of X', all run long: early rejection's kernel is plain MH's whatever it forwards
    first, so nothing is frozen) and early rejection's middle stage. The samplers' options refuse what a kernel
    lacks (block MH: window:K only), so every kernel builds it here.

    Example:
        >>> from types import SimpleNamespace
        >>> da = delayed_acceptance(StepContext(SimpleNamespace(burn_in=3), None, None, 0.0, delayed="early:2"))
        >>> da.window, da.early, da.widen, da.influence.learn_until
        (2, True, 4, None)
    """
    if ctx.delayed_window is None:
        return None
    early = early_rejection(ctx.delayed)
    cascade = isinstance(ctx.delayed, str) and ctx.delayed.startswith("cascade:")
    ranking = (InfluenceWindows(ctx.delayed_window, None if early else ctx.config.burn_in, by_value=early)
               if influence_ranked(ctx.delayed) else None)
    return DelayedAcceptance(ctx.delayed_window, user_surrogate(ctx.delayed), ranking, early=early,
                             widen=EARLY_WIDEN if early else 1, cascade=cascade,
                             min_temperature=ctx.delayed_min_temperature, fewest_energy=ctx.delayed_fewest_energy)


class Screened(NamedTuple):
    """Stage 1 of the ``n`` tested proposals (the memo's misses first, its hits last), and the terms it left."""

    surrogate: torch.Tensor  #: f32[n] E~ without the extra terms (raw or local, as the run's energy)
    raw: torch.Tensor  #: f32[n, T] exact terms of X' where known (hits, forwarded misses), else the surrogate's
    local: torch.Tensor  #: f32[n, T] the same, local
    passed: torch.Tensor  #: Bool[n] stage 1's verdict
    survivors: torch.Tensor  #: Long[s] ``passed``'s indices (device)
    survivors_host: torch.Tensor  #: CPU Long[s] the same
    forwarded: torch.Tensor  #: Long[f] the misses whose other rows were forwarded (device)
    forwarded_host: torch.Tensor  #: CPU Long[f] the same
    window_rows: SiteRows  #: the misses' window rows (numbered by miss; with early rejection's middle stage's)
    outer_rows: SiteRows  #: the forwarded misses' other rows (numbered by ``forwarded``)
    window: Window  #: the windows as forwarded (early rejection's middle stage widens its candidates')


def first_stage(ctx: StepContext, state: ChainState, proposal: SiteProposal, surrogate_target: torch.Tensor, *,
                beta: Any, epoch: int, step: int, early: bool = False) -> torch.Tensor:
    """Stage 1's test, Bool[n]: ``log u < beta (E(X) - E~(X')) + log q(X | X') - log q(X' | X)``, as
    ``mh_accept_`` computes it (float32; NaN rejects). E(X) - E~(X') = E~_i(X) - E~_i(X'): the state's terms
    outside the window are those of both sides.

    ``early`` (early rejection): E~(X') is a lower bound of E(X') and u is the uniform exact MH's test of this
    step draws (stream ``ACCEPT``, the same counters), so ``False`` means exact MH rejects: its log-ratio is at
    most this one (beta >= 0). The test keeps a margin of 1e-4 (relative, 1e-4 absolute at least) so that
    rounding (the fused op's float32 arithmetic, a device's log) never rejects a proposal the op would accept;
    the margin only lets a few more proposals forward their rows."""
    ch = proposal.ch
    energy = state.target.index_select(0, ch)
    log_alpha = (beta_rows(beta, ch, state.tokens.device) * (energy - surrogate_target)
                 + proposal.logq_reverse - proposal.logq_forward)
    u = rng.uniforms_from_keys(state.rng_keys.index_select(0, ch), epoch, step,
                               rng.ACCEPT if early else rng.DELAYED_FIRST, op=ctx.backend.counter_uniforms)
    if early:
        log_alpha = log_alpha + 1e-4 * (1 + log_alpha.abs())
    return torch.log(u) < log_alpha


def middle_test(ctx: StepContext, state: ChainState, ch: torch.Tensor, before: torch.Tensor, after: torch.Tensor,
                *, beta: Any, epoch: int, step: int) -> torch.Tensor:
    """A cascade's middle test (option ``delayed="cascade:K"``), Bool[n]: ``log u < beta (E~_0(X') - E~_K(X'))``,
    ``before`` the own-term energies of X' that stage 1 tested, ``after`` the window's (the extra energy terms, in
    both, cancel; no Hastings term: stage 1 applied it), u of stream ``DELAYED_MIDDLE``. Both are fixed functions of
    (X', i) given X's terms, so the ratio is antisymmetric as stage 1's (docs/delayed.md)."""
    log_alpha = beta_rows(beta, ch, state.tokens.device) * (before - after)
    u = rng.uniforms_from_keys(state.rng_keys.index_select(0, ch), epoch, step, rng.DELAYED_MIDDLE,
                               op=ctx.backend.counter_uniforms)
    return torch.log(u) < log_alpha


def _with_extra(target: torch.Tensor, extra: ExtraTerms | None, part: slice) -> torch.Tensor:
    return target if extra is None else target + extra.weighted[part]


def _user_energy(state: ChainState, ch: torch.Tensor, user: torch.Tensor) -> torch.Tensor:
    """A user surrogate's energy of X' as stage 1 reads it: the model energy of X plus the user's dE~ (so that
    E(X) - E~(X') = -dE~, the window's form)."""
    return (state.e_raw if state.energy == "raw" else state.e_local).index_select(0, ch) + user


def _near_energy(state: ChainState, ch: torch.Tensor, near: torch.Tensor, raw: torch.Tensor, local: torch.Tensor
                 ) -> torch.Tensor:
    """The energy of remembered terms inside the windows ``near`` and of the current state's terms outside them:
    a memo hit's surrogate energy, from terms it already holds."""
    return model_energy(state, torch.where(near, raw, state.raw_terms.index_select(0, ch)),
                        torch.where(near, local, state.local_terms.index_select(0, ch)))


def _remembered(ctx: StepContext, state: ChainState, tested: TestedSites, window: Window, memo: Any,
                extra: ExtraTerms | None, user: torch.Tensor | None, *, beta: Any, epoch: int, step: int,
                early: bool = False, cascade: Window | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Stage 1 of the memo's hits (the last ``tested.picked.hits``) from their remembered full terms, read once
    this step's misses are stored: ``(surrogate energy f32[h], passed Bool[h], raw, local f32[h, T])``.
    ``early``: the bound is the exact energy (all terms known), so stage 1 is exact MH's test. ``cascade`` (a
    cascade's wide windows): the middle test too, from the same terms; the energy returned is then the window's."""
    m = tested.picked.misses
    p = SiteProposal(*(v[m:] for v in tested.proposal))
    raw, local = memo.terms(tested.picked.index[m:])
    if user is not None:
        surrogate = _user_energy(state, p.ch, user[m:])
    elif early:  # (a partial entry's unknown terms are NaN: 0 in the bound)
        surrogate = model_energy(state, raw.nan_to_num(nan=0.0), local.nan_to_num(nan=0.0))
    else:
        surrogate = _near_energy(state, p.ch, window.near[m:], raw, local)
    passed = first_stage(ctx, state, p, _with_extra(surrogate, extra, slice(m, None)), beta=beta,
                         epoch=epoch, step=step, early=early)
    if cascade is not None:  # the window's terms are known too (a hit forwards no rows)
        after = _near_energy(state, p.ch, cascade.near[m:], raw, local)
        passed = passed & middle_test(ctx, state, p.ch, surrogate, after, beta=beta, epoch=epoch, step=step)
        surrogate = after
    if early:  # (the partial entries that passed: their missing rows forwarded now, their full terms remembered)
        raw, local = complete_partial(ctx, state, tested, memo, passed, (raw, local))
    return surrogate, passed, raw, local


def screen(ctx: StepContext, state: ChainState, tested: TestedSites, window: Window, memo: Any,
           extra: ExtraTerms | None, user: torch.Tensor | None = None, *, beta: Any, epoch: int, step: int,
           early: bool = False, wide: Window | None = None, cascade: bool = False) -> Screened:
    """Stage 1 of every tested proposal, with the memo supplying numbers only: the misses forward their window,
    the survivors (and the misses a hit of this step reads) their other rows, whose full terms are stored; then
    the hits are screened from their remembered terms. One host read (two with hits). ``user``: f32[n] a user
    surrogate's dE~ of every tested proposal (the window is then 0: no rows in stage 1). ``early``: early
    rejection (:func:`first_stage`; the misses' bound is :func:`lower_bound` of their window); ``wide``: its
    middle stage's windows (:func:`middle_stage`; one host read more). ``cascade``: ``wide`` is a cascade's window
    (``window`` holds the own term only) and the middle stage meets :func:`middle_test` instead of the bound."""
    picked, p = tested.picked, tested.proposal
    m, h = picked.misses, picked.hits
    raw, local, window_rows = window_terms(ctx, state, tested, window)
    if user is not None:
        surrogate = _user_energy(state, p.ch[:m], user[:m])
    elif early:
        surrogate = lower_bound(state, raw, local, window.near if h == 0 else window.near[:m])
    else:
        surrogate = model_energy(state, raw, local)
    passed = (first_stage(ctx, state, head(p, m, h == 0), _with_extra(surrogate, extra, slice(0, m)), beta=beta,
                          epoch=epoch, step=step, early=early)
              if m else torch.zeros(0, dtype=torch.bool, device=p.ch.device))
    needed = memo.read_by_hits(picked) if h else None  # misses whose entry a hit of this same step reads
    if wide is not None and m:  # early rejection's middle stage: the candidates forward more rows, bound again
        which, which_host = changed_chains(passed if needed is None else passed | needed)
        if which_host.shape[0]:
            raw, local, window_rows, window = middle_stage(ctx, state, tested, window, wide, raw, local, window_rows,
                                                           which, which_host)
            if cascade:  # (the window's energy replaces the own term's: stage 2 corrects against it)
                after = model_energy(state, raw.index_select(0, which), local.index_select(0, which))
                again = middle_test(ctx, state, p.ch.index_select(0, which), surrogate.index_select(0, which), after,
                                    beta=beta, epoch=epoch, step=step)
                surrogate = surrogate.index_copy(0, which, after)
            else:
                bound = lower_bound(state, raw.index_select(0, which), local.index_select(0, which),
                                    window.near.index_select(0, which))
                surrogate = surrogate.index_copy(0, which, bound)
                if extra is not None:
                    bound = bound + extra.weighted.index_select(0, which)
                again = first_stage(ctx, state, SiteProposal(*(v.index_select(0, which) for v in p)), bound,
                                    beta=beta, epoch=epoch, step=step, early=True)
            passed = passed.index_copy(0, which, passed.index_select(0, which) & again)
    keep_miss_rows(state, tested, window_rows, memo)  # (as far as forwarded: whole for the ones stored below)
    fwd, fwd_host = changed_chains(passed if needed is None else passed | needed)
    outer_rows = empty_rows(p.ch)
    if fwd_host.shape[0]:
        raw_f, local_f, outer_rows = outer_terms(ctx, state, tested, window, raw, local, fwd, fwd_host)
        stored = picked.index.index_select(0, fwd)
        memo.store(stored, raw_f, local_f, fwd_host.shape[0])  # full terms only
        memo.keep_rows(stored, None, outer_rows)
        raw, local = raw.index_copy(0, fwd, raw_f), local.index_copy(0, fwd, local_f)
    if early and m:  # the misses stopped early: their partial terms (the entries the store above left reserved)
        sel = picked.index if h == 0 else picked.index[:m]
        near = window.near if h == 0 else window.near[:m]
        unknown = state.energy_mask.index_select(0, p.ch if h == 0 else p.ch[:m]) & ~near
        memo.store(sel, raw.masked_fill(unknown, float("nan")), local.masked_fill(unknown, float("nan")), m)
    if h == 0:  # no hits: the survivors are the forwarded misses (no second host read)
        return Screened(surrogate, raw, local, passed, fwd, fwd_host, fwd, fwd_host, window_rows, outer_rows, window)
    sur_h, passed_h, raw_h, local_h = _remembered(ctx, state, tested, window, memo, extra, user, beta=beta,
                                                  epoch=epoch, step=step, early=early,
                                                  cascade=wide if cascade else None)
    passed = torch.cat([passed, passed_h])
    survivors, survivors_host = changed_chains(passed)
    return Screened(torch.cat([surrogate, sur_h]), torch.cat([raw, raw_h]), torch.cat([local, local_h]), passed,
                    survivors, survivors_host, fwd, fwd_host, window_rows, outer_rows, window)


def _renumbered(rows: SiteRows, owner: torch.Tensor | None, passed: torch.Tensor, renumber: torch.Tensor
                ) -> SiteRows | None:
    """``rows`` of the proposals that ``passed``, numbered by survivor; ``owner`` maps ``rows.seq`` to the tested
    proposal (None: the same numbering). None: no such row (no empty chunk for the op)."""
    if rows.seq.numel() == 0:
        return None
    tested = rows.seq if owner is None else owner.index_select(0, rows.seq)
    keep = passed.index_select(0, tested).nonzero().squeeze(1)
    if keep.numel() == 0:
        return None
    return SiteRows(renumber.index_select(0, tested.index_select(0, keep)), rows.q.index_select(0, keep),
                    [torch.cat(rows.outputs).index_select(0, keep)])


def survivor_rows(sc: Screened, no_hits: bool) -> SiteRows:
    """The survivors' rows of both stages, numbered by survivor (what the commit op writes into the cache of the
    chains that accept). Without hits the survivors are the forwarded misses: their other rows as they are."""
    renumber = torch.cumsum(sc.passed.long(), 0) - 1
    first = _renumbered(sc.window_rows, None, sc.passed, renumber)
    second = sc.outer_rows if no_hits else _renumbered(sc.outer_rows, sc.forwarded, sc.passed, renumber)
    parts = [r for r in (first, second) if r is not None and r.seq.numel()]
    if not parts:  # (no survivor forwarded a row: e.g. only hits passed, and the misses forwarded for them did not)
        return empty_rows(sc.survivors)
    return parts[0] if len(parts) == 1 else joined(*parts)


def second_stage(ctx: StepContext, state: ChainState, tested: TestedSites, sc: Screened, extra: ExtraTerms | None,
                 *, beta: Any, epoch: int, step: int, early: bool = False) -> tuple[ChainState, torch.Tensor]:
    """Stage 2 of the survivors through the fused commit op: ``(state, taken Bool[s])``. The op is given the
    target energy of X' shifted so that its test is ``min(1, exp(-beta (dE - dE~)))``, and equal forward and
    reverse proposal terms. ``early`` (early rejection): exact MH's own test instead, the same op call as the
    plain step's (the exact target of X', its proposal terms, stream ``ACCEPT``)."""
    p, surv = tested.proposal, sc.survivors
    ch = p.ch.index_select(0, surv)
    raw, local = sc.raw.index_select(0, surv), sc.local.index_select(0, surv)
    e_raw, e_local = sum_terms(raw), sum_terms(local)
    exact_model = e_raw if state.energy == "raw" else e_local
    extra_s = None if extra is None else ExtraTerms(*(v.index_select(0, surv) for v in extra))
    logq = p.logq_forward.index_select(0, surv)
    if early:  # (the target as score_sites makes it: the model energy, then the extra terms added)
        target = exact_model if extra_s is None else exact_model + extra_s.weighted
        logq_reverse, stream = p.logq_reverse.index_select(0, surv), rng.ACCEPT
    else:
        # the op tests beta (E(X) - target'): target' = E(X) + (dE - dE~) makes it stage 2's test (the extra terms,
        # exact in both stages, cancel); equal proposal terms cancel the Hastings ratio stage 1 already applied
        target = state.target.index_select(0, ch) + (exact_model - sc.surrogate.index_select(0, surv))
        logq_reverse, stream = logq, rng.DELAYED_SECOND
    proposal = SiteProposal(ch=ch, pos=p.pos.index_select(0, surv), proposed=p.proposed.index_select(0, surv),
                            logq_forward=logq, logq_reverse=logq_reverse)
    terms = SiteTerms(raw=raw, local=local, e_raw=e_raw, e_local=e_local, target=target)
    new, taken = commit(ctx, state, proposal, terms, survivor_rows(sc, tested.picked.hits == 0), beta=beta,
                        epoch=epoch, step=step, stream=stream)
    if extra_s is not None:
        new = with_extra(new, state, ch, taken, extra_s)
    return new, taken


def _count(da: DelayedAcceptance, state: ChainState, tested: TestedSites, window: Window, sc: Screened,
           accepted: torch.Tensor) -> None:
    """The run's delayed-acceptance counters and the per-chain counts of the step (``accepted`` Bool[n]). Rows
    saved: the misses' other rows not forwarded (a hit forwards none either way: the memo saved those)."""
    m = tested.picked.misses
    skipped = torch.ones(m, dtype=torch.bool)
    skipped[sc.forwarded_host] = False
    saved = state.num_energy_host.index_select(0, tested.chains_host[:m]) - 1 - window.rows_host[:m]
    da.tested += int(tested.chains_host.shape[0])
    da.passed += int(sc.survivors_host.shape[0])
    da.rows_saved += int(saved[skipped].sum())
    da.accepted = da.accepted + accepted.sum()
    if state.counts is not None:
        p = tested.proposal
        state.counts.tested(p.ch, accepted)
        state.counts.tested_at(p.ch, p.pos, accepted)


def delayed_commit(ctx: StepContext, state: ChainState, tested: TestedSites, da: DelayedAcceptance, memo: Any, *,
                   beta: Any, epoch: int, step: int) -> tuple[ChainState, torch.Tensor]:
    """Both stages on the tested proposals and the new state: ``(state, accepted Bool[n])``. ``memo``: the
    kernel's :class:`~mhfast.sampler.memo.ProposalMemo` or :data:`~mhfast.sampler.memo.NO_MEMO` (it supplies
    numbers, never the kernel). ``beta`` is passed on as given (a number or a tensor [M]); not None
    (forced-accept epochs take the plain step: nothing to test)."""
    influence = da.influence
    if influence is not None:  # (influence: burn-in is over, so each position's window becomes a fixed set;
        influence.update(state, epoch)  # early rejection: re-ranked each epoch, which never changes a decision)
    window = window_of(state, tested.proposal, 0 if da.cascade else da.window, influence)
    extra = extra_terms(ctx, state, tested)  # (every X', hit or miss)
    user = None
    if da.surrogate is not None:  # a user's surrogate: its dE~ of every tested proposal, checked
        user = surrogate_delta(da.surrogate, state.tokens.index_select(0, tested.proposal.ch),
                               proposed_sequences(state, tested.proposal), tested.proposal.pos)
    wide = (window_of(state, tested.proposal, da.window) if da.cascade else
            window_of(state, tested.proposal, da.window, influence, da.widen) if da.widen > 1 else None)
    sc = screen(ctx, state, tested, window, memo, extra, user, beta=beta, epoch=epoch, step=step, early=da.early,
                wide=wide, cascade=da.cascade)
    if influence is not None and influence.learning(epoch):
        # what i moved: the survivors' exact terms (hits and misses: the same proposals whether the memo is on or
        # off, so that the memo changes no chain; until 2026-11-28 the ranking read the forwarded misses only)
        surv = sc.survivors
        influence.observe(state, SiteProposal(*(v.index_select(0, surv) for v in tested.proposal)),
                          sc.raw.index_select(0, surv), sc.local.index_select(0, surv))
    accepted = torch.zeros_like(sc.passed)
    if sc.survivors_host.shape[0]:
        new, taken = second_stage(ctx, state, tested, sc, extra, beta=beta, epoch=epoch, step=step, early=da.early)
        accepted = accepted.index_copy(0, sc.survivors, taken)
        state = new
    h = tested.picked.hits
    if h:  # an accepted remembered X' needs its rows in the cache: from the memo, or forwarded now
        memo.hits += h
        refresh_remembered_rows(ctx, state, tested, accepted, memo)
    _count(da, state, tested, sc.window, sc, accepted)
    return state, accepted
