"""``mhfast translate`` / ``mhfast evaluate`` and ``mhfast.sample(input_ids=...)``.

The translation tests run the tiny fairseq CMLM of conftest.py's ``tiny_paths`` (trained once per
session, shared with test_fairseq_cmlm.py) with ``--tokenizer none`` on its held-out sentences
(already tokenized). The resume test kills a real ``python -m mhfast translate`` process with
SIGKILL after its first chunks are committed and checks that ``--resume`` ends with the bytes of an
uninterrupted run.
"""
from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import mhfast
from cli_runner import run_main
from mhfast.models.tabular import ConditionalTabularMLM, TabularMLM

ROOT = Path(__file__).resolve().parents[2]
FAST = ["--chains", "2", "--epochs", "2", "--burn-in", "1"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ---------------------------------------------------------------------------- sample(input_ids=)
def test_sample_input_ids_make_pieces_equal_one_call():
    """Sampling 5 rows in pieces with their global indices reproduces the one-call chains."""
    model = TabularMLM.random(num_tokens=3, length=(2, 3), seed=3)
    m, p = model.mask_id, model.pad_id
    init = torch.tensor([[m, m, m], [m, m, p], [m, m, m], [m, m, m], [m, m, p]])
    kw = dict(chains=3, epochs=4, burn_in=1, seed=5, record="epoch")
    whole = mhfast.sample(model, init=init, **kw)
    assert torch.equal(whole.history, mhfast.sample(model, init=init, input_ids=range(5), **kw).history)
    a = mhfast.sample(model, init=init[:2], input_ids=[0, 1], **kw)
    b = mhfast.sample(model, init=init[2:], input_ids=torch.tensor([2, 3, 4]), **kw)
    assert torch.equal(torch.cat([a.history, b.history], dim=1), whole.history)
    assert torch.equal(torch.cat([a.best_tokens, b.best_tokens]), whole.best_tokens)
    # without the global indices the second piece draws input 0's numbers: other chains
    c = mhfast.sample(model, init=init[2:], **kw)
    assert not torch.equal(c.history, b.history)


def test_sample_input_ids_with_sources_and_length_beam():
    model = ConditionalTabularMLM.random(num_tokens=3, lengths=(2, 3), num_sources=3, seed=4)
    kw = dict(length_beam=2, chains=2, epochs=4, burn_in=1, seed=9, record="epoch")
    whole = mhfast.sample(model, source=torch.tensor([0, 1, 2]), **kw)
    a = mhfast.sample(model, source=torch.tensor([0]), input_ids=[0], **kw)
    b = mhfast.sample(model, source=torch.tensor([1, 2]), input_ids=[1, 2], **kw)
    T = whole.tokens.shape[2]
    pad = lambda t: torch.nn.functional.pad(t, (0, T - t.shape[-1]), value=model.pad_id)  # noqa: E731
    assert torch.equal(torch.cat([pad(a.history), pad(b.history)], dim=1), whole.history)
    assert torch.equal(torch.cat([a.chosen_candidate, b.chosen_candidate]), whole.chosen_candidate)


@pytest.mark.parametrize("ids,match", [([0, 1], "one per"), ([0, -1, 2], ">= 0"), ([0.0, 1.0, 2.0], "ints"),
                                       (torch.zeros(3, 1, dtype=torch.long), "1-D")])
def test_sample_bad_input_ids(ids, match):
    model = TabularMLM.random(num_tokens=3, length=2, seed=0)
    init = torch.full((3, 2), model.mask_id)
    with pytest.raises(ValueError, match="input_ids.*" + match):
        mhfast.sample(model, init=init, input_ids=ids, chains=1, epochs=1, burn_in=0)


# ---------------------------------------------------------------------------- translate (tiny CMLM)
@pytest.fixture(scope="module")
def tiny(tiny_paths):
    return tiny_paths


@pytest.fixture(scope="module")
def translator(tiny):
    from mhfast.translation import load_translator

    return load_translator(tiny["checkpoint"], tiny["data"], tokenizer="none")


@pytest.fixture(scope="module")
def sources(tiny) -> list[str]:
    """Held-out sentences, shortest first (MH costs ~length^2 decoder rows per epoch: keep tests fast)."""
    return sorted(tiny["valid_de"].read_text(encoding="utf-8").splitlines(), key=lambda s: len(s.split()))


def model_args(tiny) -> list[str]:
    return ["--model", str(tiny["checkpoint"]), "--data", str(tiny["data"]), "--tokenizer", "none"]


def write_input(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_translate_plain_is_the_best_sample_per_source(tiny, translator, sources, tmp_path):
    lines = sources[:2] + [""] + sources[2:4]
    src = write_input(tmp_path / "src.txt", lines)
    code, out, err = run_main(["translate", *model_args(tiny), "--input", str(src), "--batch-size", "2", *FAST,
                               "--seed", "3", "--quiet"])
    assert code == 0, err
    assert err == ""  # --quiet: no progress bar
    got = out.split("\n")
    assert len(got) == len(lines) + 1 and got[-1] == "" and got[2] == ""
    # The same sentences through the library: one call, global indices 0..4 (line 2 is empty), while
    # the CLI ran chunks of 2 lines: the global indices make the chains independent of the chunking.
    cmlm = translator.cmlm
    keep = [0, 1, 3, 4]
    ids = [torch.cat([torch.tensor([cmlm.src_dict.bos()]),
                      cmlm.src_dict.encode_line(lines[i], add_if_not_exist=False).long()]) for i in keep]
    res = mhfast.sample(cmlm, source=ids, input_ids=keep, chains=2, epochs=2, burn_in=1, seed=3)
    for j, i in enumerate(keep):
        assert got[i] == cmlm.decode(res.best_tokens[j]), f"line {i}"
        assert got[i]  # a real translation, not an empty line


def test_translate_mask_predict_and_stdin(tiny, translator, sources, monkeypatch):
    lines = sources[:4]
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(lines) + "\n"))
    code, out, err = run_main(["translate", *model_args(tiny), "--method", "mask-predict", "--iterations", "4",
                               "--length-beam", "2", "--quiet"])
    assert code == 0, err
    ref = mhfast.mask_predict(translator.cmlm, [translator.source_ids(s) for s in lines], iterations=3,
                              length_beam=2)
    assert out.splitlines() == [translator.cmlm.decode(t) for t in ref.tokens]


def test_translate_fairseq_format_progress_bar_and_stats(tiny, sources, tmp_path):
    lines = sources[:1] + [""] + sources[1:2]
    src = write_input(tmp_path / "src.txt", lines)
    stats = tmp_path / "stats.json"
    code, out, err = run_main(["translate", *model_args(tiny), "--input", str(src), "--format", "fairseq",
                               "--energy", "local", "--batch-size", "2", "--stats-out", str(stats), *FAST])
    assert code == 0, err
    assert "sent/s" in err and "accept" in err  # the tqdm bar on stderr
    blocks: dict[str, dict[str, list[str]]] = {}
    for line in out.splitlines():
        tag, _, rest = line.partition("\t")
        kind, _, index = tag.partition("-")
        blocks.setdefault(index, {})[kind] = rest.split("\t")
    assert sorted(blocks, key=int) == ["0", "1", "2"]
    assert blocks["1"]["S"] == [""] and blocks["1"]["D"] == ["0.000000", ""] and "E" not in blocks["1"]
    for i in ("0", "2"):
        b = blocks[i]
        assert b["S"] == [lines[int(i)]]
        score, tokens = float(b["H"][0]), b["H"][1].split()
        assert b["D"] == b["H"]  # --tokenizer none: detokenized = tokens
        best = float(b["E"][0].removeprefix("E_local="))
        # score = -E / number of energy positions (the content tokens)
        assert abs(score + best / len(tokens)) < 1e-3 * max(1.0, abs(score))
        chains_local = [float(x) for x in b["E"][2].removeprefix("local=").split()]
        assert len(chains_local) == 2 and best <= min(chains_local) + 1e-3  # best over steps <= final states
    data = json.loads(stats.read_text())
    assert [(b["start"], b["end"], b["sentences"]) for b in data["batches"]] == [(0, 2, 1), (2, 3, 1)]
    assert all(len(b["epochs"]) == 2 for b in data["batches"])
    code, out, err = run_main(["evaluate", "--stats", str(stats)])
    assert code == 0, err
    rows = [ln for ln in out.splitlines() if re.match(r"\s*\d+\*? ", ln)]
    assert "post-burn-in mean" in out and len(rows) == 2 and rows[0].lstrip().startswith("1*")


def test_a_fresh_run_that_fails_before_its_first_commit_leaves_no_stale_statistics(tiny, sources, tmp_path,
                                                                                   monkeypatch):
    """A fresh run that fails before its first commit leaves the previous output and its statistics as they were
    (since 2026-12-02 it empties both only at its first commit). Until 2026-12-01 such a run left the previous
    run's statistics beside its empty output, and ``mhfast evaluate`` reported that run."""
    from mhfast.commands import translate

    src = write_input(tmp_path / "src.txt", sources[:2])
    out, stats = tmp_path / "out.txt", tmp_path / "stats.json"
    argv = ["translate", *model_args(tiny), "--input", str(src), "--output", str(out), "--stats-out", str(stats),
            *FAST, "--quiet"]
    code, _, err = run_main(argv)
    assert code == 0 and len(json.loads(stats.read_text())["batches"]) == 1, err
    kept = out.read_bytes(), stats.read_bytes(), Path(str(out) + ".progress").read_bytes()

    def fails(self, first, progress=None):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(translate.ChunkWork, "translate", fails)
    code, _, err = run_main([*argv, "--seed", "7"])
    assert code != 0 and "Input/output error" in err
    assert (out.read_bytes(), stats.read_bytes(), Path(str(out) + ".progress").read_bytes()) == kept


def test_translate_memo_reports_its_hits(tiny, sources, tmp_path):
    """--memo 0, the default (auto: 8 slots here) and --memo 8: the same translations, the memo's hits per batch
    in --stats-out (0 with --memo 0, the same with the default as with --memo 8)."""
    src = write_input(tmp_path / "src.txt", sources[:3])
    outs, hits = [], []
    for i, extra in enumerate((["--memo", "0"], [], ["--memo", "8"])):
        stats = tmp_path / f"stats{i}.json"
        code, out, err = run_main(["translate", *model_args(tiny), "--input", str(src), "--stats-out", str(stats),
                                   *FAST, "--epochs", "6", *extra])
        assert code == 0, err
        outs.append(out)
        hits.append([b["memo_hits"] for b in json.loads(stats.read_text())["batches"]])
    assert outs[0] == outs[1] == outs[2]
    assert all(h == 0 for h in hits[0]) and hits[1] == hits[2] and all(isinstance(h, int) for h in hits[1])


def test_translate_delayed_reports_its_stages(tiny, sources, tmp_path):
    """--delayed window:1 on the CMLM (a conditional model): it runs, and --stats-out has each batch's two stages
    (passed <= tested, accepted <= passed) and rows saved; without it the batches have no such entry."""
    src = write_input(tmp_path / "src.txt", sources[-2:])  # the longest: more rows than a window
    found = []
    for i, extra in enumerate((["--delayed", "window:1", "--memo", "0"], [])):
        stats = tmp_path / f"stats{i}.json"
        code, out, err = run_main(["translate", *model_args(tiny), "--input", str(src), "--stats-out", str(stats),
                                   *FAST, "--epochs", "4", *extra])
        assert code == 0, err
        found.append([b.get("delayed") for b in json.loads(stats.read_text())["batches"]])
    d = found[0][0]
    assert 0 < d["passed"] <= d["tested"] and d["accepted"] <= d["passed"] and d["rows_saved"] > 0, d
    assert all(x is None for x in found[1])


def test_translate_compile_reports_its_compile_time(tiny, sources, tmp_path):
    """--compile: the same translations as without it here, the seconds spent compiling in --stats-out."""
    src = write_input(tmp_path / "src.txt", sources[:2])
    torch.compiler.reset()  # so that this run compiles (an earlier test may have compiled the same layers)
    outs = []
    for extra in ([], ["--compile"]):
        stats = tmp_path / f"stats{len(extra)}.json"
        code, out, err = run_main(["translate", *model_args(tiny), "--input", str(src), "--stats-out", str(stats),
                                   *FAST, *extra])
        assert code == 0, err
        outs.append(out)
        batches = json.loads(stats.read_text())["batches"]
        if extra:
            assert batches and all(b["compile_seconds"] >= 0 for b in batches)
            assert sum(b["compile_seconds"] for b in batches) > 0
        else:
            assert all("compile_seconds" not in b for b in batches)
    assert outs[0] == outs[1]


def test_translate_references_limit_and_scores(tiny, tiny_paths, tmp_path):
    """--ref adds T- lines after S- lines, --limit keeps the first N lines, and the BLEU/chrF on stderr
    are sacreBLEU's on the D- hypotheses (the same numbers `mhfast evaluate` prints)."""
    import sacrebleu

    de = tiny_paths["valid_de"].read_text(encoding="utf-8").splitlines()
    en = tiny_paths["valid_en"].read_text(encoding="utf-8").splitlines()
    short = sorted(range(len(de)), key=lambda i: len(de[i].split()))[:3]
    lines, refs = [de[i] for i in short], [en[i] for i in short]
    src = write_input(tmp_path / "src.txt", lines)
    ref = write_input(tmp_path / "ref.txt", refs)
    code, out, err = run_main(["translate", *model_args(tiny), "--input", str(src), "--ref", str(ref), "--limit", "2",
                               "--format", "fairseq", *FAST, "--quiet"])
    assert code == 0, err
    tags = [line.split("\t", 1)[0] for line in out.splitlines()]
    assert [t for t in tags if t[0] in "STHD"] == ["S-0", "T-0", "H-0", "D-0", "S-1", "T-1", "H-1", "D-1"]
    assert [line.split("\t", 1)[1] for line in out.splitlines() if line.startswith("T-")] == refs[:2]
    hyps = [line.split("\t", 2)[2] for line in out.splitlines() if line.startswith("D-")]
    bleu = sacrebleu.corpus_bleu(hyps, [refs[:2]])
    chrf = sacrebleu.corpus_chrf(hyps, [refs[:2]])
    assert err.startswith("2 sentences\n")
    assert f"BLEU = {bleu.score:.2f}" in err and f"chrF2 = {chrf.score:.2f}" in err
    assert "nrefs:1|case:mixed|eff:no|tok:13a" in err  # the signature

    # plain output + --output file: stdout and the file hold only the translations, scores on stderr
    hyp_file = tmp_path / "hyp.txt"
    code, out, err = run_main(["translate", *model_args(tiny), "--input", str(src), "--ref", str(ref),
                               "--output", str(hyp_file), *FAST, "--quiet"])
    assert code == 0 and out == "", err
    hyps = hyp_file.read_text(encoding="utf-8").splitlines()
    assert len(hyps) == 3 and f"BLEU = {sacrebleu.corpus_bleu(hyps, [refs]).score:.2f}" in err


def test_translate_reference_errors_are_one_line(tiny, tmp_path):
    src = write_input(tmp_path / "src.txt", ["ein hund .", "eine frau ."])
    ref = write_input(tmp_path / "ref.txt", ["a dog ."])
    cases = [
        (["--ref", str(ref)], "line counts differ: --input 2, --ref 1"),
        (["--ref", str(ref), "--limit", "2"], "after --limit 2"),
        (["--ref", str(tmp_path / "missing.txt")], "--ref: no such file"),
        (["--limit", "-1"], "--limit must be >= 0"),
    ]
    for extra, needle in cases:
        code, out, err = run_main(["translate", *model_args(tiny), "--input", str(src), *extra, *FAST, "--quiet"])
        assert code == 2, (extra, err)
        assert len(err.strip().splitlines()) == 1 and needle in err and "Traceback" not in err, (extra, err)
    # --limit 1 leaves one line of each: accepted
    code, out, err = run_main(["translate", *model_args(tiny), "--input", str(src), "--ref", str(ref), "--limit", "1",
                               *FAST, "--quiet"])
    assert code == 0 and len(out.splitlines()) == 1, err


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "mhfast", "translate", *args]


def _env() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(ROOT))


def test_resume_after_sigkill_equals_uninterrupted_run(tiny, sources, tmp_path):
    lines = sources[:10]
    lines[3] = ""
    src = write_input(tmp_path / "src.txt", lines)
    ref = write_input(tmp_path / "ref.txt", [f"reference {i} ." for i in range(len(lines))])
    # 5 chunks of 2 lines, each long enough (~0.5 s) for the kill to land between commits.
    common = [*model_args(tiny), "--input", str(src), "--ref", str(ref), "--format", "fairseq", "--batch-size", "2",
              "--chains", "3", "--epochs", "4", "--burn-in", "1", "--seed", "7", "--quiet"]
    full, part = tmp_path / "full.txt", tmp_path / "part.txt"
    done = subprocess.run(_cli(*common, "--output", str(full)), env=_env(), cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr

    progress = Path(str(part) + ".progress")
    proc = subprocess.Popen(_cli(*common, "--output", str(part)), env=_env(), cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 240
        lines_done = 0
        while time.monotonic() < deadline and proc.poll() is None:
            if progress.is_file():
                try:
                    lines_done = json.loads(progress.read_text())["lines_done"]
                except (ValueError, KeyError):
                    lines_done = 0  # caught between writes of the tmp file: read again
                if lines_done >= 2:
                    break
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
        proc.stderr.close()
    assert 2 <= lines_done < len(lines), f"the run was not killed mid-way (lines done: {lines_done})"
    state = json.loads(progress.read_text())
    assert state["lines_done"] < len(lines)
    assert part.stat().st_size >= state["output_bytes"]
    assert full.read_bytes().startswith(part.read_bytes()[:state["output_bytes"]])

    # Other options: refused, output untouched.
    before = part.read_bytes()
    code, _, err = run_main(["translate", *common, "--output", str(part), "--resume", "--seed", "8"])
    assert code == 2 and len(err.strip().splitlines()) == 1 and "differ" in err
    assert part.read_bytes() == before

    resumed = subprocess.run(_cli(*common, "--output", str(part), "--resume"), env=_env(), cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert part.read_text().splitlines() == full.read_text().splitlines()
    assert part.read_bytes() == full.read_bytes()
    # the scores of the resumed run cover the lines of both processes: the uninterrupted run's numbers
    assert "BLEU = " in resumed.stderr and resumed.stderr == done.stderr
    assert json.loads(progress.read_text())["lines_done"] == len(lines)


def test_translate_errors_are_one_line(tiny, tmp_path):
    src = write_input(tmp_path / "src.txt", ["ein hund ."])
    cases = [
        (["--input", str(tmp_path / "missing.txt"), *model_args(tiny)], "--input"),
        (["--input", str(src), "--resume", *model_args(tiny)], "--resume needs --output"),
        (["--input", str(src), "--model", str(tiny["checkpoint"])], "--data"),
        (["--input", str(src), "--chains", "0", *model_args(tiny)], "--chains"),
        (["--input", str(src), "--burn-in", "9", "--epochs", "3", *model_args(tiny)], "--burn-in"),
        (["--input", str(src), "--model", str(tmp_path / "none.pt"), "--data", str(tiny["data"]),
          "--tokenizer", "none"], "checkpoint not found"),
        (["--input", str(src), "--model", str(tiny["checkpoint"]), "--data", str(tiny["data"])], "--spm"),
        (["--input", str(src), "--output", str(tmp_path / "o.txt"), "--resume", *model_args(tiny)], "progress"),
        (["--input", str(src), "--top-p", "0", *model_args(tiny), *FAST], "--top-p"),
        (["--input", str(src), "--proposal-temperature", "0", *model_args(tiny)], "--proposal-temperature"),
        (["--input", str(src), "--block-schedule", "3,2,1", *model_args(tiny), *FAST], "one per epoch"),
        (["--input", str(src), "--block-schedule", "x"], "--block-schedule"),
        (["--input", str(src), "--threads", "-1", *model_args(tiny)], "--threads"),
    ]
    for argv, needle in cases:
        code, out, err = run_main(["translate", *argv])
        assert code == 2, (argv, err)
        assert len(err.strip().splitlines()) == 1 and needle in err and "Traceback" not in err, (argv, err)


def test_translate_bundled_model_and_clear_error_without_it(tmp_path, monkeypatch):
    """The bundled model translates by default; a missing bundle is a one-line error naming it."""
    import mhfast.translation as translation

    src = write_input(tmp_path / "src.txt", ["Ein Hund läuft über eine Wiese.", ""])
    code, out, err = run_main(["translate", "--input", str(src), "--method", "mask-predict", "--quiet"])
    assert code == 0, err
    got = out.split("\n")
    assert len(got) == 3 and "dog" in got[0].lower() and got[1] == "" and got[2] == ""

    monkeypatch.setattr(translation, "BUNDLE_DIR", tmp_path / "nothing-here")
    code, out, err = run_main(["translate", "--input", str(src), "--method", "mask-predict", "--quiet"])
    assert code == 2 and "bundled De->En model is incomplete" in err and len(err.strip().splitlines()) == 1


# ---------------------------------------------------------------------------- evaluate
def test_evaluate_matches_sacrebleu(tmp_path):
    import sacrebleu

    hyps = ["a dog runs on the grass .", "two men are talking .", "a woman sits at a bar ."]
    refs = ["a dog is running on the grass .", "two men talk .", "a woman sits at a dark bar ."]
    h, r, s = (write_input(tmp_path / n, x) for n, x in (("h", hyps), ("r", refs), ("s", ["x"] * 3)))
    code, out, err = run_main(["evaluate", "--hyp", str(h), "--ref", str(r), "--src", str(s)])
    assert code == 0, err
    bleu = sacrebleu.corpus_bleu(hyps, [refs])
    chrf = sacrebleu.corpus_chrf(hyps, [refs])
    assert f"BLEU = {bleu.score:.2f}" in out and f"chrF2 = {chrf.score:.2f}" in out
    assert "nrefs:1|case:mixed|eff:no|tok:13a" in out and "nc:6|nw:0" in out  # the signatures


def test_evaluate_takes_the_bundled_sources_as_it_takes_the_bundled_references(tmp_path):
    """--src bundled had been "--src: no such file: 'bundled'" where --ref bundled was taken."""
    from mhfast.translation import BUNDLED_TEST_REFERENCE

    refs = BUNDLED_TEST_REFERENCE.read_text(encoding="utf-8").splitlines()
    h = write_input(tmp_path / "h", refs)
    code, out, err = run_main(["evaluate", "--hyp", str(h), "--ref", "bundled", "--src", "bundled"])
    assert code == 0 and "BLEU = 100.00" in out, err
    code, out, err = run_main(["evaluate", "--hyp", str(h), "--ref", "bundled", "--src", str(h)[:-1] + "x"])
    assert code == 2 and "--src: no such file" in err


def test_evaluate_errors_are_one_line(tmp_path):
    h = write_input(tmp_path / "h", ["a", "b"])
    r = write_input(tmp_path / "r", ["a", "b", "c"])
    bad_stats = tmp_path / "bad.json"
    bad_stats.write_text('{"batches": [{"epochs": [{"epoch": 0}]}]}')
    huge = tmp_path / "huge.json"  # json reads 1e400 as inf, which int() cannot take (a traceback until 2026-11-30)
    huge.write_text('{"batches": [{"sentences": 1e400, "epochs": []}]}')
    epochs = [{"epoch": e, "acceptance_rate": 0.5, "novel_rate": 0.1, "e_raw": 1, "e_local": 2,
               "target_temperature": 1} for e in range(2)]
    word_burn_in = tmp_path / "word.json"  # (half the table was printed, then "'<' not supported ...")
    word_burn_in.write_text(json.dumps({"method": "mh", "burn_in": "x", "batches": [{"sentences": 2,
                                                                                   "epochs": epochs}]}))
    odd = {}  # epochs not 0..n-1 (-2..0 had divided by zero mid-table), a negative count, JSON nested too deep
    for name, text in (("negative_epochs", json.dumps({"method": "mh", "burn_in": 1, "batches": [
                            {"sentences": 1, "epochs": [dict(epochs[0], epoch=e) for e in (-2, -1, 0)]}]})),
                       ("gap", json.dumps({"method": "mh", "burn_in": 3, "batches": [
                            {"sentences": 1, "epochs": [dict(epochs[0], epoch=e) for e in (0, 7)]}]})),
                       ("negative_sentences", json.dumps({"method": "mh", "burn_in": 0, "batches": [
                            {"sentences": -3, "epochs": epochs}]})),
                       ("deep", '{"batches": [' + "[" * 5000 + "]" * 5000 + "]}")):
        odd[name] = tmp_path / f"{name}.json"
        odd[name].write_text(text)
    cases = [*[(["--stats", str(path)], "is not a statistics file") for path in odd.values()],
        (["--hyp", str(h), "--ref", str(r)], "line counts differ: --hyp 2, --ref 3"),
        (["--hyp", str(h), "--ref", str(h), "--src", str(r)], "--src 3"),
        (["--hyp", str(tmp_path / "missing"), "--ref", str(r)], "--hyp: no such file"),
        (["--hyp", str(h)], "--hyp and --ref go together"),
        ([], "give --hyp"),
        (["--stats", str(bad_stats)], "--stats"),
        (["--stats", str(huge)], "is not a statistics file"),
        (["--stats", str(word_burn_in)], "is not a statistics file"),
        (["--stats", str(tmp_path / "missing.json")], "--stats: no such file"),
    ]
    for argv, needle in cases:
        code, out, err = run_main(["evaluate", *argv])
        assert code == 2, (argv, err)
        assert len(err.strip().splitlines()) == 1 and needle in err and "Traceback" not in err, (argv, err)
        assert out == "", (argv, out)


# ---------------------------------------------------------------------------- text processing
def test_sentencepiece_processor_round_trip(tmp_path):
    """The SentencePiece path (the bundled model's): pieces in, detokenized text out."""
    import sentencepiece as spm

    from mhfast.translation import TextProcessor

    corpus = tmp_path / "corpus.txt"
    write_input(corpus, ["Ein Hund läuft über die Wiese.", "Zwei Männer spielen Fußball im Park.",
                         "Eine Frau sitzt an einer dunklen Bar.", "Drei Kinder laufen am Strand."] * 20)
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(tmp_path / "sp"), vocab_size=45,
                                   character_coverage=1.0, minloglevel=2)
    proc = TextProcessor("spm", tmp_path / "sp.model")
    text = "Zwei Hunde laufen über die Wiese."
    pieces = proc.encode(text).split()
    assert len(pieces) > len(text.split()) and pieces[0].startswith("\u2581")  # word-initial marker
    assert proc.decode(pieces) == text
    assert TextProcessor.none().encode(" a  b ") == "a b" and TextProcessor.none().decode(["a", "b"]) == "a b"
    with pytest.raises(FileNotFoundError, match="--spm"):
        TextProcessor("spm", tmp_path / "missing.model")
    with pytest.raises(ValueError, match="tokenizer"):
        TextProcessor("moses")


@pytest.mark.parametrize("method", ["mh", "mask-predict"])
def test_a_too_long_source_is_named_by_its_index_among_all_sources(translator, sources, method):
    """Empty sources are left out before the model sees the rest: the length error named the too-long source's
    index among the kept ones (``sources[1]`` for the third of ["", short, long])."""
    from mhfast.models.base import position_limit

    limit = position_limit(translator.cmlm, "source")
    too_long = " ".join(["hund"] * (limit + 5))
    with pytest.raises(ValueError, match=r"^sources\[2\] has \d+ tokens"):
        translator.translate(["", sources[0], too_long], method=method, sampler_options=dict(epochs=1, burn_in=0)
                             if method == "mh" else None)
