"""The types a kernel step works with: :class:`StepContext` (constants) and :class:`StepInfo` (result).

Example:
    >>> StepInfo(4, 3, 1, scored=True) + StepInfo(4, 4, 0, scored=True)
    StepInfo(proposals=8, accepted=7, novel=1, scored=True)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from ..runtime.runner import ModelRunner


@dataclass(frozen=True)
class StepContext:
    """The constants every step needs: the validated options, the ops backend and the model runner."""

    config: Any  #: mhfast.sampler.options.SamplerConfig
    backend: Any  #: mhfast.runtime.backend.Backend
    runner: ModelRunner
    #: the uniform share of every proposal, ``auto`` resolved (mhfast.sampler.options.resolved_uniform_mix):
    #: q = (1 - uniform_mix) q_nucleus + uniform_mix / n over the proposable tokens
    uniform_mix: float
    terms: Any = None  #: mhfast.energy_terms.EnergyTerms or None: extra energy terms, allowed-token mask
    memo_slots: int = 0  #: the proposal memo's entries per chain, 0: none (option memo; mhfast.sampler.memo)
    #: option delayed as the kernel runs it (mhfast.sampler.options.resolved_delayed: ``auto`` resolved):
    #: None (off), "window:K", "influence:K", "early:K" or a user's surrogate (mhfast.sampler.moves.delayed)
    delayed: Any = None
    #: option delayed_min_temperature resolved: delayed acceptance acts in the epochs whose target temperature is at
    #: least this (0: every epoch; mhfast.sampler.options.resolved_delayed_min_temperature)
    delayed_min_temperature: float = 0.0
    #: delayed="auto": the fewest energy positions of an input it acts on (mhfast.sampler.options.auto_fewest_energy:
    #: shorter inputs take plain MH's step, as alone); None: it acts on every input
    delayed_fewest_energy: int | None = None

    @property
    def delayed_window(self) -> int | None:
        """Delayed acceptance's window half-width K (its stage-1 rows: the energy positions within K of the proposed
        one, ranked by distance or by influence); 0 for a user's surrogate (stage 1 forwards no rows); None: off.

        Example:
            >>> [StepContext(None, None, None, 0.0, delayed=d).delayed_window for d in (None, "influence:2", len)]
            [None, 2, 0]
        """
        if self.delayed is None:
            return None
        if callable(self.delayed):
            return 0
        return int(self.delayed.split(":")[1])

    def proposal_logits(self, logits: torch.Tensor, term_index: torch.Tensor, positions: torch.Tensor
                        ) -> torch.Tensor:
        """Logits with special ids (and tokens outside an AllowedTokens mask) at -inf: never proposed.

        ``term_index``/``positions``: Long[N] input and position of each row of ``logits``.
        """
        logits = self.runner.proposal_logits(logits)
        allowed = self.terms.allowed if self.terms is not None else None
        if allowed is None:
            return logits
        rows = term_index if allowed.shape[0] > 1 else torch.zeros_like(term_index)
        return logits.masked_fill(~allowed.to(logits.device)[rows, positions], float("-inf"))

    @property
    def proposal_temperature(self) -> float:
        return float(self.config.proposal_temperature)

    @property
    def top_p(self) -> float:
        return float(self.config.top_p)


class StepInfo(NamedTuple):
    """What one step did. Counts may be 0-d device tensors (summing them needs no host sync)."""

    proposals: int | torch.Tensor  #: proposals made (one per moving chain)
    accepted: int | torch.Tensor  #: accepted proposals (X' = X counts as accepted)
    novel: int | torch.Tensor  #: accepted proposals with X' != X
    scored: bool  #: the state's energies are exact after this step (best-state tracking may read them)

    def __add__(self, other: "StepInfo") -> "StepInfo":  # type: ignore[override]
        return StepInfo(self.proposals + other.proposals, self.accepted + other.accepted,
                        self.novel + other.novel, self.scored and other.scored)


NO_STEP = StepInfo(0, 0, 0, scored=True)


