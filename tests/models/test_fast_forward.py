"""The sampler's fast forward (issue 14): fewer rows and less work per row, the same chains.

* ``HFMaskedLM.masked_features_at`` reads several masked positions of one row from one forward (the warm
  start, block proposals) instead of one repeated row per position: same outputs, fewer rows.
* ``forward="fast"`` (the default) runs the last encoder layer only at the read positions
  (:mod:`mhfast.models.fast_forward`): the same outputs up to float rounding, so the same chains.

Example:
    python3 -m pytest -q tests/models/test_fast_forward.py
"""
from __future__ import annotations

import pytest
import torch

import mhfast
from hf_tiny_models import ids_for, tiny_model
from mhfast.models.fast_forward import LastLayerAtMask, fast_forward_model
from mhfast.models.hf import HFMaskedLM

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _rows(ids: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Three rows (two padded) and reads of 1-3 masked positions per row, rows ascending."""
    p, b, e, m = ids["pad_id"], ids["bos_id"], ids["eos_id"], ids["mask_id"]
    rows = torch.tensor([[b, m, m, 7, m, e], [b, 9, m, e, p, p], [b, m, m, e, p, p]])
    row_index = torch.tensor([0, 0, 0, 1, 2, 2])
    positions = torch.tensor([1, 2, 4, 2, 1, 2])
    return rows, row_index, positions


@pytest.mark.parametrize("kind", ["bert", "roberta"])
def test_features_at_equal_one_repeated_row_per_position(kind):
    ids = ids_for(kind)
    lm = HFMaskedLM(tiny_model(kind, seed=3), **ids)
    rows, row_index, positions = _rows(ids)
    repeated = lm.masked_features(rows[row_index], positions)
    assert torch.allclose(lm.masked_features_at(rows, row_index, positions), repeated, atol=1e-5)
    assert torch.allclose(lm.masked_logits_at(rows, row_index, positions),
                          lm.masked_logits(rows[row_index], positions), atol=1e-4)
    fast = fast_forward_model(lm)
    assert isinstance(fast, LastLayerAtMask)
    assert torch.allclose(fast.masked_features_at(rows, row_index, positions), repeated, atol=1e-4)
    assert torch.allclose(fast.masked_features(rows[row_index], positions), repeated, atol=1e-4)


def test_features_at_rejects_bad_indices():
    ids = ids_for("bert")
    lm = HFMaskedLM(tiny_model("bert"), **ids)
    rows, row_index, positions = _rows(ids)
    with pytest.raises(ValueError, match="row_index: values must lie in"):
        lm.masked_features_at(rows, row_index + 1, positions)
    with pytest.raises(ValueError, match="positions: expected Long"):
        lm.masked_features_at(rows, row_index, positions[:2])
    with pytest.raises(ValueError, match="row_index: expected a Long"):
        lm.masked_features_at(rows, row_index.float(), positions)


@pytest.mark.parametrize("kind", ["esm", "distilbert", "albert", "electra"])
def test_models_without_a_known_last_layer_keep_the_plain_path(kind):
    """These have a head split (features, then the LM head) but no last-layer wrapper: ESM's positions are rotary,
    DistilBERT's layers sit in ``transformer.layer``, ALBERT shares one layer, ELECTRA's is not in the list; the
    adapter itself is used (every row through every layer)."""
    from mhfast.models.base import has_features

    lm = HFMaskedLM(tiny_model(kind), **ids_for(kind))
    assert has_features(lm) and fast_forward_model(lm) is lm


@pytest.mark.parametrize("sampler", ["mh", "block-mh", "gibbs"])
@pytest.mark.parametrize("kind", ["bert", "roberta"])
def test_fast_forward_leaves_the_chains_unchanged(kind, sampler):
    lm = HFMaskedLM(tiny_model(kind, seed=5), **ids_for(kind))
    runs = {fwd: mhfast.sample(lm, length=6, chains=3, epochs=4, burn_in=1, sampler=sampler, seed=11, forward=fwd,
                               record="epoch")
            for fwd in ("fast", "full")}
    fast, full = runs["fast"], runs["full"]
    assert torch.equal(fast.history, full.history) and torch.equal(fast.tokens, full.tokens)
    assert torch.allclose(fast.energy, full.energy, atol=1e-4)
    assert fast.model_rows == full.model_rows
    assert fast.novel_rate.sum() > 0  # the chains moved: the comparison is not between two frozen starts


def test_warm_start_and_blocks_read_a_row_once():
    """With the ``_at`` hook the warm start forwards one row per chain start, not one per masked position,
    and block proposals one row per block: fewer rows than an adapter without the hook, same chains."""
    class NoHook(HFMaskedLM):
        masked_features_at = None
        masked_logits_at = None

    ids = ids_for("bert")
    with_hook, without = HFMaskedLM(tiny_model("bert", seed=2), **ids), NoHook(tiny_model("bert", seed=2), **ids)
    for sampler in ("mh", "block-mh"):  # forward="full": the last-layer wrapper would offer the hook itself
        a, b = (mhfast.sample(lm, length=8, chains=2, epochs=3, burn_in=1, sampler=sampler, seed=1, forward="full",
                              block_schedule=3 if sampler == "block-mh" else None) for lm in (with_hook, without))
        assert torch.equal(a.tokens, b.tokens)
        assert a.init_rows < b.init_rows, (sampler, a.init_rows, b.init_rows)
        if sampler == "block-mh":
            assert a.model_rows - a.init_rows < b.model_rows - b.init_rows
