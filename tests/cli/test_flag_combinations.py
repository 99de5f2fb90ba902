"""Random combinations of ``mhfast sample``'s flags (hypothesis) on a tiny random BERT directory, and of ``mhfast
translate``'s on the bundled CMLM (one translation per sentence, on stdout or in --output): every run exits
with status 2 and ONE stderr line naming a flag, or exits 0 printing, per input, one line per chain whose E_raw and
E_local are the model's energies of the printed sequence.

Why: the option-combination test (tests/sampler/test_option_combinations.py) sweeps the API; the command adds its
own layer (flags, energy-term flags turned into extra_energy, the diagnostics flags, printing). A sweep like this
one found errors that named API arguments instead of flags (``extra_energy cannot be used with sampler='gibbs'``
for ``--hamming 1 --sampler gibbs``, 2026-11-29) and flags a run ignored silently (``--trace-every`` with nothing
that reads the traces).
"""
from __future__ import annotations

import re

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mhfast
from cli_runner import run_main
from hf_tiny_models import save_tiny_bert_dir

pytestmark = pytest.mark.usefixtures("one_torch_thread")

INPUTS = {"length": (["--length", "4"], 1), "init": (["--init", "a b c", "d e"], 2),
          "free": (["--init", "a b c d", "--free", "1:3"], 1)}
TEMPERATURES = {"fixed": [], "cold": ["--target-temperature", "0.2"], "annealed": ["--anneal", "0.2"],
                "tuned ladder": ["--tempering", "3", "--target-temperature", "0.5"],
                "fixed ladder": ["--tempering", "0.5,1,2", "--target-temperature", "0.5"]}


@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> tuple[str, object]:
    from mhfast.models.loading import load_masked_lm

    path = save_tiny_bert_dir(tmp_path_factory.mktemp("bert") / "bert")
    return path, load_masked_lm(path)


@st.composite
def flags(draw) -> tuple[list[str], int, int]:
    """(the flags after --model, inputs, chains), weighted toward single-site MH, whose flags meet in most ways."""
    inputs, n_in = INPUTS[draw(st.sampled_from(sorted(INPUTS)))]
    sampler = draw(st.sampled_from(["mh", "mh", "mh", "block-mh", "gibbs", "block-gibbs"]))
    chains, epochs = draw(st.sampled_from([1, 2, 4])), draw(st.integers(2, 5))
    argv = [*inputs, "--sampler", sampler, "--chains", str(chains), "--epochs", str(epochs),
            "--burn-in", str(draw(st.integers(0, epochs))), "--seed", str(draw(st.integers(0, 2 ** 31))),
            "--energy", draw(st.sampled_from(["raw", "local", "both"]))]
    maybe = lambda *choices: draw(st.sampled_from([[], *choices]))  # noqa: E731  (one flag or none)
    if sampler in ("mh", "block-mh"):
        argv += TEMPERATURES[draw(st.sampled_from(sorted(TEMPERATURES)))]
        argv += maybe(["--force-accept-epochs", "1"])
        argv += maybe(["--delayed", "auto"], ["--delayed", "influence:2"], ["--delayed", "early:1"],
                      ["--delayed", "cascade:1"], ["--delayed", "window:0"])
    argv += maybe(["--hamming", "0.5"])  # (its references: the --init sequences, or the start's)
    argv += maybe(["--order", "left-to-right"]) + maybe(["--top-p", "0.9"]) + maybe(["--memo", "0"], ["--memo", "4"])
    argv += maybe(["--backend", "reference"]) + maybe(["--max-tokens-per-batch", "8"]) + maybe(["--forward", "full"])
    argv += maybe(["--capture", "static"]) + maybe(["--start", "sampled"], ["--start", "random"])
    argv += maybe(["--until-rhat", "1.1"]) + maybe(["--min-ess", "5"]) + maybe(["--diagnostics"])
    argv += maybe(["--trace-every", "2"]) + maybe(["--quiet"])
    return argv, n_in, chains


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(flags())
def test_a_command_is_refused_naming_a_flag_or_prints_exact_energies(bert, case):
    argv, n_in, chains = case
    path, lm = bert
    code, out, err = run_main(["sample", "--model", path, *argv])
    if code == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and re.search(r"error: (.*\W)?--[a-z]", lines[0]), (argv, err)  # names a flag
        return
    assert code == 0, (argv, err)
    samples = [line.strip() for line in out.splitlines() if line.startswith("  ") and "\tE_raw=" in line
               and "best:" not in line]
    runs = 2 if "both" in argv else 1  # --energy both: raw-MH, then local-MH, each printed
    assert len(samples) == runs * n_in * chains, (argv, out)
    for line in samples:
        text, raw, local = line.split("\t")
        e = mhfast.energy(lm, lm.encode(text)[None])
        got = torch.tensor([float(raw.split("=")[1]), float(local.split("=")[1])])
        assert torch.allclose(got, torch.stack([e.e_raw[0], e.e_local[0]]).float(), atol=2e-3), (argv, line)


SOURCES = ["Ein Mann fährt Fahrrad .", "Zwei Hunde spielen im Schnee .", "Eine Frau liest ein Buch ."]


@st.composite
def translate_flags(draw) -> tuple[list[str], int]:
    """(``mhfast translate``'s flags after --input, the sentences it must print): MH or Mask-Predict, the output
    to stdout or to --output in either format, a --limit, batches."""
    n = draw(st.integers(1, 3))
    argv = ["--threads", "1", "--limit", str(n), "--batch-size", str(draw(st.sampled_from([1, 2, 16])))]
    if draw(st.integers(0, 3)) == 0:
        argv += ["--method", "mask-predict", "--iterations", str(draw(st.integers(1, 3))),
                 "--length-beam", str(draw(st.integers(1, 3)))]
        return argv, n
    sampler = draw(st.sampled_from(["mh", "mh", "block-mh", "gibbs"]))
    chains, epochs = draw(st.sampled_from([1, 2])), draw(st.integers(2, 3))
    argv += ["--sampler", sampler, "--chains", str(chains), "--epochs", str(epochs), "--burn-in",
             str(draw(st.integers(0, epochs))), "--seed", str(draw(st.integers(0, 2 ** 31))),
             "--energy", draw(st.sampled_from(["raw", "local"])), "--length-beam", str(draw(st.integers(1, 2)))]
    maybe = lambda *choices: draw(st.sampled_from([[], *choices]))  # noqa: E731
    if sampler != "gibbs":
        argv += maybe(["--anneal", "0.3"], ["--tempering", "2"], ["--target-temperature", "0.2"])
        argv += maybe(["--delayed", "auto"], ["--delayed", "influence:2"], ["--delayed", "cascade:1"])
    argv += maybe(["--memo", "0"]) + maybe(["--start", "sampled"]) + maybe(["--until-rhat", "1.2"])
    argv += maybe(["--diagnostics"]) + maybe(["--max-tokens-per-batch", "64"])
    return argv, n


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(translate_flags(), st.sampled_from(["plain", "fairseq"]), st.booleans())
def test_translate_is_refused_naming_a_flag_or_prints_one_translation_per_sentence(tmp_path_factory, case, fmt,
                                                                                     to_file):
    """Each of the first --limit sentences gets one translation (a line, or fairseq's H- line), on stdout or in
    --output."""
    argv, n = case
    folder = tmp_path_factory.mktemp("translate")
    source = folder / "in.de"
    source.write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    output = folder / "out.txt"
    code, out, err = run_main(["translate", "--input", str(source), "-q", "--format", fmt, *argv]
                               + (["--output", str(output)] if to_file else []))
    if code == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and re.search(r"error: (.*\W)?--[a-z]", lines[0]), (argv, err)
        return
    assert code == 0, (argv, err)
    text = output.read_text(encoding="utf-8") if to_file else out
    hypotheses = [line for line in text.splitlines() if line.startswith("H-")] if fmt == "fairseq" else \
        text.splitlines()
    assert len(hypotheses) == n and all(h.strip() for h in hypotheses), (argv, text)
