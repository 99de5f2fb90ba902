"""The ``dtype`` option: the model's forward in lower precision, and whether the hardware has it natively.

``dtype=torch.bfloat16`` (or ``"bfloat16"``; ``"float16"`` too) runs every model computation of the
sampler under ``torch.autocast``; energies are accumulated in fp32 by the ops. MH is then exact for
the model *as evaluated in that precision*: the target is the bf16 model's energy, not the fp32 one.
Where the hardware has no fast path (a CPU without AVX512-BF16/AMX, a GPU without bf16), the run is
slower than fp32, and :func:`check_native` warns instead of staying silent.

Example:
    >>> parse("bfloat16")
    torch.bfloat16
    >>> parse(None) is None
    True
"""
from __future__ import annotations

import warnings
from typing import Any

import torch

from ..models.base import DTYPE_NAMES
from . import cpu_info

NAMES = DTYPE_NAMES


def parse(value: Any) -> torch.dtype | None:
    """None, a torch dtype among :data:`NAMES`, or its name -> the dtype (ValueError otherwise)."""
    if value is None:
        return None
    if isinstance(value, str) and value in NAMES:
        return NAMES[value]
    if isinstance(value, torch.dtype) and value in NAMES.values():
        return value
    raise ValueError(f"must be None or one of {', '.join(NAMES)} (a name or a torch dtype), got {value!r}")


def native(dtype: torch.dtype, device: torch.device) -> bool:
    """Whether ``device`` computes ``dtype`` matmuls natively (fast), as far as can be told."""
    if dtype == torch.float32:
        return True
    if device.type == "cuda":
        # bf16 tensor cores from compute capability 8.0 (Ampere) on; is_bf16_supported() also counts the
        # emulation that older GPUs (V100, T4) run, slowly, and reads the current device, not ``device``.
        return dtype == torch.float16 or torch.cuda.get_device_capability(device)[0] >= 8
    flags = cpu_info.flags()  # x86's names, then Arm's (BF16 extension; half-precision SIMD arithmetic)
    if dtype == torch.bfloat16:
        return bool({"avx512_bf16", "amx_bf16", "bf16"} & flags)
    return bool({"avx512_fp16", "amx_fp16", "asimdhp"} & flags)


def check_native(dtype: torch.dtype | None, device: torch.device) -> None:
    """Warn (once per call site) when ``dtype`` has no fast path on ``device``."""
    if dtype is not None and not native(dtype, device):
        fp16 = dtype == torch.float16
        what = (("this CPU has no AVX512-FP16/AMX-FP16 (x86) or ASIMDHP (Arm)" if fp16 else
                 "this CPU has no AVX512-BF16/AMX (x86) or BF16 (Arm)")
                if device.type == "cpu" else "this GPU (compute capability < 8.0) emulates it")
        if device.type == "cpu" and not cpu_info.flags():  # (unreadable /proc/cpuinfo, or not Linux: unknown)
            what = "the CPU's features could not be read from /proc/cpuinfo: it may lack them"
        warnings.warn(f"mhfast.sample: dtype={str(dtype).replace('torch.', '')} has no native support here "
                      f"({what}): the model will run slower than in float32", RuntimeWarning, stacklevel=3)
