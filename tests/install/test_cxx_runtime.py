"""mhfast._C uses the shared C++ runtime that torch uses, never a static copy of its own.

A static libstdc++ inside the extension is a second, uninitialized C++ runtime: on the GPU machine's image
(whose compiler wrapper finds only the static archive) the first error message that formatted an integer crashed
the process inside std::ostream instead of raising (seen on an H200, 2026-11-26). setup.py's
``shared_cxx_runtime_args`` names torch's libstdc++ on the link line when the compiler would link the static one.

Example:
    python3 -m pytest -q tests/install/test_cxx_runtime.py
"""
from __future__ import annotations

import ctypes
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import mhfast

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("ldd") is None,
                                reason="ELF shared libraries and ldd: Linux only")

# A function that formats an integer through std::ostream: what crashed with a static runtime.
FORMATS_AN_INT = r"""
#include <cstring>
#include <sstream>
extern "C" int format_int(long v, char* out, int n) {
  std::ostringstream s;
  s << "dim " << v;
  std::strncpy(out, s.str().c_str(), n);
  return 0;
}
"""


def setup_functions() -> dict:
    """setup.py's functions, without running its setup() (nothing is built)."""
    import setuptools
    real = setuptools.setup
    setuptools.setup = lambda **kwargs: None
    try:
        return runpy.run_path(str(ROOT / "setup.py"))
    finally:
        setuptools.setup = real


def need_static_archive() -> None:
    """Skips unless this machine's c++ can link the static libstdc++ archive (to stand in for the GPU image's)."""
    if shutil.which("c++") is None:
        pytest.skip("no C++ compiler")
    archive = subprocess.run(["c++", "-print-file-name=libstdc++.a"], capture_output=True, text=True).stdout.strip()
    if not Path(archive).is_file():
        pytest.skip("no static libstdc++ archive on this machine to be linked by mistake")


def ldd(path: Path | str) -> str:
    return subprocess.run(["ldd", str(path)], capture_output=True, text=True, timeout=60).stdout


def test_built_extension_links_the_shared_cxx_runtime():
    so = Path(mhfast._C.__file__)
    assert "libstdc++.so" in ldd(so), f"{so.name} has no libstdc++.so among its libraries:\n{ldd(so)}"


def test_a_compiler_without_a_shared_runtime_gets_torchs(tmp_path):
    ns = setup_functions()
    loaded = ns["loaded_libstdcxx"]()
    assert loaded is not None and Path(loaded).is_file() and "libstdc++.so" in loaded  # torch loaded it
    need_static_archive()
    # A compiler like the GPU image's: it links the static archive (the image's wrapper does so through its -B
    # folders; this one by appending -static-libstdc++).
    fake = tmp_path / "static-c++"
    fake.write_text('#!/bin/sh\nexec c++ "$@" -static-libstdc++\n')
    fake.chmod(0o755)
    assert ns["links_shared_libstdcxx"](str(fake)) is False
    assert ns["shared_cxx_runtime_args"](str(fake)) == [loaded]
    assert ns["links_shared_libstdcxx"]("c++") is True  # this machine's compiler links the shared one
    assert ns["shared_cxx_runtime_args"]("c++") == []
    assert ns["shared_cxx_runtime_args"](str(tmp_path / "no-such-compiler")) == []  # cannot tell: as before


def test_the_named_runtime_wins_over_the_static_archive(tmp_path):
    """What setup.py relies on: with torch's libstdc++ named before the compiler's own -lstdc++, a link that would
    take the static archive (here forced by -static-libstdc++) takes the shared library, and formatting works."""
    need_static_archive()
    src = tmp_path / "fmt.cpp"
    src.write_text(FORMATS_AN_INT)
    loaded = setup_functions()["loaded_libstdcxx"]()
    static, shared = tmp_path / "static.so", tmp_path / "shared.so"
    base = ["c++", "-shared", "-fPIC", "-O1", str(src)]
    subprocess.run(base + ["-o", str(static), "-static-libstdc++"], check=True, timeout=120)
    subprocess.run(base + ["-o", str(shared), loaded, "-static-libstdc++"], check=True, timeout=120)
    assert "libstdc++.so" not in ldd(static)  # the failure mode exists: a private copy of the runtime
    assert "libstdc++.so" in ldd(shared)
    out = ctypes.create_string_buffer(32)
    assert ctypes.CDLL(str(shared)).format_int(-42, out, 32) == 0 and out.value == b"dim -42"
    assert torch.ones(1).item() == 1.0  # torch still fine in this process
