"""The ``mhfast sample`` command line on a tiny random BERT directory and on AntiBERTy."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from cli_runner import run_main
from hf_tiny_models import save_tiny_bert_dir
from mhfast.models.antiberty import AMINO_ACIDS

WORDS = set("abcdefg")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_tiny_bert_dir(tmp_path_factory.mktemp("cli") / "tiny_bert")


def sample_lines(out: str, energy: str) -> list[tuple[str, float, float]]:
    """(sequence, E_raw, E_local) of every printed chain of the ``energy`` run."""
    lines, current = [], None
    for line in out.splitlines():
        if line.startswith(f"[{energy}] input"):
            current = energy
        elif line.startswith("["):
            current = None
        elif current and line.startswith("  ") and not line.strip().startswith("best:"):
            seq, raw, local = line.strip().split("\t")
            lines.append((seq, float(raw.split("=")[1]), float(local.split("=")[1])))
    return lines


def test_unconditional_both_energies_on_tiny_bert(tiny_dir):
    code, out, err = run_main(["sample", "--model", tiny_dir, "--length", "5", "--energy", "both", "--chains", "3",
                               "--epochs", "3", "--burn-in", "1", "--seed", "4"])
    assert code == 0, err
    for energy in ("raw", "local"):
        chains = sample_lines(out, energy)
        assert len(chains) == 3
        for seq, _, _ in chains:
            assert len(seq.split()) == 5 and set(seq.split()) <= WORDS
        assert re.search(rf"\[{energy}\] acceptance [01]\.\d+  novel [01]\.\d+", out)
    assert out.count("epoch   3/3") == 2  # progress lines of both runs


def test_infilling_keeps_fixed_tokens(tiny_dir):
    code, out, err = run_main(["sample", "--model", tiny_dir, "--init", "a b c d e f", "g g g", "--free", "1:3",
                               "--chains", "4", "--epochs", "3", "--burn-in", "0", "--quiet"])
    assert code == 0, err
    chains = sample_lines(out, "raw")
    assert len(chains) == 8
    for seq, _, _ in chains[:4]:
        words = seq.split()
        assert words[0] == "a" and words[3:] == ["d", "e", "f"]
    for seq, _, _ in chains[4:]:
        assert seq.split()[0] == "g"
    assert "  epoch " not in out and "# model" not in out  # --quiet: no progress, no headers


def test_init_file_fasta_on_antiberty(tmp_path):
    fasta = tmp_path / "in.fasta"
    fasta.write_text(">h1\nEVQLVESGG\nGLVQPG\n>h2\nQVQLQESG_PG\n")
    code, out, err = run_main(["sample", "--init-file", str(fasta), "--free", "6:9", "--chains", "2", "--epochs", "1",
                               "--burn-in", "0", "--energy", "local", "--backend", "reference"])
    assert code == 0, err
    chains = sample_lines(out, "local")
    assert len(chains) == 4
    for seq, _, e_local in chains:
        assert set(seq) <= set(AMINO_ACIDS) and e_local > 0
    for seq, _, _ in chains[:2]:
        assert len(seq) == 15 and seq[:6] == "EVQLVE" and seq[9:] == "GLVQPG"
    for seq, _, _ in chains[2:]:
        assert len(seq) == 11 and seq[:6] == "QVQLQE" and seq[9:] == "PG"  # the '_' at 8 was filled


@pytest.mark.parametrize("argv, message", [
    (["--chains", "0"], "--chains must be an int in [1, 1099511627776], got 0"),
    (["--burn-in", "9", "--epochs", "2"], "--epochs (2) must be >= --burn-in (9)"),
    (["--model", "/does/not/exist"], "--model: no such model directory"),
    (["--init", "a", "--length", "3"], "not allowed with argument"),
    (["--init", "a", "--free", "3:1"], "START < END"),
    (["--init-file", "/does/not/exist.txt"], "no such file"),
    (["--energy", "bogus"], "invalid choice"),
    (["--length", "4", "--free", "0:2"], "--free needs --init"),
    (["--init", "a b", "--free", "0:5"], "has only 2 tokens"),
    (["--top-p", "1.5", "--length", "3"], "--top-p must be in (0, 1]"),
    (["--init", "a b", ""], "--init 2: no token to sample"),  # (was mhfast.sample's 'init row 1 leaves no ...')
    # (was "error: length 39 (+2 ...": the adapter's name for the value, not the flag)
    (["--length", "39"], "error: --length 39 (+2 special tokens) has 41 tokens"),
])
def test_bad_options_print_one_line_and_exit_2(tiny_dir, argv, message):
    if "--model" not in argv:
        argv = ["--model", tiny_dir, *argv]
    code, out, err = run_main(["sample", *argv])
    assert code == 2
    assert message in err and err.count("\n") == 1 and "Traceback" not in err, err


@pytest.mark.slow  # 13 s on the 2-core CI machine
def test_python_dash_m_entry_point(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run([sys.executable, "-m", "mhfast", "sample", "--init-file", str(tmp_path / "missing")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("mhfast sample: error: --init-file: no such file")
    assert proc.stderr.count("\n") == 1


@pytest.mark.parametrize("energy", ["raw", "both"])
def test_files_given_as_a_pipe_are_read_once(tiny_dir, energy):
    """``--init-file <(cmd)`` and ``--hamming-reference <(cmd)``: a pipe gives its lines once. Until 2026-12-01 the
    reference was read again for each energy's terms, and the second read found 0 lines ("--hamming-reference has 0
    lines, expected one per input (1)", exit 2)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), OMP_NUM_THREADS="1")
    script = (f'"{sys.executable}" -m mhfast sample --model "{tiny_dir}" --init-file <(printf "a b c\\nd e\\n") '
              f'--hamming 2 --hamming-reference <(printf "a a a\\nb b\\n") --energy {energy} --chains 2 --epochs 2 '
              '--burn-in 0 --seed 3 -q')
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("  best: ") == (4 if energy == "both" else 2) and "E_raw+terms=" in proc.stdout


def test_every_command_with_quiet_takes_dash_q():
    """``-q`` is ``--quiet`` in every command that has it (translate and score had it, sample and humanize not)."""
    from mhfast.cli import build_parser

    with_quiet = {name: p for name, p in build_parser().commands.items()
                  if any("--quiet" in a.option_strings for a in p._actions)}
    assert {"sample", "translate", "score", "humanize"} <= set(with_quiet)
    for name, p in with_quiet.items():
        (action,) = [a for a in p._actions if "--quiet" in a.option_strings]
        assert "-q" in action.option_strings, name


def test_every_flag_states_its_default_once():
    """Each command's --help: no "(default: None)", and no flag whose help says its default twice (argparse's
    "(default: X)" after a help that already says "(default: stdout)" did, for 10 flags)."""
    import re

    from mhfast.cli import build_parser

    for name, p in build_parser().commands.items():
        text = " ".join(p.format_help().split())
        assert "(default: None)" not in text, name
        doubled = re.findall(r"\(default[^)]*\)[^()]{0,3}\(default[^)]*\)", text)
        assert not doubled, (name, doubled)
        for action in p._actions:  # every flag with a value says what it is for
            assert action.help or not action.option_strings, (name, action.option_strings)


def test_an_unknown_word_or_a_special_token_inside_the_text_is_named(tiny_dir):
    """A word outside the vocabulary ([UNK]) or a special token typed inside --init stayed fixed and printed as
    nothing: the printed text and its energies did not match (energies of 'a [UNK] b' beside the text 'a b')."""
    for text, shown in (("a z b", "[UNK]"), ("a [SEP] b", "[SEP]")):
        code, out, err = run_main(["sample", "--model", tiny_dir, "--init", text, "--epochs", "2", "--burn-in", "0",
                                   "--chains", "2", "-q"])
        assert code == 2 and f"--init: token 2 is '{shown}'" in err and err.count("\n") == 1, err
