"""I/O errors that say what to fix: the option and the path they came from.

An ``OSError`` from the operating system names at most a path (``[Errno 28] No space left on device`` names
nothing), so a user cannot tell which of a command's files failed. Every read of an input and every write of
an output, progress record or statistics file runs inside :func:`named`, which turns an ``OSError`` into a
:class:`FileError` reading ``"<option> <path>: cannot <action>: <reason>"`` (errno kept). Inputs are opened
through :func:`check_input`, which tells a missing path from a directory.

Example:
    >>> import errno
    >>> with named("--output 'out.txt'", "write"):          # doctest: +ELLIPSIS
    ...     raise OSError(errno.ENOSPC, "No space left on device")
    Traceback (most recent call last):
    ...
    mhfast.files.errors.FileError: --output 'out.txt': cannot write: No space left on device
"""
from __future__ import annotations

import contextlib
import errno
import os
from typing import Any, Iterator


class FileError(OSError):
    """An OSError whose message names the option and the path (one line in the command line)."""

    def __str__(self) -> str:
        return str(self.strerror)


@contextlib.contextmanager
def named(what: str, action: str) -> Iterator[None]:
    """Inside, an OSError becomes a :class:`FileError` ``"<what>: cannot <action>: <reason>"`` (``what``: e.g.
    ``"--output 'out.txt'"``, ``"stdout"``). A FileError passes unchanged, and so does a BrokenPipeError: the
    reader of stdout went away, which the command line ends quietly."""
    try:
        yield
    except (FileError, BrokenPipeError):
        raise
    except OSError as e:
        reason = e.strerror or " ".join(str(e).split()) or type(e).__name__
        raise FileError(e.errno or 0, f"{what}: cannot {action}: {reason}") from e


def check_input(path: str | os.PathLike, option: str, missing: str | None = None) -> None:
    """A missing ``path`` is a FileNotFoundError (``missing``, default ``"<option>: no such file: <path>"``) and a
    directory a FileError, each naming ``option`` and the path; anything else that exists (a file, a FIFO such
    as ``<(cmd)``, a device) is left to be read."""
    if os.path.isdir(path):
        raise FileError(errno.EISDIR, f"{option}: {str(path)!r} is a directory, not a file")
    if not os.path.exists(path):
        dash = " ('-' is a file name here, not stdin: leave the option out where it reads stdin)" if str(path) == "-" \
            else ""
        raise FileNotFoundError(missing or f"{option}: no such file: {str(path)!r}{dash}")


def stdout_print(*values: Any, flush: bool = False) -> None:
    """``print(*values)`` to stdout; an I/O error (disk full, EIO) names stdout."""
    with named("stdout", "write"):
        print(*values, flush=flush)


def remove_quietly(path: str) -> None:
    """Remove ``path`` if it is there (cleanup after a failed write: its own error is the one to report)."""
    with contextlib.suppress(OSError):
        os.unlink(path)
