"""Behaviour fixed across refactors: chains, energies and CLI bytes equal the goldens of tests/golden/.

The goldens were taken before the Python layer was reshaped (sampler kernels + driver, one option
spec); see tests/golden_cases.py for the cases and how (and when) to regenerate them.
"""
from __future__ import annotations

import json

import pytest

from golden_cases import GOLDEN_DIR, SAMPLER_CASES, cli_cases
from hf_tiny_models import save_tiny_bert_dir

SAMPLER_GOLDEN = json.loads((GOLDEN_DIR / "sampler.json").read_text())
CLI_GOLDEN = json.loads((GOLDEN_DIR / "cli.json").read_text())


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_golden_files_cover_every_case():
    assert sorted(SAMPLER_GOLDEN) == sorted(SAMPLER_CASES)
    assert len(CLI_GOLDEN) == 5


@pytest.mark.parametrize("name", sorted(SAMPLER_CASES))
def test_sampler_golden(name):
    got, want = SAMPLER_CASES[name](), SAMPLER_GOLDEN[name]
    for key in want:  # key by key, so a failure names what changed
        assert got[key] == want[key], f"{name}: {key} differs from the golden"
    assert sorted(got) == sorted(want)


@pytest.fixture(scope="module")
def tiny_bert_dir(tmp_path_factory):
    return save_tiny_bert_dir(tmp_path_factory.mktemp("golden") / "tiny_bert")


@pytest.mark.parametrize("name", sorted(CLI_GOLDEN))
def test_cli_golden(name, tiny_bert_dir):
    got = cli_cases(tiny_bert_dir)[name]()
    want = CLI_GOLDEN[name]
    assert got["code"] == want["code"] == 0
    assert got["stdout"] == want["stdout"]
    assert got["stderr"] == want["stderr"]
