"""Resume property test: ``mhfast translate`` SIGKILLed at random points, resumed (and killed again)
until done, always ends with the bytes of an uninterrupted run (output and statistics file).

Kill points are random file operations of the commit protocol (torn writes included) and random
wall-clock instants; runs are forked from this process with the tiny fairseq CMLM already loaded
(tests/resume_harness.py), so each costs a fraction of a second. The long version with more kills
and fresh processes is scripts/resume_kill_stress.py.
"""
from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

from resume_harness import KILLED, forked_translate, tiny_translator


@pytest.fixture(scope="module")
def translator(tiny_paths):
    return tiny_translator(str(tiny_paths["checkpoint"]), str(tiny_paths["data"]))


@pytest.fixture(scope="module")
def job(tiny_paths, tmp_path_factory, translator):
    """The run under test (6 lines in 3 chunks, one empty, one with a U+2028 inside) and its
    uninterrupted result: (argv without --output/--stats-out, output bytes, stats batches, seconds)."""
    tmp = tmp_path_factory.mktemp("resume_kill")
    de = sorted(tiny_paths["valid_de"].read_text(encoding="utf-8").split("\n")[:-1], key=lambda s: len(s.split()))
    lines = de[:5]
    lines.insert(2, "")
    lines[4] = lines[4].replace(" ", "\u2028", 1)
    src = tmp / "src.txt"
    src.write_bytes("".join(x + "\n" for x in lines).encode("utf-8"))
    argv = ["translate", "--model", str(tiny_paths["checkpoint"]), "--data", str(tiny_paths["data"]),
            "--tokenizer", "none", "--input", str(src), "--format", "fairseq", "--batch-size", "2",
            "--chains", "2", "--epochs", "1", "--burn-in", "0", "--seed", "5", "--quiet"]
    out = tmp / "full" / "out.txt"
    out.parent.mkdir()
    t0 = time.monotonic()
    status = forked_translate(argv + ["--output", str(out), "--stats-out", str(out) + ".stats"], translator)
    seconds = time.monotonic() - t0
    assert status == 0
    data = out.read_bytes()
    assert data.count(b"\nS-") == len(lines) - 1 and data.endswith(b"\n")
    batches = json.loads(Path(str(out) + ".stats").read_text())["batches"]
    print(f"uninterrupted run: {seconds:.2f} s")
    return argv, data, batches, seconds


def finish(argv: list[str], out: Path, translator, rng: random.Random) -> int:
    """Resume until a run ends, killing some of the resumed runs too; returns the number of kills."""
    kills = 0
    for _ in range(30):
        resume = ["--resume"] if Path(str(out) + ".progress").is_file() else []
        event = rng.randint(1, 40) if rng.random() < 0.3 else None
        status = forked_translate(argv + ["--output", str(out), "--stats-out", str(out) + ".stats", *resume],
                                  translator, event=event, seed=rng.randrange(1 << 30))
        if status == 0:
            return kills
        assert status == KILLED, f"exit status {status}"
        kills += 1
    raise AssertionError("no resumed run finished in 30 tries")


def check_same(out: Path, data: bytes, batches: list) -> None:
    assert out.read_bytes() == data
    assert json.loads(Path(str(out) + ".stats").read_text())["batches"] == batches
    record = json.loads(Path(str(out) + ".progress").read_text())
    assert record["lines_done"] == record["total_lines"] and record["output_bytes"] == len(data)


def test_kills_at_random_file_operations_resume_to_the_same_bytes(job, translator, tmp_path):
    argv, data, batches, _ = job
    count = tmp_path / "count"
    assert forked_translate(argv + ["--output", str(tmp_path / "c.txt"), "--stats-out", str(tmp_path / "c.st")],
                            translator, count_file=str(count)) == 0
    operations = int(count.read_text())
    assert operations >= 20  # start + 3 commits of output, statistics and record
    rng = random.Random(20261123)
    points = sorted(rng.sample(range(1, operations + 1), 8))
    for k in points:
        out = tmp_path / f"k{k}" / "out.txt"
        out.parent.mkdir()
        assert forked_translate(argv + ["--output", str(out), "--stats-out", str(out) + ".stats"], translator,
                                event=k, seed=k) == KILLED
        finish(argv, out, translator, rng)
        check_same(out, data, batches)


def test_kills_at_random_instants_resume_to_the_same_bytes(job, translator, tmp_path):
    argv, data, batches, seconds = job
    rng = random.Random(7)
    for i in range(4):
        out = tmp_path / f"t{i}" / "out.txt"
        out.parent.mkdir()
        status = forked_translate(argv + ["--output", str(out), "--stats-out", str(out) + ".stats"], translator,
                                  delay=rng.uniform(0.0, seconds))
        assert status in (0, KILLED)
        finish(argv, out, translator, rng)
        check_same(out, data, batches)
