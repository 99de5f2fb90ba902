"""Keeps cuDNN's attention out of mhfast's model calls on CUDA.

Why: torch (2.11, measured on an H200) sends a masked ``scaled_dot_product_attention`` in bf16/fp16
on Hopper to the cuDNN backend first, and cuDNN builds an execution plan for every new shape of
query/key/value: 31.8 ms of host time per call in the profile (`bench/gpu_runs/2026-11-26-h200b/`),
against ~20 us on the GPU. A sampler's model calls change shape all the time (rows per sub-batch,
sentence lengths, the moving chains of a static step), so nearly every call paid it: the bundled
De->En CMLM ran 22x slower in bf16 than in fp32 (4.5 vs 101.7 sentences/s). The same was reported for
Fun-ASR fine-tuning on a B200 (modelscope/FunASR#3704: a plan per new batch shape, 0.44 s forward).

:func:`without_cudnn_attention` drops cuDNN from the backends that are enabled, for the duration of a
model call, and leaves every other backend as the user set it (flash, memory-efficient, math: what
fp32 already used). It changes nothing on CPU, nothing when cuDNN attention is already off, and nothing
when cuDNN is the only backend enabled (the user asked for it).

Example:
    >>> import torch
    >>> with without_cudnn_attention("cuda"):
    ...     torch.backends.cuda.cudnn_sdp_enabled()
    False
    >>> torch.backends.cuda.cudnn_sdp_enabled()  # restored on exit
    True
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch


def _other_enabled_backends() -> list:
    from torch.nn.attention import SDPBackend

    flags = torch.backends.cuda
    pairs = ((SDPBackend.FLASH_ATTENTION, flags.flash_sdp_enabled()),
             (SDPBackend.EFFICIENT_ATTENTION, flags.mem_efficient_sdp_enabled()),
             (SDPBackend.MATH, flags.math_sdp_enabled()))
    return [backend for backend, on in pairs if on]


@contextlib.contextmanager
def without_cudnn_attention(device: str | torch.device | None) -> Iterator[None]:
    """Within the block, CUDA attention takes any enabled backend but cuDNN's (see the module docstring).
    ``device``: where the model computes (a model's ``device`` attribute; None: the CPU)."""
    if device is None or torch.device(device).type != "cuda" or not torch.backends.cuda.cudnn_sdp_enabled():
        yield
        return
    keep = _other_enabled_backends()
    if not keep:
        yield
        return
    from torch.nn.attention import sdpa_kernel

    with sdpa_kernel(keep):
        yield
