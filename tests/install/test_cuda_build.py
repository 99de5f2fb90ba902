"""Compile-only check of the CUDA backend: every csrc/cuda/*.cu (the kernels) and csrc/cuda/*.cpp (the ops' CUDA
entry points, host code that includes ATen) must compile.

CI has no GPU, so the CUDA sources are never built by ``pip install`` there; this test is what
turns CI red on a CUDA syntax or type error. It compiles each file to an object with the flags
setup.py gives nvcc (plus the defines torch's CUDAExtension adds), two files at a time; nvcc hands a .cpp to
the host compiler with the CUDA include paths, as the extension's build does.

A CPU-only torch wheel lacks ``c10/cuda/impl/cuda_cmake_macros.h`` (generated at torch's build);
the test writes a one-line stand-in into a temporary include folder searched after torch's own,
so a CUDA torch uses its real header.

Example:
    python3 -m pytest -q tests/install/test_cuda_build.py
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from torch.utils import cpp_extension

ROOT = Path(__file__).resolve().parents[2]
CUDA_SOURCES = sorted(glob.glob(str(ROOT / "csrc" / "cuda" / "*.cu")) +
                      glob.glob(str(ROOT / "csrc" / "cuda" / "*.cpp")))

# setup.py: args["nvcc"] = opt + ["-std=c++17", "--expt-relaxed-constexpr"], opt = ["-O3"].
SETUP_NVCC_FLAGS = ["-O3", "-std=c++17", "--expt-relaxed-constexpr"]
# Hopper (H100/H200), the target GPU: real sm_90 machine code, so that what ptxas rejects or
# spills for that chip fails here (scripts/gpu_check.sh builds with TORCH_CUDA_ARCH_LIST=9.0).
ARCH_FLAGS = ["-gencode=arch=compute_90,code=sm_90", "-Xptxas=-warn-spills"]
SHIM_HEADER = "#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n"


def find_nvcc() -> str | None:
    if cpp_extension.CUDA_HOME is not None:
        candidate = Path(cpp_extension.CUDA_HOME) / "bin" / "nvcc"
        if candidate.is_file():
            return str(candidate)
    return shutil.which("nvcc")


def nvcc_command(nvcc: str, source: str, obj: Path, shim: Path) -> list[str]:
    includes = [f"-I{p}" for p in cpp_extension.include_paths()] + [f"-I{shim}"]
    # The flags CUDAExtension adds to every nvcc call (fp16 operators off, etc.) and its macros.
    common = list(getattr(cpp_extension, "COMMON_NVCC_FLAGS", []))
    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True))
    defines = ["-DWITH_CUDA", "-DTORCH_EXTENSION_NAME=_C", "-DTORCH_API_INCLUDE_EXTENSION_H",
               f"-D_GLIBCXX_USE_CXX11_ABI={abi}"]
    return [nvcc, "-c", source, "-o", str(obj), *SETUP_NVCC_FLAGS, *ARCH_FLAGS, *common, "-Xcompiler", "-fPIC",
            *defines, *includes]


def compile_one(nvcc: str, source: str, out_dir: Path, shim: Path) -> tuple[str, int, str, float]:
    obj = out_dir / (Path(source).stem + ".o")
    start = time.perf_counter()
    proc = subprocess.run(nvcc_command(nvcc, source, obj, shim), capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    ok = proc.returncode == 0 and obj.is_file()
    return source, 0 if ok else (proc.returncode or 1), proc.stdout + proc.stderr, elapsed


def test_every_op_has_one_file_per_backend():
    """Each op of the schema (csrc/mhfast.cpp) is one file per backend that registers it: csrc/cpu/<op>_cpu.cpp
    and csrc/cuda/<op>_cuda.cpp (its kernels: csrc/cuda/*_kernel.cu); no central registration file."""
    schema = (ROOT / "csrc" / "mhfast.cpp").read_text()
    ops = [op for op in re.findall(r'm\.def\(\s*"(\w+)\(', schema) if not op.endswith("_check")]
    assert {"masked_copies", "propose", "mh_commit_site_", "mh_memo_lookup_", "mh_memo_store_"} <= set(ops), ops
    for backend, key in (("cpu", "CPU"), ("cuda", "CUDA")):
        for op in ops:
            path = ROOT / "csrc" / backend / f"{op.rstrip('_')}_{backend}.cpp"
            assert path.is_file(), path
            text = path.read_text()
            assert f"TORCH_LIBRARY_IMPL(mhfast, {key}, m)" in text and f'm.impl("{op}"' in text, path
        registering = [p.name for p in (ROOT / "csrc" / backend).glob("*.c*")
                       if f"TORCH_LIBRARY_IMPL(mhfast, {key}, m)" in p.read_text(errors="replace")]
        assert len(registering) == len(ops), registering
    assert all(Path(s).name.endswith(("_kernel.cu", "_cuda.cpp")) for s in CUDA_SOURCES), CUDA_SOURCES


@pytest.mark.slow  # 39-140 s on 2-core machines (a 2.0 GHz Xeon: 136 s alone, 304 s beside another test run): a
@pytest.mark.timeout(1200)  # bound of its own, not pytest's 600 s (compile speed varies 3x with machine and load)
def test_every_cuda_source_compiles(tmp_path):
    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found (CUDA_HOME unset and no nvcc on PATH): CUDA sources not compiled")
    shim = tmp_path / "shim"
    (shim / "c10" / "cuda" / "impl").mkdir(parents=True)
    (shim / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h").write_text(SHIM_HEADER)
    # The entry points (which include ATen: ~10 s each, the kernels ~5 s) start first, two at a time.
    sources = sorted(CUDA_SOURCES, key=lambda s: not s.endswith(".cpp"))
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda s: compile_one(nvcc, s, tmp_path, shim), sources))
    for source, rc, _, elapsed in results:
        print(f"{Path(source).name}: {'ok' if rc == 0 else f'FAILED (rc={rc})'} in {elapsed:.1f} s")
    failures = [(s, out) for s, rc, out, _ in results if rc != 0]
    assert not failures, "\n\n".join(f"== {os.path.relpath(s, ROOT)} ==\n{out[-6000:]}" for s, out in failures)
