"""Parallel tempering (replica exchange; Swendsen & Wang 1986, Geyer 1991) over any kernel with an MH test, in the
non-reversible even/odd scheme of Syed, Bouchard-Cote, Deligiannidis & Doucet (JRSS-B 2022).

Every chain ``c`` of an input gets K replicas, one per rung of a temperature ladder (:mod:`mhfast.sampler.ladder`):
replica k targets ``exp(-beta_k E)``, rung 0 the target (``beta_0 = 1 / target_temperature``). The replicas are
just more chains of the same state, so one batched forward moves them all: the state holds, per input, its K rungs
of C chains (row ``b * K * C + k * C + c``, chain id ``k * C + c``: rung 0 keeps the ids, hence the random
numbers, of a run without tempering). The wrapped kernel steps every row with its own rung's beta
(``Epoch.beta`` becomes an f64[M] tensor). After every sweep, the adjacent pairs (k, k+1) with ``k`` of the
epoch's parity (even epochs: 0-1, 2-3, ...; odd epochs: 1-2, 3-4, ...) propose to swap their states, accepted with
probability ``min(1, exp((beta_k - beta_{k+1}) (E_k - E_{k+1})))`` (E: the target energy, extra terms included).

Why it is exact: each replica's sweep leaves its own tempered target invariant, and a swap is an MH move on the
product of the K targets (it proposes a permutation, which is symmetric), so the product is invariant and its
rung-0 marginal is the target. Alternating the even and odd pairs (deterministically, not at random) keeps every
move exact and makes the replicas travel the ladder in long runs instead of a random walk. A swap costs no model
rows: every replica's energy is in the state, and the swap exchanges the rows' tokens, energy terms and
per-position cache. The ladder is tuned during burn-in only (:func:`mhfast.sampler.ladder.retuned`), so the chain
after burn-in is a plain Markov chain with a fixed ladder.

Only rung 0 is a sample (:meth:`Tempered.samples`: what the driver traces, records and returns); the
others are auxiliary. Counters (:meth:`Tempered.result_fields`): the final ladder, each adjacent pair's swap
acceptance rate after burn-in, and each chain's round trips after burn-in (a replica's state reaching the
hottest rung from the target rung and coming back: how often information crosses the ladder). Asked for (option
``replicas``), the auxiliary replicas too: every rung's final states and each replica's energy after every sweep
(each rung samples its own tempered target, so these are samples at K temperatures from one run).

Example:
    >>> import mhfast
    >>> from mhfast.models.tabular import TabularMLM
    >>> r = mhfast.sample(TabularMLM.random(3, 3, seed=0), 3, chains=2, epochs=6, burn_in=2, tempering=3)
    >>> r.tokens.shape, r.ladder.shape, r.swap_rate.shape, r.round_trips.shape
    (torch.Size([1, 2, 3]), torch.Size([1, 3]), torch.Size([1, 2]), torch.Size([1, 2]))
"""
from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Callable, Sequence

import torch

from ..runtime import rng
from . import ladder
from .options import display_name
from .schedules import Epoch
from .state import ChainCounts, ChainState
from .step import StepInfo
from .subset import select_chains

SWAP = "swap"
#: the fields a swap exchanges between two rows (a chain's state and what is cached about it)
SWAPPED = ("tokens", "raw_terms", "local_terms", "e_raw", "e_local", "term_values", "e_extra")


def _warn_unmeasured(rejection: torch.Tensor, proposed: torch.Tensor, round_index: int, heat: torch.Tensor) -> None:
    """A warning where a tuning round left a pair of rungs unmeasured: :func:`ladder.retuned` then keeps that
    input's ladder as it was (silently, until 2026-12-01). A round of one sweep proposes only the even or only the
    odd pairs (burn_in one sweep past force_accept_epochs); swaps whose ratio was not finite also leave NaN. Inputs
    whose hot end doubles this round (``heat``) are not retuned anyway: not warned about."""
    missing = torch.isnan(rejection) & ~heat[:, None].to(rejection.device)
    if not bool(missing.any()):
        return
    b, k = (int(v) for v in missing.nonzero()[0])
    why = ("no swap was proposed between them in its one sweep (a sweep proposes the even or the odd pairs only): "
           f"give {display_name('burn_in')} at least 2 sweeps more than {display_name('force_accept_epochs')}"
           if float(proposed[b, k]) == 0 else
           "their swap ratios were not finite (overflowing energies)")
    warnings.warn(f"mhfast.sample: tempering: tuning round {round_index + 1} left the ladder of input {b} as it was "
                  f"(rungs {k} and {k + 1}: {why})", stacklevel=3)


def swap_log_alpha(beta_lo: torch.Tensor, beta_hi: torch.Tensor, e_lo: torch.Tensor, e_hi: torch.Tensor
                   ) -> torch.Tensor:
    """log of the acceptance ratio of swapping the states of a colder (``beta_lo``) and a hotter replica.

    Example:
        >>> swap_log_alpha(torch.tensor(1.0), torch.tensor(0.5), torch.tensor(3.0), torch.tensor(1.0)).item()
        1.0
    """
    return (beta_lo - beta_hi) * (e_lo - e_hi)


class Tempered:
    """A kernel (:class:`~mhfast.sampler.kernels.base.Kernel`) that runs ``inner`` on K tempered replicas of every
    chain and swaps neighbours after each sweep (module doc). ``samples(state)`` are the target's chains."""

    def __init__(self, inner: Any, tempering: Any, chains: int, burn_in: int, target_temperature: float,
                 uniforms_op: Callable = rng.counter_uniforms, replicas: bool = False, force_accept_epochs: int = 0):
        self.inner, self.C, self.burn_in = inner, int(chains), int(burn_in)
        self.forced = int(force_accept_epochs)  #: the first epochs accept everything: tuning starts after them
        self.replicas = bool(replicas)  #: keep every rung's final states and per-sweep energies (_record)
        #: the backend's counter_uniforms for the swaps' uniforms (compiled: one kernel; the reference twin, the
        #: default, makes ~50 small ops of the same numbers: launches that a GPU pays one by one)
        self.uniforms_op = uniforms_op
        self.K = ladder.rungs(tempering)
        self.tuned = isinstance(tempering, int)  # K rungs: tuned during burn-in; a list: used as given
        self.tempering, self.target_temperature = tempering, float(target_temperature)
        self.name, self.capabilities = inner.name, inner.capabilities

    def __getattr__(self, name: str) -> Any:
        """What else the inner kernel has: its proposal memo (shared by the replicas of an input: it keys whole
        sequences), its delayed-acceptance counters."""
        if name == "inner":  # (not set yet: no recursion while unpickling or half-built)
            raise AttributeError(name)
        return getattr(self.inner, name)

    # --- the kernel protocol ---
    def init(self, state: ChainState) -> ChainState:
        """Every chain's start copied to its K replicas (chain ids ``k * C + c``), then the inner kernel's init."""
        B = state.tokens.shape[0] // self.C
        K, C = self.K, self.C
        b, k, c = torch.meshgrid(torch.arange(B), torch.arange(K), torch.arange(C), indexing="ij")
        rows = (b * C + c).flatten()
        full = select_chains(dataclasses.replace(state, counts=None), rows)
        dev = state.tokens.device
        chain_ids = (k * C + c).flatten().to(dev)
        full = dataclasses.replace(full, chain_ids=chain_ids, rng_keys=rng.chain_keys(state.seed, full.inputs,
                                                                                      chain_ids),
                                   counts=ChainCounts(B * K * C, dev))
        self.inputs = torch.arange(B)  #: the original input index of each input still in the batch
        self.betas = ladder.initial_betas(self.tempering, self.target_temperature, B)
        self._betas_dev: tuple[torch.Tensor, torch.Tensor] | None = None
        self._ladder_all = self._temperatures()
        self.label = torch.arange(K * C).repeat(B, 1)  # which replica's state each row holds (per input)
        self.last_end = torch.where(torch.arange(K * C) < C, 0, -1).repeat(B, 1)  # -1 none, 0 target, 1 hottest
        self.swaps = torch.zeros(2, B, K - 1, dtype=torch.float64)  # post-burn-in (proposed, accepted)
        self.round_trips = torch.zeros(B, C, dtype=torch.long)
        self._round = torch.zeros(2, B, K - 1, dtype=torch.float64)  # this tuning round's (proposed, sum alpha)
        self._hot_prev = torch.full((B,), float("nan"), dtype=torch.float64)
        self.settled = torch.zeros(B, dtype=torch.bool)  # the hot end no longer moves (ladder module doc)
        # The tuning rounds are those of the burn-in epochs that sample (forced ones neither swap nor say how the
        # hottest replica mixes), so forced epochs do not use up the rounds in which the hot end may move.
        self._ends = [self.forced + end for end in ladder.tuning_ends(max(self.burn_in - self.forced, 0))]
        #: the per-row counts when each input's hot end last moved (None: at the start); its acceptance is measured
        #: from the proposals tested since then, over as many rounds as it takes (ladder module doc)
        self._counts_at_heat: torch.Tensor | None = None
        self._sample_counts: torch.Tensor | None = None  # the rung-0 rows' counts at the last epoch's end
        self._pairs_made: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}  # _pairs'
        self._replica_tokens: torch.Tensor | None = None  # Long[B, K, C, T] every rung's last recorded states
        self._replica_energy: list[torch.Tensor] = []  # f32[B, K, C] per sweep (NaN: the input had left)
        return self.inner.init(full)

    def sweep(self, state: ChainState, epoch: Epoch) -> list[Any]:
        return [*self.inner.sweep(state, self._tempered(epoch, state)), SWAP]

    def step(self, state: ChainState, epoch: Epoch, move: Any) -> tuple[ChainState, StepInfo]:
        if isinstance(move, str) and move == SWAP:
            state = self._swap(state, epoch)
            if self.replicas:  # (the swap is every sweep's last move: the sweep's end state, forced epochs too)
                self._record(state)
            return state, StepInfo(0, 0, 0, scored=True)
        return self.inner.step(state, self._tempered(epoch, state), move)

    def restrict(self, state: ChainState, keep: torch.Tensor) -> ChainState:
        """Only the sample chains ``keep`` (whole inputs, indices among the current sample chains) go on, with
        their replicas and ladders."""
        kept = torch.unique(keep.cpu() // self.C)
        self._save_ladder()
        rows = (kept[:, None] * (self.K * self.C) + torch.arange(self.K * self.C)).flatten()
        for name in ("inputs", "betas", "label", "last_end", "_hot_prev", "settled"):
            setattr(self, name, getattr(self, name)[kept])
        self._round = self._round[:, kept]
        self._counts_at_heat = None if self._counts_at_heat is None else self._counts_at_heat[:, rows]
        if self._sample_counts is not None:
            self._sample_counts = self._sample_counts[:, (kept[:, None] * self.C + torch.arange(self.C)).flatten()]
        return self.inner.restrict(state, rows.to(keep.device))

    # --- what the driver and the result read ---
    def samples(self, state: ChainState) -> ChainState:
        """The chains at the target temperature (rung 0 of every input), without the cache: what is traced,
        recorded and returned."""
        B = state.tokens.shape[0] // (self.K * self.C)
        rows = (torch.arange(B)[:, None] * (self.K * self.C) + torch.arange(self.C)).flatten()
        return select_chains(dataclasses.replace(state, cache=None), rows)

    def sample_info(self, state: ChainState, info: StepInfo) -> StepInfo:
        """The epoch's proposals, accepted and novel of the rung-0 rows only (from the per-row counts): what the
        pooled ``acceptance_rate`` / ``novel_rate`` are of, like the per-chain counts (``info``: every replica's,
        kept where no counts are kept)."""
        if state.counts is None:
            return info
        B = state.tokens.shape[0] // (self.K * self.C)
        now = state.counts.snapshot().view(3, B, self.K, self.C)[:, :, 0].reshape(3, B * self.C)
        before = self._sample_counts if self._sample_counts is not None else torch.zeros_like(now)
        self._sample_counts = now
        proposals, accepted, novel = (now - before).sum(dim=1).tolist()
        return StepInfo(proposals, accepted, novel, info.scored)

    def result_fields(self) -> dict[str, torch.Tensor | None]:
        """Per input (every input of the run): ``ladder`` f64[B, K] the final temperatures, ``swap_rate``
        f64[B, K-1] each adjacent pair's accepted share of swaps after burn-in (NaN: none proposed),
        ``round_trips`` Long[B, C] each chain's round trips after burn-in; with ``replicas``, ``replica_tokens``
        Long[B, K, C, T] every rung's final states (an input that left the batch early: its last ones) and
        ``replica_energy`` f32[B, K, C, E] the target energy at each rung after every sweep (None without)."""
        self._save_ladder()
        proposed, accepted = self.swaps
        rate = torch.where(proposed > 0, accepted / proposed.clamp(min=1), torch.full_like(proposed, float("nan")))
        advice = ladder.sparse_ladder(rate, proposed)
        if advice is not None:  # (a cut ladder is not an error: the target chains are still exact, only unhelped)
            warnings.warn(f"mhfast.sample: {advice}", stacklevel=2)
        energy = torch.stack(self._replica_energy, dim=-1) if self.replicas and self._replica_energy else None
        return {"ladder": self._ladder_all.clone(), "swap_rate": rate, "round_trips": self.round_trips.clone(),
                "replica_tokens": self._replica_tokens, "replica_energy": energy}

    # --- internals ---
    def _tempered(self, epoch: Epoch, state: ChainState) -> Epoch:
        """The epoch with each row's own beta (f64[M] on the chains' device); forced epochs stay forced."""
        if epoch.beta is None:
            return epoch
        if self._betas_dev is None or self._betas_dev[0] is not self.betas:  # made again after a retune
            betas = self.betas.repeat_interleave(self.C, dim=1).flatten()
            self._betas_dev = (self.betas, betas.to(state.tokens.device))
        return dataclasses.replace(epoch, beta=self._betas_dev[1])

    def _pairs(self, parity: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The rows of the pairs (k, k+1), ``k`` of the parity, of every input and chain: (lo, hi) Long[P] and
        the pairs' rung k Long[K'] (made once per parity and number of inputs: every sweep asks)."""
        B, K, C = self.betas.shape[0], self.K, self.C
        cache = self._pairs_made
        if (parity, B) not in cache:
            ks = torch.arange(parity, K - 1, 2)
            b, k, c = torch.meshgrid(torch.arange(B), ks, torch.arange(C), indexing="ij")
            lo = (b * K * C + k * C + c).flatten()
            cache[(parity, B)] = (lo, lo + C, ks)
        return cache[(parity, B)]

    def _swap(self, state: ChainState, epoch: Epoch) -> ChainState:
        """The even/odd swaps of the epoch (none in forced epochs), the counters, and the tuning of the ladder."""
        if self.K < 2:
            return state
        if epoch.beta is None:
            # A forced epoch accepts every proposal: its accepts say nothing of how the hottest replica mixes, so
            # the hot end's acceptance is counted from the first epoch that is not forced (_hot_acceptance).
            if self.tuned and state.counts is not None and epoch.index + 1 == self.forced:
                self._counts_at_heat = state.counts.snapshot().double()
            return state
        lo, hi, ks = self._pairs(epoch.index % 2)
        if lo.numel():  # (with K = 2 the odd sweeps have no pair, yet they end tuning rounds: 2, 4, 8, ...)
            state = self._exchange(state, epoch, lo, hi, ks)
        if self.tuned and not epoch.post_burn_in and epoch.index + 1 in self._ends:
            self._retune(state, self._ends.index(epoch.index + 1))
        return state

    def _exchange(self, state: ChainState, epoch: Epoch, lo: torch.Tensor, hi: torch.Tensor,
                  ks: torch.Tensor) -> ChainState:
        """The swaps of the pairs (lo, hi) at rungs ks: accepted with swap_log_alpha, counted, followed."""
        C = self.C
        dev = state.tokens.device
        target = state.target.double().cpu()
        # the inverse temperatures the sweeps test with: rounded to float32, as the ops round them
        # (moves.accept.beta_rows), so sweeps and swaps leave one product of tempered targets invariant
        betas = self.betas.float().double()
        b_lo = betas[:, ks].repeat_interleave(C, dim=1).flatten()
        b_hi = betas[:, ks + 1].repeat_interleave(C, dim=1).flatten()
        log_alpha = swap_log_alpha(b_lo, b_hi, target[lo], target[hi])
        u = rng.uniforms_from_keys(state.rng_keys.index_select(0, lo.to(dev)), epoch.index, 0, rng.SWAP,
                                   op=self.uniforms_op)
        accepted = torch.log(u.double().cpu()) < log_alpha
        self._count(epoch, ks, log_alpha, accepted)
        perm = torch.arange(state.tokens.shape[0])
        perm[lo[accepted]], perm[hi[accepted]] = hi[accepted], lo[accepted]
        state = _permuted(state, perm)
        self._follow(perm, epoch)
        return state

    def _count(self, epoch: Epoch, ks: torch.Tensor, log_alpha: torch.Tensor, accepted: torch.Tensor) -> None:
        B, C = self.betas.shape[0], self.C
        alpha = log_alpha.clamp(max=0).exp().view(B, -1, C).sum(dim=2)
        self._round[0][:, ks] += C
        self._round[1][:, ks] += alpha
        if epoch.post_burn_in:
            self.swaps[0][self.inputs[:, None], ks] += C
            self.swaps[1][self.inputs[:, None], ks] += accepted.double().view(B, -1, C).sum(dim=2)

    def _follow(self, perm: torch.Tensor, epoch: Epoch) -> None:
        """Each replica's state follows its swaps; round trips (target -> hottest -> target) are counted."""
        B, K, C = self.betas.shape[0], self.K, self.C
        local = perm.view(B, K * C) - (torch.arange(B) * K * C)[:, None]
        self.label = self.label.gather(1, local)
        rung = torch.arange(K * C) // C
        for where, end in ((rung == K - 1, 1), (rung == 0, 0)):
            reps = self.label[:, where]  # [B, C] the replicas now at that end
            last = self.last_end.gather(1, reps)
            if end == 0 and epoch.post_burn_in:
                self.round_trips[self.inputs] += (last == 1).long()
            new = torch.where(last == 0, 1, last) if end == 1 else torch.zeros_like(last)
            self.last_end.scatter_(1, reps, new)

    def _retune(self, state: ChainState, round_index: int) -> None:
        """The end of a tuning round (ladder module doc): the hot end doubles where it has not settled and the
        hottest replica does not mix yet (then the rungs are geometric again); elsewhere the rungs move to equal
        barrier steps, estimated from this round's swaps at this round's ladder."""
        proposed, alpha = self._round
        rejection = torch.where(proposed > 0, 1 - alpha / proposed.clamp(min=1), torch.full_like(alpha, float("nan")))
        hot, now = self._hot_acceptance(state)
        if round_index >= ladder.heating_rounds(len(self._ends)):
            self.settled[:] = True
        heat = ladder.heated(self.betas, hot, self._hot_prev, self.settled)
        self.settled |= ~heat & ~torch.isnan(hot)  # the first measured round without a doubling: settled for good
        if self.K >= 3:  # (2 rungs: retuning keeps both ends, so an unmeasured pair changes nothing)
            _warn_unmeasured(rejection, proposed, round_index, heat)
        new = ladder.retuned(self.betas, rejection)
        for b in heat.nonzero().flatten().tolist():
            new[b] = ladder.doubled(self.betas[b])
        if now is not None:  # a new hot end: its acceptance is measured afresh (rows: the doubled inputs')
            moved = heat.repeat_interleave(self.K * self.C).to(now.device)
            self._counts_at_heat = torch.where(moved, now, self._counts_at_heat)
        self._hot_prev = torch.where(heat, hot, self._hot_prev)
        self.betas = new
        self._round.zero_()

    def _hot_acceptance(self, state: ChainState) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(f64[B], the per-row counts now)``: each input's share of accepted proposals among those that changed
        the state, pooled over the rows at its hottest rung since its hot end last moved (from the per-row
        counts; not reset at a round's end, so that a few short rounds add up); NaN under ladder.HOT_MIN_TESTS
        of them. Without counts: NaN, None."""
        B, K, C = self.betas.shape[0], self.K, self.C
        if state.counts is None:
            return torch.full((B,), float("nan"), dtype=torch.float64), None
        now = state.counts.snapshot().double()
        if self._counts_at_heat is None:
            self._counts_at_heat = torch.zeros_like(now)
        proposals, accepted, novel = (now - self._counts_at_heat).view(3, B, K, C)[:, :, K - 1].sum(dim=2)
        tested = proposals - (accepted - novel)
        hot = torch.where(tested >= ladder.HOT_MIN_TESTS, novel / tested.clamp(min=1),
                          torch.full_like(tested, float("nan")))
        return hot, now

    def _record(self, state: ChainState) -> None:
        """Every rung's states and target energies at the end of a sweep, into the records of every input of the
        run (an input that left the batch keeps its last states; its energies are NaN from then on)."""
        B, K, C = self.betas.shape[0], self.K, self.C
        T = state.tokens.shape[1]
        if self._replica_tokens is None:
            self._replica_tokens = state.tokens.new_zeros((self._ladder_all.shape[0], K, C, T))
        self._replica_tokens[self.inputs.to(state.tokens.device)] = state.tokens.view(B, K, C, T)
        energy = torch.full((self._ladder_all.shape[0], K, C), float("nan"))
        energy[self.inputs] = state.target.view(B, K, C).float().cpu()
        self._replica_energy.append(energy)

    def _save_ladder(self) -> None:
        """The current ladders into the per-input record of every input of the run."""
        self._ladder_all[self.inputs] = self._temperatures()

    def _temperatures(self) -> torch.Tensor:
        """f64[B, K]: the temperatures of the current ladders, as given where they were given: 1 / (1 / t) is not
        t in float64 (154 of t = 0.01 ... 9.99), and a ladder passed back had been refused ("must start at
        target_temperature"). The target rung is the target temperature, a fixed ladder the list given."""
        temps = 1.0 / self.betas
        if not self.tuned:
            temps[:] = torch.tensor(self.tempering, dtype=torch.float64)
        temps[:, 0] = self.target_temperature
        return temps


def _permuted(state: ChainState, perm: torch.Tensor) -> ChainState:
    """The state with row ``i`` holding what row ``perm[i]`` held (the :data:`SWAPPED` fields, the cache in place)."""
    moved = (perm != torch.arange(perm.numel())).nonzero().flatten()
    if moved.numel() == 0:
        return state
    dev = state.tokens.device
    p = perm.to(dev)
    fields = {name: getattr(state, name).index_select(0, p) for name in SWAPPED}
    if state.cache is not None:
        m = moved.to(dev)
        state.cache[m] = state.cache[p[m]]  # the cache is donated: rows exchanged in place
    return dataclasses.replace(state, **fields)


def wrap(kernel: Any, cfg: Any, uniforms_op: Callable = rng.counter_uniforms) -> Any:
    """``kernel`` itself without tempering, else the :class:`Tempered` kernel over it (``uniforms_op``: the
    backend's counter_uniforms)."""
    if cfg.tempering is None:
        return kernel
    return Tempered(kernel, cfg.tempering, cfg.chains, cfg.burn_in, cfg.target_temperature, uniforms_op,
                    cfg.replicas, cfg.force_accept_epochs)


def per_input_fields() -> Sequence[str]:
    """The :class:`~mhfast.sampler.result.SampleResult` fields of :meth:`Tempered.result_fields` (inputs first)."""
    return ("ladder", "swap_rate", "round_trips", "replica_tokens", "replica_energy")


def counters_line(ladder: Any, swap_rate: Any, round_trips: Any) -> str:
    """One input's tempering counters in a line (``mhfast sample`` prints it, ``SampleResult.summary()`` after each
    input's verdict line): the final ladder, the swap rate of each adjacent pair and the round trips of each chain,
    after burn-in.

    Example:
        >>> counters_line(torch.tensor([1.0, 2.5]), torch.tensor([0.25]), torch.tensor([3, 0]))
        'tempering: ladder 1,2.5  swap rates 0.25  round trips 3,0 (after burn-in)'
    """
    ladder_text = ",".join(f"{float(t):.3g}" for t in ladder)
    rates = ",".join(f"{float(r):.2f}" for r in swap_rate)
    trips = ",".join(str(int(n)) for n in round_trips)
    return f"tempering: ladder {ladder_text}  swap rates {rates}  round trips {trips} (after burn-in)"
