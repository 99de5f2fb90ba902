"""Where each chain starts: the greedy warm start, dispersed starts, or one given row per chain.

R-hat compares the chains of an input with each other; when they all start from the same state (the greedy
warm start, or the one ``init`` row, as every run did before this module) a multimodal target can look
converged because every chain sits in the same mode. Dispersed starts make that visible:

* ``start="greedy"`` (default, Algorithm 1 line 3): one forward of each input's row with all its masks, the
  argmax at every masked free position; every chain of the input starts there. The paper's setting and the
  fastest way to a good sample, but no dispersion at all.
* ``start="sampled"``: the same forward, but each chain draws each masked free position from that
  conditional (at the proposal temperature; AllowedTokens respected) instead of taking the argmax. Chains start
  near the greedy state, spread over what the model finds plausible: for R-hat on a unimodal-looking target
  without starting in nonsense. Positions that hold a given token (infilling) stay as given.
* ``start="random"``: every free position (given token or mask) gets a uniformly random proposable token
  (special ids never; AllowedTokens respected). Over-dispersed, as Gelman & Rubin ask of R-hat's starts: the
  strictest test of mixing, but the chains must first climb out of noise (use burn-in).
* ``init=Long[B, C, T]``: one given row per chain (C = ``chains``): e.g. chains started in known, different
  modes. Rows of an input must agree on padding, special tokens and fixed positions; masks are filled per chain
  (greedily, or sampled with ``start="sampled"``).

The random numbers are the chain's own (seed, input, chain) stream ``rng.START``, so a chain's start does not
depend on the rest of the batch.

Example:
    >>> import mhfast, torch
    >>> from mhfast.models.tabular import TabularMLM
    >>> model = TabularMLM.random(num_tokens=5, length=4, seed=0)
    >>> r = mhfast.sample(model, 4, chains=3, epochs=1, burn_in=0, start="random", seed=1)
    >>> r.tokens.shape
    torch.Size([1, 3, 4])
"""
from __future__ import annotations

from typing import Any

import torch

from ..runtime import rng
from ..runtime.runner import ModelRunner
from .options import shown
from .state import warm_start


def _err(msg: str) -> ValueError:
    return ValueError(f"mhfast.sample: {msg}")


def split_init(init: Any, chains: int) -> tuple[Any, torch.Tensor | None]:
    """``(rows for the problem, per-chain rows or None)``: a ``Long[B, C, T]`` init gives its first chain's rows
    (the problem's: energy and free positions) and itself; anything else passes through unchanged.

    Example:
        >>> rows, per_chain = split_init(torch.zeros(2, 3, 4, dtype=torch.long), chains=3)
        >>> rows.shape, per_chain.shape
        (torch.Size([2, 4]), torch.Size([2, 3, 4]))
    """
    if not isinstance(init, torch.Tensor) or init.dim() == 2:
        return init, None
    if init.dim() != 3:
        raise _err(f"init must have shape [B, T] (one start per input) or [B, chains, T] (one per chain), got "
                   f"{tuple(init.shape)}")
    if init.dtype != torch.long:
        raise TypeError(f"mhfast.sample: init must be int64, got {init.dtype}")
    B, C, T = init.shape
    if B == 0 or T == 0 or C != chains:
        raise _err(f"init of shape [B, C, T] must have B, T >= 1 and C = chains ({chains}) rows per input, got "
                   f"{tuple(init.shape)}")
    return init[:, 0], init


def check_chain_rows(model: Any, problem: Any, chain_init: torch.Tensor, start: str) -> torch.Tensor:
    """``chain_init`` (Long[B, C, T]) checked against the problem built from its first chain: the same padding and
    special tokens, the same tokens at fixed positions, masks only where free, AllowedTokens respected.
    Returns it flat (Long[B * C, T]) on the problem's device; errors name ``init``."""
    from .problem import _energy_mask  # the checks of the problem's own rows (token ids, padding at the end)

    if start == "random":
        raise _err("start='random' draws every free token itself; it cannot be combined with a per-chain init "
                   "Long[B, C, T] (use start='greedy' or 'sampled', which fill only the masks of each row)")
    B, C, T = chain_init.shape
    rows = chain_init.to(problem.device).reshape(B * C, T)
    is_pad, energy = _energy_mask(model, rows)
    rep = lambda t: t.repeat_interleave(C, dim=0)  # noqa: E731
    for what, got, want in (("padding", is_pad, rep(problem.is_pad)), ("energy positions (special tokens)", energy,
                                                                        rep(problem.energy_mask))):
        bad = (got != want).any(dim=1)
        if bool(bad.any()):
            m = int(bad.nonzero()[0])
            raise _err(f"init: chain {m % C} of input {m // C} has its {what} elsewhere than chain 0")
    free = rep(problem.free)
    fixed_differs = (~free & (rows != rep(problem.rows))).any(dim=1)
    if bool(fixed_differs.any()):
        m = int(fixed_differs.nonzero()[0])
        raise _err(f"init: chain {m % C} of input {m // C} differs from chain 0 at a fixed position (only free "
                   "positions may differ between chains)")
    allowed = problem.allowed
    if allowed is not None:
        given = free & (rows != int(model.mask_id))
        held = rep(allowed).gather(2, rows[:, :, None]).squeeze(2)
        if bool((given & ~held).any()):
            m, t = (given & ~held).nonzero()[0].tolist()
            raise _err(f"extra_energy: AllowedTokens forbids token {int(rows[m, t])} that init holds at free "
                       f"position {t} of chain {m % C} of input {m // C}")
    return rows


def initial_tokens(runner: ModelRunner, problem: Any, cfg: Any, uniforms_op: Any,
                   chain_rows: torch.Tensor | None = None) -> torch.Tensor:
    """Long[B * C, T]: every chain's first state (see the module doc), chain ``m`` of input ``m // C``.

    The default (greedy, one row per input) is the computation of before: one warm start per input, repeated."""
    C = int(cfg.chains)
    rep = lambda t: None if t is None else t.repeat_interleave(C, dim=0)  # noqa: E731
    if chain_rows is None and cfg.start == "greedy":
        return rep(warm_start(runner, problem.rows, problem.free, problem.ctx_rows, problem.allowed))
    rows = chain_rows if chain_rows is not None else rep(problem.rows)
    free, allowed = rep(problem.free), rep(problem.allowed)
    keys = rng.chain_keys(int(cfg.seed), rep(problem.input_index),
                          torch.arange(C, device=rows.device).repeat(problem.rows.shape[0]))
    if cfg.start == "greedy":
        return warm_start(runner, rows, free, rep(problem.ctx_rows), allowed)
    if cfg.start == "sampled":
        return sampled_start(runner, rows, free, rep(problem.ctx_rows), allowed, keys, float(cfg.proposal_temperature),
                             uniforms_op)
    return random_start(runner, rows, free, allowed, keys, uniforms_op)


def check_sampled_start(problem: Any, chain_rows: torch.Tensor | None, mask_id: int, chains: int) -> None:
    """``start="sampled"`` draws only masked free positions: an input whose rows (every chain's, with a per-chain
    ``init``) hold none would have every chain start at its given row, the option doing nothing. An error naming
    the input, checked per input (whether a call fails must not depend on which inputs share it)."""
    rows = chain_rows.reshape(problem.rows.shape[0], chains, -1) if chain_rows is not None else problem.rows[:, None]
    drawn = ((rows == mask_id) & problem.free[:, None]).flatten(1).any(dim=1)
    if not bool(drawn.all()):
        b = int((~drawn).nonzero()[0, 0])
        raise _err(f"{shown('start', 'sampled')} draws the masked free positions of each input, and input {b} has "
                   f"none: all its chains would start at its given tokens. Use {shown('start', 'random')} to "
                   "disperse them, or leave masks at the positions the starts may differ in")


def _draw(logits: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One token per row of ``logits`` (-inf: never) by the inverse CDF at ``u`` (float64 cumulative sums)."""
    p = torch.softmax(logits.double(), dim=1)
    if not bool((torch.isfinite(p).all(dim=1) & (p > 0).any(dim=1)).all()):  # (else token 0: maybe the pad)
        raise ValueError("mhfast.sample: a start position has no token to draw (every logit -inf, or logits past "
                         "float64's range at this proposal temperature)")
    cdf = p.cumsum(dim=1)
    k = torch.searchsorted(cdf, (u.double() * cdf[:, -1])[:, None]).squeeze(1)
    return torch.minimum(k, (p > 0).long().cumsum(1).argmax(1))  # never past the last token with p > 0


def sampled_start(runner: ModelRunner, rows: torch.Tensor, free: torch.Tensor, ctx_index: torch.Tensor | None,
                  allowed: torch.Tensor | None, keys: torch.Tensor, temperature: float, uniforms_op: Any
                  ) -> torch.Tensor:
    """The warm start's forward (each row with all its masks), each masked free position drawn from its
    conditional at ``temperature`` instead of the argmax."""
    masked = (rows == runner.mask_id) & free
    r, p = masked.nonzero(as_tuple=True)
    out = rows.clone()
    if r.numel():
        logits = runner.proposal_logits(runner.to_logits(runner.outputs_at(rows, r, p, ctx_index))).float()
        if allowed is not None:
            logits = logits.masked_fill(~allowed[r, p], float("-inf"))
        u = rng.uniforms_from_keys(keys.index_select(0, r), 0, 0, rng.START, p, uniforms_op)
        out[r, p] = _draw(logits.double() / temperature, u)  # (in float32, 10 / 1e-38 is inf: NaN softmax)
    return out


def random_start(runner: ModelRunner, rows: torch.Tensor, free: torch.Tensor, allowed: torch.Tensor | None,
                 keys: torch.Tensor, uniforms_op: Any) -> torch.Tensor:
    """Every free position a uniformly random proposable token (not special; allowed by AllowedTokens)."""
    r, p = free.nonzero(as_tuple=True)
    out = rows.clone()
    if r.numel():
        ok = (~runner.special)[None, :].expand(r.numel(), -1)
        if allowed is not None:
            ok = ok & allowed[r, p]
        flat = torch.where(ok, 0.0, float("-inf"))  # equal logits: the uniform distribution over the proposable
        u = rng.uniforms_from_keys(keys.index_select(0, r), 0, 0, rng.START, p, uniforms_op)
        out[r, p] = _draw(flat, u)
    return out
