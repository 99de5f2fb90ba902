"""What a test may not leave behind: threads, child processes, and process-wide settings.

Why: several tests fork runs of ``mhfast translate`` from the pytest process (tests/resume_harness.py), and a
fork while another Python thread runs hands the child locks held by a thread it does not have; the harness
therefore refuses to fork then. A thread pool that outlived one test (torch inductor's compile workers on a
cold cache, transformers' weight-loading pool) made every later fork-based test fail on a fresh machine while
warm machines stayed green. So the suite checks it after every test, and fails the test that leaked, by name,
instead of an innocent later one.

Two scopes:
- after every test: no new live Python thread (a pool shut down without waiting gets a grace period to let its
  workers exit) and no new child process, running or unreaped;
- after every module: torch's intra-op thread count, default dtype and grad mode, the working directory,
  ``sys.path`` and the environment are what they were when the module started (module fixtures such as
  ``one_torch_thread`` may change them for the module's tests, and must put them back).

Example (what conftest.py does)::

    before = threads_and_children()
    ...  # the test
    problems = leaked_since(before)   # [] or ["threads still running: ['ThreadPoolExecutor-3_0']"]
"""
from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import NamedTuple

import torch

GRACE_SECONDS = 10.0  # a pool shut down with wait=False: its idle workers exit within milliseconds
# Changes libraries make to themselves on first use, not a test's doing: pytest names the running test in the
# environment; inductor keeps a pointer there and writes its default cache folder there when none was set;
# inductor's C++ builder and scikit-learn (imported by some metric libraries) set Intel OpenMP's KMP_ flags;
# setuptools (imported by inductor's C++ builder) puts its vendored packages on sys.path.
LIBRARY_ENV_KEYS = ("PYTEST_CURRENT_TEST", "_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR", "TORCHINDUCTOR_CACHE_DIR",
                    "KMP_DUPLICATE_LIB_OK", "KMP_INIT_AT_FORK")
LIBRARY_PATH_PARTS = ("site-packages",)


class Live(NamedTuple):
    threads: frozenset[int]   # idents of live Python threads
    children: frozenset[int]  # pids of this process's children (running or zombie)


def child_pids() -> frozenset[int]:
    """This process's children, zombies included, from /proc (Linux); empty where /proc is missing."""
    pids: set[int] = set()
    for task in Path(f"/proc/{os.getpid()}/task").glob("*/children"):
        try:
            pids.update(int(p) for p in task.read_text().split())
        except OSError:  # the task ended while we looked
            continue
    return frozenset(pids)


def threads_and_children() -> Live:
    return Live(frozenset(t.ident for t in threading.enumerate() if t.ident is not None), child_pids())


def _new_threads(before: Live) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.ident not in before.threads and t.is_alive()]


def _describe(pid: int) -> str:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        state = next(line.split()[1] for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                     if line.startswith("State:"))
    except (OSError, StopIteration):
        return str(pid)
    return f"{pid} ({'zombie, never waited for' if state == 'Z' else cmd[:120] or 'running'})"


def leaked_since(before: Live, grace: float = GRACE_SECONDS) -> list[str]:
    """What started after ``before`` and is still there after up to ``grace`` seconds, described."""
    deadline = time.monotonic() + grace
    while True:
        threads, children = _new_threads(before), child_pids() - before.children
        if (not threads and not children) or time.monotonic() >= deadline:
            break
        for t in threads:  # wait for exiting workers rather than polling blindly
            t.join(timeout=0.05)
        if not threads:
            time.sleep(0.05)
    problems = []
    if threads:
        problems.append(f"threads still running: {sorted(t.name for t in threads)}")
    if children:
        problems.append(f"child processes left: {[_describe(p) for p in sorted(children)]}")
    return problems


def settings() -> dict[str, object]:
    """The process-wide settings a module must put back."""
    return {
        "torch.get_num_threads()": torch.get_num_threads(),
        "torch.get_default_dtype()": torch.get_default_dtype(),
        "torch.is_grad_enabled()": torch.is_grad_enabled(),
        "os.getcwd()": os.getcwd(),
        "sys.path": list(sys.path),
        "os.environ": dict(os.environ),
    }


def changed_settings(before: dict[str, object]) -> list[str]:
    """The settings that differ from ``before``, each named with what changed."""
    after = settings()
    problems = []
    for name, old in before.items():
        new = after[name]
        if new == old:
            continue
        if name == "os.environ":
            keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k) and k not in LIBRARY_ENV_KEYS)
            if keys:
                problems.append(f"{name} changed: {keys}")
        elif name == "sys.path":
            added = [p for p in new if p not in old and not any(part in p for part in LIBRARY_PATH_PARTS)]
            removed = [p for p in old if p not in new]
            if added or removed:
                problems.append(f"{name} changed: added {added}, removed {removed}")
        else:
            problems.append(f"{name} changed: {old!r} -> {new!r}")
    return problems
