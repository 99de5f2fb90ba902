"""mhfast.energy / mhfast.score: equal to a direct PLL implementation, to the sampler's energies, chunked.

The direct implementation below is the textbook method (what mlm-scoring and minicons do): one copy
of the sequence per scored position with that position (and, for minicons' ``within_word_l2r``,
the later pieces of its word) masked, a FULL forward with the LM head at every position, then
log-softmax and the target's entry. mhfast goes another way (masked_copies op, the head only at
the masked position, gather_energies op), so agreement is a real check.
"""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

import mhfast
from hf_tiny_models import BERT_IDS, save_tiny_bert_dir, tiny_model, wordpiece_tokenizer
from mhfast.models.hf import HFMaskedLM
from mhfast.models.tabular import TabularMLM
from mhfast.scoring.api import compute_terms, energy_positions

SPECIAL = set(BERT_IDS["special_ids"])


def direct_terms(hf_model, ids: list[int], word_ids: list[int] | None = None) -> tuple[list[float], list[float]]:
    """(-logit, -log p) of every non-special token: mask it (and later same-word pieces), full forward."""
    raws, locals_ = [], []
    for t, target in enumerate(ids):
        if target in SPECIAL:
            continue
        row = list(ids)
        row[t] = BERT_IDS["mask_id"]
        if word_ids is not None and word_ids[t] >= 0:
            row = [BERT_IDS["mask_id"] if (j > t and word_ids[j] == word_ids[t]) else x for j, x in enumerate(row)]
        with torch.no_grad():
            logits = hf_model(input_ids=torch.tensor([row])).logits[0, t].double()
        raws.append(-float(logits[target]))
        locals_.append(-float(logits.log_softmax(-1)[target]))
    return raws, locals_


@pytest.fixture(scope="module")
def bert():
    model = tiny_model("bert", seed=3)
    return model, HFMaskedLM(model, **BERT_IDS)


SEQS = [[2, 5, 6, 7, 8, 3], [2, 9, 10, 3], [2, 11, 5, 5, 6, 7, 8, 9, 3]]


def test_energy_equals_the_direct_pll_on_a_ragged_batch(bert):
    model, lm = bert
    e = mhfast.energy(lm, SEQS, per_position=True)
    e_raw, e_local = e  # a named tuple
    for b, seq in enumerate(SEQS):
        raws, locals_ = direct_terms(model, seq)
        assert abs(float(e_raw[b]) - sum(raws)) < 1e-4
        assert abs(float(e_local[b]) - sum(locals_)) < 1e-4
        scored = e.local_terms[b, :len(seq)][torch.tensor([i not in SPECIAL for i in seq])]
        assert torch.allclose(scored.double(), torch.tensor(locals_, dtype=torch.float64), atol=1e-4)
        assert float(e.raw_terms[b, 0]) == 0.0 and float(e.local_terms[b, len(seq) - 1]) == 0.0  # CLS/SEP


def test_within_word_l2r_equals_minicons_definition(bert):
    model, lm = bert
    rows = mhfast.scoring.api.pad_sequences(SEQS, 0)
    words = torch.tensor([[-1, 0, 0, 0, 1, -1, -1, -1, -1], [-1, 0, 1, -1] + [-1] * 5,
                          [-1, 0, 0, 1, 2, 2, 3, 3, -1]])
    raw, local = compute_terms(lm, rows, energy_positions(lm, rows), word_ids=words, backend="reference")
    plain = compute_terms(lm, rows, energy_positions(lm, rows))[1]
    for b, seq in enumerate(SEQS):
        _, want = direct_terms(model, seq, words[b, :len(seq)].tolist())
        assert abs(float(local[b].sum()) - sum(want)) < 1e-4
    assert not torch.allclose(local, plain)  # the variant does change multi-piece words


@pytest.mark.parametrize("backend", ["compiled", "reference"])
def test_energy_equals_what_sample_reports_tabular(backend):
    model = TabularMLM.random(num_tokens=3, length=[3, 4], seed=1, features=True)
    init = torch.tensor([[0, 1, 2, 0], [2, 2, 1, model.pad_id]])
    res = mhfast.sample(model, init=init, chains=3, epochs=3, burn_in=1, seed=4, backend=backend)
    states = res.tokens.reshape(-1, 4)
    e = mhfast.energy(model, states, backend=backend)
    assert torch.equal(e.e_raw, res.energy_raw.reshape(-1))
    assert torch.equal(e.e_local, res.energy_local.reshape(-1))


def test_energy_equals_what_sample_reports_hf(bert):
    _, lm = bert
    init = mhfast.scoring.api.pad_sequences(SEQS[:2], 0)
    res = mhfast.sample(lm, init=init, chains=2, epochs=2, burn_in=1, seed=0)
    e = mhfast.energy(lm, res.tokens.reshape(-1, init.shape[1]))
    assert torch.allclose(e.e_raw, res.energy_raw.reshape(-1), atol=1e-4)
    assert torch.allclose(e.e_local, res.energy_local.reshape(-1), atol=1e-4)


class CountingModel:
    """Delegates to ``inner`` and records the [rows, width] of every forward."""

    def __init__(self, inner):
        self.inner, self.shapes = inner, []
        for a in ("vocab_size", "mask_id", "pad_id", "special_ids"):
            setattr(self, a, getattr(inner, a))

    def masked_logits(self, tokens, positions, context=None, context_index=None):
        self.shapes.append(tuple(tokens.shape))
        return self.inner.masked_logits(tokens, positions)


def test_masked_copies_are_chunked_to_the_token_budget(bert):
    _, lm = bert
    long_seq = [[2] + [5 + (i * 7) % 7 for i in range(30)] + [3], SEQS[1]]
    full = mhfast.energy(lm, long_seq)
    counting = CountingModel(lm)
    small = mhfast.energy(counting, long_seq, max_tokens_per_batch=64)
    assert all(rows * width <= 64 for rows, width in counting.shapes) and len(counting.shapes) >= 15
    assert max(w for _, w in counting.shapes) == 32 and min(w for _, w in counting.shapes) == 4  # cut per chunk
    assert torch.allclose(small.e_local, full.e_local, atol=1e-4)
    assert torch.allclose(small.e_raw, full.e_raw, atol=1e-4)
    # numpy's int is taken as mhfast.sample takes it (energy had refused it: "must be an int ..., got np.int64(64)")
    shapes = list(counting.shapes)
    same = mhfast.energy(counting, long_seq, max_tokens_per_batch=np.int64(64))
    assert counting.shapes[len(shapes):] == shapes and torch.equal(same.e_local, small.e_local)


def test_auto_budget_is_at_least_one_row():
    from mhfast.scoring.budget import auto_max_tokens

    assert auto_max_tokens(None, "cpu", 512) >= 512
    assert auto_max_tokens(None, "cpu", 8) <= 65536


def test_budget_reads_the_width_the_sampler_reads(bert, cmlm):
    """The memory budget and the sampler's sub-batches size by one reading of d (HF config, fairseq decoder)."""
    from mhfast.models.base import model_width
    from mhfast.scoring.budget import _dims

    _, lm = bert
    assert _dims(lm)[0] == model_width(lm) == lm.model.config.hidden_size
    assert _dims(cmlm)[0] == model_width(cmlm) == cmlm.model.decoder.embed_dim  # was the 1024 guess
    assert _dims(None)[0] == 1024 and model_width(None) is None


def test_free_positions_restrict_the_sum(bert):
    _, lm = bert
    rows = torch.tensor([SEQS[0]])
    free = torch.zeros_like(rows, dtype=torch.bool)
    free[0, 2:4] = True
    e = mhfast.energy(lm, rows, free_positions=free, per_position=True)
    whole = mhfast.energy(lm, rows, per_position=True)
    assert torch.allclose(e.e_local, whole.local_terms[0, 2:4].sum()[None], atol=1e-5)
    assert mhfast.energy(lm, rows, energy="raw").e_local is None


def test_a_plain_transformers_object_is_wrapped(tmp_path):
    import transformers

    path = save_tiny_bert_dir(tmp_path / "bert", seed=5)
    obj = transformers.AutoModelForMaskedLM.from_pretrained(path)  # tokenizer found via name_or_path
    a = mhfast.energy(obj, [SEQS[0]])
    b = mhfast.energy(path, [SEQS[0]])
    assert torch.allclose(a.e_local, b.e_local, atol=1e-5)
    with pytest.raises(ValueError, match="mask_id"):
        mhfast.energy(tiny_model("bert"), [SEQS[0]])  # bare random object: no tokenizer, no [MASK] id


@pytest.mark.parametrize("kwargs, match", [
    (dict(tokens=[[2, 4, 3]]), "mask_id"),
    (dict(tokens=[[2, 99, 3]]), "outside the vocabulary"),
    (dict(tokens=torch.tensor([[2, 0, 5]])), "padded at the end"),
    (dict(tokens=[[2, 5, 3]], energy="pll"), "energy"),
    (dict(tokens=[[2, 5, 3]], max_tokens_per_batch=0), "max_tokens_per_batch"),
    (dict(tokens=[[2, 5, 3]], free_positions=torch.tensor([[True, False, False]])), "free_positions"),
    (dict(tokens=[[2, 5, 3]], source=["x"]), "source"),
    # uint8 is an integer type: the message had said "must be an integer tensor, got torch.uint8"
    (dict(tokens=torch.tensor([[2, 5, 3]], dtype=torch.uint8)), r"tokens must be an int64 or int32 tensor, got "
                                                                 r"torch\.uint8"),
    (dict(tokens=[torch.tensor([2, 5, 3], dtype=torch.int16)]), r"tokens\[0\] must be a 1-D int64 or int32 tensor"),
])
def test_bad_arguments_name_the_argument(bert, kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        mhfast.energy(bert[1], **kwargs)


# (TabularMLM.random(3, 4): vocabulary 5, mask_id 3, pad_id 4)
@pytest.mark.parametrize("rows, words", [
    ([[0, 7, 1, 2]], "contains token id 7, outside the vocabulary [0, 5)"),
    ([[0, 4, 1, 2]], "must be padded at the end of each row (pad_id=4 followed by a token)"),
    ([[0, 1, 2, 0], [4, 4, 4, 4]], "has a row of length 0 (only padding)"),
])
def test_sampling_and_scoring_refuse_the_same_rows_in_the_same_words(rows, words):
    """problem.checked_padding serves mhfast.sample's inputs, its per-chain starts and mhfast.energy's tokens: each
    refuses these rows with the same words after its own prefix."""
    model = TabularMLM.random(3, 4, seed=0)
    rows = torch.tensor(rows)
    with pytest.raises(ValueError, match="^" + re.escape(f"mhfast.sample: init {words}") + "$"):
        mhfast.sample(model, init=rows, epochs=1, burn_in=0)
    good = torch.zeros_like(rows)  # (chain 0 builds the problem; chain 1's row is checked against it)
    with pytest.raises(ValueError, match="^" + re.escape(f"mhfast.sample: init {words}") + "$"):
        mhfast.sample(model, init=torch.stack([good, rows], 1), chains=2, epochs=1, burn_in=0)
    with pytest.raises(ValueError, match="^" + re.escape(f"mhfast.energy: tokens {words}") + "$"):
        mhfast.energy(model, tokens=rows)


def test_score_words_and_pseudo_perplexity():
    """Word pieces from a fast tokenizer's word_ids(); word scores sum their pieces; PPPL definitions."""
    tok = wordpiece_tokenizer()
    model = tiny_model("bert", seed=2)
    lm = HFMaskedLM(model, tok)
    for metric in ("original", "within_word_l2r"):
        s = mhfast.score(lm, ["ab ca d", ""], metric=metric)
        one = s[0]
        assert one.tokens == ["a", "##b", "c", "##a", "d"] and one.words == ["ab", "ca", "d"]
        ids = tok("ab ca d")["input_ids"]
        words = [-1 if w is None else w for w in tok("ab ca d").word_ids()]
        _, want = direct_terms(model, ids, words if metric == "within_word_l2r" else None)
        assert [round(x, 4) for x in one.token_scores] == [round(-x, 4) for x in want]
        assert abs(one.pll - sum(one.token_scores)) < 1e-5
        assert one.word_scores[0] == pytest.approx(one.token_scores[0] + one.token_scores[1], abs=1e-6)
        assert one.pppl == pytest.approx(math.exp(-one.pll / 5)) and one.pppl_word == pytest.approx(
            math.exp(-one.pll / 3))
        assert s[1].num_tokens == 0 and math.isnan(s[1].pppl)
    assert mhfast.scoring.corpus_pppl(s) == pytest.approx(s[0].pppl)


def test_hub_ids_resolve_through_the_cache(tmp_path, monkeypatch):
    from huggingface_hub import constants

    from mhfast.models.loading import load_masked_lm

    cache = tmp_path / "hub"
    snap = cache / "models--someorg--tiny-bert" / "snapshots" / ("0" * 40)
    save_tiny_bert_dir(snap, seed=1)
    (cache / "models--someorg--tiny-bert" / "refs").mkdir()
    (cache / "models--someorg--tiny-bert" / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    lm = load_masked_lm("someorg/tiny-bert")
    assert lm.mask_id == 4 and lm.tokenizer is not None
    e = mhfast.energy("someorg/tiny-bert", [SEQS[0]])
    assert torch.allclose(e.e_local, mhfast.energy(str(snap), [SEQS[0]]).e_local)
    with pytest.raises(FileNotFoundError, match="not in the HuggingFace cache.*HF_HUB_OFFLINE"):
        load_masked_lm("someorg/not-there")


@pytest.mark.parametrize("kind", ["bert", "roberta"])
def test_last_layer_fast_path_equals_the_full_layer(kind):
    from hf_tiny_models import ids_for

    from mhfast.models.fast_forward import LastLayerAtMask, fast_forward_model as fast_scoring_model

    ids = ids_for(kind)
    lm = HFMaskedLM(tiny_model(kind, seed=4), **ids)
    fast = fast_scoring_model(lm)
    assert isinstance(fast, LastLayerAtMask)
    p, b, e = ids["pad_id"], ids["bos_id"], ids["eos_id"]
    rows = torch.tensor([[b, 5, 6, 7, 8, e], [b, 9, 10, e, p, p], [b, 11, 5, e, p, p]])
    pos = torch.tensor([2, 1, 2])
    rows[torch.arange(3), pos] = ids["mask_id"]
    assert torch.allclose(fast.masked_logits(rows, pos), lm.masked_logits(rows, pos), atol=1e-4)
    assert fast_scoring_model(HFMaskedLM(tiny_model("distilbert"), **BERT_IDS)).__class__ is HFMaskedLM


def test_a_float64_model_is_refused_naming_it_before_any_work():
    """The ops take float32/float16/bfloat16 outputs: a float64 model was accepted and every call then failed in
    the first op (``mhfast.gather_energies: logits must be Float ...``, naming no argument of the caller)."""
    lm = HFMaskedLM(tiny_model("bert", seed=3), dtype=torch.float64, **BERT_IDS)
    for call, where in ((lambda: mhfast.energy(lm, [[2, 5, 6, 3]]), "mhfast.energy"),
                        (lambda: mhfast.score(lm, [[2, 5, 6, 3]]), "mhfast.score"),
                        (lambda: mhfast.sample(lm, 4, chains=1, epochs=1, burn_in=0), "mhfast.sample")):
        with pytest.raises(ValueError, match=f"^{where}: model is float64"):
            call()


class _UserModel:
    """A user's model of the protocol, uniform conditionals; its ids set per test."""
    vocab_size, mask_id, pad_id, special_ids = 5, 4, 0, (4, 0)

    def masked_logits(self, tokens, positions, context=None, context_index=None):
        return torch.zeros(tokens.shape[0], self.vocab_size)


@pytest.mark.parametrize("attr, value, error, message", [
    ("mask_id", None, TypeError, "model.mask_id must be an int, got None"),
    ("pad_id", None, TypeError, "model.pad_id must be an int, got None"),
    ("vocab_size", 2.5, TypeError, "model.vocab_size must be an int, got 2.5"),
    ("mask_id", True, TypeError, "model.mask_id must be an int, got True"),
    ("special_ids", None, TypeError, "model.special_ids must be a sequence of ints, got None"),
    ("special_ids", (1, "x"), TypeError, "model.special_ids must be an int, got 'x'"),
    ("mask_id", 7, ValueError, r"model.mask_id \(7\) lies outside the vocabulary \[0, 5\)"),
    ("pad_id", -1, ValueError, r"model.pad_id \(-1\) lies outside the vocabulary \[0, 5\)"),
    ("vocab_size", 0, ValueError, "model.vocab_size must be >= 1, got 0"),
    ("special_ids", torch.tensor(4), TypeError, "model.special_ids must be a sequence of ints"),
])
def test_a_user_models_ids_are_checked_naming_the_attribute(attr, value, error, message):
    """Before 2026-12-01 a None id failed in a bare ``int()`` naming nothing, a mask id outside the vocabulary was
    handed to the model (``mhfast.energy`` returned), and a pad id of -1 was accepted."""
    model = _UserModel()
    setattr(model, attr, value)
    for call, where in ((lambda: mhfast.energy(model, [[1, 2, 3]]), "mhfast.energy"),
                        (lambda: mhfast.score(model, [[1, 2, 3]]), "mhfast.score"),
                        (lambda: mhfast.sample(model, 3, chains=1, epochs=1, burn_in=0), "mhfast.sample")):
        with pytest.raises(error, match=f"^{where}: {message}"):
            call()


def test_a_pad_id_equal_to_the_mask_id_is_refused_for_sampling_only():
    """Sampling: the all-masked start read as padding ("init has a row of length 0"), so it is refused naming both
    ids. Scoring complete sequences (no mask in them) works as before."""
    model = _UserModel()
    model.pad_id = 4
    with pytest.raises(ValueError, match=r"^mhfast.sample: model.pad_id equals model.mask_id \(4\): a masked "
                                         "position would read as padding"):
        mhfast.sample(model, 3, chains=1, epochs=1, burn_in=0)
    assert mhfast.energy(model, [[1, 2, 3]]).e_local.shape == (1,)
    assert len(mhfast.score(model, [[1, 2, 3]])) == 1


def test_a_user_model_may_give_numpy_ids_and_special_ids_past_the_vocabulary():
    """What the protocol allows stays allowed: numpy ints, and special ids the model cannot emit."""
    import numpy as np

    model = _UserModel()
    model.mask_id, model.pad_id = np.int64(4), np.int64(0)
    model.special_ids = [4, 0, 9]
    assert mhfast.energy(model, [[1, 2, 3]]).e_local.shape == (1,)
    assert mhfast.sample(model, 3, chains=1, epochs=1, burn_in=0, seed=0).tokens.shape[-1] == 3


def test_energies_replace_keeps_the_extra_fields():
    model = TabularMLM.random(num_tokens=3, length=3, seed=0)
    e = mhfast.energy(model, torch.tensor([[0, 1, 2]]), per_position=True)
    r = e._replace(e_raw=None)
    assert r.e_raw is None and torch.equal(r.raw_terms, e.raw_terms) and torch.equal(r.local_terms, e.local_terms)
    assert e._replace(terms=torch.ones(1, 1)).terms.shape == (1, 1)
    with pytest.raises(ValueError, match="unknown field"):
        e._replace(e_total=1)


@pytest.mark.parametrize("metric", ["original", "within_word_l2r"])
def test_every_chunk_budget_gives_the_unchunked_scores(metric):
    """Budgets at and around each row width, the total and odd values: a chunk loop that stopped one position
    short (the shortest row's last one, alone in the last chunk at these budgets) changed E_local by 2.8 nats
    unnoticed: the chunking test above used one budget."""
    tok = wordpiece_tokenizer()
    lm = HFMaskedLM(tiny_model("bert", seed=2), tok)
    texts = ["ab ca d", "d", "c ab ba cc d a"]  # widths 7, 3, 11 with [CLS]/[SEP]: 13 scored positions
    whole = mhfast.score(lm, texts, metric=metric, max_tokens_per_batch=10 ** 6)
    for budget in (1, 2, 3, 4, 6, 7, 8, 10, 11, 12, 13, 14, 33, 77, 143):
        got = mhfast.score(lm, texts, metric=metric, max_tokens_per_batch=budget)
        for g, w in zip(got, whole):
            assert g.num_tokens == w.num_tokens
            assert g.token_scores == pytest.approx(w.token_scores, abs=1e-5), budget
            assert g.e_raw == pytest.approx(w.e_raw, abs=1e-4), budget


def test_corpus_pseudo_perplexity_pools_the_sums_not_the_sequences():
    """``exp(-sum PLL / sum N)`` per token and per word, over sequences of different lengths whose words are not
    their tokens (the only test pooled one sequence with an empty one: per-sequence means, or the token count for
    the word count, passed it)."""
    tok = wordpiece_tokenizer()
    s = mhfast.score(HFMaskedLM(tiny_model("bert", seed=2), tok), ["ab ca d", "d", "c ab ba cc"])
    assert [x.num_tokens for x in s] == [5, 1, 7] and [x.num_words for x in s] == [3, 1, 4]
    pll = sum(x.pll for x in s)
    assert mhfast.scoring.corpus_pppl(s) == pytest.approx(math.exp(-pll / 13), rel=1e-9)
    assert mhfast.scoring.corpus_pppl(s, per="word") == pytest.approx(math.exp(-pll / 8), rel=1e-9)
    with pytest.raises(ValueError, match="per: must be 'token' or 'word'"):
        mhfast.scoring.corpus_pppl(s, per="sequence")


def test_a_word_the_tokenizer_does_not_know_is_no_word():
    """An out-of-vocabulary word is one [UNK] piece, which is not scored (a special token): it is no word either,
    so the word count, the word scores and the per-word pseudo-perplexity skip it (it was a word scoring 0)."""
    tok = wordpiece_tokenizer()
    one = mhfast.score(HFMaskedLM(tiny_model("bert", seed=2), tok), ["ab x d"])[0]
    assert tok("ab x d")["input_ids"][3] == 1  # x is [UNK]
    assert one.tokens == ["a", "##b", "d"] and one.words == ["ab", "d"] and one.num_words == 2
    assert one.word_scores == pytest.approx([one.token_scores[0] + one.token_scores[1], one.token_scores[2]])
    assert one.pppl_word == pytest.approx(math.exp(-one.pll / 2))


def test_a_sequence_with_no_scored_token_scores_positive_zero(bert):
    """A sum of no terms is 0.0, not -0.0 (which printed as -0.0 in the command's JSONL), like an empty text's."""
    _, lm = bert
    for s in mhfast.score(lm, [[2, 3], ""]):
        assert (s.pll, s.e_raw, s.num_tokens) == (0.0, 0.0, 0)
        assert math.copysign(1.0, s.pll) == math.copysign(1.0, s.e_raw) == 1.0


@pytest.mark.parametrize("device, share", [("cpu", 4), ("cuda", 2)])
def test_the_memory_budget_follows_its_documented_formula(monkeypatch, device, share):
    """auto_max_tokens = the usable memory (a quarter of the available CPU memory, half of the free GPU memory)
    over the estimated bytes per token, clamped to [T, 65536]; only the clamps were tested, so a budget from half
    the CPU memory or one without the logits' share passed."""
    import mhfast.sampler.problem as problem
    from mhfast.scoring.budget import auto_max_tokens

    class Model:  # no config: 1024 hidden, 16 heads
        vocab_size = 30522

    monkeypatch.setattr(problem, "available_memory", lambda dev: 8 << 30)
    for T in (16, 128, 512):
        per_token = 4 * (12 * 1024 + 2 * 16 * T) + (3 * 4 * 30522) // T
        want = max(T, min(65536, (8 << 30) // share // per_token))
        assert auto_max_tokens(Model(), device, T) == want, T
    monkeypatch.setattr(problem, "available_memory", lambda dev: 1 << 20)
    assert auto_max_tokens(Model(), device, 300) == 300  # at least one row
    monkeypatch.setattr(problem, "available_memory", lambda dev: 1 << 50)
    assert auto_max_tokens(Model(), device, 300) == 65536


def test_a_chunk_of_short_rows_keeps_its_logits_within_the_memory_budget():
    """Every masked copy has its own V-wide logits, and a chunk of narrow rows holds many of them: the budget had
    sized the logits' share for the longest row, and one 128-token row beside 400 of width 3 put 291 rows of
    250,002 logits (278 MiB) in one forward of a 64 MiB budget. Now the rows of one forward fit, and the energies
    are those of each row scored alone."""
    from mhfast.scoring.budget import auto_max_tokens, fixed_memory

    class BigVocab:  # a masked_logits adapter of XLM-R's vocabulary and width
        vocab_size, mask_id, pad_id, special_ids, width = 250002, 3, 1, (0, 1, 2, 3), 768

        def __init__(self):
            self.peak_rows, self.shapes = 0, []

        def masked_logits(self, tokens, positions):
            self.peak_rows = max(self.peak_rows, tokens.shape[0])
            self.shapes.append(tuple(tokens.shape))
            return torch.zeros(tokens.shape[0], self.vocab_size).index_fill_(1, torch.tensor([5, 7]), 1.0)

    memory = 64 << 20
    model = BigVocab()
    long_row, short = [0] + [5] * 126 + [2], [[0, 7, 2]] * 400
    with fixed_memory(memory):
        e = mhfast.energy(model, [long_row] + short, backend="reference")
        wide = auto_max_tokens(model, "cpu", 128) // 128
    assert model.peak_rows * model.vocab_size * 4 <= memory, model.peak_rows
    # each chunk sized for its own width: the long row's are not shrunk to the short rows' (a review: sizing all
    # for the narrowest had cut 128-wide chunks of XLM-R from about 59k tokens to 4k)
    assert model.shapes[0] == (wide, 128) and wide > 1
    alone = mhfast.energy(BigVocab(), short[:1], backend="reference")
    assert torch.equal(e.e_local[1:], alone.e_local.expand(400))


def test_energy_of_a_translator_encodes_raw_sources_as_it_translates(bundled):
    """mhfast.energy takes the Translator as mhfast.score does: a raw source sentence is encoded by its SentencePiece
    model, so the energy is the one given the translator's own source ids, and -e_local is score's PLL. The CMLM
    alone, without a tokenizer, looks the words up as they are ("Ein Hund läuft." became three <unk>: -E_local
    -12.95 for -1.99); the Translator's own CMLM has its tokenizer since 2026-12-02, so raw text given to it is
    encoded as the Translator encodes it."""
    import copy

    target = "A dog runs."
    first = mhfast.score(bundled, [target], sources=["Ein Hund läuft."])[0]
    ids = bundled.target_ids(target)[None]
    by_translator = mhfast.energy(bundled, ids, source=["Ein Hund läuft."])
    by_ids = mhfast.energy(bundled.cmlm, ids, source=[bundled.source_ids("Ein Hund läuft.")])
    assert torch.equal(by_translator.e_local, by_ids.e_local) and torch.equal(by_translator.e_raw, by_ids.e_raw)
    assert -float(by_translator.e_local[0]) == pytest.approx(first.pll, abs=1e-4)
    by_cmlm = mhfast.energy(bundled.cmlm, ids, source=["Ein Hund läuft."])
    assert torch.equal(by_cmlm.e_local, by_ids.e_local)
    bare = copy.copy(bundled.cmlm)
    bare.tokenizer = None
    unk = bare.src_dict.unk()
    assert (bare.source_ids("Ein Hund läuft.") == unk).sum() >= 2  # what a CMLM without a tokenizer makes of it
    assert -float(mhfast.energy(bare, ids, source=["Ein Hund läuft."]).e_local[0]) < first.pll - 1


def test_each_target_is_scored_with_its_own_source_around_empty_targets(bundled):
    """Empty targets are left out of the scored batch: the others keep their own sources (a source taken by the
    target's place among the non-empty ones scored "A dog runs." against "Zwei Katzen.", -22.2 for -2.0)."""
    targets = ["", "A dog runs.", "", "Two men.", "A cat sleeps."]
    sources = ["Zwei Katzen.", "Ein Hund läuft.", "Ein Mann.", "Zwei Männer.", "Eine Katze schläft."]
    batch = mhfast.score(bundled, targets, sources=sources)
    for k in (1, 3, 4):
        alone = mhfast.score(bundled, [targets[k]], sources=[sources[k]])[0]
        assert batch[k].pll == pytest.approx(alone.pll, abs=1e-4) and batch[k].tokens == alone.tokens
    assert batch[0].num_tokens == batch[2].num_tokens == 0
