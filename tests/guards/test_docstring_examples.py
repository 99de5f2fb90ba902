"""Every example in mhfast's docstrings runs and prints what it shows (doctest), so the examples cannot rot.

Examples marked ``# doctest: +SKIP`` need a model or a GPU that tests do not have; the fairseq CMLM's
runs where fairseq is installed (it loads the bundled model).

    python3 -m pytest -q tests/guards/test_docstring_examples.py
"""
from __future__ import annotations

import doctest
import importlib
import importlib.util
import pkgutil

import pytest

import mhfast

NEEDS_FAIRSEQ = {"mhfast.models.fairseq_cmlm", "mhfast.models.fast_decoder", "mhfast.translation"}
MODULES = sorted(m.name for m in pkgutil.walk_packages(mhfast.__path__, "mhfast.") if not m.name.endswith("__main__"))


@pytest.mark.parametrize("name", MODULES)
def test_examples_run(name, one_torch_thread):
    if name in NEEDS_FAIRSEQ and importlib.util.find_spec("fairseq") is None:
        pytest.skip("fairseq is not installed")
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(module, name, globs=dict(vars(module))):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed (output above)"


def test_the_modules_are_found():
    assert "mhfast.runtime.rng" in MODULES and "mhfast.allocator" in MODULES and len(MODULES) > 40
