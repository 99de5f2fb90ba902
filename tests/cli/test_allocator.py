"""mhfast.tune_cpu_allocator: large allocations stop page-faulting, chains do not change, the CLI applies it.

Each check runs in a fresh interpreter: the tuning is process-wide and cannot be undone.

    python3 -m pytest -q tests/cli/test_allocator.py
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


def _python(code: str, **env: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


FAULTS = """
import resource, sys, torch, mhfast
applied = mhfast.tune_cpu_allocator() if sys.argv[-1] == "tune" else None
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(4):  # 64 MB: above glibc's largest dynamic mmap threshold (32 MB); tuned, the heap grows a few times
    torch.empty(1 << 24).fill_(1.0)
before = faults()
for _ in range(10):
    torch.empty(1 << 24).fill_(1.0)  # allocated, written (every page touched), freed
print(applied, faults() - before)
"""


@pytest.mark.skipif(not GLIBC, reason="mallopt thresholds are glibc's")
def test_a_freed_large_buffer_is_reused_without_page_faults():
    """Untuned, each 64 MB buffer is fresh mmap pages (16,384 faults of 4 KiB each, ten rounds: ~164k); tuned, the
    heap keeps the freed buffer and the next one reuses its pages (0 in a steady state; a fresh clone's CI run once
    saw one buffer's worth in ten rounds)."""
    plain = _python(FAULTS.replace("sys.argv[-1]", "'plain'")).split()
    tuned = _python(FAULTS.replace("sys.argv[-1]", "'tune'")).split()
    assert plain[0] == "None" and tuned[0] == "True"
    assert int(plain[1]) > 10 * 16384 * 0.9, plain  # ten buffers, every page faulted in again
    # Tuned, the freed buffer's pages are reused: at most the heap's growth by a buffer or two more (where other
    # allocations landed above it), never a fault per page per round.
    assert int(tuned[1]) <= 2 * 16384 + 500, tuned


def test_outside_glibc_nothing_is_changed(monkeypatch):
    import mhfast.allocator as allocator

    monkeypatch.setattr(allocator.platform, "libc_ver", lambda: ("musl", "1.2"))
    assert allocator._apply() is False


CHAINS = """
import sys, json, torch, mhfast
sys.path.insert(0, "tests")
from hf_tiny_models import tiny_model, BERT_IDS
from mhfast.models.hf import HFMaskedLM
if sys.argv[-1] == "tune":
    assert mhfast.tune_cpu_allocator()
lm = HFMaskedLM(tiny_model("bert"), **BERT_IDS)
init = torch.tensor([[2, 5, 6, 7, 8, 9, 10, 11, 5, 6, 3]] * 2)
r = mhfast.sample(lm, init=init, chains=3, epochs=3, burn_in=1, seed=4)
print(json.dumps([r.tokens.tolist(), r.energy.tolist(), r.best_tokens.tolist()]))
"""


@pytest.mark.slow  # 30 s on the 2-core CI machine
@pytest.mark.skipif(not GLIBC, reason="mallopt thresholds are glibc's")
def test_chains_are_bit_identical_with_and_without_the_tuning():
    plain = json.loads(_python(CHAINS.replace("sys.argv[-1]", "'plain'")))
    tuned = json.loads(_python(CHAINS.replace("sys.argv[-1]", "'tune'")))
    assert plain == tuned


CLI = """
import mhfast.allocator, mhfast.cli
code = mhfast.cli.main(["sample", "--model", "/nonexistent/model", "--length", "4"])
print(code, mhfast.allocator._applied)
"""


@pytest.mark.skipif(not GLIBC, reason="mallopt thresholds are glibc's")
def test_the_command_tunes_the_allocator_unless_told_not_to():
    assert _python(CLI) == "2 True"  # a run (here one that fails on its input) starts with the tuning
    assert _python(CLI, MHFAST_TUNE_MALLOC="0") == "2 None"
