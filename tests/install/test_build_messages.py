"""What the build and the loader say when something is wrong, and the CUDA archs a GPU build picks: setup.py's
functions (run without its setup(), nothing built) and :func:`mhfast._C_loader.missing_core_advice`.

Example:
    python3 -m pytest -q tests/install/test_build_messages.py
"""
from __future__ import annotations

import importlib.machinery

import pytest
import torch
from setuptools.dist import Distribution
from torch.utils.cpp_extension import BuildExtension

from mhfast._C_loader import missing_core_advice
from test_cxx_runtime import setup_functions


@pytest.fixture(scope="module")
def ns() -> dict:
    return setup_functions()


def test_visible_gpus_build_their_archs_and_the_highest_ptx(ns, monkeypatch):
    """Without TORCH_CUDA_ARCH_LIST a GPU machine built for its own GPUs only, no PTX: a wheel built on an H200
    failed on any newer GPU with "no kernel image is available". The highest arch now carries its PTX."""
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i: [(9, 0), (8, 0), (9, 0)][i])
    archs, source = ns["cuda_arch_list"]()
    assert (archs, source) == ("8.0;9.0+PTX", "the visible GPU(s)")
    assert ns["gencode_flags"](archs)[-1] == "-gencode=arch=compute_90,code=compute_90"
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.6")
    assert ns["cuda_arch_list"]() == ("8.6", "TORCH_CUDA_ARCH_LIST")


@pytest.mark.parametrize("error,where", [
    (RuntimeError("Error compiling objects for extension"), "the compiler's messages are above"),
    (AttributeError("module 'setuptools' has no attribute 'x'"), "the traceback is above"),
])
def test_a_failed_build_says_where_its_cause_is(ns, monkeypatch, capsys, error, where):
    """A failure that is not the compiler's (a setuptools or torch incompatibility) ended with "the compiler's
    messages are above" and no traceback, while the compiler had printed nothing."""
    def broken(self):
        raise error
    monkeypatch.setattr(BuildExtension, "build_extensions", broken)
    with pytest.raises(SystemExit, match=f"mhfast build error: compiling mhfast._C failed .*; {where}$"):
        ns["BuildExt"](Distribution()).build_extensions()
    printed = capsys.readouterr().err
    assert ("Traceback" in printed) == (where == "the traceback is above")


def test_the_loader_tells_a_missing_core_from_a_broken_one_and_from_a_checkout(tmp_path):
    """Every ImportError of mhfast._C said "is not built. Build it ... pip install ." — also to a user who had just
    run pip install . and imported the source checkout, and for a built core that failed to load."""
    pkg = tmp_path / "mhfast"
    pkg.mkdir()
    assert missing_core_advice(str(pkg)).startswith("mhfast's compiled core (mhfast._C) is not built. Build it")
    (tmp_path / "setup.py").write_text("")
    assert "is not built in this source checkout, which is what Python imported" in missing_core_advice(str(pkg))
    (pkg / "_C.cpython-399-x86_64-linux-gnu.so").write_text("")  # another interpreter's build: not a candidate
    assert "source checkout" in missing_core_advice(str(pkg))
    name = "_C" + importlib.machinery.EXTENSION_SUFFIXES[0]
    (pkg / name).write_text("")
    assert missing_core_advice(str(pkg)).startswith(f"mhfast's compiled core ({name}) is built but does not load")


def test_install_sh_refuses_a_python_older_than_its_pins_in_one_line(tmp_path):
    """The pins (numpy 2.4, scipy 1.17, pandas 3.1) have no Python 3.10 wheels: install.sh failed after minutes with
    pip's "No matching distribution". It now stops first, in one line, before it makes or changes anything."""
    import subprocess
    from pathlib import Path

    fake = tmp_path / "python3.10"
    fake.write_text('#!/bin/sh\nif [ "$1" = -V ]; then echo Python 3.10.12; exit 0; fi\nexit 1\n')
    fake.chmod(0o755)
    script = Path(__file__).resolve().parents[2] / "scripts" / "install.sh"
    for python, words in ((str(fake), "needs Python >= 3.11, and " + str(fake) + " is Python 3.10.12"),
                          (str(tmp_path / "none"), "no Python '" + str(tmp_path / "none") + "'")):
        proc = subprocess.run(["bash", str(script)], env={"PATH": "/usr/bin:/bin", "PYTHON": python,
                                                          "MHFAST_VENV": str(tmp_path / "venv")},
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1, proc
        assert words in proc.stderr and not (tmp_path / "venv").exists(), proc.stderr
