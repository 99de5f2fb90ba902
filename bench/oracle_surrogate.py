"""The ceiling of delayed acceptance: a first stage that knows the EXACT energy (a bound, not a usable sampler).

Passed as ``mhfast.sample(..., delayed=ExactEnergyOracle(...))``, it returns each sequence's exact model energy
(the run's raw or local energy, computed by :func:`mhfast.energy`). Stage 1 is then exact MH's test and stage 2
always accepts (up to float32 rounding: the sampler sums its cached terms, the oracle rescored them), so the sampler
forwards the T_e - 1 rows of a proposal only when the proposal will be accepted, and none for a remembered one.
No first stage of any kind can forward fewer rows per accepted change: every accepted proposal must pay its exact
rows for stage 2, and no stage 1 accepts more than exact MH (delayed acceptance's acceptance is
alpha1 * alpha2 <= alpha). The oracle's own forwards are not the sampler's rows: :func:`mhfast.energy` builds its
own runner, so ``result.model_rows`` does not count them; they are counted here (``rows``) and reported apart.

It is memoized by sequence bytes (each distinct sequence is scored once per run), so its cost stays bounded.

For a conditional model (a CMLM) each sequence needs its input's source, which the surrogate's arguments do not
carry. A run's inputs are told apart by lineage: the oracle is called with the tested proposals' X (the first
half of ``tokens``) and X' (the second half; user_surrogate.surrogate_delta's documented call), every X is a
start or an X' accepted earlier, and an X' belongs to its X's input. The starts come from ``starts``: one row per
input (the greedy warm start, the same for every chain of an input and every seed), read by
:func:`greedy_starts`.

Example:
    >>> import mhfast, torch
    >>> from mhfast.models.tabular import TabularMLM
    >>> lm = TabularMLM.random(3, 6, seed=0)
    >>> oracle = ExactEnergyOracle(lm, "local")
    >>> r = mhfast.sample(lm, 6, chains=2, epochs=3, burn_in=0, energy="local", delayed=oracle, seed=0)
    >>> r.delayed_accepted == r.delayed_passed   # stage 2 accepts every survivor: the oracle is exact
    True
"""
from __future__ import annotations

from typing import Any

import torch

import mhfast
import mhfast.scoring.api


class ExactEnergyOracle:
    """``E~(X, i) = E(X)``: the exact energy of the run (``energy``), memoized by sequence; ``sources``: one
    source per input (conditional models), with ``starts`` Long[B, T] each input's start row."""

    def __init__(self, model: Any, energy: str, sources: list | None = None, starts: torch.Tensor | None = None):
        self.model, self.energy, self.sources = model, energy, sources
        self.values: dict[bytes, float] = {}
        self.owner: dict[bytes, int] = {}
        if sources is not None:
            for b, row in enumerate(starts):
                self.owner[row.numpy().tobytes()] = b
        self.rows = 0  #: rows the oracle itself forwarded (not the sampler's: not in result.model_rows)
        self.scored = 0  #: distinct sequences scored

    def _inputs(self, keys: list[bytes]) -> list[int]:
        """Each row's input, by lineage: the first half (the X's) are known; the second half inherits."""
        n = len(keys) // 2
        if len(self.sources) == 1:  # one input: no lineage needed (forced-accept epochs move chains unseen)
            return [0] * len(keys)
        owners = []
        for k in keys[:n]:
            if k not in self.owner:
                raise RuntimeError("ExactEnergyOracle: a chain state of unknown input (not a start, never proposed)")
            owners.append(self.owner[k])
        for k, b in zip(keys[n:], owners):
            self.owner.setdefault(k, b)
        return owners + owners

    def _score(self, tokens: torch.Tensor, inputs: list[int] | None) -> torch.Tensor:
        kw = {} if inputs is None else {"source": [self.sources[b] for b in inputs]}
        e = mhfast.energy(self.model, tokens, energy=self.energy, **kw)
        mask = mhfast.scoring.api.energy_positions(self.model, tokens)
        self.rows += int(mask.sum())
        self.scored += tokens.shape[0]
        return (e.e_raw if self.energy == "raw" else e.e_local).double()

    def __call__(self, tokens: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        cpu = tokens.cpu()
        keys = [row.numpy().tobytes() for row in cpu]
        inputs = self._inputs(keys) if self.sources is not None else None
        todo = {}
        for j, k in enumerate(keys):
            if k not in self.values and k not in todo:
                todo[k] = j
        if todo:
            idx = list(todo.values())
            values = self._score(cpu[idx], None if inputs is None else [inputs[j] for j in idx])
            for k, v in zip(todo, values.tolist()):
                self.values[k] = v
        return torch.tensor([self.values[k] for k in keys], dtype=torch.float64).to(torch.float32)


def greedy_starts(model: Any, inputs: dict, options: dict) -> torch.Tensor:
    """Long[B, T]: each input's start row under ``options`` (start greedy: every chain of an input starts there,
    whatever the seed), read from a 1-epoch run whose surrogate rejects every proposal in stage 1 (so the chains
    stay where they started)."""
    def reject_all(tokens: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[0] // 2
        return torch.cat([torch.zeros(n), torch.full((n,), 1e6)])

    # (annealing and forced-accept epochs are the run's, not the start's: a forced-accept epoch would move the chains)
    opts = {**{k: v for k, v in options.items() if k not in ("anneal", "force_accept_epochs")}, "epochs": 1,
            "burn_in": 0}
    r = mhfast.sample(model, **inputs, **opts, delayed=reject_all, seed=0)
    if r.delayed_passed != 0 or not bool((r.tokens == r.tokens[:, :1]).all()):
        raise RuntimeError("greedy_starts: the chains moved or do not share a start (start must be greedy)")
    return r.tokens[:, 0]
