"""The CPU kernels' portable path (used on CPUs without AVX2+FMA) also matches the reference.

On AVX2 machines the run-time dispatch picks the AVX2 path; MHFAST_CPU_PORTABLE=1 forces the
portable one, so a subset of the op tests reruns in a subprocess with it set."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch


HERE = os.path.dirname(os.path.abspath(__file__))

SCRIPT = """
import torch, mhfast.ops as ops
g = torch.Generator().manual_seed(0)
logits = torch.randn(300, 1000, generator=g) * 4
targets = torch.randint(0, 1000, (300,), generator=g)
torch.save(ops.gather_energies(logits, targets, torch.arange(300), 300)[2], {path!r})
"""


def token_logp(tmp_path, portable: bool) -> torch.Tensor:
    path = str(tmp_path / f"out_{portable}.pt")
    env = dict(os.environ)
    env.pop("MHFAST_CPU_PORTABLE", None)
    if portable:
        env["MHFAST_CPU_PORTABLE"] = "1"
    subprocess.run([sys.executable, "-c", SCRIPT.format(path=path)], env=env, check=True, timeout=300)
    return torch.load(path)


@pytest.mark.slow  # 11 s on the 2-core CI machine
def test_portable_path_matches_reference(tmp_path):
    env = dict(os.environ, MHFAST_CPU_PORTABLE="1")
    select = ("cpu and not bad_input and (test_special_values or random_cpu or large_vocab or chi_square"
              " or ties or half_precision or strided or (fixed_uniforms and 100-))")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                           os.path.join(HERE, "test_gather_energies.py"), os.path.join(HERE, "test_propose.py"),
                           "-k", select], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert " passed" in proc.stdout


def test_switch_changes_the_path(tmp_path):
    # Same values to ~1 ulp, but not all the same bits: the environment variable took effect
    # (unless this CPU has no AVX2, where both runs take the portable path).
    portable, default = token_logp(tmp_path, True), token_logp(tmp_path, False)
    torch.testing.assert_close(portable, default, rtol=1e-5, atol=1e-5)
    has_avx2 = "avx2" in open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else False
    if has_avx2:
        assert not torch.equal(portable, default)
