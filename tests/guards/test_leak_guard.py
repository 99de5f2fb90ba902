"""The suite's own guard (tests/leak_guard.py) sees what it is there to see: a thread, a child process (running
or never waited for) and each process-wide setting a test leaves changed; and it waits for a pool that was shut
down without waiting rather than blaming it.

Example:
    python3 -m pytest -q tests/guards/test_leak_guard.py
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import torch

from leak_guard import changed_settings, leaked_since, settings, threads_and_children


def test_a_thread_still_running_is_named():
    before = threads_and_children()
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="left-running")
    thread.start()
    try:
        assert leaked_since(before, grace=0.2) == ["threads still running: ['left-running']"]
    finally:
        stop.set()
        thread.join()
    assert leaked_since(before, grace=0.2) == []


def test_a_pool_shut_down_without_waiting_is_waited_for():
    before = threads_and_children()
    pool = ThreadPoolExecutor(2)
    list(pool.map(abs, range(8)))
    pool.shutdown(wait=False)  # as transformers does after loading weights
    assert leaked_since(before) == []


def test_a_child_process_running_or_unreaped_is_named():
    before = threads_and_children()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        problems = leaked_since(before, grace=0.2)
        assert len(problems) == 1 and problems[0].startswith(f"child processes left: ['{child.pid} (")
    finally:
        child.kill()
    # killed but not waited for: a zombie is a leak too (its exit status is lost)
    problems = leaked_since(before, grace=0.2)
    assert problems == [f"child processes left: ['{child.pid} (zombie, never waited for)']"], problems
    child.wait()
    assert leaked_since(before, grace=0.2) == []


def test_each_changed_setting_is_named(monkeypatch, tmp_path):
    before, cwd = settings(), os.getcwd()
    threads = torch.get_num_threads()
    torch.set_num_threads(threads + 1)
    try:
        monkeypatch.setenv("MHFAST_LEAK_GUARD_PROBE", "1")
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.chdir(tmp_path)
        with torch.no_grad():
            problems = changed_settings(before)
    finally:
        torch.set_num_threads(threads)
    assert problems == [
        f"torch.get_num_threads() changed: {threads} -> {threads + 1}",
        "torch.is_grad_enabled() changed: True -> False",
        f"os.getcwd() changed: {cwd!r} -> {str(tmp_path)!r}",
        f"sys.path changed: added [{str(tmp_path)!r}], removed []",
        "os.environ changed: ['MHFAST_LEAK_GUARD_PROBE']",
    ], problems
