"""Output committed in whole records, and the progress record ``--resume`` verifies.

Commit protocol (one chunk of translations = one record):

1. append the chunk's bytes to the output, ``fsync`` it;
2. replace ``OUTPUT.progress`` atomically (write a temporary file, ``fsync``, ``rename``, ``fsync``
   the folder) with: lines done, committed output bytes, sha256 of those bytes, the run's spec
   (everything that decides the output) and a checksum of the record itself.

A kill at any instant leaves the record of the last commit and an output that starts with the bytes
it names (anything after them is a chunk that was being written: ``--resume`` cuts it off, warning; after a complete
run nothing can have been in flight, and such bytes stay, with a warning). A fresh
run writes its empty record BEFORE truncating the output, so an old record never describes a new file, and it
does both only at :meth:`CommittedOutput.begin` (``score`` calls it once the model has loaded and every input
line has been checked, ``translate`` at its first commit, which calls it): a run that fails before then (a
mistyped model path, a line too long) leaves the previous results as they were.
``--resume`` believes nothing unchecked: the record's checksum and version, the spec (differences are
named), and the output's committed bytes against the record's size and hash.

Example:
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "out.txt")
    >>> out = CommittedOutput.start(path, {"seed": 1}, total_lines=2)
    >>> out.commit(b"hello\\n", lines_done=1); out.close()
    >>> again = CommittedOutput.resume(path, {"seed": 1}, total_lines=2)
    >>> again.lines_done, again.committed
    (1, b'hello\\n')
    >>> again.close()
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
from typing import Any, Callable, Iterator

from .errors import named, remove_quietly
from .lines import describe
from .lock import PROGRESS_SUFFIX

PROGRESS_VERSION = 2
KIND = "mhfast-translate-progress"


def check_output_there(path: str) -> None:
    """``--resume`` of an output that is gone: a ValueError saying so. The commands call it before they take the
    output's lock, which would create the file (then the message was "does not match its progress record (0 bytes,
    ...)", and a refused run left an empty output behind); :meth:`CommittedOutput.resume` calls it again."""
    if not os.path.isfile(path) and os.path.isfile(path + PROGRESS_SUFFIX):
        raise ValueError(f"--resume: the output {path!r} is not there; rerun without --resume to start over")


def write_all(fd: int, data: bytes) -> None:
    """``os.write`` until every byte is written (a write may be partial)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def read_prefix(fd: int, size: int) -> bytes:
    """The first ``size`` bytes of ``fd`` (fewer only at the end of the file): ``os.pread`` until then, since one
    call may return less (Linux at most 2,147,479,552 bytes: an output of 2 GiB read as "changed")."""
    parts, done = [], 0
    while done < size:
        part = os.pread(fd, size - done, done)
        if not part:
            break
        parts.append(part)
        done += len(part)
    return b"".join(parts)


def fsync_dir(path: str) -> None:
    """Make a rename/creation in ``path``'s folder durable (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_bytes_atomic(path: str, data: bytes, what: str | None = None) -> None:
    """Replace ``path`` by ``data``: a reader (or a kill) sees the old or the new file, never half of one.

    A write that fails (disk full, EIO) removes its temporary file and raises a FileError naming ``what``
    (e.g. ``"--stats-out 'stats.json'"``; default: the path), never a bare ``[Errno 28]``.
    """
    what = what or repr(path)
    # a symlink's target is replaced, not the link (a --stats-out link had become a regular file, its target left
    # stale, and a second run's lock, taken on the target, no longer matched the name)
    path = os.path.realpath(path)
    tmp = f"{path}.tmp"
    try:
        with named(what, "write"):
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
            try:
                write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
    except BaseException:
        remove_quietly(tmp)  # a failed (or interrupted) write leaves nothing behind
        raise
    fsync_dir(path)


def write_json_atomic(path: str, data: Any, what: str | None = None) -> None:
    """:func:`write_bytes_atomic` of ``data`` as JSON."""
    write_bytes_atomic(path, json.dumps(data).encode("utf-8"), what)


def canonical(value: Any) -> Any:
    """``value`` as it reads back from JSON (tuples -> lists, other objects -> str)."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def spec_sha256(spec: Any) -> str:
    """sha256 of a run's spec as the progress record keeps it (:func:`canonical`): the record's ``spec_sha256``,
    and the name translate's statistics file gives its run (``options_hash``)."""
    return hashlib.sha256(json.dumps(canonical(spec), sort_keys=True).encode()).hexdigest()


def _checksum(record: dict) -> str:
    body = {k: v for k, v in record.items() if k != "checksum"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode("utf-8")).hexdigest()


def spec_differences(old: Any, new: Any) -> list[str]:
    """Human-readable differences of two specs: ``['--seed (7 -> 8)', 'model file model.pt']``. Changed values come
    before entries only one spec has (null on the other side): those are mostly a consequence (another --method
    brings or drops a dozen options), so the first differences name the cause."""
    found = list(_differences(old, new, ""))
    return [text for one_sided, text in found if not one_sided] + [text for one_sided, text in found if one_sided]


def _differences(old: Any, new: Any, prefix: str) -> Iterator[tuple[bool, str]]:
    """(one-sided, text) of each difference, in key order."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new), key=str):
            yield from _differences(old.get(key), new.get(key), f"{prefix}{key}" if not prefix else f"{prefix} {key}")
    elif old != new:
        if isinstance(old, str) and isinstance(new, str) and len(old) == len(new) == 64:  # content hashes
            yield False, f"{prefix} (content)"
        else:
            yield old is None or new is None, f"{prefix} ({json.dumps(old)} -> {json.dumps(new)})"


class CommittedOutput:
    """The output file of one run, appended to in committed records; use :meth:`start` or :meth:`resume`."""

    def __init__(self, path: str, spec: dict, total_lines: int, fd: int, lines_done: int, committed: bytes,
                 option: str = "--output", begun: bool = True):
        self.path, self.spec, self.total_lines, self.fd = path, canonical(spec), total_lines, fd
        self.progress_path = path + PROGRESS_SUFFIX
        self.name = describe(path, option)  #: how I/O errors name the output: --output 'out.txt'
        self.option = option
        self.lines_done, self.committed = lines_done, committed  # committed: bytes of the resumed prefix
        self.size = len(committed)
        self._sha = hashlib.sha256(committed)
        self.begun = begun  #: False for a fresh run until :meth:`begin` (the file is untouched until then)

    @classmethod
    def start(cls, path: str, spec: dict, total_lines: int, option: str = "--output") -> "CommittedOutput":
        """A fresh run: the output opened (created if missing), left as it is until :meth:`begin`."""
        with named(describe(path, option), "open"):
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        return cls(path, spec, total_lines, fd, 0, b"", option, begun=False)

    def begin(self) -> None:
        """A fresh run's point of no return: its empty record first, then the output emptied (kill-safe in this
        order). Once; a resumed run has begun already."""
        if self.begun:
            return
        self._write_record()
        with named(self.name, "write"):
            os.ftruncate(self.fd, 0)
            os.fsync(self.fd)
        fsync_dir(self.path)
        self.begun = True

    @classmethod
    def resume(cls, path: str, spec: dict, total_lines: int, count_records: Callable[[bytes], int] | None = None,
               option: str = "--output") -> "CommittedOutput":
        """Continue a run after verifying record and output; ValueError (one line) on any mismatch.
        ``count_records(committed bytes)`` must give the record's lines done (when given)."""
        if not os.path.isfile(path + PROGRESS_SUFFIX):
            empty = not os.path.isfile(path) or os.path.getsize(path) == 0
            raise ValueError(f"--resume: no progress file {path + PROGRESS_SUFFIX!r}: " + (
                "nothing was committed (the run stopped before its first record, or never ran)" if empty else
                f"{path!r} was not written by an mhfast command's --output") + "; rerun without --resume")
        record = read_record(path + PROGRESS_SUFFIX)
        check_record(record, canonical(spec), total_lines, path + PROGRESS_SUFFIX)
        _warn_other_threads(record.get("torch_threads"))
        _warn_other_machine(record.get("machine"))
        size = record["output_bytes"]
        check_output_there(path)
        name = describe(path, option)
        with named(name, "open"):
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        try:
            with named(name, "read"):
                committed = read_prefix(fd, size)
            if len(committed) != size or hashlib.sha256(committed).hexdigest() != record["output_sha256"]:
                have = os.fstat(fd).st_size
                raise ValueError(f"--resume: {path!r} does not match its progress record ({have} bytes, the first "
                                 f"{size} committed bytes {'missing' if have < size else 'changed'}): the output "
                                 "was edited, truncated or replaced; rerun without --resume to start over")
            if count_records is not None and count_records(committed) != record["lines_done"]:
                raise ValueError(f"--resume: {path!r} holds {count_records(committed)} committed sentences, its "
                                 f"progress record says {record['lines_done']}; rerun without --resume to start over")
            _drop_uncommitted(fd, path, name, size, complete=record["lines_done"] == record["total_lines"])
        except BaseException:
            os.close(fd)
            raise
        return cls(path, spec, total_lines, fd, record["lines_done"], committed, option)

    def _record(self) -> dict:
        record = {"kind": KIND, "version": PROGRESS_VERSION, "spec": self.spec,
                  "spec_sha256": spec_sha256(self.spec),
                  "lines_done": self.lines_done, "total_lines": self.total_lines,
                  "output_bytes": self.size, "output_sha256": self._sha.hexdigest(), "torch_threads": _threads(),
                  "machine": _machine()}
        record["checksum"] = _checksum(record)
        return record

    def _write_record(self) -> None:
        write_bytes_atomic(self.progress_path, json.dumps(self._record(), sort_keys=True).encode("utf-8"),
                           f"{self.option} progress record {self.progress_path!r}")

    def commit(self, data: bytes, lines_done: int, before_record: Any = None) -> None:
        """Append ``data`` (whole records), make it durable, then record ``lines_done`` as done.
        ``before_record()`` runs between the two (e.g. writing a statistics file)."""
        self.begin()
        try:
            with named(self.name, "write"):
                write_all(self.fd, data)
                os.fsync(self.fd)
            if before_record is not None:
                before_record()
        except BaseException:  # (the chunk is not committed: no bytes beyond the record's)
            self._cut_back()
            raise
        self.size += len(data)
        self._sha.update(data)
        self.lines_done = lines_done
        self._write_record()

    def _cut_back(self) -> None:
        """After a failed append (ENOSPC, EIO: a part of the chunk may be written) or a failed ``before_record``: the
        output cut back to its committed bytes, best effort, so that the run's error does not leave a torn line or
        an unrecorded chunk for a reader (a kill still can: ``--resume`` cuts that)."""
        try:
            os.ftruncate(self.fd, self.size)
            os.lseek(self.fd, self.size, os.SEEK_SET)
            os.fsync(self.fd)
        except OSError:
            pass

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _threads() -> int:
    """This process's torch threads (the writer's, recorded: not part of the spec, so that a run can resume on a
    machine with other cores)."""
    import torch

    return torch.get_num_threads()


def _warn_other_threads(began: Any) -> None:
    """A warning where a resumed run has other torch threads than the run it continues had: fp32 sums round
    otherwise, so its lines may differ in their last digits from one uninterrupted run's (the resume had been
    silent, and a score file mixed both roundings: a review, 2026-12-02)."""
    now = _threads()
    if isinstance(began, int) and began != now:
        import warnings

        warnings.warn(f"--resume: this run has {now} torch thread(s), the run it continues had {began}: fp32 sums "
                      "round otherwise, so the lines it adds may differ in their last digits from those of one "
                      f"uninterrupted run (for the same bytes, set OMP_NUM_THREADS={began}, or --threads {began} "
                      "where the command has it)", stacklevel=2)


def _machine() -> str:
    """The writer's CPU (model name, L2 cache) and torch version, recorded like its threads (no part of the spec:
    a requeued job may resume on another node)."""
    import torch

    from ..runtime import cpu_info

    return f"{cpu_info.name()}, {cpu_info.l2_bytes() >> 10} KiB L2, torch {torch.__version__}"


def _warn_other_machine(began: Any) -> None:
    """A warning where a resumed run's CPU or torch differs from the run it continues: their kernels round
    otherwise, and the L2 cache sizes the default sub-batches (``--max-tokens-per-batch``), so the lines it adds
    may differ in their last digits from one uninterrupted run's (a resume on another machine had been silent
    about it: a review, 2026-12-02)."""
    now = _machine()
    if isinstance(began, str) and began != now:
        import warnings

        warnings.warn(f"--resume: this run is on {now}, the run it continues was on {began}: kernels and the "
                      "default sub-batches (--max-tokens-per-batch) follow the CPU and torch, so the lines it adds "
                      "may differ in their last digits from those of one uninterrupted run (for the same bytes, "
                      "resume on the same kind of machine)", stacklevel=2)


def _drop_uncommitted(fd: int, path: str, name: str, size: int, complete: bool) -> None:
    """Cut the output after its ``size`` committed bytes (the chunk a killed run was writing), with a warning
    naming the bytes dropped; leave them, warning, where the run was complete: no chunk can have been in flight,
    so they are someone else's (lines appended after a finished run had been deleted silently: a review,
    2026-12-02)."""
    import warnings

    extra = os.fstat(fd).st_size - size
    if extra > 0 and complete:
        warnings.warn(f"--resume: {path!r} is complete; the {extra} bytes after its last committed line were not "
                      "written by this run and are left as they are", stacklevel=3)
        os.lseek(fd, size, os.SEEK_SET)  # where the object's committed bytes end (nothing more is written)
        return
    if extra > 0:
        warnings.warn(f"--resume: dropping the {extra} bytes after the last committed line of {path!r} (the chunk "
                      "the stopped run was writing: it is made again)", stacklevel=3)
    with named(name, "write"):
        os.ftruncate(fd, size)
        os.fsync(fd)
        os.lseek(fd, size, os.SEEK_SET)


def read_record(path: str) -> dict:
    """The progress record at ``path`` after its checksum is verified (ValueError otherwise)."""
    if not os.path.isfile(path):
        raise ValueError(f"--resume: no progress file {path!r} (was the run started with this --output?)")
    with named(f"--resume: progress record {path!r}", "read"):
        with open(path, "rb") as f:
            raw = f.read()
    try:
        record = json.loads(raw.decode("utf-8"))
        if not isinstance(record, dict):
            raise ValueError
    except (ValueError, RecursionError):  # (RecursionError: JSON nested thousands deep)
        raise ValueError(f"--resume: {path!r} is not a valid progress file (truncated or corrupt); rerun "
                         "without --resume to start over") from None
    if record.get("kind") != KIND or record.get("version") != PROGRESS_VERSION:
        raise ValueError(f"--resume: {path!r} is not a progress file of this mhfast version (format "
                         f"{record.get('version')!r}, expected {PROGRESS_VERSION}); rerun without --resume")
    if record.get("checksum") != _checksum(record):
        raise ValueError(f"--resume: {path!r} fails its checksum (edited or corrupt); rerun without --resume "
                         "to start over")
    return record


def check_record(record: dict, spec: dict, total_lines: int, path: str) -> None:
    """The record belongs to a run with ``spec`` and its numbers are consistent (ValueError otherwise)."""
    diffs = spec_differences(record.get("spec"), spec)
    if diffs:
        shown = ", ".join(diffs[:4]) + (f" and {len(diffs) - 4} more" if len(diffs) > 4 else "")
        raise ValueError(f"--resume: this run and the interrupted one differ in {shown} (see {path!r}); "
                         "rerun without --resume to start over")
    ints = [record.get(k) for k in ("lines_done", "total_lines", "output_bytes")]
    if not all(type(v) is int and v >= 0 for v in ints) or not isinstance(record.get("output_sha256"), str):
        raise ValueError(f"--resume: {path!r} is not a valid progress file (bad fields)")
    if record["total_lines"] != total_lines or record["lines_done"] > total_lines:
        raise ValueError(f"--resume: {path!r} records {record['lines_done']} of {record['total_lines']} lines, "
                         f"the input has {total_lines}; rerun without --resume to start over")


def check_stdout(hint: str) -> None:
    """A ValueError ``"stdout is closed ...: <hint>"`` unless file descriptor 1 takes writes: a command that
    writes its results there checks it before any work (with fd 1 closed Python sets ``sys.stdout`` to None
    and ``print`` then discards everything silently; a read-only fd 1 fails only at the first write, after
    the work). A stream without a descriptor (``io.StringIO`` in tests) takes writes.

    Example:
        >>> import io, sys
        >>> sys.stdout, saved = io.StringIO(), sys.stdout
        >>> check_stdout("give --output FILE")
        >>> sys.stdout = saved
    """
    import io
    import sys

    stream = sys.stdout
    if stream is None:
        raise ValueError(f"stdout is closed: {hint}")
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return
    try:
        mode = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
    except OSError:
        raise ValueError(f"stdout is closed: {hint}") from None
    if mode == os.O_RDONLY:
        raise ValueError(f"stdout is open for reading only: {hint}")


class StreamOutput:
    """Standard output (or a binary stream such as an opened FIFO or /dev/null) with the interface of
    :class:`CommittedOutput`, but no record: a stream cannot be resumed.

    Bytes go to ``sys.stdout.buffer`` as UTF-8 whatever the locale; each chunk is flushed, so a
    reader sees whole chunks as they are made. ``name`` names the stream in I/O errors (``"stdout"``, or
    the option and path of an opened device: ``"--output '/dev/full'"``).
    """

    lines_done, committed = 0, b""

    def __init__(self, binary: Any = None, name: str = "stdout") -> None:
        import sys

        if binary is None:
            check_stdout("give --output FILE")
        self.binary, self.stream, self.name = binary, sys.stdout, name

    @classmethod
    def to(cls, path: str | None, option: str = "--output") -> "StreamOutput":
        """stdout (``path`` None), or the device or FIFO at ``path`` opened for writing; I/O errors name
        ``option`` and the path."""
        if path is None or std_stream(path) == 1:  # (reopening fd 1's file with "wb" had emptied it)
            return cls()
        name = describe(path, option)
        with named(name, "open"):
            binary = open(path, "ab")  # a device or FIFO: appending is writing; stderr's file is not emptied
        return cls(binary, name)

    def begin(self) -> None:
        """Nothing to prepare: a stream is written as it goes (the interface of :meth:`CommittedOutput.begin`)."""

    def commit(self, data: bytes, lines_done: int, before_record: Any = None) -> None:
        with named(self.name, "write"):
            self._write(data)
        self.lines_done = lines_done
        if before_record is not None:
            before_record()

    def _write(self, data: bytes) -> None:
        if self.binary is not None:
            self.binary.write(data)
            self.binary.flush()
        elif getattr(self.stream, "buffer", None) is not None:
            self.stream.flush()  # whatever was written as text goes first
            self.stream.buffer.write(data)
            self.stream.buffer.flush()
        else:  # a text-only stream (io.StringIO in tests)
            self.stream.write(data.decode("utf-8"))
            self.stream.flush()

    def close(self) -> None:
        if self.binary is not None:
            with named(self.name, "write"):  # closing flushes what a failed write left in the buffer
                self.binary.close()


def is_special(path: str) -> bool:
    """True for an existing path that is not a regular file (a device such as /dev/null, a FIFO), or that is this
    process's stdout or stderr under another name (``/dev/stdout`` when the shell redirects it to a file): it cannot
    be truncated, fsynced, locked beside or replaced, only written as a stream. (``/dev/stdout >> log`` had been
    taken for a file: the log emptied, a progress record written into /dev.)"""
    import stat

    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    return not stat.S_ISREG(st.st_mode) or _std_fd(st) is not None


def std_stream(path: str) -> int | None:
    """1 or 2 where ``path`` is this process's stdout or stderr (the same file), else None."""
    try:
        return _std_fd(os.stat(path))
    except OSError:
        return None


def _std_fd(st: os.stat_result) -> int | None:
    """1 or 2 where the file of ``st`` is this process's stdout or stderr, else None."""
    for fd in (1, 2):
        try:
            other = os.fstat(fd)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (other.st_dev, other.st_ino):
            return fd
    return None
