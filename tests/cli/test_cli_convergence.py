"""The convergence flags of ``mhfast sample`` and ``mhfast translate`` (issue 33): --diagnostics, --until-rhat,
--min-ess, --trace-every, --start, --plot-traces and the figures in translate's --stats-out.

The translations and samples do not change with --diagnostics or --plot-traces (they only read the traces); bad
values are one stderr line and exit status 2, naming the flag.
"""
from __future__ import annotations

import json

import pytest

import mhfast.translation
from cli_runner import run_main
from hf_tiny_models import save_tiny_bert_dir
from mhfast.sampler.diagnostics import format_rhat

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_tiny_bert_dir(tmp_path_factory.mktemp("cli") / "tiny_bert")



SAMPLE = ["--length", "4", "--chains", "3", "--epochs", "10", "--burn-in", "2", "--seed", "1", "--quiet"]


def test_sample_diagnostics_table_and_plot(tiny_dir, tmp_path):
    code, plain, err = run_main(["sample", "--model", tiny_dir, *SAMPLE])
    assert code == 0, err
    png = tmp_path / "traces.png"
    code, out, err = run_main(["sample", "--model", tiny_dir, *SAMPLE, "--diagnostics", "--plot-traces", str(png)])
    assert code == 0, err
    assert out.split("model rows")[0] == plain.split("model rows")[0], "--diagnostics changed the samples"
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("input      summary"))
    assert [line.split()[2] for line in lines[head + 1:head + 6]] == ["e_raw", "e_local", "proj_0", "proj_1",
                                                                       "proj_2"]
    assert any(line.startswith("input 1: max r_hat ") and "draws 8 x 3 chains  epochs 10" in line for line in lines)
    assert png.read_bytes()[:8] == PNG


def test_sample_until_rhat_reports_each_input(tiny_dir, tmp_path):
    code, out, err = run_main(["sample", "--model", tiny_dir, "--init", "a b c d", "a b c d", "--chains", "3",
                               "--epochs", "6", "--burn-in", "1", "--until-rhat", "1.001", "--min-ess", "1000",
                               "--quiet", "--start", "random", "--trace-every", "1", "--energy", "both",
                               "--plot-traces", str(tmp_path / "t.png")])
    assert code == 0, err
    assert out.count("not converged after 6 epochs") == 4  # 2 inputs x 2 energies, the cap reached
    assert (tmp_path / "t.raw.png").read_bytes()[:8] == PNG and (tmp_path / "t.local.png").is_file()


@pytest.mark.parametrize("argv,message", [
    (["--until-rhat", "1"], "--until-rhat must be a finite number > 1, got 1.0"),
    (["--min-ess", "-5"], "--min-ess must be a finite number >= 0, got -5.0"),
    (["--trace-every", "0"], "--trace-every must be an int >= 1, got 0"),
    (["--until-rhat", "1.01", "--chains", "1"], "--until-rhat needs --chains >= 2 (R-hat compares chains), got 1"),
    (["--diagnostics", "--chains", "1"], "--diagnostics needs --chains >= 2 (R-hat compares chains), got 1"),
    (["--until-rhat", "1.01", "--anneal", "0.1"], "--until-rhat needs a fixed target (--anneal 0)"),
    (["--start", "wide"], "argument --start: invalid choice: 'wide'"),
])
@pytest.mark.parametrize("command", ["sample", "translate"])
def test_bad_flags_are_one_line_exit_2(tmp_path, command, argv, message):
    where = ["--length", "3"] if command == "sample" else ["--input", str(tmp_path / "none.txt")]
    code, out, err = run_main([command, *where, *argv])
    assert code == 2 and err.count("\n") == 1 and message in err, err


def test_plot_traces_needs_an_existing_folder(tmp_path):
    code, _, err = run_main(["sample", "--length", "3", "--plot-traces", str(tmp_path / "no" / "t.png")])
    assert code == 2 and "--plot-traces: folder" in err and err.count("\n") == 1, err


def _unwritable_folder() -> tuple[str, str]:
    """A folder nobody may create a file in, root included, and the reason the system gives: /sys (Permission
    denied; Read-only file system in an unprivileged container), else skip."""
    import tempfile

    try:
        tempfile.NamedTemporaryFile(dir="/sys").close()
    except OSError as e:
        return "/sys", e.strerror
    pytest.skip("/sys is writable here")


@pytest.mark.parametrize("command", ["sample", "translate"])
def test_an_unwritable_plot_traces_folder_is_refused_before_the_run(tiny_dir, tmp_path, command):
    """The image is written after the run, so a folder it cannot be written in is found before it: one line, exit
    2, nothing sampled or printed (until 2026-12-01 the error came after the samples were printed)."""
    folder, reason = _unwritable_folder()
    png = f"{folder}/t.png"
    where = (["--model", tiny_dir, *SAMPLE[:-1]] if command == "sample" else
             ["--input", "bundled", "--limit", "1", "--output", str(tmp_path / "out.txt"), "--chains", "2",
              "--epochs", "2", "--burn-in", "0"])
    code, out, err = run_main([command, *where, "--plot-traces", png])
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.strip().endswith(f"--plot-traces {png!r}: cannot write: {reason}"), err
    assert not (tmp_path / "out.txt").exists()


def test_plot_traces_is_an_image_file_that_overwrites_nothing_checked_before_the_run(tiny_dir, tmp_path):
    """The image is written after the run, so its path is checked before it (until 2026-11-30 a .txt path failed
    after the whole run with matplotlib's message, a folder got PATH.png beside it, and translate's image could
    overwrite its own --output or --input; a review found them)."""
    init = tmp_path / "init.png"
    init.write_text("a b c\n")
    out = tmp_path / "hyp.png"
    cases = [(["sample", "--model", tiny_dir, "--length", "3", "--plot-traces", str(tmp_path / "t.txt")],
              "does not end in an image format"),
             (["sample", "--model", tiny_dir, "--length", "3", "--plot-traces", str(tmp_path)], "is a folder"),
             (["sample", "--model", tiny_dir, "--init-file", str(init), "--plot-traces", str(init)],
              "--plot-traces and --init-file name the same file"),
             (["translate", "--input", "bundled", "--limit", "1", "--output", str(out), "--plot-traces", str(out)],
              "--output and --plot-traces name the same file"),
             (["translate", "--input", "bundled", "--limit", "1", "--ref", "bundled", "--output",
               str(mhfast.translation.BUNDLED_TEST_REFERENCE)], "--output and --ref name the same file")]
    for argv, message in cases:
        before = init.read_bytes()
        code, out_text, err = run_main([*argv, "--chains", "2", "--epochs", "2", "--burn-in", "0", "--quiet"])
        assert code == 2 and message in err and err.count("\n") == 1 and out_text == "", (argv, err)
        assert init.read_bytes() == before and not out.exists()


def test_translate_diagnostics_lines_stats_and_plot(tiny_paths, tmp_path):
    tiny = tiny_paths
    lines = sorted(tiny["valid_de"].read_text(encoding="utf-8").splitlines(), key=lambda s: len(s.split()))[:2]
    src = tmp_path / "src.txt"
    src.write_text("".join(line + "\n" for line in lines[:1] + [""] + lines[1:]), encoding="utf-8")
    model = ["--model", str(tiny["checkpoint"]), "--data", str(tiny["data"]), "--tokenizer", "none"]
    fast = ["--chains", "3", "--epochs", "8", "--burn-in", "2", "--batch-size", "2", "--quiet"]
    code, plain, err = run_main(["translate", *model, "--input", str(src), *fast])
    assert code == 0, err
    stats, png = tmp_path / "stats.json", tmp_path / "tr.png"
    code, out, err = run_main(["translate", *model, "--input", str(src), *fast, "--diagnostics", "--stats-out",
                               str(stats), "--plot-traces", str(png)])
    assert code == 0, err
    assert out == plain, "--diagnostics changed the translations"
    verdicts = [line for line in err.splitlines() if line.startswith("sentence ")]
    assert [v.split(":")[0] for v in verdicts] == ["sentence 0", "sentence 2"]  # the empty line has none
    batches = json.loads(stats.read_text())["batches"]
    figures = [d for b in batches for d in b["diagnostics"]]
    assert figures[1] is None and len(figures) == 3
    for d in (figures[0], figures[2]):
        assert set(d) == {"rhat", "ess_bulk", "ess_tail", "mcse_mean", "draws", "epochs_run", "converged"}
        assert d["draws"] == 6 and d["epochs_run"] == 8 and d["converged"] is None
        assert set(d["rhat"]) == {"e_raw", "e_local", "proj_0", "proj_1", "proj_2"}
    assert png.read_bytes()[:8] == PNG
    # evaluate --stats summarises the same figures: the worst R-hat over the two sentences, and where it is
    code, out, err = run_main(["evaluate", "--stats", str(stats)])
    assert code == 0, err
    worst = {j: max(figures[j]["rhat"].values()) for j in (0, 2)}
    j = max(worst, key=worst.get)
    assert "convergence of 2 sentences" in out
    assert f"worst {format_rhat(worst[j])} (sentence {j}); below 1.01: {sum(v < 1.01 for v in worst.values())} of 2" \
        in out
    code, out, err = run_main(["translate", *model, "--input", str(src), *fast, "--until-rhat", "1.5", "--stats-out",
                               str(stats)])
    assert code == 0, err
    batches = json.loads(stats.read_text())["batches"]
    runs = [e for b in batches for e in b["epochs_run"]]
    assert runs[1] is None and all(3 <= e <= 8 for e in (runs[0], runs[2]))
    assert "diagnostics" not in batches[0]
    conv = [c for b in batches for c in b["converged"]]
    code, out, err = run_main(["evaluate", "--stats", str(stats)])
    assert code == 0, err
    assert "convergence of" not in out  # no --diagnostics figures in this file
    assert (f"converged (--until-rhat / --min-ess): {sum(bool(c) for c in conv if c is not None)} of 2 sentences, "
            f"epochs run: mean {(runs[0] + runs[2]) / 2:.1f}, max {max(runs[0], runs[2])}") in out


@pytest.mark.parametrize("bad", [{"diagnostics": "x"}, {"diagnostics": [{"rhat": {"e_raw": "high"}}]},
                                 {"converged": [True], "epochs_run": ["many"]},
                                 {"converged": [True, False], "epochs_run": [5]}])  # was an IndexError traceback
def test_evaluate_refuses_malformed_convergence_figures(tmp_path, bad):
    stats = tmp_path / "stats.json"
    stats.write_text(json.dumps({"method": "mh", "burn_in": 0, "batches": [{"start": 0, "sentences": 1,
                                                                          "epochs": [], **bad}]}))
    code, out, err = run_main(["evaluate", "--stats", str(stats)])
    assert code == 2 and out == ""
    assert err.strip().endswith("is not a statistics file of 'mhfast translate --stats-out'"), err


def _figures(rhat: float | None, ess: float | None) -> dict:
    return {"rhat": {"e_raw": rhat, "e_local": rhat}, "ess_bulk": {"e_raw": ess}, "ess_tail": {"e_raw": ess},
            "draws": 6, "epochs_run": 8, "converged": None}


def test_evaluate_counts_sentences_whose_r_hat_is_nan(tmp_path):
    """A sentence whose chains never moved has R-hat NaN: it is counted, shown as the worst and not below 1.01
    (it had been left out: "convergence of 2 sentences ... below 1.01: 2 of 2" for 3 such sentences), and the
    medians are over the numbers whatever the sentences' order (statistics.median with a NaN depended on it)."""
    figures = [_figures(1.004, 50.0), _figures(None, None), _figures(1.002, 40.0), _figures(1.3, 9.0)]
    outs = []
    for order in ([0, 1, 2, 3], [1, 0, 3, 2]):
        stats = tmp_path / "stats.json"
        stats.write_text(json.dumps({"method": "mh", "burn_in": 2, "batches": [
            {"start": 0, "sentences": 4, "epochs": [], "diagnostics": [figures[i] for i in order]}]}))
        code, out, err = run_main(["evaluate", "--stats", str(stats)])
        assert code == 0, err
        nan_at = order.index(1)
        assert "convergence of 4 sentences (--diagnostics; per sentence the worst of its traced summaries) " \
               "(1 with R-hat nan: not judged):" in out, out
        assert f"max r_hat: median 1.004, worst nan (sentence {nan_at}); below 1.01: 2 of 4" in out, out
        assert f"min ess_bulk: median 40, lowest nan (sentence {nan_at})" in out, out
        outs.append(out.replace(f"sentence {nan_at}", "sentence k"))
    assert outs[0] == outs[1]


def test_evaluate_refuses_src_or_lowercase_without_hyp(tmp_path):
    """--src and --lowercase only act on --hyp/--ref: alone with --stats they had been ignored (a missing --src
    file passed unseen)."""
    stats = tmp_path / "stats.json"
    stats.write_text(json.dumps({"method": "mh", "burn_in": 0, "batches": []}))
    for extra, name in ((["--src", str(tmp_path / "missing.de")], "--src"), (["--lowercase"], "--lowercase")):
        code, out, err = run_main(["evaluate", "--stats", str(stats), *extra])
        assert code == 2 and out == "" and f"error: {name} needs --hyp and --ref" in err and err.count("\n") == 1, err


def test_a_failed_image_write_names_plot_traces(tmp_path, monkeypatch):
    """A full disk at the image write is one line naming --plot-traces and the path (it was a bare
    "[Errno 28] No space left on device")."""
    import errno

    from matplotlib.figure import Figure

    from mhfast.commands import _diagnostics
    from mhfast.files.errors import FileError

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", full)
    from mhfast.models.tabular import TabularMLM
    from mhfast.sampler.diagnostics_report import trace_panel

    result = mhfast.sample(TabularMLM.random(3, 3, seed=0), 3, chains=2, epochs=6, burn_in=1, seed=0)
    panel = {**trace_panel(result, 0, "local"), "label": "input 0"}
    with pytest.raises(FileError, match=r"--plot-traces '.*t\.png': cannot write: No space left on device"):
        _diagnostics.plot_traces(str(tmp_path / "t.png"), [panel])


def test_sample_may_draw_its_image_into_the_model_folder(tmp_path):
    """sample keeps no resume record, so an image beside the model's files harms nothing (it was refused as lying
    inside --model; score's --output still is: there every file of the folder is part of the model's identity)."""
    model = save_tiny_bert_dir(tmp_path / "model")
    argv = ["sample", "--model", str(model), *SAMPLE[:2], "--chains", "2", "--epochs", "2", "--burn-in", "0", "-q"]
    code, _, err = run_main([*argv, "--plot-traces", str(tmp_path / "model" / "traces.png")])
    assert code == 0 and (tmp_path / "model" / "traces.png").is_file(), err
