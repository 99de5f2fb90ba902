"""Humanization (mhfast.humanize, mhfast humanize) on the real Sapiens light-chain model.

* ``sapiens_argmax`` (the re-implementation of BioPhi's Sapiens humanization) equals the argmax of the sapiens
  package's own ``predict_scores`` over the framework, CDRs from the parent, for 1 and 2 iterations;
* ``humanize`` never changes a CDR residue, never exceeds ``max_mutations`` in any recorded state, and reports
  each variant's energy as an independent ``mhfast.energy`` call computes it (E_local + hamming x mutations),
  its mutations as the differences from the parent, lowest energy first;
* the command prints that, and refuses bad spans in one line (exit 2).

The parent is the mouse 4D5 light chain (trastuzumab's parent; Hu-mAb 25 pairs of Marks et al., Bioinformatics
2021, from github.com/Merck/BioPhi-2021-publication, data/tasks/humab_25_pairs/pairs/parental.fa), cut to its
first 40 residues for speed in the sampling tests (CDR-L1 = residues 23-33, Kabat).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import mhfast
from cli_runner import run_main
from mhfast.humanize import MutationCap, framework_positions, humanize, mutations, sapiens_argmax
from mhfast.models.sapiens import AMINO_ACIDS, load_sapiens

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ROOT = Path(__file__).resolve().parents[2]
MOUSE_4D5_VL = "DIVMTQSHKFMSTSVGDRVSITCKASQDVNTAVAWYQQKPGHSPKLLIYSASFRYTGVPDRFTGNRSGTDFTFTISSVQAEDLAVYYCQQHYTTPPTFGGGTKVEIK"
KABAT_CDRS = [(23, 34), (49, 56), (88, 97)]
SHORT, SHORT_CDRS = MOUSE_4D5_VL[:40], [(23, 34)]


@pytest.fixture(scope="module")
def lm():
    return load_sapiens("L")


def test_helpers():
    assert mutations("QVQL", "EVQL") == ["Q1E"] and framework_positions(5, [(1, 3)]) == [0, 3, 4]
    with pytest.raises(ValueError, match="cdrs: span 3:9"):
        framework_positions(5, [(3, 9)])
    with pytest.raises(ValueError, match="variant"):
        mutations("QV", "Q")
    with pytest.raises(ValueError, match="max_mutations"):
        MutationCap(torch.zeros(1, 3, dtype=torch.long), -1)
    # (a review: past int64 the cap overflowed inside torch; malformed spans raised unpacking errors, unnamed)
    with pytest.raises(ValueError, match=r"max_mutations: expected an int in \[0, 10000\]"):
        MutationCap(torch.zeros(1, 3, dtype=torch.long), 2 ** 70)
    for cdrs in ([(1.5, 3)], [(1,)], "1:3", None, [(True, 3)]):
        with pytest.raises(ValueError, match="cdrs: "):
            framework_positions(5, cdrs)


def test_bad_weights_and_energies_are_named(lm):
    """A negative or NaN hamming weight rewards mutations or scores nothing (the CLI refused it, the API took it);
    sapiens_argmax(energy='x') scored the raw energy without a word."""
    parent = "EVQLVESGGGLVQPGGSLRL"
    for hamming in (-5, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="hamming: expected a finite number >= 0"):
            humanize(lm, parent, [(5, 10)], hamming=hamming, epochs=1, burn_in=0)
        with pytest.raises(ValueError, match="hamming: expected a finite number >= 0"):
            sapiens_argmax(lm, parent, [(5, 10)], hamming=hamming)
    with pytest.raises(ValueError, match="energy: expected 'local' or 'raw', got 'x'"):
        sapiens_argmax(lm, parent, [(5, 10)], energy="x")
    with pytest.raises(ValueError, match=r"iterations: expected an int in \[1, 10000\]"):
        sapiens_argmax(lm, parent, [(5, 10)], iterations=10 ** 23)


@pytest.mark.parametrize("iterations", [1, 2])
def test_biophi_argmax_equals_the_packages_predict_scores(lm, iterations):
    import sapiens

    seq = MOUSE_4D5_VL
    frame = set(framework_positions(len(seq), KABAT_CDRS))
    for _ in range(iterations):  # BioPhi's loop, on the package's own scores
        with torch.serialization.safe_globals([argparse.Namespace]):
            best = "".join(sapiens.predict_scores(seq, "L").idxmax(axis=1).values)
        seq = "".join(b if i in frame else p for i, (p, b) in enumerate(zip(MOUSE_4D5_VL, best)))
    h = sapiens_argmax(lm, MOUSE_4D5_VL, KABAT_CDRS, iterations=iterations)
    assert h.variants[0].sequence == seq
    assert len(h.variants[0].mutations) > 5  # a mouse framework: many residues the human model would change


@pytest.mark.slow  # 18 s on the 2-core CI machine
def test_humanize_keeps_cdrs_respects_the_cap_and_scores_its_variants(lm):
    cap, w = 3, 0.5
    h = humanize(lm, SHORT, SHORT_CDRS, hamming=w, max_mutations=cap, top=50, chains=6, epochs=3, burn_in=1,
                 seed=0, proposal_temperature=1.5)
    assert h.framework == tuple(framework_positions(len(SHORT), SHORT_CDRS))
    variants = h.variants
    # every state after burn-in, each once: chains x post-burn-in epochs (it skipped burn-in twice: 6 x 1)
    assert len(variants) >= 3 and sum(v.seen for v in variants) == 6 * 2
    assert [v.energy for v in variants] == sorted(v.energy for v in variants)
    e = mhfast.energy(lm, [lm.encode(v.sequence) for v in variants]).e_local
    for v, e_local in zip(variants, e.tolist()):
        assert v.sequence[23:34] == SHORT[23:34] and set(v.sequence) <= set(AMINO_ACIDS)
        assert list(v.mutations) == mutations(SHORT, v.sequence) and len(v.mutations) <= cap
        assert abs(v.e_local - e_local) < 1e-4 and abs(v.energy - (e_local + w * len(v.mutations))) < 1e-4
    assert any(v.mutations for v in variants)  # the chains moved
    assert abs(h.parent_e_local - float(mhfast.energy(lm, [lm.encode(SHORT)]).e_local[0])) < 1e-4


def test_the_cap_holds_in_every_state(lm):
    ids = lm.encode(SHORT)[None]
    free = torch.zeros_like(ids, dtype=torch.bool)
    free[0, 1:16] = True
    r = mhfast.sample(lm, init=ids, free_positions=free, chains=6, epochs=2, burn_in=0, seed=1, energy="local",
                      proposal_temperature=3.0, record="epoch", extra_energy=[(MutationCap(ids, 2, lm.pad_id), 1.0)])
    distance = (r.history[:, 0] != ids).sum(-1)
    assert int(distance.max()) == 2  # the chains reach the cap (hot proposals) and never pass it


def test_a_lower_case_parent_is_the_same_parent(lm):
    """humanize and sapiens_argmax read the parent as the command does (no whitespace, upper case): a lower-case
    parent made every residue a "mutation" (the model's encode upper-cases, the mutation list compared the raw
    string)."""
    lower = " ".join([SHORT[:20].lower(), SHORT[20:]])
    a = humanize(lm, SHORT, SHORT_CDRS, chains=2, epochs=2, burn_in=1, seed=0)
    b = humanize(lm, lower, SHORT_CDRS, chains=2, epochs=2, burn_in=1, seed=0)
    assert a == b and b.parent == SHORT
    assert sapiens_argmax(lm, lower, SHORT_CDRS) == sapiens_argmax(lm, SHORT, SHORT_CDRS)
    with pytest.raises(TypeError, match="parent"):
        humanize(lm, list(SHORT), SHORT_CDRS)
    for blank in ("", "  \n"):  # (it named the cdrs: "span 23:34 is not within the 0 residues")
        for call in (humanize, sapiens_argmax):
            with pytest.raises(ValueError, match=r"^parent: no residues \(an empty or blank sequence\)$"):
                call(lm, blank, SHORT_CDRS)


def test_no_variant_past_the_cap_at_any_temperature(lm):
    """At a target hot enough that moves past the cap are accepted (exp(-1e4 / tau) above the smallest uniform),
    those states are left out of the variants, and all-past-the-cap is a warning with no variant."""
    h = humanize(lm, SHORT, SHORT_CDRS, max_mutations=1, top=100, chains=4, epochs=3, burn_in=1, seed=0,
                 target_temperature=1500.0, proposal_temperature=3.0)
    assert h.variants and all(len(v.mutations) <= 1 for v in h.variants)
    assert sum(v.seen for v in h.variants) < 4 * 2  # some states were past it and dropped (2 of 8 here)
    with pytest.warns(UserWarning, match="past max_mutations.*far too hot for the cap"):
        h = humanize(lm, SHORT, SHORT_CDRS, max_mutations=1, top=100, chains=4, epochs=3, burn_in=1, seed=0,
                     target_temperature=1e5, proposal_temperature=3.0)
    assert h.variants == ()
    # a random start, far past the cap, at the default temperature: the warning names the start (it blamed the
    # temperature, a review found)
    with pytest.warns(UserWarning, match=r"past max_mutations \(1\): no variant \(start='random' put the chains"):
        h = humanize(lm, SHORT, SHORT_CDRS, max_mutations=1, start="random", chains=3, epochs=4, burn_in=1, seed=0)
    assert h.variants == ()


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mhfast", "humanize", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


@pytest.mark.slow  # 61 s on the 2-core CI machine
def test_cli(lm):
    run = _cli("--chain", "L", "--parent", SHORT, "--cdr", "23:34", "--max-mutations", "2", "--chains", "2",
               "--epochs", "2", "--burn-in", "1", "--top", "3")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("# parent E_local=") and lines[1].startswith("# rank")
    rows = [line.split("\t") for line in lines[2:]]
    assert 1 <= len(rows) <= 3 and [r[0] for r in rows] == [str(k) for k in range(1, len(rows) + 1)]
    for r in rows:
        assert r[5][23:34] == SHORT[23:34] and int(r[4]) <= 2
        assert (r[6] == "-") == (int(r[4]) == 0) and (r[6] == "-" or r[6].split() == mutations(SHORT, r[5]))
    bad = _cli("--chain", "L", "--parent", SHORT, "--cdr", "23:99")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--cdr: span 23:99" in bad.stderr, bad.stderr


@pytest.mark.parametrize("method", ["mh", "biophi"])
def test_a_bad_parent_or_cdr_is_one_line_naming_the_flag(method):
    """The API names its arguments (``cdrs``, ``parent``; the model's encoder says ``text``), the command its flags
    (until 2026-11-30 the command printed ``cdrs: ...``, ``text: ...`` or, for CDRs covering every residue,
    ``mhfast.sample: init leaves no free position``; a review found them)."""
    n, z = len(SHORT), SHORT[:10] + "Z" + SHORT[11:]
    for argv, needle in ((["--parent", SHORT, "--cdr", "23:99"], "--cdr: span 23:99"),
                         (["--parent", z, "--cdr", "23:34"], "--parent: 'Z' at position 10"),
                         # upper() makes 'ß' 'SS' (two serines, shifting the CDRs), 'ı' an I: not amino acids
                         (["--parent", SHORT[:10] + "ß" + SHORT[11:], "--cdr", "23:34"],
                          "--parent: 'ß' at position 10 is not one of the 20 amino acids"),
                         (["--parent", SHORT[:10] + "ı" + SHORT[11:], "--cdr", "23:34"], "--parent: 'ı' at position 10"),
                         (["--parent", SHORT, "--cdr", f"0:{n}"], f"--cdr: the spans cover all {n} residues")):
        code, out, err = run_main(["humanize", "--chain", "L", *argv, "--method", method, "-q"])
        assert code == 2 and err.count("\n") == 1 and needle in err and out == "", (argv, err)


@pytest.mark.parametrize("flags,words", [
    (["--method", "biophi", "--chains", "3"], "--chains has no effect with --method biophi"),
    (["--method", "biophi", "--sampler", "gibbs"], "--sampler has no effect with --method biophi"),
    (["--method", "biophi", "--top", "3"], "--top has no effect with --method biophi"),
    (["--method", "biophi", "--max-mutations", "2"], "--max-mutations has no effect with --method biophi"),
    (["--iterations", "2"], "--iterations (2) has no effect with --method mh"),
    (["--sampler", "gibbs"], "--sampler gibbs cannot humanize"),
    (["--sampler", "block-gibbs", "--hamming", "0"], "--sampler block-gibbs cannot humanize"),
    (["--capture", "static"], "--capture static cannot humanize"),
    (["--trace-every", "2"], "--trace-every (2) has no effect without --until-rhat or --min-ess"),
    # (it had failed in the sampler, advising masks the parent cannot have)
    (["--start", "sampled"], "--start sampled cannot humanize"),
    (["--classifier", "x"], "--hamming-reference/--classifier: humanize's Hamming reference is the parent"),
])
def test_flags_the_method_ignores_or_cannot_honour_are_errors(flags, words, capsys):
    """Checked before the model loads: one line naming the flags (before, --method biophi dropped MH's flags
    silently, and --sampler gibbs with --hamming 0 failed as 'extra_energy cannot be used with sampler=')."""
    from mhfast.cli import main

    assert main(["humanize", "--parent", SHORT, "--cdr", "23:34", "-q", *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err, err


def test_biophi_takes_its_own_flags():
    """--method biophi reads --iterations, --hamming, --energy and --device: no error for them."""
    from mhfast.cli import build_parser
    from mhfast.commands import humanize as command

    args = build_parser().parse_args(
        ["humanize", "--parent", SHORT, "--cdr", "23:34", "--method", "biophi", "--iterations", "2", "--hamming",
         "2", "--energy", "raw", "--device", "cpu"])
    command._check(args)  # raises on a flag it takes for MH's


class _Decoding:
    """The Sapiens model with another ``decode`` (or another position limit): how other tokenizers read rows."""

    def __init__(self, lm, decode=None, max_length=None):
        self._lm, self._decode, self._max = lm, decode, max_length

    def __getattr__(self, name):
        if name == "max_length" and self._max is not None:
            return self._max
        return getattr(self._lm, name)

    def decode(self, row):
        return self._decode(self._lm.decode(row)) if self._decode else self._lm.decode(row)


def test_numpy_ints_are_ints_for_spans_caps_and_top():
    """Spans from a numbering tool come as numpy ints or arrays: taken, as the sampler's options take them (a
    helper's review, 2026-12-02: "each span must be a pair of ints, got (np.int64(2), np.int64(4))")."""
    import numpy as np

    want = framework_positions(10, [(2, 4)])
    assert framework_positions(10, [(np.int64(2), np.int64(4))]) == want == framework_positions(10, np.array([[2, 4]]))
    assert MutationCap(torch.zeros(1, 3, dtype=torch.long), np.int64(3)).cap == 3


def test_a_tokenizer_that_spaces_its_residues_gives_residue_variants(lm):
    """A decode that joins residues with spaces (ESM's tokenizer does) made every variant twice the parent's
    length: the run ended with "variant: 79 residues, the parent has 40". The residues are read without it."""
    spaced = _Decoding(lm, decode=lambda text: " ".join(text))
    h = humanize(spaced, SHORT, SHORT_CDRS, chains=2, epochs=2, burn_in=1, seed=0, top=3)
    assert h.variants and all(len(v.sequence) == len(SHORT) for v in h.variants)


def test_an_esm_vocabulary_humanizes_with_amino_acids_only(tmp_path):
    """ESM's vocabulary has X, B, U, Z, O, '.' and '-' beside the 20 amino acids: a framework took them (every
    variant of a tiny ESM had one). The framework keeps to the amino acids, and the parent's own residue stays
    allowed where it is another (U here); Sapiens proposes nothing else, so its chains are as they were."""
    transformers = pytest.importorskip("transformers")
    from mhfast.models.hf import HFMaskedLM

    toks = ["<cls>", "<pad>", "<eos>", "<unk>", *"LAGVSERTIDPKQNFYMHWCXBUZO.-", "<null_1>", "<mask>"]
    (tmp_path / "vocab.txt").write_text("\n".join(toks) + "\n")
    torch.manual_seed(0)
    cfg = transformers.EsmConfig(vocab_size=len(toks), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                 intermediate_size=32, pad_token_id=1, mask_token_id=32, token_dropout=False,
                                 position_embedding_type="rotary")
    esm = HFMaskedLM(transformers.EsmForMaskedLM(cfg).eval(), transformers.EsmTokenizer(str(tmp_path / "vocab.txt")))
    parent = SHORT[:10] + "U" + SHORT[11:]
    h = humanize(esm, parent, SHORT_CDRS, chains=4, epochs=4, burn_in=1, seed=0, top=50)
    assert len(h.variants) > 3
    for v in h.variants:
        assert set(v.sequence[:10] + v.sequence[11:]) <= set(AMINO_ACIDS), v.sequence
        assert v.sequence[10] in AMINO_ACIDS + "U"


def test_a_model_that_is_not_residue_level_or_too_short_is_named(lm):
    with pytest.raises(ValueError, match=r"^model: its decode of the parent's tokens gives .*humanize needs a "
                                         r"residue-level model"):
        humanize(_Decoding(lm, decode=lambda text: text.lower()[::-1]), SHORT, SHORT_CDRS, chains=2, epochs=1,
                 burn_in=0)
    with pytest.raises(ValueError, match=r"^parent: 40 residues, more than the model's 18 \(its 20 positions"):
        humanize(_Decoding(lm, max_length=20), SHORT, SHORT_CDRS, chains=2, epochs=1, burn_in=0)


def test_chain_with_model_is_an_error(capsys):
    """--chain picks the Sapiens model: with --model it had been dropped without a word (--model sapiens-h
    --chain L sampled a light chain under the heavy model)."""
    code, out, err = run_main(["humanize", "--model", "sapiens-h", "--chain", "L", "--parent", SHORT, "--cdr",
                               "23:34", "-q"])
    assert code == 2 and out == "" and "--chain L has no effect with --model" in err and err.count("\n") == 1, err


def test_a_masked_parent_residue_names_the_parent(lm):
    """An 'X' or '*' is the model's mask: the parent is named, not the model (the decode check, which reads the
    mask back as '_', had come first and blamed the model)."""
    for bad in ("X", "*"):
        with pytest.raises(ValueError, match=r"^parent: a masked residue"):
            humanize(lm, SHORT[:5] + bad + SHORT[6:], SHORT_CDRS, chains=2, epochs=1, burn_in=0)


def test_help_leaves_out_the_flags_humanize_refuses(capsys):
    """--hamming-reference and the --classifier flags are parsed (to be refused, naming why) but not offered."""
    from mhfast.cli import main

    with pytest.raises(SystemExit):
        main(["humanize", "--help"])
    shown = capsys.readouterr().out
    assert "--hamming " in shown and "--max-mutations" in shown
    for flag in ("--hamming-reference", "--classifier"):
        assert flag not in shown, flag


def test_too_many_chains_name_the_parent(capsys):
    """The sampler's memory check named its init ("mhfast.sample: init x --chains"), which humanize has not."""
    from mhfast.cli import main

    assert main(["humanize", "--chain", "L", "--parent", SHORT, "--cdr", "23:34", "-q", "--chains", str(10 ** 11)]) == 2
    err = capsys.readouterr().err
    assert "error: mhfast.humanize: parent x --chains: 1 input(s) x 100000000000 chains" in err and "init" not in err

