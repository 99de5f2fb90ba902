"""A power cut at any point of a run leaves an output that ``--resume`` accepts, with no committed line lost.

A kill (SIGKILL) keeps every byte the process wrote: tests/cli/test_cli_resume_kill.py covers it. A power cut keeps
only what was fsynced, so the order of the fsyncs matters too, and no kill shows it. Here the file operations of a
run are replayed against a model of what a disk keeps (pessimistic, as CrashMonkey's or ALICE's): a file's content
survives as of its last ``fsync``, a folder's entries (creations, renames) as of the folder's last ``fsync``; a
file never fsynced is empty. After every write, truncate, rename and fsync of a run, the surviving state is written
out and must resume: the previous run's output intact while the previous record survives, this run's committed
lines once its record does, and never a record that names bytes the disk lost.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from mhfast.files import CommittedOutput
from mhfast.files.journal import PROGRESS_SUFFIX

OLD, NEW = {"seed": 1}, {"seed": 2}
OLD_LINES, NEW_LINES = [b"old 1\n", b"old 2\n"], [b"a\n", b"bb\n", b"ccc\n"]


class Disk:
    """What survives a power cut, following the real file operations on one folder: each file is an identity
    (a new one per creation, carried by renames); ``durable_data`` is its content at its last fsync and
    ``durable_names`` the folder's entries at the folder's last fsync."""

    def __init__(self, folder: Path):
        self.folder, self.next_id = str(folder), 0
        self.names: dict[str, int] = {}  # the folder's entries now
        self.durable_data: dict[int, bytes] = {}
        for name in sorted(os.listdir(folder)):  # what is there before the run is on the disk
            self.names[name] = self._new_id()
            self.durable_data[self.names[name]] = (folder / name).read_bytes()
        self.durable_names = dict(self.names)
        self.fds: dict[int, int | None] = {}  # fd -> file identity (None: the folder itself)
        self.states: list[tuple[str, dict[str, bytes]]] = []

    def _new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def _mine(self, path) -> str | None:
        path = os.path.abspath(path)
        return os.path.basename(path) if os.path.dirname(path) == self.folder else None

    def snapshot(self, what: str) -> None:
        """The folder as a power cut now leaves it: {name: bytes}."""
        self.states.append((what, {n: self.durable_data.get(i, b"") for n, i in self.durable_names.items()}))

    def install(self, monkeypatch) -> None:
        real = {f: getattr(os, f) for f in ("open", "write", "ftruncate", "replace", "fsync")}

        def open_(path, flags, *args, **kwargs):
            fd = real["open"](path, flags, *args, **kwargs)
            if os.path.abspath(path) == self.folder:
                self.fds[fd] = None
            elif (name := self._mine(path)) is not None:
                if name not in self.names:  # created: a new file, empty on the disk until fsynced
                    self.names[name] = self._new_id()
                self.fds[fd] = self.names[name]
            return fd

        def write(fd, data):
            n = real["write"](fd, data)
            if fd in self.fds:
                self.snapshot(f"write {n} bytes")
            return n

        def ftruncate(fd, length):
            real["ftruncate"](fd, length)
            if fd in self.fds:
                self.snapshot(f"ftruncate to {length}")

        def replace(src, dst):
            real["replace"](src, dst)
            s, d = self._mine(src), self._mine(dst)
            if s is not None and d is not None:
                self.names[d] = self.names.pop(s)
                self.snapshot(f"rename {s} -> {d}")

        def fsync(fd):
            real["fsync"](fd)
            if fd not in self.fds:
                return
            if self.fds[fd] is None:
                assert stat.S_ISDIR(os.fstat(fd).st_mode)
                self.durable_names = dict(self.names)
            else:
                with open(f"/proc/self/fd/{fd}", "rb") as f:  # (the fd may be write-only)
                    self.durable_data[self.fds[fd]] = f.read()
            self.snapshot("fsync " + ("folder" if self.fds[fd] is None else "file"))

        for name, fn in (("open", open_), ("write", write), ("ftruncate", ftruncate), ("replace", replace),
                         ("fsync", fsync)):
            monkeypatch.setattr(os, name, fn)


def count_lines(data: bytes) -> int:
    return data.count(b"\n")


def test_every_power_cut_of_a_run_leaves_a_resumable_output(tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    out = str(run / "out.txt")
    old = CommittedOutput.start(out, OLD, len(OLD_LINES))
    for i, line in enumerate(OLD_LINES):
        old.commit(line, i + 1)
    old.close()

    disk = Disk(run)
    disk.install(monkeypatch)
    new = CommittedOutput.start(out, NEW, len(NEW_LINES))
    for i, line in enumerate(NEW_LINES):
        new.commit(line, i + 1)
    new.close()
    monkeypatch.undo()
    assert len(disk.states) >= 20

    seen = set()
    for k, (what, files) in enumerate(disk.states):
        cut = tmp_path / f"cut{k}"
        cut.mkdir()
        for name, data in files.items():
            (cut / name).write_bytes(data)
        where = f"power cut {k} (after {what}): {sorted((n, len(d)) for n, d in files.items())}"
        record = json.loads(files[f"out.txt{PROGRESS_SUFFIX}"])  # a record survives, whole, at every point
        spec, lines, total = (OLD, OLD_LINES, 2) if record["spec"] == OLD else (NEW, NEW_LINES, 3)
        try:
            resumed = CommittedOutput.resume(str(cut / "out.txt"), spec, total, count_lines)
        except ValueError as e:
            pytest.fail(f"{where}: {e}")
        assert resumed.committed == b"".join(lines[:resumed.lines_done]), where
        resumed.close()
        assert (cut / "out.txt").read_bytes() == resumed.committed, where  # a torn tail is cut
        seen.add((record["spec"]["seed"], resumed.lines_done))
    # the old run whole until the new record survives, then each of the new run's commits
    assert seen == {(1, 2), (2, 0), (2, 1), (2, 2), (2, 3)}, seen
    assert disk.states[-1][1]["out.txt"] == b"".join(NEW_LINES)
