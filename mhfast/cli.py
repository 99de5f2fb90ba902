"""The ``mhfast`` command line: ``mhfast <command> [options]`` (also ``python3 -m mhfast``).

Each command is a module of :mod:`mhfast.commands` defining ``NAME``, ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int`` (and ``results_on_stdout(args) -> bool`` where its
results do not always go to stdout); modules are discovered automatically, so a new command is a new
file there and needs no edit here.

User errors (bad options, missing files, invalid sequences) print ONE line
``mhfast <command>: error: ...`` on stderr and exit with status 2; set ``MHFAST_DEBUG=1`` to get
the traceback instead. A command whose results go to stdout refuses a closed or read-only stdout before
any work (exit status 2). A closed pipe on stdout (``mhfast translate ... | head -1``) ends the
command quietly with status 141 (128 + SIGPIPE), as other command-line tools do. Under torchrun a
failed job prints its error once: the ranks agree on the failure (:func:`mhfast.distributed.together`),
the rank that saw it (rank 0 for an error every rank sees) prints the line, the others exit quietly
with the same status, and each rank's torchrun error file holds its line for torchrun's summary; such a
rank ends the process itself (``main`` does not return), so that all ranks exit at the same moment.

Example:
    $ python3 -m mhfast sample --model antiberty --length 12 --epochs 4 --burn-in 1
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import pkgutil
import re
import sys
import warnings
from typing import Iterator, Sequence

from . import commands, distributed
from .allocator import tune_cpu_allocator
from .files.errors import named
from .files.journal import check_stdout
from .models.compiled_blocks import CompileError
from .sampler.options import OPTIONS, flag_names


class OneLineParser(argparse.ArgumentParser):
    """argparse, but an error is a single line (no usage dump) and exit status 2."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(_usage_error(self.prog, f"{self.prog}: error: {message}"))


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's "(default: X)" after a flag's help, except where it says nothing: no default (None), a
    switch's False, or a help that already states its default in parentheses ("(default: stdout)", "(default 10
    when ...)"). A help that only mentions a default of something else keeps the flag's own.

    Example:
        >>> p = argparse.ArgumentParser(formatter_class=DefaultsHelpFormatter)
        >>> _ = p.add_argument("--n", type=int, default=3, help="chains")
        >>> _ = p.add_argument("--out", help="file (default: stdout)")
        >>> _ = p.add_argument("--quiet", action="store_true", help="less")
        >>> _ = p.add_argument("--w", type=float, default=1.0, help="weight; reference: the input by default")
        >>> [" ".join(line.split()) for line in p.format_help().splitlines()[-4:]]
        ['--n N chains (default: 3)', '--out OUT file (default: stdout)', '--quiet less', \
'--w W weight; reference: the input by default (default: 1.0)']
    """

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False or "(default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def _usage_error(prog: str, line: str) -> int:
    """The exit status of an argparse error, printed once. Every rank of a torchrun job parses the same argv, so
    all fail alike; they agree first (rank 0 reports), since a rank that exited at once would have torchrun stop
    rank 0 before it printed anything."""
    try:
        distributed.agree_on(ValueError(line))
    except distributed.PeerFailed as peer:
        return _ended(None, None, peer, prog)
    return _ended(2, line)


def _command_modules() -> list:
    mods = [importlib.import_module(f"{commands.__name__}.{info.name}")
            for info in pkgutil.iter_modules(commands.__path__) if not info.name.startswith("_")]
    return sorted((m for m in mods if hasattr(m, "NAME") and hasattr(m, "run")), key=lambda m: m.NAME)


def build_parser() -> argparse.ArgumentParser:
    """The ``mhfast`` parser; ``parser.commands`` maps each command's name to its subparser."""
    parser = OneLineParser(prog="mhfast", description="Metropolis-Hastings sampling from masked language models "
                           "(Goyal, Dyer & Berg-Kirkpatrick, ICLR 2022).")
    sub = parser.add_subparsers(dest="command", metavar="<command>", parser_class=OneLineParser)
    parser.commands = {}
    for mod in _command_modules():
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=getattr(mod, "DESCRIPTION", mod.HELP),
                           formatter_class=DefaultsHelpFormatter)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run, _prog=p.prog, _stdout=getattr(mod, "results_on_stdout", _always))
        parser.commands[mod.NAME] = p
    return parser


def attach_dash_values(parser: argparse.ArgumentParser, argv: Sequence[str]) -> list[str]:
    """``--free -1:3`` given as ``--free=-1:3``, so that the option's own check says what is wrong with the value.

    argparse takes a token that starts with '-' (and is not a plain negative number) for an option, so an option
    that takes one value reported "expected one argument" for ``--free -1:3`` or ``--anneal -inf``. A
    single-dash token right after such an option is attached to it as its value, as getopt does, unless it is
    exactly one of the command's own options (``-q``, ``-o``); ``--long`` tokens and everything after ``--`` are
    left alone.

    Example:
        >>> attach_dash_values(build_parser(), ["sample", "--free", "-1:3", "-q"])[1:]
        ['--free=-1:3', '-q']
    """
    argv = list(argv)
    command = next((i for i, a in enumerate(argv) if a in parser.commands), None)
    if command is None:
        return argv
    # argparse keeps no public table of a parser's options; _option_string_actions is that table
    options = parser.commands[argv[command]]._option_string_actions
    out, i = argv[:command + 1], command + 1
    while i < len(argv):
        token = argv[i]
        if token == "--":
            return out + argv[i:]
        action = options.get(token)
        value = argv[i + 1] if i + 1 < len(argv) else ""
        if action is not None and action.nargs is None and value.startswith("-") and not value.startswith("--") \
                and len(value) > 1 and value not in options:
            out.append(f"{token}={value}")
            i += 2
            continue
        out.append(token)
        i += 1
    return out


def _always(args: argparse.Namespace) -> bool:
    """A command without ``results_on_stdout(args)`` writes its results to stdout whatever its options."""
    return True


def _check_stdout(args: argparse.Namespace) -> None:
    """Refuse a closed or read-only stdout before any work when the command's results go there (the
    command's ``results_on_stdout(args)``): they would be lost, or fail only at the end."""
    if args._stdout(args):
        check_stdout("give --output FILE" if hasattr(args, "output") else "run it with stdout open (e.g. > FILE)")


def entry() -> None:
    """The ``mhfast`` console script and ``python3 -m mhfast``: :func:`main`, then exit with its status (a rank of
    a torchrun job through :func:`mhfast.distributed.exit_rank`, which skips the C++ teardown that can abort a
    finished rank)."""
    code = main()
    if distributed.made_group():
        distributed.exit_rank(code)
    sys.exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: parses ``argv`` (default ``sys.argv[1:]``), runs the command, returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(attach_dash_values(parser, sys.argv[1:] if argv is None else argv))
    if getattr(args, "_run", None) is None:
        parser.print_help(sys.stderr)
        return 2
    if os.environ.get("MHFAST_TUNE_MALLOC", "1") != "0":  # a whole run in this process: keep freed memory
        tune_cpu_allocator()
    try:
        _check_stdout(args)
        with flag_names(), one_line_warnings(args):  # the sampler's own errors name options by their flags
            code = int(args._run(args) or 0)
        if sys.stdout is not None:
            with named("stdout", "write"):
                sys.stdout.flush()  # a reader that went away (or a full disk) shows here, not in the interpreter's exit
        return code
    except distributed.PeerFailed as peer:  # another rank reports the error
        return _ended(None, None, peer, args._prog)
    except BrokenPipeError:
        return _ended(_broken_pipe(), None)
    except (ValueError, TypeError, FileNotFoundError, ImportError, OSError, CompileError) as e:
        if os.environ.get("MHFAST_DEBUG") == "1":
            raise
        message = " ".join(str(e).split()) or type(e).__name__  # one line, whatever the library wrote
        return _ended(2, f"{args._prog}: error: {as_flags(message, args)}")
    except (MemoryError, RuntimeError) as e:
        if not _out_of_memory(e) or os.environ.get("MHFAST_DEBUG") == "1":
            raise
        return _ended(2, f"{args._prog}: error: out of memory ({' '.join(str(e).split())[:200] or 'MemoryError'}): "
                      f"{_memory_advice(args)}")
    except KeyboardInterrupt:
        _say(f"{args._prog}: interrupted")
        return 130


@contextlib.contextmanager
def one_line_warnings(args: argparse.Namespace) -> Iterator[None]:
    r"""Inside, a warning shows as one line on stderr, ``<prog>: warning: <message>``, its API argument named by its
    flag as errors are (:func:`as_flags`), where Python's showed two (``file:line: UserWarning: mhfast.sample:
    ...``, then the source line of the call). Only the format changes: which warnings show is still the filters'
    choice, and a catcher of warnings (``warnings.catch_warnings(record=True)``, pytest) still gets them.

    Example:
        >>> with one_line_warnings(argparse.Namespace(_prog="mhfast sample", model="m")):
        ...     warnings.formatwarning("mhfast.sample: model_or_path: no\n  head split", UserWarning, "f.py", 1)
        'mhfast sample: warning: --model: no head split\n'
    """
    def one_line(message: Warning | str, category: type, filename: str, lineno: int, line: str | None = None) -> str:
        text = as_flags(" ".join(str(message).split()), args)
        if text.startswith("mhfast.") and ": " in text:  # the prog names the command already
            text = text.split(": ", 1)[1]
        return f"{args._prog}: warning: {text}\n"

    before = warnings.formatwarning
    warnings.formatwarning = one_line
    try:
        yield
    finally:
        warnings.formatwarning = before


#: the options that size what a command holds in memory, in the order the advice names them
MEMORY_OPTIONS = (("chains", "--chains"), ("batch_size", "--batch-size"), ("length_beam", "--length-beam"),
                  ("max_tokens_per_batch", "--max-tokens-per-batch"))


#: The arguments of the loaders and the API that an error may start with, and the flag that sets each in the
#: commands that have it: a command's error names what the user typed (``--model: ...``, not ``model_or_path: ...``).
API_FLAGS = {"checkpoint": "--model", "model_or_path": "--model", "model": "--model", "classifier": "--classifier",
             "data_dir_or_dictionary": "--data", "k (length_beam)": "--length-beam", "cdrs": "--cdr",
             "parent": "--parent"}


def as_flags(message: str, args: argparse.Namespace) -> str:
    """``message`` with a leading API argument (after an optional ``mhfast.<function>: ``) named by its flag, where
    the command has that flag (:data:`API_FLAGS`).

    Example:
        >>> as_flags("model_or_path: no config.json", argparse.Namespace(model="m"))
        '--model: no config.json'
        >>> as_flags("mhfast.sample: k (length_beam): at most 3", argparse.Namespace(length_beam=9))
        '--length-beam: at most 3'
        >>> as_flags("model_or_path: no config.json", argparse.Namespace())  # (no --model here: as it was)
        'model_or_path: no config.json'
        >>> as_flags("mhfast.sample: extra_energy: --hamming-reference 'r.txt': line 1 ...", argparse.Namespace())
        "--hamming-reference 'r.txt': line 1 ..."
        >>> as_flags("mhfast.sample: extra_energy: the weighted sum overflows", argparse.Namespace(hamming=1e39))
        'the energy terms (--hamming, --classifier): the weighted sum overflows'
        >>> as_flags("mhfast.sample: block_schedule gives blocks of 9", argparse.Namespace(block_schedule=[9]))
        '--block-schedule gives blocks of 9'
        >>> as_flags("length 600 (+2 special tokens) has 602 tokens", argparse.Namespace(length=600))
        '--length 600 (+2 special tokens) has 602 tokens'
    """
    rest = message.split(": ", 1)[1] if message.startswith("mhfast.") and ": " in message else message
    if rest.startswith("extra_energy: --"):  # a term the command built from its flags names its flag itself
        return rest[len("extra_energy: "):]
    if rest.startswith("extra_energy: ") and hasattr(args, "hamming"):  # the terms the flags made, all of them
        return "the energy terms (--hamming, --classifier): " + rest[len("extra_energy: "):]
    for name, flag in API_FLAGS.items():
        if rest.startswith(name + ": ") and hasattr(args, flag[2:].replace("-", "_")):
            return flag + rest[len(name):]
    # the adapters' frame(length) names the value it checks: "length 600 (+2 special tokens) has 602 tokens ..."
    if re.match(r"length \d+ \(\+\d+ special tokens?\)", rest) and getattr(args, "length", None) is not None:
        return "--" + rest
    # a sampler option named as the API names it ("block_schedule gives blocks of 9 ...", "tempering: tuning ..."):
    # its flag, where this command has it (a plain word only before a colon: "start sequences" is English)
    first = re.match(r"[a-z]+_[a-z_]+(?=[: ])|[a-z]+(?=:)", rest)
    if first and first.group() in OPTIONS and OPTIONS[first.group()].cli and hasattr(args, first.group()):
        return OPTIONS[first.group()].flag + rest[first.end():]
    return message


def _memory_advice(args: argparse.Namespace) -> str:
    """What to lower after running out of memory, naming only options this command has (``sample`` has no
    --batch-size, ``evaluate`` none of them)."""
    flags = [flag for dest, flag in MEMORY_OPTIONS if hasattr(args, dest)]
    return ("use a smaller " + " / ".join(flags) + ", or fewer or shorter inputs") if flags else \
        "use fewer or shorter inputs"


def _ended(status: int | None, line: str | None, peer: distributed.PeerFailed | None = None,
           prog: str = "mhfast") -> int:
    """How a failed command ends: ``line`` on stderr (None: nothing to say, or a ``peer`` reports the error);
    under torchrun the ranks then take the reporter's exit status (:func:`mhfast.distributed.settle`, which
    also holds the quiet ranks until the reporter has printed), each rank's line goes to torchrun's error file
    (a quiet rank's one second after the reporter's, so that torchrun names the reporter the root cause), and
    the ranks that settled together exit at once, here (:func:`mhfast.distributed.exit_together`)."""
    if line is not None:
        _say(line)
    end = distributed.settle(status)
    if peer is not None:
        why = f"rank {peer.rank} failed" if peer.rank is not None else "lost contact with the other ranks"
        distributed.record_error(f"{prog}: stopped because {why}", end.time + 1)
    elif line is not None:
        distributed.record_error(line, end.time)
    if end.together:  # every rank of the job ends at the same moment, with the same status (see exit_together)
        distributed.exit_together(end.status)
    return end.status


def _out_of_memory(e: BaseException) -> bool:
    """An allocation that failed (host or device): the options asked for more than the machine has."""
    if isinstance(e, MemoryError):
        return True
    text = str(e)
    return type(e).__name__ == "OutOfMemoryError" or "can't allocate memory" in text or "out of memory" in text


def _say(line: str) -> None:
    """A line on stderr, if there is a stderr that can take it (it may be closed or a broken pipe)."""
    try:
        if sys.stderr is not None:
            print(line, file=sys.stderr, flush=True)
    except OSError:
        pass


def _broken_pipe() -> int:
    """The reader of stdout went away (``mhfast ... | head``): end quietly, as ``cat`` would, with
    status 128 + SIGPIPE. stdout is pointed at /dev/null so that Python's final flush of what is
    still buffered does not raise again (and print "Exception ignored ...")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (AttributeError, OSError, ValueError):  # no real stdout file descriptor (tests)
        pass
    return 141
