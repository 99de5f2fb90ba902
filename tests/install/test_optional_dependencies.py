"""mhfast works without its optional model libraries, and says what to install when one is needed.

Each case runs in a fresh interpreter in which ``import transformers`` and ``import fairseq`` fail
(``sys.modules[name] = None``), as on a machine where only torch is installed.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

BLOCK = "import sys\nsys.modules['transformers'] = None\nsys.modules['fairseq'] = None\n"


def run_without_optional_libs(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK + textwrap.dedent(code)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_core_sampler_runs_without_transformers_and_fairseq():
    proc = run_without_optional_libs("""
        import mhfast
        from mhfast.models.tabular import TabularMLM
        import mhfast.models.hf, mhfast.models.fairseq_cmlm   # the adapters import their libraries lazily
        r = mhfast.sample(TabularMLM.random(3, 2, seed=0), 2, chains=3, epochs=2, burn_in=1)
        print(tuple(r.tokens.shape))
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "(1, 3, 2)"


def test_hf_adapter_names_the_missing_package():
    proc = run_without_optional_libs("""
        from mhfast.models.hf import HFMaskedLM
        try:
            HFMaskedLM("some/model/dir")
        except ImportError as e:
            print("ImportError:", e)
    """)
    assert proc.returncode == 0, proc.stderr
    assert "ImportError:" in proc.stdout and "pip install transformers" in proc.stdout


def test_unsupported_model_object_gets_a_clear_error():
    from mhfast.models.loading import load_masked_lm

    with pytest.raises(TypeError, match="unsupported .*MaskedLM.*HuggingFace.*antiberty"):
        load_masked_lm(object())
