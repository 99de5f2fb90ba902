"""Builds mhfast's compiled core ``mhfast._C`` (one extension, CPU and optionally CUDA) against the
torch installed in the target environment. Package metadata and extras are in pyproject.toml.

    pip install .                               # in-tree backend: builds against the installed torch
    pip install -e .                            # editable, in place (what scripts/install.sh does)

Build switches (environment variables):
    MHFAST_FORCE_CPU=1    CPU kernels only, even when CUDA is available
    MHFAST_FORCE_CUDA=1   CUDA kernels or a build error: fails where the CPU-only build would be chosen quietly
                          (a torch without CUDA, no CUDA toolkit found); a GPU need not be visible either way
    DEBUG=1               -O0 -g instead of -O3
    TORCH_CUDA_ARCH_LIST  CUDA archs, e.g. "8.0;9.0+PTX"; unset: the visible GPUs' (the highest +PTX), else
                          DEFAULT_CUDA_ARCHS
    MAX_JOBS              parallel compile jobs (ninja)
    CXX                   the C++ compiler (default c++)

Every build failure this file can foresee is one line, ``mhfast build error: <cause>``.
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import traceback

from setuptools import setup

ROOT = os.path.dirname(os.path.abspath(__file__))
MIN_TORCH = (2, 4)  # torch.library.register_fake (mhfast/ops.py) appeared in torch 2.4
# No GPU visible and no TORCH_CUDA_ARCH_LIST: Turing, Ampere (A100, consumer), Ada, Hopper (H100/H200);
# +PTX lets newer GPUs (Blackwell) JIT-compile the Hopper PTX. CUDA 13 no longer targets sm < 7.5.
DEFAULT_CUDA_ARCHS = "7.5;8.0;8.6;8.9;9.0+PTX"


def fail(cause: str) -> None:
    """Stops the build with one line naming the cause (SystemExit prints no traceback)."""
    raise SystemExit(f"mhfast build error: {cause}")


def import_torch():
    """The installed torch, checked against MIN_TORCH.

    Example:
        >>> import_torch().__version__  # doctest: +SKIP
        '2.13.0+cpu'
    """
    try:
        import torch
    except ImportError as e:
        fail(f"torch is not importable ({e}); install torch>={MIN_TORCH[0]}.{MIN_TORCH[1]} into this "
             "environment first (mhfast compiles against the installed torch)")
    found = tuple(int(x) for x in re.findall(r"\d+", torch.__version__)[:2])
    if found < MIN_TORCH:
        fail(f"torch {torch.__version__} is unsupported; mhfast needs torch>={MIN_TORCH[0]}.{MIN_TORCH[1]}")
    return torch


torch = import_torch()
from torch.utils.cpp_extension import (  # noqa: E402  (after the one-line torch check)
    CUDA_HOME, BuildExtension, CppExtension, CUDAExtension, is_ninja_available)


def cxx_compiler() -> str:
    """The C++ compiler torch will call: ``$CXX`` (its first word), default ``c++``."""
    return os.environ.get("CXX", "c++").split()[0]


def check_compiler() -> None:
    """One-line failure when the C++ compiler torch will call (:func:`cxx_compiler`) is missing."""
    cxx = cxx_compiler()
    if shutil.which(cxx) is None:
        fail(f"no C++ compiler: '{cxx}' is not on PATH; install one (e.g. apt-get install g++) or set CXX")


def loaded_libstdcxx() -> str | None:
    """The path of the libstdc++ shared library this Python process has loaded (torch loads it), or None."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "/libstdc++.so" in line}
    except OSError:
        return None
    return min(paths) if paths else None


PROBE_SOURCE = "#include <sstream>\nint mhfast_probe(long v) { std::ostringstream s; s << v; return (int)s.str().size(); }\n"


def links_shared_libstdcxx(cxx: str) -> bool | None:
    """Whether a shared library linked by ``cxx`` uses the shared libstdc++ (None: the probe could not tell).

    Links a one-function C++ library and reads its needed libraries (``readelf -d``, else ``ldd``): what the linker
    does, compiler wrappers and search paths included, rather than what the compiler says it would find.
    """
    reader = ["readelf", "-d"] if shutil.which("readelf") else ["ldd"] if shutil.which("ldd") else None
    if reader is None:
        return None
    with tempfile.TemporaryDirectory() as d:
        src, lib = os.path.join(d, "probe.cpp"), os.path.join(d, "probe.so")
        with open(src, "w") as f:
            f.write(PROBE_SOURCE)
        try:
            if subprocess.run([cxx, "-shared", "-fPIC", "-O1", src, "-o", lib], capture_output=True,
                              timeout=300).returncode != 0:
                return None
            needed = subprocess.run(reader + [lib], capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.SubprocessError):
            return None
    return "libstdc++.so" in needed


def shared_cxx_runtime_args(cxx: str) -> list[str]:
    """Linker arguments that give mhfast._C the shared C++ runtime; none when ``cxx`` links it by itself.

    A compiler that links the static libstdc++ archive puts a second, uninitialized copy of the C++ runtime into
    mhfast._C beside the one torch uses, and the first error message that formats an integer
    (``TORCH_CHECK(..., dim)``) then crashes the process inside std::ostream. The GPU machine's image has such a
    compiler (CXX=/opt/gcc/bin/g++, a wrapper whose -B folders hold the archive; seen on an H200, 2026-11-26).
    Then the libstdc++ that torch loaded is named on the link line, before the compiler's own -lstdc++: every
    C++ symbol resolves to it, and the archive adds nothing.

    Example:
        >>> shared_cxx_runtime_args("g++")  # doctest: +SKIP
        []
    """
    if not sys.platform.startswith("linux") or links_shared_libstdcxx(cxx) is not False:
        return []  # the shared runtime already, or no way to tell (check_compiler names a missing compiler)
    loaded = loaded_libstdcxx()
    if loaded is None:
        print(f"mhfast: warning: {cxx} links a static libstdc++ and none is loaded: mhfast._C gets its own copy "
              "(set CXX to a compiler that links the shared one if error messages crash)", flush=True)
        return []
    print(f"mhfast: {cxx} links a static libstdc++; linking {loaded}, the one torch loaded, instead", flush=True)
    return [loaded]


def cuda_decision() -> tuple[bool, str]:
    """Whether to build the CUDA kernels, and why (printed)."""
    if os.environ.get("MHFAST_FORCE_CPU", "0") == "1":
        return False, "MHFAST_FORCE_CPU=1"
    if os.environ.get("MHFAST_FORCE_CUDA", "0") == "1":
        if torch.version.cuda is None:
            fail(f"MHFAST_FORCE_CUDA=1 but torch {torch.__version__} was built without CUDA (install a CUDA torch)")
        if CUDA_HOME is None:
            fail("MHFAST_FORCE_CUDA=1 but no CUDA toolkit found (set CUDA_HOME or put nvcc on PATH)")
        return True, "MHFAST_FORCE_CUDA=1"
    if torch.version.cuda is None:
        return False, f"torch {torch.__version__} was built without CUDA"
    if CUDA_HOME is None:
        return False, "no CUDA toolkit found (CUDA_HOME unset and nvcc not on PATH)"
    return True, f"torch CUDA {torch.version.cuda}, toolkit at {CUDA_HOME}"


def cuda_arch_list() -> tuple[str, str]:
    """The CUDA archs to compile for, and where they come from.

    torch's own detection asks the GPU and crashes when none is visible (a build machine), so the list
    is always explicit: TORCH_CUDA_ARCH_LIST, else the visible GPUs' capabilities, the highest with its PTX
    (a wheel built on an H200 then still runs, JIT-compiled, on a newer GPU, where sm_90 code alone fails with
    "no kernel image is available"; an older GPU needs TORCH_CUDA_ARCH_LIST), else the default.
    """
    env = os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip()
    if env:
        return env, "TORCH_CUDA_ARCH_LIST"
    if torch.cuda.is_available():
        caps = sorted({torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())})
        return ";".join(f"{major}.{minor}" for major, minor in caps) + "+PTX", "the visible GPU(s)"
    return DEFAULT_CUDA_ARCHS, "no GPU visible: default list"


def gencode_flags(arch_list: str) -> list[str]:
    """nvcc ``-gencode`` flags for an arch list like torch's (``;`` or space separated, ``+PTX`` suffix).

    Example:
        >>> gencode_flags("8.0;9.0+PTX")
        ['-gencode=arch=compute_80,code=sm_80', '-gencode=arch=compute_90,code=sm_90', \
'-gencode=arch=compute_90,code=compute_90']
    """
    flags = []
    for entry in arch_list.replace(";", " ").split():
        m = re.fullmatch(r"(\d+)\.(\d+)([af]?)(\+PTX)?", entry)
        if m is None:
            fail(f"TORCH_CUDA_ARCH_LIST entry {entry!r} is not of the form 8.0, 9.0a or 9.0+PTX")
        num = m.group(1) + m.group(2) + m.group(3)
        flags.append(f"-gencode=arch=compute_{num},code=sm_{num}")
        if m.group(4):
            flags.append(f"-gencode=arch=compute_{num},code=compute_{num}")
    if not flags:
        fail("TORCH_CUDA_ARCH_LIST names no CUDA arch")
    return flags


def extension():
    """The ``mhfast._C`` extension: CPU kernels always, CUDA kernels when cuda_decision() says so."""
    check_compiler()
    with_cuda, why = cuda_decision()
    print(f"mhfast: building {'CPU + CUDA' if with_cuda else 'CPU-only'} kernels ({why}) "
          f"against torch {torch.__version__}", flush=True)
    debug = os.environ.get("DEBUG", "0") == "1"
    opt = ["-O0", "-g"] if debug else ["-O3"]
    rel = lambda pattern: sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, pattern)))
    sources = rel("csrc/*.cpp") + rel("csrc/cpu/*.cpp")
    # at::parallel_for is an inline `#pragma omp parallel` in ATen's headers: without -fopenmp it runs serially.
    args = {"cxx": opt + ["-fopenmp", "-std=c++17"]}
    link = ["-fopenmp"] + shared_cxx_runtime_args(cxx_compiler())
    if not with_cuda:
        return CppExtension("mhfast._C", sources, extra_compile_args=args, extra_link_args=link)
    archs, source = cuda_arch_list()
    print(f"mhfast: CUDA archs {archs} ({source})", flush=True)
    # Explicit -gencode flags: torch then skips its GPU query (it skips when a flag mentions 'arch').
    args["nvcc"] = opt + ["-std=c++17", "--expt-relaxed-constexpr"] + gencode_flags(archs)
    # csrc/cuda: the ops' entry points (*_cuda.cpp, host code with ATen) and their kernels (*_kernel.cu, nvcc).
    return CUDAExtension("mhfast._C", sources + rel("csrc/cuda/*.cpp") + rel("csrc/cuda/*.cu"), extra_compile_args=args,
                         extra_link_args=link, define_macros=[("WITH_CUDA", None)])


class BuildExt(BuildExtension):
    """torch's BuildExtension; a compile or link error ends with one line naming it (details above it)."""

    def finalize_options(self) -> None:
        super().finalize_options()
        # An editable install (`pip install -e .`) compiles in a fresh temporary folder each time; a fixed
        # one lets ninja reuse the objects, so re-running scripts/install.sh only rebuilds what changed
        # (ninja also rebuilds when the flags or torch's headers change).
        if getattr(self, "editable_mode", False):
            self.build_temp = os.path.join(ROOT, "build", "editable-temp")

    def build_extensions(self) -> None:
        try:
            super().build_extensions()
        except Exception as e:
            from setuptools.errors import CompileError, LinkError

            # A compiler's or linker's failure has printed its messages above; anything else (a setuptools or
            # torch incompatibility) is Python's, and only its traceback says where
            compiler = isinstance(e, (CompileError, LinkError, subprocess.CalledProcessError)) or \
                "Error compiling objects" in str(e)
            if not compiler:
                traceback.print_exc()
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            where = "the compiler's messages are above" if compiler else "the traceback is above"
            fail(f"compiling mhfast._C failed ({first}); {where}")


def runtime_torch_requirement() -> str:
    """``torch==X.Y.Z`` of the torch built against: mhfast._C links its C++ ABI (another torch cannot
    load it), and the pin keeps pip from replacing torch while resolving mhfast or its extras."""
    return f"torch=={torch.__version__.split('+')[0]}"


setup(
    ext_modules=[extension()],
    cmdclass={"build_ext": BuildExt.with_options(use_ninja=is_ninja_available())},
    install_requires=[runtime_torch_requirement(), "numpy"],
)
