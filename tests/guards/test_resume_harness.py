"""The fork harness of the resume tests (tests/resume_harness.py) never hangs the suite: it refuses to
fork while another thread could hold a lock the child needs, and a child that does not end is killed
and reported as hung."""
from __future__ import annotations

import os
import threading
import time

import pytest
from tqdm import tqdm

from resume_harness import fork_single_threaded, wait_child


def test_fork_is_refused_while_another_thread_runs():
    stop = threading.Event()
    busy = threading.Thread(target=stop.wait, name="busy-thread")
    busy.start()
    try:
        with pytest.raises(AssertionError, match="busy-thread"):
            fork_single_threaded()
    finally:
        stop.set()
        busy.join()


def test_tqdm_starts_no_monitor_thread_in_the_test_process():
    """tests/conftest.py turns the monitor off (no_tqdm_monitor_thread): a bar made here leaves this process
    single-threaded."""
    with open(os.devnull, "w") as sink, tqdm(total=3, file=sink) as bar:
        bar.update(3)
    assert [t.name for t in threading.enumerate()] == [threading.current_thread().name]


def test_a_child_that_does_not_end_is_killed_and_reported():
    pid = fork_single_threaded()
    if pid == 0:  # a stuck run
        time.sleep(60)
        os._exit(0)
    start = time.monotonic()
    with pytest.raises(AssertionError, match="hung"):
        wait_child(pid, kill_after=None, hung_after=0.3)
    assert time.monotonic() - start < 10
    with pytest.raises(ChildProcessError):  # reaped: no zombie, no orphan left running
        os.waitpid(pid, os.WNOHANG)


def test_a_child_killed_at_its_delay_reports_sigkill():
    pid = fork_single_threaded()
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    assert wait_child(pid, kill_after=0.1) == -9


def test_a_delay_after_a_path_counts_from_when_the_path_exists(tmp_path):
    """The kill waits for the child to reach a point (its file), then the delay: a fixed delay from the start had
    come before the first commit on a loaded machine."""
    mark = tmp_path / "reached"
    pid = fork_single_threaded()
    if pid == 0:
        time.sleep(0.4)
        mark.write_text("x")
        time.sleep(60)
        os._exit(0)
    start = time.monotonic()
    assert wait_child(pid, kill_after=0.05, after_path=str(mark)) == -9
    assert time.monotonic() - start >= 0.4 and mark.exists()
