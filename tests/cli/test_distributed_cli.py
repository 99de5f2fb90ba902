"""``torchrun ... -m mhfast translate``: the bytes of one process, for 2 and 3 ranks, 2 "nodes" through
the c10d rendezvous, and after a rank is killed (rerun with --resume, another world size).

Real torchrun launches on one machine (gloo over loopback, free ports, bounded in time), on the
bundled model with small settings; what NCCL changes (each rank's device) is checked in-process, in a faked
NCCL world of one.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # torchrun with 2-3 ranks: 27-245 s per test

ROOT = Path(__file__).resolve().parents[2]
FAST = ["--input", "bundled", "--limit", "6", "--batch-size", "1", "--chains", "2", "--epochs", "3", "--burn-in",
        "1", "--quiet"]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *sys.path]), OMP_NUM_THREADS="1",
                MHFAST_DIST_TIMEOUT="60")


def _torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", *args]


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> bytes:
    out = tmp_path_factory.mktemp("one") / "out.txt"
    subprocess.run([sys.executable, "-m", "mhfast", "translate", *FAST, "--format", "fairseq", "--output", str(out)],
                   env=_env(), check=True, timeout=300, capture_output=True)
    return out.read_bytes()


@pytest.mark.parametrize("ranks", [2, 3])
def test_ranks_write_the_bytes_of_one_process(tmp_path, one_process, ranks):
    out = tmp_path / "out.txt"
    proc = subprocess.run(_torchrun("--nproc-per-node", str(ranks), "--master-port", str(_port()), "-m", "mhfast",
                                    "translate", *FAST, "--format", "fairseq", "--output", str(out)),
                          env=_env(), timeout=300, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert out.read_bytes() == one_process


def test_two_nodes_through_the_c10d_rendezvous(tmp_path, one_process):
    out = tmp_path / "out.txt"
    port = _port()
    argv = _torchrun("--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                     f"127.0.0.1:{port}", "--rdzv-id", "mhfast-test", "-m", "mhfast", "translate", *FAST,
                     "--format", "fairseq", "--output", str(out))
    nodes = [subprocess.Popen(argv, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [n.communicate(timeout=300) for n in nodes]
    assert all(n.returncode == 0 for n in nodes), [r[1][-2000:] for r in results]
    assert out.read_bytes() == one_process


def _children(pid: int) -> list[int]:
    kids = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        kids += [int(x) for x in (task / "children").read_text().split()]
    return kids


def _lines_done(progress: Path) -> int:
    import json

    try:
        return int(json.loads(progress.read_text())["lines_done"])
    except (OSError, ValueError, KeyError):
        return 0


def test_a_killed_rank_ends_the_run_and_resume_finishes_it(tmp_path):
    """3 ranks commit windows of 12 one-line chunks; a rank is SIGKILLed during the second window: the
    others exit (torchrun ends the job) with the first window committed, and the same command rerun
    with --resume in ONE process (another world size) ends with the bytes of an uninterrupted run."""
    longer = [*FAST[:3], "20", *FAST[4:]]
    full, out = tmp_path / "full.txt", tmp_path / "out.txt"
    subprocess.run([sys.executable, "-m", "mhfast", "translate", *longer, "--output", str(full)], env=_env(),
                   check=True, timeout=300, capture_output=True)
    run = subprocess.Popen(_torchrun("--nproc-per-node", "3", "--master-port", str(_port()), "-m", "mhfast",
                                     "translate", *longer, "--output", str(out)),
                           env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    progress = Path(str(out) + ".progress")
    deadline = time.time() + 240
    while time.time() < deadline and run.poll() is None and _lines_done(progress) < 12:
        time.sleep(0.02)
    workers = _children(run.pid)
    assert run.poll() is None and len(workers) == 3, "the run must still be going after its first window"
    os.kill(workers[-1], signal.SIGKILL)
    t0 = time.time()
    run.communicate(timeout=120)
    assert run.returncode != 0 and time.time() - t0 < 120  # the others exit, no hang
    assert _lines_done(progress) == 12 and out.read_bytes() == full.read_bytes()[:len(out.read_bytes())]
    proc = subprocess.run([sys.executable, "-m", "mhfast", "translate", *longer, "--output", str(out), "--resume"],
                          env=_env(), timeout=300, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert out.read_bytes() == full.read_bytes()


#: imported at start-up (sitecustomize) by the processes of the job below: rank 1 fails where the model loads
_RANK_1_CANNOT_LOAD = """import os
if os.environ.get("RANK") == "1":
    import mhfast.commands.translate

    def _load(args):
        raise FileNotFoundError("--model: rank 1 cannot read it (a test's failure)")

    mhfast.commands.translate._load = _load
"""


def test_a_rank_that_fails_to_load_leaves_the_previous_output_as_it_was(tmp_path):
    """A fresh run empties an existing --output only once every rank has loaded the model and checked every line
    (docs/cli.md). Rank 1 fails at its load, rank 0 loads: the old output stays. Before, rank 0 emptied it inside
    the block that loaded the model, before the ranks agreed that they all had. (score loads in a block of its own
    before that one; its begin() moved out of the line checks' block alike.)"""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_RANK_1_CANNOT_LOAD)
    out = tmp_path / "out.txt"
    out.write_bytes(b"the previous run's results\n")
    env = _env()
    env["PYTHONPATH"] = os.pathsep.join([str(hook), env["PYTHONPATH"]])
    proc = subprocess.run(_torchrun("--nproc-per-node", "2", "--master-port", str(_port()), "-m", "mhfast",
                                    "translate", *FAST[:3], "2", *FAST[4:], "--output", str(out)),
                          env=env, timeout=300, capture_output=True, text=True)
    assert proc.returncode != 0 and "rank 1 cannot read it" in proc.stderr, proc.stderr[-3000:]
    assert out.read_bytes() == b"the previous run's results\n"


def test_score_over_two_ranks_writes_the_bytes_of_one_process(tmp_path):
    src = tmp_path / "heavy.txt"
    src.write_text("EVQLVESGGGLVQPGGSLRLSCAASGFTFSSYAMS\nEVQLVESGGGLVQPGG\nQVQLQESGPGLVKPSETLSLTCTVS\nEVQLV\n")
    argv = ["score", "-i", str(src), "-q", "--batch-size", "1", "--per-token"]
    one, two = tmp_path / "one.tsv", tmp_path / "two.tsv"
    subprocess.run([sys.executable, "-m", "mhfast", *argv, "-o", str(one)], env=_env(), check=True, timeout=300,
                   capture_output=True)
    proc = subprocess.run(_torchrun("--nproc-per-node", "2", "--master-port", str(_port()), "-m", "mhfast", *argv,
                                    "-o", str(two)), env=_env(), timeout=300, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert two.read_bytes() == one.read_bytes()


@pytest.mark.parametrize("command", ["translate", "score"])
def test_input_on_stdin_is_read_by_rank_0_for_every_rank(tmp_path, command):
    """torchrun's ranks share one stdin: rank 0 reads it and hands the lines to the others. Until 2026-12-01 each
    rank read its own share of it, so a job translated or scored some of the lines with exit 0, or waited for a
    rank that had none (a helper's review reproduced both)."""
    from mhfast.translation import BUNDLED_TEST_SOURCE

    if command == "translate":
        text = "".join(BUNDLED_TEST_SOURCE.read_text(encoding="utf-8").splitlines(keepends=True)[:4])
        argv = ["translate", "--batch-size", "1", "--chains", "2", "--epochs", "2", "--burn-in", "0", "-q"]
    else:
        text = "EVQLVESGGGLVQPGGSLRLSCAASGFTFSSYAMS\nEVQLVESGGGLVQPGG\nQVQLQESGPGLVKPSETLSLTCTVS\nEVQLV\n"
        argv = ["score", "-q", "--batch-size", "1"]
    one, two = tmp_path / "one.txt", tmp_path / "two.txt"
    subprocess.run([sys.executable, "-m", "mhfast", *argv, "--output", str(one)], input=text, text=True, env=_env(),
                   check=True, timeout=300, capture_output=True)
    proc = subprocess.run(_torchrun("--nproc-per-node", "2", "--master-port", str(_port()), "-m", "mhfast", *argv,
                                    "--output", str(two)), input=text, env=_env(), timeout=300, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert two.read_bytes() == one.read_bytes() and len(one.read_text().splitlines()) == 4


def test_sample_over_two_ranks_prints_what_one_process_prints(tmp_path):
    import re

    from hf_tiny_models import save_tiny_bert_dir

    tiny = save_tiny_bert_dir(tmp_path / "bert")
    argv = ["sample", "--model", tiny, "--init", "a b c d e f", "g g g", "a b", "--free", "0:2", "--chains", "3",
            "--epochs", "3", "--burn-in", "1", "--energy", "both"]
    one = subprocess.run([sys.executable, "-m", "mhfast", *argv], env=_env(), check=True, timeout=300,
                         capture_output=True, text=True).stdout
    proc = subprocess.run(_torchrun("--nproc-per-node", "2", "--master-port", str(_port()), "-m", "mhfast", *argv),
                          env=_env(), timeout=300, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    clean = lambda text: re.sub(r"\d+\.\d s\b", "<t> s", text)  # noqa: E731  (wall times differ)
    assert clean(proc.stdout) == clean(one) and "[local] input 3" in one and "epoch   3/3" in one


# ---------------------------------------------------------------------------- a failed job reports once
def _failed_job(argv: list[str], cwd: Path) -> str:
    """stderr of a 2-rank torchrun job that must fail, checked for what every failed job must show: torchrun's
    summary with every rank at exit status 2 (no rank killed, none with a traceback of its own)."""
    proc = subprocess.run(_torchrun("--nproc-per-node", "2", "--master-port", str(_port()), "-m", "mhfast", *argv),
                          env=_env(), timeout=300, capture_output=True, text=True, cwd=cwd)
    err = proc.stderr
    assert proc.returncode != 0, err[-3000:]
    assert "[rank" not in err and err.count("Traceback (most recent call last)") <= 1, err[-3000:]  # torchrun's own
    # every rank with the agreed status, none killed (torchrun may still log that it sent a SIGTERM to a rank that
    # was exiting at that moment, on a loaded machine: one line of its own)
    assert err.count("exitcode  : 2 ") == 2 and "Signal 15" not in err, err[-3000:]
    assert len(err.splitlines()) <= 46, f"{len(err.splitlines())} lines:\n{err}"  # issue 37: 67-72 lines before
    return err


def _reported(err: str, rank: int, needle: str) -> None:
    """One error line on the whole job's stderr, from ``rank``: torchrun's root cause names that rank and its
    line; the other rank's entry says it stopped because of it."""
    lines = [line for line in err.splitlines() if line.startswith("mhfast ") and ": error: " in line]
    assert len(lines) == 1 and needle in lines[0], err[-3000:]
    root = err.split("Root Cause")[1]
    assert f"rank      : {rank} " in root and lines[0] in root, root
    assert f"stopped because rank {rank} failed" in err.split("Root Cause")[0], err[-3000:]


def test_a_bad_line_in_another_ranks_batch_is_reported_once(tmp_path):
    """The bad line is in rank 1's batches only (the long first line goes to rank 0), but every line is checked
    before any work, on every rank alike: rank 0 prints the error once and rank 1 exits quietly (before: rank 1's
    error, then a 25-line "Connection closed by peer" traceback from rank 0). A failure in one rank's own share is
    tests/scoring/test_distributed.py's (the failing rank reports, the other stops within an epoch)."""
    from hf_tiny_models import save_tiny_bert_dir

    tiny = save_tiny_bert_dir(tmp_path / "bert")
    (tmp_path / "ids.txt").write_text("5 6 7 8 9 10 11\n99\n")
    err = _failed_job(["score", "--model", tiny, "--ids", "-i", "ids.txt", "--batch-size", "1", "-q"], tmp_path)
    _reported(err, 0, "line 2")


@pytest.mark.parametrize("flags,needle", [
    (["--chains", "x"], "argument --chains: invalid int value"),  # argparse, before the process group exists
    (["--free", "0:9"], "--free 0:9: --init has only 2 tokens"),  # after the model is loaded
])
def test_an_error_every_rank_sees_is_printed_by_rank_0_alone(tmp_path, flags, needle):
    from hf_tiny_models import save_tiny_bert_dir

    tiny = save_tiny_bert_dir(tmp_path / "bert")
    err = _failed_job(["sample", "--model", tiny, "--init", "a b", "--epochs", "1", "--burn-in", "0", *flags],
                      tmp_path)
    _reported(err, 0, needle)


@pytest.mark.parametrize("command", ["translate", "score"])
def test_an_nccl_job_records_the_device_given_not_rank_0s(tmp_path, monkeypatch, command):
    """Under NCCL every rank takes its local GPU (--device cuda -> cuda:LOCAL_RANK), but the progress record keeps
    the --device given: it held rank 0's cuda:0, so a single process with --device cuda could not resume a
    torchrun job's output, nor the reverse. No GPU needed: an NCCL world of one is faked and the run stops where
    it would open the output (before any model or CUDA call)."""
    import mhfast.commands.score as score
    import mhfast.commands.translate as translate
    from mhfast import distributed
    from mhfast.cli import main

    import torch

    import mhfast._C_loader

    monkeypatch.setattr(distributed, "world", lambda device=None, **kw: distributed.World(backend="nccl"))
    for module, name in ((torch.cuda, "is_available"), (mhfast._C_loader, "built_with_cuda")):  # (--device's check)
        monkeypatch.setattr(module, name, lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    seen = {}

    def stop(args, spec, *rest):
        seen.update(spec=spec, device=args.device)
        raise ValueError("stopped before the output")

    monkeypatch.setattr(translate, "_open_output_on_main", stop)
    monkeypatch.setattr(score, "open_output", stop)
    (tmp_path / "in.tsv").write_text("Ein Hund läuft.\tA dog runs.\n")
    argv = (["translate", "--input", "bundled", "--limit", "1"] if command == "translate" else
            ["score", "--model", "bundled", "--input", str(tmp_path / "in.tsv")])
    assert main(argv + ["--device", "cuda", "--output", str(tmp_path / "out"), "-q"]) == 2
    assert seen["spec"]["options"]["--device"] == "cuda" and seen["device"] == "cuda:0", seen["spec"]["options"]


def test_a_rank_stopped_while_writing_its_error_file_leaves_none(tmp_path, monkeypatch):
    """torchrun reads the error file of every failed rank, also of one it stopped while that rank was writing: the
    file is written whole or not at all (an empty file made torchrun's summary fail with its own traceback,
    json's "Expecting value", in a fresh clone's test run, 2026-12-02)."""
    import json

    import mhfast.distributed as dist

    path = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(path))
    real_dump = json.dump

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt  # the stop arrives inside the write

    monkeypatch.setattr(json, "dump", stopped)
    with pytest.raises(KeyboardInterrupt):
        dist.record_error("error: a failure")
    assert os.listdir(tmp_path) == []  # neither an empty error file nor a temporary one
    monkeypatch.setattr(json, "dump", real_dump)
    dist.record_error("error: a failure", when=12.5)
    assert json.loads(path.read_text())["message"]["message"] == "error: a failure" and os.listdir(tmp_path) == [
        "error.json"]
