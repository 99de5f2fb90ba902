"""Run ``mhfast``'s command line in this process and keep what it printed: the one runner of the CLI test files.

A test that needs the command's real process (signals, a cold import, the exit status the shell sees) starts it with
subprocess instead; this runner is for everything else, and is several times faster.
"""
from __future__ import annotations

import contextlib
import io

from mhfast.cli import main


def run_main(argv: list[str]) -> tuple[int, str, str]:
    """The exit status, stdout and stderr of ``mhfast <argv>``.

    argparse's own refusals leave ``main`` as SystemExit; they count as their exit status, as they would in a shell.
    The streams are swapped for buffers here rather than read from pytest's capsys, so the runner works inside
    hypothesis tests too (a function-scoped fixture is shared by all of a test's examples).

    Example:
        >>> code, out, err = run_main(["score", "--model", path, "--input", "in.txt", "-q"])
    """
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code
    return code, out.getvalue(), err.getvalue()
