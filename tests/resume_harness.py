"""Kill ``mhfast translate`` at random points and resume it: the harness of the resume property test
(tests/test_cli_resume_kill.py, bounded) and of scripts/resume_kill_stress.py (long).

Runs are forked from a process that has loaded the model once (``translate._load`` is replaced in
the child only), so a run starts translating at once and a kill costs milliseconds. Two kinds of
kill points, both a real SIGKILL (no cleanup, no flush):

- ``event=k``: at the k-th file operation of the run (``os.write`` after a random prefix of its
  bytes, or just before/after ``os.fsync``/``os.replace``/``os.ftruncate``): every instant of the
  commit protocol is reachable, including a half-written chunk or progress record;
- ``delay=s``: after s seconds of wall time (anywhere, translation included).

Example (see the test for a complete one):
    >>> status = forked_translate(argv, translator, event=5, seed=0)  # doctest: +SKIP
"""
from __future__ import annotations

import functools
import os
import random
import signal
import sys
import time
import traceback
from typing import Any

IO_CALLS = ("write", "fsync", "replace", "ftruncate")
KILLED = -signal.SIGKILL


@functools.lru_cache(maxsize=2)
def tiny_translator(checkpoint: str, data: str) -> Any:
    """The tiny CMLM as a Translator, loaded once per test process and warmed up (one-time
    compilation and caches), so that forked runs start warm."""
    import torch

    from mhfast.translation import load_translator

    torch.set_num_threads(1)
    translator = load_translator(checkpoint, data, tokenizer="none")
    translator.translate(["ein hund ."], sampler_options=dict(chains=1, epochs=1, burn_in=0))
    return translator


def _install_kill_points(event: int | None, rng: random.Random) -> list[int]:
    """Replace os.write/fsync/replace/ftruncate (in this forked child only) by counting versions
    that SIGKILL the process at file operation number ``event``; returns the live counter."""
    real = {name: getattr(os, name) for name in IO_CALLS}
    seen = [0]

    def wrap(name: str) -> Any:
        def call(*args: Any) -> Any:
            seen[0] += 1
            if seen[0] == event:
                if name == "write":  # a torn write: some of the bytes reach the file
                    data = bytes(args[1])
                    real["write"](args[0], data[:rng.randrange(len(data) + 1)])
                elif rng.random() < 0.5:
                    real[name](*args)
                os.kill(os.getpid(), signal.SIGKILL)
            return real[name](*args)
        return call

    for name in IO_CALLS:
        setattr(os, name, wrap(name))
    return seen


def _status(status: int) -> int:
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def forked_translate(argv: list[str], translator: Any, event: int | None = None, delay: float | None = None,
                     seed: int = 0, count_file: str | None = None) -> int:
    """Run ``mhfast <argv>`` in a forked child, killed at file operation ``event`` or after ``delay``
    seconds; returns its exit status, or KILLED. ``count_file`` receives the number of file
    operations of a run that ends."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into the caller's (pytest's) code
        code = 98
        try:
            import torch

            import mhfast.commands.translate as translate
            from mhfast.cli import main

            torch.set_num_threads(1)  # a forked child must not use the parent's thread pool
            translate._load = lambda args: translator
            seen = _install_kill_points(event, random.Random(seed))
            code = main(argv)
            if count_file is not None:
                with open(count_file, "w") as f:
                    f.write(str(seen[0]))
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    if delay is not None:
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:  # it ended before the kill
                return _status(status)
            time.sleep(0.002)
        os.kill(pid, signal.SIGKILL)
    return _status(os.waitpid(pid, 0)[1])
