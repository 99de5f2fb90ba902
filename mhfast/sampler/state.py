"""Chain state: tokens, energy/free positions, per-position energy terms, caches and statistics.

``M = B * chains`` chains are stored flat (chain ``m`` belongs to input ``m // chains``).
Energies are kept as per-position terms ``raw_terms``/``local_terms`` f32[M, T] (zero at
positions outside the energy): ``E(X) = sum_t term_t`` (paper, sections 2.1-2.2), summed in
float64 by :func:`mhfast.sampler.runner.sum_terms`. Keeping the terms lets a single-site
step reuse every term it does not change, and makes the energy of a chain independent of
what else is in its batch.

Example:
    >>> import torch
    >>> from mhfast.models.tabular import TabularMLM
    >>> from mhfast.sampler.backend import get_backend
    >>> from mhfast.sampler.runner import ModelRunner
    >>> model = TabularMLM.random(num_tokens=3, length=2, seed=0)
    >>> runner = ModelRunner(model, None, 65536)
    >>> warm = warm_start(runner, torch.full((1, 2), model.mask_id), torch.ones(1, 2, dtype=torch.bool), None)
    >>> bool((warm < 3).all())    # greedy fill with ordinary tokens only
    True
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from . import rng
from .runner import ModelRunner, sum_terms


def warm_start(runner: ModelRunner, init: torch.Tensor, free: torch.Tensor, ctx_index: torch.Tensor | None
               ) -> torch.Tensor:
    """Greedy fill (Algorithm 1, line 3; paper, section 5): one forward of each row with all its
    masks, argmax over non-special tokens at every free masked position. Returns a new tensor."""
    masked = (init == runner.mask_id) & free
    r, p = masked.nonzero(as_tuple=True)
    out = init.clone()
    if r.numel():
        logits = runner.proposal_logits(runner.to_logits(runner.outputs_at(init, r, p, ctx_index)))
        out[r, p] = logits.argmax(dim=1)
    return out


@dataclass
class ChainState:
    tokens: torch.Tensor  #: Long[M, T] current states
    energy_mask: torch.Tensor  #: Bool[M, T] positions in the energy sum
    free: torch.Tensor  #: Bool[M, T] positions that get proposals
    inputs: torch.Tensor  #: Long[M] input index (RNG counter)
    chain_ids: torch.Tensor  #: Long[M] chain index within the input (RNG counter)
    ctx_index: torch.Tensor | None  #: Long[M] source index for conditional models
    num_inputs: int
    chains: int
    energy: str  #: "raw" or "local": the target energy
    seed: int = 0  #: RNG seed: ``rng_keys`` = the counter hash of (seed, input, chain), made once
    raw_terms: torch.Tensor = field(init=False)
    local_terms: torch.Tensor = field(init=False)
    e_raw: torch.Tensor = field(init=False)
    e_local: torch.Tensor = field(init=False)
    #: [M, T, D] model outputs of X masked at each energy position (features or logits), kept
    #: valid by every step of the samplers that read it ("mh", and "block-mh" when its
    #: schedule has one-position blocks); None otherwise.
    cache: torch.Tensor | None = None
    best_energy: torch.Tensor = field(init=False)
    best_tokens: torch.Tensor = field(init=False)

    def __post_init__(self) -> None:
        M, T = self.tokens.shape
        dev = self.tokens.device
        self.num_free = self.free.sum(dim=1)
        self.rng_keys = rng.chain_keys(self.seed, self.inputs, self.chain_ids)
        # Host copies of static counts: steps plan their index work with them instead of syncing.
        self.num_free_host = self.num_free.cpu()
        self.num_energy_host = self.energy_mask.sum(dim=1).cpu()
        self.raw_terms = torch.zeros(M, T, device=dev)
        self.local_terms = torch.zeros(M, T, device=dev)
        self.e_raw = torch.zeros(M, device=dev)
        self.e_local = torch.zeros(M, device=dev)
        self.best_energy = torch.full((M,), float("inf"), device=dev)
        self.best_tokens = self.tokens.clone()

    @property
    def target(self) -> torch.Tensor:
        """The target energy of each chain (raw or local)."""
        return self.e_raw if self.energy == "raw" else self.e_local

    def ctx_of(self, chain_index: torch.Tensor) -> torch.Tensor | None:
        return self.ctx_index.index_select(0, chain_index) if self.ctx_index is not None else None

    def set_terms(self, chain_index: torch.Tensor, raw_terms: torch.Tensor, local_terms: torch.Tensor) -> None:
        """Replace the energy terms (and energies) of the chains ``chain_index``."""
        self.raw_terms[chain_index] = raw_terms
        self.local_terms[chain_index] = local_terms
        self.e_raw[chain_index] = sum_terms(raw_terms)
        self.e_local[chain_index] = sum_terms(local_terms)

    def track_best(self) -> None:
        """Remember each chain's lowest-target-energy state (no host sync)."""
        better = self.target < self.best_energy
        self.best_energy = torch.where(better, self.target, self.best_energy)
        self.best_tokens = torch.where(better[:, None], self.tokens, self.best_tokens)


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


def rescore(state: ChainState, runner: ModelRunner, backend, keep_cache: bool = False) -> None:
    """Recompute every chain's energy terms (and, with ``keep_cache``, the per-position cache)."""
    raw, local, (seq, pos, outputs) = score_states(runner, backend, state.tokens, state.energy_mask,
                                                   state.ctx_index, keep_outputs=keep_cache)
    all_chains = torch.arange(state.tokens.shape[0], device=state.tokens.device)
    state.set_terms(all_chains, raw, local)
    if keep_cache:
        M, T = state.tokens.shape
        if outputs is None:  # no energy positions at all: nothing will ever be read
            state.cache = torch.zeros(M, T, 1, device=state.tokens.device)
        else:
            state.cache = outputs.new_zeros(M, T, outputs.shape[1])
            state.cache[seq, pos] = outputs


@dataclass
class EpochStats:
    proposals: int = 0
    accepted: int = 0
    novel: int = 0
