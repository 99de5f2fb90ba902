"""One writer per output: an exclusive, non-blocking ``flock`` on ``OUTPUT.lock``.

Why ``flock`` on a lock file next to the output: the kernel drops the lock when the holder's last
descriptor closes, and a process's descriptors close when it dies in any way (SIGKILL, OOM killer,
crash), so a dead run never leaves a stale lock and nothing has to guess from a pid whether the
holder is alive (pids are reused). The lock file is never deleted: unlinking it while another
process waits on the old inode would let two processes hold "the" lock on two different inodes. The
path is resolved (symlinks) first, so two spellings of one output share one lock. ``O_EXCL`` pid
files fail the first point; locking the output itself alone would need it opened before its truncation
and would not cover the progress record beside it. Two hard links of one file are two names, so two
lock files: the output itself is locked too (opened, created if new, before anything writes it), and
two names of one inode share that lock (a review found a second run emptying the file of a first one
through a hard link, and both exiting 0).

Example:
    >>> import tempfile, os
    >>> out = os.path.join(tempfile.mkdtemp(), "hyp.txt")
    >>> with OutputLock(out, "--output"):
    ...     OutputLock(out, "--output").acquire()  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    mhfast.files.lock.OutputInUse: --output ...: another mhfast process (pid ...) is writing it; ...
"""
from __future__ import annotations

import errno
import fcntl
import os
from typing import Any, Callable

from .errors import named

LOCK_SUFFIX = ".lock"
PROGRESS_SUFFIX = ".progress"  #: (journal.py's progress record beside an output: the run began writing)


class OutputInUse(ValueError):
    """Another live process holds the output's lock (a user error: one line, exit status 2)."""


class OutputLock:
    """Exclusive lock on ``path`` for this process; ``acquire`` fails at once if it is held."""

    def __init__(self, path: str | os.PathLike, option: str = "--output"):
        self.path, self.option = str(path), option
        self.lock_path = side_file(option, self.path, LOCK_SUFFIX)
        self.fd: int | None = None
        self.file_fd: int | None = None  #: the output itself, flocked too (hard links: one inode, many names)
        self.created = False  #: the output did not exist before this lock opened (created) it

    def acquire(self) -> "OutputLock":
        what = f"{self.option} {self.path!r}"
        if not self.path or self.path.endswith((os.sep, "/")) or os.path.isdir(self.path):
            # ("" resolved to the working folder, "new/" to new.lock beside it: a stray lock file, then a failure)
            raise ValueError(f"{what} is not a file name (a folder, or empty)")
        _check_side_names(self.path, self.option, what)
        lock_file = f"{what} (its lock file {self.lock_path!r})"
        fd = _locked(self.lock_path, os.O_RDWR, lock_file, lambda fd: (
            f"{what}: another mhfast process (pid {os.pread(fd, 32, 0).decode('ascii', 'replace').strip() or '?'}) "
            "is writing it; wait for it to end or choose another path"))
        try:
            with named(lock_file, "write"):
                os.ftruncate(fd, 0)  # for the message of a refused second writer only
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd
        self.created = not os.path.lexists(self.path)
        try:
            self.file_fd = _locked(self.path, os.O_RDONLY, what, lambda fd: (
                f"{what}: another mhfast process is writing this file under another name (a hard link of it); wait "
                "for it to end or choose another path"))
        except BaseException:
            self.release()
            raise
        return self

    def release(self) -> None:
        """Drop the lock. An output this lock created and that is still empty with no progress record beside it
        (the run ended before it began writing: a refused --resume, an error before the first record) is removed:
        a refused run leaves no file behind (an empty --stats-out had then failed ``mhfast evaluate``)."""
        if self.file_fd is not None and self.created:
            self._remove_if_unwritten()
        for name in ("file_fd", "fd"):
            fd = getattr(self, name)
            if fd is not None:
                os.close(fd)  # closing drops the flock
                setattr(self, name, None)

    def _remove_if_unwritten(self) -> None:
        try:
            mine = os.fstat(self.file_fd)
            there = os.stat(self.path)
            if (mine.st_size == 0 and (there.st_dev, there.st_ino) == (mine.st_dev, mine.st_ino)
                    and not os.path.lexists(self.path + PROGRESS_SUFFIX)):
                os.unlink(self.path)
        except OSError:  # gone, or not ours to remove: leave it
            pass

    def __enter__(self) -> "OutputLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _locked(path: str, mode: int, what: str, in_use: Callable[[int], str]) -> int:
    """A descriptor of ``path`` (opened with ``mode``, created if new) holding an exclusive flock: OutputInUse with
    ``in_use(fd)`` where another descriptor holds it; any other failure (ENOLCK on a file system without locks) a
    FileError naming ``what``; nothing left open on failure."""
    with named(what, "open"):
        fd = os.open(path, mode | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        with named(what, "lock"):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise OutputInUse(in_use(fd)) from None
                raise
    except BaseException:
        os.close(fd)
        raise
    return fd


def _same(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)  # hard links and symlinks too
    except OSError:  # one of them does not exist (yet)
        return os.path.realpath(a) == os.path.realpath(b)


#: the files an output's writer makes beside it (journal.py's progress record and its atomic replacement; the
#: statistics' atomic replacement; every locked output's lock file)
SIDE_FILES = {"--output": (PROGRESS_SUFFIX, PROGRESS_SUFFIX + ".tmp", LOCK_SUFFIX),
              "--stats-out": (".tmp", LOCK_SUFFIX)}


def side_file(option: str, path: str, suffix: str) -> str:
    """Where ``option``'s writer puts the side file ``suffix`` of ``path``: the lock beside the resolved path
    (:class:`OutputLock`), the progress record beside the name given, and an atomic replacement's ``.tmp`` beside
    its resolved target (journal.write_bytes_atomic replaces a symlink's target, not the link)."""
    if suffix == LOCK_SUFFIX:
        return os.path.realpath(path) + suffix
    if suffix.endswith(".tmp"):
        return os.path.realpath(path + suffix[:-len(".tmp")]) + ".tmp"
    return path + suffix


def _check_side_names(path: str, option: str, what: str) -> None:
    """ValueError where a file this output's writer makes beside it would have a name longer than its folder
    allows: refused before any work (``OUTPUT.progress.tmp`` of a 245-byte name had failed with "File name too
    long" at the first commit, after a chunk of translations)."""
    for suffix in SIDE_FILES.get(option, (LOCK_SUFFIX,)):
        side = side_file(option, path, suffix)
        folder = os.path.dirname(os.path.abspath(side))
        try:
            limit = os.pathconf(folder, "PC_NAME_MAX")
        except (OSError, ValueError):
            limit = 255
        name = os.path.basename(side)
        if len(os.fsencode(name)) > limit:
            raise ValueError(f"{what}: the name is too long for its {suffix} file beside it ({len(os.fsencode(name))}"
                             f" bytes, more than the {limit} its folder allows); choose a shorter name")


def check_distinct(outputs: dict[str, str | None], inputs: dict[str, Any]) -> None:
    """ValueError when an output path names an input, lies inside an input folder (a model directory), names
    another output, or names a file an output writes beside it (``--output``: ``.progress``, its
    ``.progress.tmp`` and ``.lock``; ``--stats-out``: ``.tmp`` and ``.lock``), or when an input names such a file:
    writing would destroy what is read (a checkpoint emptied by a typo), or two streams would interleave in one
    file. ``inputs``: ``{"--input": path, "--model": [paths], ...}`` (a path, a list of paths, or None); folders
    are fine."""
    outs = [(k, str(v)) for k, v in outputs.items() if v is not None]
    ins = [(k, str(p)) for k, v in inputs.items() if v is not None
           for p in (v if isinstance(v, (list, tuple)) else [v]) if p is not None]
    owned = [(k, f"{k}'s {suffix} file", side_file(k, v, suffix)) for k, v in outs for suffix in SIDE_FILES.get(k, ())]
    sides = [(side, path) for _, side, path in owned]
    for output, side, side_path in owned:
        for name, path in ins:  # the run would lock, record or replace into what it reads
            if _same(path, side_path):
                raise ValueError(f"{name} and {side} name the same file ({path!r}); choose another {output}")
    for i, (name, path) in enumerate(outs):
        for other, other_path in outs[i + 1:] + ins + sides:
            if _same(path, other_path):
                raise ValueError(f"{name} and {other} name the same file ({path!r}); choose another {name}")
        for other, folder in ins:
            if os.path.isdir(folder) and _inside(path, folder):
                raise ValueError(f"{name} {path!r} lies inside {other} {folder!r}, which this run reads; choose "
                                 f"another {name}")


def _inside(path: str, folder: str) -> bool:
    """Whether ``path`` (existing or not) lies inside ``folder``, links resolved."""
    p, f = os.path.realpath(path), os.path.realpath(folder)
    return p != f and os.path.commonpath([p, f]) == f
