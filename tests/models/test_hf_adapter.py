"""HFMaskedLM on tiny random transformers models: the head split equals the full forward,
padding is invisible, the fallback path, loading from a directory, frame(), and bad input."""
from __future__ import annotations

import re

import threading
import warnings

import pytest
import torch

import mhfast
from hf_tiny_models import BERT_IDS, VOCAB, WORDS, ids_for, save_tiny_bert_dir, tiny_model
from mhfast.models import hf
from mhfast.models.base import FeatureMaskedLM, MaskedLM, has_features
from mhfast.models.hf import HFMaskedLM
from mhfast.models.loading import load_masked_lm

KINDS = ["bert", "roberta", "distilbert", "electra", "albert", "esm"]
ATOL = 1e-5  # fp32 (with rtol 1e-5): head-only vs full forward differ only by float rounding (batching, masks)


def random_rows(kind: str, n: int, length: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """n rows [bos] w_1..w_length [eos] of random words, each masked at one random word position."""
    g = torch.Generator().manual_seed(seed)
    ids = ids_for(kind)
    words = torch.tensor(WORDS)[torch.randint(len(WORDS), (n, length), generator=g)]
    rows = torch.cat([torch.full((n, 1), ids["bos_id"]), words, torch.full((n, 1), ids["eos_id"])], dim=1)
    positions = torch.randint(1, length + 1, (n,), generator=g)
    rows[torch.arange(n), positions] = ids["mask_id"]
    return rows, positions


def full_forward(model, rows: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=rows).logits[torch.arange(rows.shape[0]), positions]


@pytest.mark.parametrize("kind", KINDS)
def test_head_split_equals_full_forward(kind):
    model = tiny_model(kind)
    lm = HFMaskedLM(model, **ids_for(kind))
    assert has_features(lm) and isinstance(lm, FeatureMaskedLM)
    rows, positions = random_rows(kind, 9, 7)
    expected = full_forward(model, rows, positions)
    features = lm.masked_features(rows, positions)
    assert features.shape == (9, 16)
    torch.testing.assert_close(lm.output_layer(features), expected, rtol=1e-5, atol=ATOL)
    torch.testing.assert_close(lm.masked_logits(rows, positions), expected, rtol=1e-5, atol=ATOL)
    assert lm.vocab_size == 12


@pytest.mark.parametrize("kind", KINDS)
def test_padded_rows_score_like_unpadded(kind):
    model = tiny_model(kind)
    lm = HFMaskedLM(model, **ids_for(kind))
    pad = ids_for(kind)["pad_id"]
    lengths = [3, 8, 5, 1]
    parts = [random_rows(kind, 2, L, seed=L) for L in lengths]
    T = max(lengths) + 2
    rows = torch.cat([torch.nn.functional.pad(r, (0, T - r.shape[1]), value=pad) for r, _ in parts])
    positions = torch.cat([p for _, p in parts])
    expected = torch.cat([full_forward(model, r, p) for r, p in parts])  # each length alone, no padding
    torch.testing.assert_close(lm.masked_logits(rows, positions), expected, rtol=1e-5, atol=ATOL)
    # All rows shorter than T: the all-pad columns are dropped, the result must not change.
    extra = torch.nn.functional.pad(rows, (0, 4), value=pad)
    torch.testing.assert_close(lm.masked_logits(extra, positions), expected, rtol=1e-5, atol=ATOL)


@pytest.mark.parametrize("kind", KINDS)
def test_static_inputs_give_the_dynamic_logits_on_padded_rows(kind):
    """Under static_inputs (every sampling epoch on a GPU, and capture=) the adapter builds its attention mask
    without reading the rows on the host: with pads and without, full and fast forward, its logits are the
    dynamic path's. No CPU test compared the two (the padded one ran on the meta device only), so a static path
    with no padding mask passed: logits off by 9, capture="static" chains with other tokens."""
    from mhfast.models.fast_forward import fast_forward_model

    lm = HFMaskedLM(tiny_model(kind), **ids_for(kind))
    pad = ids_for(kind)["pad_id"]
    parts = [random_rows(kind, 2, L, seed=L) for L in (6, 2, 4)]
    padded = torch.cat([torch.nn.functional.pad(r, (0, 8 - r.shape[1]), value=pad) for r, _ in parts])
    positions = torch.cat([p for _, p in parts])
    full, full_pos = random_rows(kind, 5, 6, seed=9)
    for model in (lm, fast_forward_model(lm)):
        for rows, p, has_pad in ((padded, positions, True), (full, full_pos, False)):
            want = model.masked_logits(rows, p)
            with lm.static_inputs(has_pad):
                got = model.masked_logits(rows, p)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=ATOL)


def _while_another_thread_is_static(lm, call):
    """``call()`` in this thread while another thread holds ``lm.static_inputs(False)`` (a sampler's run)."""
    inside, done = threading.Event(), threading.Event()

    def run():
        with lm.static_inputs(False):
            inside.set()
            done.wait(30)
    t = threading.Thread(target=run)
    t.start()
    try:
        assert inside.wait(30)
        return call()
    finally:
        done.set()
        t.join()


def test_static_inputs_hold_for_the_calling_thread_only(tmp_path):
    """One flag per adapter for every thread had let another thread's call, during a sampler's static run on the
    same model, take that run's word that no row holds a pad: its padded rows were read unpadded (logits off by
    9.24 on the tiny BERT, 0.286 on the fairseq RoBERTa). A thread's flag is its own."""
    from fairseq_tiny_mlm import build
    from mhfast.models.fairseq_mlm import load_fairseq_mlm

    bert = HFMaskedLM(tiny_model("bert"), **ids_for("bert"))
    rows, pos = torch.tensor([[2, 5, 4, 7, 3, 0, 0, 0], [2, 4, 6, 7, 8, 9, 10, 3]]), torch.tensor([2, 1])
    f = load_fairseq_mlm(build(str(tmp_path)))
    frows = torch.tensor([[f.bos_id, 5, f.mask_id, 6, f.eos_id, f.pad_id, f.pad_id],
                          [f.bos_id, f.mask_id, 6, 7, 8, 9, f.eos_id]])
    for lm, r in ((bert, rows), (f, frows)):
        want = lm.masked_logits(r, pos)
        got = _while_another_thread_is_static(lm, lambda: lm.masked_logits(r, pos))
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        assert lm._static_inputs is None  # (and nothing left behind in this thread)


def test_the_at_hooks_read_nothing_on_the_host_inside_static_inputs(monkeypatch):
    """masked_logits_at / masked_features_at checked their read indices (two host reads, row_index's min and max)
    even inside static_inputs, where the caller vouches for them: the fairseq adapter skipped them there."""
    lm = HFMaskedLM(tiny_model("bert"), **ids_for("bert"))
    calls = []
    monkeypatch.setattr(hf, "check_reads", lambda *a, **k: calls.append(a))
    rows, row_index, pos = torch.tensor([[2, 5, 4, 7, 3]]), torch.tensor([0, 0]), torch.tensor([1, 2])
    lm.masked_logits_at(rows, row_index, pos)
    assert len(calls) == 1
    with lm.static_inputs(False):
        lm.masked_logits_at(rows, row_index, pos)
    assert len(calls) == 1


def test_static_step_on_padded_inputs_gives_the_dynamic_chains():
    """capture="static" on an HF model with inputs of different lengths (padded rows): the same chains as the
    default step."""
    lm = HFMaskedLM(tiny_model("bert", seed=1), **BERT_IDS)
    init = torch.nn.utils.rnn.pad_sequence([torch.tensor([2, 5, 6, 7, 8, 9, 3]), torch.tensor([2, 5, 6, 3])],
                                           batch_first=True, padding_value=BERT_IDS["pad_id"])
    common = dict(init=init, chains=3, epochs=3, burn_in=0, seed=1, energy="local")
    a, b = mhfast.sample(lm, **common), mhfast.sample(lm, capture="static", **common)
    assert float(a.novel_rate.mean()) > 0 and torch.equal(a.tokens, b.tokens)
    torch.testing.assert_close(a.energy_local, b.energy_local, rtol=1e-5, atol=1e-4)


def test_a_half_precision_checkpoint_loads_in_float32(tmp_path):
    """transformers 5 loads a checkpoint saved in fp16 in fp16 ("auto"): the sampler's dtype=None / "float32" then
    forwarded in half precision, even on a CPU. A directory loads in float32; dtype= still casts."""
    import transformers

    d = save_tiny_bert_dir(tmp_path / "bert")
    transformers.AutoModelForMaskedLM.from_pretrained(d).half().save_pretrained(d)
    assert load_masked_lm(d).dtype == torch.float32
    assert HFMaskedLM(d, dtype=torch.bfloat16).dtype == torch.bfloat16


def test_a_directory_without_tokenizer_files_warns_that_its_specials_are_the_configs(tmp_path):
    """An ESM config names only pad and mask: such a directory without tokenizer files loaded silently with <cls>
    and <unk> proposable and a frame without BOS (a BERT's fails: its config names no mask)."""
    import transformers

    cfg = transformers.EsmConfig(vocab_size=33, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=32, pad_token_id=1, mask_token_id=32,
                                 position_embedding_type="rotary")
    transformers.EsmForMaskedLM(cfg).save_pretrained(tmp_path / "esm")
    with pytest.warns(UserWarning, match=r"has no tokenizer files: the special tokens are only those its config"):
        lm = load_masked_lm(str(tmp_path / "esm"))
    assert lm.special_ids == (1, 2, 32)  # (pad, eos from the config, mask)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # special_ids given: nothing to say
        HFMaskedLM(str(tmp_path / "esm"), special_ids=(0, 1, 2, 3, 31, 32))


def test_unknown_architecture_falls_back_to_full_forward(monkeypatch):
    monkeypatch.delitem(hf._HEADS, "BertForMaskedLM")
    model = tiny_model("bert")
    with pytest.warns(UserWarning, match="full forward"):
        lm = HFMaskedLM(model, **BERT_IDS)
    assert not has_features(lm) and isinstance(lm, MaskedLM)
    rows, positions = random_rows("bert", 6, 5)
    padded = torch.nn.functional.pad(rows, (0, 3), value=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the warning is one-time: none per call
        torch.testing.assert_close(lm.masked_logits(padded, positions), full_forward(model, rows, positions),
                                   rtol=1e-5, atol=ATOL)


def test_subclass_of_supported_class_uses_the_head_split():
    import transformers

    class MyBert(transformers.BertForMaskedLM):
        pass

    model = MyBert(tiny_model("bert").config).eval()
    lm = HFMaskedLM(model, **BERT_IDS)
    assert has_features(lm)
    rows, positions = random_rows("bert", 4, 6)
    torch.testing.assert_close(lm.masked_logits(rows, positions), full_forward(model, rows, positions),
                               rtol=1e-5, atol=ATOL)


def test_load_from_directory_with_tokenizer(tmp_path):
    path = save_tiny_bert_dir(tmp_path / "tiny")
    lm = load_masked_lm(str(path))
    assert isinstance(lm, HFMaskedLM)
    assert (lm.mask_id, lm.pad_id, lm.bos_id, lm.eos_id) == (4, 0, 2, 3)
    assert lm.special_ids == (0, 1, 2, 3, 4)
    ids = lm.encode("a b c")
    assert ids.tolist() == [2, 5, 6, 7, 3] and lm.decode(ids) == "a b c"
    rows, positions = random_rows("bert", 5, 4)
    torch.testing.assert_close(lm.masked_logits(rows, positions), full_forward(tiny_model("bert"), rows, positions),
                               rtol=1e-5, atol=ATOL)


def test_ids_that_are_no_ordinary_token_of_the_tokenizer_are_never_proposed(tmp_path):
    """With a tokenizer, the default special ids also hold the ids it marks special (an additional special token,
    as CamemBERT's ``<s>NOTUSED``), fillers (``madeupwordN``, ``<null_N>``) and the output rows past its end (an
    embedding matrix padded to a multiple): before, these were proposed, and decode dropped them from the text."""
    import transformers

    torch.manual_seed(0)
    model = transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=18, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=40, pad_token_id=0)).eval()
    with torch.no_grad():
        model.cls.predictions.bias[11:] += 5.0  # the ids to ban are the likeliest: a run would show them
    model.save_pretrained(tmp_path)
    vocab = {w: i for i, w in enumerate(VOCAB)}
    tokenizer = transformers.BertTokenizer(vocab=vocab, do_lower_case=False, additional_special_tokens=["g"])
    tokenizer.add_tokens(["madeupword0", "<null_1>"])  # ids 12, 13
    tokenizer.save_pretrained(tmp_path)
    lm = load_masked_lm(str(tmp_path))
    assert len(lm.tokenizer) == 14 and lm.vocab_size == 18
    assert lm.special_ids == (0, 1, 2, 3, 4, 11, 12, 13, 14, 15, 16, 17)
    r = mhfast.sample(lm, 6, chains=3, epochs=3, burn_in=0, start="random", top_p=0.9, seed=1)
    assert int(r.tokens[..., 1:-1].max()) <= 10 and int(r.tokens[..., 1:-1].min()) >= 5
    explicit = HFMaskedLM(str(tmp_path), special_ids=(0, 1, 2, 3, 4))  # an explicit list is taken as given
    assert explicit.special_ids == (0, 1, 2, 3, 4)


def test_read_positions_outside_the_rows_are_named_and_padding_columns_stay_readable():
    """A position of -1 read some column silently (which one depended on the other rows: all-pad columns are
    dropped), one in a dropped column or past the width was an IndexError; now -1 and past-the-width are a
    ValueError naming positions, and a read of a padding column reads it, whatever else is in the batch."""
    lm = HFMaskedLM(tiny_model("bert"), **BERT_IDS)
    rows = torch.tensor([[2, 5, 4, 6, 3, 0, 0], [2, 4, 6, 3, 0, 0, 0]])
    for bad in (torch.tensor([2, -1]), torch.tensor([2, 7])):
        with pytest.raises(ValueError, match=r"positions: values must lie in \[0, 7\)"):
            lm.masked_logits(rows, bad)
        with pytest.raises(ValueError, match=r"positions: values must lie in \[0, 7\)"):
            lm.masked_logits_at(rows, torch.tensor([0, 1]), bad)
    batch = lm.masked_logits(rows, torch.tensor([2, 6]))  # column 6 is padding in every row
    alone = lm.masked_logits(rows[1:], torch.tensor([6]))
    torch.testing.assert_close(batch[1], alone[0], rtol=1e-5, atol=ATOL)
    at = lm.masked_logits_at(rows, torch.tensor([0, 1]), torch.tensor([2, 6]))
    torch.testing.assert_close(at, batch, rtol=1e-5, atol=ATOL)


def test_loading_returns_with_no_thread_of_its_own_left(tmp_path):
    """transformers >= 5 loads weights on a pool it shuts down without waiting; the load returns only once
    those workers have ended, so a caller may fork right after it (tests/leak_guard.py says why it matters)."""
    path = save_tiny_bert_dir(tmp_path / "tiny")
    for _ in range(3):  # the workers' exit races the return: a few loads, checked at once each time
        before = set(threading.enumerate())
        load_masked_lm(str(path))
        assert [t.name for t in set(threading.enumerate()) - before] == []


def test_frame_and_max_length():
    bert = HFMaskedLM(tiny_model("bert"), **BERT_IDS)
    assert bert.frame(3).tolist() == [2, 4, 4, 4, 3]
    assert bert.max_length == 40
    bert.frame(38)
    with pytest.raises(ValueError, match="length"):
        bert.frame(39)
    with pytest.raises(ValueError, match="length"):
        bert.frame(0)
    roberta = HFMaskedLM(tiny_model("roberta"), **ids_for("roberta"))
    assert roberta.frame(2).tolist() == [0, 4, 4, 2]
    assert roberta.max_length == 40 - 2  # positions start after padding_idx=1
    esm = HFMaskedLM(tiny_model("esm"), **ids_for("esm"))
    assert esm.max_length is None  # rotary: no embedding-table limit


def test_a_config_naming_relative_positions_over_an_absolute_table_keeps_the_tables_limit():
    """transformers 5's BERT ignores ``position_embedding_type`` and keeps its absolute table: a config carrying
    "relative_key" (an old checkpoint's) had no max_length, and 41 positions of the 40-row table failed inside
    torch ("The expanded size of the tensor (41) must match ..."); now the table's limit holds and is named."""
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=12, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=40,
                                     position_embedding_type="relative_key")
    model = transformers.BertForMaskedLM(config).eval()
    assert model.bert.embeddings.position_embeddings.num_embeddings == 40
    lm = HFMaskedLM(model, **BERT_IDS)
    assert lm.max_length == 40
    with pytest.raises(ValueError, match="length"):
        lm.frame(39)


@pytest.mark.parametrize("kind", ["mpnet", "esm-absolute"])
def test_max_length_of_models_whose_positions_start_after_the_padding_index(kind):
    """MPNet and ESM-1b/1v (absolute positions) count positions from padding_idx + 1 like RoBERTa: their longest
    row is 2 shorter than max_position_embeddings. Before, rows of that length + 1 or + 2 failed inside
    transformers with an IndexError, not the adapter's ValueError naming the length."""
    import transformers

    torch.manual_seed(0)
    small = dict(vocab_size=12, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                 max_position_embeddings=12, pad_token_id=1)
    model = (transformers.MPNetForMaskedLM(transformers.MPNetConfig(**small)) if kind == "mpnet" else
             transformers.EsmForMaskedLM(transformers.EsmConfig(mask_token_id=4, position_embedding_type="absolute",
                                                                **small)))
    lm = HFMaskedLM(model.eval(), **ids_for("roberta"))
    assert lm.max_length == 10
    longest = lm.frame(8)  # 10 tokens with <s> and </s>
    longest[1:-1] = 5
    assert torch.isfinite(mhfast.energy(lm, longest[None]).e_raw).all()
    with pytest.raises(ValueError, match="length"):
        lm.frame(9)
    with pytest.raises(ValueError, match="10"):
        mhfast.energy(lm, torch.cat([longest[:1], torch.full((10,), 5), longest[-1:]])[None])


def test_dtype_and_empty_batch():
    lm = HFMaskedLM(tiny_model("bert"), **BERT_IDS, dtype=torch.bfloat16)
    rows, positions = random_rows("bert", 3, 4)
    out = lm.masked_logits(rows, positions)
    assert out.dtype == torch.bfloat16 and out.shape == (3, 12)
    empty = lm.masked_features(torch.zeros(0, 6, dtype=torch.long), torch.zeros(0, dtype=torch.long))
    assert empty.shape == (0, 16)


def test_id_arguments_dtype_names_and_a_bare_model_object_are_checked():
    """mask_id=4.7 had become 4 and True 1, special_ids=5 a bare TypeError, dtype="bfloat16" a TypeError of torch's,
    and decode took 7.5 as id 7; a model object with neither tokenizer nor special_ids proposes [CLS], [SEP] and
    [UNK] as words, which only a directory without tokenizer files had been warned about (a review)."""
    for bad in (dict(mask_id=4.7), dict(mask_id=True), dict(pad_id="0"), dict(bos_id=2.0)):
        name, value = next(iter(bad.items()))
        with pytest.raises(ValueError, match=rf"^{name}: must be an int \(a token id\), got {re.escape(repr(value))}"):
            HFMaskedLM(tiny_model("bert"), **{**BERT_IDS, **bad})
    for bad in (5, "01", [1.5]):
        with pytest.raises(ValueError, match=r"^special_ids: must be a sequence of int token ids"):
            HFMaskedLM(tiny_model("bert"), **{**BERT_IDS, "special_ids": bad})
    assert HFMaskedLM(tiny_model("bert"), **BERT_IDS, dtype="bfloat16").dtype == torch.bfloat16
    with pytest.raises(ValueError, match=r"^dtype: must be None or one of float32, bfloat16, float16"):
        HFMaskedLM(tiny_model("bert"), **BERT_IDS, dtype="double")
    with pytest.raises(ValueError, match=r"^ids: expected ints, got 7\.5"):
        HFMaskedLM(tiny_model("bert"), **BERT_IDS).decode([7.5])
    with pytest.warns(UserWarning, match=r"model_or_path: a model object without a tokenizer or special_ids: .*"
                                         r"\[CLS\], \[SEP\] or \[UNK\] may be proposed"):
        HFMaskedLM(tiny_model("bert"), mask_id=4, pad_id=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        HFMaskedLM(tiny_model("bert"), **BERT_IDS)


def test_bad_input_raises_clear_errors(tmp_path):
    with pytest.raises(TypeError, match="model"):
        load_masked_lm(object())
    with pytest.raises(TypeError, match="model_or_path"):
        HFMaskedLM(42)
    with pytest.raises(FileNotFoundError, match="no such model directory"):
        HFMaskedLM(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="config.json"):
        HFMaskedLM(str(tmp_path / "empty"))
    with pytest.raises(ValueError, match="mask_id"):
        HFMaskedLM(tiny_model("bert"))  # no tokenizer, BERT config names no mask token
    for name in ("bos_id", "eos_id"):  # (it was accepted, and sampling failed naming an ``init`` never given)
        with pytest.raises(ValueError, match=rf"^{name}: 12 outside the vocabulary \[0, 12\)$"):
            HFMaskedLM(tiny_model("bert"), **{**BERT_IDS, name: 12})
    lm = HFMaskedLM(tiny_model("bert"), **BERT_IDS)
    rows, positions = random_rows("bert", 2, 3)
    with pytest.raises(ValueError, match="context"):
        lm.masked_logits(rows, positions, context=torch.zeros(1))
    with pytest.raises(ValueError, match="positions"):
        lm.masked_logits(rows, positions[:1])
    with pytest.raises(ValueError, match="tokens"):
        lm.masked_logits(rows.float(), positions)
    from mhfast.models.fast_forward import fast_forward_model

    for bad in (60, -1):  # (a bare IndexError from the embedding before 2026-12-01)
        wrong = rows.clone()
        wrong[0, 1] = bad
        for model in (lm, fast_forward_model(lm)):
            with pytest.raises(ValueError, match=rf"^tokens: ids must lie in \[0, 12\) \(the vocabulary\), got {bad}$"):
                model.masked_logits(wrong, positions)
    assert load_masked_lm(lm) is lm  # protocol objects pass through


def test_loading_names_what_to_pass_instead(tmp_path):
    """A file inside a HuggingFace model directory (its weights, its config) was read as a fairseq checkpoint
    ("not a readable torch checkpoint (truncated or corrupt?)"); the named models' loaders got the HF options
    and failed with the loader's own TypeError."""
    path = save_tiny_bert_dir(tmp_path / "tiny")
    for name in ("config.json", "model.safetensors"):
        with pytest.raises(ValueError, match=r"is a file of a HuggingFace model directory; pass the directory"):
            load_masked_lm(str(tmp_path / "tiny" / name))
    assert isinstance(load_masked_lm(path), HFMaskedLM)
    beside = tmp_path / "tiny" / "checkpoint.pt"  # any other file there is not refused for its neighbour
    beside.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="not a readable torch checkpoint"):
        load_masked_lm(str(beside))
    for name, option in (("antiberty", dict(mask_id=4)), ("sapiens-h", dict(tokenizer=None))):
        with pytest.raises(TypeError, match=rf"model: '{name}' takes only device= and dtype=, got "
                                            rf"{next(iter(option))}"):
            load_masked_lm(name, **option)
