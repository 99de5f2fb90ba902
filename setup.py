"""Builds mhfast and its compiled core ``mhfast._C`` (one extension, CPU and optionally CUDA).

    pip install --no-build-isolation -e .      # use the torch already installed

(An isolated build would download a multi-GB CUDA torch just to compile against.)

Build switches (environment variables):
    MHFAST_FORCE_CPU=1   CPU kernels only, even when CUDA is available
    MHFAST_FORCE_CUDA=1  CUDA kernels too, even when torch reports no CUDA (fails without a toolkit)
    DEBUG=1              -O0 -g instead of -O3
"""
from __future__ import annotations

import glob
import os

import torch
from setuptools import find_packages, setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension

ROOT = os.path.dirname(os.path.abspath(__file__))


def cuda_decision() -> tuple[bool, str]:
    if os.environ.get("MHFAST_FORCE_CPU", "0") == "1":
        return False, "MHFAST_FORCE_CPU=1"
    if os.environ.get("MHFAST_FORCE_CUDA", "0") == "1":
        return True, "MHFAST_FORCE_CUDA=1"
    if torch.version.cuda is None:
        return False, f"torch {torch.__version__} was built without CUDA"
    if CUDA_HOME is None:
        return False, "no CUDA toolkit found (CUDA_HOME unset and nvcc not on PATH)"
    return True, f"torch CUDA {torch.version.cuda}, toolkit at {CUDA_HOME}"


def extension():
    with_cuda, why = cuda_decision()
    print(f"mhfast: building {'CPU + CUDA' if with_cuda else 'CPU-only'} kernels ({why})", flush=True)
    debug = os.environ.get("DEBUG", "0") == "1"
    opt = ["-O0", "-g"] if debug else ["-O3"]
    rel = lambda pattern: sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, pattern)))
    sources = rel("csrc/*.cpp") + rel("csrc/cpu/*.cpp")
    # at::parallel_for is an inline `#pragma omp parallel` in ATen's headers: without -fopenmp it runs serially.
    args = {"cxx": opt + ["-fopenmp", "-std=c++17"]}
    macros = []
    if with_cuda:
        sources += rel("csrc/cuda/*.cu")
        args["nvcc"] = opt + ["-std=c++17", "--expt-relaxed-constexpr"]
        macros.append(("WITH_CUDA", None))
        return CUDAExtension("mhfast._C", sources, extra_compile_args=args, extra_link_args=["-fopenmp"],
                             define_macros=macros)
    return CppExtension("mhfast._C", sources, extra_compile_args=args, extra_link_args=["-fopenmp"],
                        define_macros=macros)


setup(
    name="mhfast",
    version="0.1.0",
    description="Correct and fast Metropolis-Hastings sampling from masked language models",
    packages=find_packages(include=["mhfast", "mhfast.*"]),
    package_data={"mhfast": ["data/**/*"]},
    ext_modules=[extension()],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
    python_requires=">=3.10",
    install_requires=["torch>=2.4", "numpy"],
    extras_require={
        "hf": ["transformers>=4.40"],
        "antiberty": ["antiberty==0.1.3", "transformers>=4.40"],
        "fairseq": ["fairseq-fixed==0.12.3.1"],
        "eval": ["sacrebleu>=2.3", "sacremoses", "sentencepiece"],
        "test": ["pytest", "hypothesis", "expecttest", "scipy"],
    },
    entry_points={"console_scripts": ["mhfast=mhfast.cli:main"]},
)
