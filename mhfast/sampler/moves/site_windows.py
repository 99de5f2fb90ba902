"""The positions a two-stage move forwards at each stage, and the terms of X' there (:mod:`.delayed`,
:mod:`.early_rejection`).

A proposal X' (X with position i changed) has ``T_e - 1`` rows to forward besides the cached row i. Delayed
acceptance forwards them in parts: its *window* first (the energy positions within K of i, or as many ranked by
:class:`~.influence.InfluenceWindows`), the rest only for the proposals that pass a first test. A
:class:`Window` holds each proposal's positions, :func:`window_terms` and :func:`outer_terms` forward the two
parts through the step's fused ``mh_site_rows`` op (:func:`~.site_score.model_terms`), and the small helpers
join the parts' rows and energies as the commit op reads them.

Example:
    >>> from types import SimpleNamespace
    >>> s = SimpleNamespace(tokens=torch.zeros(1, 6, dtype=torch.long), energy_mask=torch.ones(1, 6, dtype=bool))
    >>> p = SiteProposal(torch.tensor([0]), torch.tensor([1]), torch.tensor([2]), torch.zeros(1), torch.zeros(1))
    >>> window_of(s, p, 1).rows_host.tolist(), window_of(s, p, 1, widen=2).rows_host.tolist()
    ([2], [3])
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from ...op_types import SiteProposal, SiteRows
from ...runtime.runner import sum_terms
from ..state import ChainState
from ..step import StepContext
from .influence import InfluenceWindows
from .site_score import model_terms
from .site_types import TestedSites


class Window(NamedTuple):
    """The surrogate's positions of each tested proposal."""

    near: torch.Tensor  #: Bool[n, T] positions within K of the proposed one (itself included)
    inner: torch.Tensor  #: Bool[n, T] the energy positions of ``near`` but the proposed one: stage 1's rows
    rows_host: torch.Tensor  #: CPU Long[n] ``inner``'s rows per proposal


def window_of(state: ChainState, proposal: SiteProposal, k: int, influence: InfluenceWindows | None = None,
              widen: int = 1) -> Window:
    """The window of each proposal: positions within ``k`` of ``proposal.pos``, or ``influence``'s frozen sets
    (as many energy positions) once it has them (one host read: its row counts). ``widen``: ``widen`` times as
    many (within ``widen k``, or the top of the same ranking: the windows nest).

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
    if influence is not None and influence.sets is not None:
        near = influence.near(state, proposal, widen)
    else:
        near = (at[None, :] - proposal.pos[:, None]).abs() <= widen * k
    inner = state.energy_mask.index_select(0, proposal.ch) & near
    inner.scatter_(1, proposal.pos[:, None], False)
    return Window(near, inner, inner.sum(1).cpu())


def rows_mask(state: ChainState, chains: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """A state-shaped [M, T] energy mask with ``mask`` in the rows ``chains`` (what ``mh_site_rows`` reads)."""
    return torch.zeros_like(state.energy_mask).index_copy_(0, chains, mask)


def empty_rows(like: torch.Tensor) -> SiteRows:
    none = like[:0]
    return SiteRows(none, none, [])


def joined(a: SiteRows, b: SiteRows) -> SiteRows:
    """Two sets of rows with the same numbering as one (their outputs in order)."""
    return SiteRows(torch.cat([a.seq, b.seq]), torch.cat([a.q, b.q]), [*a.outputs, *b.outputs])


def model_energy(state: ChainState, raw: torch.Tensor, local: torch.Tensor) -> torch.Tensor:
    """The model energy of term rows, as the run's energy (raw or local)."""
    return sum_terms(raw) if state.energy == "raw" else sum_terms(local)


def head(p: SiteProposal, m: int, whole: bool) -> SiteProposal:
    """The first ``m`` proposals (``whole``: all of them, without a slice: each is one more dispatched op)."""
    return p if whole else SiteProposal(*(v[:m] for v in p))


def window_terms(ctx: StepContext, state: ChainState, tested: TestedSites, window: Window
                 ) -> tuple[torch.Tensor, torch.Tensor, SiteRows]:
    """Stage 1's terms of the memo's misses (the first ``tested.picked.misses``): the window's rows forwarded, the
    rest the state's terms: ``(raw f32[m, T], local f32[m, T], rows)``."""
    m, whole = tested.picked.misses, tested.picked.hits == 0
    if m == 0:
        return state.raw_terms[:0], state.local_terms[:0], empty_rows(tested.proposal.ch)
    p = head(tested.proposal, m, whole)
    inner, rows_host = (window.inner, window.rows_host) if whole else (window.inner[:m], window.rows_host[:m])
    _, raw, local, rows = model_terms(
        ctx, state, chains=p.ch, chains_host=tested.chains_host[:m], pos=p.pos, proposed=p.proposed,
        known_logits=tested.known_logits, num_rows=int(rows_host.sum()), energy_mask=rows_mask(state, p.ch, inner))
    return raw, local, rows


def outer_terms(ctx: StepContext, state: ChainState, tested: TestedSites, window: Window, raw: torch.Tensor,
                local: torch.Tensor, fwd: torch.Tensor, fwd_host: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, SiteRows]:
    """The exact terms of the misses ``fwd`` (indices into the misses, whose window terms are ``raw``/``local``):
    their rows outside the window forwarded, ``(raw f32[f, T], local f32[f, T], rows)``."""
    p = tested.proposal
    ch, pos, proposed = p.ch.index_select(0, fwd), p.pos.index_select(0, fwd), p.proposed.index_select(0, fwd)
    chains_host = tested.chains_host.index_select(0, fwd_host)
    near = window.near.index_select(0, fwd)
    outer = state.energy_mask.index_select(0, ch) & ~near
    num_rows = (int(state.num_energy_host.index_select(0, chains_host).sum()) - fwd_host.shape[0]
                - int(window.rows_host.index_select(0, fwd_host).sum()))
    _, raw2, local2, rows = model_terms(ctx, state, chains=ch, chains_host=chains_host, pos=pos, proposed=proposed,
                                        known_logits=tested.known_logits.index_select(0, fwd), num_rows=num_rows,
                                        energy_mask=rows_mask(state, ch, outer))
    return (torch.where(near, raw.index_select(0, fwd), raw2), torch.where(near, local.index_select(0, fwd), local2),
            rows)
