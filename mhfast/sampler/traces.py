"""Traces: scalar summaries of every chain's state after every ``trace_every``-th sweep, for convergence diagnostics.

Per chain the recorder keeps, after each traced sweep (option ``trace_every``, default every sweep):

* ``e_raw``, ``e_local``: the state's two energies (paper, sections 2.1-2.2);
* each extra energy term's (unweighted) value, under the term's name (``result.term_names``);
* ``proj_0 .. proj_{P-1}`` (:data:`PROJECTIONS`): random projections of the one-hot sequence, as the discrete
  sampler benchmarks (DISCS) trace them: a fixed random value ``w_j(position, token)``, standard normal, summed
  over the free positions. They see changes the energy does not: two modes of equal energy have equal
  ``e_local`` traces but (almost surely) different projections, so R-hat on the projections flags chains
  stuck in different modes that R-hat on the energy cannot.

The projections' values come from the counter hash (stream ``rng.PROJECT``) keyed by a fixed seed, the
projection index, the position and the token: the same functions in every run, whatever its seed, batch or
device (so ``proj_0`` of two runs is the same quantity), and nothing V-sized is stored.

A traced sweep costs two small ops on the state (one hash per token slot and projection, a masked sum) and a
copy of ``M x S`` numbers to the host, once per sweep (a sweep is T steps): bench/bench_ess.py measures it.

Example:
    >>> import mhfast
    >>> from mhfast.models.tabular import TabularMLM
    >>> r = mhfast.sample(TabularMLM.random(3, 3, seed=0), 3, chains=2, epochs=5, burn_in=1, seed=0)
    >>> r.trace_names, tuple(r.traces.shape)    # [B, C, traced sweeps, summaries]
    (['e_raw', 'e_local', 'proj_0', 'proj_1', 'proj_2'], (1, 2, 5, 5))
"""
from __future__ import annotations

import bisect
import functools
from typing import Any, Sequence

import torch

from ..runtime import rng

PROJECTIONS = 3  #: random projections traced per chain
PROJECTION_SEED = 0x7A11_5EED  #: fixed: a projection is the same function in every run


def summary_names(term_names: Sequence[str] | None) -> list[str]:
    """The traced summaries' names, in order: energies, extra terms, projections.

    Example:
        >>> summary_names(["hamming"])
        ['e_raw', 'e_local', 'hamming', 'proj_0', 'proj_1', 'proj_2']
    """
    return ["e_raw", "e_local", *(term_names or []), *(f"proj_{j}" for j in range(PROJECTIONS))]


@functools.lru_cache(maxsize=None)
def _projection_keys(device: torch.device) -> torch.Tensor:
    """Long[P]: the projections' counter-hash keys, the same in every run: made once per device (the hash is ~25
    small ops, which a GPU would launch at every recorded sweep)."""
    return rng.chain_keys(PROJECTION_SEED, torch.arange(PROJECTIONS, device=device),
                          torch.zeros((), dtype=torch.long, device=device))


def projections(tokens: torch.Tensor, free: torch.Tensor, vocab_size: int, uniforms_op: Any = rng.counter_uniforms
                ) -> torch.Tensor:
    """f32[M, P]: ``sum_t w_j(t, tokens[m, t])`` over the free positions ``t`` of each chain, ``w_j`` standard normal
    (inverse CDF of the counter-hash uniform of (PROJECTION_SEED, j, position, token)).

    Example:
        >>> x, free = torch.tensor([[0, 1], [1, 0]]), torch.ones(2, 2, dtype=torch.bool)
        >>> p = projections(x, free, vocab_size=2)
        >>> p.shape, bool(torch.equal(projections(x[:1], free[:1], 2), p[:1]))    # a chain's own numbers
        (torch.Size([2, 3]), True)
    """
    M, T = tokens.shape
    dev = tokens.device
    keys = _projection_keys(dev)
    lane = torch.arange(T, device=dev) * int(vocab_size) + tokens  # one counter per (position, token)
    u = rng.uniforms_from_keys(keys[:, None, None], 0, 0, rng.PROJECT, lane[None], uniforms_op)  # [P, M, T]
    w = torch.special.ndtri(u.double())
    return (w * free[None]).sum(dim=2).T.float()


class TraceRecorder:
    """The traces of one run (all ``M = B x C`` chains; a chain that left the batch gets NaN from then on).

    ``record(state, rows, epoch)`` after each sweep (``rows``: each current chain's index among the M);
    ``draws()`` f32[B, C, D, S] and ``epochs`` (the sweep of each of the D draws) at the end.
    """

    def __init__(self, num_inputs: int, chains: int, vocab_size: int, term_names: Sequence[str] | None,
                 every: int, uniforms_op: Any = rng.counter_uniforms):
        self.B, self.C, self.every = int(num_inputs), int(chains), int(every)
        self.vocab_size = int(vocab_size)
        self.names = summary_names(term_names)
        self.uniforms_op = uniforms_op
        self.epochs: list[int] = []  #: the epoch (sweep) index of each recorded draw
        # CPU f32[M, capacity, S], doubled when full: an until_rhat check reads an input's draws as one slice (a
        # list of per-sweep tensors was stacked anew at every check: 61 ms at 2,000 draws, quadratic in a run)
        self._buffer = torch.empty(self.B * self.C, 0, len(self.names))

    def traced(self, epoch: int) -> bool:
        """Whether the sweep of epoch ``epoch`` (0-based) is recorded: every ``every``-th, the last of each group."""
        return (epoch + 1) % self.every == 0

    def summaries(self, state: Any) -> torch.Tensor:
        """f32[M', S] of the chains of ``state`` (a ChainState)."""
        parts = [state.e_raw[:, None], state.e_local[:, None], state.term_values,
                 projections(state.tokens, state.free, self.vocab_size, self.uniforms_op)]
        return torch.cat([p.float() for p in parts], dim=1)

    def record(self, state: Any, rows: torch.Tensor | None, epoch: int) -> bool:
        """Record the chains of ``state`` (their indices ``rows`` among all M; None: all) if ``epoch`` is traced."""
        if not self.traced(epoch):
            return False
        values = self.summaries(state).cpu()
        if rows is not None:
            full = torch.full((self.B * self.C, values.shape[1]), float("nan"))
            full[rows.cpu()] = values
            values = full
        D = len(self.epochs)
        if D == self._buffer.shape[1]:
            grown = torch.empty(self._buffer.shape[0], max(16, 2 * D), self._buffer.shape[2])
            grown[:, :D] = self._buffer
            self._buffer = grown
        self._buffer[:, D] = values
        self.epochs.append(epoch)
        return True

    def draws(self) -> torch.Tensor:
        """f32[B, C, D, S]: every recorded draw (NaN after a chain left the batch)."""
        D = len(self.epochs)
        return self._buffer[:, :D].reshape(self.B, self.C, D, len(self.names)).clone()

    def draws_since(self, first_epoch: int) -> int:
        """How many sweeps from ``first_epoch`` on are recorded (what :meth:`input_draws` returns per chain)."""
        return len(self.epochs) - bisect.bisect_left(self.epochs, first_epoch)

    def input_draws(self, b: int, first_epoch: int) -> torch.Tensor:
        """f32[C, D_b, S]: input ``b``'s draws from sweep ``first_epoch`` on (its chains only; no NaN while it runs)."""
        first = bisect.bisect_left(self.epochs, first_epoch)  # (epochs are recorded in increasing order)
        return self._buffer[b * self.C:(b + 1) * self.C, first:len(self.epochs)].clone()
