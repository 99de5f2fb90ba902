"""``mhfast translate --output``: one writer per output, and ``--resume`` verifies before it continues.

A second run on an output that a live run writes is refused (by path, symlink or as --stats-out) and
the first run's output stays that of an uninterrupted run; a killed writer's lock is gone at once.
``--resume`` refuses, with one line naming the problem and without touching the output, a model file
with other content (same size and mtime), other dictionaries, input, references or options, an
edited, truncated, re-checksummed or missing progress record, and an edited or truncated output;
bytes after the committed ones are dropped. Every option of the command is either in the progress record or
listed as one that leaves the output's bytes as they are (a structural test: a new option must be classified).
Runs are in-process or forked with the tiny CMLM loaded.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
import torch

from mhfast.cli import main
from cli_runner import long_flags, run_main, wrong_resumes
from resume_harness import KILLED, fork_single_threaded, forked_translate, tiny_translator, wait_child


@pytest.fixture(scope="module")
def translator(tiny_paths):
    return tiny_translator(str(tiny_paths["checkpoint"]), str(tiny_paths["data"]))


class Slow:
    """The translator, but every chunk takes at least ``seconds`` (a window for a second writer);
    ``interrupt_at`` raises KeyboardInterrupt (Ctrl-C) at that chunk instead."""

    def __init__(self, translator, seconds: float = 0.0, interrupt_at: int | None = None):
        self.inner, self.seconds, self.interrupt_at, self.calls = translator, seconds, interrupt_at, 0

    def __getattr__(self, name):  # everything else is the translator's own (source_ids, cmlm, ...)
        return getattr(self.inner, name)

    def translate(self, *args, **kwargs):
        self.calls += 1
        if self.calls == self.interrupt_at:
            raise KeyboardInterrupt
        time.sleep(self.seconds)
        return self.inner.translate(*args, **kwargs)


@pytest.fixture
def setup(tiny_paths, tmp_path, translator, monkeypatch):
    """Model files copied into tmp_path (so the test can change them), an input, and ``cli(argv)``
    running ``mhfast translate`` in-process with the preloaded translator."""
    import mhfast.commands.translate as translate

    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(tiny_paths["checkpoint"], model / "checkpoint.pt")
    for d in Path(tiny_paths["data"]).glob("dict.*.txt"):
        shutil.copy(d, model / d.name)
    de = sorted(tiny_paths["valid_de"].read_text(encoding="utf-8").split("\n")[:-1], key=lambda s: len(s.split()))
    src = tmp_path / "src.txt"
    src.write_text("".join(x + "\n" for x in de[:6]), encoding="utf-8")
    ref = tmp_path / "ref.txt"
    ref.write_text("".join(f"reference {i} .\n" for i in range(6)), encoding="utf-8")
    argv = ["translate", "--model", str(model / "checkpoint.pt"), "--data", str(model), "--tokenizer", "none",
            "--input", str(src), "--ref", str(ref), "--batch-size", "2", "--chains", "2", "--epochs", "1",
            "--burn-in", "0", "--seed", "3", "--quiet"]
    state = {"translator": translator}
    monkeypatch.setattr(translate, "_load", lambda args: state["translator"])

    def cli(extra: list[str], capsys) -> tuple[int, str]:
        code = main(argv + extra)
        return code, capsys.readouterr().err

    return dict(model=model, src=src, ref=ref, argv=argv, cli=cli, state=state, tmp=tmp_path)


def refused(cli, extra, capsys, needle: str, out: Path) -> None:
    before = out.read_bytes() if out.exists() else None
    code, err = cli(extra, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert needle in err, err
    assert (out.read_bytes() if out.exists() else None) == before  # untouched


def test_a_resume_compares_the_threads_that_threads_sets(setup, capsys):
    """--resume compared the record's torch threads with this process's before --threads took effect: the same
    --threads on both runs warned (and advised the --threads given), default threads resumed with --threads 1 did
    not (a review). The record keeps the count --threads set, and the resume compares with the count it sets."""
    import warnings

    import torch

    cli, out = setup["cli"], setup["tmp"] / "out.txt"
    before = torch.get_num_threads()
    other = 1 if before > 1 else 2
    try:
        assert cli(["--output", str(out), "--threads", str(other)], capsys)[0] == 0
        assert json.loads((setup["tmp"] / "out.txt.progress").read_text())["torch_threads"] == other
        torch.set_num_threads(before)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the same --threads: nothing to say
            assert cli(["--output", str(out), "--threads", str(other), "--resume"], capsys)[0] == 0
        torch.set_num_threads(before)
        with pytest.warns(UserWarning, match=rf"this run has {other + 1 if other == 1 else 1} torch thread"):
            cli(["--output", str(out), "--threads", str(other + 1 if other == 1 else 1), "--resume"], capsys)
    finally:
        torch.set_num_threads(before)


def test_a_refused_resume_leaves_no_file_behind(setup, capsys):
    """``--resume`` of an output that was removed: the message says so, and no empty output is made (the lock had
    created it: "does not match its progress record (0 bytes, ...)" and a 0-byte file left). ``--resume`` with
    nothing there at all: neither --output nor --stats-out is left as an empty file (an empty --stats-out failed
    ``mhfast evaluate``)."""
    cli, tmp = setup["cli"], setup["tmp"]
    out, stats = tmp / "out.txt", tmp / "stats.json"
    assert cli(["--output", str(out)], capsys)[0] == 0
    out.unlink()
    code, err = cli(["--output", str(out), "--resume"], capsys)
    assert code == 2 and err.strip().endswith(f"--resume: the output {str(out)!r} is not there; rerun without "
                                              "--resume to start over"), err
    assert not out.exists()
    new, new_stats = tmp / "new.txt", tmp / "new.json"
    code, err = cli(["--output", str(new), "--stats-out", str(new_stats), "--resume"], capsys)
    assert code == 2 and "no progress file" in err, err
    assert not new.exists() and not new_stats.exists()
    assert cli(["--output", str(new), "--stats-out", str(new_stats)], capsys)[0] == 0  # a fresh run: both written
    assert new.read_bytes().count(b"\n") == 6 and json.loads(new_stats.read_text())["batches"]


def test_resume_verifies_model_input_options_record_and_output(setup, capsys):
    cli, tmp = setup["cli"], setup["tmp"]
    out = tmp / "out.txt"
    progress = Path(str(out) + ".progress")
    assert cli(["--output", str(out)], capsys)[0] == 0
    full = out.read_bytes()
    assert full.count(b"\n") == 6
    o = ["--output", str(out), "--resume"]
    code, err = cli(o, capsys)  # nothing left to do: verified, unchanged, scores printed again
    assert code == 0 and out.read_bytes() == full and "BLEU" in err

    refused(cli, o + ["--seed", "4"], capsys, "--seed (3 -> 4)", out)
    refused(cli, o + ["--energy", "local"], capsys, "--energy", out)
    refused(cli, ["--output", str(out), "--resume", "--format", "fairseq"], capsys, "--format", out)
    # model files: other bytes, same size and modification time
    ckpt = setup["model"] / "checkpoint.pt"
    stat, original = ckpt.stat(), ckpt.read_bytes()
    middle = len(original) // 2
    ckpt.write_bytes(original[:middle] + bytes([original[middle] ^ 1]) + original[middle + 1:])
    os.utime(ckpt, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    refused(cli, o, capsys, "model checkpoint (content)", out)
    ckpt.write_bytes(original)
    dictionary = sorted(setup["model"].glob("dict.*.txt"))[0]
    text = dictionary.read_bytes()
    dictionary.write_bytes(text.replace(b" ", b"\t", 1))
    refused(cli, o, capsys, f"model {dictionary.name} (content)", out)
    dictionary.write_bytes(text)
    # the input and the references
    src = setup["src"].read_text(encoding="utf-8")
    setup["src"].write_text(src.replace(" ", "  ", 1).replace("\n", "\u2028", 1) + "extra\n", encoding="utf-8")
    refused(cli, o, capsys, "input", out)
    setup["src"].write_text(src, encoding="utf-8")
    setup["ref"].write_text(setup["ref"].read_text().replace("reference 5", "reference 6"))
    refused(cli, o, capsys, "references", out)
    setup["ref"].write_text(setup["ref"].read_text().replace("reference 6", "reference 5"))
    assert cli(o, capsys)[0] == 0  # all restored: accepted again

    # the output against the record
    out.write_bytes(full.replace(b" ", b"_", 1))
    refused(cli, o, capsys, "does not match its progress record", out)
    out.write_bytes(full[:-1])
    refused(cli, o, capsys, "does not match its progress record", out)
    out.write_bytes(full)
    # the record: edited, edited with a valid checksum, truncated, of another format, missing
    from mhfast.files.journal import _checksum

    record = json.loads(progress.read_text())
    progress.write_text(json.dumps(dict(record, lines_done=4)))
    refused(cli, o, capsys, "checksum", out)
    forged = dict(record, lines_done=4)
    forged["checksum"] = _checksum(forged)
    progress.write_text(json.dumps(forged))
    refused(cli, o, capsys, "holds 6 committed sentences, its progress record says 4", out)
    raw = json.dumps(record).encode()
    progress.write_bytes(raw[:len(raw) // 2])
    refused(cli, o, capsys, "not a valid progress file", out)
    progress.write_text("[" * 100000)  # nested too deep for json (RecursionError: a traceback)
    refused(cli, o, capsys, "not a valid progress file", out)
    progress.write_text(json.dumps({"options_hash": "0" * 64, "lines_done": 6, "output_bytes": len(full)}))
    refused(cli, o, capsys, "not a progress file of this mhfast version", out)
    progress.unlink()
    refused(cli, o, capsys, "no progress file", out)


@pytest.mark.parametrize("extra, needle", [
    (["--length-beam", "2"], "--length-beam (1 -> 2)"),
    (["--batch-size", "3"], "--batch-size (2 -> 3)"),
    (["--chains", "3"], "--chains (2 -> 3)"),
    (["--epochs", "2"], "--epochs (1 -> 2)"),
    (["--proposal-temperature", "0.8"], "--proposal-temperature"),
    (["--diagnostics"], "--diagnostics (false -> true)"),  # (its --stats-out records hold the tables or not)
])
def test_resume_refuses_each_option_that_shapes_the_output(setup, capsys, extra, needle):
    """Every option the output (or --stats-out) depends on is in the progress record: a resume with another
    value is refused naming it (only --seed, --energy and --format were tried; --diagnostics was not recorded,
    so a resumed run's statistics mixed records with and without its tables)."""
    cli, out = setup["cli"], setup["tmp"] / "out.txt"
    assert cli(["--output", str(out)], capsys)[0] == 0
    refused(cli, ["--output", str(out), "--resume", *extra], capsys, needle, out)
    assert cli(["--output", str(out), "--resume"], capsys)[0] == 0


#: How each ``translate`` option meets ``--resume``: the argv added (``{tmp}``: the test's folder, ``{bundle}``: the
#: bundled model's), base tokens dropped, and the text that names the difference in the refusal, or None where the
#: option does not decide the output and the resume is accepted. A refusal comes before anything is loaded, so any
#: folder serves as --classifier and any file as --hamming-reference there.
TRANSLATE_RESUME = {
    "--input": (["--input", "{tmp}/other.txt"], (), "input"),
    "--ref": (["--ref", "{tmp}/other.txt"], (), "references"),
    "--limit": (["--limit", "4"], (), "input lines (6 -> 4)"),
    "--format": (["--format", "fairseq"], (), "--format"),
    "--stats-out": (["--stats-out", "{tmp}/stats.json"], (), "--stats-out"),
    "--quiet": ([], ("--quiet",), None),
    "--model": (["--model", "{tmp}/copy/checkpoint.pt"], (), None),  # (by content, not by path)
    "--data": (["--data", "{tmp}/copy"], (), None),
    "--spm": (["--spm", "{bundle}/spm.model"], ("--tokenizer", "none"), "spm"),
    "--tokenizer": ([], ("--tokenizer", "none"), "--tokenizer"),
    # (same bytes need the same thread count, as docs/cli.md says; a resume on another machine may use others)
    "--threads": (["--threads", "1"], (), None),
    "--length-beam": (["--length-beam", "2"], (), "--length-beam"),
    "--batch-size": (["--batch-size", "3"], (), "--batch-size"),
    "--energy": (["--energy", "local"], (), "--energy"),
    "--sampler": (["--sampler", "gibbs"], (), "--sampler"),
    "--chains": (["--chains", "3"], (), "--chains"),
    "--epochs": (["--epochs", "2"], (), "--epochs"),
    "--burn-in": (["--epochs", "2", "--burn-in", "1"], (), "--burn-in"),
    "--order": (["--order", "left-to-right"], (), "--order"),
    "--proposal-temperature": (["--proposal-temperature", "0.8"], (), "--proposal-temperature"),
    "--top-p": (["--top-p", "0.9"], (), "--top-p"),
    "--uniform-mix": (["--uniform-mix", "0.1"], (), "--uniform-mix"),
    "--block-schedule": (["--sampler", "block-mh", "--block-schedule", "2"], (), "--block-schedule"),
    "--target-temperature": (["--target-temperature", "0.5"], (), "--target-temperature"),
    "--anneal": (["--anneal", "0.1"], (), "--anneal"),
    "--min-target-temperature": (["--anneal", "0.1", "--min-target-temperature", "0.5"], (),
                                 "--min-target-temperature"),
    "--tempering": (["--tempering", "2"], (), "--tempering"),
    "--force-accept-epochs": (["--force-accept-epochs", "1"], (), "--force-accept-epochs"),
    "--seed": (["--seed", "4"], (), "--seed"),
    "--device": (["--device", "cpu"], (), "--device"),
    "--backend": (["--backend", "reference"], (), "--backend"),
    "--max-tokens-per-batch": (["--max-tokens-per-batch", "64"], (), "--max-tokens-per-batch"),
    "--forward": (["--forward", "full"], (), "--forward"),
    "--dtype": (["--dtype", "bfloat16"], (), "--dtype"),
    "--capture": (["--capture", "static"], (), "--capture"),
    "--memo": (["--memo", "0"], (), "--memo"),
    "--delayed": (["--delayed", "window:2"], (), "--delayed"),
    "--delayed-min-temperature": (["--epochs", "2", "--anneal", "0.6", "--delayed", "window:2",
                                   "--delayed-min-temperature", "0.5"], (),
                                  "--delayed-min-temperature"),
    "--compile": (["--compile"], (), "--compile"),
    "--start": (["--start", "random"], (), "--start"),
    "--trace-every": (["--epochs", "3", "--diagnostics", "--trace-every", "2"], (), "--trace-every"),
    # (4 epochs: they need 4 draws after burn-in, or are refused before the resume is looked at)
    "--until-rhat": (["--epochs", "4", "--until-rhat", "1.05"], (), "--until-rhat"),
    "--min-ess": (["--epochs", "4", "--min-ess", "10"], (), "--min-ess"),
    "--hamming": (["--hamming", "0.5", "--hamming-reference", "{tmp}/other.txt"], (), "--hamming ("),
    "--hamming-reference": (["--hamming", "0.5", "--hamming-reference", "{tmp}/other.txt"], (),
                            "--hamming-reference"),
    "--classifier": (["--classifier", "{tmp}/copy"], (), "--classifier"),
    "--classifier-label": (["--classifier", "{tmp}/copy", "--classifier-label", "0"], (), "--classifier-label"),
    "--classifier-weight": (["--classifier", "{tmp}/copy", "--classifier-weight", "2"], (), "--classifier-weight"),
    "--diagnostics": (["--diagnostics"], (), "--diagnostics"),
    # (a picture of the chains this process ran, written at its end; docs/cli.md)
    "--plot-traces": (["--plot-traces", "{tmp}/traces.png"], (), None),
}
#: options that are the resume itself, or checked in a run of their own (mask-predict takes no sampler flag)
TRANSLATE_RESUME_ELSEWHERE = {"--help", "--output", "--resume", "--method", "--iterations"}


def test_every_translate_option_is_recorded_for_resume_or_said_not_to_decide_the_output(setup):
    """Structural: each option of ``mhfast translate`` is either in the progress record (a resume with another
    value is refused, naming it) or listed above as one that leaves the output's bytes as they are (the resume
    is accepted). An option added to the command without either fails here, not in a user's resumed file."""
    from mhfast.translation import BUNDLE_DIR

    assert long_flags("translate") == set(TRANSLATE_RESUME) | TRANSLATE_RESUME_ELSEWHERE, \
        "classify the new option for --resume"
    tmp, out = setup["tmp"], setup["tmp"] / "out.txt"
    shutil.copytree(setup["model"], tmp / "copy")
    (tmp / "other.txt").write_text("".join(f"other {i} .\n" for i in range(6)), encoding="utf-8")
    base = setup["argv"] + ["--output", str(out)]
    assert run_main(base)[0] == 0
    wrong = wrong_resumes(TRANSLATE_RESUME, base, out, tmp=tmp, bundle=BUNDLE_DIR)
    assert not wrong, "\n".join(wrong)


def test_resume_of_mask_predict_refuses_other_iterations_or_method(setup, capsys):
    """mask-predict's own options: another --iterations or --method is refused naming it (mask-predict takes no
    sampler flag, so the structural test above runs MH only). Another --method changes 28 recorded options; the
    message names --method first (the changed values before the options set in one run only: it showed four of
    those and hid --method among "24 more")."""
    out = setup["tmp"] / "out.txt"
    sampler = {"--chains", "--epochs", "--burn-in", "--seed"}
    argv = [x for i, x in enumerate(setup["argv"]) if x not in sampler and setup["argv"][i - 1] not in sampler]
    argv += ["--method", "mask-predict", "--iterations", "2", "--output", str(out)]
    assert main(argv) == 0 and "BLEU" in capsys.readouterr().err
    full = out.read_bytes()
    assert full.count(b"\n") == 6
    for extra, needle in ((["--iterations", "3"], "--iterations (2 -> 3)"), (["--iterations", "2"], None),
                          (["--method", "mh", "--iterations", "10"], 'differ in options --method ("mask-predict" -> "mh")')):
        code = main(argv + extra + ["--resume"])
        err = capsys.readouterr().err
        if needle is None:
            assert code == 0 and "BLEU" in err, err
        else:
            assert code == 2 and needle in err and err.count("\n") == 1, err
        assert out.read_bytes() == full


WORDS = ("big", "small", "two", "big", "small", "big")  # one per input line


def test_resume_refuses_an_energy_term_file_with_other_content(setup, capsys, monkeypatch):
    """An energy term's file is recorded by content alone: the same --hamming-reference path with one word changed
    is refused (the structural test above only changes the option's value), the same file by another path is
    not."""
    cli, tmp = setup["cli"], setup["tmp"]
    reference = tmp / "hamming.txt"
    # (11 words: the tiny model gives every source 11 target positions, and a Hamming reference has the length)
    # (words of the target dictionary: a piece it lacks would be <unk>, the mask, and is refused)
    reference.write_text("".join(f"a man {w} is in the water with his dog .\n" for w in WORDS), encoding="utf-8")
    out, hamming = tmp / "out.txt", ["--hamming", "0.5", "--hamming-reference", str(reference)]
    code, err = cli(["--output", str(out), *hamming], capsys)
    assert code == 0, err
    assert cli(["--output", str(out), "--resume", *hamming], capsys)[0] == 0
    # the same file by another path (relative here, absolute above) resumes: it was refused, the path recorded
    monkeypatch.chdir(tmp)
    assert cli(["--output", str(out), "--resume", "--hamming", "0.5", "--hamming-reference", "hamming.txt"],
               capsys)[0] == 0
    reference.write_text(reference.read_text(encoding="utf-8").replace("man two", "dog two"), encoding="utf-8")
    refused(cli, ["--output", str(out), "--resume", *hamming], capsys, "--hamming-reference sha256 (content)", out)


def test_interrupted_run_resumes_and_drops_uncommitted_bytes(setup, translator, capsys):
    cli, tmp = setup["cli"], setup["tmp"]
    full, part = tmp / "full.txt", tmp / "part.txt"
    assert cli(["--output", str(full)], capsys)[0] == 0
    setup["state"]["translator"] = Slow(translator, interrupt_at=2)  # Ctrl-C in the second chunk
    code, err = cli(["--output", str(part)], capsys)
    assert code == 130 and err.strip() == "mhfast translate: interrupted"
    record = json.loads(Path(str(part) + ".progress").read_text())
    assert record["lines_done"] == 2 and part.read_bytes() == full.read_bytes()[:record["output_bytes"]]
    with open(part, "ab") as f:
        f.write("half a sentence ÿ".encode()[:-1])  # what a killed run may leave after its last commit
    setup["state"]["translator"] = translator
    code, err = cli(["--output", str(part), "--resume"], capsys)
    assert code == 0 and part.read_bytes() == full.read_bytes()


def test_one_writer_per_output(setup, translator, capsys):
    cli, tmp = setup["cli"], setup["tmp"]
    ref, out = tmp / "ref_run.txt", tmp / "out.txt"
    assert cli(["--output", str(ref)], capsys)[0] == 0
    link = tmp / "link.txt"
    link.symlink_to(out)
    argv = setup["argv"] + ["--output", str(out)]
    pid = fork_single_threaded()
    if pid == 0:  # the first writer: each chunk takes >= 0.4 s, a window for the second
        import mhfast.commands.translate as translate

        translate._load = lambda args: Slow(translator, seconds=0.4)
        os._exit(forked_exit(argv))
    progress = Path(str(out) + ".progress")
    deadline = time.monotonic() + 60
    while not (progress.is_file() and json.loads(progress.read_text() or "{}").get("lines_done", 0) >= 2):
        assert time.monotonic() < deadline and os.waitpid(pid, os.WNOHANG)[0] == 0, "first writer did not start"
        time.sleep(0.01)
    for extra in (["--output", str(out)], ["--output", str(out), "--resume"], ["--output", str(link)],
                  ["--output", str(tmp / "other.txt"), "--stats-out", str(out)]):
        code, err = cli(extra, capsys)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "is writing it" in err and f"pid {pid}" in err, err
    assert os.waitpid(pid, os.WNOHANG)[0] == 0  # the first run was still going all along
    assert wait_child(pid, kill_after=None) == 0
    assert out.read_bytes() == ref.read_bytes()  # the first run's output, intact


def forked_exit(argv: list[str]) -> int:
    try:
        torch.set_num_threads(1)
        return main(argv)
    except BaseException:
        return 99


def test_a_killed_writer_leaves_no_lock(setup, translator, capsys):
    """SIGKILL closes the writer's descriptors: its lock is gone and --resume goes on at once. (Killed 0.2 s after
    the first commit's record: a fixed 0.5 s from the start came before it on a loaded machine, and --resume
    rightly found nothing to resume.)"""
    cli, tmp = setup["cli"], setup["tmp"]
    ref, out = tmp / "ref_run.txt", tmp / "out.txt"
    assert cli(["--output", str(ref)], capsys)[0] == 0
    status = forked_translate(setup["argv"] + ["--output", str(out)], Slow(translator, seconds=0.3), delay=0.2,
                              after_path=f"{out}.progress")
    assert status == KILLED
    code, err = cli(["--output", str(out), "--resume"], capsys)
    assert code == 0, err
    assert out.read_bytes() == ref.read_bytes()


def test_output_must_not_be_an_input(setup, capsys):
    cli, src = setup["cli"], setup["src"]
    before = src.read_bytes()
    for extra, needle in ((["--output", str(src)], "--output and --input name the same file"),
                          (["--output", str(setup["ref"])], "--output and --ref"),
                          (["--output", str(setup["tmp"] / "o"), "--stats-out", str(setup["tmp"] / "o")],
                           "--output and --stats-out")):
        code, err = cli(extra, capsys)
        assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert src.read_bytes() == before


def test_outputs_never_overwrite_what_the_run_reads(setup, capsys):
    """An output naming the checkpoint, a file of the --data folder or another output's side file is refused
    before anything is opened (--output emptied the checkpoint; --stats-out replaced it and exited 0;
    --stats-out OUT.progress lost the statistics and the run's resumability)."""
    cli, model, tmp = setup["cli"], setup["model"], setup["tmp"]
    checkpoint = model / "checkpoint.pt"
    before = checkpoint.read_bytes()
    for extra, needle in ((["--output", str(checkpoint)], "--output and --model name the same file"),
                          (["--output", str(tmp / "o"), "--stats-out", str(checkpoint)],
                           "--stats-out and --model name the same file"),
                          (["--output", str(sorted(model.glob("dict.*.txt"))[0])],
                           "--output and --model name the same file"),  # (a dictionary of --data)
                          (["--output", str(tmp / "o"), "--stats-out", str(tmp / "o.progress")],
                           "--stats-out and --output's .progress file"),
                          (["--output", str(tmp / "o"), "--stats-out", str(tmp / "o.lock")],
                           "--stats-out and --output's .lock file")):
        code, err = cli(extra, capsys)
        assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, (extra, err)
    assert checkpoint.read_bytes() == before and not (tmp / "o").exists()
    dictionary = sorted(model.glob("dict.*.txt"))[0]
    assert dictionary.read_bytes() and cli(["--output", str(model / "hyp.txt")], capsys)[0] == 0  # beside: fine


def test_a_fresh_run_that_fails_before_its_first_line_keeps_the_previous_output(setup, capsys):
    """A fresh run (no --resume) empties --output only once the model has loaded and every line has been checked:
    a mistyped model or a bad line used to leave an empty file where the previous complete results were."""
    cli, state, out = setup["cli"], setup["state"], setup["tmp"] / "out.txt"
    assert cli(["--output", str(out)], capsys)[0] == 0
    kept, record = out.read_bytes(), (setup["tmp"] / "out.txt.progress").read_bytes()
    translator = state["translator"]

    class Unloadable:
        def __getattr__(self, name):
            raise ValueError("--model: not a fairseq checkpoint (a stand-in for a failed load)")

    state["translator"] = Unloadable()
    code, err = cli(["--output", str(out), "--seed", "4"], capsys)
    state["translator"] = translator
    assert code == 2 and "a stand-in for a failed load" in err, err
    assert out.read_bytes() == kept and (setup["tmp"] / "out.txt.progress").read_bytes() == record
    code, err = cli(["--output", str(out), "--resume"], capsys)  # the earlier run's record still stands
    assert code == 0 and out.read_bytes() == kept, err


def test_a_fresh_run_whose_hamming_reference_does_not_fit_keeps_the_previous_output(setup, capsys):
    """A --hamming-reference line of another length than its sentence is found in the first chunk: the fresh run
    ends before its first commit, and the previous output, record and statistics stand (it had emptied the
    output once the model loaded: a helper's review, 2026-12-02)."""
    cli, tmp = setup["cli"], setup["tmp"]
    out, stats = tmp / "out.txt", tmp / "stats.json"
    assert cli(["--output", str(out), "--stats-out", str(stats)], capsys)[0] == 0
    kept = [p.read_bytes() for p in (out, tmp / "out.txt.progress", stats)]
    short = tmp / "short.txt"
    short.write_text("a\n" * 6, encoding="utf-8")
    code, err = cli(["--output", str(out), "--stats-out", str(stats), "--hamming", "1", "--hamming-reference",
                     str(short)], capsys)
    assert code == 2 and "the sequence it is compared with" in err, err
    assert [p.read_bytes() for p in (out, tmp / "out.txt.progress", stats)] == kept


def test_a_fresh_run_of_no_lines_empties_the_output(setup, capsys):
    cli, tmp = setup["cli"], setup["tmp"]
    out, stats = tmp / "out.txt", tmp / "stats.json"
    assert cli(["--output", str(out), "--stats-out", str(stats)], capsys)[0] == 0
    assert out.read_bytes()
    code, err = cli(["--output", str(out), "--stats-out", str(stats), "--limit", "0"], capsys)
    assert code == 0, err
    assert out.read_bytes() == b"" and json.loads(stats.read_text())["batches"] == []
    assert json.loads((tmp / "out.txt.progress").read_text())["lines_done"] == 0


def test_resume_refuses_other_references_through_a_fifo(setup, capsys):
    """A --hamming-reference that is no regular file (a FIFO, as ``<(cmd)`` gives) is recorded by the lines read
    from it: the same FIFO path with other lines is refused (its path alone had been recorded, and the resume
    continued under the other references)."""
    import threading

    cli, tmp = setup["cli"], setup["tmp"]
    fifo = tmp / "refs.fifo"
    os.mkfifo(fifo)

    def feed(text: str) -> threading.Thread:
        t = threading.Thread(target=lambda: fifo.write_text(text, encoding="utf-8"), daemon=True)
        t.start()
        return t

    def done(t: threading.Thread) -> None:  # a run that never opened the FIFO: the writer is let go, and the test fails
        t.join(timeout=30)
        if t.is_alive():
            fifo.read_bytes()
            pytest.fail("the run did not read the FIFO --hamming-reference")

    lines = "".join(f"a man {w} is in the water with his dog .\n" for w in WORDS)
    out, hamming = tmp / "out.txt", ["--hamming", "0.5", "--hamming-reference", str(fifo)]
    writer = feed(lines)
    code, err = cli(["--output", str(out), *hamming], capsys)
    done(writer)
    assert code == 0, err
    record = json.loads((tmp / "out.txt.progress").read_text())
    assert record["spec"]["options"]["--hamming-reference"]["lines"] == 6
    writer = feed(lines)
    assert cli(["--output", str(out), "--resume", *hamming], capsys)[0] == 0  # the same lines: resumes
    done(writer)
    writer = feed(lines.replace("man two", "dog two"))
    refused(cli, ["--output", str(out), "--resume", *hamming], capsys, "--hamming-reference", out)
    done(writer)


def test_only_the_rank_that_reads_the_inputs_checks_them(tmp_path):
    """Under torchrun rank 0 reads --input and --ref and hands the lines out: the other ranks do not need the files
    on their machines (every rank had checked them: "--input: no such file" on a node without them)."""
    from mhfast.cli import build_parser
    from mhfast.commands.translate import _check

    missing = str(tmp_path / "only_on_rank_0.de")
    args = build_parser().parse_args(["translate", "--input", missing, "--ref", missing, "--quiet"])
    _check(args, main=False)
    with pytest.raises(Exception, match="--input"):
        _check(args, main=True)


def test_a_fresh_run_whose_first_append_fails_leaves_its_own_statistics(setup, capsys, monkeypatch):
    """The first commit of a fresh run empties the output and writes this run's statistics (none yet) before the
    chunk is appended: a full disk there leaves an empty output with this run's statistics, never the previous
    run's beside it (a helper's review of the lazy begin, 2026-12-02)."""
    import errno

    import mhfast.files.journal as journal

    cli, tmp = setup["cli"], setup["tmp"]
    out, stats = tmp / "out.txt", tmp / "stats.json"
    assert cli(["--output", str(out), "--stats-out", str(stats)], capsys)[0] == 0
    first_hash = json.loads(stats.read_text())["options_hash"]

    real = journal.write_all

    def full(fd, data):  # the output's appends fail; the progress record's writes do not
        if os.readlink(f"/proc/self/fd/{fd}") == str(out):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)

    monkeypatch.setattr(journal, "write_all", full)
    code, err = cli(["--output", str(out), "--stats-out", str(stats), "--seed", "9"], capsys)
    monkeypatch.undo()
    assert code == 2 and "No space left on device" in err, err
    data = json.loads(stats.read_text())
    assert out.read_bytes() == b"" and data["batches"] == [] and data["options_hash"] != first_hash
