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
  same per-input results as one process.

Without a launcher (no ``WORLD_SIZE`` or ``WORLD_SIZE=1``) everything runs in-process and nothing
is initialized.

Example (a user's own script, run as ``torchrun --nproc-per-node 2 script.py``)::

    import mhfast, mhfast.distributed as dist
    w = dist.world()                                   # rank, size; process group ready
    result = dist.sample(model, init=rows, chains=5, epochs=33, world=w)   # every rank: all rows
    if w.rank == 0:
        print(result.best_tokens)
"""
from __future__ import annotations

import atexit
import datetime
import heapq
import os
from dataclasses import dataclass
from typing import Any, Callable, Sequence

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


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name} must be an int, got {value!r}") from None


def world(device: str | None = None, timeout_s: float | None = None) -> World:
    """The launcher's world, with the process group initialized (idempotent).

    ``device``: "cuda" uses NCCL with one GPU per local rank, anything else gloo. ``timeout_s``
    (default ``MHFAST_DIST_TIMEOUT`` or 600 s) bounds every collective: a rank that died makes the
    others raise instead of waiting forever.
    """
    size = _env_int("WORLD_SIZE", 1)
    if size <= 1:
        return World()
    rank, local_rank = _env_int("RANK", 0), _env_int("LOCAL_RANK", 0)
    if not 0 <= rank < size:
        raise ValueError(f"RANK={rank} is outside [0, WORLD_SIZE={size})")
    import torch.distributed as td

    use_nccl = device is not None and torch.device(device).type == "cuda"
    backend = "nccl" if use_nccl else "gloo"
    if not td.is_initialized():
        if use_nccl:
            torch.cuda.set_device(local_rank)
        seconds = timeout_s if timeout_s is not None else float(os.environ.get("MHFAST_DIST_TIMEOUT",
                                                                                DEFAULT_TIMEOUT_S))
        td.init_process_group(backend, rank=rank, world_size=size, timeout=datetime.timedelta(seconds=seconds))
        atexit.register(_destroy_at_exit)
    return World(rank, size, local_rank, backend)


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

    if td.is_available() and td.is_initialized():
        td.destroy_process_group()


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
            td.all_gather_object(parts, items)
        else:
            parts = [None] * w.size if w.rank == dst else None
            td.gather_object(items, parts, dst=dst)
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

    Returns ``(result on rank 0 / None elsewhere, shared value)``. An error on rank 0 (ValueError,
    OSError) is raised there and, as a ValueError naming it, on every other rank: no rank waits.
    """
    if w.size == 1:
        result = open_fn()
        return result, share(result)
    import torch.distributed as td

    result, message = None, [None]
    if w.is_main:
        try:
            result = open_fn()
            message = [("ok", share(result))]
        except (ValueError, OSError) as e:
            td.broadcast_object_list([("error", f"{type(e).__name__}: {e}")], src=0)
            raise
    td.broadcast_object_list(message, src=0)
    status, value = message[0]
    if status == "error":
        raise ValueError(f"rank 0 failed ({value})")
    return result, value


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
        results = {i: work(part[i]) for i in mine}
        ordered = gather(results, len(part), w, dst=0)
        if w.is_main:
            for res in ordered:
                commit(res)


_PER_INPUT = ("tokens", "lengths", "best_tokens", "best_energy", "energy", "energy_raw", "energy_local", "epochs_run")


def sample(model: Any, *, init: torch.Tensor, free_positions: torch.Tensor | None = None,
           world: World | None = None, cost: Callable[[torch.Tensor], float] | None = None,
           **options: Any) -> dict:
    """:func:`mhfast.sample` over the rows of ``init`` sharded across ranks, gathered on every rank.

    Each rank samples its rows with their global indices as ``input_ids``, so every row's chains are
    those of a one-process run. Returns a dict of the per-input fields of :class:`mhfast.SampleResult`
    (``tokens``, ``best_tokens``, energies, ``lengths``, ``epochs_run``; padded to ``init``'s width) and the
    per-chain proposal counts (``chain_proposals``/``_accepted``/``_novel``, Long[E, B, C]; zeros after an input
    stopped, with ``until_rhat``) for all rows, in
    order, plus ``rows_per_rank``. ``cost(row)`` (default: its length squared, the cost of an MH
    sweep) balances the shards.
    """
    import mhfast
    from .sampler.state import ChainCounts

    w = world if world is not None else World()
    pad = int(model.pad_id)
    cost = cost or (lambda row: float(int((row != pad).sum())) ** 2)
    shards = shard([cost(r) for r in init], w.size)
    mine = shards[w.rank]
    items: dict[int, Any] = {}
    if mine:
        idx = torch.tensor(mine, dtype=torch.long)
        fp = free_positions.index_select(0, idx.to(free_positions.device)) if free_positions is not None else None
        r = mhfast.sample(model, init=init.index_select(0, idx.to(init.device)), free_positions=fp,
                          input_ids=mine, **options)
        for j, i in enumerate(mine):
            items[i] = {**{k: getattr(r, k)[j].cpu() for k in _PER_INPUT},
                        **{k: getattr(r, k)[:, j].cpu() for k in ChainCounts.FIELDS}}  # Long[E, B, C]
    rows = gather(items, init.shape[0], w)
    out = {k: torch.stack([row[k] for row in rows]) for k in _PER_INPUT}
    epochs = max(row[ChainCounts.FIELDS[0]].shape[0] for row in rows)  # until_rhat: ranks may stop apart
    grow = lambda t: torch.cat([t, t.new_zeros(epochs - t.shape[0], *t.shape[1:])])  # noqa: E731  (no proposals)
    out.update({k: torch.stack([grow(row[k]) for row in rows], dim=1) for k in ChainCounts.FIELDS})
    out["rows_per_rank"] = [len(s) for s in shards]
    return out
