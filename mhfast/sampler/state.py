"""Chain state: tokens, energy/free positions, per-position energy terms, the cache, the best state.

``M = B * chains`` chains are stored flat (chain ``m`` belongs to input ``m // chains``).
Energies are kept as per-position terms ``raw_terms``/``local_terms`` f32[M, T] (zero at
positions outside the energy): ``E(X) = sum_t term_t`` (paper, sections 2.1-2.2), summed in
float64 by :func:`mhfast.runtime.runner.sum_terms`. Keeping the terms lets a single-site
step reuse every term it does not change, and makes the energy of a chain independent of
what else is in its batch.

:class:`ChainState` is a frozen dataclass: a kernel step returns a new state built with
:func:`dataclasses.replace` and new tensors. The one exception is the per-position cache
(``[M, T, d]``, the largest buffer by far): copying it every step would cost more than the model
call it saves, so a step updates it in place and *donates* it to the state it returns (as JAX
donates buffers): a state that has been passed to ``step`` must not be used again.

Example:
    >>> import torch
    >>> from mhfast.models.tabular import TabularMLM
    >>> from mhfast.runtime.runner import ModelRunner
    >>> model = TabularMLM.random(num_tokens=3, length=2, seed=0)
    >>> runner = ModelRunner(model, None, 65536)
    >>> warm = warm_start(runner, torch.full((1, 2), model.mask_id), torch.ones(1, 2, dtype=torch.bool), None)
    >>> bool((warm < 3).all())    # greedy fill with ordinary tokens only
    True
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from ..runtime import rng
from ..runtime.runner import ModelRunner, sum_terms
from .site_counts import SiteCounts


def warm_start(runner: ModelRunner, init: torch.Tensor, free: torch.Tensor, ctx_index: torch.Tensor | None,
               allowed: torch.Tensor | None = None) -> torch.Tensor:
    """Greedy fill (Algorithm 1, line 3; paper, section 5): one forward of each row with all its
    masks, argmax over non-special (and, with ``allowed`` Bool[B, T, V], allowed) tokens at every
    free masked position. Returns a new tensor."""
    masked = (init == runner.mask_id) & free
    r, p = masked.nonzero(as_tuple=True)
    out = init.clone()
    if r.numel():
        logits = runner.proposal_logits(runner.to_logits(runner.outputs_at(init, r, p, ctx_index)))
        if allowed is not None:
            logits = logits.masked_fill(~allowed[r, p], float("-inf"))
        out[r, p] = logits.argmax(dim=1)
    return out


class ChainCounts:
    """Each chain's proposals since the run began: made, accepted, and accepted changing the state
    ("novel"). A proposal equal to the state is accepted without a test (paper, section 6).

    A step only files references to the index tensors it already has (its chains, the changed ones,
    the MH test's outcome): no op, no host sync, ~1 us. They are reduced in a few batched ops at
    :meth:`snapshot` (once per epoch), or sooner when many are pending (bounded memory). Shared by
    every state of a run, like the cache.

    Example:
        >>> c = ChainCounts(3, torch.device("cpu"))
        >>> c.proposed(torch.tensor([0, 2])); c.tested(torch.tensor([2]), torch.tensor([False]))
        >>> c.snapshot().tolist()    # (proposals, accepted, novel) per chain
        [[1, 0, 1], [1, 0, 0], [0, 0, 0]]
    """

    #: the SampleResult fields of the three rows of :meth:`snapshot`, in order (Long[E, B, C] there)
    FIELDS = ("chain_proposals", "chain_accepted", "chain_novel")
    #: pending entries (chain indices) above which they are reduced at once
    MAX_PENDING = 1 << 20

    def __init__(self, num_chains: int, device: torch.device):
        self.num_chains = num_chains
        self.device = torch.device(device)
        # (proposals, accepted, novel) so far, for the entries already reduced
        self._totals = torch.zeros(3, num_chains, dtype=torch.long)
        self._proposed: list[torch.Tensor] = []  # CPU Long[A] per step: the chains that proposed
        # (chains, accepted, tested or None: all) of MH tests
        self._tested: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]] = []
        self._taken: list[tuple[torch.Tensor, torch.Tensor | None]] = []  # (chains, changed) of Gibbs moves
        self._pending = 0
        #: per-position tallies (mhfast.sampler.site_counts), filed by the ``*_at`` methods; None: not kept
        self.sites: SiteCounts | None = None

    def proposed(self, chains_host: torch.Tensor) -> None:
        """One proposal for each of the (distinct) chains ``chains_host`` (CPU Long[A])."""
        self._file(self._proposed, chains_host, chains_host.shape[0])

    def tested(self, chains: torch.Tensor, accepted: torch.Tensor, where: torch.Tensor | None = None) -> None:
        """The distinct ``chains`` (Long[n]) proposed X' != X and went through the MH test; ``accepted``
        (Bool[n]) says which passed. A proposal X' = X is accepted without a test (not filed here).
        ``where`` (Bool[n]; None: all): only those chains proposed X' != X, the others' entries are ignored
        (a static-shape step tests every chain and knows which changed only on the device)."""
        self._file(self._tested, (chains, accepted, where), chains.shape[0])

    def taken(self, chains: torch.Tensor, changed: torch.Tensor | None = None) -> None:
        """Proposals accepted without a test (Gibbs moves): ``changed`` (Bool[n]; None: all) says which
        changed the state."""
        self._file(self._taken, (chains, changed), chains.shape[0])

    def proposed_at(self, chains: torch.Tensor, positions: torch.Tensor) -> None:
        """Where the proposals were made (:meth:`SiteCounts.proposed`); nothing without ``sites``."""
        if self.sites is not None:
            self.sites.proposed(chains, positions)

    def tested_at(self, chains: torch.Tensor, positions: torch.Tensor, accepted: torch.Tensor, **kw) -> None:
        """Where the MH tests were made (:meth:`SiteCounts.tested`); nothing without ``sites``."""
        if self.sites is not None:
            self.sites.tested(chains, positions, accepted, **kw)

    def taken_at(self, chains: torch.Tensor, positions: torch.Tensor, **kw) -> None:
        """Where proposals were taken without a test (:meth:`SiteCounts.taken`); nothing without ``sites``."""
        if self.sites is not None:
            self.sites.taken(chains, positions, **kw)

    def _file(self, pending: list, entry, size: int) -> None:
        pending.append(entry)
        self._pending += size
        if self._pending > self.MAX_PENDING:
            self._reduce()

    def _reduce(self) -> None:
        """Fold the pending entries into the totals: a bincount per kind, one host read."""
        M, dev = self.num_chains, self.device
        count = lambda idx, w=None: torch.bincount(idx, weights=w, minlength=M)  # noqa: E731
        delta_accepted = torch.zeros(M, dtype=torch.long, device=dev)
        delta_novel = torch.zeros(M, dtype=torch.long, device=dev)
        if self._proposed:
            proposed = count(torch.cat(self._proposed))
            self._totals[0] += proposed
            self._totals[1] += proposed  # accepted unless a test rejected it (subtracted below)
        if self._tested:
            chains = torch.cat([c for c, _, _ in self._tested])
            accepted = torch.cat([a for _, a, _ in self._tested]).long()
            tested = torch.cat([torch.ones_like(a) if w is None else w for _, a, w in self._tested]).long()
            delta_novel.index_add_(0, chains, accepted * tested)
            delta_accepted.index_add_(0, chains, (accepted - 1) * tested)  # a rejected test: one accepted fewer
        if self._taken:
            chains = torch.cat([c for c, _ in self._taken])
            changed = torch.cat([torch.ones_like(c) if d is None else d.long() for c, d in self._taken])
            delta_novel.index_add_(0, chains, changed)
        self._totals[1] += delta_accepted.cpu()
        self._totals[2] += delta_novel.cpu()
        self._proposed, self._tested, self._taken, self._pending = [], [], [], 0

    def snapshot(self) -> torch.Tensor:
        """CPU Long[3, M]: each chain's (proposals, accepted, novel) so far."""
        self._reduce()
        return self._totals.clone()

    def select(self, keep: torch.Tensor) -> "ChainCounts":
        """The counts of the chains ``keep`` (CPU Long[M']) only, as a new object (per-position tallies too)."""
        out = ChainCounts(keep.numel(), self.device)
        out._totals = self.snapshot()[:, keep].clone()
        out.sites = self.sites.select(keep) if self.sites is not None else None
        return out


@dataclass(frozen=True)
class ChainState:
    """The state of all chains (see the module docstring); build it with :meth:`create`."""

    tokens: torch.Tensor  #: Long[M, T] current states
    energy_mask: torch.Tensor  #: Bool[M, T] positions in the energy sum
    free: torch.Tensor  #: Bool[M, T] positions that get proposals
    inputs: torch.Tensor  #: Long[M] input index (RNG counter)
    chain_ids: torch.Tensor  #: Long[M] chain index within the input (RNG counter)
    ctx_index: torch.Tensor | None  #: Long[M] source index for conditional models
    energy: str  #: "raw" or "local": the target energy
    seed: int  #: RNG seed
    rng_keys: torch.Tensor  #: Long[M] the counter hash of (seed, input, chain), made once
    num_free_host: torch.Tensor  #: CPU Long[M] free positions per chain (steps plan with it: no sync)
    num_energy_host: torch.Tensor  #: CPU Long[M] energy positions per chain
    raw_terms: torch.Tensor  #: f32[M, T] -logit of each energy position's token given the rest
    local_terms: torch.Tensor  #: f32[M, T] -log p of each energy position's token given the rest
    e_raw: torch.Tensor  #: f32[M] sum of raw_terms
    e_local: torch.Tensor  #: f32[M] sum of local_terms
    best_energy: torch.Tensor  #: f32[M] lowest target energy seen after burn-in
    best_tokens: torch.Tensor  #: Long[M, T] the state that had it
    term_index: torch.Tensor  #: Long[M] the input index extra energy terms see (row of init / source)
    term_values: torch.Tensor  #: f32[M, K] each extra energy term's (unweighted) value; K = 0 without terms
    e_extra: torch.Tensor  #: f32[M] sum_k w_k term_values[:, k]
    #: [M, T, D] model outputs of X masked at each energy position (features or logits), kept
    #: valid by the kernels that read it; None otherwise. Updated in place (donated, see above).
    cache: torch.Tensor | None = None
    #: each chain's proposal counts (shared by every state of a run, updated in place; None: not counted)
    counts: ChainCounts | None = None

    @classmethod
    def create(cls, tokens: torch.Tensor, energy_mask: torch.Tensor, free: torch.Tensor, inputs: torch.Tensor,
               chain_ids: torch.Tensor, ctx_index: torch.Tensor | None, energy: str, seed: int,
               term_index: torch.Tensor | None = None, num_terms: int = 0) -> "ChainState":
        """A state with zero energies (a kernel's ``init`` scores it when it needs energies)."""
        M, T = tokens.shape
        dev = tokens.device
        zeros = torch.zeros(M, T, device=dev)
        return cls(tokens=tokens, energy_mask=energy_mask, free=free, inputs=inputs, chain_ids=chain_ids,
                   ctx_index=ctx_index, energy=energy, seed=seed, rng_keys=rng.chain_keys(seed, inputs, chain_ids),
                   num_free_host=free.sum(dim=1).cpu(), num_energy_host=energy_mask.sum(dim=1).cpu(),
                   raw_terms=zeros, local_terms=zeros.clone(), e_raw=torch.zeros(M, device=dev),
                   e_local=torch.zeros(M, device=dev), best_energy=torch.full((M,), float("inf"), device=dev),
                   best_tokens=tokens.clone(), term_index=term_index if term_index is not None else inputs,
                   term_values=torch.zeros(M, num_terms, device=dev), e_extra=torch.zeros(M, device=dev),
                   counts=ChainCounts(M, dev))

    @property
    def target(self) -> torch.Tensor:
        """The target energy of each chain: raw or local, plus the weighted extra energy terms."""
        e = self.e_raw if self.energy == "raw" else self.e_local
        return e + self.e_extra if self.term_values.shape[1] else e

    def ctx_of(self, chain_index: torch.Tensor) -> torch.Tensor | None:
        return self.ctx_index.index_select(0, chain_index) if self.ctx_index is not None else None

    def with_terms(self, raw_terms: torch.Tensor, local_terms: torch.Tensor) -> "ChainState":
        """Every chain's energy terms (and energies) replaced."""
        return dataclasses.replace(self, raw_terms=raw_terms, local_terms=local_terms, e_raw=sum_terms(raw_terms),
                                   e_local=sum_terms(local_terms))

    def with_best(self) -> "ChainState":
        """Each chain's lowest-target-energy state remembered (no host sync)."""
        better = self.target < self.best_energy
        return dataclasses.replace(self, best_energy=torch.where(better, self.target, self.best_energy),
                                   best_tokens=torch.where(better[:, None], self.tokens, self.best_tokens))


def score_states(runner: ModelRunner, backend, tokens: torch.Tensor, energy_mask: torch.Tensor,
                 ctx_index: torch.Tensor | None, keep_outputs: bool = False):
    """Energy terms of whole states: one masked row per energy position (paper, section 2).

    Returns ``(raw_terms f32[M,T], local_terms f32[M,T], (seq, pos, outputs) )``.
    """
    M, T = tokens.shape
    seq, pos = energy_mask.nonzero(as_tuple=True)
    raw_terms = torch.zeros(M, T, device=tokens.device)
    local_terms = torch.zeros(M, T, device=tokens.device)
    outputs = None
    if seq.numel():
        rows = backend.masked_copies(tokens, seq, pos, runner.mask_id)
        ci = ctx_index.index_select(0, seq) if ctx_index is not None else None
        r, l, outputs = runner.score_rows(backend, rows, pos, tokens[seq, pos], ci, keep_outputs)
        raw_terms[seq, pos] = r
        local_terms[seq, pos] = l
    return raw_terms, local_terms, (seq, pos, outputs)


def rescore(state: ChainState, runner: ModelRunner, backend, keep_cache: bool = False, terms=None) -> ChainState:
    """Every chain's energy terms recomputed (and, with ``keep_cache``, the per-position cache built);
    ``terms`` (:class:`mhfast.energy_terms.EnergyTerms`): the extra energy terms too."""
    raw, local, (seq, pos, outputs) = score_states(runner, backend, state.tokens, state.energy_mask,
                                                   state.ctx_index, keep_outputs=keep_cache)
    state = state.with_terms(raw, local)
    if terms is not None and terms.terms:
        values = terms.evaluate(state.tokens, state.term_index)
        state = dataclasses.replace(state, term_values=values, e_extra=terms.weighted(values))
    if not keep_cache:
        return state
    M, T = state.tokens.shape
    if outputs is None:  # no energy positions at all: nothing will ever be read
        return dataclasses.replace(state, cache=torch.zeros(M, T, 1, device=state.tokens.device))
    cache = outputs.new_zeros(M, T, outputs.shape[1])
    cache[seq, pos] = outputs
    return dataclasses.replace(state, cache=cache)
