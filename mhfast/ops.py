"""Typed Python wrappers of mhfast's compiled ops (``torch.ops.mhfast.*``).

Each wrapper has the signature of its pure-PyTorch twin in :mod:`mhfast.reference` plus a
keyword ``validate``. Validation happens once per kind (see :mod:`mhfast._validate`): the
compiled kernels check dtypes, ranks, sizes and devices at the op boundary (csrc/checks.cpp);
the CPU kernels also check value ranges (token ids, positions), which costs nothing there. With
``validate=True`` (the default) every wrapper checks the Python types of its arguments first (a
non-tensor, an epoch of 1.5 or a temperature given as a string is an error naming it, as in the
reference, not a number silently truncated); on CUDA a value check needs a device->host sync, so
the wrapper makes that in Python too (the metadata check op runs first so that the data checks see
well-formed tensors); ``validate=False`` skips both; mhfast's sampler, which builds its own
indices, passes ``validate=False``. The CUDA kernels never read or write out of bounds even on
invalid input (a NaN / +inf logits row proposes its current token with NaN log q).

Example:
    >>> import torch, mhfast.ops as ops
    >>> logits = torch.tensor([[0.0, 1.0, 2.0]])
    >>> e_raw, e_local, token_logp = ops.gather_energies(logits, torch.tensor([2]), torch.tensor([0]), 1)
    >>> e_raw
    tensor([-2.])
"""
from __future__ import annotations

import torch

from . import _validate, op_types
from .op_types import ChainRows, MemoTable, SiteProposal, SiteRows, SiteTerms
from ._C_loader import load_library

load_library()

_ops = torch.ops.mhfast


def _needs_python_checks(validate: bool, t: torch.Tensor) -> bool:
    # CPU kernels check values themselves; under torch.compile tracing values are unknown; a meta tensor has none
    # (the ops run on it for shapes, as torch's own do). (Not a tensor: the type check that runs next names it.)
    return (validate and isinstance(t, torch.Tensor) and t.device.type not in ("cpu", "meta")
            and not torch.compiler.is_compiling())


def masked_copies(tokens: torch.Tensor, seq_index: torch.Tensor, pos_index: torch.Tensor, mask_id: int,
                  *, validate: bool = True) -> torch.Tensor:
    """Compiled :func:`mhfast.reference.masked_copies`."""
    if validate:
        _validate.masked_copies(tokens, seq_index, pos_index, mask_id, values=_needs_python_checks(validate, tokens))
    return _ops.masked_copies(tokens, seq_index, pos_index, mask_id)


def gather_energies(logits: torch.Tensor, targets: torch.Tensor, seq_index: torch.Tensor, num_seqs: int,
                    *, validate: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Compiled :func:`mhfast.reference.gather_energies`. With ``seq_index`` sorted (as mhfast passes it) each
    sequence sums its own rows; unsorted, the CUDA kernel scans every row for every sequence (O(N S)) and a
    sequence's float32 sums then depend on where its rows sit among the others (last bits only)."""
    if validate:
        _validate.gather_energies(logits, targets, seq_index, num_seqs,
                                  values=_needs_python_checks(validate, logits))
    return _ops.gather_energies(logits, targets, seq_index, num_seqs)


def propose(logits: torch.Tensor, current: torch.Tensor, temperature: float, top_p: float,
            uniforms: torch.Tensor, uniform_mix: float = 0.0, *, validate: bool = True
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Compiled :func:`mhfast.reference.propose`."""
    if validate:
        _validate.propose(logits, current, temperature, top_p, uniforms, uniform_mix,
                          values=_needs_python_checks(validate, logits))
    return _ops.propose(logits, current, float(temperature), float(top_p), uniforms, float(uniform_mix))


def mh_accept_(tokens: torch.Tensor, positions: torch.Tensor, proposed: torch.Tensor, energy: torch.Tensor,
               energy_proposed: torch.Tensor, logq_forward: torch.Tensor, logq_reverse: torch.Tensor,
               beta: torch.Tensor, uniforms: torch.Tensor, *, validate: bool = True) -> torch.Tensor:
    """Compiled :func:`mhfast.reference.mh_accept_`."""
    if validate:
        _validate.mh_accept_(tokens, positions, proposed, energy, energy_proposed, logq_forward,
                             logq_reverse, beta, uniforms, values=_needs_python_checks(validate, tokens))
    return _ops.mh_accept_(tokens, positions, proposed, energy, energy_proposed, logq_forward, logq_reverse,
                           beta, uniforms)


def counter_uniforms(keys: torch.Tensor, epoch: int, step: int, stream: int, lanes: torch.Tensor | None = None,
                     *, validate: bool = True) -> torch.Tensor:
    """Compiled :func:`mhfast.reference.counter_uniforms` (no value checks needed: every key is valid)."""
    if validate:  # types only: int() below would truncate an epoch of 1.5 instead of naming it
        _validate.counter_uniforms(keys, epoch, step, stream, lanes)
    return _ops.counter_uniforms(keys, int(epoch), int(step), int(stream), lanes)


def mh_propose_site(cache: torch.Tensor, tokens: torch.Tensor, keys: torch.Tensor, act: torch.Tensor,
                    pos: torch.Tensor, blocked: torch.Tensor, epoch: int, step: int, stream: int,
                    temperature: float, top_p: float, *, validate: bool = True
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Compiled :func:`mhfast.reference.mh_propose_site` (one kernel: gather, mask, RNG, propose)."""
    if validate:  # types always (isinstance checks, no sync); values where the kernel does not check them
        _validate.mh_propose_site(cache, tokens, keys, act, pos, blocked, epoch, step, stream, temperature,
                                  top_p, values=_needs_python_checks(validate, cache))
    return _ops.mh_propose_site(cache, tokens, keys, act, pos, blocked, int(epoch), int(step), int(stream),
                                float(temperature), float(top_p))


def mh_commit_site_(chains: ChainRows, proposal: SiteProposal, terms: SiteTerms, rows: SiteRows,
                    beta: float | torch.Tensor | None, epoch: int, step: int, stream: int, *, validate: bool = True
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Compiled :func:`mhfast.reference.mh_commit_site_` (one kernel: MH test, state copies with the
    accepted moves, cache rows in place)."""
    if validate:  # types always (isinstance checks, no sync); values where the kernel does not check them
        _validate.mh_commit_site_(chains, proposal, terms, rows, beta, epoch, step, stream,
                                  values=_needs_python_checks(validate, getattr(chains, "tokens", None)))
    # (.default: the one overload, without the packet's overload resolution, ~10 us a call on CPU)
    return _ops.mh_commit_site_.default(*op_types.commit_site_op_args(chains, proposal, terms, rows, beta, epoch,
                                                                      step, stream))


def mh_site_rows(tokens: torch.Tensor, energy_mask: torch.Tensor, raw_terms: torch.Tensor,
                 local_terms: torch.Tensor, ch: torch.Tensor, pos: torch.Tensor, proposed: torch.Tensor,
                 num_rows: int, mask_id: int, *, validate: bool = True) -> tuple[torch.Tensor, ...]:
    """Compiled :func:`mhfast.reference.mh_site_rows` (X', its term copies and its model rows in one call)."""
    if validate:  # types always (isinstance checks, no sync); values where the kernel does not check them
        _validate.mh_site_rows(tokens, energy_mask, raw_terms, local_terms, ch, pos, proposed, num_rows, mask_id,
                               values=_needs_python_checks(validate, tokens))
    return _ops.mh_site_rows(tokens, energy_mask, raw_terms, local_terms, ch, pos, proposed, num_rows, mask_id)


def mh_memo_lookup_(table: MemoTable, tokens: torch.Tensor, act: torch.Tensor, pos: torch.Tensor,
                    proposed: torch.Tensor, changed: torch.Tensor, ways: int, step: int, *, validate: bool = True
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Compiled :func:`mhfast.reference.mh_memo_lookup_` (the proposal memo's lookup, in place: one pass over the
    step's proposals)."""
    if validate:
        _validate.mh_memo_lookup_(table, tokens, act, pos, proposed, changed, ways, step,
                                  values=_needs_python_checks(validate, tokens))
    return _ops.mh_memo_lookup_.default(*op_types.memo_lookup_op_args(table, tokens, act, pos, proposed, changed,
                                                                      ways, step))


def mh_memo_store_(table: MemoTable, act: torch.Tensor, slot: torch.Tensor, sel: torch.Tensor,
                   raw_new: torch.Tensor, local_new: torch.Tensor, num_misses: int, step: int, *,
                   validate: bool = True) -> None:
    """Compiled :func:`mhfast.reference.mh_memo_store_` (the terms of the step's misses into the memo, in place).
    The first ``num_misses`` entries of ``sel`` must be distinct (the memo's own are): on CUDA two blocks writing
    one entry race (the CPU kernel keeps the first)."""
    if validate:
        _validate.mh_memo_store_(table, act, slot, sel, raw_new, local_new, num_misses, step,
                                 values=_needs_python_checks(validate, act))
    _ops.mh_memo_store_.default(*op_types.memo_store_op_args(table, act, slot, sel, raw_new, local_new, num_misses,
                                                             step))


# ---------------------------------------------------------------------------------------------
# Fake kernels: output metadata for torch.compile / FakeTensor tracing and opcheck.
# ---------------------------------------------------------------------------------------------


# Mixed devices involving "meta" dispatch here, not to a real kernel: each fake runs the op's
# metadata check op (the same C++ checks as the kernels).
@torch.library.register_fake("mhfast::masked_copies")
def _masked_copies_fake(tokens, seq_index, pos_index, mask_id):
    _ops.masked_copies_check(tokens, seq_index, pos_index)
    return tokens.new_empty((seq_index.shape[0], tokens.shape[1]))


@torch.library.register_fake("mhfast::gather_energies")
def _gather_energies_fake(logits, targets, seq_index, num_seqs):
    _ops.gather_energies_check(logits, targets, seq_index, num_seqs)
    f32 = dict(dtype=torch.float32, device=logits.device)
    return (logits.new_empty((num_seqs,), **f32), logits.new_empty((num_seqs,), **f32),
            logits.new_empty((logits.shape[0],), **f32))


@torch.library.register_fake("mhfast::propose")
def _propose_fake(logits, current, temperature, top_p, uniforms, uniform_mix=0.0):
    _ops.propose_check(logits, current, temperature, top_p, uniforms, uniform_mix)
    B = logits.shape[0]
    return (current.new_empty((B,)), uniforms.new_empty((B,)), uniforms.new_empty((B,)))


@torch.library.register_fake("mhfast::mh_accept_")
def _mh_accept_fake(tokens, positions, proposed, energy, energy_proposed, logq_forward, logq_reverse, beta,
                    uniforms):
    _ops.mh_accept__check(tokens, positions, proposed, energy, energy_proposed, logq_forward, logq_reverse, beta,
                          uniforms)
    return torch.empty((tokens.shape[0],), dtype=torch.bool, device=tokens.device)


@torch.library.register_fake("mhfast::counter_uniforms")
def _counter_uniforms_fake(keys, epoch, step, stream, lanes=None):
    _ops.counter_uniforms_check(keys, epoch, step, stream, lanes)
    return torch.empty(keys.shape, dtype=torch.float32, device=keys.device)


@torch.library.register_fake("mhfast::mh_propose_site")
def _mh_propose_site_fake(cache, tokens, keys, act, pos, blocked, epoch, step, stream, temperature, top_p):
    _ops.mh_propose_site_check(cache, tokens, keys, act, pos, blocked, epoch, step, stream, temperature, top_p)
    A = act.shape[0]
    f32 = dict(dtype=torch.float32, device=cache.device)
    return (act.new_empty((A,)), cache.new_empty((A,), **f32), cache.new_empty((A,), **f32),
            torch.empty((A,), dtype=torch.bool, device=cache.device))


@torch.library.register_fake("mhfast::mh_commit_site_")
def _mh_commit_site_fake(chains, cache, proposal, terms, seq, q, outputs, beta, beta_rows, epoch, step, stream):
    _ops.mh_commit_site__check(chains, cache, proposal, terms, seq, q, outputs, beta, beta_rows, epoch, step, stream)
    tokens, raw_terms, local_terms, e_raw, e_local = chains[:5]
    dev = tokens.device
    f32 = dict(dtype=torch.float32, device=dev)
    return (torch.empty(tokens.shape, dtype=torch.long, device=dev), torch.empty(raw_terms.shape, **f32),
            torch.empty(local_terms.shape, **f32), torch.empty(e_raw.shape, **f32), torch.empty(e_local.shape, **f32),
            torch.empty((proposal[0].shape[0],), dtype=torch.bool, device=dev))


@torch.library.register_fake("mhfast::mh_site_rows")
def _mh_site_rows_fake(tokens, energy_mask, raw_terms, local_terms, ch, pos, proposed, num_rows, mask_id):
    _ops.mh_site_rows_check(tokens, energy_mask, raw_terms, local_terms, ch, pos, proposed, num_rows)
    n, T = ch.shape[0], tokens.shape[1]
    dev = tokens.device
    long_, f32 = dict(dtype=torch.long, device=dev), dict(dtype=torch.float32, device=dev)
    return (torch.empty((n, T), **long_), torch.empty((n, T), **f32), torch.empty((n, T), **f32),
            torch.empty((num_rows,), **long_), torch.empty((num_rows,), **long_), torch.empty((num_rows, T), **long_),
            torch.empty((num_rows,), **long_))


@torch.library.register_fake("mhfast::mh_memo_lookup_")
def _mh_memo_lookup_fake(table, group, tokens, act, pos, proposed, changed, ways, step):
    _ops.mh_memo_lookup__check(table, group, tokens, act, pos, proposed, changed, ways, step)
    A, dev = act.shape[0], table[0].device
    return torch.empty((2 * A,), dtype=torch.bool, device=dev), torch.empty((A,), dtype=torch.long, device=dev)


@torch.library.register_fake("mhfast::mh_memo_store_")
def _mh_memo_store_fake(table, group, act, slot, sel, raw_new, local_new, num_misses, step):
    _ops.mh_memo_store__check(table, group, act, slot, sel, raw_new, local_new, num_misses, step)
    return None
