"""The bundled Multi30k De->En CMLM (``mhfast/data/multi30k_de_en/``): complete, small, half precision, it
translates, and its test files are the raw Multi30k test_2016_flickr pair.

The BLEU floor below is a regression guard for the shipped weights (the full test-set numbers are in
training/README.md): Mask-Predict with the paper's settings (10 iterations, length beam 3) on the first
``PREFIX`` test sentences must stay at or above ``BLEU_FLOOR``. A broken export (wrong dictionary, fp16
overflow, mismatched SentencePiece model, optimizer state instead of weights) lands near 0.
"""
from __future__ import annotations

import gzip

import pytest
import sacrebleu
import torch

from fairseq_tiny_cmlm import require_multi30k
from mhfast.translation import (BUNDLE_DIR, BUNDLE_FILES, BUNDLED_TEST_REFERENCE, BUNDLED_TEST_SOURCE,
                                load_bundled_model)

PREFIX = 100
BLEU_FLOOR = 20.0
MAX_BUNDLE_MIB = 40


@pytest.fixture(scope="module")
def translator():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # 2-core CI: one thread is faster than two spinning against each other
    yield load_bundled_model()
    torch.set_num_threads(before)


def test_bundle_is_complete_and_small():
    for name in (*BUNDLE_FILES, BUNDLED_TEST_SOURCE.name, BUNDLED_TEST_REFERENCE.name):
        assert (BUNDLE_DIR / name).is_file(), f"{name} missing from {BUNDLE_DIR}"
    size = sum(p.stat().st_size for p in BUNDLE_DIR.iterdir() if p.is_file())
    assert size < MAX_BUNDLE_MIB * 2**20, f"bundle is {size / 2**20:.1f} MiB"


def test_bundle_weights_are_half_precision_without_optimizer_state():
    ckpt = torch.load(BUNDLE_DIR / "model.pt", map_location="cpu", weights_only=False)  # our own file
    floats = [v for v in ckpt["model"].values() if v.is_floating_point()]
    assert floats and all(v.dtype == torch.float16 for v in floats)
    assert all(torch.isfinite(v).all() for v in floats)
    assert not ckpt.get("last_optimizer_state")


def test_bundled_test_files_are_the_raw_multi30k_pair():
    for bundled, lang in ((BUNDLED_TEST_SOURCE, "de"), (BUNDLED_TEST_REFERENCE, "en")):
        with gzip.open(require_multi30k() / f"test_2016_flickr.{lang}.gz", "rt", encoding="utf-8") as f:
            raw = f.read().splitlines()
        assert bundled.read_text(encoding="utf-8").splitlines() == raw
        assert len(raw) == 1000


@pytest.mark.slow  # 26 s on the 2-core CI machine
def test_mask_predict_bleu_on_a_test_prefix(translator):
    sources = BUNDLED_TEST_SOURCE.read_text(encoding="utf-8").splitlines()[:PREFIX]
    refs = BUNDLED_TEST_REFERENCE.read_text(encoding="utf-8").splitlines()[:PREFIX]
    out = translator.translate(sources, method="mask-predict", iterations=10, length_beam=3)
    hyps = [h.text for h in out.hypotheses]
    assert all(hyps)
    bleu = sacrebleu.corpus_bleu(hyps, [refs])
    assert bleu.score >= BLEU_FLOOR, f"{bleu} (first {PREFIX} sentences of test_2016_flickr)"


def test_mh_translation_beats_its_warm_start(translator):
    """Raw-energy MH with annealing lowers the energy of the greedy fill it starts from (section 8)."""
    sources = BUNDLED_TEST_SOURCE.read_text(encoding="utf-8").splitlines()[:3]
    out = translator.translate(sources, method="mh", input_ids=range(3), sampler_options=dict(
        energy="raw", chains=2, epochs=4, burn_in=1, anneal=0.2, seed=0))
    assert all(h.text for h in out.hypotheses)
    first, last = out.epochs[0], out.epochs[-1]
    assert last["e_raw"] < first["e_raw"]
    # each sentence's own post-burn-in rates (of its kept length candidate's chains)
    rates = [(h.details["acceptance_rate"], h.details["novel_rate"]) for h in out.hypotheses]
    assert all(0.0 <= novel <= acc <= 1.0 for acc, novel in rates), rates


def test_target_ids_read_the_target_dictionary(translator):
    """A reference (--hamming-reference) is framed in the target dictionary: its ids detokenize back to the text,
    also when the target dictionary orders its words differently from the source one (the bundled model's two are
    the same file, so a reference read through the source dictionary was not told apart)."""
    import copy

    from mhfast.translation import Translator

    text = "A dog runs through the green grass."
    ids = translator.target_ids(text)
    assert ids[0] == translator.cmlm.bos_id and ids[-1] == translator.cmlm.eos_id
    assert translator.detokenize(ids) == text
    # the same model with its target words in reverse order (specials and fillers where they were)
    cmlm = copy.copy(translator.cmlm)
    d = cmlm.tgt_dict = copy.deepcopy(translator.cmlm.tgt_dict)
    words = [i for i in range(d.nspecial, len(d)) if i not in set(cmlm.special_ids)]
    symbols = list(d.symbols)
    for i, j in zip(words, reversed(words)):
        d.symbols[i] = symbols[j]
    d.indices = {s: i for i, s in enumerate(d.symbols)}
    reversed_dict = Translator(cmlm, translator.processor)
    flipped = reversed_dict.target_ids(text)
    assert not torch.equal(flipped, ids) and reversed_dict.detokenize(flipped) == text


@pytest.mark.parametrize("sources, message", [
    ("Ein Hund.", r"^sources: expected a list of sentences, got a str \(one sentence: pass \[sentence\]\)$"),
    (["Ein Hund.", None], r"^sources\[1\]: expected a str, got NoneType$"),
    ([b"Ein Hund."], r"^sources\[0\]: expected a str, got bytes$"),
])
def test_sources_that_are_not_a_list_of_sentences_are_named(translator, sources, message):
    """A bare str had been translated one character at a time (nine hypotheses for "Ein Hund."), and a None in the
    list failed with ``'NoneType' object has no attribute 'strip'`` (a helper's review, 2026-12-01)."""
    for method in ("mask-predict", "mh"):
        with pytest.raises(TypeError, match=message):
            translator.translate(sources, method=method)


def test_whitespace_only_sources_give_empty_hypotheses_and_cost_nothing(translator):
    """A source of spaces and tabs is empty: no hypothesis and no decoding (it was decoded from [bos, eos]). So is
    one that SentencePiece encodes to no piece (zero-width spaces, a BOM), though str.strip keeps it: it had been
    decoded from [bos, eos] into "Ahis is going on." (a helper's review, 2026-12-02)."""
    empty = [" \t ", "", "\u200b", "\ufeff", "\u200b\u200b \u200b"]
    for method in ("mask-predict", "mh"):
        out = translator.translate(["Ein Hund läuft.", *empty], method=method,
                                   sampler_options=dict(chains=1, epochs=1, burn_in=0) if method == "mh" else None)
        assert out.sentences == 1 and out.hypotheses[0].text, method
        assert [h.text for h in out.hypotheses[1:]] == [""] * len(empty) and out.hypotheses[1].tokens == [], method


def test_mask_predict_takes_a_translator(translator):
    """mhfast.mask_predict(translator, ...) decodes with its CMLM, as mhfast.energy and mhfast.score take a
    Translator (it had been a TypeError listing seven missing attributes)."""
    import mhfast

    ids = [translator.source_ids("Ein Hund läuft.")]
    a = mhfast.mask_predict(translator, ids, iterations=2)
    assert torch.equal(a.tokens[0], mhfast.mask_predict(translator.cmlm, ids, iterations=2).tokens[0])


def test_translation_is_reachable_after_import_mhfast_and_takes_numpy_ints(translator):
    """docs/scoring.md writes mhfast.translation.load_bundled_model() after `import mhfast` (an AttributeError in a
    fresh interpreter); translate(iterations=np.int64(3)) is 3 (it had been refused)."""
    import subprocess
    import sys

    import numpy as np

    code = "import mhfast; print(mhfast.translation.load_bundled_model.__name__)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() \
        == "load_bundled_model"
    a = translator.translate(["Ein Hund läuft."], method="mask-predict", iterations=np.int64(3), length_beam=2)
    b = translator.translate(["Ein Hund läuft."], method="mask-predict", iterations=3, length_beam=2)
    assert a.hypotheses[0].text == b.hypotheses[0].text


def test_extra_energy_given_twice_is_an_error(translator):
    """translate(extra_energy=f, sampler_options={"extra_energy": g}): a ValueError naming both. f's terms had
    silently replaced g's (a helper's review, 2026-12-02)."""
    def terms(ids):
        return [lambda tokens: torch.zeros(tokens.shape[0])]

    mine = [(lambda tokens: torch.full((tokens.shape[0],), 1000.0), 1.0)]
    with pytest.raises(ValueError, match=r"^extra_energy: given both as translate's argument and in sampler_options"):
        translator.translate(["Ein Hund läuft."], extra_energy=terms,
                             sampler_options=dict(chains=1, epochs=1, burn_in=0, extra_energy=mine))


def test_target_ids_refuse_a_piece_the_target_dictionary_lacks(translator):
    """An unknown piece would be <unk>, the CMLM's mask: a --hamming-reference with it had left that position
    silently unconstrained (a helper's review, 2026-12-02). `mhfast score` refused the same text already."""
    with pytest.raises(ValueError, match=r"^'.*狗' is not in the target dictionary \(it would be <unk>"):
        translator.target_ids("dog dog 狗")


def test_the_translators_cmlm_tokenizes_string_sources(translator):
    """``load_translator`` gives the CMLM the SentencePiece tokenizer, so a string source reaches it as pieces
    through every path (``tr.cmlm.source_ids``, ``mask_predict(tr.cmlm, [str])``, ``mhfast.sample(tr.cmlm,
    source=[str])``); without it 4 of "Ein Hund läuft über die Wiese."'s 6 words became <unk>."""
    from mhfast.mask_predict import mask_predict

    text = "Ein Hund läuft über die Wiese."
    ids = translator.source_ids(text)
    assert torch.equal(translator.cmlm.source_ids(text), ids)
    unk = translator.cmlm.src_dict.unk()
    assert not (ids == unk).any(), ids
    by_string = mask_predict(translator.cmlm, [text], iterations=2, length_beam=1)
    by_ids = mask_predict(translator.cmlm, [ids], iterations=2, length_beam=1)
    assert torch.equal(by_string.tokens[0], by_ids.tokens[0])
    assert translator.detokenize(by_string.tokens[0]).startswith("A dog")


def test_a_translator_built_by_hand_with_a_sentencepiece_processor_encodes_once(translator):
    """Translator(the bundled CMLM, a new TextProcessor on the same spm.model): the same source ids, translation
    and energy as the bundled translator's. The pieces had gone through SentencePiece twice (each gaining a "▁"):
    "...across the grassy grass." for "...through the grass.", E_local 10.02 for 9.82."""
    import mhfast
    from mhfast.translation import BUNDLE_DIR, TextProcessor, Translator

    by_hand = Translator(translator.cmlm, TextProcessor("spm", BUNDLE_DIR / "spm.model"))
    text = "Ein Hund läuft über die Wiese."
    assert torch.equal(by_hand.source_ids(text), translator.source_ids(text))
    target = [translator.target_ids("A dog runs on the meadow.").tolist()]
    assert torch.equal(mhfast.energy(by_hand, target, source=[text]).e_local,
                       mhfast.energy(translator, target, source=[text]).e_local)


def test_a_translator_built_by_hand_keeps_its_cmlms_tokenizer(translator):
    """Translator(cmlm with a tokenizer of its own, another processor): source_ids goes through both, as it did
    before the CMLM of load_translator got the processor's tokenizer (then it is applied once, not twice)."""
    import copy

    from mhfast.translation import TextProcessor, Translator

    cmlm = copy.copy(translator.cmlm)
    cmlm.tokenizer = translator.processor.encode  # its own SentencePiece, under a processor that splits on spaces
    by_hand = Translator(cmlm, TextProcessor.none())
    text = "Ein Hund läuft über die Wiese."
    assert torch.equal(by_hand.source_ids(text), translator.source_ids(text))
