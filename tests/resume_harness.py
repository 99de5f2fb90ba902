"""Kill ``mhfast translate`` at random points and resume it: the harness of the resume property test
(tests/cli/test_cli_resume_kill.py, bounded) and of scripts/resume_kill_stress.py (long).

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

import faulthandler
import functools
import os
import random
import signal
import sys
import threading
import time
import traceback
from typing import Any

IO_CALLS = ("write", "fsync", "replace", "ftruncate")
KILLED = -signal.SIGKILL
# A forked run of the tiny model takes well under a second; one still running after this long is
# stuck. Why a bound at all: a hung child must become a failing test with the child's stack, not a
# suite that waits on waitpid until CI's wall-clock limit (which is what happened once on CI).
CHILD_DEADLINE_S = 120.0


@functools.lru_cache(maxsize=2)
def tiny_translator(checkpoint: str, data: str) -> Any:
    """The tiny CMLM as a Translator, loaded once per test process and warmed up (one-time
    compilation and caches), so that forked runs start warm."""
    import torch

    from mhfast.translation import load_translator

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the forked runs use one thread (forked_translate): warm up as they will run
    try:
        translator = load_translator(checkpoint, data, tokenizer="none")
        translator.translate(["ein hund ."], sampler_options=dict(chains=1, epochs=1, burn_in=0))
    finally:  # this process's own setting is not the harness's to change
        torch.set_num_threads(threads)
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


def wait_child(pid: int, kill_after: float | None, hung_after: float = CHILD_DEADLINE_S + 5.0,
               after_path: str | None = None) -> int:
    """Wait for child ``pid``; SIGKILL it after ``kill_after`` seconds (None: never, it is a kill
    point), counted from when ``after_path`` exists if given (a loaded machine can take longer than any
    fixed delay to reach a point), and return its status. Past ``hung_after`` seconds (by default just
    after the child's own watchdog has printed its stacks) it is killed and AssertionError raised: it hung."""
    start = time.monotonic()
    armed = start if after_path is None else None
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return _status(status)
            now = time.monotonic()
            waited = now - start
            if armed is None and os.path.exists(after_path):
                armed = now
            if kill_after is not None and armed is not None and now - armed >= kill_after:
                os.kill(pid, signal.SIGKILL)
                return _status(os.waitpid(pid, 0)[1])
            if waited >= hung_after:
                raise AssertionError(f"forked run {pid} hung: still running after {waited:.0f} s, killed "
                                     "(every thread's stack at the deadline is on its stderr)")
            time.sleep(0.002)
    except BaseException:  # never leave a child behind, whatever interrupted the wait (a test timeout too)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise


def no_tqdm_monitor_thread() -> None:
    """Keep tqdm from starting its monitor thread in this process; call it before any bar in a
    process that forks runs. Every ``tqdm()``, even a disabled bar, takes tqdm's lock, and the monitor
    takes the same lock every 10 s: a fork at that instant hands the child a lock held by a thread the
    child does not have, and the child waits on it forever in ``tqdm()`` (one CI run hung so). The
    monitor only refreshes bars that print rarely; no test needs it."""
    from tqdm import tqdm

    tqdm.monitor_interval = 0


def fork_single_threaded() -> int:
    """``os.fork()``, refused (AssertionError naming the threads) while this process runs another
    Python thread: the child would get every lock that thread holds, held forever (see
    :func:`no_tqdm_monitor_thread` for the one that did)."""
    others = [t.name for t in threading.enumerate() if t is not threading.current_thread()]
    assert not others, f"refusing to fork while other threads run: {others}"
    return os.fork()


def forked_translate(argv: list[str], translator: Any, event: int | None = None, delay: float | None = None,
                     seed: int = 0, count_file: str | None = None, after_path: str | None = None) -> int:
    """Run ``mhfast <argv>`` in a forked child, killed at file operation ``event`` or after ``delay``
    seconds (from when ``after_path`` exists, if given); returns its exit status, or KILLED.
    ``count_file`` receives the number of file operations of a run that ends."""
    pid = fork_single_threaded()
    if pid == 0:  # the child: never returns into the caller's (pytest's) code
        code = 98
        try:
            # Every thread's stack on stderr if this run has not ended by the deadline (see wait_child);
            # armed first, so that a child stuck in its own set-up is caught too.
            faulthandler.dump_traceback_later(CHILD_DEADLINE_S, file=2)  # fd 2: sys.stderr may be captured
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
            traceback.print_exc(file=sys.__stderr__)  # sys.stderr may be a test capture
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    return wait_child(pid, delay, after_path=after_path)
