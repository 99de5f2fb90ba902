"""File handling of the command line: one line rule, one writer per output, resumable committed output.

- :mod:`.lines`: records separated by ``\\n`` only (``\\r\\n`` tolerated), strict UTF-8 with errors
  naming the file and line (the rule of fairseq and sacreBLEU).
- :mod:`.lock`: an exclusive ``flock`` per output path, released by the kernel when the process dies.
- :mod:`.fingerprint`: sha256 of files (model identity by content, not by path and size).
- :mod:`.journal`: output committed in whole records, a self-checksummed progress record, and the
  verification ``--resume`` does before continuing.
- :mod:`.errors`: every I/O error names the option and path it came from; an input that is a directory is
  named as one.

Example:
    >>> from mhfast.files import split_records
    >>> split_records("a\\u2028b\\r\\nc\\n".encode("utf-8"), "--input")
    ['a\\u2028b', 'c']
"""
from .errors import FileError, check_input, named, stdout_print
from .fingerprint import file_sha256
from .journal import PROGRESS_SUFFIX, PROGRESS_VERSION, CommittedOutput, write_json_atomic
from .lines import describe, line_of, read_records, split_records
from .lock import OutputLock, OutputInUse

__all__ = ["CommittedOutput", "FileError", "OutputInUse", "OutputLock", "PROGRESS_SUFFIX", "PROGRESS_VERSION",
           "check_input", "describe", "file_sha256", "line_of", "named", "read_records", "split_records",
           "stdout_print", "write_json_atomic"]
