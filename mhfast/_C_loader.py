"""Loads the compiled extension ``mhfast._C`` once, with an actionable error if it is missing."""
from __future__ import annotations

_loaded = False


def load_library() -> None:
    global _loaded
    if _loaded:
        return
    try:
        from . import _C  # noqa: F401  (registers torch.ops.mhfast.* as a side effect)
    except ImportError as e:  # pragma: no cover - exercised only on a broken install
        raise ImportError(
            "mhfast's compiled core (mhfast._C) is not built. Build it from the repository root with\n"
            "    pip install .        (or, for a development checkout: pip install -e .)\n"
            "(it compiles against the torch installed in that environment; see the README's install section)\n"
            f"(original error: {e})"
        ) from e
    _loaded = True


def built_with_cuda() -> bool:
    """True when the compiled core has CUDA kernels registered (``MHFAST_FORCE_CPU`` unset at build)."""
    import torch

    load_library()
    return torch._C._dispatch_has_kernel_for_dispatch_key("mhfast::propose", "CUDA")
