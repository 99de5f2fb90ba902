"""One rule for lines: records are separated by ``\\n`` only; a ``\\r`` just before it is dropped (and one that
ends the file: a CRLF file whose last ``\\n`` is missing).

``str.splitlines`` also splits at ``\\r``, ``\\v``, ``\\f``, ``\\x1c-\\x1e``, U+0085, U+2028 and
U+2029, so a sentence holding one of them became two input lines and shifted every later output
line. fairseq and sacreBLEU read files line by line (``for line in f``), never with
``str.splitlines``, so Unicode separators stay inside their sentence there; we take the strict form
of that rule: a record ends at ``\\n`` only, every other character (a lone ``\\r`` within a record included)
stays inside it. Bytes are decoded as strict UTF-8; a bad byte is a ValueError
naming the file, line and byte column. A UTF-8 byte order mark at the very start is dropped.

Example:
    >>> split_records("ein\\u2028hund\\r\\nzwei\\fkatzen\\n".encode(), "--input")
    ['ein\\u2028hund', 'zwei\\x0ckatzen']
"""
from __future__ import annotations

import os
import sys

from .errors import check_input, named

BOM = "\ufeff"


def _decode(data: bytes, name: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise ValueError(f"{name}: line {line}: not valid UTF-8 (byte 0x{data[e.start]:02x} at byte column "
                         f"{column}); convert the file to UTF-8") from None


def split_records(data: bytes | str, name: str) -> list[str]:
    """The ``\\n``-separated records of ``data`` (a final ``\\n`` ends the last record, it does not
    start an empty one); ``name`` (e.g. ``"--input 'src.de'"``) goes into the UTF-8 error."""
    text = _decode(data, name) if isinstance(data, (bytes, bytearray)) else data
    if text.startswith(BOM):
        text = text[1:]
    if not text:
        return []
    records = text.split("\n")
    if records[-1] == "":  # the terminator of the last record
        records.pop()
    return [r[:-1] if r.endswith("\r") else r for r in records]


def _read_stdin() -> bytes | str:
    stdin = sys.stdin
    if stdin is None:  # the process was started with fd 0 closed
        raise ValueError("stdin is closed: give --input FILE (or pipe the sentences in)")
    try:
        buffer = getattr(stdin, "buffer", None)  # bytes, so that decoding follows our rule
        return buffer.read() if buffer is not None else stdin.read()
    except (OSError, ValueError) as e:  # EBADF, EIO, "I/O operation on closed file"
        raise ValueError(f"stdin cannot be read ({' '.join(str(e).split())}): give --input FILE") from None


def describe(path: str | os.PathLike | None, option: str) -> str:
    """How every message names an input of ``option``: ``--input 'src.de'``, or ``--input (stdin)`` for None.

    Example:
        >>> describe("src.de", "--input"), describe(None, "--input")
        ("--input 'src.de'", '--input (stdin)')
    """
    return f"{option} (stdin)" if path is None else f"{option} {str(path)!r}"


def line_of(path: str | os.PathLike | None, option: str, number: int) -> str:
    """How every message names record ``number`` (1-based) of an input: ``--input 'src.de': line 3``."""
    return f"{describe(path, option)}: line {number}"


def read_records(path: str | os.PathLike | None, option: str = "--input") -> list[str]:
    """The records of file ``path`` (stdin for ``None``) by the rule above.

    Raises FileNotFoundError naming ``option`` for a missing file, a FileError naming it for a directory or a
    read error (:mod:`.errors`), ValueError for bad UTF-8.
    """
    if path is None:
        return split_records(_read_stdin(), describe(path, option))
    check_input(path, option)
    with named(describe(path, option), "read"):
        with open(path, "rb") as f:
            data = f.read()
    return split_records(data, describe(path, option))
