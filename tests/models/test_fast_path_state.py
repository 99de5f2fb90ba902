"""The fast forward wrappers keep no stale state and share their model safely (a helper's review, 2026-12-02):

* the pre-hook that stops the body before its last layer acts only in the thread that registered it: another
  thread's forward through the same model had run into it (its hidden states captured by the first caller, its
  own forward stopped with ``_Stop``);
* the fast CMLM decoder's encoder keys/values of ``static_inputs`` follow the projections' weights: keyed on the
  context alone, a later run with the same context object read keys of the old weights (0.78 off after an
  in-place weight change);
* a second ``compiled_blocks`` while one is inside is a ValueError naming it (it was a bare TypeError);
* a wrapper's ``device`` is its adapter's at each call (a copy went stale after ``lm.model.to(...)``);
* an unconditional adapter's error names ``context_index`` when that is what was passed.

Example:
    python3 -m pytest -q tests/models/test_fast_path_state.py
"""
from __future__ import annotations

import copy
import threading

import pytest
import torch

from fairseq_tiny_mlm import build
from hf_tiny_models import ids_for, tiny_model
from mhfast.models.compiled_blocks import compiled_blocks
from mhfast.models.fairseq_mlm import load_fairseq_mlm
from mhfast.models.fast_decoder import fast_decoder_model
from mhfast.models.fast_encoder import fast_encoder_model
from mhfast.models.fast_forward import fast_forward_model
from mhfast.models.hf import HFMaskedLM

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def bert() -> HFMaskedLM:
    return HFMaskedLM(tiny_model("bert", seed=5), **ids_for("bert"))


@pytest.fixture(scope="module")
def fairseq_mlm(tmp_path_factory):
    return load_fairseq_mlm(build(tmp_path_factory.mktemp("state")))


def _masked_rows(lm, n: int, T: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    content = [i for i in range(lm.vocab_size) if i not in lm.special_ids]
    rows = torch.tensor(content)[torch.randint(len(content), (n, T), generator=g)]
    positions = torch.randint(1, T - 1, (n,), generator=g)
    rows[torch.arange(n), positions] = lm.mask_id
    return rows, positions


def _first_layer(lm) -> torch.nn.Module:
    body = lm.model
    layers = body.base_model.encoder.layer if hasattr(body, "base_model") else body.encoder.sentence_encoder.layers
    return layers[0]


@pytest.mark.parametrize("which", ["hf", "fairseq"])
def test_another_threads_forward_passes_the_fast_paths_hook(which, bert, fairseq_mlm):
    """While the fast path's forward is between its hook's registration and removal, a second thread runs the
    plain adapter through the same model: both get what they get alone (deterministic: the second thread runs
    from inside the first forward, at its first layer)."""
    lm = bert if which == "hf" else fairseq_mlm
    fast = fast_forward_model(lm) if which == "hf" else fast_encoder_model(lm)
    assert fast is not lm
    rows, positions = _masked_rows(lm, 4, 7, seed=1)
    other_rows, other_positions = _masked_rows(lm, 3, 6, seed=2)
    want_fast = fast.masked_logits(rows, positions)
    want_other = lm.masked_logits(other_rows, other_positions)
    main, got, ran = threading.get_ident(), {}, []

    def in_first_layer(_module, _args):
        if threading.get_ident() != main or ran:
            return
        ran.append(True)

        def other() -> None:
            try:
                got["other"] = lm.masked_logits(other_rows, other_positions)
            except BaseException as e:  # noqa: BLE001 (what the old hook raised: its private _Stop)
                got["error"] = e

        t = threading.Thread(target=other)
        t.start()
        t.join()

    handle = _first_layer(lm).register_forward_pre_hook(in_first_layer)
    try:
        got_fast = fast.masked_logits(rows, positions)
    finally:
        handle.remove()
    assert ran and "error" not in got, got.get("error")
    assert torch.allclose(got["other"], want_other, atol=1e-5)
    assert torch.allclose(got_fast, want_fast, atol=1e-5)


def _reads(cmlm, sources):
    ctx = cmlm.encode(sources[:3])
    rows, positions = _masked_rows(cmlm, 6, 8, seed=3)
    rows[:, 0], rows[:, -1] = cmlm.bos_id, cmlm.eos_id
    return ctx, rows, torch.arange(6), positions, torch.tensor([0, 1, 2, 0, 1, 2])


def test_the_decoders_static_cache_follows_the_weights(cmlm, sources):
    """The encoder keys/values of ``static_inputs`` are kept while the context and the projections stay the same
    (a CPU static step enters and leaves static_inputs at every step: no new projection there), and projected again
    after the weights change in place (keyed on the context alone, a run with the same context object read the
    old weights' keys: 0.78 off)."""
    lm = copy.deepcopy(cmlm)  # its weights change below
    fast = fast_decoder_model(lm)
    ctx, rows, row_index, positions, src = _reads(lm, sources)
    with fast.static_inputs(False):
        first = fast.masked_features_at(rows, row_index, positions, ctx, src)
    calls = []
    handle = lm.model.decoder.layers[0].encoder_attn.k_proj.register_forward_hook(
        lambda _m, args, _out: calls.append(args[0].shape[0]))
    try:
        with fast.static_inputs(False):  # another entry, nothing changed: the cache serves
            assert torch.equal(fast.masked_features_at(rows, row_index, positions, ctx, src), first)
        assert calls == []
        with torch.no_grad():
            lm.model.decoder.layers[0].encoder_attn.v_proj.weight.mul_(0.5)
        want = lm.masked_features_at(rows, row_index, positions, ctx, src)
        assert not torch.allclose(want, first, atol=1e-3)  # the change matters
        calls.clear()
        with fast.static_inputs(False):
            got = fast.masked_features_at(rows, row_index, positions, ctx, src)
        assert calls == [3]  # the 3 sources projected again
    finally:
        handle.remove()
    assert torch.allclose(got, want, atol=2e-5, rtol=1e-5), (got - want).abs().max()


def test_a_second_compiled_blocks_inside_the_first_is_named(bert):
    fast = fast_forward_model(bert)
    layers = list(bert.model.base_model.encoder.layer)
    with compiled_blocks(fast, context="mhfast.sample: compile=True: "):
        with pytest.raises(ValueError, match=r"^mhfast\.sample: compile=True: LastLayerAtMask's blocks are compiled "
                                             r"already \(another compile=True run on this model is inside"):
            with compiled_blocks(fast, context="mhfast.sample: compile=True: "):
                pass
    assert all(a is b for a, b in zip(bert.model.base_model.encoder.layer, layers))  # the originals are back
    with compiled_blocks(fast) as report:  # and the next run compiles them again
        assert report.blocks == len(layers) - 1


@pytest.mark.parametrize("which", ["hf", "fairseq_mlm", "cmlm"])
def test_a_wrappers_device_is_its_adapters(which, cmlm, tmp_path_factory):
    if which == "hf":
        lm = HFMaskedLM(tiny_model("bert", seed=6), **ids_for("bert"))
        fast = fast_forward_model(lm)
    elif which == "fairseq_mlm":
        lm = load_fairseq_mlm(build(tmp_path_factory.mktemp("device")))
        fast = fast_encoder_model(lm)
    else:
        lm = copy.deepcopy(cmlm)
        fast = fast_decoder_model(lm)
    assert fast is not lm and fast.device == torch.device("cpu")
    lm.model.to("meta")
    assert lm.device == fast.device == torch.device("meta")


@pytest.mark.parametrize("which", ["hf", "fairseq"])
def test_unconditional_adapters_name_context_index(which, bert, fairseq_mlm):
    lm = bert if which == "hf" else fairseq_mlm
    rows, positions = _masked_rows(lm, 2, 5, seed=4)
    with pytest.raises(ValueError, match=r"^context_index: .* masked LMs are unconditional; pass context_index=None"):
        lm.masked_logits(rows, positions, context_index=torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"^context: .* pass context=None"):
        lm.masked_logits(rows, positions, context=object())
