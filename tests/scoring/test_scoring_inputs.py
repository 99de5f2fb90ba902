"""Scoring's inputs, checked where a helper's review (2026-12-02) found them slip: a Translator's CMLM goes through
the model checks, text given to a bare CMLM is named, sources are checked one by one with the caller's index and
name (a float id had been truncated, a length error named another source), and within_word_l2r masks an ``<unk>``
piece inside a word as minicons does.

Example:
    python3 -m pytest -q tests/scoring/test_scoring_inputs.py
"""
from __future__ import annotations

import copy

import pytest
import torch

import mhfast
from mhfast.translation import Translator, load_bundled_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def bundled():
    return load_bundled_model()


def test_a_float64_translator_is_refused_before_any_forward(bundled):
    tr = Translator(copy.deepcopy(bundled.cmlm), bundled.processor)
    tr.cmlm.model.double()
    with pytest.raises(ValueError, match=r"^mhfast\.score: model is float64"):
        mhfast.score(tr, ["A dog runs."], sources=["Ein Hund läuft."])


def test_text_given_to_a_bare_cmlm_is_named(bundled):
    """A CMLM's tokenizer attribute is its SOURCE tokenizer (str -> str): target text through it had failed with
    "string indices must be integers"."""
    with pytest.raises(ValueError, match="give a conditional model as its Translator"):
        mhfast.score(bundled.cmlm, ["A dog runs."], sources=["Ein Hund."])


@pytest.mark.parametrize("bad, message", [
    ([5.5, 2], r"sources\[1\]: a source must be a 1-D sequence of int token ids, got 5\.5"),
    ([True, 7, 2], r"sources\[1\]: a source must be a 1-D sequence of int token ids, got True"),
    # torch.tensor(True) had been read as id 1, and a set's ids in hash order (a helper's review, 2026-12-02)
    ([7, torch.tensor(True), 2], r"sources\[1\]: a source must be a 1-D sequence of int token ids, got tensor\(True\)"),
    ({7, 9, 2}, r"sources\[1\]: a source must be a 1-D sequence of int token ids, got set"),
    ([5] * 1029, r"sources\[1\] has 1030 tokens \(special tokens included\), more than the model's maximum of 1024 "
                 r"source positions"),
    (torch.full((1024,), 5), r"sources\[1\] has 1025 tokens"),  # measured with its EOS, as it is encoded
    (torch.tensor([-3, 2]), r"sources\[1\]: token id -3 is outside the source dictionary \[0, "),
    ([3, 2 ** 70], r"sources\[1\]: token id 1180591620717411303424 is outside the source dictionary \[0, "),
])
def test_each_source_is_checked_and_named_by_its_own_index(bundled, bad, message):
    """The score of targets ["", "A dog runs."]: only the second is scored, and an error names sources[1] (it had
    named sources[0], its place among the scored ones, or passed a float id truncated)."""
    with pytest.raises((TypeError, ValueError), match=r"^mhfast\.score: " + message):
        mhfast.score(bundled, ["", "A dog runs."], sources=["Ein Hund.", bad])
    ids = bundled.target_ids("A dog runs.")[None].expand(2, -1)
    energy_message = r"^mhfast\.energy: " + message.replace("sources", "source")
    with pytest.raises((TypeError, ValueError), match=energy_message):
        mhfast.energy(bundled.cmlm, ids, source=[bundled.source_ids("Ein Hund."), bad])


def _xlmr_like():
    """A tiny XLM-R: a SentencePiece-style Unigram tokenizer without byte fallback (so an unknown letter inside a
    word is an <unk> piece of that word) and a random 2-layer model."""
    import tokenizers
    import transformers

    from mhfast.models.hf import HFMaskedLM

    corpus = ["the cat sat on the mat.", "a dog runs quickly, unbelievably fast!", "hello world", "cats and dogs"] * 20
    uni = tokenizers.SentencePieceUnigramTokenizer()
    uni.train_from_iterator(corpus, vocab_size=60, special_tokens=["<s>", "<pad>", "</s>", "<unk>"], unk_token="<unk>")
    uni.add_special_tokens(["<mask>"])
    tok = transformers.XLMRobertaTokenizerFast(tokenizer_object=uni._tokenizer, bos_token="<s>", eos_token="</s>",
                                               unk_token="<unk>", pad_token="<pad>", mask_token="<mask>",
                                               cls_token="<s>", sep_token="</s>")
    torch.manual_seed(0)
    model = transformers.XLMRobertaForMaskedLM(transformers.XLMRobertaConfig(
        vocab_size=len(tok), hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=64, pad_token_id=tok.pad_token_id, initializer_range=1.0)).eval()
    return HFMaskedLM(model, tok), model, tok


def _minicons_like(model, tok, text: str) -> list[float]:
    """within_word_l2r by hand: each scored piece masked with the later pieces of its word (by word_ids())."""
    enc = tok(text)
    ids, wid = enc["input_ids"], enc.word_ids()
    special = set(tok.all_special_ids)
    out = []
    for t, x in enumerate(ids):
        if x in special:
            continue
        row = [tok.mask_token_id if j == t or (j > t and wid[t] is not None and wid[j] == wid[t]) else v
               for j, v in enumerate(ids)]
        with torch.no_grad():
            out.append(float(model(input_ids=torch.tensor([row])).logits[0, t].double().log_softmax(-1)[x]))
    return out


def test_within_word_l2r_masks_an_unk_piece_inside_the_word():
    lm, model, tok = _xlmr_like()
    text = "zZq cat"
    pieces = tok.convert_ids_to_tokens(tok(text)["input_ids"])
    assert "<unk>" in pieces and pieces.index("<unk>") > 1, pieces  # an <unk> after the word's first piece
    got = mhfast.score(lm, [text], metric="within_word_l2r")[0].token_scores
    assert got == pytest.approx(_minicons_like(model, tok, text), abs=1e-4)
