"""File handling of the command line: one line rule, one writer per output, resumable committed output.

- :mod:`.lines`: records separated by ``\\n`` only (``\\r\\n`` tolerated), strict UTF-8 with errors
  naming the file and line (the rule of fairseq and sacreBLEU).
- :mod:`.lock`: an exclusive ``flock`` per output path, released by the kernel when the process dies.
- :mod:`.fingerprint`: sha256 of files (model identity by content, not by path and size).
- :mod:`.journal`: output committed in whole records, a self-checksummed progress record, and the
  verification ``--resume`` does before continuing.

Example:
    >>> from mhfast.files import split_records
    >>> split_records("a\\u2028b\\r\\nc\\n".encode("utf-8"), "--input")
    ['a\\u2028b', 'c']
"""
from .fingerprint import file_sha256
from .journal import PROGRESS_SUFFIX, PROGRESS_VERSION, CommittedOutput, write_json_atomic
from .lines import describe, line_of, read_records, split_records
from .lock import OutputLock, OutputInUse

__all__ = ["CommittedOutput", "OutputInUse", "OutputLock", "PROGRESS_SUFFIX", "PROGRESS_VERSION", "describe",
           "file_sha256", "line_of", "read_records", "split_records", "write_json_atomic"]
