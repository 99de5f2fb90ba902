"""Shared fixtures: the ``device`` every op test runs on; the tiny fairseq CMLM (``cmlm``, its ``sources``).

"cpu" always; "cuda" too when a GPU is visible, and then the build MUST have CUDA kernels
(a GPU machine with a CPU-only build is a broken install: it fails, it is never skipped).

``tiny_paths`` trains the tiny CMLM of tests/fairseq_tiny_cmlm.py once per test session (~1-2 min)
for every test module that needs it; MHFAST_FAIRSEQ_CACHE names a folder to reuse it across sessions.
"""
from __future__ import annotations

import os

import pytest
import torch

import mhfast
from leak_guard import changed_settings, leaked_since, settings, threads_and_children

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def pytest_configure(config):
    """No tqdm monitor thread in the test process: several tests fork runs of ``mhfast translate`` from
    it (why that matters: resume_harness.no_tqdm_monitor_thread). Likewise inductor compiles in the test
    process itself, not in a pool of compile workers that would outlive the compile tests (torch keeps that
    pool for the life of the process; the compile tests still compile for real, on a cold cache in CI)."""
    from resume_harness import no_tqdm_monitor_thread

    no_tqdm_monitor_thread()
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")


# Needs the tiny fairseq CMLM, trained once per session (1-2 min on 2 cores without MHFAST_FAIRSEQ_CACHE).
SLOW_FIXTURES = {"tiny_paths"}


def pytest_collection_modifyitems(config, items):
    """``slow`` (pyproject.toml) also on every test that needs a fixture of SLOW_FIXTURES, so that a quick run
    (``-m "not slow"``) never trains the tiny CMLM; the other slow tests carry the marker themselves."""
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def no_leaked_threads_or_processes():
    """Fails (at teardown) the test that leaves a Python thread or a child process behind, naming them
    (tests/leak_guard.py says why)."""
    before = threads_and_children()
    yield
    problems = leaked_since(before)
    if problems:
        pytest.fail("this test left " + "; ".join(problems), pytrace=False)


@pytest.fixture(autouse=True, scope="module")
def no_changed_settings():
    """Fails (at the module's teardown) a module that leaves torch's thread count, default dtype, grad mode,
    the working directory, sys.path or the environment changed."""
    before = settings()
    yield
    problems = changed_settings(before)
    if problems:
        pytest.fail("this module left process-wide settings changed: " + "; ".join(problems), pytrace=False)


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    if request.param == "cuda":
        assert mhfast.built_with_cuda(), (
            "a GPU is visible but mhfast._C has no CUDA kernels: rebuild without MHFAST_FORCE_CPU"
        )
    return request.param


@pytest.fixture(scope="module")
def one_torch_thread():
    """One torch thread for a module of many small ops: on the shared 2-core CI machine intra-op
    threads only spin against each other. Modules opt in with
    ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def tiny_paths(tmp_path_factory):
    """Paths of the tiny fairseq CMLM (``checkpoint``, ``data``, ``valid_de``, ``valid_en``), built once."""
    from fairseq_tiny_cmlm import build

    cache = os.environ.get("MHFAST_FAIRSEQ_CACHE") or tmp_path_factory.mktemp("fairseq_cmlm")
    return build(cache)


@pytest.fixture(scope="session")
def cmlm(tiny_paths):
    """The tiny fairseq CMLM behind mhfast's adapter (tests/models/test_fairseq_cmlm.py, tests/models/test_fast_decoder.py)."""
    from fairseq_tiny_cmlm import tokenize
    from mhfast.models.fairseq_cmlm import load_fairseq_cmlm

    return load_fairseq_cmlm(tiny_paths["checkpoint"], tiny_paths["data"], tokenizer=tokenize)


@pytest.fixture(scope="session")
def sources(tiny_paths):
    """16 held-out German sentences (already tokenized; the tokenizer is idempotent on them)."""
    return tiny_paths["valid_de"].read_text(encoding="utf-8").splitlines()[:16]


@pytest.fixture(scope="module")
def bundled():
    """The bundled Multi30k De->En translator (mhfast translate's default model), loaded once per module."""
    from mhfast.translation import bundle_missing, load_bundled_model

    if bundle_missing():
        pytest.skip(f"bundled model files missing: {bundle_missing()}")
    return load_bundled_model()
