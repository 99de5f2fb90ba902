"""``mhfast score``: one output line per input line (\\n-only records), TSV/JSONL, one-line errors, models."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

import mhfast
from cli_runner import long_flags, run_main, wrong_resumes
from hf_tiny_models import save_tiny_bert_dir, save_tiny_wordpiece_dir


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    return save_tiny_bert_dir(tmp_path_factory.mktemp("score") / "bert", seed=7)


def test_tsv_has_one_line_per_input_line_and_the_api_numbers(bert_dir, tmp_path):
    # \r\n is one separator; \x0b and U+2028 are inside a line (str.splitlines would split there)
    (tmp_path / "in.txt").write_bytes("a b c\r\n\nd e\x0bf\nb\u2028c a\n".encode("utf-8"))
    code, out, err = run_main(["score", "--model", bert_dir, "--input", str(tmp_path / "in.txt"), "--per-token", "-q"])
    assert code == 0 and err == ""
    rows = [line.split("\t") for line in out.split("\n")[:-1]]
    assert len(rows) == 4 and rows[1][:3] == ["0.000000", "0.000000", "0"]
    want = mhfast.score(bert_dir, ["a b c", "", "d e\x0bf", "b\u2028c a"])
    for row, s in zip(rows, want):
        assert float(row[0]) == pytest.approx(s.pll, abs=1e-5) and float(row[1]) == pytest.approx(s.e_raw, abs=1e-5)
        assert int(row[2]) == s.num_tokens and len(row) == 7
    assert [float(x) for x in rows[0][6].split()] == pytest.approx(want[0].token_scores, abs=1e-5)


def test_jsonl_output_file_and_summary(bert_dir, tmp_path):
    (tmp_path / "in.txt").write_text("a b c\nd\n")
    out_file = tmp_path / "out.jsonl"
    code, out, err = run_main(["score", "--model", bert_dir, "-i", str(tmp_path / "in.txt"), "-o", str(out_file),
                               "--format", "jsonl", "--per-word", "--metric", "within_word_l2r", "--batch-size", "1"])
    assert code == 0 and out == ""
    recs = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert [r["tokens"] for r in recs] == [3, 1] and [w for w, _ in recs[0]["word_scores"]] == ["a", "b", "c"]
    assert recs[0]["pll"] == pytest.approx(sum(x for _, x in recs[0]["word_scores"]), abs=1e-5)
    assert "2 sequences scored, 4 tokens, pseudo-perplexity" in err


def test_an_input_named_as_the_outputs_side_file_is_refused_and_kept(bert_dir, tmp_path):
    """--input q.tsv.lock --output q.tsv: the output's lock file would overwrite the input with a pid (exit 0
    before, the sequences lost); now one line, exit 2, the input as it was. Likewise its .progress record."""
    for suffix in (".lock", ".progress"):
        read = tmp_path / f"q.tsv{suffix}"
        read.write_text("a b c\nd\n")
        code, out, err = run_main(["score", "--model", bert_dir, "-i", str(read), "-o", str(tmp_path / "q.tsv"), "-q"])
        assert code == 2 and f"--input and --output's {suffix} file name the same file" in err, err
        assert len(err.strip().splitlines()) == 1 and read.read_text() == "a b c\nd\n"
        assert not (tmp_path / "q.tsv").exists()


@pytest.mark.parametrize("argv, content, message", [
    (["--batch-size", "0"], b"a\n", "--batch-size must be an int >= 1"),
    (["--source", "x"], b"a\n", "--source goes with --model bundled"),
    ([], b"a b\n\xff c\n", "line 2: not valid UTF-8"),
    (["--ids"], b"5 6\n5 x\n", "line 2: expected space-separated integer token ids"),
    (["--ids"], b"5 1_0\n", "line 1: expected space-separated integer token ids (--ids), got '1_0'"),  # (read 10)
    (["--ids"], "5 \u0665\n".encode(), "line 1: expected space-separated integer token ids"),  # (an Arabic 5)
    (["--max-tokens-per-batch", str(10 ** 23)], b"a\n", "--max-tokens-per-batch must be an int in [1, "),
    (["--ids", "--metric", "within_word_l2r"], b"5 6\n", "--metric within_word_l2r has no effect with --ids"),
    (["--ids"], b"2 4 3\n", "line 1: mhfast.energy: tokens holds mask_id (4)"),
])
def test_errors_are_one_line_with_status_2(bert_dir, tmp_path, argv, content, message):
    (tmp_path / "in.txt").write_bytes(content)
    code, out, err = run_main(["score", "--model", bert_dir, "-i", str(tmp_path / "in.txt"), "-q", *argv])
    assert code == 2 and message in err and err.count("\n") == 1 and err.startswith("mhfast score: error:")


def test_missing_hub_model_is_one_clear_line(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "in.txt").write_text("a\n")
    code, _, err = run_main(["score", "--model", "bert-base-cased", "-i", str(tmp_path / "in.txt"), "-q"])
    assert code == 2 and err.count("\n") == 1
    assert "'bert-base-cased' is not a local directory and not in the HuggingFace cache" in err


def test_bundled_model_scores_targets_given_sources(bundled, tmp_path, monkeypatch):
    import mhfast.translation

    monkeypatch.setattr(mhfast.translation, "load_bundled_model", lambda device=None: bundled)  # load once
    pairs = ["Ein Hund läuft.\tA dog runs.", "Zwei Männer.\tTwo men."]
    (tmp_path / "pairs.tsv").write_text("\n".join(pairs) + "\n")
    (tmp_path / "de").write_text("\n".join(p.split("\t")[0] for p in pairs) + "\n")
    (tmp_path / "en").write_text("\n".join(p.split("\t")[1] for p in pairs) + "\n")
    code, tsv, _ = run_main(["score", "--model", "bundled", "-i", str(tmp_path / "pairs.tsv"), "-q"])
    code2, tsv2, _ = run_main(["score", "--model", "bundled", "-i", str(tmp_path / "en"),
                               "--source", str(tmp_path / "de"), "-q"])
    assert code == code2 == 0 and tsv == tsv2 and len(tsv.splitlines()) == 2
    first = mhfast.score(bundled, ["A dog runs."], sources=["Ein Hund läuft."])[0]
    assert float(tsv.split("\t")[0]) == pytest.approx(first.pll, abs=1e-5)
    code, _, err = run_main(["score", "--model", "bundled", "-i", str(tmp_path / "en"), "-q"])
    assert code == 2 and "line 1 has no TAB" in err
    # a blank line (only spaces) is an empty pair, a line of zeros, as an empty line is (it was "has no TAB")
    (tmp_path / "blank.tsv").write_text(pairs[0] + "\n   \n\n")
    code, tsv, err = run_main(["score", "--model", "bundled", "-i", str(tmp_path / "blank.tsv"), "-q"])
    assert code == 0, err
    assert tsv.splitlines()[1:] == ["0.000000\t0.000000\t0\t0\tnan\tnan"] * 2


def test_bundled_energy_equals_what_sample_reports(bundled):
    """The conditional path: the energies of the sampler's own final states, given their sources."""
    src = [bundled.source_ids("Ein Hund läuft."), bundled.source_ids("Zwei Männer.")]
    res = mhfast.sample(bundled.cmlm, source=src, chains=2, epochs=2, burn_in=1, seed=0)
    B, C, T = res.tokens.shape
    e = mhfast.energy(bundled.cmlm, res.tokens.reshape(B * C, T), source=[s for s in src for _ in range(C)])
    assert torch.allclose(e.e_raw, res.energy_raw.reshape(-1), atol=1e-3)
    assert torch.allclose(e.e_local, res.energy_local.reshape(-1), atol=1e-4)


def test_antiberty_is_the_default_and_every_residue_is_a_word(tmp_path):
    from mhfast.models.antiberty import load_antiberty

    seq = "EVQLVESGGGLVQPGGSLRLSCAAS"
    (tmp_path / "in.txt").write_text(seq + "\n")
    code, out, _ = run_main(["score", "-i", str(tmp_path / "in.txt"), "-q", "--format", "jsonl", "--per-word"])
    rec = json.loads(out)
    lm = load_antiberty()
    e = mhfast.energy(lm, [lm.encode(seq)])
    assert code == 0 and rec["tokens"] == rec["words"] == len(seq)
    assert "".join(w for w, _ in rec["word_scores"]) == seq
    assert rec["pll"] == pytest.approx(-float(e.e_local[0]), abs=1e-4)
    assert rec["e_raw"] == pytest.approx(float(e.e_raw[0]), abs=1e-3)


def _interrupted_at_third_batch(argv: list[str], monkeypatch) -> None:
    """Runs ``argv`` with a Ctrl-C in its third batch (exit 130), then restores mhfast.scoring.score."""
    import mhfast.scoring

    real, calls = mhfast.scoring.score, []

    def stop_at_third(*a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(mhfast.scoring, "score", stop_at_third)
    assert run_main(argv)[0] == 130
    monkeypatch.setattr(mhfast.scoring, "score", real)


def test_resume_after_an_interrupt_gives_the_bytes_of_one_run(bert_dir, tmp_path, monkeypatch):
    """Committed per batch: a run stopped at its third batch resumes to the uninterrupted run's bytes;
    --resume refuses another model, other options or an edited output."""
    (tmp_path / "in.txt").write_text("a b c\nd e\nf\ng a b\nc\n")
    base = ["--model", bert_dir, "-i", str(tmp_path / "in.txt"), "--batch-size", "2", "-q"]
    assert run_main(["score", *base, "-o", str(tmp_path / "full.tsv")])[0] == 0
    part = tmp_path / "part.tsv"
    _interrupted_at_third_batch(["score", *base, "-o", str(part)], monkeypatch)
    assert part.read_text().count("\n") == 4  # two committed batches
    code, out, err = run_main(["score", *base, "-o", str(part), "--metric", "within_word_l2r", "--resume"])
    assert code == 2 and "--metric" in err
    # the chunking and the backend change a score's last bits: they are part of the run (not recorded until
    # 2026-11-30, when a review resumed a file into bytes no single run gives)
    for flag, value in (("--max-tokens-per-batch", "7"), ("--backend", "reference"), ("--per-word", None),
                        ("--per-token", None), ("--format", "jsonl")):  # (the last three: the columns written)
        code, out, err = run_main(["score", *base, "-o", str(part), flag, *([value] if value else []), "--resume"])
        assert code == 2 and flag in err and err.count("\n") == 1, err
    code, out, err = run_main(["score", *base[:-1], "-o", str(part), "--resume"])  # (not -q: the summary)
    assert code == 0 and part.read_bytes() == (tmp_path / "full.tsv").read_bytes()
    assert "1 sequences scored by this run (4 before it, in --output)" in err, err  # not passed off as all 5
    part.write_text(part.read_text().replace("-", "+", 1))
    code, out, err = run_main(["score", *base, "-o", str(part), "--resume"])
    assert code == 2 and "changed" in err and err.count("\n") == 1


def test_a_resume_with_other_torch_threads_says_its_lines_may_round_otherwise(bert_dir, tmp_path, monkeypatch):
    """The thread count is no part of the run (a run may resume on another machine), but fp32 sums round otherwise
    with it: a resume under torchrun's OMP_NUM_THREADS=1 of a 2-thread run mixed both roundings in one file,
    silently (a review). The record keeps the writer's threads and a resume with others warns."""
    from mhfast.files import journal

    (tmp_path / "in.txt").write_text("a b c\nd e\nf\ng a b\nc\n")
    part = tmp_path / "part.tsv"
    base = ["score", "--model", bert_dir, "-i", str(tmp_path / "in.txt"), "--batch-size", "2", "-q", "-o", str(part)]
    _interrupted_at_third_batch(base, monkeypatch)
    began = json.loads((tmp_path / "part.tsv.progress").read_text())["torch_threads"]
    assert began == torch.get_num_threads()
    monkeypatch.setattr(journal, "_threads", lambda: began + 1)
    with pytest.warns(UserWarning, match=rf"this run has {began + 1} torch thread\(s\), the run it continues had "
                                         rf"{began}: .* OMP_NUM_THREADS={began}"):
        assert run_main([*base, "--resume"])[0] == 0


def test_a_resume_on_another_machine_says_its_lines_may_round_otherwise(bert_dir, tmp_path, monkeypatch):
    """Another CPU's kernels round otherwise, and its L2 cache sizes the default sub-batches; neither is part of
    the run (a requeued job may land on another node), and a resume there had been silent (a review). The record
    keeps the writer's CPU, L2 and torch, and a resume elsewhere warns; one on the same machine does not."""
    import warnings

    from mhfast.files import journal
    from mhfast.runtime import cpu_info

    (tmp_path / "in.txt").write_text("a b c\nd e\nf\ng a b\nc\n")
    part = tmp_path / "part.tsv"
    base = ["score", "--model", bert_dir, "-i", str(tmp_path / "in.txt"), "--batch-size", "2", "-q", "-o", str(part)]
    _interrupted_at_third_batch(base, monkeypatch)
    began = json.loads((tmp_path / "part.tsv.progress").read_text())["machine"]
    assert began == f"{cpu_info.name()}, {cpu_info.l2_bytes() >> 10} KiB L2, torch {torch.__version__}"
    monkeypatch.setattr(journal, "_machine", lambda: began.replace(" KiB L2", "0 KiB L2"))
    with pytest.warns(UserWarning, match=r"this run is on .*0 KiB L2.*, the run it continues was on "
                                         rf"{re.escape(began)}: .*--max-tokens-per-batch"):
        assert run_main([*base, "--resume"])[0] == 0
    monkeypatch.undo()
    _interrupted_at_third_batch(base, monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same machine: no warning
        assert run_main([*base, "--resume"])[0] == 0


def test_resume_chunks_as_the_run_began_whatever_memory_is_free_now(bert_dir, tmp_path, monkeypatch):
    """Left at its default, the chunk size follows free memory, which the chunking's last bits then follow: a run
    reads it once, records it, and a resume with less memory free chunks as the run began (it read memory again:
    a review resumed AntiBERTy scores into other digits). Every batch of a run uses that one reading."""
    import mhfast.sampler.problem as problem
    from mhfast.files.journal import PROGRESS_SUFFIX
    from mhfast.scoring import budget

    (tmp_path / "in.txt").write_text("a b c\nd e\nf\ng a b\nc\n")
    base = ["--model", bert_dir, "-i", str(tmp_path / "in.txt"), "--batch-size", "2", "-q"]
    monkeypatch.setattr(problem, "available_memory", lambda dev: 64 << 20)  # a quarter of it on the CPU: 16 MiB
    real_free, seen = budget.free_memory, []
    monkeypatch.setattr(budget, "free_memory", lambda dev: seen.append(real_free(dev)) or seen[-1])
    assert run_main(["score", *base, "-o", str(tmp_path / "full.tsv")])[0] == 0
    assert seen and set(seen) == {16 << 20}
    part = tmp_path / "part.tsv"
    _interrupted_at_third_batch(["score", *base, "-o", str(part)], monkeypatch)
    record = json.loads((tmp_path / f"part.tsv{PROGRESS_SUFFIX}").read_text())
    assert record["spec"]["memory_budget"] == 16 << 20 and record["lines_done"] == 4
    monkeypatch.setattr(problem, "available_memory", lambda dev: 1 << 20)  # less free now
    seen.clear()
    code, out, err = run_main(["score", *base, "-o", str(part), "--resume"])
    assert code == 0, err
    assert seen and set(seen) == {16 << 20}, seen  # the recorded reading, in every chunk
    assert part.read_bytes() == (tmp_path / "full.tsv").read_bytes()
    # a given --max-tokens-per-batch reads no memory and records none
    seen.clear()
    code, out, err = run_main(["score", *base, "-o", str(tmp_path / "given.tsv"), "--max-tokens-per-batch", "64"])
    assert code == 0 and not seen
    assert json.loads((tmp_path / f"given.tsv{PROGRESS_SUFFIX}").read_text())["spec"]["memory_budget"] is None


#: How each ``score`` option meets ``--resume`` (as TRANSLATE_RESUME in test_cli_resume_checks.py): the argv added
#: (``{tmp}``: the test's folder), base tokens dropped, and the text naming the difference in the refusal, or None
#: where the option leaves the output's bytes as they are and the resume is accepted.
SCORE_RESUME = {
    "--input": (["-i", "{tmp}/other.txt"], (), "input"),
    "--format": (["--format", "jsonl"], (), "--format"),
    "--per-token": (["--per-token"], (), "--per-token"),
    "--per-word": (["--per-word"], (), "--per-word"),
    "--ids": (["--ids"], (), "--ids"),
    "--quiet": ([], ("-q",), None),
    "--model": (["--model", "{tmp}/copy"], (), None),  # (a copy: the model is its files' content, not a path)
    "--metric": (["--metric", "within_word_l2r"], (), "--metric"),
    "--batch-size": (["--batch-size", "3"], (), "--batch-size"),
    "--max-tokens-per-batch": (["--max-tokens-per-batch", "7"], (), "--max-tokens-per-batch"),
    "--device": (["--device", "cpu"], (), "--device"),
    "--backend": (["--backend", "reference"], (), "--backend"),
}
#: the resume itself, and --source (the bundled model's only: checked in a run of its own below)
SCORE_RESUME_ELSEWHERE = {"--help", "--output", "--resume", "--source"}


def test_every_score_option_is_recorded_for_resume_or_said_not_to_decide_the_output(bert_dir, bundled, tmp_path,
                                                                                      monkeypatch):
    """Structural: each option of ``mhfast score`` is in the progress record (another value is refused, naming
    it) or listed as one that leaves the output as it is (accepted); a new option must be classified here."""
    import shutil

    import mhfast.translation

    assert long_flags("score") == set(SCORE_RESUME) | SCORE_RESUME_ELSEWHERE, "classify the new option for --resume"
    shutil.copytree(bert_dir, tmp_path / "copy")
    (tmp_path / "in.txt").write_text("a b c\nd e\nf\n")
    (tmp_path / "other.txt").write_text("a b\nd e\nf\n")
    out = tmp_path / "out.tsv"
    base = ["score", "--model", bert_dir, "-i", str(tmp_path / "in.txt"), "--batch-size", "2", "-q", "-o", str(out)]
    assert run_main(base)[0] == 0
    wrong = wrong_resumes(SCORE_RESUME, base, out, tmp=tmp_path)
    assert not wrong, "\n".join(wrong)

    # --source: the conditional model's sources are part of the run
    monkeypatch.setattr(mhfast.translation, "load_bundled_model", lambda device=None: bundled)
    (tmp_path / "en").write_text("A dog runs.\nTwo men.\n")
    (tmp_path / "de").write_text("Ein Hund läuft.\nZwei Männer.\n")
    (tmp_path / "de2").write_text("Ein Hund läuft.\nDrei Männer.\n")
    out2 = tmp_path / "out2.tsv"
    base = ["score", "--model", "bundled", "-i", str(tmp_path / "en"), "-q", "-o", str(out2)]
    assert run_main(base + ["--source", str(tmp_path / "de")])[0] == 0
    full = out2.read_bytes()
    code, _, err = run_main(base + ["--source", str(tmp_path / "de2"), "--resume"])
    assert code == 2 and "sources" in err and "--resume" in err and err.count("\n") == 1, err
    assert run_main(base + ["--source", str(tmp_path / "de"), "--resume"])[0] == 0 and out2.read_bytes() == full


def test_output_inside_the_model_folder_is_refused_and_a_failed_run_keeps_the_old_output(bert_dir, tmp_path):
    """--output inside the --model folder (config.json) is refused before anything is opened (it was emptied);
    a fresh run that stops on a bad line leaves the previous output as it was (it was emptied first)."""
    (tmp_path / "in.txt").write_text("a b c\nd e\n")
    config = Path(bert_dir) / "config.json"
    before = config.read_bytes()
    for target, needle in ((config, "--output and --model name the same file"),
                           (Path(bert_dir) / "scores.tsv", "lies inside --model")):
        code, _, err = run_main(["score", "--model", bert_dir, "-i", str(tmp_path / "in.txt"), "-o", str(target), "-q"])
        assert code == 2 and needle in err, err
    assert config.read_bytes() == before and not (Path(bert_dir) / "scores.tsv").exists()
    out = tmp_path / "out.tsv"
    assert run_main(["score", "--model", bert_dir, "-i", str(tmp_path / "in.txt"), "-o", str(out), "-q"])[0] == 0
    kept = out.read_bytes()
    (tmp_path / "long.txt").write_text("a b c\n" + " ".join(["a"] * 5000) + "\n")
    code, _, err = run_main(["score", "--model", bert_dir, "-i", str(tmp_path / "long.txt"), "-o", str(out), "-q"])
    assert code == 2 and out.read_bytes() == kept, err


def test_a_row_with_no_scored_token_prints_zero_like_an_empty_line(bert_dir, tmp_path):
    """--ids of specials only scores no token: its PLL printed -0.000000 (a sum of nothing), an empty line 0.000000."""
    (tmp_path / "in.txt").write_text("2 3\n\n")
    code, out, err = run_main(["score", "--model", bert_dir, "-i", str(tmp_path / "in.txt"), "--ids", "-q"])
    assert code == 0, err
    rows = [line.split("\t") for line in out.splitlines()]
    assert rows[0][:2] == ["0.000000", "0.000000"] and rows[0][:4] == rows[1][:4], rows
    code, out, err = run_main(["score", "--model", bert_dir, "-i", str(tmp_path / "in.txt"), "--ids", "-q",
                               "--format", "jsonl"])
    assert code == 0 and "-0.0" not in out, out  # (JSONL printed "pll": -0.0 for the first line)
    first, empty = (json.loads(line) for line in out.splitlines())
    assert first == empty and first["pll"] == 0.0 and first["tokens"] == 0, first


def test_a_pseudo_perplexity_past_float_is_inf_and_null_in_jsonl():
    """A word of many unlikely pieces gives over 709.78 nats per word: math.exp raised OverflowError, a traceback
    from mhfast score (a review: one 37-piece word at PLL -2211 on a tiny BERT). It is inf, null in JSONL (json.dumps
    would write Infinity, which is no JSON); the corpus figure too."""
    from mhfast.commands.score import format_record
    from mhfast.scoring.pll import SequenceScore, corpus_pppl

    s = SequenceScore(pll=-800.0, e_raw=0.0, tokens=["x"] * 100, token_scores=[-8.0] * 100, words=["w"],
                      word_scores=[-800.0])
    assert s.pppl_word == corpus_pppl([s], "word") == float("inf") and s.pppl == pytest.approx(2980.958)
    assert format_record(s, "tsv", False, False).split("\t")[4:] == ["2980.957987", "inf"]
    assert json.loads(format_record(s, "jsonl", False, False))["pppl_word"] is None


def test_ids_lines_split_on_any_whitespace(bert_dir, tmp_path):
    """--ids reads a line as str.split() does: tabs, repeated and trailing spaces separate ids like one space."""
    (tmp_path / "plain.txt").write_text("2 5 6 3\n2 7 3\n")
    (tmp_path / "spaced.txt").write_text("2  5\t6 3 \n\t2 7 3\t\n")
    outs = [run_main(["score", "--model", bert_dir, "-i", str(tmp_path / name), "--ids", "-q", "--per-token"])
            for name in ("plain.txt", "spaced.txt")]
    assert outs[0][0] == outs[1][0] == 0 and outs[0][1] == outs[1][1] and outs[0][1].count("\n") == 2, outs


@pytest.fixture(scope="module")
def wordpiece_dir(tmp_path_factory):
    return save_tiny_wordpiece_dir(tmp_path_factory.mktemp("score") / "wordpiece")


@pytest.mark.parametrize("metric", ["original", "within_word_l2r"])
def test_every_field_is_the_api_score_on_a_model_with_word_pieces(wordpiece_dir, tmp_path, metric):
    """Words of several pieces, and one the tokenizer does not know ([UNK]: no word): every TSV column and JSONL
    field is mhfast.score's with the same --metric, and the metrics differ here. The other tests' tiny BERT has
    whole-word tokens only, so a command that dropped --metric, printed the per-token PPPL as PPPL_word or
    counted the [UNK] as a word passed them."""
    lines = ["ab ca d", "ab x d", "c", "cc ba"]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    want = mhfast.score(wordpiece_dir, lines, metric=metric)
    other = mhfast.score(wordpiece_dir, lines, metric="original" if metric != "original" else "within_word_l2r")
    assert abs(want[0].pll - other[0].pll) > 0.01 and [s.num_words for s in want] == [3, 2, 1, 2]
    base = ["score", "--model", wordpiece_dir, "-i", str(tmp_path / "in.txt"), "-q", "--metric", metric,
            "--per-token", "--per-word"]
    code, tsv, err = run_main(base)
    assert code == 0, err
    code, jsonl, err = run_main([*base, "--format", "jsonl"])
    assert code == 0, err
    for row, rec, s in zip((r.split("\t") for r in tsv.splitlines()), map(json.loads, jsonl.splitlines()), want,
                           strict=True):
        assert [int(row[2]), int(row[3]), rec["tokens"], rec["words"]] == [s.num_tokens, s.num_words] * 2
        for got, value in ((row[0], s.pll), (row[1], s.e_raw), (rec["pll"], s.pll), (rec["e_raw"], s.e_raw)):
            assert float(got) == pytest.approx(value, abs=2e-6)
        for got, value in ((row[4], s.pppl), (row[5], s.pppl_word), (rec["pppl"], s.pppl),
                           (rec["pppl_word"], s.pppl_word)):
            assert float(got) == pytest.approx(value, rel=1e-5)
        assert [float(x) for x in row[6].split()] == pytest.approx(s.token_scores, abs=2e-6)
        assert [float(x) for x in row[7].split()] == pytest.approx(s.word_scores, abs=2e-6)
        assert [t for t, _ in rec["token_scores"]] == s.tokens and [w for w, _ in rec["word_scores"]] == s.words
        assert [x for _, x in rec["word_scores"]] == pytest.approx(s.word_scores, abs=2e-6)
