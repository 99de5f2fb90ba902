"""bench/distilled_mlm.py (a small BERT distilled from AntiBERTy's conditionals, issue 34's "smaller model" first
stage) and a smoke run of it and of bench/delayed_surrogates.py with its student.

Example:
    python3 -m pytest -q tests/bench/test_distilled_mlm.py
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
import distilled_mlm  # noqa: E402


@pytest.fixture(scope="module")
def lm():
    return bench_mixmatch.load_model("antiberty-random", "cpu")  # AntiBERTy's shape, random weights, no package


def test_masked_rows_mask_one_energy_position_each():
    seqs = torch.tensor([[2, 5, 6, 7, 3], [2, 8, 9, 10, 3]])
    rows, pos, target = distilled_mlm.masked_rows(seqs, torch.arange(1, 4), mask_id=4)
    assert rows.shape == (6, 5) and pos.tolist() == [1, 2, 3, 1, 2, 3]
    assert target.tolist() == [5, 6, 7, 8, 9, 10]
    assert (rows == 4).sum(1).tolist() == [1] * 6 and rows[torch.arange(6), pos].eq(4).all()
    assert torch.equal(rows[0, 2:], seqs[0, 2:]) and torch.equal(rows[5, :3], seqs[1, :3])


def test_training_lowers_the_kl_to_the_teacher_and_the_student_round_trips(lm, tmp_path):
    gen = torch.Generator().manual_seed(0)
    seqs = torch.randint(5, 25, (16, 8), generator=gen)
    seqs[:, 0], seqs[:, -1] = lm.bos_id, lm.eos_id
    rows, pos, _ = distilled_mlm.masked_rows(seqs, torch.arange(1, 7), lm.mask_id)
    teacher = distilled_mlm.teacher_logprobs(lm, rows, pos)
    assert teacher.shape == (96, lm.vocab_size) and torch.allclose(teacher.exp().sum(1), torch.ones(96))
    student = distilled_mlm.new_student(lm, d=32, layers=1, heads=2, ff=64, seed=0)

    def kl() -> float:
        with torch.no_grad():
            return (teacher.exp() * (teacher - distilled_mlm.student_logprobs(student, rows, pos))).sum(1).mean().item()

    before = kl()
    log = distilled_mlm.train(student, rows, pos, teacher, seconds=600.0, batch=32, lr=3e-3, seed=0, steps=40)
    assert log[-1][0] == 40 and kl() < 0.5 * before, (before, kl(), log)
    path = tmp_path / "s.pt"
    distilled_mlm.save_student(student, str(path), {"note": 1})
    again = distilled_mlm.load_student(str(path))
    with torch.no_grad():
        assert torch.equal(again.masked_logits(rows[:5], pos[:5]), student.masked_logits(rows[:5], pos[:5]))
    assert again.meta == {"note": 1} and again.mask_id == lm.mask_id and again.special_ids == lm.special_ids
    # an ordinary adapter: the API form of the surrogate runs with it
    r = mhfast.sample(lm, 8, chains=2, epochs=2, burn_in=0, energy="local", seed=0,
                      delayed=mhfast.surrogates.model_energy(again))
    assert r.delayed_tested > 0 and r.delayed_accepted <= r.delayed_passed <= r.delayed_tested


@pytest.mark.slow  # ~1 min on the 2-core machine (AntiBERTy's weights; antiberty package as the other bench tests)
def test_quick_distillation_then_delayed_surrogates_reports_the_student(tmp_path):
    out = tmp_path / "student.pt"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "distilled_mlm.py"), "--quick", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "unique sequences" in proc.stdout and "held out: KL" in proc.stdout and out.exists()
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "delayed_surrogates.py"), "--quick", "--cases",
                           "infill", "--seeds", "0", "--layers", "--distilled", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    row = next(line for line in proc.stdout.splitlines() if line.startswith("| distilled d=128 x2 (student) |"))
    assert "relative cost of one masked row" in proc.stdout
    assert "mhfast.sample(delayed=model_energy(distilled d=128 x2 (student))), infill" in proc.stdout
    cell = row.split("|")[2].strip()
    assert cell == "nan" or -1.0 <= float(cell) <= 1.0, row  # a correlation (nan: fewer than 2 proposals)
    # in the sampler: bench_delayed.py's distilled setting charges the student's rows to the run
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_delayed.py"), "--epochs", "2", "--seeds", "0",
                           "--settings", "mh", "distilled", "--student", str(out), "--cost-reps", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "one of its rows costs" in proc.stderr and "student rows" in proc.stdout
    run = next(line for line in proc.stderr.splitlines() if line.startswith("# seed 0 distilled:"))
    assert "'student rows'" in run and "'sampler rows'" in run


def test_counting_surrogate_counts_the_small_models_rows_and_changes_no_value(lm, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import bench_delayed

    small = distilled_mlm.new_student(lm, d=32, layers=1, heads=2, ff=64, seed=0)
    counting = bench_delayed.CountingSurrogate(small, "local")
    tokens = torch.randint(5, 25, (3, 9))
    tokens[:, 0], tokens[:, -1] = lm.bos_id, lm.eos_id
    tokens[2, -2:] = torch.tensor([lm.eos_id, lm.pad_id])  # a shorter row: 6 energy positions
    pos = torch.tensor([1, 2, 3])
    assert torch.equal(counting(tokens, pos), mhfast.surrogates.model_energy(small)(tokens, pos))
    assert counting.rows == 7 + 7 + 6
