"""The values one single-site MH step hands from phase to phase (propose -> score -> accept and commit), named.

The fused ops' own bundles (:class:`~mhfast.op_types.SiteProposal`, :class:`~mhfast.op_types.SiteTerms`,
:class:`~mhfast.op_types.SiteRows`) carry the proposals to test, their scores and their model rows; these add
what the step knows around them: which chains move (:class:`SiteMove`, what the kernel's sweep yields), what they
drew (:class:`SiteDraw`), which of the draws go to the MH test and which of those the memo knows
(:class:`Picked`, :class:`TestedSites`), and the scored proposals (:class:`ScoredSites`).

Indices: ``M`` chain rows of the state; a move's ``A`` chains; the ``n`` of them whose proposal changes their state
(X' != X), picked for the test by index into the move.

Example:
    >>> import torch
    >>> move = SiteMove(index=0, chains=torch.tensor([0, 2]), chains_host=torch.tensor([0, 2]),
    ...                 pos=torch.tensor([1, 1]))
    >>> move.chains[1].item(), move.index
    (2, 0)
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from ...op_types import SiteProposal, SiteRows, SiteTerms


class SiteMove(NamedTuple):
    """The chains that move at one step of an epoch, one position each."""

    index: int  #: the step's number in its epoch (a counter of the chains' random numbers)
    chains: torch.Tensor  #: Long[A] chain rows (distinct)
    chains_host: torch.Tensor  #: CPU Long[A] the same (the step plans row counts with it: no host sync)
    pos: torch.Tensor  #: Long[A] the position each chain proposes at


class SiteDraw(NamedTuple):
    """Each moving chain's proposal, drawn from its cached conditional at its position."""

    proposed: torch.Tensor  #: Long[A] the proposed token
    logq_forward: torch.Tensor  #: f32[A] log q(X' | X)
    logq_reverse: torch.Tensor  #: f32[A] log q(X | X')
    changed: torch.Tensor  #: Bool[A] X' != X (the others are accepted without a test)
    #: [A, V] the proposal rows' logits where they were computed unfused (None: read them from the cache)
    logits: torch.Tensor | None


class Picked(NamedTuple):
    """The draws that go to the MH test (X' != X), as indices into the move, those the memo knows last."""

    index: torch.Tensor  #: Long[n] on the step's device
    index_host: torch.Tensor  #: CPU Long[n] the same
    hits: int  #: the last ``hits`` of them are known to the memo (their terms need no model rows)

    @property
    def misses(self) -> int:
        """How many come first that the memo does not know (their rows are forwarded)."""
        return self.index_host.shape[0] - self.hits


class TestedSites(NamedTuple):
    """The proposals of a step that meet the MH test, and what scoring them needs."""

    proposal: SiteProposal  #: the picked proposals (``n``), the memo's misses first
    chains_host: torch.Tensor  #: CPU Long[n] ``proposal.ch``
    picked: Picked  #: where they sit in the move (the memo names them so)
    #: [misses, D] the misses' proposal rows: the term of X' at ``pos`` is read from them, not forwarded
    known_logits: torch.Tensor


class ExtraTerms(NamedTuple):
    """The extra energy terms (option extra_energy) of X' for the tested chains."""

    values: torch.Tensor  #: f32[n, K] each term's unweighted value
    weighted: torch.Tensor  #: f32[n] sum_k w_k values[:, k] (already in ``SiteTerms.target``)


class ScoredSites(NamedTuple):
    """The tested proposals scored: their terms and energies, the model rows they forwarded (for the cache of the
    chains that accept), and their extra-term values (None: the run has no extra terms)."""

    terms: SiteTerms
    rows: SiteRows
    extra: ExtraTerms | None
