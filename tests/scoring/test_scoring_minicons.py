"""mhfast.score against minicons itself (optional: skipped when minicons is not installed).

The main correctness tests (tests/scoring/test_scoring.py) re-derive minicons' definitions and do not need it;
this one runs minicons' own ``MaskedLMScorer`` (PLL_metric "original" and "within_word_l2r") on
real AntiBERTy sequences and on word-piece sentences, and compares the summed PLLs.
Install it without touching torch: ``pip install --no-deps minicons wonderwords``.
"""
from __future__ import annotations

import pytest
import torch

minicons_scorer = pytest.importorskip("minicons.scorer", reason="minicons is not installed (optional comparison; "
                                      "pip install --no-deps minicons wonderwords)")

import mhfast  # noqa: E402
from hf_tiny_models import tiny_model  # noqa: E402
from mhfast.models.hf import HFMaskedLM  # noqa: E402

HEAVY = ["EVQLVESGGGLVQPGGSLRLSCAASGFTFSSYAMSWVRQAPGKGLEWVS", "QVQLQESGPGLVKPSETLSLTCTVSGGSISSYYWSWIRQPPGKGLEWIG"]


def _minicons_pll(model, tokenizer, texts, metric):
    if not hasattr(type(tokenizer), "batch_encode_plus"):  # minicons <= 0.3.39 calls it; transformers 5 removed it
        tokenizer.batch_encode_plus = tokenizer.__call__
    scorer = minicons_scorer.MaskedLMScorer(model, device="cpu", tokenizer=tokenizer)
    return scorer.sequence_score(texts, reduction=lambda x: x.sum(0).item(), PLL_metric=metric)


def test_antiberty_matches_minicons_on_real_sequences():
    import transformers

    from mhfast.models.antiberty import load_antiberty

    lm = load_antiberty()
    tok = transformers.BertTokenizerFast(vocab=lm.vocab, do_lower_case=False)  # residues as space-separated words
    want = _minicons_pll(lm.model, tok, [" ".join(s) for s in HEAVY], "original")
    got = [s.pll for s in mhfast.score(lm, HEAVY)]
    assert got == pytest.approx(want, abs=1e-3)


@pytest.mark.parametrize("metric", ["original", "within_word_l2r"])
def test_word_pieces_match_minicons(metric):
    import transformers

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c", "##a", "##b", "##c", "d"]
    tok = transformers.BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=False)
    model = tiny_model("bert", seed=2)
    texts = ["ab ca d", "abc d cab", "d"]
    want = _minicons_pll(model, tok, texts, metric)
    got = [s.pll for s in mhfast.score(HFMaskedLM(model, tok), texts, metric=metric)]
    assert got == pytest.approx(want, abs=1e-4)
    assert torch.tensor(got).ne(0).all()
