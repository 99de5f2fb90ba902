"""Argument checks shared by the compiled-op wrappers (:mod:`mhfast.ops`) and the
pure-PyTorch references (:mod:`mhfast.reference`).

Every check raises ``TypeError`` (wrong dtype) or ``ValueError`` (wrong rank, size,
device or value) with a message that starts with the op's name and names the
offending argument, e.g. ``mhfast.masked_copies: pos_index must be int64, got float32``.

Metadata checks (dtype, rank, size, device) are free. Value-range checks (token ids
inside the vocabulary, positions inside the sequence) read the data: on CPU that is
cheap; on CUDA it costs one device->host sync, which is why the op wrappers take
``validate=False`` for hot loops whose indices were built by mhfast itself.
"""
from __future__ import annotations

import math

import torch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def dtype(op: str, name: str, t: torch.Tensor, allowed: tuple[torch.dtype, ...]) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"mhfast.{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in allowed:
        names = " or ".join(str(d).replace("torch.", "") for d in allowed)
        raise TypeError(f"mhfast.{op}: {name} must be {names}, got {str(t.dtype).replace('torch.', '')}")


def rank(op: str, name: str, t: torch.Tensor, dims: int | tuple[int, ...]) -> None:
    dims = (dims,) if isinstance(dims, int) else dims
    if t.dim() not in dims:
        want = " or ".join(f"{d}-D" for d in dims)
        raise ValueError(f"mhfast.{op}: {name} must be {want}, got shape {tuple(t.shape)}")


def size(op: str, name: str, t: torch.Tensor, dim: int, expected: int, what: str) -> None:
    if t.shape[dim] != expected:
        raise ValueError(
            f"mhfast.{op}: {name} has size {t.shape[dim]} in dim {dim}, expected {expected} ({what})"
        )


def same_device(op: str, ref_name: str, ref: torch.Tensor, **others: torch.Tensor) -> None:
    for name, t in others.items():
        if t.device != ref.device:
            raise ValueError(
                f"mhfast.{op}: {name} is on {t.device} but {ref_name} is on {ref.device}; "
                "all tensor arguments must be on one device"
            )


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


def positive_float(op: str, name: str, x: float) -> None:
    if not (isinstance(x, (int, float)) and math.isfinite(x) and x > 0):
        raise ValueError(f"mhfast.{op}: {name} must be a finite number > 0, got {x!r}")


def probability(op: str, name: str, x: float) -> None:
    if not (isinstance(x, (int, float)) and 0 < x <= 1):
        raise ValueError(f"mhfast.{op}: {name} must be in (0, 1], got {x!r}")


# ----------------------------------------------------------------------------------
# Per-op checks. `values=True` adds the data-dependent range checks.
# ----------------------------------------------------------------------------------


def masked_copies(tokens, seq_index, pos_index, mask_id, *, values: bool) -> None:
    op = "masked_copies"
    dtype(op, "tokens", tokens, (torch.int64,))
    dtype(op, "seq_index", seq_index, (torch.int64,))
    dtype(op, "pos_index", pos_index, (torch.int64,))
    rank(op, "tokens", tokens, 2)
    rank(op, "seq_index", seq_index, 1)
    rank(op, "pos_index", pos_index, 1)
    size(op, "pos_index", pos_index, 0, seq_index.shape[0], "len(seq_index)")
    same_device(op, "tokens", tokens, seq_index=seq_index, pos_index=pos_index)
    if not isinstance(mask_id, int):
        raise TypeError(f"mhfast.{op}: mask_id must be an int, got {type(mask_id).__name__}")
    if values:
        in_range(op, "seq_index", seq_index, 0, tokens.shape[0])
        in_range(op, "pos_index", pos_index, 0, tokens.shape[1])


def gather_energies(logits, targets, seq_index, num_seqs, *, values: bool) -> None:
    op = "gather_energies"
    dtype(op, "logits", logits, FLOAT_DTYPES)
    dtype(op, "targets", targets, (torch.int64,))
    dtype(op, "seq_index", seq_index, (torch.int64,))
    rank(op, "logits", logits, 2)
    rank(op, "targets", targets, 1)
    rank(op, "seq_index", seq_index, 1)
    size(op, "targets", targets, 0, logits.shape[0], "rows of logits")
    size(op, "seq_index", seq_index, 0, logits.shape[0], "rows of logits")
    same_device(op, "logits", logits, targets=targets, seq_index=seq_index)
    if not isinstance(num_seqs, int) or num_seqs < 0:
        raise ValueError(f"mhfast.{op}: num_seqs must be an int >= 0, got {num_seqs!r}")
    if logits.shape[0] > 0 and logits.shape[1] == 0:
        raise ValueError(f"mhfast.{op}: logits must have at least one column (vocabulary size 0)")
    if values:
        in_range(op, "targets", targets, 0, logits.shape[1])
        in_range(op, "seq_index", seq_index, 0, num_seqs)


def propose(logits, current, temperature, top_p, uniforms, *, values: bool) -> None:
    op = "propose"
    dtype(op, "logits", logits, FLOAT_DTYPES)
    dtype(op, "current", current, (torch.int64,))
    dtype(op, "uniforms", uniforms, (torch.float32,))
    rank(op, "logits", logits, 2)
    rank(op, "current", current, 1)
    rank(op, "uniforms", uniforms, 1)
    size(op, "current", current, 0, logits.shape[0], "rows of logits")
    size(op, "uniforms", uniforms, 0, logits.shape[0], "rows of logits")
    same_device(op, "logits", logits, current=current, uniforms=uniforms)
    positive_float(op, "temperature", temperature)
    probability(op, "top_p", top_p)
    if logits.shape[0] > 0 and logits.shape[1] == 0:
        raise ValueError(f"mhfast.{op}: logits must have at least one column (vocabulary size 0)")
    if values:
        in_range(op, "current", current, 0, logits.shape[1])
        if logits.numel() and bool((torch.isnan(logits) | (logits == float("inf"))).any()):
            raise ValueError(f"mhfast.{op}: logits contains NaN or +inf")
        if logits.numel() and not bool(torch.isfinite(logits).any(dim=1).all()):
            raise ValueError(f"mhfast.{op}: logits has a row with no finite entry (nothing can be proposed)")
        if uniforms.numel() and bool(((uniforms < 0) | (uniforms > 1) | torch.isnan(uniforms)).any()):
            raise ValueError(f"mhfast.{op}: uniforms must lie in [0, 1]")


def mh_accept_(tokens, positions, proposed, energy, energy_proposed, logq_forward, logq_reverse, beta,
               uniforms, *, values: bool) -> None:
    op = "mh_accept_"
    dtype(op, "tokens", tokens, (torch.int64,))
    dtype(op, "positions", positions, (torch.int64,))
    dtype(op, "proposed", proposed, (torch.int64,))
    for name, t in (("energy", energy), ("energy_proposed", energy_proposed), ("logq_forward", logq_forward),
                    ("logq_reverse", logq_reverse), ("beta", beta), ("uniforms", uniforms)):
        dtype(op, name, t, (torch.float32,))
        rank(op, name, t, 1)
    rank(op, "tokens", tokens, 2)
    rank(op, "positions", positions, (1, 2))
    if proposed.shape != positions.shape:
        raise ValueError(
            f"mhfast.{op}: proposed has shape {tuple(proposed.shape)} but positions has shape "
            f"{tuple(positions.shape)}; they must match"
        )
    B = tokens.shape[0]
    size(op, "positions", positions, 0, B, "rows of tokens")
    for name, t in (("energy", energy), ("energy_proposed", energy_proposed), ("logq_forward", logq_forward),
                    ("logq_reverse", logq_reverse), ("beta", beta), ("uniforms", uniforms)):
        size(op, name, t, 0, B, "rows of tokens")
    same_device(op, "tokens", tokens, positions=positions, proposed=proposed, energy=energy,
                energy_proposed=energy_proposed, logq_forward=logq_forward, logq_reverse=logq_reverse,
                beta=beta, uniforms=uniforms)
    if values:
        # -1 marks an unused slot of a block proposal (chains whose block is shorter).
        in_range(op, "positions", positions, 0, tokens.shape[1], allow=-1 if positions.dim() == 2 else None)


def counter_uniforms(keys, epoch, step, stream, lanes) -> None:
    op = "counter_uniforms"
    dtype(op, "keys", keys, (torch.int64,))
    for name, c in (("epoch", epoch), ("step", step), ("stream", stream)):
        if isinstance(c, bool) or not isinstance(c, int) or c < 0:
            raise ValueError(f"mhfast.{op}: epoch, step and stream must be >= 0, got {name}={c!r}")
    if lanes is not None:
        dtype(op, "lanes", lanes, (torch.int64,))
        if lanes.shape != keys.shape:
            raise ValueError(f"mhfast.{op}: lanes has shape {tuple(lanes.shape)} but keys has shape "
                             f"{tuple(keys.shape)}; they must match")
        same_device(op, "keys", keys, lanes=lanes)
