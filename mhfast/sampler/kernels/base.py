"""What every sampler kernel is: ``init(state) -> state`` and ``step(state, epoch, move) -> (state, info)``.

A kernel (models: blackjax, numpyro) is one Markov transition family of the paper. The driver
(:mod:`mhfast.sampler.driver`) runs epochs and asks the kernel for the moves of each epoch
(:meth:`Kernel.sweep`), then applies them one by one with :meth:`Kernel.step`; it never knows which
kernel it runs. Annealing and forced acceptance are schedules (:class:`mhfast.sampler.schedules.Epoch`),
not kernel branches: a kernel reads the epoch's ``beta`` (``None``: accept every proposal).

Example (a do-nothing kernel that satisfies the protocol):
    >>> class Frozen:
    ...     name = "frozen"
    ...     supports_extra_energy = False
    ...     hastings = False
    ...     always_accepts = True
    ...     uses_blocks = False
    ...     def __init__(self, ctx): self.ctx = ctx
    ...     def init(self, state): return state
    ...     def sweep(self, state, epoch): return []
    ...     def step(self, state, epoch, move): return state, StepInfo(0, 0, 0, scored=True)
    >>> isinstance(Frozen(None), Kernel)
    True
"""
from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable

from ..schedules import Epoch
from ..state import ChainState
from ..step import NO_STEP, StepContext, StepInfo

__all__ = ["Kernel", "StepContext", "StepInfo", "NO_STEP"]


@runtime_checkable
class Kernel(Protocol):
    """A sampler kernel; ``KERNELS[name](ctx)`` builds one (see :mod:`mhfast.sampler.kernels`)."""

    name: str
    supports_extra_energy: bool  #: whether the kernel's acceptance includes extra energy terms
    #: whether the acceptance test has the Hastings ratio of the proposal (then any proposal with
    #: full support is exact, e.g. a uniform_mix share; Gibbs kernels accept every proposal)
    hastings: bool
    #: whether every proposal is accepted (no MH test): the target temperature, its annealing and forced
    #: acceptance then have nothing to act on (the option spec rejects them)
    always_accepts: bool
    #: whether the kernel proposes blocks of positions (then ``block_schedule`` sets their sizes)
    uses_blocks: bool

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
