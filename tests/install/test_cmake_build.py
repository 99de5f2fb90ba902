"""The C++ users' check: CMakeLists.txt configures against the installed libtorch, builds
libmhfast.so and csrc/test/test_ops_cpu.cpp, and ctest passes (ops called via the dispatcher).

Compiles every C++ source once more (a few minutes on 2 cores), hence a single test."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

# configures and builds against libtorch: 0.7-4 min (on 2 cores of a 2.0 GHz Xeon 115 s alone, 236 s beside another
# test run). Its speed varies 3x with the machine and its load, so the bound is the build's own (1500 s), not pytest's.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(cmd: list[str], cwd: str) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")
def test_cmake_build_and_ctest(tmp_path):
    build = str(tmp_path / "build")
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    run(["cmake", "-S", ROOT, "-B", build, *generator, f"-DPython3_EXECUTABLE={sys.executable}"], ROOT)
    assert os.path.exists(os.path.join(build, "compile_commands.json"))
    run(["cmake", "--build", build, "--parallel", str(os.cpu_count() or 2)], ROOT)
    out = run(["ctest", "--test-dir", build, "--output-on-failure"], ROOT)
    assert "100% tests passed" in out
