"""In-tree PEP 517 build backend of mhfast: setuptools, compiled against the torch already installed.

pip runs a backend in an isolated environment holding only ``build-system.requires`` (setuptools,
ninja). Listing torch there would make pip download a second, multi-GB torch just to compile against,
and the extension would be built for that torch rather than the one it will run with. Instead, every
hook below first makes the target environment's *installed* torch importable, then delegates to
``setuptools.build_meta`` unchanged (setup.py does the rest).

Where is the installed torch? The isolated build runs the target interpreter (``sys.executable``) with
``PYTHONPATH``/``PYTHONNOUSERSITE`` set so that only the build environment is visible; a child process
of the same interpreter without those two variables sees exactly what ``import torch`` sees after the
install (venv, user or system site-packages). Its torch folder is *appended* to ``sys.path``, so the
build environment's setuptools still wins over an older one in the target environment.

Example (what pip does; a user just runs ``pip install .``):
    >>> import mhfast_build
    >>> mhfast_build.expose_installed_torch()   # then setup.py's `import torch` works
"""
from __future__ import annotations

import os
import subprocess
import sys

from setuptools import build_meta as _setuptools

# One line that prints torch's parent folder (site-packages) without importing torch (fast).
_FIND_TORCH = (
    "import importlib.util, os; s = importlib.util.find_spec('torch'); "
    "print(os.path.dirname(os.path.dirname(s.origin)) if s and s.origin else '')"
)
_ISOLATION_VARS = ("PYTHONPATH", "PYTHONNOUSERSITE")


def _installed_torch_location() -> str:
    """The site-packages folder that holds the target environment's torch, or '' when none does."""
    env = {k: v for k, v in os.environ.items() if k not in _ISOLATION_VARS}
    try:
        proc = subprocess.run([sys.executable, "-c", _FIND_TORCH], env=env, capture_output=True,
                              text=True, timeout=120, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return proc.stdout.strip() if proc.returncode == 0 else ""


def expose_installed_torch() -> None:
    """Makes ``import torch`` work in this (isolated) process; one-line SystemExit when there is no torch."""
    try:
        import torch  # noqa: F401  (already visible: --no-build-isolation, or torch in the build env)
        return
    except ImportError:
        pass
    location = _installed_torch_location()
    if not location:
        raise SystemExit(
            f"mhfast build error: no torch installed for {sys.executable}; mhfast compiles against the "
            "installed torch, so install torch>=2.4 into this environment first (pip install torch)")
    if location not in sys.path:
        sys.path.append(location)


def _with_torch(hook):
    def wrapped(*args, **kwargs):
        expose_installed_torch()
        return hook(*args, **kwargs)

    wrapped.__name__ = hook.__name__
    wrapped.__doc__ = hook.__doc__
    return wrapped


# PEP 517 / PEP 660 hooks: setuptools' own, after exposing torch (setup.py imports it).
get_requires_for_build_wheel = _with_torch(_setuptools.get_requires_for_build_wheel)
get_requires_for_build_sdist = _with_torch(_setuptools.get_requires_for_build_sdist)
get_requires_for_build_editable = _with_torch(_setuptools.get_requires_for_build_editable)
prepare_metadata_for_build_wheel = _with_torch(_setuptools.prepare_metadata_for_build_wheel)
prepare_metadata_for_build_editable = _with_torch(_setuptools.prepare_metadata_for_build_editable)
build_wheel = _with_torch(_setuptools.build_wheel)
build_sdist = _with_torch(_setuptools.build_sdist)
build_editable = _with_torch(_setuptools.build_editable)
