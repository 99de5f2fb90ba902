"""Many processes, one result: torch.distributed helpers for sharding mhfast work over ranks.

mhfast's randomness is keyed by (seed, input, chain, step), so an input sampled on any rank with its
GLOBAL index as ``input_ids`` gets the chains it gets in one process. These helpers split work by
cost, run it, and gather results back in input order:

* :func:`world` reads the launcher's environment (``torchrun``: ``RANK``, ``WORLD_SIZE``,
  ``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT``) and initializes the process group once (gloo on
  CPU, NCCL when the ranks use GPUs; one GPU per local rank), with a timeout so that a dead rank
  makes the others fail within bounded time instead of hanging, and destroys the group it created
  when the interpreter exits (:func:`_destroy_at_exit`);
* :func:`shard` assigns items to ranks by cost (longest processing time first: the most expensive
  item goes to the least loaded rank), deterministically;
* :func:`gather` brings every rank's per-item results to every rank (or one) in global order;
* :func:`sample` is :func:`mhfast.sample` over ``init`` rows sharded across the ranks, returning the
  same per-input results as one process;
* :func:`together` ends a stretch of per-rank work with an agreement, so that a failed job reports
  its error once: the lowest rank that failed raises its own error, every other rank raises
  :class:`PeerFailed` (the ``mhfast`` command then exits quietly with the reporter's status,
  :func:`settle`, and names the error in torchrun's failure summary, :func:`record_error`).

Without a launcher (no ``WORLD_SIZE`` or ``WORLD_SIZE=1``) everything runs in-process and nothing
is initialized.

Example (a user's own script, run as ``torchrun --nproc-per-node 2 script.py``)::

    import mhfast, mhfast.distributed as dist
    w = dist.world()                                   # rank, size; process group ready
    result = dist.sample(model, init=rows, chains=5, epochs=33, world=w)   # every rank: all rows
    if w.rank == 0:
        print(result["best_tokens"])                   # a dict of the gathered fields (see :func:`sample`)
"""
from __future__ import annotations

import atexit
import contextlib
import datetime
import heapq
import json
import math
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import torch

DEFAULT_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class World:
    """This process's place among the ranks (``size == 1``: a single process, nothing initialized)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    backend: str | None = None  #: "gloo" or "nccl" once initialized

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def device(self) -> torch.device:
        """The device of this rank: its local GPU under NCCL, else the CPU."""
        return torch.device("cuda", self.local_rank) if self.backend == "nccl" else torch.device("cpu")

    def rank_device(self, given: str | None) -> str | None:
        """The device this rank runs on for a ``--device`` of ``given``: its local GPU under NCCL (one per local
        rank), else ``given``. Commands take it after their progress record's spec, which keeps ``given`` (shared
        by every rank; rank 0's cuda:0 would keep a single process from resuming a torchrun job's output)."""
        return str(self.device) if self.backend == "nccl" else given


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name} must be an int, got {value!r}") from None


def _env_seconds(name: str, default: float) -> float:
    """A positive, finite number of seconds from the environment variable ``name`` (``default`` if unset): a
    ValueError naming the variable otherwise (``float('abc')``'s message named nothing).

    Example:
        >>> os.environ["MHFAST_EXAMPLE_S"] = "abc"
        >>> _env_seconds("MHFAST_EXAMPLE_S", 600)
        Traceback (most recent call last):
        ...
        ValueError: environment variable MHFAST_EXAMPLE_S must be a number of seconds > 0, got 'abc'
        >>> del os.environ["MHFAST_EXAMPLE_S"]
    """
    value = os.environ.get(name)
    if value is None:
        return float(default)
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"environment variable {name} must be a number of seconds > 0, got {value!r}")
    return seconds


def world(device: str | None = None, timeout_s: float | None = None) -> World:
    """The launcher's world, with the process group initialized (idempotent).

    ``device``: "cuda" uses NCCL with one GPU per local rank, anything else gloo. ``timeout_s``
    (default ``MHFAST_DIST_TIMEOUT`` or 600 s) bounds how long a rank waits for a peer that shows no sign of
    life: every rank sends a heartbeat through the launcher's store every few seconds (a thread), a rank that
    ends its share of the work early waits for the others' arrival for as long as they keep beating (their work
    may take hours), and the collectives start only once every rank has arrived. A rank that died (or a
    machine that went away) makes the others raise within about ``timeout_s`` instead of waiting forever.
    """
    size = _env_int("WORLD_SIZE", 1)
    if size <= 1:
        return World()
    rank, local_rank = _env_int("RANK", 0), _env_int("LOCAL_RANK", 0)
    if not 0 <= rank < size:
        raise ValueError(f"RANK={rank} is outside [0, WORLD_SIZE={size})")
    import torch.distributed as td

    if not td.is_initialized():
        backend = "nccl" if _usable_cuda(device) else "gloo"
        if backend == "nccl":
            if local_rank >= torch.cuda.device_count():  # torch's own error here is a traceback per rank
                raise ValueError(f"LOCAL_RANK={local_rank}, but this machine has {torch.cuda.device_count()} "
                                 "GPU(s): with the cuda device each local rank takes one GPU; start at most that "
                                 "many ranks per node (torchrun --nproc-per-node)")
            torch.cuda.set_device(local_rank)
        seconds = timeout_s if timeout_s is not None else _env_seconds("MHFAST_DIST_TIMEOUT", DEFAULT_TIMEOUT_S)
        td.init_process_group(backend, rank=rank, world_size=size, timeout=datetime.timedelta(seconds=seconds))
        atexit.register(_destroy_at_exit)
        _MADE.append(True)
        _LIVENESS["timeout_s"] = seconds
    _start_heartbeat(rank)
    return World(rank, size, local_rank, td.get_backend())


def _usable_cuda(device: Any) -> bool:
    """Whether ``device`` names a CUDA device this machine has. Anything else gets gloo: the commands make the
    world before checking their options, so that a bad ``--device`` is reported once, by the agreement of
    :func:`together`, instead of breaking the process group's start on every rank."""
    try:
        dev = torch.device(device) if device is not None else None
    except (RuntimeError, TypeError, ValueError):
        return False
    return dev is not None and dev.type == "cuda" and torch.cuda.is_available() and \
        (dev.index or 0) < torch.cuda.device_count()


_MADE: list[bool] = []  #: non-empty once :func:`world` has initialized a process group in this process


def made_group() -> bool:
    """Whether :func:`world` initialized a process group in this process (a rank of a torchrun job)."""
    return bool(_MADE)


def exit_rank(code: int) -> None:
    """End this rank's process with ``code`` once its work is done, without the interpreter's C++ teardown.

    Why: even with the group destroyed first (:func:`_destroy_at_exit`), a rank of a 2-rank job could still die
    with SIGABRT ("terminate called without an active exception", no Python frame left) in the static
    destructors that run after the interpreter has finished, with its output complete: measured on
    ``torchrun -m mhfast score --model sapiens-h`` (whose ranks finish within milliseconds of each other), 2 of
    18 runs. The exit handlers still run here (the group is destroyed, logging flushed), then the standard
    streams are flushed and the process ends with ``os._exit``, which runs no C++ destructor.
    """
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: nothing more can reach it
            pass
    os._exit(code)


def _destroy_at_exit() -> None:
    """Destroy the process group :func:`world` created, while the interpreter is still whole.

    Why: a gloo group left to the interpreter's teardown can be destructed with its worker threads
    still joinable, and the process then dies with SIGABRT ("terminate called without an active
    exception") after its work is done (pytorch/pytorch#190489); this made a 2-rank ``mhfast
    translate`` exit non-zero about once in twenty runs. Destroying is local to this rank (no
    collective), so it cannot wait on a rank that already left. A group the user destroyed is left
    alone.
    """
    import torch.distributed as td

    _LIVENESS["stop"].set()
    if td.is_available() and td.is_initialized():
        td.destroy_process_group()


# ---------------------------------------------------------------------------- failures: one report per job
@dataclass(frozen=True)
class Failure:
    """What a failed rank tells the others when they agree (:func:`together`)."""

    rank: int
    message: str  #: one line: the exception's type and text

    @classmethod
    def of(cls, error: BaseException, rank: int) -> "Failure":
        return cls(rank, f"{type(error).__name__}: {' '.join(str(error).split())}")


class PeerFailed(RuntimeError):
    """This rank stops because another one failed: that rank reports the error (``rank``, ``message``; rank None:
    contact with the other ranks was lost, e.g. one was killed), this one stays quiet."""

    def __init__(self, failure: Failure | None, lost: str = ""):
        self.failure = failure
        self.rank = failure.rank if failure is not None else None
        super().__init__(f"rank {failure.rank} failed: {failure.message}" if failure is not None else
                         f"lost contact with the other ranks ({lost})")


_agreed: World | None = None  #: the world whose ranks agreed on a failure in this process (see :func:`settle`)
_blocks = {"opened": 0, "open": []}  #: together() blocks: how many this rank opened, the keys of those still open
#: Text of the collective errors that mean a peer is gone (gloo, NCCL): quiet, since torchrun names that rank.
LOST_CONTACT = ("connection closed", "connection reset", "broken pipe", "timed out", "timeout", "aborted",
                "remote worker", "socket closed")


@contextlib.contextmanager
def together(w: World) -> Iterator[None]:
    """A stretch of work every rank runs with no collective in it, ended by an agreement on how it went.

    If any rank raised, the lowest-ranked one re-raises its error (it reports it: rank 0 for an error every
    rank sees alike) and every other rank raises :class:`PeerFailed`, so the job prints one error and no rank
    meets a peer that already exited ("Connection closed by peer"). :func:`check_peers`, called between units
    of work inside, ends a rank's work soon after a peer failed instead of at the stretch's end. A failure is
    posted to the process group's store at once, and the agreement is an all-gather at the end. With one
    process the block just runs.
    """
    if w.size == 1:
        yield
        return
    key = f"mhfast/failed/{_blocks['opened']}"  # every rank opens the same blocks in the same order
    _blocks["opened"] += 1
    _blocks["open"].append(key)
    try:
        yield
    except Exception as e:
        mine = None if isinstance(e, PeerFailed) else Failure.of(e, w.rank)
        if mine is not None:
            _post(key)
        _agree(w, mine, key)  # returns on the rank that reports its error; raises PeerFailed on the others
        raise
    else:
        _agree(w, None, key)
    finally:
        _blocks["open"].remove(key)


def check_peers() -> None:
    """Inside :func:`together`: PeerFailed if another rank has failed in the current block (else nothing)."""
    store = _store() if _blocks["open"] else None
    if store is not None and store.check([_blocks["open"][-1]]):
        raise PeerFailed(None, "another rank failed")  # replaced by the reporter's details at the agreement


def checking_peers(progress: Callable[[int, dict], None] | None) -> Callable[[int, dict], None]:
    """``progress`` (may be None) followed by :func:`check_peers`: a rank stops within an epoch of a peer's failure."""
    def each_epoch(epoch: int, stats: dict) -> None:
        if progress is not None:
            progress(epoch, stats)
        check_peers()
    return each_epoch


def _store() -> Any:
    """The process group's key-value store (torchrun's), or None where it cannot be reached."""
    try:
        from torch.distributed import distributed_c10d

        return distributed_c10d._get_default_store()
    except (AttributeError, ImportError, RuntimeError, ValueError):
        return None


def _post(key: str) -> None:
    """Tell the other ranks at once that this one failed in the block ``key`` (best effort: the agreement at
    the block's end tells them anyway)."""
    store = _store()
    if store is not None:
        with contextlib.suppress(RuntimeError, ValueError):
            store.set(key, "1")


#: The heartbeat (:func:`_start_heartbeat`): the liveness timeout, the thread, and the event that stops it.
_LIVENESS: dict[str, Any] = {"timeout_s": DEFAULT_TIMEOUT_S, "thread": None, "stop": threading.Event()}


def _beat_key(rank: int) -> str:
    return f"mhfast/alive/{rank}"


def _start_heartbeat(rank: int) -> None:
    """A daemon thread that adds 1 to this rank's counter in the store every ``timeout / 20`` s (at most 5 s),
    for as long as the process lives and the store answers within the timeout: the sign of life that ranks waiting
    at an agreement read (:func:`_arrive`).
    Why a thread and not a beat per epoch or per unit of work: one unit (a long sentence's chains, a model
    load) may take longer than the timeout, and a slow rank must not look dead. Idempotent."""
    store = _store()
    if store is None or _LIVENESS["thread"] is not None:
        return
    period = min(5.0, max(0.05, _LIVENESS["timeout_s"] / 20))  # (a timeout of 0 must not spin on the store)
    stop = _LIVENESS["stop"]

    import torch.distributed as td

    gone = getattr(td, "DistNetworkError", ())  # a closed connection (torch >= 2.2; () catches nothing)

    def beat() -> None:
        failing_since = None
        while True:
            try:
                store.add(_beat_key(rank), 1)
                failing_since = None
            except gone:  # the store's host is gone (the job is ending): nothing left to tell, and every retry
                return  # would print torch's c10d warning with its C++ stack again
            except (RuntimeError, ValueError):
                # Another failed call may be a transient store error (a timeout under load): keep beating.
                # Failing for the whole liveness timeout means the store is gone, and by then every waiting peer
                # has taken this rank for lost anyway: nothing left to tell.
                now = time.monotonic()
                failing_since = now if failing_since is None else failing_since
                if now - failing_since > _LIVENESS["timeout_s"]:
                    return
            if stop.wait(period):
                return

    _LIVENESS["thread"] = threading.Thread(target=beat, name="mhfast-heartbeat", daemon=True)
    _LIVENESS["thread"].start()


def _arrive(w: World, key: str) -> None:
    """Wait, through the store and with no collective, until every rank has reached the end of the block ``key``.

    Why: a collective waits at most the process group's timeout, so a rank whose share of the work ended early
    (fewer inputs, or none: ``mhfast sample --length`` samples on rank 0 alone) took a peer still working
    after 10 minutes for a lost one, and the job ended with nothing written. Here a rank waits for as long as
    every rank not yet arrived keeps its heartbeat going, and gives up (PeerFailed, lost contact) when one has
    been silent for the timeout. Without this process's heartbeat (a World made by hand, not by :func:`world`) it
    returns at once: the agreement's collective then waits under the group's timeout, as before. Without torchrun
    (its agent holds the store), rank 0's process holds it: a rank that outlives rank 0 by more than a heartbeat
    period may print torch's c10d warning about the lost store once before its heartbeat stops."""
    store = _store()
    if store is None or _LIVENESS["thread"] is None:
        return
    timeout = _LIVENESS["timeout_s"]
    try:
        store.set(f"{key}/at/{w.rank}", "1")
        waiting = {r: (None, time.monotonic()) for r in range(w.size) if r != w.rank}
        pause, read_beats = 0.001, 0.0
        # One store call per poll while ranks are missing (all their keys at once); the missing ones, and their
        # heartbeats, at most once a second: the store is one server for every waiting rank.
        while waiting and not store.check([f"{key}/at/{r}" for r in waiting]):
            if time.monotonic() >= read_beats:
                read_beats = time.monotonic() + 1.0
                for r in [r for r in waiting if store.check([f"{key}/at/{r}"])]:
                    del waiting[r]
                for r, (beats, since) in list(waiting.items()):
                    now_beats = store.add(_beat_key(r), 0)
                    if now_beats != beats:
                        waiting[r] = (now_beats, time.monotonic())
                    elif time.monotonic() - since > timeout:
                        raise PeerFailed(None, f"rank {r} sent no heartbeat for {timeout:g} s")
            time.sleep(pause)
            pause = min(2 * pause, 0.2)
    except RuntimeError as e:  # the store's host (rank 0's launcher) is gone
        if isinstance(e, PeerFailed):
            raise
        raise _lost(e) from None


def _agree(w: World, mine: Failure | None, key: str | None = None) -> None:
    """Every rank's outcome of a block, to every rank: returns when no rank failed or this rank reports (the
    lowest failed rank); raises PeerFailed on the others. ``key``: the block, whose ranks are waited for
    (:func:`_arrive`) before the all-gather."""
    global _agreed
    import torch.distributed as td

    if key is not None:
        try:
            _arrive(w, key)
        except PeerFailed:
            if mine is not None:
                return  # this rank reports its own error
            raise
    everyone: list[Any] = [None] * w.size
    try:
        td.all_gather_object(everyone, mine)
    except RuntimeError as e:  # a peer is gone: nobody to agree with
        if mine is not None:
            return  # this rank reports its own error
        raise _lost(e) from None
    failed = [f for f in everyone if f is not None]
    if not failed:
        return
    _agreed = w
    if failed[0].rank != w.rank:
        raise PeerFailed(failed[0])


def _lost(e: RuntimeError) -> RuntimeError:
    """PeerFailed for a collective that failed because a peer is gone, else the error itself (a bug shows)."""
    text = " ".join(str(e).split())
    return PeerFailed(None, text[:200]) if any(p in text.lower() for p in LOST_CONTACT) else e


def _collective(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """A collective call whose failure for a peer that is gone is a quiet PeerFailed, not a traceback."""
    try:
        return fn(*args, **kwargs)
    except RuntimeError as e:
        raise _lost(e) from None


@dataclass(frozen=True)
class Ending:
    """How a rank of a failed job ends (:func:`settle`)."""

    status: int  #: the exit status (the reporting rank's, on every rank that settled together)
    together: bool  #: whether the ranks settled it together (then they exit together: :func:`exit_together`)
    time: float  #: the reporter's time: torchrun's error files order the failures by it


def settle(status: int | None) -> Ending:
    """How a rank whose job failed ends. After an agreement on a failure the ranks exchange their statuses (the
    reporting rank's with its time, None from the quiet ones) and all take the reporter's; this also holds the
    quiet ranks until the reporter has printed its error, since torchrun stops every rank as soon as one exits.
    Without an agreement: ``status`` (1 for a quiet rank), now, not together."""
    global _agreed
    w, _agreed = _agreed, None
    fallback = Ending(1 if status is None else status, False, time.time())
    if w is None:
        return fallback
    import torch.distributed as td

    statuses: list[Any] = [None] * w.size
    try:
        td.all_gather_object(statuses, None if status is None else (status, fallback.time))
    except RuntimeError:  # the reporter is gone already (e.g. a traceback ended it)
        return fallback
    given = [s for s in statuses if s is not None]
    status, when = given[0] if given else (fallback.status, fallback.time)
    _exit_on_sigterm(status)
    return Ending(status, True, when)


def _exit_on_sigterm(status: int) -> None:
    """From here on, torchrun's SIGTERM ends this rank with ``status`` too: the ranks exit within moments of each
    other, but a loaded machine can let torchrun see one exit and stop (SIGTERM) another just before it exits,
    which would then show as killed (exit -15) in torchrun's summary."""
    import signal

    with contextlib.suppress(ValueError, OSError):  # ValueError: not the main thread
        signal.signal(signal.SIGTERM, lambda *_: os._exit(status))


def exit_together(status: int) -> None:
    """End this rank of a failed job now, right after the ranks settled its status (:func:`settle`): stdout and
    stderr flushed, then ``os._exit``. Why not a normal exit: the interpreter's teardown takes 0.1-0.3 s and
    differs between ranks, torchrun stops (SIGTERM) the ranks still running when the first one exits, and its
    summary then shows them killed (exit -15) with an extra warning line, not the status they agreed on."""
    import sys

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, OSError, ValueError):
            stream.flush()
    os._exit(status)


def record_error(line: str, when: float | None = None) -> None:
    """Write ``line`` to torchrun's error file of this rank (``TORCHELASTIC_ERROR_FILE``; nothing without one),
    so that torchrun's failure summary shows it instead of a pointer to how to enable tracebacks. ``when``:
    the failure's time; torchrun names the failure with the earliest (whole second) its root cause."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    stamp = str(int(time.time() if when is None else when))
    data = {"message": {"message": line, "extraInfo": {"py_callstack": line, "timestamp": stamp}}}
    # Whole or not at all (a temporary file renamed over it): torchrun reads the file of every failed rank, also
    # of one it stopped while that rank was writing; a file opened in place was empty then, and torchrun's summary
    # failed with its own traceback, json's "Expecting value" (a fresh clone's test run on an AMD EPYC, 2026-12-02).
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def agree_on(error: BaseException) -> None:
    """For an error every rank meets before any work (the command line's parse): under a launcher, the ranks
    make the world and agree on it (:func:`together`), so one rank reports it; raises PeerFailed on the others."""
    w = world()
    if w.size > 1:
        _agree(w, Failure.of(error, w.rank))


def shard(costs: Sequence[float], num_ranks: int) -> list[list[int]]:
    """Item indices per rank, balanced by cost (LPT: costliest first, to the least loaded rank; ties to
    the lower rank and the lower index), each rank's list ascending.

    Example:
        >>> shard([5, 1, 1, 1, 1, 1], 2)
        [[0], [1, 2, 3, 4, 5]]
        >>> shard([1, 1, 1], 4)
        [[0], [1], [2], []]
    """
    if num_ranks < 1:
        raise ValueError(f"num_ranks must be >= 1, got {num_ranks}")
    heap = [(0.0, r) for r in range(num_ranks)]
    out: list[list[int]] = [[] for _ in range(num_ranks)]
    for i in sorted(range(len(costs)), key=lambda i: (-float(costs[i]), i)):
        load, r = heapq.heappop(heap)
        out[r].append(i)
        heapq.heappush(heap, (load + float(costs[i]), r))
    return [sorted(x) for x in out]


def gather(items: dict[int, Any], total: int, w: World, dst: int | None = None) -> list[Any] | None:
    """Per-item results of all ranks in global order: ``items`` maps global index -> result on this rank.

    Every rank gets the list (``dst=None``), or only rank ``dst`` (others get None). Each index in
    ``range(total)`` must come from exactly one rank.
    """
    if w.size == 1:
        parts = [items]
    else:
        import torch.distributed as td

        if dst is None:
            parts = [None] * w.size
            _collective(td.all_gather_object, parts, items)
        else:
            parts = [None] * w.size if w.rank == dst else None
            _collective(td.gather_object, items, parts, dst=dst)
            if w.rank != dst:
                return None
    merged: dict[int, Any] = {}
    for part in parts:
        for k, v in part.items():
            if k in merged:
                raise RuntimeError(f"mhfast.distributed.gather: item {k} came from two ranks")
            merged[k] = v
    missing = [i for i in range(total) if i not in merged]
    if missing:
        raise RuntimeError(f"mhfast.distributed.gather: no rank returned item(s) {missing[:5]}")
    return [merged[i] for i in range(total)]


def on_main(open_fn: Callable[[], Any], w: World, share: Callable[[Any], Any]) -> tuple[Any, Any]:
    """Rank 0 runs ``open_fn()`` (e.g. locks and resumes an output); every rank gets ``share(result)``.

    Returns ``(result on rank 0 / None elsewhere, shared value)``. An error on rank 0 is raised there (it
    reports it) and as :class:`PeerFailed` on every other rank (they stay quiet): no rank waits.
    """
    if w.size == 1:
        result = open_fn()
        return result, share(result)
    import torch.distributed as td

    result, message = None, [None]
    with together(w):
        if w.is_main:
            result = open_fn()
            message = [share(result)]
    _collective(td.broadcast_object_list, message, src=0)
    return result, message[0]


def run_in_order(keys: Sequence[Any], work: Callable[[Any], Any], cost: Callable[[Any], float], w: World,
                 commit: Callable[[Any], None], per_rank: int = 4) -> None:
    """``work(key)`` for every key, shared over the ranks by ``cost``, and ``commit(result)`` on rank 0 in
    key order (the pattern of ``mhfast translate`` / ``score`` under torchrun).

    One process commits each result as soon as it is done. With several ranks the keys go out in
    windows of ``per_rank`` per rank (cost-balanced by :func:`shard`), each window is gathered on rank
    0 and committed in order; a killed run loses at most the window in flight.

    Example:
        >>> out = []
        >>> run_in_order([3, 1, 2], lambda k: k * 10, float, World(), out.append)
        >>> out
        [30, 10, 20]
    """
    window = 1 if w.size == 1 else per_rank * w.size
    for start in range(0, len(keys), window):
        part = list(keys[start:start + window])
        mine = shard([cost(k) for k in part], w.size)[w.rank]
        results = {}
        with together(w):  # a rank's bad key (or rank 0's failed commit below) ends the job with one report
            for i in mine:
                check_peers()
                results[i] = work(part[i])
        ordered = gather(results, len(part), w, dst=0)
        with together(w):
            for res in ordered if w.is_main else ():
                commit(res)


class _GlobalInputs:
    """An energy term that reads ``input_index`` (e.g. a :class:`~mhfast.energy_terms.Hamming` with one reference
    per input, or a user's ``f(tokens, input_index)``), called with the global row of ``init`` instead of the row
    in this rank's share: on a rank, ``mhfast.sample`` numbers its inputs 0..n-1, so the term read another
    input's reference and every rank but the first sampled a different target, silently."""

    def __init__(self, fn: Callable[..., torch.Tensor], rows: torch.Tensor):
        from .energy_terms import term_name

        self.fn, self.rows = fn, rows  # rows: Long[n], the global index of each input of this rank's share
        self.name = term_name(fn)

    def _global(self, input_index: torch.Tensor) -> torch.Tensor:
        return self.rows.to(input_index.device)[input_index]

    def __call__(self, tokens: torch.Tensor, input_index: torch.Tensor) -> torch.Tensor:
        return self.fn(tokens, self._global(input_index))

    def check_rows(self, tokens: torch.Tensor, input_index: torch.Tensor, pad_id: int) -> None:
        check = getattr(self.fn, "check_rows", None)
        if callable(check):
            check(tokens, self._global(input_index), pad_id)


def _share_terms(extra_energy: Any, rows: list[int]) -> Any:
    """``extra_energy`` for the inputs ``rows`` (global indices) of one rank: terms that read ``input_index`` see
    the global rows (:class:`_GlobalInputs`), and an AllowedTokens mask with one entry per input keeps this
    rank's entries. The structure (a list, ``(term, weight)`` pairs) stays, so names and weights are the same.
    (Checked before against all of ``init``, as one process checks it, by :func:`sample`'s ``build_problem``: a
    mask of 5 rows for 3 inputs.)"""
    from .energy_terms import AllowedTokens, check_extra_energy, wants_index

    index = torch.tensor(rows, dtype=torch.long)

    def one(item: Any) -> Any:
        if isinstance(item, AllowedTokens):
            mask = item.mask
            return item if mask.shape[0] == 1 else AllowedTokens(mask.index_select(0, index.to(mask.device)))
        if isinstance(item, tuple) and len(item) == 2:
            return (one(item[0]), item[1])
        return _GlobalInputs(item, index) if callable(item) and wants_index(item) else item

    value = check_extra_energy(extra_energy)
    return [one(i) for i in value] if isinstance(value, list) else None if value is None else one(value)


#: :class:`mhfast.SampleResult`'s per-input fields, input first (None in a run without them: no extra_energy, no
#: tempering, no traces); ``traces`` and ``replica_energy`` end in a dimension that grows with the epochs run
_PER_INPUT = ("tokens", "lengths", "best_tokens", "best_energy", "energy", "energy_raw", "energy_local", "epochs_run",
              "converged", "terms", "position_proposals", "position_accepted", "position_changed", "ladder",
              "swap_rate", "round_trips", "replica_tokens", "traces", "replica_energy")
#: its per-epoch fields, epoch first, and how a rank that ran fewer epochs (``until_rhat``: its inputs stopped
#: early) is padded to the longest, as one process pads an input that left: counts with zeros, states repeated
_PER_EPOCH = {"chain_proposals": "zeros", "chain_accepted": "zeros", "chain_novel": "zeros",
              "terms_per_epoch": "repeat", "history": "repeat"}
#: its fields that are the same for every input (taken from a rank that ran longest)
_SHARED = ("term_names", "trace_names", "trace_epochs", "burn_in")


def _sample_arguments(model: Any, init: Any, free_positions: Any, world: Any, cost: Any, options: dict
                      ) -> tuple[Any, World, Any, dict]:
    """:func:`sample`'s own arguments checked before anything reads them (its costs read ``init``): the model
    (loaded from a name), ``init`` (Long[B, T] on a device with values), the others by type; ``input_ids`` is not
    an option here (each rank's rows sample as their global indices). Returns ``(model, world, progress, the
    sampler options)``: ``config``'s fields overridden by the keyword options, as :func:`mhfast.sample` merges
    them (a term inside ``config`` had not been shared out with global rows: a review, 2026-12-02)."""
    from .sampler.api import merged_options
    from .sampler.problem import check_devices, check_model, rows_from_init

    where = "mhfast.distributed.sample"
    model = check_model(model, where)
    check_devices(where, init=init, free_positions=free_positions)
    rows_from_init(init, where)
    if free_positions is not None and not isinstance(free_positions, torch.Tensor):
        raise TypeError(f"{where}: free_positions must be a BoolTensor or None, got {type(free_positions).__name__}")
    if world is not None and not isinstance(world, World):
        raise TypeError(f"{where}: world must be a mhfast.distributed.World or None, got {type(world).__name__}")
    if cost is not None and not callable(cost):
        raise TypeError(f"{where}: cost must be a callable row -> float or None, got {type(cost).__name__}")
    if "input_ids" in options:
        raise TypeError(f"{where}: input_ids is not an option here: each row samples as its index in init")
    progress, generator = options.pop("progress", None), options.pop("generator", None)
    if progress is not None and not callable(progress):
        raise ValueError(f"{where}: progress must be callable or None")
    w = world if world is not None else World()
    kwargs = merged_options(options.pop("config", None), None, options)
    if generator is not None:  # rank 0's generator draws the seed, as in one process; every rank samples with it
        kwargs["seed"] = on_main(lambda: merged_options(None, generator, kwargs)["seed"], w, lambda seed: seed)[1]
    return model, w, progress, kwargs


def sample(model: Any, *, init: torch.Tensor, free_positions: torch.Tensor | None = None,
           world: World | None = None, cost: Callable[[torch.Tensor], float] | None = None,
           **options: Any) -> dict:
    """:func:`mhfast.sample` over the rows of ``init`` sharded across ranks, gathered on every rank.

    Each rank samples its rows with their global indices as ``input_ids``, so every row's chains are
    those of a one-process run. Returns a dict of :class:`mhfast.SampleResult`'s per-input fields for all rows,
    in order, equal to one process's: ``tokens``, ``best_tokens``, energies, ``lengths``, ``epochs_run``,
    ``converged``, the extra terms' ``terms``/``terms_per_epoch``/``term_names``, the per-chain counts
    (``chain_proposals``/``_accepted``/``_novel``, Long[E, B, C]; zeros after an input stopped, with
    ``until_rhat``), ``position_*``, ``history`` (``record="epoch"``), the traces (``traces``, ``trace_names``,
    ``trace_epochs``, ``burn_in``: for :func:`mhfast.sampler.diagnostics.diagnose`), the tempering fields
    (``ladder``, ``swap_rate``, ``round_trips``, ``replica_*``), each None where one process's would be; plus the
    ranks' summed ``model_rows`` and ``proposals``, and ``rows_per_rank``. ``cost(row)`` (default: its length
    squared, the cost of an MH sweep) balances the shards. Energy terms that read ``input_index``
    (``extra_energy``, also inside ``config``) get the row of ``init`` on every rank, and a per-input
    AllowedTokens mask is shared out with the rows; every row is checked first as one process checks it, so an
    error names the row of ``init``. With ``generator``, rank 0's draws the seed.

    Example (one process; under torchrun every rank runs it):
        >>> import torch, mhfast.distributed as dist
        >>> from mhfast.models.tabular import TabularMLM
        >>> m = TabularMLM.random(num_tokens=3, length=(3,), seed=0)
        >>> out = dist.sample(m, init=torch.full((2, 3), m.mask_id), chains=2, epochs=2, burn_in=0)
        >>> out["tokens"].shape, out["rows_per_rank"]
        (torch.Size([2, 2, 3]), [2])
    """
    import mhfast
    from .sampler.options import config_from_kwargs
    from .sampler.problem import build_problem

    model, w, progress, kwargs = _sample_arguments(model, init, free_positions, world, cost, options)
    with together(w):  # every row checked as one process checks it: errors name rows of init, not of a share
        build_problem(model, config_from_kwargs(kwargs, "mhfast.distributed.sample"), init=init,
                      free_positions=free_positions)
    pad = int(model.pad_id)
    cost = cost or (lambda row: float(int((row != pad).sum())) ** 2)
    shards = shard([cost(r) for r in init], w.size)
    mine = shards[w.rank]
    items: dict[int, Any] = {}
    totals = {"model_rows": 0, "proposals": 0, "epochs": 0}
    with together(w):  # bad rows on one rank: that rank raises its error, the others PeerFailed
        if mine:
            idx = torch.tensor(mine, dtype=torch.long)
            fp = free_positions.index_select(0, idx.to(free_positions.device)) if free_positions is not None else None
            share = dict(kwargs)
            if kwargs.get("extra_energy") is not None:
                share["extra_energy"] = _share_terms(kwargs["extra_energy"], mine)
            r = mhfast.sample(model, init=init.index_select(0, idx.to(init.device)), free_positions=fp,
                              input_ids=mine, progress=checking_peers(progress), **share)
            items = {i: _input_fields(r, j) for j, i in enumerate(mine)}
            totals = {"model_rows": r.model_rows, "proposals": r.proposals, "epochs": len(r.e_raw),
                      **{k: getattr(r, k) for k in _SHARED}}
    out = _assembled(gather(items, init.shape[0], w), gather({w.rank: totals}, w.size, w))
    out["rows_per_rank"] = [len(s) for s in shards]
    return out


def _input_fields(r: Any, j: int) -> dict:
    """Input ``j`` of the result ``r``: its per-input and per-epoch fields (None where ``r`` has none), on the CPU."""
    fields = {k: None if getattr(r, k) is None else getattr(r, k)[j].cpu() for k in _PER_INPUT}
    fields.update({k: None if getattr(r, k) is None else getattr(r, k)[:, j].cpu() for k in _PER_EPOCH})
    return fields


def _assembled(rows: list[dict], ranks: list[dict]) -> dict:
    """The gathered inputs stacked in order; a field that grows with the epochs padded to the longest rank's (NaN
    for ``traces``/``replica_energy``, as one process leaves them after an input stopped; :data:`_PER_EPOCH`)."""
    longest = max(ranks, key=lambda t: t["epochs"])
    out: dict[str, Any] = {k: longest.get(k) for k in _SHARED}
    for k in _PER_INPUT:
        if rows[0][k] is None:
            out[k] = None
            continue
        dim = _GROWING.get(k)
        out[k] = torch.stack([row[k] if dim is None else _padded(row[k], dim, max(r[k].shape[dim] for r in rows))
                              for row in rows])
    for k, how in _PER_EPOCH.items():
        if rows[0][k] is None:
            out[k] = None
            continue
        length = max(row[k].shape[0] for row in rows)
        out[k] = torch.stack([_grown(row[k], length, how) for row in rows], dim=1)
    out.update(model_rows=sum(t["model_rows"] for t in ranks), proposals=sum(t["proposals"] for t in ranks))
    return out


#: the per-input fields with a dimension of traced sweeps or epochs (of one input's slice), NaN after it stopped
_GROWING = {"traces": -2, "replica_energy": -1}


def _padded(t: torch.Tensor, dim: int, size: int) -> torch.Tensor:
    """``t`` grown to ``size`` along ``dim`` with NaN."""
    shape = list(t.shape)
    shape[dim] = size - t.shape[dim]
    return torch.cat([t, t.new_full(shape, float("nan"))], dim=dim)


def _grown(t: torch.Tensor, length: int, how: str) -> torch.Tensor:
    """``t`` (epoch first) grown to ``length`` epochs: with zeros, or its last epoch repeated."""
    more = length - t.shape[0]
    tail = t.new_zeros(more, *t.shape[1:]) if how == "zeros" else t[-1:].expand(more, *t.shape[1:])
    return torch.cat([t, tail])
