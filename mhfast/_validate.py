"""Argument checks of mhfast's ops, each written once.

Three kinds, three places:

* Tensor metadata (dtype, rank, sizes, one device) and scalar ranges (``num_seqs >= 0``,
  ``temperature > 0``, ``top_p`` in (0, 1], ``uniform_mix`` in [0, 1)): C++ only, ``csrc/checks.cpp``. Every kernel runs them
  at the op boundary (so the raw ``torch.ops.mhfast.*`` ops reject bad input too), and
  ``torch.ops.mhfast.<op>_check`` runs them alone: the functions below call it, for the
  references and the ``validate=True`` wrappers, before any data check reads the tensors.
* Python types that never reach C++ as such (a tensor argument that is not a tensor, a
  ``mask_id`` that is not an int): here, as TypeError.
* Data values (token ids inside the vocabulary, positions inside the sequence, NaN / +inf logits,
  uniforms in [0, 1]): here, for the references and the CUDA wrappers (``validate=True``; one
  device->host sync, which is why the sampler passes ``validate=False``). The CPU kernels also
  check values themselves, in their serial pre-pass (free there, and it keeps raw CPU ops safe).

Every error names the op and the argument, e.g. ``mhfast.masked_copies: pos_index must be Long,
got Float`` (TypeError) or ``mhfast.propose: current contains 7, outside [0, 5)`` (ValueError).

Example:
    >>> import torch
    >>> from mhfast import _validate
    >>> _validate.masked_copies(torch.zeros(2, 3).long(), torch.tensor([0]), torch.tensor([3]), 0, values=True)
    Traceback (most recent call last):
    ValueError: mhfast.masked_copies: pos_index contains 3, outside [0, 3)
"""
from __future__ import annotations

import torch

from ._C_loader import load_library
from . import op_types
from .op_types import ChainRows, MemoTable, SiteProposal, SiteRows, SiteTerms

load_library()
_ops = torch.ops.mhfast


def tensors(op: str, **named: object) -> None:
    """TypeError naming the first argument that is not a tensor (C++ would see it only as a schema error)."""
    for name, t in named.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"mhfast.{op}: {name} must be a torch.Tensor, got {type(t).__name__}")


def holds_values(where: str, name: str, t: torch.Tensor) -> None:
    """ValueError naming the argument and its device for a tensor on the meta device: it has a shape but no values,
    so the first read of one, deep inside, fails with torch's message, which names neither.

    Example:
        >>> holds_values("mhfast.sample", "init", torch.zeros(2, 3, device="meta"))
        Traceback (most recent call last):
        ValueError: mhfast.sample: init is on the meta device, which holds no values (shapes only): give it on cpu or cuda
    """
    if t.is_meta:
        raise ValueError(f"{where}: {name} is on the meta device, which holds no values (shapes only): give it on "
                         "cpu or cuda")


def distinct(op: str, name: str, t: torch.Tensor) -> None:
    """ValueError naming the first value of ``t`` (chain indices), in its order, that repeats an earlier one, as
    the CPU kernels report it (the smallest repeated value had been named: 1, where the kernels said 3, for
    [3, 1, 3, 1]).

    Example:
        >>> distinct("op", "ch", torch.tensor([3, 1, 3, 1]))
        Traceback (most recent call last):
        ValueError: mhfast.op: ch contains 3 twice (chains must be distinct)
    """
    counts = t.unique(return_counts=True)[1]  # on t's device: the host walk below runs only when one repeats
    if bool((counts > 1).any()):
        seen: set[int] = set()
        for v in t.tolist():
            if v in seen:
                raise ValueError(f"mhfast.{op}: {name} contains {v} twice (chains must be distinct)")
            seen.add(v)


INT64 = (-2 ** 63, 2 ** 63 - 1)


def int64(op: str, name: str, x: int) -> None:
    """ValueError naming an int the ops' int64 arguments cannot hold (torch's schema error said "Expected a value
    of type 'int' ... but instead found type 'int'", naming no argument)."""
    if not INT64[0] <= x <= INT64[1]:
        raise ValueError(f"mhfast.{op}: {name} must fit in 64 bits (a signed int64), got {x}")


def ints(op: str, **named: object) -> None:
    """TypeError naming the first argument that is not a Python int (C++ would see it only as a schema error),
    ValueError for one beyond int64."""
    for name, x in named.items():
        if isinstance(x, bool) or not isinstance(x, int):
            raise TypeError(f"mhfast.{op}: {name} must be an int, got {type(x).__name__}")
        int64(op, name, x)


def counters(op: str, epoch: object, step: object, stream: object) -> None:
    """ValueError naming the first of the counter hash's ``epoch``/``step``/``stream`` that is not an int, or one
    beyond int64 (their range is checked in C++)."""
    for name, c in (("epoch", epoch), ("step", step), ("stream", stream)):
        if isinstance(c, bool) or not isinstance(c, int):
            raise ValueError(f"mhfast.{op}: {name} must be an int, got {c!r}")
        int64(op, name, c)


def number(op: str, name: str, x: object) -> None:
    """ValueError unless ``x`` is a Python number that a float holds (its range is checked in C++; an int like
    10**400 failed in float() with "int too large to convert to float", naming nothing)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise ValueError(f"mhfast.{op}: {name} must be a number, got {x!r}")
    try:
        float(x)
    except OverflowError:
        raise ValueError(f"mhfast.{op}: {name} must be a finite number, got an int of {x.bit_length()} bits") \
            from None


def in_range(op: str, name: str, t: torch.Tensor, low: int, high: int, allow: int | None = None) -> None:
    """Check ``low <= t < high`` elementwise (``allow`` is an extra permitted value, e.g. -1 padding)."""
    if t.numel() == 0:
        return
    bad = (t < low) | (t >= high)
    if allow is not None:
        bad &= t != allow
    if bool(bad.any()):
        value = int(t[bad][0])
        extra = f" (or {allow})" if allow is not None else ""
        raise ValueError(f"mhfast.{op}: {name} contains {value}, outside [{low}, {high}){extra}")


# ----------------------------------------------------------------------------------
# Per-op checks: types, then metadata (C++), then with `values=True` the data checks. These
# start by refusing a meta tensor, naming the op's first tensor (the C++ check has put every
# tensor on one device): a pure-PyTorch reference computes values, and a meta tensor holds none
# (the first read, Tensor.item() deep inside, had named nothing). The compiled wrappers pass
# values=False for meta tensors, which the raw ops answer with shapes.
# ----------------------------------------------------------------------------------


def masked_copies(tokens, seq_index, pos_index, mask_id, *, values: bool) -> None:
    op = "masked_copies"
    tensors(op, tokens=tokens, seq_index=seq_index, pos_index=pos_index)
    ints(op, mask_id=mask_id)
    _ops.masked_copies_check(tokens, seq_index, pos_index)
    if values:
        holds_values(f"mhfast.{op}", "tokens", tokens)
        in_range(op, "seq_index", seq_index, 0, tokens.shape[0])
        in_range(op, "pos_index", pos_index, 0, tokens.shape[1])


def gather_energies(logits, targets, seq_index, num_seqs, *, values: bool) -> None:
    op = "gather_energies"
    tensors(op, logits=logits, targets=targets, seq_index=seq_index)
    if isinstance(num_seqs, bool) or not isinstance(num_seqs, int):
        raise ValueError(f"mhfast.{op}: num_seqs must be an int >= 0, got {num_seqs!r}")
    int64(op, "num_seqs", num_seqs)
    _ops.gather_energies_check(logits, targets, seq_index, num_seqs)
    if values:
        holds_values(f"mhfast.{op}", "logits", logits)
        in_range(op, "targets", targets, 0, logits.shape[1])
        in_range(op, "seq_index", seq_index, 0, num_seqs)


def propose(logits, current, temperature, top_p, uniforms, uniform_mix=0.0, *, values: bool) -> None:
    op = "propose"
    tensors(op, logits=logits, current=current, uniforms=uniforms)
    number(op, "temperature", temperature)
    number(op, "top_p", top_p)
    number(op, "uniform_mix", uniform_mix)
    _ops.propose_check(logits, current, float(temperature), float(top_p), uniforms, float(uniform_mix))
    if values:
        holds_values(f"mhfast.{op}", "logits", logits)
        in_range(op, "current", current, 0, logits.shape[1])
        # uniforms before the logits' values, in the CPU kernel's order (it checks them before its pass)
        if uniforms.numel() and bool(((uniforms < 0) | (uniforms > 1) | torch.isnan(uniforms)).any()):
            raise ValueError(f"mhfast.{op}: uniforms must lie in [0, 1]")
        scaled = logits.float() / float(temperature)  # what is sampled from (as the kernels check it)
        if logits.numel() and bool((torch.isnan(scaled) | (scaled == float("inf"))).any()):
            raise ValueError(f"mhfast.{op}: logits contains NaN or +inf (or overflows fp32 when divided by "
                             "temperature)")
        if logits.numel() and not bool(torch.isfinite(scaled).any(dim=1).all()):
            raise ValueError(f"mhfast.{op}: logits has a row with no finite entry (nothing can be proposed)")


def mh_accept_(tokens, positions, proposed, energy, energy_proposed, logq_forward, logq_reverse, beta,
               uniforms, *, values: bool) -> None:
    op = "mh_accept_"
    tensors(op, tokens=tokens, positions=positions, proposed=proposed, energy=energy,
            energy_proposed=energy_proposed, logq_forward=logq_forward, logq_reverse=logq_reverse, beta=beta,
            uniforms=uniforms)
    _ops.mh_accept__check(tokens, positions, proposed, energy, energy_proposed, logq_forward, logq_reverse, beta,
                          uniforms)
    if values:
        holds_values(f"mhfast.{op}", "tokens", tokens)
        # -1 marks an unused slot of a block proposal (chains whose block is shorter).
        in_range(op, "positions", positions, 0, tokens.shape[1], allow=-1 if positions.dim() == 2 else None)


def counter_uniforms(keys, epoch, step, stream, lanes) -> None:
    op = "counter_uniforms"
    tensors(op, keys=keys, **({} if lanes is None else {"lanes": lanes}))
    counters(op, epoch, step, stream)
    _ops.counter_uniforms_check(keys, epoch, step, stream, lanes)


def mh_propose_site(cache, tokens, keys, act, pos, blocked, epoch, step, stream, temperature, top_p, *,
                    values: bool) -> None:
    op = "mh_propose_site"
    tensors(op, cache=cache, tokens=tokens, keys=keys, act=act, pos=pos, blocked=blocked)
    counters(op, epoch, step, stream)
    number(op, "temperature", temperature)
    number(op, "top_p", top_p)
    _ops.mh_propose_site_check(cache, tokens, keys, act, pos, blocked, epoch, step, stream, float(temperature),
                               float(top_p))
    if values:
        holds_values(f"mhfast.{op}", "cache", cache)
    if not values or act.numel() == 0:
        return
    in_range(op, "act", act, 0, cache.shape[0])
    in_range(op, "pos", pos, 0, cache.shape[1])
    in_range(op, "tokens[act, pos]", tokens[act, pos], 0, cache.shape[2])
    rows = cache[act, pos].float().masked_fill(blocked, float("-inf")) / float(temperature)  # blocked: never read
    if bool((torch.isnan(rows) | (rows == float("inf"))).any()):
        raise ValueError(f"mhfast.{op}: cache contains NaN or +inf at a proposed site (or overflows fp32 when "
                         "divided by temperature)")
    if not bool(torch.isfinite(rows).any(dim=1).all()):
        raise ValueError(f"mhfast.{op}: cache has a proposed site with no finite unblocked entry "
                         "(nothing can be proposed)")


def mh_site_rows(tokens, energy_mask, raw_terms, local_terms, ch, pos, proposed, num_rows, mask_id, *,
                 values: bool) -> None:
    op = "mh_site_rows"
    tensors(op, tokens=tokens, energy_mask=energy_mask, raw_terms=raw_terms, local_terms=local_terms, ch=ch, pos=pos,
            proposed=proposed)
    ints(op, num_rows=num_rows, mask_id=mask_id)
    _ops.mh_site_rows_check(tokens, energy_mask, raw_terms, local_terms, ch, pos, proposed, num_rows)
    if not values:
        return
    holds_values(f"mhfast.{op}", "tokens", tokens)
    in_range(op, "ch", ch, 0, tokens.shape[0])
    in_range(op, "pos", pos, 0, tokens.shape[1])
    count = int(energy_mask.index_select(0, ch).sum()) - int(energy_mask[ch, pos].sum()) if ch.numel() else 0
    if count != num_rows:
        raise ValueError(f"mhfast.{op}: num_rows is {num_rows} but the chains ch have {count} energy positions "
                         "other than pos")


def mh_memo_lookup_(table, tokens, act, pos, proposed, changed, ways, step, *, values: bool) -> None:
    op = "mh_memo_lookup_"
    bundle(op, "table", table, MemoTable)
    tensors(op, tokens=tokens, act=act, pos=pos, proposed=proposed, changed=changed)
    ints(op, ways=ways, step=step)
    _ops.mh_memo_lookup__check(*op_types.memo_lookup_op_args(table, tokens, act, pos, proposed, changed, ways, step))
    if values:
        holds_values(f"mhfast.{op}", "tokens", tokens)
        in_range(op, "act", act, 0, tokens.shape[0])
        in_range(op, "table.group", table.group, 0, table.stamp.shape[0])
        in_range(op, "pos", pos, 0, tokens.shape[1])


def mh_memo_store_(table, act, slot, sel, raw_new, local_new, num_misses, step, *, values: bool) -> None:
    op = "mh_memo_store_"
    bundle(op, "table", table, MemoTable)
    tensors(op, act=act, slot=slot, sel=sel, raw_new=raw_new, local_new=local_new)
    ints(op, num_misses=num_misses, step=step)
    stamp, group = table.stamp, table.group
    _ops.mh_memo_store__check(*op_types.memo_store_op_args(table, act, slot, sel, raw_new, local_new, num_misses,
                                                           step))
    if values:
        holds_values(f"mhfast.{op}", "act", act)
    if not values or num_misses == 0:
        return
    misses = sel[:num_misses]
    in_range(op, "sel", misses, 0, act.shape[0])
    chains = act.index_select(0, misses)
    in_range(op, "act", chains, 0, group.shape[0])
    in_range(op, "slot", slot.index_select(0, misses), 0, stamp.shape[1], allow=-1)
    in_range(op, "table.group", group.index_select(0, chains), 0, stamp.shape[0])


def bundle(op: str, name: str, b: object, kind: type) -> None:
    """TypeError unless ``b`` is the NamedTuple ``kind`` (:mod:`mhfast.op_types`) holding tensors (a list of them
    for ``SiteRows.outputs``), naming the field (``chains.cache``) that is not."""
    if not isinstance(b, kind):
        raise TypeError(f"mhfast.{op}: {name} must be a mhfast.op_types.{kind.__name__}, got {type(b).__name__}")
    for field, t in zip(b._fields, b):
        if field == "outputs":
            tensor_list(op, f"{name}.outputs", t)
        elif not isinstance(t, torch.Tensor):
            raise TypeError(f"mhfast.{op}: {name}.{field} must be a torch.Tensor, got {type(t).__name__}")


def tensor_list(op: str, name: str, ts: object) -> None:
    """TypeError unless ``ts`` is a list or tuple of tensors."""
    if not isinstance(ts, (list, tuple)) or not all(isinstance(t, torch.Tensor) for t in ts):
        raise TypeError(f"mhfast.{op}: {name} must be a list of torch.Tensor, got {type(ts).__name__}")


def commit_site_types(chains, proposal, terms, rows, beta) -> None:
    """TypeError naming the first of mh_commit_site_'s bundles, their fields, or ``beta`` (None, a number or a
    tensor) of the wrong type."""
    op = "mh_commit_site_"
    for name, b, kind in (("chains", chains, ChainRows), ("proposal", proposal, SiteProposal),
                          ("terms", terms, SiteTerms), ("rows", rows, SiteRows)):
        bundle(op, name, b, kind)
    if beta is not None and not isinstance(beta, torch.Tensor) and (
            isinstance(beta, bool) or not isinstance(beta, (int, float))):
        raise TypeError(f"mhfast.{op}: beta must be None, a number or a float64 tensor (one per chain row), "
                        f"got {type(beta).__name__}")
    if beta is not None and not isinstance(beta, torch.Tensor):
        number(op, "beta", beta)  # (10**400: float() had raised OverflowError, naming nothing)


def mh_commit_site_(chains, proposal, terms, rows, beta, epoch, step, stream, *, values: bool) -> None:
    """Checks of mh_commit_site_'s bundles (:mod:`mhfast.op_types`), beta (None, a number, or Double[M]: one
    per chain row), epoch, step and stream."""
    op = "mh_commit_site_"
    commit_site_types(chains, proposal, terms, rows, beta)
    counters(op, epoch, step, stream)
    _ops.mh_commit_site__check(*op_types.commit_site_op_args(chains, proposal, terms, rows, beta, epoch, step, stream))
    if not values:
        return
    holds_values(f"mhfast.{op}", "chains.tokens", chains.tokens)
    M, T = chains.tokens.shape
    ch = proposal.ch
    in_range(op, "proposal.ch", ch, 0, M)
    distinct(op, "proposal.ch", ch)
    in_range(op, "proposal.pos", proposal.pos, 0, T)
    in_range(op, "rows.seq", rows.seq, 0, ch.shape[0])
    in_range(op, "rows.q", rows.q, 0, T)
    if isinstance(beta, torch.Tensor) and beta.numel():
        ok = torch.isfinite(beta) & (beta.abs() <= torch.finfo(torch.float32).max)  # rounded to float32 in the ops
        if not bool(ok.all()):
            bad = int((~ok).nonzero()[0, 0])
            raise ValueError(f"mhfast.{op}: beta must be finite (within float32's range), got {float(beta[bad])} "
                             f"in row {bad}")
