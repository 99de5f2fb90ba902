"""scripts/gpu_check.sh --quick runs end to end: on this machine without a GPU it must run the CPU
half of every step, say so, write its files (at most 8: what the device tool brings back) and exit 0.

On a GPU machine the same test runs the CUDA half (build for the GPU found, -k cuda tests, the
sanitizers, benchmarks); it asserts only that the script passed and reported each step.

Example:
    python3 -m pytest -q tests/install/test_gpu_check.py
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest
import torch

# runs scripts/gpu_check.sh --quick: 1-4 min (on 2 cores of a 2.0 GHz Xeon 115 s alone, 199 s beside another test run);
# the script is bounded at SCRIPT_TIMEOUT_S and the test at 900 s, so a slower machine is not a failure and a hang
# still is
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
SCRIPT_TIMEOUT_S = 600  # one --quick run of the script


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check")
    env = {k: v for k, v in os.environ.items() if k != "TORCH_CUDA_ARCH_LIST"}
    proc = subprocess.run(["bash", str(SCRIPT), str(out), "--quick"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=SCRIPT_TIMEOUT_S)
    return proc, out


def test_quick_run_passes_and_reports_every_step(quick_run):
    proc, out = quick_run
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    summary = (out / "summary.md").read_text()
    assert "Overall: PASS" in summary
    for step in ("tests (-k", "ops vs reference and floor", "sampler end to end", "mhfast vs mixmatch loop"):
        assert step in summary, f"{step!r} missing from the summary:\n{summary}"
    if importlib.util.find_spec("sapiens") is not None:  # the real-model check (step 11) and its table
        assert "Sapiens real-model check" in summary and "the same chains" in summary, summary
    for op in ("masked_copies", "gather_energies", "propose", "mh_accept_"):
        assert f"| {op} |" in summary  # the floor table folded into the summary
    assert "| random | float32 | 8 | 2 |" in summary  # the mixmatch comparison's table too
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) <= 8, files  # the device tool brings back at most 8 files


def test_quick_run_says_which_half_and_sets_the_arch_list(quick_run):
    proc, out = quick_run
    summary = (out / "summary.md").read_text()
    if torch.cuda.is_available():
        assert "GPU: the CUDA half" in summary and "compute-sanitizer memcheck" in summary
    else:
        assert "NO GPU: the CPU half" in summary and "op sweep on cpu" in summary
        # torch's arch detection crashes without a visible GPU: the script sets the list itself.
        assert "TORCH_CUDA_ARCH_LIST=9.0" in proc.stdout


def test_only_runs_the_named_steps(tmp_path):
    """--only mixmatch: the environment and build steps, then that step alone (the third planned GPU call runs
    it this way)."""
    env = {k: v for k, v in os.environ.items() if k != "TORCH_CUDA_ARCH_LIST"}
    proc = subprocess.run(["bash", str(SCRIPT), str(tmp_path), "--quick", "--only", "mixmatch"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=SCRIPT_TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    summary = (tmp_path / "summary.md").read_text()
    assert "Steps: mixmatch." in summary and "mhfast vs mixmatch loop" in summary and "Overall: PASS" in summary
    for step in ("tests (-k", "ops vs reference and floor", "sampler end to end", "op sweep on"):
        assert step not in summary, summary


def test_an_unknown_step_is_refused_in_one_line(tmp_path):
    proc = subprocess.run(["bash", str(SCRIPT), str(tmp_path), "--only", "tests,sanitiser"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"{SCRIPT}: --only: unknown step 'sanitiser' (steps: tests,sanitizer,ops,e2e,decoder,mixmatch,compile,"
        "sapiens,mixing,antiberty)"]
    assert not (tmp_path / "summary.md").exists()
