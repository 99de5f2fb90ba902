"""Printed labels say what the printed number is (issue 37, item 4).

With an energy term on, ``mhfast sample``'s ``best:`` line and ``translate``'s ``E-`` line printed
``E_raw + weighted terms`` under the label ``E_raw``; run summaries said "post-burn-in" over all
epochs when burn-in took every epoch. Here every energy a ``sample`` run prints is recomputed from
the printed sequence and compared with the number under its label, with and without a term; the
``E-`` label, and the epochs each summary averages, are checked in ``translate`` and ``evaluate``.
(``mhfast score``'s columns are recomputed the same way in tests/cli/test_scoring_cli.py.)
"""
from __future__ import annotations

import json
import re

import pytest

import mhfast
from cli_runner import run_main
from hf_tiny_models import save_tiny_bert_dir
from mhfast.commands.translate import format_sentence
from mhfast.translation import Hypothesis

INITS = ["a b c d", "g f e d"]
HAMMING = 2.0


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny BERT's directory and the model mhfast loads from it."""
    from mhfast.models.loading import load_masked_lm

    path = save_tiny_bert_dir(tmp_path_factory.mktemp("labels") / "bert")
    return path, load_masked_lm(path)


def _cli(*argv: str) -> str:
    """stdout of a command that must succeed."""
    code, out, err = run_main(list(argv))
    assert code == 0, err
    return out


def _labelled(text: str) -> tuple[str, float]:
    label, _, value = text.partition("=")
    return label, float(value)


@pytest.mark.parametrize("terms", [False, True])
def test_every_energy_sample_prints_is_what_its_label_says(tiny, terms):
    path, lm = tiny
    out = _cli("sample", "--model", path, "--init", *INITS, "--free", "1:3", "--chains", "2", "--epochs", "3",
               "--burn-in", "1", "--seed", "5", *(["--hamming", str(HAMMING)] if terms else []))
    checked = 0
    for line in out.splitlines():
        if line.startswith("[raw] input"):
            reference = lm.encode(INITS[int(line.split()[-1]) - 1])
        elif line.startswith("  ") and "\t" in line:
            text, *numbers = line.strip().removeprefix("best: ").split("\t")
            ids = lm.encode(text)
            e = mhfast.energy(lm, ids[None])
            truth = {"E_raw": float(e.e_raw[0]), "E_local": float(e.e_local[0]),
                     "E_raw+terms": float(e.e_raw[0]) + HAMMING * int((ids != reference).sum())}
            for label, value in map(_labelled, numbers):
                assert value == pytest.approx(truth[label], abs=2e-3), f"{label} of {line!r}"
                checked += 1
            if line.strip().startswith("best:"):
                assert numbers[0].startswith("E_raw+terms=" if terms else "E_raw="), line
    assert checked == len(INITS) * (2 * 2 + 1)  # two labelled energies per chain, one per best line


@pytest.mark.parametrize("burn_in,which", [("1", "post-burn-in epochs"),
                                           ("2", "all epochs, as burn-in takes every epoch")])
def test_the_sample_summary_names_the_epochs_it_averages(tiny, burn_in, which):
    out = _cli("sample", "--model", tiny[0], "--length", "3", "--chains", "2", "--epochs", "2", "--burn-in",
               burn_in, "--quiet")
    summary = [line for line in out.splitlines() if line.startswith("[raw] acceptance")]
    assert len(summary) == 1 and f"(mean over {which})" in summary[0], summary


def test_the_translate_e_line_labels_the_target_energy():
    hyp = lambda with_terms: Hypothesis("a b", ["a", "b"], -1.5, {  # noqa: E731
        "energy": "local", "best_energy": 3.0, "with_terms": with_terms, "chains_raw": [1.0], "chains_local": [2.0]})
    assert "\nE-4\tE_local=3.0000\traw=1.0000\tlocal=2.0000\n" in format_sentence(4, "x y", hyp(False), "fairseq")
    assert "\nE-4\tE_local+terms=3.0000\t" in format_sentence(4, "x y", hyp(True), "fairseq")


def test_translate_with_a_term_prints_e_raw_plus_terms(tmp_path):
    """End to end on the bundled model: the translator says when its best energy holds terms."""
    src, ref = tmp_path / "src.de", tmp_path / "ref.en"
    src.write_text("Ein Hund läuft.\n")
    argv = ["translate", "--input", str(src), "--format", "fairseq", "--chains", "1", "--epochs", "2", "--burn-in", "0",
            "--length-beam", "1", "-q"]
    plain = _cli(*argv)
    # a Hamming reference must have the target's (predicted) length: the plain run's own translation has it
    ref.write_text(re.search(r"^D-0\t\S+\t(.*)$", plain, re.M).group(1) + "\n")
    steered = _cli(*argv, "--hamming", "1", "--hamming-reference", str(ref))
    assert re.search(r"^E-0\tE_raw=-?\d", plain, re.M) and re.search(r"^E-0\tE_raw\+terms=-?\d", steered, re.M)


def _stats(burn_in: int, epochs: int) -> dict:
    rows = [{"epoch": e, "acceptance_rate": 0.5 + 0.1 * e, "novel_rate": 0.1, "e_raw": -10.0, "e_local": 5.0,
             "target_temperature": 1.0} for e in range(epochs)]
    return {"version": 1, "method": "mh", "burn_in": burn_in, "batches": [{"start": 0, "end": 1, "sentences": 1,
                                                                         "epochs": rows}]}


@pytest.mark.parametrize("burn_in,label,accept", [(1, "post-burn-in mean:", 0.65),
                                                  (3, "mean over all epochs, as burn-in takes every epoch:", 0.6)])
def test_evaluate_names_the_epochs_it_averages(tmp_path, burn_in, label, accept):
    stats = tmp_path / "stats.json"
    stats.write_text(json.dumps(_stats(burn_in, 3)))
    out = _cli("evaluate", "--stats", str(stats))
    summary = [line for line in out.splitlines() if "mean" in line and "accept " in line]
    assert len(summary) == 1 and summary[0].startswith(label) and f"accept {accept:.4f}" in summary[0], summary


def test_target_label_is_the_one_rule():
    from mhfast.sampler.result import target_label

    assert [target_label(e, t) for e in ("raw", "local") for t in (False, True)] == [
        "E_raw", "E_raw+terms", "E_local", "E_local+terms"]
