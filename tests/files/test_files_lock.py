"""mhfast.files.lock and journal without a model: one holder per output (symlinks and hard links included), the
lock gone when its holder is SIGKILLed, and the progress record's own checks."""
from __future__ import annotations

import json
import os
import re
import signal
import time

import pytest

from mhfast.files import CommittedOutput, OutputInUse, OutputLock
from mhfast.files.journal import PROGRESS_SUFFIX, spec_differences
from mhfast.files.lock import check_distinct


def test_second_holder_refused_until_release(tmp_path):
    out = tmp_path / "out.txt"
    link = tmp_path / "link.txt"
    link.symlink_to(out)
    with OutputLock(out, "--output"):
        for path in (out, link):
            with pytest.raises(OutputInUse, match=rf"--output .*pid {os.getpid()}\) is writing it"):
                OutputLock(path, "--output").acquire()
    with OutputLock(link, "--output"):  # released: free again
        pass
    assert (tmp_path / "out.txt.lock").is_file()  # kept: deleting it would let two holders in


def test_a_hard_link_of_a_held_output_is_refused(tmp_path):
    """Two hard links are two names (two lock files) of one file: the file itself is locked too. Until 2026-11-30 a
    second run wrote through a hard link, emptying the first run's file, and both exited 0 (a review found it)."""
    out, other = tmp_path / "out.txt", tmp_path / "other.txt"
    with OutputLock(out, "--output"):
        assert out.is_file()  # created by the lock, before anything writes it
        os.link(out, other)
        with pytest.raises(OutputInUse, match=r"--output .*other.txt.*under another name \(a hard link"):
            OutputLock(other, "--output").acquire()
    with OutputLock(other, "--output"):  # released: free again
        pass


def test_a_file_system_without_locks_is_named(tmp_path, monkeypatch):
    """flock failing for another reason than a holder (ENOLCK: some network file systems) is one line naming the
    option and the lock file, not a bare errno; nothing stays open."""
    import errno
    import fcntl

    from mhfast.files import FileError

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with pytest.raises(FileError, match=r"^--output '.*out.txt' \(its lock file .*\): cannot lock: No locks"):
        OutputLock(tmp_path / "out.txt", "--output").acquire()


def test_lock_of_a_killed_holder_is_free_at_once(tmp_path):
    out = tmp_path / "out.txt"
    ready = tmp_path / "ready"
    pid = os.fork()
    if pid == 0:
        try:
            OutputLock(out).acquire()
            ready.write_text("1")
            time.sleep(60)
        finally:
            os._exit(0)
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert time.monotonic() < deadline
            time.sleep(0.005)
        with pytest.raises(OutputInUse, match=f"pid {pid}"):
            OutputLock(out).acquire()
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    OutputLock(out).acquire().release()


def test_check_distinct(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("x")
    os.link(a, b)  # a hard link is the same file under another name
    with pytest.raises(ValueError, match="--output and --input name the same file"):
        check_distinct({"--output": str(b)}, {"--input": str(a)})
    with pytest.raises(ValueError, match="--output and --stats-out"):
        check_distinct({"--output": str(tmp_path / "new"), "--stats-out": str(tmp_path / "." / "new")}, {})
    check_distinct({"--output": str(tmp_path / "c"), "--stats-out": None}, {"--input": str(a), "--ref": None})


def test_check_distinct_covers_folders_read_and_side_files(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="--output .* lies inside --model"):
        check_distinct({"--output": str(model / "sub" / "new.txt")}, {"--model": [str(model / "config.json"),
                                                                                 str(model)]})
    with pytest.raises(ValueError, match="--output and --model name the same file"):
        check_distinct({"--output": str(model / "config.json")}, {"--model": [str(model / "config.json")]})
    for suffix in (".progress", ".progress.tmp", ".lock"):
        with pytest.raises(ValueError, match=f"--stats-out and --output's \\{suffix} file"):
            check_distinct({"--output": str(tmp_path / "o"), "--stats-out": str(tmp_path / f"o{suffix}")}, {})
    for suffix in (".tmp", ".lock"):  # (the statistics are replaced through STATS.tmp: it truncated the output)
        with pytest.raises(ValueError, match=f"--output and --stats-out's \\{suffix} file"):
            check_distinct({"--output": str(tmp_path / f"s{suffix}"), "--stats-out": str(tmp_path / "s")}, {})
    check_distinct({"--output": str(tmp_path / "model2" / "o")}, {"--model": str(model)})  # a neighbour: fine
    # an input named as an output's side file: the lock, the record or the replacement would overwrite it
    for output, suffix in (("--output", ".lock"), ("--output", ".progress"), ("--output", ".progress.tmp"),
                           ("--stats-out", ".tmp"), ("--stats-out", ".lock")):
        read = tmp_path / f"q{suffix}"
        read.write_text("EVQLV\n")
        with pytest.raises(ValueError, match=f"--ref and {output}'s \\{suffix} file name the same file.*choose "
                                             f"another {output}"):
            check_distinct({output: str(tmp_path / "q")}, {"--input": str(tmp_path / "in"), "--ref": str(read)})


def test_a_fresh_output_is_untouched_until_begin(tmp_path):
    """start() opens; the empty record and the truncation come at begin() (or the first commit): a run that
    fails before its first line leaves the previous results and their record as they were."""
    path = tmp_path / "out.txt"
    first = CommittedOutput.start(str(path), {"seed": 1}, total_lines=1)
    first.commit(b"old\n", lines_done=1)
    first.close()
    record = (tmp_path / f"out.txt{PROGRESS_SUFFIX}").read_bytes()
    second = CommittedOutput.start(str(path), {"seed": 2}, total_lines=1)
    second.close()  # failed before begin
    assert path.read_bytes() == b"old\n" and (tmp_path / f"out.txt{PROGRESS_SUFFIX}").read_bytes() == record
    third = CommittedOutput.start(str(path), {"seed": 2}, total_lines=1)
    third.begin()
    assert path.read_bytes() == b""
    assert json.loads((tmp_path / f"out.txt{PROGRESS_SUFFIX}").read_text())["lines_done"] == 0
    third.begin()  # once
    third.commit(b"new\n", lines_done=1)
    third.close()
    assert path.read_bytes() == b"new\n"


def test_an_empty_or_folder_output_name_is_refused_without_a_stray_lock(tmp_path, monkeypatch):
    """--output "" took the working folder's name (a stray <folder>.lock beside it), "new/" made new.lock, before
    failing: both are refused first, naming the option."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    for name in ("", "new/", str(tmp_path / "work")):
        with pytest.raises(ValueError, match=r"--output .* is not a file name"):
            OutputLock(name).acquire()
    assert sorted(os.listdir(tmp_path)) == ["work"] and os.listdir(tmp_path / "work") == []


def test_record_checks(tmp_path):
    path = str(tmp_path / "out.txt")
    out = CommittedOutput.start(path, {"options": {"--seed": 1}}, total_lines=3)
    out.commit(b"one\n", 1)
    out.commit(b"two\n", 2)
    out.close()
    with open(path, "ab") as f:
        f.write(b"thr")  # a torn third record
    with pytest.warns(UserWarning, match="dropping the 3 bytes"):
        again = CommittedOutput.resume(path, {"options": {"--seed": 1}}, 3, lambda data: data.count(b"\n"))
    assert (again.lines_done, again.committed) == (2, b"one\ntwo\n")
    again.commit(b"three\n", 3)
    again.close()
    with open(path, "rb") as f:
        assert f.read() == b"one\ntwo\nthree\n"
    with pytest.raises(ValueError, match=r"differ in options --seed \(1 -> 2\)"):
        CommittedOutput.resume(path, {"options": {"--seed": 2}}, 3)
    with pytest.raises(ValueError, match="records 3 of 3 lines, the input has 4"):
        CommittedOutput.resume(path, {"options": {"--seed": 1}}, 4)
    record = json.loads((tmp_path / ("out.txt" + PROGRESS_SUFFIX)).read_text())
    assert record["output_bytes"] == 14 and record["lines_done"] == 3 and len(record["checksum"]) == 64


def test_spec_differences_names_what_changed():
    old = {"model": {"checkpoint": "a" * 64}, "options": {"--seed": 1, "--chains": 5}}
    new = {"model": {"checkpoint": "b" * 64}, "options": {"--seed": 1, "--chains": 4}, "extra": None}
    assert spec_differences(old, new) == ["model checkpoint (content)", "options --chains (5 -> 4)"]


def test_resume_cuts_a_torn_tail_longer_than_the_rest_and_reads_in_short_calls(tmp_path, monkeypatch):
    """The bytes after the committed ones are cut even when the rest of the run writes fewer of them (every other
    test's tail was a prefix of what the resumed run rewrote, so a resume that kept it passed); the committed
    prefix is read however few bytes each os.pread returns (Linux returns at most 2,147,479,552: an output of
    2 GiB was "changed")."""
    path = str(tmp_path / "out.txt")
    out = CommittedOutput.start(path, {"seed": 1}, total_lines=3)
    out.commit(b"one\n", 1)
    out.commit(b"two\n", 2)
    out.close()
    with open(path, "ab") as f:
        f.write(b"a chunk of a killed run, longer than the rest\n")
    real = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, offset: real(fd, min(n, 3), offset))
    with pytest.warns(UserWarning, match=r"dropping the 46 bytes after the last committed line of .*out.txt"):
        again = CommittedOutput.resume(path, {"seed": 1}, 3, lambda data: data.count(b"\n"))
    assert (again.lines_done, again.committed) == (2, b"one\ntwo\n")
    again.commit(b"x\n", 3)
    again.close()
    with open(path, "rb") as f:
        assert f.read() == b"one\ntwo\nx\n"


@pytest.mark.parametrize("field, value", [("spec", {"seed": 2}), ("output_sha256", "0" * 64), ("output_bytes", 3),
                                          ("total_lines", 3), ("lines_done", 0), ("spec_sha256", "1" * 64)])
def test_the_record_checksum_covers_every_field(tmp_path, field, value):
    """A record edited by hand without its checksum is refused whatever field changed (a checksum that left out
    the spec resumed a seed-1 output as a seed-2 run)."""
    path = str(tmp_path / "out.txt")
    out = CommittedOutput.start(path, {"seed": 1}, total_lines=2)
    out.commit(b"one\n", 1)
    out.close()
    progress = tmp_path / ("out.txt" + PROGRESS_SUFFIX)
    record = json.loads(progress.read_text())
    assert record[field] != value
    progress.write_text(json.dumps(dict(record, **{field: value})))
    with pytest.raises(ValueError, match="checksum"):
        CommittedOutput.resume(path, value if field == "spec" else {"seed": 1}, 2)


def test_partial_writes_are_continued(tmp_path, monkeypatch):
    """A file system may take fewer bytes than asked per write: every byte of the output and of the progress
    record still lands (one os.write per commit left b"hel" and a cut record)."""
    real = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real(fd, bytes(data[:3])))
    path = str(tmp_path / "out.txt")
    out = CommittedOutput.start(path, {"seed": 1}, total_lines=2)
    out.commit(b"hello\n", 1)
    out.commit(b"world, at length\n", 2)
    out.close()
    monkeypatch.setattr(os, "write", real)
    with open(path, "rb") as f:
        assert f.read() == b"hello\nworld, at length\n"
    again = CommittedOutput.resume(path, {"seed": 1}, 2, lambda data: data.count(b"\n"))
    assert again.lines_done == 2
    again.close()


def test_resume_of_a_complete_run_keeps_what_was_appended_after_it(tmp_path):
    """Every line committed: no chunk can have been in flight, so bytes after them are someone else's; they stay,
    with a warning (a finished run's output with notes appended had lost them to --resume, silently)."""
    path = str(tmp_path / "out.txt")
    out = CommittedOutput.start(path, {"seed": 1}, total_lines=1)
    out.commit(b"one\n", 1)
    out.close()
    with open(path, "ab") as f:
        f.write(b"# my notes\n")
    with pytest.warns(UserWarning, match=r"is complete; the 11 bytes after its last committed line were not written "
                                         r"by this run and are left as they are"):
        again = CommittedOutput.resume(path, {"seed": 1}, 1, lambda data: data.count(b"\n"))
    again.close()
    with open(path, "rb") as f:
        assert f.read() == b"one\n# my notes\n"


def test_an_atomic_write_through_a_symlink_replaces_its_target(tmp_path):
    """--stats-out through a symlink: the link stays and its target gets the bytes (the link had been replaced by a
    regular file, its target left stale), so a second writer locking the target is refused while the first holds
    the link's lock."""
    from mhfast.files.journal import write_bytes_atomic

    target, link = tmp_path / "stats.json", tmp_path / "link.json"
    target.write_bytes(b"old")
    link.symlink_to(target)
    with OutputLock(str(link), "--stats-out"):
        write_bytes_atomic(str(link), b"new")
        assert link.is_symlink() and target.read_bytes() == b"new"
        with pytest.raises(OutputInUse, match="another mhfast process"):
            OutputLock(str(target), "--stats-out").acquire()
    with pytest.raises(ValueError, match="name the same file"):
        check_distinct({"--output": str(target) + ".tmp", "--stats-out": str(link)}, {})


@pytest.mark.parametrize("option, suffix", [("--output", ".progress.tmp"), ("--stats-out", ".lock")])
def test_a_name_too_long_for_its_side_files_is_refused_before_any_work(tmp_path, option, suffix):
    """A name that fits but whose OUTPUT.progress.tmp does not: refused when locked, before any file is made (it
    had failed with "File name too long" at the first commit, after a chunk of translations)."""
    limit = os.pathconf(tmp_path, "PC_NAME_MAX")
    path = tmp_path / ("o" * (limit - len(suffix) + 1))
    with pytest.raises(ValueError, match=rf"the name is too long for its {re.escape(suffix)} file beside it \(\d+ "
                                         rf"bytes, more than the {limit} its folder allows\)"):
        OutputLock(str(path), option).acquire()
    assert list(tmp_path.iterdir()) == []
    OutputLock(str(tmp_path / ("o" * (limit - len(suffix)))), option).acquire().release()
