"""What every sampler kernel is: ``init(state) -> state`` and ``step(state, epoch, move) -> (state, info)``.

A kernel (models: blackjax, numpyro) is one Markov transition family of the paper. The driver
(:mod:`mhfast.sampler.driver`) runs epochs and asks the kernel for the moves of each epoch
(:meth:`Kernel.sweep`), then applies them one by one with :meth:`Kernel.step`; it never knows which
kernel it runs. Annealing and forced acceptance are schedules (:class:`mhfast.sampler.schedules.Epoch`),
not kernel branches: a kernel reads the epoch's ``beta`` (``None``: accept every proposal).

What a kernel supports (extra energy terms, the Hastings ratio, blocks, ``capture=``, the proposal memo) it
declares in one place, its :class:`Capabilities`; the option checks (:mod:`mhfast.sampler.options`) and the
sampler API read them there, so each rule ("the memo serves single-site MH without capture or extra terms") is
written once, and a new kernel gets the right errors by declaring what it can do.

Example (a do-nothing kernel that satisfies the protocol):
    >>> class Frozen:
    ...     name = "frozen"
    ...     capabilities = Capabilities(extra_energy=False, hastings=False, always_accepts=True)
    ...     def __init__(self, ctx): self.ctx = ctx
    ...     def init(self, state): return state
    ...     def sweep(self, state, epoch): return []
    ...     def step(self, state, epoch, move): return state, StepInfo(0, 0, 0, scored=True)
    >>> isinstance(Frozen(None), Kernel)
    True
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence, runtime_checkable

from ..schedules import Epoch
from ..state import ChainState
from ..step import NO_STEP, StepContext, StepInfo

__all__ = ["Capabilities", "Kernel", "StepContext", "StepInfo", "NO_STEP"]


@dataclass(frozen=True)
class Capabilities:
    """What a kernel supports; every option check that depends on the sampler reads it here.

    Example:
        >>> mh = Capabilities(capture=True, memo=True)
        >>> mh.memo_acts(capture="none", extra_terms=False), mh.memo_acts(capture="static", extra_terms=False)
        (True, False)
    """

    #: its acceptance includes extra energy terms (option extra_energy)
    extra_energy: bool = True
    #: its acceptance test has the Hastings ratio of the proposal (then any proposal with full support is exact,
    #: e.g. a uniform_mix share; Gibbs kernels accept every proposal)
    hastings: bool = True
    #: it accepts every proposal (no MH test): the target temperature, its annealing and forced acceptance then
    #: have nothing to act on (the option spec rejects them)
    always_accepts: bool = False
    #: it proposes blocks of positions (then ``block_schedule`` sets their sizes)
    blocks: bool = False
    #: it has a static-shape step (``capture="static"`` / ``"cuda-graph"``, :mod:`mhfast.sampler.graphed`)
    capture: bool = False
    #: the proposal memo (:mod:`mhfast.sampler.memo`) can serve its dynamic step
    memo: bool = False
    #: its dynamic step has delayed acceptance (option delayed; :mod:`mhfast.sampler.moves.delayed`)
    delayed: bool = False
    #: its delayed step takes a user's surrogate E~(tokens, pos) (option delayed=<callable>;
    #: :mod:`mhfast.sampler.moves.user_surrogate`): one proposed position per move
    user_surrogate: bool = False
    #: its delayed step takes influence-ranked windows (option delayed="influence:K";
    #: :mod:`mhfast.sampler.moves.influence`): one proposed position per move
    influence: bool = False

    def memo_acts(self, capture: str, extra_terms: bool, delayed: bool = False) -> bool:
        """Whether the proposal memo acts in a run with option ``capture``, (``extra_terms``) extra energy terms
        and (``delayed``) delayed acceptance on: it serves the dynamic step only (a static step forwards every row
        anyway) and keeps the model's terms only (an extra term's value is not in it: the plain step evaluates
        extra terms for its misses only, the delayed step for every tested X', so there it may act). The one
        statement of the memo's rule."""
        return self.memo and capture == "none" and (not extra_terms or delayed)


@runtime_checkable
class Kernel(Protocol):
    """A sampler kernel; ``KERNELS[name](ctx)`` builds one (see :mod:`mhfast.sampler.kernels`)."""

    name: str
    capabilities: Capabilities  #: what it supports (a class attribute)

    def init(self, state: ChainState) -> ChainState:
        """The state the first epoch starts from (e.g. energies and cache computed)."""
        ...

    def sweep(self, state: ChainState, epoch: Epoch) -> Sequence[Any]:
        """The moves of one epoch, in order (opaque to the driver)."""
        ...

    def step(self, state: ChainState, epoch: Epoch, move: Any) -> tuple[ChainState, StepInfo]:
        """Apply one move; the input state is consumed (its cache buffer may be reused)."""
        ...

    # Optional: ``restrict(state, keep) -> state``, the state of the chains ``keep`` only, with the kernel's own
    # per-chain plans narrowed to them, so they go on as they would have in the whole batch (inputs leaving the
    # batch once converged: mhfast.sampler.adaptive). A kernel without it cannot run until_rhat / min_ess.
