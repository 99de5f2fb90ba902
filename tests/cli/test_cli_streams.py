"""``mhfast translate`` input and output streams: one output line per input line whatever separators
a line holds, bad UTF-8 and closed streams as one-line errors, empty input, and a reader that goes
away (``| head``) ends the command quietly."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mhfast.cli import main
from resume_harness import tiny_translator

ROOT = Path(__file__).resolve().parents[2]
SEPARATORS = ["\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.fixture(scope="module")
def translator(tiny_paths):
    return tiny_translator(str(tiny_paths["checkpoint"]), str(tiny_paths["data"]))


@pytest.fixture
def cli(tiny_paths, translator, monkeypatch, capsys):
    import mhfast.commands.translate as translate

    monkeypatch.setattr(translate, "_load", lambda args: translator)
    model = ["--model", str(tiny_paths["checkpoint"]), "--data", str(tiny_paths["data"]), "--tokenizer", "none",
             "--method", "mask-predict", "--iterations", "2", "--quiet"]

    def run(extra: list[str]) -> tuple[int, str, str]:
        code = main(["translate", *model, *extra])
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.mark.slow  # 19 s on the 2-core CI machine
def test_one_output_line_per_input_line(cli, translator, tiny_paths, tmp_path):
    words = tiny_paths["valid_de"].read_text(encoding="utf-8").split("\n")[0].split()
    lines = [f"{words[0]}{sep}{' '.join(words[1:])}" for sep in SEPARATORS] + [" ".join(words)]
    src = tmp_path / "src.txt"
    src.write_bytes("\r\n".join(lines).encode("utf-8"))  # "\r\n" endings, no final one
    code, out, err = cli(["--input", str(src), "--format", "fairseq"])
    assert code == 0, err
    sources = [line.split("\t", 1)[1] for line in out.split("\n") if line.startswith("S-")]
    assert sources == [line.strip() for line in lines]  # each line intact, in its place
    code, out, err = cli(["--input", str(src)])
    got = out.split("\n")
    assert len(got) == len(lines) + 1 and got[-1] == ""
    for i, line in enumerate(lines):  # the translation of that line alone
        assert got[i] == translator.translate([line.strip()], method="mask-predict", iterations=2).hypotheses[0].text


def test_bad_utf8_and_closed_streams_are_one_line_errors(cli, tmp_path, monkeypatch):
    src = tmp_path / "src.txt"
    src.write_bytes(b"ein hund .\nzwei hunde .\ndrei \xe4pfel .\n")
    code, out, err = cli(["--input", str(src)])
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"mhfast translate: error: --input {str(src)!r}: line 3: not valid UTF-8 (byte 0xe4 at byte column 6)" in err
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"ein hund .\n\xff\n")))
    code, out, err = cli([])
    assert code == 2 and "--input (stdin): line 2: not valid UTF-8" in err and err.count("\n") == 1
    monkeypatch.setattr(sys, "stdin", None)  # started with fd 0 closed
    code, out, err = cli([])
    assert code == 2 and "stdin is closed" in err and err.count("\n") == 1
    monkeypatch.setattr(sys, "stdout", None)  # started with fd 1 closed
    src.write_bytes(b"ein hund .\n")
    code, _, err = cli(["--input", str(src)])
    assert code == 2 and "stdout is closed: give --output FILE" in err and err.count("\n") == 1


def test_empty_input(cli, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    out_file = tmp_path / "out.txt"
    assert cli(["--input", str(empty)]) == (0, "", "")
    code, out, err = cli(["--input", str(empty), "--ref", str(empty), "--output", str(out_file), "--format", "fairseq"])
    assert (code, out, err) == (0, "", "") and out_file.read_bytes() == b""
    record = json.loads(Path(str(out_file) + ".progress").read_text())
    assert record["lines_done"] == record["total_lines"] == 0
    assert cli(["--input", str(empty), "--ref", str(empty), "--output", str(out_file), "--format", "fairseq",
                "--resume"])[0] == 0


class BrokenStdout(io.TextIOBase):
    """stdout whose reader went away: every write raises EPIPE."""

    class buffer:  # noqa: N801 (the attribute name of sys.stdout)
        @staticmethod
        def write(data):
            raise BrokenPipeError(32, "Broken pipe")

        flush = staticmethod(lambda: None)

    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")


def test_broken_stdout_ends_quietly(cli, tmp_path, monkeypatch):
    src = tmp_path / "src.txt"
    src.write_bytes(b"ein hund .\n")
    monkeypatch.setattr(sys, "stdout", BrokenStdout())
    code, _, err = cli(["--input", str(src)])
    assert code == 141 and err == ""


def test_head_closing_the_pipe_ends_quietly(tiny_paths, tmp_path):
    """A real pipe: the reader takes one line and closes; the writer, still translating, ends at once
    with status 141 and nothing on stderr (no traceback, no "Exception ignored")."""
    lines = tiny_paths["valid_de"].read_text(encoding="utf-8").split("\n")[:-1][:20] * 10
    src = tmp_path / "src.txt"
    src.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "mhfast", "translate", "--model", str(tiny_paths["checkpoint"]),
                             "--data", str(tiny_paths["data"]), "--tokenizer", "none", "--method", "mask-predict",
                             "--iterations", "2", "--batch-size", "1", "--quiet", "--input", str(src)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=env)
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 141, err
    assert first.endswith(b"\n") and err == b""


def test_output_that_is_not_a_regular_file(cli, tmp_path):
    """/dev/null (a device) is written as a stream: no lock or record beside it, no --resume; a
    statistics file must be regular (it is replaced by rename); a missing folder is named."""
    src = tmp_path / "src.txt"
    src.write_bytes(b"ein hund .\n")
    assert cli(["--input", str(src), "--output", os.devnull]) == (0, "", "")
    assert not os.path.exists(os.devnull + ".lock") and not os.path.exists(os.devnull + ".progress")
    for extra, needle in ((["--output", os.devnull, "--resume"], "is not a regular file (nothing to continue)"),
                          (["--stats-out", os.devnull], "--stats-out: '/dev/null' is not a regular file"),
                          (["--output", str(tmp_path / "no" / "out.txt")], "--output: folder")):
        code, out, err = cli(["--input", str(src), *extra])
        assert code == 2 and needle in err and err.count("\n") == 1, err


def test_output_naming_stdout_redirected_to_a_file_appends_as_a_stream(tiny_paths, tmp_path):
    """``--output /dev/stdout >> log``: stdout's file is written as the stream it is (the log had been emptied and a
    progress record written into /dev as if /dev/stdout were the output file). /proc/self/fd/1 is the same file
    (journal.std_stream compares inodes)."""
    name = "/dev/stdout"
    src = tmp_path / "src.txt"
    src.write_bytes(b"ein hund .\nzwei katzen .\n")
    log = tmp_path / "log.txt"
    log.write_bytes(b"HEADER\n")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    with open(log, "ab") as out:
        proc = subprocess.run([sys.executable, "-m", "mhfast", "translate", "--model", str(tiny_paths["checkpoint"]),
                               "--data", str(tiny_paths["data"]), "--tokenizer", "none", "--method", "mask-predict",
                               "--iterations", "2", "--quiet", "--input", str(src), "--output", name],
                              stdout=out, stderr=subprocess.PIPE, cwd=ROOT, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = log.read_bytes().decode("utf-8").split("\n")
    assert lines[0] == "HEADER" and len(lines) == 4 and lines[1] and lines[2] and lines[3] == "", lines
    assert not os.path.exists(name + ".progress") and not os.path.exists(str(log) + ".progress")
