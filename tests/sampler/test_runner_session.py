"""ModelRunner.session(): a lower-precision run casts each fp32 weight once, not once per model call, and
changes no number (the cached casts are the same casts)."""
from __future__ import annotations

import contextlib

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import mhfast
from hf_tiny_models import BERT_IDS, tiny_model
from mhfast.models.fast_forward import fast_forward_model
from mhfast.models.hf import HFMaskedLM
from mhfast.runtime.runner import ModelRunner


class WeightCasts(TorchDispatchMode):
    """Counts the casts of the given tensors' storages (``aten._to_copy`` of a weight)."""

    def __init__(self, weights: list[torch.Tensor]):
        super().__init__()
        self.ptrs = {w.data_ptr() for w in weights}
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._to_copy.default and args[0].data_ptr() in self.ptrs:
            self.count += 1
        return func(*args, **(kwargs or {}))


def bert_runner(dtype: torch.dtype | None) -> tuple[ModelRunner, list[torch.Tensor]]:
    lm = HFMaskedLM(tiny_model("bert"), **BERT_IDS)
    return ModelRunner(fast_forward_model(lm), None, 65536, dtype=dtype), list(lm.model.parameters())


def rows(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(5, 12, (6, 7), generator=g)
    positions = torch.arange(6) % 7
    tokens[torch.arange(6), positions] = BERT_IDS["mask_id"]
    return tokens, positions


def calls_casts(runner: ModelRunner, weights: list[torch.Tensor], scope) -> tuple[list[int], list[torch.Tensor]]:
    """Weight casts made by each of three model calls inside ``scope``, and the calls' outputs."""
    counts, outs = [], []
    with scope:
        for seed in range(3):
            with WeightCasts(weights) as mode:
                outs.append(runner.outputs(*rows(seed)))
            counts.append(mode.count)
    return counts, outs


def test_bf16_session_casts_weights_once_and_changes_no_output():
    runner, weights = bert_runner(torch.bfloat16)
    per_call, plain = calls_casts(runner, weights, contextlib.nullcontext())
    in_session, cached = calls_casts(runner, weights, runner.session())
    assert per_call[0] > 0 and per_call == [per_call[0]] * 3  # every call casts the weights again
    assert in_session[0] == per_call[0] and in_session[1:] == [0, 0]  # the first call only
    for a, b in zip(plain, cached):
        assert a.dtype == b.dtype and torch.equal(a, b)


def test_session_keeps_the_autocast_state_and_is_a_no_op_in_fp32():
    runner, _ = bert_runner(torch.bfloat16)
    with runner.session():
        assert not torch.is_autocast_enabled("cpu")  # the sampler's own ops are not autocast
    with torch.autocast("cpu", dtype=torch.bfloat16):  # a caller's autocast stays as it was
        with runner.session():
            assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    fp32, _ = bert_runner(None)
    assert isinstance(fp32.session(), contextlib.nullcontext)


@pytest.mark.slow  # 5-18 s on the 2-core CI machine
@pytest.mark.parametrize("sampler", ["mh", "block-mh", "gibbs"])
def test_sample_in_bf16_gives_the_same_chains_with_and_without_the_session(monkeypatch, sampler):
    model = HFMaskedLM(tiny_model("bert"), **BERT_IDS)
    kw = dict(chains=3, epochs=3, burn_in=1, seed=4, sampler=sampler, dtype=torch.bfloat16)
    a = mhfast.sample(model, 5, **kw)
    monkeypatch.setattr(ModelRunner, "session", lambda self: contextlib.nullcontext())
    b = mhfast.sample(model, 5, **kw)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.energy, b.energy) and torch.equal(a.e_raw, b.e_raw)


def test_outputs_at_an_empty_batch_is_empty_as_outputs_is():
    """outputs_at with no rows (a direct caller's empty batch) returns [0, D] like outputs; it raised in
    torch.cat of no parts."""
    runner, _ = bert_runner(None)
    tokens, positions = rows(0)
    full = runner.outputs_at(tokens, torch.arange(6), positions)
    empty = runner.outputs_at(tokens[:0], torch.zeros(0, dtype=torch.long), positions[:0])
    assert empty.shape == (0, full.shape[1]) and empty.dtype == full.dtype
    assert runner.outputs(tokens[:0], positions[:0]).shape == empty.shape
