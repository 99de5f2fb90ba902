"""mhfast's model calls keep cuDNN attention out on CUDA (a plan per new shape: mhfast/runtime/attention.py).

The backend flags are process-wide booleans, so the context's effect on them is checked here without a GPU;
the speed it buys is measured on one (bench/CUDA_NOTES.md, "Second run").
"""
from __future__ import annotations

import pytest
import torch

import mhfast
from mhfast.models.tabular import TabularMLM
from mhfast.runtime.attention import without_cudnn_attention
from mhfast.runtime.runner import ModelRunner
from mhfast.sampler.problem import _rows_from_source

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


class RecordingRefinement:
    """A RefinementModel that says it lives on CUDA and records, per call, whether cuDNN attention was enabled."""

    bos_id, eos_id, mask_id, pad_id, vocab_size, special_ids = 0, 1, 2, 3, 6, (0, 1, 2, 3)
    device = torch.device("cuda")  # an attribute only: nothing here computes on a GPU

    def __init__(self):
        self.seen: list[tuple[str, bool]] = []

    def _call(self, name: str) -> None:
        self.seen.append((name, flags.cudnn_sdp_enabled()))

    def masked_logits(self, *args, **kwargs):
        raise AssertionError("not used by these tests")

    def encode(self, sources):
        self._call("encode")
        return torch.zeros(len(sources), 1)

    def predict_lengths(self, context, k, strategy="topk"):
        self._call("predict_lengths")
        return torch.full((context.shape[0], k), 2, dtype=torch.long)

    def decoder_log_probs(self, tokens, context, context_index):
        self._call("decoder_log_probs")
        return torch.log_softmax(torch.zeros(*tokens.shape, self.vocab_size), dim=-1)


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
    for device in ("cpu", torch.device("cpu"), None):
        with without_cudnn_attention(device):
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


def test_mask_predict_and_the_sampler_s_encode_run_without_cudnn_attention():
    flags.enable_cudnn_sdp(True)
    model = RecordingRefinement()
    mhfast.mask_predict(model, [torch.tensor([4, 5])], iterations=1)
    _rows_from_source(model, [torch.tensor([4, 5])], 1, None)
    # (cuDNN enabled?) per call: none inside mask_predict; the sampler's encode without it, its length head (no
    # attention) outside the context
    assert model.seen == [("encode", False), ("predict_lengths", False), ("decoder_log_probs", False),
                          ("decoder_log_probs", False), ("encode", False), ("predict_lengths", True)]
    assert flags.cudnn_sdp_enabled()
