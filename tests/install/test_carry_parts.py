"""scripts/carry_parts.py: a folder split into parts joins back to the same files, and a missing or altered part is
a one-line error naming it (exit 2) before anything is extracted: the device plan for AntiBERTy's weights
(bench/CUDA_NOTES.md) relies on both.

Example:
    python3 -m pytest -q tests/install/test_carry_parts.py
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "carry_parts.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def package(tmp_path: Path) -> Path:
    """A package-like folder: a nested binary file larger than a part, a small text file, an empty one."""
    root = tmp_path / "pkg"
    (root / "trained" / "m").mkdir(parents=True)
    (root / "trained" / "m" / "weights.bin").write_bytes(bytes(range(256)) * 4099)  # ~1 MB, not a multiple of 3
    (root / "__init__.py").write_text("# package\n")
    (root / "trained" / "empty.txt").write_bytes(b"")
    return root


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("parts", [1, 3, 7])
def test_split_then_join_gives_the_same_files(package, tmp_path, parts):
    proc = run("split", str(package), "--into", str(tmp_path / "parts"), "--parts", str(parts))
    assert proc.returncode == 0, proc.stderr
    made = sorted(p.name for p in (tmp_path / "parts").glob("part*"))
    assert made == [f"part{k}" for k in range(parts)]
    sizes = [(tmp_path / "parts" / m).stat().st_size for m in made]
    assert max(sizes) - min(sizes) <= max(sizes) // 2 + 1 and sum(sizes) > 1_000_000  # about equal pieces
    proc = run("join", str(tmp_path / "parts"), "--to", str(tmp_path / "site"))
    assert proc.returncode == 0, proc.stderr
    assert files(tmp_path / "site" / "pkg") == files(package)


def test_a_missing_part_is_named_and_nothing_is_extracted(package, tmp_path):
    assert run("split", str(package), "--into", str(tmp_path / "parts"), "--parts", "3").returncode == 0
    (tmp_path / "parts" / "part1").unlink()
    proc = run("join", str(tmp_path / "parts"), "--to", str(tmp_path / "site"))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "part1 missing" in proc.stderr and "part0" not in proc.stderr
    assert not (tmp_path / "site").exists()


def test_an_altered_part_is_named(package, tmp_path):
    assert run("split", str(package), "--into", str(tmp_path / "parts"), "--parts", "3").returncode == 0
    part = tmp_path / "parts" / "part2"
    data = bytearray(part.read_bytes())
    data[-1] ^= 1  # one bit, same size
    part.write_bytes(bytes(data))
    proc = run("join", str(tmp_path / "parts"), "--to", str(tmp_path / "site"))
    assert proc.returncode == 2 and "part2 differs" in proc.stderr, proc.stderr
    assert not (tmp_path / "site").exists()


def test_a_part_of_an_earlier_split_is_removed_by_a_new_one(package, tmp_path):
    """Splitting into fewer parts must not leave an old part7 that a join would not check but a carry would send."""
    assert run("split", str(package), "--into", str(tmp_path / "parts"), "--parts", "8").returncode == 0
    assert run("split", str(package), "--into", str(tmp_path / "parts"), "--parts", "2").returncode == 0
    assert sorted(p.name for p in (tmp_path / "parts").glob("part*")) == ["part0", "part1"]


@pytest.mark.parametrize("args, named", [
    (["split", "MISSING", "--parts", "2"], "folder:"),
    (["split", ".", "--parts", "0"], "--parts:"),
    (["join", "NOWHERE"], "manifest.json is missing"),
])
def test_bad_arguments_are_one_line_errors(tmp_path, args, named):
    flag = "--into" if args[0] == "split" else "--to"
    args = [str(tmp_path / a) if a in ("MISSING", "NOWHERE") else (str(tmp_path) if a == "." else a) for a in args]
    proc = run(*args, flag, str(tmp_path / "out"))
    assert proc.returncode == 2 and named in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
