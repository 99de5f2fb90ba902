"""Shared fixtures: the ``device`` every op test runs on.

"cpu" always; "cuda" too when a GPU is visible, and then the build MUST have CUDA kernels
(a GPU machine with a CPU-only build is a broken install: it fails, it is never skipped).
"""
from __future__ import annotations

import pytest
import torch

import mhfast

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    if request.param == "cuda":
        assert mhfast.built_with_cuda(), (
            "a GPU is visible but mhfast._C has no CUDA kernels: rebuild without MHFAST_FORCE_CPU"
        )
    return request.param
