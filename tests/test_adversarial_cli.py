"""A table of bad command-line inputs (issue 11, adversarial half): each one ends with exit status 2
and ONE line on stderr naming the flag or file, no traceback and nothing on stdout.

Most rows run in-process through :func:`mhfast.cli.main` (fast); a few run as real subprocesses to
show that no traceback, crash or hang reaches the terminal. Models are tiny: a random BERT
directory (tests/hf_tiny_models.py) for ``sample``/``score``, and for ``translate`` the bundled
checkpoint, damaged on purpose (rows that load it fail while loading; the sampler options are
checked before anything is loaded).
"""
from __future__ import annotations

import os
import pickle
import subprocess
import sys

import pytest
import torch

from hf_tiny_models import save_tiny_bert_dir
from mhfast.cli import main
from mhfast.translation import BUNDLE_DIR

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = ["sample", "--model", "{bert}", "--length", "3", "--epochs", "2", "--burn-in", "0", "--chains", "2",
          "--quiet"]
TRANSLATE = ["translate", "--input", "{one}", "--epochs", "2", "--burn-in", "0", "--chains", "1", "-q"]
LOAD = TRANSLATE + ["--data", str(BUNDLE_DIR)]  # + --model CHECKPOINT
SCORE = ["score", "--input", "{one}", "--model", "{bert}", "-q"]

# -------------------------------------------------------------------- the sampler flags (both commands)
SAMPLER_FLAGS: list[tuple[list[str], str]] = [
    (["--chains", "0"], "--chains"), (["--chains", "-1"], "--chains"), (["--chains", "x"], "--chains"),
    (["--chains", "1.5"], "--chains"), (["--chains", "100000000000000"], "chains"),
    (["--epochs", "0"], "--epochs"), (["--epochs", "-3"], "--epochs"), (["--epochs", ""], "--epochs"),
    (["--burn-in", "-1"], "--burn-in"), (["--burn-in", "5"], "--burn-in"),
    (["--order", "sideways"], "--order"), (["--sampler", "hmc"], "--sampler"), (["--energy", "weird"], "--energy"),
    (["--proposal-temperature", "0"], "--proposal-temperature"),
    (["--proposal-temperature", "-1"], "--proposal-temperature"),
    (["--proposal-temperature", "nan"], "--proposal-temperature"),
    (["--proposal-temperature", "inf"], "--proposal-temperature"),
    (["--proposal-temperature", "1e40"], "--proposal-temperature"),
    (["--proposal-temperature", "1e-40"], "--proposal-temperature"),
    (["--proposal-temperature", "warm"], "--proposal-temperature"),
    (["--top-p", "0"], "--top-p"), (["--top-p", "1.5"], "--top-p"), (["--top-p", "nan"], "--top-p"),
    (["--top-p", "-0.1"], "--top-p"),
    (["--target-temperature", "0"], "--target-temperature"), (["--target-temperature", "-2"], "--target-temperature"),
    (["--target-temperature", "nan"], "--target-temperature"),
    (["--target-temperature", "inf"], "--target-temperature"),
    (["--target-temperature", "1e-40"], "--target-temperature"),
    (["--target-temperature", "1e40"], "--target-temperature"),
    (["--anneal", "-0.1"], "--anneal"), (["--anneal", "nan"], "--anneal"), (["--anneal", "inf"], "--anneal"),
    (["--anneal", "0.1", "--min-target-temperature", "0"], "--min-target-temperature"),
    (["--anneal", "0.1", "--min-target-temperature", "5"], "--min-target-temperature"),
    (["--anneal", "0.1", "--min-target-temperature", "1e-40"], "--min-target-temperature"),
    (["--force-accept-epochs", "-1"], "--force-accept-epochs"),
    (["--seed", str(2 ** 64)], "--seed"), (["--seed", str(-2 ** 63 - 1)], "--seed"), (["--seed", "1e3"], "--seed"),
    (["--device", "cuda:99"], "--device"), (["--device", "mps"], "--device"), (["--device", "tpu"], "--device"),
    (["--device", ""], "--device"), (["--device", "cpu:2"], "--device"), (["--device", "meta"], "--device"),
    (["--max-tokens-per-batch", "0"], "--max-tokens-per-batch"),
    (["--max-tokens-per-batch", "-5"], "--max-tokens-per-batch"),
    (["--block-schedule", "0"], "--block-schedule"), (["--block-schedule", "1,2,3"], "--block-schedule"),
    (["--block-schedule", "a,b"], "--block-schedule"), (["--block-schedule", "1,,2"], "--block-schedule"),
    (["--block-schedule", "-1"], "--block-schedule"),
    (["--dtype", "float64"], "--dtype"), (["--dtype", "int8"], "--dtype"), (["--backend", "gpu"], "--backend"),
    (["--hamming", "-1"], "--hamming"), (["--hamming", "nan"], "--hamming"),
    (["--hamming", "1", "--hamming-reference", "{d}/nonexistent"], "--hamming-reference"),
    (["--hamming", "1", "--hamming-reference", "{d}/binary.txt"], "--hamming-reference"),
    (["--classifier", "{d}/nonexistent"], "--classifier"),
    (["--classifier-weight", "inf"], "--classifier-weight"), (["--classifier-weight", "nan"], "--classifier-weight"),
    (["--classifier-label", ""], "--classifier-label"),
    # an option that another makes ineffective: an error naming both (issue 37), not a run that ignores it
    (["--block-schedule", "2"], "--block-schedule (2) has no effect with --sampler mh"),
    (["--sampler", "gibbs", "--block-schedule", "2"], "--block-schedule (2) has no effect with --sampler gibbs"),
    (["--sampler", "gibbs", "--target-temperature", "0.5"], "--target-temperature (0.5) has no effect with --sampler"),
    (["--sampler", "block-gibbs", "--anneal", "0.1"], "--anneal (0.1) has no effect with --sampler block-gibbs"),
    (["--sampler", "gibbs", "--force-accept-epochs", "1"], "--force-accept-epochs (1) has no effect with --sampler"),
    (["--min-target-temperature", "0.1"], "--min-target-temperature (0.1) has no effect without --anneal"),
    (["--force-accept-epochs", "3"], "--force-accept-epochs (3) must be <= --epochs (2)"),
    (["--classifier-label", "0"], "--classifier-label (0) has no effect without --classifier"),
    (["--classifier-weight", "2"], "--classifier-weight (2.0) has no effect without --classifier"),
]

# -------------------------------------------------------------------- command-specific rows
SAMPLE_ROWS: list[tuple[list[str], str]] = [
    (["sample", "--model", "{bert}", "--length", "0"], "--length"),
    (["sample", "--model", "{bert}", "--length", "-5"], "--length"),
    (["sample", "--model", "{bert}", "--length", "100000"], "length"),
    (["sample", "--model", "{bert}", "--length", "2.5"], "--length"),
    (["sample", "--model", "{bert}", "--length", "3", "--init", "a"], "--init"),
    (["sample", "--model", "{bert}", "--init", "a " * 200, "--epochs", "1", "--burn-in", "0"], "init"),
    (["sample", "--model", "{bert}", "--init", "", "--epochs", "1", "--burn-in", "0"], "init"),
    (["sample", "--model", "{bert}", "--init", "a b", "--free", "0:9"], "--free"),
    (["sample", "--model", "{bert}", "--init", "a b", "--free", "2:1"], "--free"),
    (["sample", "--model", "{bert}", "--init", "a b", "--free", "x"], "--free"),
    (["sample", "--model", "{bert}", "--init", "a b", "--free", "-1:1"], "--free"),
    (["sample", "--model", "{bert}", "--length", "3", "--free", "0:1"], "--free"),
    (["sample", "--model", "{bert}", "--init-file", "{d}/nonexistent"], "--init-file"),
    (["sample", "--model", "{bert}", "--init-file", "{d}/empty.txt"], "--init-file"),
    (["sample", "--model", "{bert}", "--init-file", "{d}/binary.txt"], "--init-file"),
    (["sample", "--model", "{bert}", "--init-file", "{d}"], "--init-file"),
    (["sample", "--model", "{d}/nonexistent", "--length", "3"], "--model"),
    (["sample", "--model", "{d}/empty_dir", "--length", "3"], "empty_dir"),
    (["sample", "--model", "{d}/bad_json", "--length", "3"], "bad_json"),
    (["sample", "--model", "{d}/no_weights", "--length", "3"], "no_weights"),
    (["sample", "--model", "{d}/empty.txt", "--length", "3"], "empty.txt"),
    (["sample", "--model", "{d}/truncated_bert", "--length", "3"], "truncated_bert"),
    (SAMPLE + ["--classifier", "{bert}"], "classifier"),  # a masked LM has no trained classification head
    (SAMPLE + ["--classifier", "{d}/bad_json"], "bad_json"),
    (SAMPLE + ["--classifier", "{d}/empty_dir"], "empty_dir"),
    (["sample", "--model", "", "--length", "3"], "model"),
    (["sample", "--energy", "both", "--model", "{bert}", "--chains", "0"], "--chains"),
    (["sample", "--bogus"], "--bogus"),
]
TRANSLATE_ROWS: list[tuple[list[str], str]] = [
    (TRANSLATE + ["--threads", "100000"], "--threads"), (TRANSLATE + ["--threads", "-1"], "--threads"),
    (TRANSLATE + ["--threads", str(10 ** 9)], "--threads"), (TRANSLATE + ["--threads", "two"], "--threads"),
    (TRANSLATE + ["--batch-size", "0"], "--batch-size"), (TRANSLATE + ["--length-beam", "100000"], "length_beam"), (TRANSLATE + ["--length-beam", "0"], "--length-beam"),
    (TRANSLATE + ["--method", "mask-predict", "--iterations", "0"], "--iterations"),
    (TRANSLATE + ["--method", "beam"], "--method"), (TRANSLATE + ["--limit", "-1"], "--limit"),
    (TRANSLATE + ["--resume"], "--resume"), (TRANSLATE + ["--format", "json"], "--format"),
    (TRANSLATE + ["--model", "{d}/truncated.pt"], "--model needs --data"),
    (TRANSLATE + ["--data", str(BUNDLE_DIR)], "--data"),
    (LOAD + ["--model", "{d}/truncated.pt"], "truncated.pt"),
    (LOAD + ["--model", "{d}/garbage.pt"], "garbage.pt"),
    (LOAD + ["--model", "{d}/empty.txt"], "empty.txt"),
    (LOAD + ["--model", "{d}/wrong_kind.pt"], "wrong_kind.pt"),
    (LOAD + ["--model", "{d}/a_list.pt"], "a_list.pt"),
    (LOAD + ["--model", "{d}/no_config.pt"], "no_config.pt"),
    (LOAD + ["--model", "{d}/nonexistent.pt"], "nonexistent.pt"),
    (LOAD + ["--model", "{d}"], "--model"),
    (LOAD + ["--model", str(BUNDLE_DIR / "model.pt"), "--spm", "{d}/garbage.pt"], "--spm"),
    (LOAD + ["--model", str(BUNDLE_DIR / "model.pt"), "--spm", "{d}/nonexistent"], "--spm"),
    (TRANSLATE + ["--model", str(BUNDLE_DIR / "model.pt"), "--data", "{d}/bad_dict", "--tokenizer", "none"],
     "dict.de.txt"),
    (TRANSLATE + ["--model", str(BUNDLE_DIR / "model.pt"), "--data", "{d}/short_dict", "--tokenizer", "none"],
     "do not fit"),
    (TRANSLATE + ["--model", str(BUNDLE_DIR / "model.pt"), "--data", "{d}/nonexistent"], "--data"),
    (TRANSLATE + ["--model", str(BUNDLE_DIR / "model.pt"), "--data", "{d}/empty_dir"], "empty_dir"),
    (["translate", "--input", "{d}/binary.txt", "-q"], "--input"),
    (["translate", "--input", "{d}/nonexistent", "-q"], "--input"),
    (["translate", "--input", "{d}", "-q"], "--input"),
    (TRANSLATE + ["--ref", "{d}/empty.txt"], "--ref"), (TRANSLATE + ["--output", "{d}"], "--output"),
    (TRANSLATE + ["--output", "{d}/no/such/folder.txt"], "--output"),
    (TRANSLATE + ["--stats-out", "{d}"], "--stats-out"),
    (TRANSLATE + ["--spm", "x", "--tokenizer", "none"], "--tokenizer"),
    (TRANSLATE + ["--method", "mask-predict"], "--chains has no effect with --method mask-predict"),
    (["translate", "--input", "{one}", "-q", "--method", "mask-predict", "--hamming", "1"],
     "--hamming has no effect with --method mask-predict"),
    (["translate", "--input", "{one}", "-q", "--iterations", "3"], "--iterations (3) has no effect with --method mh"),
]
SCORE_ROWS: list[tuple[list[str], str]] = [
    (SCORE + ["--batch-size", "0"], "--batch-size"), (SCORE + ["--max-tokens-per-batch", "0"], "--max-tokens"),
    (SCORE + ["--device", "cuda:99"], "--device"), (SCORE + ["--device", "cpu:1"], "--device"),
    (SCORE + ["--metric", "x"], "--metric"),
    (["score", "--input", "{one}", "--model", "{d}/bad_json", "-q"], "bad_json"),
    (["score", "--input", "{one}", "--model", "{d}/truncated_bert", "-q"], "truncated_bert"),
    (["score", "--input", "{d}/binary.txt", "--model", "{bert}", "-q"], "--input"),
    (["score", "--input", "{one}", "--model", "{bert}", "--ids", "-q"], "--input"),
    (["score", "--input", "{one}", "--model", "bundled", "--source", "{d}/empty.txt", "-q"], "--source"),
]
EVALUATE_ROWS: list[tuple[list[str], str]] = [
    (["evaluate"], "--hyp"), (["evaluate", "--hyp", "{one}", "--ref", "{d}/empty.txt"], "--ref"),
    (["evaluate", "--hyp", "{d}/binary.txt", "--ref", "{one}"], "--hyp"),
    (["evaluate", "--hyp", "{d}/nonexistent", "--ref", "{one}"], "--hyp"),
    (["evaluate", "--stats", "{d}/binary.txt"], "--stats"), (["evaluate", "--stats", "{one}"], "--stats"),
    (["evaluate", "--stats", "{d}/nonexistent"], "--stats"),
]
ROWS = ([(SAMPLE + flags, needle) for flags, needle in SAMPLER_FLAGS]
        + [(TRANSLATE + flags, needle) for flags, needle in SAMPLER_FLAGS]
        + SAMPLE_ROWS + TRANSLATE_ROWS + SCORE_ROWS + EVALUATE_ROWS + [(["nocommand"], "nocommand")])


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict:
    """The tiny BERT, a one-line input and a folder of damaged files."""
    d = tmp_path_factory.mktemp("adversarial")
    (d / "empty.txt").write_bytes(b"")
    (d / "binary.txt").write_bytes(b"\xff\xfe\x00abc\n")
    (d / "one.txt").write_text("ein Hund .\n")
    (d / "empty_dir").mkdir()
    (d / "bad_json").mkdir()
    (d / "bad_json" / "config.json").write_text("{not json")
    (d / "no_weights").mkdir()
    (d / "no_weights" / "config.json").write_text('{"model_type": "bert"}')
    checkpoint = (BUNDLE_DIR / "model.pt").read_bytes()
    (d / "truncated.pt").write_bytes(checkpoint[: len(checkpoint) // 2])
    (d / "garbage.pt").write_bytes(b"not a checkpoint " * 20)
    torch.save({"weights": torch.zeros(2)}, d / "wrong_kind.pt")
    torch.save([1, 2, 3], d / "a_list.pt")
    torch.save({"model": {"w": torch.zeros(1)}, "cfg": {"task": {}}}, d / "no_config.pt", pickle_protocol=pickle.HIGHEST_PROTOCOL)
    for name in ("bad_dict", "short_dict"):
        (d / name).mkdir()
        (d / name / "dict.en.txt").write_bytes((BUNDLE_DIR / "dict.en.txt").read_bytes())
    (d / "bad_dict" / "dict.de.txt").write_text("no_count_here\n")
    (d / "short_dict" / "dict.de.txt").write_text("".join(f"w{i} 1\n" for i in range(20)))
    bert = save_tiny_bert_dir(d / "tiny_bert")
    (d / "truncated_bert").mkdir()
    for f in os.listdir(bert):
        data = (d / "tiny_bert" / f).read_bytes()
        (d / "truncated_bert" / f).write_bytes(data[: len(data) // 2] if f.endswith((".safetensors", ".bin")) else data)
    return {"d": str(d), "bert": str(bert), "one": str(d / "one.txt")}


def _argv(template: list[str], paths: dict) -> list[str]:
    return [a.format(**paths) for a in template]


def _one_error_line(err: str, needle: str) -> str:
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{err}"
    assert lines[0].startswith("mhfast") and "error:" in lines[0], lines[0]
    assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    return lines[0]


def test_the_table_is_large_enough():
    assert len(ROWS) >= 100
    assert len({tuple(argv) for argv, _ in ROWS}) == len(ROWS), "duplicate rows"


@pytest.mark.parametrize("template,needle", ROWS, ids=[" ".join(a[:1] + a[-2:])[:60] for a, _ in ROWS])
def test_bad_input_is_one_line_and_status_2(template, needle, paths, capsys):
    try:
        code = main(_argv(template, paths))
    except SystemExit as e:  # argparse's own errors
        code = e.code
    out, err = capsys.readouterr()
    assert code == 2, f"exit status {code}; stderr: {err}"
    assert out == "", out
    _one_error_line(err, needle)


# -------------------------------------------------------------------- real processes
def _run(args: list[str], shell_suffix: str = "", timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("MHFAST_DEBUG", None)
    command = " ".join(f"'{a}'" for a in [sys.executable, "-m", "mhfast", *args]) + shell_suffix
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


@pytest.mark.parametrize("template,needle", [
    (TRANSLATE + ["--threads", "100000"], "--threads"),  # reached torch unchecked: a crash
    (LOAD + ["--model", "{d}/truncated.pt"], "truncated.pt"),
])
def test_no_traceback_or_crash_reaches_the_terminal(template, needle, paths):
    proc = _run(_argv(template, paths))
    assert proc.returncode == 2, (proc.returncode, proc.stderr)  # a signal would be negative
    assert proc.stdout == ""
    _one_error_line(proc.stderr, needle)


def test_empty_score_input_reports_no_nan(paths, capsys):
    """Empty input is valid (an empty output), but the summary must not print a NaN perplexity."""
    assert main(["score", "--input", f"{paths['d']}/empty.txt", "--model", paths["bert"]]) == 0
    out, err = capsys.readouterr()
    assert out == "" and "nan" not in err.lower() and "0 sequences scored" in err, err


def test_closed_stdin_is_one_line(paths):
    proc = _run(["translate", "-q", "--epochs", "1", "--burn-in", "0"], shell_suffix=" <&-", timeout=60)
    assert proc.returncode == 2, proc.stderr
    _one_error_line(proc.stderr, "stdin")
