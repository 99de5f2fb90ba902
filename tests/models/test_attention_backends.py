"""mhfast's model calls keep cuDNN attention out on CUDA (a plan per new shape: mhfast/runtime/attention.py).

The backend flags are process-wide booleans, so the context's effect on them is checked here without a GPU;
the speed it buys is measured on one (bench/CUDA_NOTES.md, "Second run").
"""
from __future__ import annotations

import pytest
import torch

from mhfast.models.tabular import TabularMLM
from mhfast.runtime.attention import without_cudnn_attention
from mhfast.runtime.runner import ModelRunner

flags = torch.backends.cuda


def state() -> tuple[bool, bool, bool, bool]:
    return (flags.cudnn_sdp_enabled(), flags.flash_sdp_enabled(), flags.mem_efficient_sdp_enabled(),
            flags.math_sdp_enabled())


@pytest.fixture(autouse=True)
def restore_flags():
    before = state()
    yield
    for set_flag, on in zip((flags.enable_cudnn_sdp, flags.enable_flash_sdp, flags.enable_mem_efficient_sdp,
                             flags.enable_math_sdp), before):
        set_flag(on)


def test_cuda_drops_cudnn_only_and_restores():
    for f in (flags.enable_cudnn_sdp, flags.enable_flash_sdp, flags.enable_mem_efficient_sdp, flags.enable_math_sdp):
        f(True)
    with without_cudnn_attention("cuda"):
        assert state() == (False, True, True, True)
    assert state() == (True, True, True, True)


def test_backends_the_user_turned_off_stay_off():
    flags.enable_cudnn_sdp(True)
    flags.enable_flash_sdp(False)
    with without_cudnn_attention("cuda"):
        assert state() == (False, False, True, True)
    assert state() == (True, False, True, True)


def test_cpu_and_cudnn_alone_are_left_as_they_are():
    flags.enable_cudnn_sdp(True)
    with without_cudnn_attention("cpu"):
        assert flags.cudnn_sdp_enabled()
    for f in (flags.enable_flash_sdp, flags.enable_mem_efficient_sdp, flags.enable_math_sdp):
        f(False)
    with without_cudnn_attention("cuda"):  # the only backend left: the user asked for it
        assert state() == (True, False, False, False)


def test_restored_when_the_model_call_raises():
    flags.enable_cudnn_sdp(True)
    with pytest.raises(RuntimeError, match="boom"):
        with without_cudnn_attention("cuda"):
            raise RuntimeError("boom")
    assert flags.cudnn_sdp_enabled()


def test_every_model_call_of_the_sampler_runs_without_cudnn_attention():
    flags.enable_cudnn_sdp(True)
    runner = ModelRunner(TabularMLM.random(num_tokens=3, length=2, seed=0), None, 64)
    runner.device_type = "cuda"  # the flag state is what is checked: no GPU needed
    with runner._precision():
        assert not flags.cudnn_sdp_enabled()
    assert flags.cudnn_sdp_enabled()
