"""Content identity of files: sha256, streamed (the bundled 16 MiB checkpoint hashes in ~20 ms,
so no cache keyed by path/size/mtime: such a cache would trust exactly what issue 11 says not to).

Example:
    >>> import tempfile, os
    >>> with tempfile.NamedTemporaryFile(delete=False) as f:
    ...     _ = f.write(b"abc")
    >>> file_sha256(f.name)[:12]
    'ba7816bf8f01'
    >>> os.unlink(f.name)
"""
from __future__ import annotations

import hashlib
import os

from .errors import named

CHUNK = 1 << 20


def file_sha256(path: str | os.PathLike | None, option: str = "a model file") -> str | None:
    """Hex sha256 of the file's bytes; ``None`` for ``None`` or a file that is not there (the loader
    reports a missing model file with its own message). A read error names ``option`` and the path."""
    if path is None or not os.path.isfile(path):
        return None
    h = hashlib.sha256()
    with named(f"{option} {str(path)!r}", "read"):
        with open(path, "rb") as f:
            while block := f.read(CHUNK):
                h.update(block)
    return h.hexdigest()
