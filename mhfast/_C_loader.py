"""Loads the compiled extension ``mhfast._C`` once, with an actionable error if it is missing."""
from __future__ import annotations

_loaded = False


def load_library() -> None:
    global _loaded
    if _loaded:
        return
    try:
        from . import _C  # noqa: F401  (registers torch.ops.mhfast.* as a side effect)
    except ImportError as e:
        raise ImportError(f"{missing_core_advice()}\n(original error: {e})") from e
    _loaded = True


def missing_core_advice(package_dir: str | None = None) -> str:
    """Why ``mhfast._C`` could not be imported, and what to do: three cases ask for three different actions.

    * a built core that fails to load (built against another torch, or a CUDA build beside a CPU torch): rebuild;
    * no core in a source checkout (``setup.py`` beside the package) after a non-editable ``pip install .``:
      Python imported the checkout's ``mhfast/`` (the current directory comes first), not the installed one;
    * no core at all: build it.

    Example:
        >>> import tempfile
        >>> missing_core_advice(tempfile.mkdtemp()).startswith("mhfast's compiled core (mhfast._C) is not built")
        True
    """
    import importlib.machinery
    import os

    here = package_dir or os.path.dirname(os.path.abspath(__file__))
    # this interpreter's names only: a _C built for another Python version is not a candidate, as for import
    built = [name for name in (f"_C{s}" for s in importlib.machinery.EXTENSION_SUFFIXES)
             if os.path.exists(os.path.join(here, name))]
    build = ("    pip install .        (or, for a development checkout: pip install -e .)\n"
             "(it compiles against the torch installed in that environment; see the README's install section)")
    if built:
        return (f"mhfast's compiled core ({built[0]}) is built but does not load: built against another torch "
                f"(or with CUDA, beside a CPU torch)? Rebuild it from the repository root with\n{build}")
    if os.path.exists(os.path.join(os.path.dirname(here), "setup.py")):
        return ("mhfast's compiled core (mhfast._C) is not built in this source checkout, which is what Python "
                f"imported ({here}): run from another directory to use an installed mhfast, or build it here "
                f"with\n{build}")
    return f"mhfast's compiled core (mhfast._C) is not built. Build it from the repository root with\n{build}"


def built_with_cuda() -> bool:
    """True when the compiled core has CUDA kernels registered (``MHFAST_FORCE_CPU`` unset at build)."""
    import torch

    load_library()
    return torch._C._dispatch_has_kernel_for_dispatch_key("mhfast::propose", "CUDA")
