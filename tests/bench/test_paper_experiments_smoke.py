"""Smoke run of bench/paper/paper_experiments.py on the tiny fairseq CMLM (tests/fairseq_tiny_cmlm.py).

Runs Figure 1 and Table 5 end to end (2 sentences, 2 chains, 3 epochs, 2 seeds) into ``tmp_path`` and checks that
the Markdown sections and PNG figures are written, that every section names its n and its 95% CIs and
states verdicts only as holds / fails / inconclusive at n = ..., and that every number in the tables is
finite. It asserts nothing about the paper's findings (a tiny model need not reproduce them) nor about speed.

The tiny model is the session fixture ``tiny_paths`` of tests/conftest.py (shared with the other fairseq
tests: trained once per pytest session, or reused from ``MHFAST_FAIRSEQ_CACHE``).

Example:
    python3 -m pytest -q tests/bench/test_paper_experiments_smoke.py
"""
from __future__ import annotations

import argparse
import types
import importlib.util
import math
import re
import sys
from pathlib import Path

import pytest
import torch


ROOT = Path(__file__).resolve().parents[2]


def _load_script():
    if "paper_experiments" in sys.modules:
        return sys.modules["paper_experiments"]
    spec = importlib.util.spec_from_file_location("paper_experiments", ROOT / "bench" / "paper" / "paper_experiments.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["paper_experiments"] = module  # dataclasses look their module up while the class is built
    path = list(sys.path)
    try:
        spec.loader.exec_module(module)
    finally:  # the script puts bench/paper/ on sys.path for its own imports, done by now: not for the rest of the suite
        sys.path[:] = path
    return module


NUMBER = r"-?\d+(?:\.\d+)?|nan|-?inf"
CI = re.compile(rf"^({NUMBER}) \[({NUMBER}), ({NUMBER})\]$")


def _table_cells(section: str) -> list[str]:
    """Every cell of the section's Markdown table rows except the first column and the header."""
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("|---")]
    return [cell.strip() for row in rows[1:] for cell in row.strip("|").split("|")[1:] if cell.strip()]


def _numbers(cells: list[str]) -> list[float]:
    """The numbers of the cells: plain ("0.747", "12 (both)") or "value [low, high]" (a 95% CI, checked ordered)."""
    out = []
    for cell in cells:
        m = CI.match(cell)
        if m:
            value, low, high = (float(x) for x in m.groups())
            assert low <= value <= high, cell
            out += [value, low, high]
        else:
            out.append(float(cell.split()[0]))
    return out


def test_fig1_and_table5_write_markdown_and_figures(tiny_paths, tmp_path):
    script = _load_script()
    out = tmp_path / "docs"
    argv = ["fig1", "--model", str(tiny_paths["checkpoint"]), "--data", str(tiny_paths["data"]),
            "--src", str(tiny_paths["valid_de"]), "--ref", str(tiny_paths["valid_en"]),
            "--sentences", "2", "--max-source-tokens", "8", "--chains", "2", "--burn-in", "1", "--epochs", "3",
            "--seeds", "0,1", "--out", str(out), "--no-cache"]
    assert script.main(argv) == 0
    assert script.main(["table5"] + argv[1:]) == 0

    md = (out / "experiments.md").read_text(encoding="utf-8")
    for name, rows in (("fig1", 3), ("table5", 5)):
        m = re.search(rf"<!-- paper:{name}:start -->(.*?)<!-- paper:{name}:end -->", md, re.S)
        assert m, f"no {name} section in experiments.md"
        section = m.group(1)
        assert "Command: `python3 bench/paper/paper_experiments.py " + name in section
        assert re.search(r"Wall time: \d+ s", section)
        # every section names its n and its CIs, and states verdicts only in the CI-driven vocabulary
        assert re.search(r"n = 2 sentences x 2 chains x 2 post-burn-in epochs x 2 seed\(s\)", section)
        assert "95% confidence intervals" in section and "(95% CI)" in section
        verdicts = re.findall(r"\*\*([^*]+)\*\*", section)
        assert verdicts and all(v in ("holds", "fails") or v.startswith("inconclusive at n = ") for v in verdicts)
        assert "holds here" not in section and "does not hold" not in section
        assert re.search(r"Energy vs quality \(raw\): within-sentence Spearman", section)
        assert "Per seed" in section and "seed 0: " in section and "seed 1: " in section
        cells = _table_cells(section)
        assert sum(bool(CI.match(c)) for c in cells) >= rows  # each row has at least one CI
        values = _numbers(cells)  # "nan" would parse: check finiteness explicitly
        assert all(math.isfinite(v) for v in values), cells
        png = out / "figures" / f"{name}.png"
        assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"](figures/{name}.png)" in section
    # BLEU is a percentage, rates are fractions: a unit slip would show here.
    fig1 = md.split("<!-- paper:fig1:start -->")[1]
    first_row = next(line for line in fig1.splitlines() if line.startswith("| MH raw"))
    e_local, acc, novel, bleu = (float(x.split()[0]) for x in first_row.strip("|").split("|")[1:5])
    assert e_local > 0 and 0 <= novel <= acc <= 1 and 0 <= bleu <= 100
    table5 = md.split("<!-- paper:table5:start -->")[1]
    assert "force_accept_epochs=2" in table5 and "proposal temperature 0.8" in table5
    assert re.search(r"avg BLEU - Mask-Predict: -?\d+\.\d+ \[.*\], p = \d\.\d{3}", table5)
    assert "best-of BLEU - Mask-Predict" in table5 and "E_raw of the references" in table5


def _write_section(md: Path, name: str, lines: list[str]) -> None:
    """write_section with a placeholder setup and options (only the Markdown layout is under test)."""
    script = _load_script()
    setup = script.Setup(None, [], [], [], str, "test data")
    args = argparse.Namespace(chains=2, epochs=3, burn_in=1, seeds=[0])
    script.write_section(md, script.Section(name, name.title(), lines, []), "cmd", 1.0, setup, args)


def test_write_section_replaces_its_own_block(tmp_path):
    md = tmp_path / "experiments.md"
    md.write_text("# Title\n\nhand-written text\n", encoding="utf-8")
    for text in ("first", "second"):
        _write_section(md, "table1", [text])
    _write_section(md, "table2", ["other"])
    content = md.read_text(encoding="utf-8")
    assert content.startswith("# Title\n\nhand-written text\n")
    assert content.count("<!-- paper:table1:start -->") == 1 and "second" in content and "first" not in content
    assert content.index("paper:table1:end") < content.index("paper:table2:start")


def test_write_section_keeps_the_experiment_order_whatever_the_run_order(tmp_path):
    """Experiments run in parallel processes finish in any order; the file still reads fig1, table1, ..."""
    md = tmp_path / "experiments.md"
    md.write_text("# Title\n", encoding="utf-8")
    for name in ("table5", "fig1", "table4", "table2", "fig1", "table1"):
        _write_section(md, name, [f"body of {name}"])
    assert re.findall(r"paper:(\w+):start", md.read_text(encoding="utf-8")) == ["fig1", "table1", "table2", "table4",
                                                                                "table5"]


def test_select_sentences_keeps_the_first_short_ones():
    script = _load_script()
    src = ["a b c", "", "a", "a b", "a b c d"]
    assert script.select_sentences(src, ["r"] * 5, 2, 2) == [2, 3]
    assert script.select_sentences(src, ["r"] * 5, 0, 0) == [0, 2, 3, 4]
    with pytest.raises(ValueError, match="differ in length"):
        script.select_sentences(src, ["r"], 2, 2)


def test_rescored_energies_match_the_samplers_and_runs_keep_their_groups(tiny_paths):
    """bench/paper/paper_runs.py rescores every end-of-epoch state itself (for per-sentence energies and the
    energy-quality correlation): its mean must be the sampler's own per-epoch E_local / E_raw."""
    script = _load_script()
    argv = ["fig1", "--model", str(tiny_paths["checkpoint"]), "--data", str(tiny_paths["data"]),
            "--src", str(tiny_paths["valid_de"]), "--ref", str(tiny_paths["valid_en"]), "--sentences", "3",
            "--max-source-tokens", "8", "--chains", "2", "--burn-in", "1", "--epochs", "4", "--seeds", "0,3",
            "--no-cache"]
    args = script.parse_args(argv)
    run = script.run_sampler(script.load_setup(args), args, "MH raw", sampler="mh", energy="raw")
    assert run.n == 3 and run.bleu_stats.shape[0] == 2 * 2 * 3 and run.epochs_after_burn_in == 3
    assert float(run.sent_e_local.mean()) == pytest.approx(sum(run.post(run.e_local)) / 3, rel=1e-4)
    assert float(run.sent_e_raw.mean()) == pytest.approx(sum(run.post(run.e_raw)) / 3, rel=1e-4)
    assert len(run.seed_bleu) == 2 and run.seed_spread().startswith("seed 0: ")
    assert all(len(c) >= 1 for c in run.candidates)


def test_cache_resumes_finished_runs_with_the_same_numbers(tiny_paths, tmp_path, monkeypatch):
    """A (configuration, seed) run is kept in --cache once finished; a repeated command reads it back (the
    section says so) and reports the same numbers; another seed or other code is computed afresh."""
    script = _load_script()
    runs = sys.modules["paper_runs"]
    monkeypatch.setattr(runs, "code_fingerprint", lambda: "code-A")  # the checkout may have uncommitted changes
    cache, out = tmp_path / "cache", tmp_path / "docs"
    argv = ["fig1", "--model", str(tiny_paths["checkpoint"]), "--data", str(tiny_paths["data"]),
            "--src", str(tiny_paths["valid_de"]), "--ref", str(tiny_paths["valid_en"]), "--sentences", "2",
            "--max-source-tokens", "8", "--chains", "2", "--burn-in", "1", "--epochs", "3", "--seeds", "0",
            "--cache", str(cache), "--out", str(out)]
    section = lambda: re.search(r"paper:fig1:start -->(.*?)<!--", (out / "experiments.md").read_text(), re.S)[1]
    table = lambda text: [line.rsplit("|", 2)[0] for line in text.splitlines() if line.startswith("| ")]  # no seconds
    assert script.main(argv) == 0
    first = section()
    assert len(list(cache.glob("*.pt"))) == 3 and "read from `--cache`" not in first  # MH raw, MH local, Gibbs
    assert script.main(argv) == 0
    second = section()
    assert "3 of 3 (configuration, seed) runs were read from `--cache`" in second
    assert table(second) == table(first) and len(table(first)) >= 4  # header + 3 samplers
    monkeypatch.setattr(runs, "code_fingerprint", lambda: "code-B")  # other code: nothing read back
    assert script.main(argv) == 0
    assert "read from `--cache`" not in section() and len(list(cache.glob("*.pt"))) == 6
    monkeypatch.setattr(runs, "code_fingerprint", lambda: None)  # uncommitted changes: neither read nor written
    assert script.main(argv) == 0
    assert "read from `--cache`" not in section() and len(list(cache.glob("*.pt"))) == 6


def test_chunked_runs_are_cached_per_chunk_and_keep_the_whole_runs_chains(tiny_paths, tmp_path, monkeypatch):
    """--chunk 1: one sample() call per source, each cached; the sources keep their input ids, so the chains
    are those of the one-call run (compared state by state), and a repeated command reads every chunk back."""
    script = _load_script()
    runs = sys.modules["paper_runs"]
    monkeypatch.setattr(runs, "code_fingerprint", lambda: "code-A")
    base = ["fig1", "--model", str(tiny_paths["checkpoint"]), "--data", str(tiny_paths["data"]),
            "--src", str(tiny_paths["valid_de"]), "--ref", str(tiny_paths["valid_en"]), "--sentences", "3",
            "--max-source-tokens", "8", "--chains", "2", "--burn-in", "1", "--epochs", "3", "--seeds", "0",
            "--cache", str(tmp_path / "cache")]
    whole_args, chunk_args = script.parse_args(base), script.parse_args(base + ["--chunk", "1"])
    setup = script.load_setup(whole_args)
    whole = runs._sample_cached(setup, whole_args, 0, dict(sampler="mh", energy="raw"))
    chunked = runs._sample_cached(setup, chunk_args, 0, dict(sampler="mh", energy="raw"))
    assert not whole[2] and not chunked[2] and len(list((tmp_path / "cache").glob("*.pt"))) == 1 + 3
    (w, c) = (types.SimpleNamespace(**whole[0]), types.SimpleNamespace(**chunked[0]))
    assert torch.equal(w.lengths, c.lengths)
    for b, n in enumerate(w.lengths.tolist()):
        assert torch.equal(w.history[:, b, :, :n], c.history[:, b, :, :n])
    assert torch.allclose(w.e_local, c.e_local, rtol=1e-4) and torch.allclose(w.acceptance_rate, c.acceptance_rate)
    again = runs._sample_cached(setup, chunk_args, 0, dict(sampler="mh", energy="raw"))
    assert again[2] and torch.equal(again[0]["history"], chunked[0]["history"])


def test_table3_and_table4_judge_rates_with_paired_cis(tiny_paths, tmp_path):
    """Acceptance and novel rates per sentence (from SampleResult's per-chain counts): the tables show them with
    CIs, and Table 3's novel-rate and Table 4's acceptance findings are judged by paired bootstraps."""
    script = _load_script()
    out = tmp_path / "docs"
    argv = ["--model", str(tiny_paths["checkpoint"]), "--data", str(tiny_paths["data"]),
            "--src", str(tiny_paths["valid_de"]), "--ref", str(tiny_paths["valid_en"]),
            "--sentences", "2", "--max-source-tokens", "8", "--chains", "2", "--burn-in", "1", "--epochs", "3",
            "--seeds", "0", "--out", str(out), "--no-cache"]
    assert script.main(["table3"] + argv) == 0
    assert script.main(["table4"] + argv) == 0
    md = (out / "experiments.md").read_text(encoding="utf-8")
    t3 = md.split("<!-- paper:table3:start -->")[1].split("<!-- paper:table3:end -->")[0]
    t4 = md.split("<!-- paper:table4:start -->")[1].split("<!-- paper:table4:end -->")[0]
    pair = (r"-?\d+\.\d{3} \[-?\d+\.\d{3}, -?\d+\.\d{3}\], p = \d\.\d{3} -> "
            r"\*\*(holds|fails|inconclusive at n = 2 sentences)")
    assert re.search(r"novel rate block MH raw - single-site MH raw: " + pair, t3), t3
    assert re.search(r"local: acceptance at 0\.02 - at 0\.04: " + pair, t4), t4
    assert re.search(r"anneal 0\.06: acceptance raw - local: " + pair, t4), t4
    assert "not judged" not in t3.lower() and "not judged" not in t4.lower()
    assert "chain_accepted" in t4  # the rates note says where the per-sentence rates come from
    for section, rows in ((t3, 5), (t4, 6)):
        cells = _table_cells(section)
        values = _numbers(cells)
        assert all(math.isfinite(v) for v in values), cells
        rate_cells = [c for c in cells if CI.match(c) and 0 <= float(c.split()[0]) <= 1]
        assert len(rate_cells) >= rows  # each run's rate(s) carry a CI
