"""I/O errors name the option and the path (issue 37): mhfast.files.errors, and the atomic write that removes its
temporary file when it fails. Disk-full is simulated deterministically (a patched ``os.write``/``os.fsync``), never
by filling a disk. The commands' side of the class is in tests/cli/test_adversarial_cli.py."""
from __future__ import annotations

import errno
import os

import pytest

from mhfast.files import FileError, check_input, named
from mhfast.files.journal import CommittedOutput, write_bytes_atomic


def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_named_turns_an_oserror_into_one_naming_the_option_and_path():
    with pytest.raises(FileError, match=r"^--output 'o.txt': cannot write: No space left on device$") as info:
        with named("--output 'o.txt'", "write"):
            _enospc()
    assert info.value.errno == errno.ENOSPC
    with pytest.raises(BrokenPipeError):  # the reader went away: the command line ends quietly, unchanged
        with named("stdout", "write"):
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")


def test_check_input_tells_a_directory_from_a_missing_file(tmp_path, monkeypatch):
    with pytest.raises(FileError, match="--input: '.*' is a directory, not a file"):
        check_input(tmp_path, "--input")
    with pytest.raises(FileNotFoundError, match="--input: no such file: '.*nothing'"):
        check_input(tmp_path / "nothing", "--input")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    check_input(fifo, "--input")  # <(cmd) and devices are read as they are
    monkeypatch.chdir(tmp_path)  # (no file named '-' there)
    with pytest.raises(FileNotFoundError, match=r"^--input: no such file: '-' \('-' is a file name here, not stdin: "
                                                r"leave the option out where it reads stdin\)$"):
        check_input("-", "--input")


@pytest.mark.parametrize("failing", ["write", "fsync"])
def test_a_failed_atomic_write_removes_its_temp_file_and_keeps_the_old_file(tmp_path, monkeypatch, failing):
    path = tmp_path / "stats.json"
    path.write_bytes(b"old")
    monkeypatch.setattr(os, failing, _enospc)
    with pytest.raises(FileError, match=r"--stats-out 'stats.json': cannot write: No space left on device"):
        write_bytes_atomic(str(path), b"new", "--stats-out 'stats.json'")
    monkeypatch.undo()
    assert path.read_bytes() == b"old" and sorted(os.listdir(tmp_path)) == ["stats.json"]


def test_a_full_disk_at_the_first_progress_record_names_it_and_leaves_no_temp_file(tmp_path, monkeypatch):
    out = tmp_path / "out.txt"
    started = CommittedOutput.start(str(out), {"seed": 1}, 2)  # (opens only: the record comes at begin)
    monkeypatch.setattr(os, "write", _enospc)
    with pytest.raises(FileError, match=r"--output progress record '.*out.txt.progress': cannot write: No space"):
        started.begin()
    monkeypatch.undo()
    started.close()
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]


def test_a_full_disk_in_the_middle_of_a_commit_leaves_no_torn_line(tmp_path, monkeypatch):
    """A write that takes part of the chunk and then fails (ENOSPC, EIO): the error names the output, and the file
    is cut back to its committed bytes (the part written had stayed: b'first line\\nsecon' for a reader)."""
    out = tmp_path / "out.txt"
    started = CommittedOutput.start(str(out), {"seed": 1}, 2)
    started.commit(b"first line\n", 1)
    real_write = os.write
    calls = []

    def part_then_full(fd, data):
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data[:5]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", part_then_full)
    with pytest.raises(FileError, match=r"--output '.*out.txt': cannot write: No space left on device"):
        started.commit(b"second line\n", 2)
    monkeypatch.undo()
    assert out.read_bytes() == b"first line\n" and calls[:1] == [12]
    started.commit(b"second line\n", 2)  # the output stays usable: the next commit appends where it belongs
    started.close()
    again = CommittedOutput.resume(str(out), {"seed": 1}, 2)
    assert again.committed == b"first line\nsecond line\n"
    again.close()
