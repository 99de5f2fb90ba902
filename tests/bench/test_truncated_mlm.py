"""bench/truncated_mlm.py (AntiBERTy cut to its first k layers, the smaller-model surrogate of issue 34) and a smoke
run of bench/delayed_surrogates.py with it.

Example:
    python3 -m pytest -q tests/bench/test_truncated_mlm.py
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import mhfast

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import bench_mixmatch  # noqa: E402
import truncated_mlm  # noqa: E402


@pytest.fixture(scope="module")
def lm():
    return bench_mixmatch.load_model("antiberty-random", "cpu")  # AntiBERTy's shape, random weights, no package


def test_all_layers_is_the_model_and_fewer_layers_is_another(lm):
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(5, 25, (6, 10), generator=gen)
    pos = torch.randint(1, 9, (6,), generator=gen)
    x[torch.arange(6), pos] = lm.mask_id
    with torch.no_grad():
        full = lm.masked_logits(x, pos)
        same = truncated_mlm.first_layers(lm, 8).masked_logits(x, pos)
        small = truncated_mlm.first_layers(lm, 2)
        cut = small.masked_logits(x, pos)
    assert torch.equal(full, same)
    assert len(small.model.bert.encoder.layer) == 2 and len(lm.model.bert.encoder.layer) == 8  # lm untouched
    assert cut.shape == full.shape and not torch.allclose(cut, full)
    assert small.mask_id == lm.mask_id and small.special_ids == lm.special_ids


@pytest.mark.parametrize("k", [0, 9])
def test_bad_layer_count_names_k(lm, k):
    with pytest.raises(ValueError, match="k: expected 1..8"):
        truncated_mlm.first_layers(lm, k)


def test_row_cost_is_a_ratio_per_model(lm):
    cost = truncated_mlm.row_cost(lm, {2: truncated_mlm.first_layers(lm, 2)}, 10, rows=8, reps=1)
    assert set(cost) == {2} and cost[2] > 0


def test_sample_runs_with_the_truncated_model_as_surrogate(lm):
    """The API form: mhfast.sample(..., delayed=mhfast.surrogates.model_energy(first k layers)) runs and tests
    proposals in its first stage."""
    r = mhfast.sample(lm, 8, chains=2, epochs=2, burn_in=0, energy="local", seed=0,
                      delayed=mhfast.surrogates.model_energy(truncated_mlm.first_layers(lm, 2)))
    assert r.delayed_tested > 0
    assert r.delayed_accepted <= r.delayed_passed <= r.delayed_tested


@pytest.mark.slow  # ~30 s on the 2-core machine (AntiBERTy's weights; antiberty package as the other bench tests)
def test_delayed_surrogates_quick_reports_the_first_layers_surrogate():
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "delayed_surrogates.py"), "--quick", "--cases",
                           "random", "--seeds", "0", "--layers", "2"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    row = next(line for line in proc.stdout.splitlines() if line.startswith("| first 2 layers |"))
    assert -1.0 <= float(row.split("|")[2]) <= 1.0, row  # a correlation
    assert "relative cost of one masked row" in proc.stdout
    assert "mhfast.sample(delayed=model_energy(first 2 layers)), random" in proc.stdout
