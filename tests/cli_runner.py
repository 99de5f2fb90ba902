"""Run ``mhfast``'s command line in this process and keep what it printed: the one runner of the CLI test files.

A test that needs the command's real process (signals, a cold import, the exit status the shell sees) starts it with
subprocess instead; this runner is for everything else, and is several times faster.
"""
from __future__ import annotations

import contextlib
import io
from pathlib import Path

import torch

from mhfast.cli import build_parser, main


def run_main(argv: list[str]) -> tuple[int, str, str]:
    """The exit status, stdout and stderr of ``mhfast <argv>``.

    argparse's own refusals leave ``main`` as SystemExit; they count as their exit status, as they would in a shell.
    The streams are swapped for buffers here rather than read from pytest's capsys, so the runner works inside
    hypothesis tests too (a function-scoped fixture is shared by all of a test's examples).

    Example:
        >>> code, out, err = run_main(["score", "--model", path, "--input", "in.txt", "-q"])
    """
    out, err = io.StringIO(), io.StringIO()
    threads = torch.get_num_threads()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code
        finally:  # (translate --threads sets torch's for the process it runs in: here the test's)
            torch.set_num_threads(threads)
    return code, out.getvalue(), err.getvalue()


def long_flags(command: str) -> set[str]:
    """Every option of ``mhfast <command>`` by its long name (``--input`` for ``--input/-i``)."""
    return {next((o for o in a.option_strings if o.startswith("--")), a.option_strings[0])
            for a in build_parser().commands[command]._actions}


def wrong_resumes(table: dict, base: list[str], output: Path, **paths: object) -> list[str]:
    """Resume ``output`` (written by ``mhfast <base>``) once per entry of ``table``, ``{flag: (argv added, base
    tokens dropped, needle)}`` (``{name}`` in the added argv: ``paths[name]``). A needle is the text that must name
    the difference in a one-line refusal (exit 2); None means the resume is accepted (exit 0). Either way the output
    stays as it was. Returns one line per entry that went otherwise."""
    full, wrong = output.read_bytes(), []
    for flag, (extra, drop, needle) in table.items():
        code, _, err = run_main([x for x in base if x not in drop] + [x.format(**paths) for x in extra]
                                + ["--resume"])
        ok = code == 0 if needle is None else code == 2 and needle in err and "--resume" in err and err.count("\n") == 1
        if not ok or output.read_bytes() != full:
            wrong.append(f"{flag}: exit {code}: {err.strip()}")
    return wrong
