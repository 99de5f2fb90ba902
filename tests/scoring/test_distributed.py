"""mhfast.distributed: sharding by cost, ordered gathers, and sharded sampling equal to one process.

Multi-rank tests start real processes on one machine (gloo over loopback, a free port, bounded in
time): 2 and 3 ranks give the one-process chains bit for bit.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import mhfast
import mhfast.distributed as dist
from mhfast.models.tabular import TabularMLM

ROOT = Path(__file__).resolve().parents[2]


def test_shard_balances_by_cost_and_covers_every_item():
    costs = [9, 1, 4, 4, 1, 16, 1, 1]
    parts = dist.shard(costs, 3)
    assert sorted(i for p in parts for i in p) == list(range(8))
    loads = [sum(costs[i] for i in p) for p in parts]
    assert sorted(loads) == [10, 11, 16]  # LPT: 16 | 9+1+1 | 4+4+1+1
    assert dist.shard(costs, 3) == parts  # deterministic
    assert dist.shard([], 2) == [[], []]
    with pytest.raises(ValueError, match="num_ranks"):
        dist.shard([1], 0)


def test_single_process_world_and_gather():
    w = dist.world()
    assert (w.rank, w.size) == (0, 1) and w.is_main
    assert dist.gather({1: "b", 0: "a"}, 2, w) == ["a", "b"]
    with pytest.raises(RuntimeError, match="no rank returned"):
        dist.gather({0: "a"}, 2, w)


def test_sample_in_one_process_equals_mhfast_sample():
    model = TabularMLM.random(num_tokens=3, length=(2, 3), seed=2)
    m, p = model.mask_id, model.pad_id
    init = torch.tensor([[m, m, m], [m, m, p], [0, m, 1], [m, 2, m]])
    kw = dict(chains=3, epochs=4, burn_in=1, seed=4)
    out = dist.sample(model, init=init, **kw)
    ref = mhfast.sample(model, init=init, **kw)
    assert torch.equal(out["tokens"], ref.tokens) and torch.equal(out["best_energy"], ref.best_energy)
    assert torch.equal(out["chain_accepted"], ref.chain_accepted) and torch.equal(out["chain_novel"], ref.chain_novel)


SCRIPT = textwrap.dedent("""
    import sys, torch, mhfast.distributed as dist
    from mhfast.models.tabular import TabularMLM
    w = dist.world(timeout_s=60)
    model = TabularMLM.random(num_tokens=3, length=(2, 3), seed=2)
    m, p = model.mask_id, model.pad_id
    init = torch.tensor([[m, m, m], [m, m, p], [0, m, 1], [m, 2, m], [1, m, p], [m, m, m], [2, 2, m]])
    out = dist.sample(model, init=init, chains=3, epochs=4, burn_in=1, seed=4, world=w)
    if w.is_main:
        torch.save({k: v for k, v in out.items() if k != "rows_per_rank"}, sys.argv[1])
        print("rows per rank", out["rows_per_rank"])
""")


def test_progress_and_generator_are_checked_and_used_as_one_process_does():
    """A progress that cannot be called had failed at the first epoch as "'int' object is not callable" (its
    wrapper hid mhfast.sample's check: a review); a generator draws the seed as in one process (on rank 0)."""
    model = TabularMLM.random(num_tokens=3, length=(3,), seed=2)
    init = torch.full((2, 3), model.mask_id)
    with pytest.raises(ValueError, match="mhfast.distributed.sample: progress must be callable or None"):
        dist.sample(model, init=init, chains=2, epochs=1, burn_in=0, progress=5)
    got = dist.sample(model, init=init, chains=2, epochs=3, burn_in=0, generator=torch.Generator().manual_seed(7))
    one = mhfast.sample(model, init=init, chains=2, epochs=3, burn_in=0, generator=torch.Generator().manual_seed(7))
    assert torch.equal(got["tokens"], one.tokens)
    with pytest.raises(ValueError, match="seed .* and generator cannot both be given"):
        dist.sample(model, init=init, chains=2, epochs=1, burn_in=0, seed=3, generator=torch.Generator())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # 11 s on the 2-core CI machine
@pytest.mark.parametrize("ranks", [2, 3])
def test_sharded_sample_over_ranks_equals_one_process(tmp_path, ranks):
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    out_file = tmp_path / "out.pt"
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *sys.path]), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), WORLD_SIZE=str(ranks), OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, str(script), str(out_file)], env=dict(env, RANK=str(r),
                              LOCAL_RANK=str(r)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(ranks)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    assert "rows per rank" in outs[0][0]
    got = torch.load(out_file)
    model = TabularMLM.random(num_tokens=3, length=(2, 3), seed=2)
    m, p = model.mask_id, model.pad_id
    init = torch.tensor([[m, m, m], [m, m, p], [0, m, 1], [m, 2, m], [1, m, p], [m, m, m], [2, 2, m]])
    ref = mhfast.sample(model, init=init, chains=3, epochs=4, burn_in=1, seed=4)
    for key in ("tokens", "best_tokens", "best_energy", "energy_raw", "energy_local", "chain_proposals",
                "chain_accepted", "chain_novel"):
        assert torch.equal(got[key], getattr(ref, key)), key


TERMS_SCRIPT = textwrap.dedent("""
    import sys, torch, mhfast, mhfast.distributed as dist
    from mhfast.energy_terms import AllowedTokens, Hamming
    from mhfast.models.tabular import TabularMLM
    w = dist.world(timeout_s=60)
    model = TabularMLM.random(num_tokens=3, length=(4,), seed=2)
    m = model.mask_id
    init = torch.tensor([[m, m, m, m], [0, 1, m, m], [m, m, m, 2]])
    ref = torch.tensor([[0, 0, 0, 0], [1, 1, 1, 1], [2, 2, 2, 2]])
    allowed = torch.ones(3, 4, model.vocab_size, dtype=torch.bool)
    allowed[0, :, 2] = allowed[1, 2:, 0] = allowed[2, 0, 1] = False  # a different constraint per input

    def last_is_row(tokens, input_index):  # a user's term that reads the input's index
        return (tokens[:, -1] != input_index.remainder(3)).float()

    terms = [(Hamming(ref), 2.0), (last_is_row, 0.5), AllowedTokens(allowed)]
    out = dist.sample(model, init=init, chains=3, epochs=5, burn_in=1, seed=4, world=w, extra_energy=terms)
    if w.is_main:
        torch.save({k: v for k, v in out.items() if k != "rows_per_rank"}, sys.argv[1])
        print("rows per rank", out["rows_per_rank"], flush=True)
""")


def test_a_mask_of_another_number_of_inputs_is_refused_as_in_one_process():
    """distributed.sample checks extra_energy against all of init before it shares a per-input mask out (a mask of 5
    rows for 3 inputs ran over 2 ranks, one of 2 rows failed with an IndexError on one rank)."""
    from mhfast.energy_terms import AllowedTokens

    model = TabularMLM.random(num_tokens=3, length=(4,), seed=2)
    m = model.mask_id
    init = torch.tensor([[m, m, m, m], [0, 1, m, m], [m, m, m, 2]])
    for rows in (5, 2):
        mask = AllowedTokens(torch.ones(rows, 4, model.vocab_size, dtype=torch.bool))
        with pytest.raises(ValueError, match=r"AllowedTokens mask has shape \(%d, 4, 5\)" % rows):
            dist.sample(model, init=init, chains=2, epochs=1, burn_in=0, extra_energy=[mask])
        with pytest.raises(ValueError, match=r"AllowedTokens mask has shape \(%d, 4, 5\)" % rows):
            mhfast.sample(model, init=init, chains=2, epochs=1, burn_in=0, extra_energy=[mask])


@pytest.mark.slow  # ~8 s
def test_per_input_energy_terms_over_ranks_equal_one_process(tmp_path):
    """extra_energy terms that read input_index (a Hamming reference per input, a user's f(tokens, input_index))
    and a per-input AllowedTokens mask: 2 ranks give one process's results. Before, each rank's inputs were
    numbered from 0, so rank 1 compared its input with reference 0 (silently another target) and its mask of
    3 inputs did not fit its 1 input."""
    (rc0, out0, err0), (rc1, _, err1) = _two_ranks(tmp_path, TERMS_SCRIPT, str(tmp_path / "out.pt"))
    assert rc0 == rc1 == 0, (err0[-2000:], err1[-2000:])
    assert "rows per rank [2, 1]" in out0 or "rows per rank [1, 2]" in out0, out0
    got = torch.load(tmp_path / "out.pt")
    from mhfast.energy_terms import AllowedTokens, Hamming

    model = TabularMLM.random(num_tokens=3, length=(4,), seed=2)
    m = model.mask_id
    init = torch.tensor([[m, m, m, m], [0, 1, m, m], [m, m, m, 2]])
    ref = torch.tensor([[0, 0, 0, 0], [1, 1, 1, 1], [2, 2, 2, 2]])
    allowed = torch.ones(3, 4, model.vocab_size, dtype=torch.bool)
    allowed[0, :, 2] = allowed[1, 2:, 0] = allowed[2, 0, 1] = False

    def last_is_row(tokens, input_index):
        return (tokens[:, -1] != input_index.remainder(3)).float()

    one = mhfast.sample(model, init=init, chains=3, epochs=5, burn_in=1, seed=4,
                        extra_energy=[(Hamming(ref), 2.0), (last_is_row, 0.5), AllowedTokens(allowed)])
    for key in ("tokens", "best_tokens", "best_energy", "energy_raw", "energy_local", "chain_accepted"):
        assert torch.equal(got[key], getattr(one, key)), key


FIELDS_SCRIPT = textwrap.dedent("""
    import sys, torch, mhfast.distributed as dist
    sys.path.insert(0, sys.argv[2])
    from test_distributed import FIELD_CASES, fields_problem
    from mhfast.sampler.options import config_from_kwargs
    w = dist.world(timeout_s=60)
    model, init = fields_problem()
    outs = [dist.sample(model, init=init, world=w, config=config_from_kwargs(kw)) for kw in FIELD_CASES]
    if w.is_main:
        torch.save(outs, sys.argv[1])
""")


def fields_problem():
    model = TabularMLM.random(num_tokens=3, length=(2, 3, 4), seed=2)
    m, p = model.mask_id, model.pad_id
    return model, torch.tensor([[m, m, m, m], [0, 1, m, p], [m, m, 2, m], [m, m, p, p]])


def _second_is_row(tokens, input_index):  # a user's term that reads the input's index
    return (tokens[:, 1] != input_index.remainder(3)).float()


#: options whose results have every optional field: terms (one reading input_index), history and traces; inputs
#: that stop at other epochs (until_rhat: 30, 8, 16 and 10 of them, so rank 0 runs 30, rank 1 16); tempering
FIELD_CASES = [dict(chains=3, epochs=6, burn_in=1, seed=4, extra_energy=[(_second_is_row, 0.5)], record="epoch",
                    trace_every=1),
               dict(chains=3, epochs=30, burn_in=2, seed=4, until_rhat=1.5, trace_every=1),
               dict(chains=2, epochs=6, burn_in=3, seed=4, tempering=3, replicas=True, trace_every=1)]


@pytest.mark.slow  # ~10 s
def test_every_field_over_ranks_equals_one_process_with_options_in_config(tmp_path):
    """dist.sample returns each of SampleResult's per-input fields as one process has it: terms and their names,
    history, traces, convergence, tempering's, padded where a rank ran fewer epochs (until_rhat) as one process
    pads an input that stopped. The options come through ``config``: a term in it that reads input_index had
    been left unshared, so rank 1 read its inputs as 0 and 1 (another target, silently), and terms, convergence
    and tempering's fields had not been returned at all (a review)."""
    (rc0, _, err0), (rc1, _, err1) = _two_ranks(tmp_path, FIELDS_SCRIPT, str(tmp_path / "out.pt"),
                                                str(Path(__file__).parent))
    assert rc0 == rc1 == 0, (err0[-2000:], err1[-2000:])
    model, init = fields_problem()
    for kw, got in zip(FIELD_CASES, torch.load(tmp_path / "out.pt")):
        one = mhfast.sample(model, init=init, **kw)
        assert got["rows_per_rank"] == [2, 2]
        for key, value in got.items():
            if key != "rows_per_rank":
                want = getattr(one, key)
                if isinstance(value, torch.Tensor):
                    torch.testing.assert_close(value, want, rtol=0, atol=0, equal_nan=True, msg=key)
                else:
                    assert value == want, key
        assert {k for k in ("terms", "history", "converged", "ladder", "replica_energy") if got[k] is not None}
    assert torch.load(tmp_path / "out.pt")[1]["epochs_run"].tolist() == [30, 8, 16, 10]


BAD_ROW_SCRIPT = textwrap.dedent("""
    import torch, mhfast.distributed as dist
    from mhfast.models.tabular import TabularMLM
    w = dist.world(timeout_s=60)
    model = TabularMLM.random(num_tokens=3, length=(3,), seed=2)
    free = torch.ones(4, 3, dtype=torch.bool)
    free[3] = False  # row 3 has nothing to sample
    init = torch.full((4, 3), model.mask_id)
    init[3] = torch.tensor([0, 1, 2])
    try:
        dist.sample(model, init=init, free_positions=free, chains=2, epochs=1, burn_in=0, world=w)
    except Exception as e:  # rank 0 raises the error, the others PeerFailed (naming it)
        print("error:", type(e).__name__, e, flush=True)
""")


@pytest.mark.slow  # ~6 s
def test_an_error_in_a_row_names_its_row_of_init_on_every_rank(tmp_path):
    """Each rank had checked its own share, numbered from 0: row 3 was reported as row 1, a valid row (a review).
    Every row is checked first as one process checks it."""
    (rc0, out0, err0), (rc1, out1, err1) = _two_ranks(tmp_path, BAD_ROW_SCRIPT)
    assert rc0 == rc1 == 0, (err0[-2000:], err1[-2000:])
    assert out0.startswith("error: ValueError") and "free_positions row 3 leaves no free position" in out0, out0
    assert out1.startswith("error: PeerFailed") and "row 3" in out1 and "row 1" not in out1 + out0, out1


EXIT_SCRIPT = textwrap.dedent("""
    import atexit, torch, torch.distributed as td, mhfast.distributed as dist
    # atexit runs last-registered first: this check runs after mhfast's own exit handler.
    atexit.register(lambda: print("group alive at exit:", td.is_initialized(), flush=True))
    w = dist.world(timeout_s=60)
    print("gathered", dist.gather({w.rank: w.rank * 10}, w.size, w), flush=True)
""")


def test_the_process_group_is_destroyed_before_the_interpreter_exits(tmp_path):
    """world() destroys the group it created at exit: a gloo group left to the interpreter's teardown
    made a rank die with SIGABRT after its work was done (an intermittent non-zero exit)."""
    script = tmp_path / "exit.py"
    script.write_text(EXIT_SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *sys.path]), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(_free_port()), WORLD_SIZE="2", OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, str(script)], env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
        assert "gathered [0, 10]" in out, out
        assert "group alive at exit: False" in out, out
        assert "terminate called" not in err, err[-2000:]


AGREE_SCRIPT = textwrap.dedent("""
    import sys, torch, mhfast.distributed as dist
    from mhfast.models.tabular import TabularMLM
    w = dist.world(timeout_s=60)
    model = TabularMLM.random(num_tokens=3, length=(2, 3), seed=2)
    m = model.mask_id
    init = torch.tensor([[m, m, m], [0, 1, m]])
    calls = []

    def fails_on_row_1(tokens, input_index):  # fails in rank 1's share, at its third call (checks come before)
        calls.append(1)
        if (input_index == 1).any() and len(calls) > 2:
            raise ValueError("a term failed on row 1")
        return tokens.new_zeros(tokens.shape[0], dtype=torch.float32)

    epochs = []
    try:
        dist.sample(model, init=init, chains=3, epochs=2000, burn_in=0, world=w, extra_energy=fails_on_row_1,
                    progress=lambda e, s: epochs.append(e))
    except Exception as e:
        print(type(e).__name__, "|", e, "|", len(epochs), flush=True)
""")


def test_a_rank_that_fails_makes_the_others_stop_quietly_within_an_epoch(tmp_path):
    """mhfast.distributed.sample with an energy term that fails in rank 1's share: rank 1 raises its own
    ValueError, rank 0 (2000 epochs to go) stops at its next epoch with PeerFailed naming rank 1's error: no
    "Connection closed by peer". (A bad token in rank 1's row is now found on every rank before sampling.)"""
    script = tmp_path / "agree.py"
    script.write_text(AGREE_SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *sys.path]), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(_free_port()), WORLD_SIZE="2", OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, str(script)], env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    kind0, message0, epochs0 = outs[0][0].strip().split(" | ")
    kind1, message1, _ = outs[1][0].strip().split(" | ")
    assert (kind1, kind0) == ("ValueError", "PeerFailed"), outs
    assert "a term failed on row 1" in message1 and message0 == f"rank 1 failed: ValueError: {message1}"
    assert int(epochs0) < 20, f"rank 0 ran {epochs0} epochs after its peer failed"


LIVENESS_SCRIPT = textwrap.dedent("""
    import os, sys, time, torch, mhfast.distributed as dist
    from mhfast.models.tabular import TabularMLM
    w = dist.world(timeout_s=2)
    victim = int(sys.argv[1])
    model = TabularMLM.random(num_tokens=3, length=(4,), seed=2)
    m = model.mask_id
    init = torch.tensor([[m, m, m, m], [m, m, m, m]])  # one row per rank; rank 1's takes about 8 s longer

    def each_epoch(epoch, stats):
        if w.rank == 1:
            time.sleep(0.05)
            if victim == 1 and epoch == 60:
                os._exit(7)  # dies mid-work, as a killed process: no error posted, no agreement

    start = time.time()
    try:
        out = dist.sample(model, init=init, chains=2, epochs=200, burn_in=0, seed=4, world=w, progress=each_epoch)
        print("ok", "|", out["rows_per_rank"], "|", round(time.time() - start, 1), flush=True)
    except Exception as e:
        print(type(e).__name__, "|", e, "|", round(time.time() - start, 1), flush=True)
""")


def _two_ranks(tmp_path, script: str, *args: str) -> list[tuple[int, str, str]]:
    path = tmp_path / "run.py"
    path.write_text(script)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *sys.path]), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(_free_port()), WORLD_SIZE="2", OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, str(path), *args], env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    return [(p.returncode, out, err) for p, (out, err) in zip(procs, outs)]


@pytest.mark.slow  # ~12 s
def test_a_rank_done_early_waits_for_a_slow_peer_longer_than_the_timeout(tmp_path):
    """The timeout bounds a peer's silence, not its work: rank 0 ends its share at once and waits about 10 s for
    rank 1 (timeout 2 s); both finish. Before, rank 0's agreement (a collective under the 2 s timeout) took the
    working rank for a lost one: PeerFailed, and nothing was gathered."""
    (rc0, out0, err0), (rc1, out1, err1) = _two_ranks(tmp_path, LIVENESS_SCRIPT, "-1")
    assert rc0 == rc1 == 0, (err0[-2000:], err1[-2000:])
    kind0, shares, seconds = out0.strip().split(" | ")
    assert (kind0, shares) == ("ok", "[1, 1]") and out1.startswith("ok |"), (out0, out1, err0[-2000:])
    assert float(seconds) > 4, "rank 1's share should take well over the 2 s timeout"


@pytest.mark.slow  # ~10 s
def test_a_rank_that_dies_while_a_peer_waits_is_found_by_its_silent_heartbeat(tmp_path):
    """Rank 1 dies mid-work (os._exit, nothing posted): rank 0, waiting at the agreement, stops with PeerFailed
    naming rank 1's silent heartbeat about 2 s (the timeout) later, instead of waiting forever."""
    (rc0, out0, err0), (rc1, _, _) = _two_ranks(tmp_path, LIVENESS_SCRIPT, "1")
    assert rc1 == 7 and rc0 == 0, err0[-2000:]
    kind0, message0, seconds = out0.strip().split(" | ")
    assert kind0 == "PeerFailed" and "rank 1 sent no heartbeat for 2 s" in message0, out0
    assert float(seconds) < 60


def test_exit_rank_runs_the_exit_handlers_flushes_and_keeps_the_status(tmp_path):
    """exit_rank (a finished torchrun rank's exit, skipping the C++ teardown that could abort it): the atexit
    handlers still run (they destroy the process group), buffered output still arrives, the status is kept."""
    import subprocess
    import sys

    marker = tmp_path / "handler_ran"
    code = ("import atexit, sys, mhfast.distributed as d\n"
            f"atexit.register(lambda: open({str(marker)!r}, 'w').write('yes'))\n"
            "sys.stdout.write('buffered, no newline')\n"
            "d.exit_rank(3)\n"
            "print('not reached')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "buffered, no newline"
    assert marker.read_text() == "yes"


def test_more_local_ranks_than_gpus_is_one_clear_error(monkeypatch):
    """With device="cuda" each local rank takes one GPU: LOCAL_RANK beyond the GPU count is a ValueError naming
    it, before any process group exists (torch.cuda.set_device printed a traceback on each extra rank)."""
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("LOCAL_RANK", "2")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda i: pytest.fail("set_device reached"))
    with pytest.raises(ValueError, match=r"LOCAL_RANK=2, but this machine has 2 GPU\(s\)"):
        dist.world(device="cuda")


@pytest.mark.parametrize("value", ["abc", "0", "-5", "nan", "inf"])
def test_a_bad_timeout_variable_is_named_before_any_process_group(monkeypatch, value):
    """MHFAST_DIST_TIMEOUT that is no positive number of seconds: a ValueError naming the variable (it was
    ``could not convert string to float: 'abc'``, and 0 or a negative number reached torch's process group)."""
    import torch.distributed as td

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("MHFAST_DIST_TIMEOUT", value)
    monkeypatch.setattr(td, "init_process_group", lambda *a, **k: pytest.fail("init_process_group reached"))
    with pytest.raises(ValueError, match=f"^environment variable MHFAST_DIST_TIMEOUT must be a number of seconds > 0, "
                                         f"got '{value}'$"):
        dist.world()


def test_the_heartbeat_outlives_a_transient_store_error(monkeypatch):
    """One failed store call (a timeout under load) no longer ends a rank's heartbeat (its peers would take it for
    lost after the timeout while it works on); a store that keeps failing for the whole timeout ends it, and a
    closed connection (the store's host gone) at once."""
    import threading
    import time

    class FlakyStore:
        def __init__(self, fail_calls):
            self.calls, self.beats, self.fail_calls = 0, 0, fail_calls

        def add(self, key, n):
            self.calls += 1
            if self.calls in self.fail_calls:
                raise RuntimeError("Socket Timeout")
            self.beats += n
            return self.beats

    def run(store, timeout_s, seconds):
        monkeypatch.setattr(dist, "_store", lambda: store)
        monkeypatch.setattr(dist, "_LIVENESS", {"timeout_s": timeout_s, "thread": None, "stop": threading.Event()})
        dist._start_heartbeat(0)
        time.sleep(seconds)
        alive = dist._LIVENESS["thread"].is_alive()
        dist._LIVENESS["stop"].set()
        dist._LIVENESS["thread"].join(5)
        return alive

    transient = FlakyStore({2})
    assert run(transient, 1.0, 0.6) and transient.beats >= 5  # period 0.05 s: beats went on after call 2 failed
    failing = FlakyStore(set(range(3, 10**6)))
    assert not run(failing, 0.5, 1.5) and failing.beats == 2  # failing for longer than the timeout: it ended
    import torch.distributed as td

    class ClosedStore(FlakyStore):  # the store's host is gone: one call, no retry (each printed c10d's warning)
        def add(self, key, n):
            self.calls += 1
            raise td.DistNetworkError("Broken pipe")

    closed = ClosedStore(set())
    assert not run(closed, 5.0, 0.5) and closed.calls == 1
