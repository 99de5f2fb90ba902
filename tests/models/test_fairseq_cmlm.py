"""The fairseq CMLM adapter and Mask-Predict, on a tiny cmlm_transformer trained in this session.

The model is trained once per session by fairseq-train (conftest.py's ``tiny_paths`` fixture, shared
with tests/cli/test_cli_translate.py; ~1 min on 2 cores) on a Multi30k slice from ``../shared`` beside
the repository; set MHFAST_FAIRSEQ_CACHE to a directory to reuse it across sessions. fairseq itself
is installed by scripts/install.sh: these tests fail (they do not skip) without it.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import mhfast


class EncoderCounter:
    """Counts real forwards of the fairseq encoder module (a hook, independent of the adapter's counter)."""

    def __init__(self, cmlm):
        self.calls = 0
        self.handle = cmlm.model.encoder.register_forward_hook(self._hook)

    def _hook(self, *_):
        self.calls += 1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.remove()


def _generator_output(cmlm, sources, iterations, beam):
    from fairseq.iterative_refinement_generator import IterativeRefinementGenerator

    src_tokens, src_lengths = cmlm.collate_sources(sources)
    gen = IterativeRefinementGenerator(cmlm.tgt_dict, models=[cmlm.model], max_iter=iterations, beam_size=beam,
                                       adaptive=False, retain_history=False)
    return gen.generate([cmlm.model], {"net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths}})


# ---------------------------------------------------------------------------- adapter
def test_protocol_and_specials(cmlm):
    from mhfast.models.base import ConditionalMaskedLM, FeatureMaskedLM

    assert isinstance(cmlm, ConditionalMaskedLM) and isinstance(cmlm, FeatureMaskedLM)
    d = cmlm.tgt_dict
    assert cmlm.mask_id == d.unk() and d[cmlm.mask_id] == "<unk>"
    assert (cmlm.pad_id, cmlm.bos_id, cmlm.eos_id) == (d.pad(), d.bos(), d.eos())
    assert {d.pad(), d.bos(), d.eos(), d.unk()} <= set(cmlm.special_ids)
    assert all(d[i].startswith("madeupword") for i in cmlm.special_ids if i >= d.nspecial)
    assert cmlm.vocab_size == len(d)
    assert cmlm.frame(3).tolist() == [d.bos(), d.unk(), d.unk(), d.unk(), d.eos()]


def test_string_and_id_sources_encode_identically(cmlm, sources):
    # Strings are framed [bos] + ids + [eos], as translation_lev built the training sources.
    bos = torch.tensor([cmlm.src_dict.bos()])
    ids = [torch.cat([bos, cmlm.src_dict.encode_line(s, add_if_not_exist=False).long()]) for s in sources[:3]]
    assert all(int(i[0]) == cmlm.src_dict.bos() and int(i[-1]) == cmlm.src_dict.eos() for i in ids)
    no_eos = [i[:-1] for i in ids]  # a missing trailing EOS is added, as fairseq's datasets have it
    a, b, c = cmlm.encode(sources[:3]), cmlm.encode(ids), cmlm.encode(no_eos)
    assert torch.equal(a.src_tokens, b.src_tokens) and torch.equal(a.src_tokens, c.src_tokens)
    assert torch.equal(a.encoder_out["encoder_out"][0], b.encoder_out["encoder_out"][0])
    # Upper case goes through the tokenizer callback.
    assert torch.equal(cmlm.encode([sources[0].upper()]).src_tokens, cmlm.encode(sources[:1]).src_tokens)


def test_masked_logits_equal_full_decoder_output(cmlm, sources):
    context = cmlm.encode(sources[:4])
    g = torch.Generator().manual_seed(0)
    # 6 rows of different lengths (right-padded like fairseq targets), sources picked by context_index
    lengths = [5, 9, 7, 9, 3, 6]
    context_index = torch.tensor([2, 0, 3, 1, 0, 2])
    T = max(lengths) + 2
    rows = torch.full((6, T), cmlm.pad_id, dtype=torch.long)
    positions = []
    for r, L in enumerate(lengths):
        content = torch.randint(cmlm.tgt_dict.nspecial, cmlm.vocab_size - 8, (L,), generator=g)
        masked = torch.rand(L, generator=g) < 0.4
        masked[int(torch.randint(L, (1,), generator=g))] = True
        content[masked] = cmlm.mask_id
        rows[r, :L + 2] = torch.cat([torch.tensor([cmlm.bos_id]), content, torch.tensor([cmlm.eos_id])])
        positions.append(1 + int(torch.nonzero(masked)[0]))
    positions = torch.tensor(positions)

    with EncoderCounter(cmlm) as enc:
        logits = cmlm.masked_logits(rows, positions, context, context_index)
        features = cmlm.masked_features(rows, positions, context, context_index)
    assert enc.calls == 0  # the decoder reuses the encoder output by index, never re-encodes
    # Reference: fairseq's own full decoder pass, one row at a time, on its own source's encoding.
    for n in range(6):
        enc_n = cmlm.model.encoder.reorder_encoder_out(context.encoder_out, context_index[n:n + 1])
        L = lengths[n] + 2
        with torch.no_grad():
            full = cmlm.model.decoder(normalize=False, prev_output_tokens=rows[n:n + 1, :L], encoder_out=enc_n)
        torch.testing.assert_close(logits[n], full[0, positions[n]], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(cmlm.output_layer(features), logits, atol=0, rtol=0)
    # The several-positions-per-row hook gives the same numbers.
    at = cmlm.masked_logits_at(rows, torch.arange(6), positions, context, context_index)
    torch.testing.assert_close(at, logits, atol=1e-6, rtol=1e-6)


def test_predict_lengths_match_fairseq(cmlm, sources):
    context = cmlm.encode(sources)
    init = cmlm.model.initialize_output_tokens(context.encoder_out, context.src_tokens)
    fairseq_total = init.output_tokens.ne(cmlm.pad_id).sum(1)  # fairseq's greedy length, BOS/EOS included
    top = cmlm.predict_lengths(context, 4)
    assert top.shape == (len(sources), 4) and top.dtype == torch.long
    assert torch.equal(top[:, 0] + 2, fairseq_total)
    # the k best of the length head, best first
    scores = cmlm.length_logits(context)
    picked = scores.gather(1, top + 2)
    assert bool((picked[:, :-1] >= picked[:, 1:]).all())
    allowed = scores[:, 3:cmlm.max_target_positions + 1]
    assert torch.equal(picked, allowed.topk(4, dim=1).values)
    # fairseq's length beam (IterativeRefinementGenerator + regenerate_length_beam)
    beam = cmlm.model.regenerate_length_beam(init, 3).output_tokens.ne(cmlm.pad_id).sum(1)
    assert torch.equal(cmlm.predict_lengths(context, 3, strategy="fairseq").reshape(-1) + 2, beam)


# ---------------------------------------------------------------------------- Mask-Predict
@pytest.mark.parametrize("beam,iterations", [(1, 10), (3, 10), (3, 2), (4, 0)])
def test_mask_predict_equals_fairseq_generator(cmlm, sources, beam, iterations):
    with EncoderCounter(cmlm) as enc:
        out = mhfast.mask_predict(cmlm, sources, iterations=iterations, length_beam=beam)
    assert enc.calls == 1
    hyps = _generator_output(cmlm, sources, iterations, beam)
    assert len(out.tokens) == len(hyps) == len(sources)
    for s, h in enumerate(hyps):
        assert torch.equal(out.tokens[s], h[0]["tokens"]), f"source {s}"
        assert torch.equal(out.positional_scores[s], h[0]["positional_scores"]), f"source {s}"
        assert out.score[s].item() == h[0]["score"].item()
    assert out.beam_tokens.shape[:2] == (len(sources), beam)
    assert bool((out.tokens[0][1:-1] != cmlm.mask_id).all())  # everything is filled at the end


@pytest.mark.parametrize("beam,iterations", [(1, 0), (2, 2), (5, 10)])
def test_mask_predict_equals_fairseq_generator_at_extreme_lengths(cmlm, sources, beam, iterations, monkeypatch):
    """The tiny CMLM predicts about the same length for every source, so the test above never reaches fairseq's
    clamp of short lengths to 2 (duplicate candidates in the beam), a one-token target or a long one: the
    length predictor is forced (the same for both) to 0, 1, 2, 3 and 20 tokens."""
    forced = torch.tensor([0, 1, 2, 3, 20])
    decoder = cmlm.model.decoder
    monkeypatch.setattr(decoder, "forward_length_prediction", lambda length_out, encoder_out, tgt_tokens=None:
                        forced.clone())
    five = sources[:5]
    out = mhfast.mask_predict(cmlm, five, iterations=iterations, length_beam=beam)
    hyps = _generator_output(cmlm, five, iterations, beam)
    for s, h in enumerate(hyps):
        assert torch.equal(out.tokens[s], h[0]["tokens"]), f"source {s}"
        assert torch.equal(out.positional_scores[s], h[0]["positional_scores"]), f"source {s}"
        assert out.score[s].item() == h[0]["score"].item()


def test_mask_predict_topk_lengths_and_refinement(cmlm, sources):
    out = mhfast.mask_predict(cmlm, sources[:4], iterations=4, length_beam=3, length_strategy="topk")
    ctx = cmlm.encode(sources[:4])
    assert torch.equal(out.lengths, cmlm.predict_lengths(ctx, 3) + 2)
    for s in range(4):
        assert len(out.tokens[s]) == int(out.lengths[s, out.best_beam[s]])
        assert out.tokens[s][0] == cmlm.bos_id and out.tokens[s][-1] == cmlm.eos_id
    # the chosen candidate has the highest mean log-probability among the beam
    assert torch.equal(out.score, out.beam_scores.max(dim=1).values)


def test_mask_predict_refuses_a_source_embedding_copy_model(cmlm, sources, monkeypatch):
    """A CMLM trained with src_embedding_copy: fairseq's Mask-Predict copies source embeddings at step 0, mhfast's
    decodes through the adapter (no copy), so its output would differ from fairseq's without a word."""
    monkeypatch.setattr(cmlm.model.decoder, "src_embedding_copy", True)
    with pytest.raises(ValueError, match="model: its decoder was trained with src_embedding_copy"):
        mhfast.mask_predict(cmlm, sources[:1], iterations=1)


def test_mask_predict_bad_arguments(cmlm, sources):
    with pytest.raises(ValueError, match="iterations"):
        mhfast.mask_predict(cmlm, sources[:1], iterations=-1)
    with pytest.raises(ValueError, match="length_beam"):
        mhfast.mask_predict(cmlm, sources[:1], length_beam=0)
    beam = 2 * cmlm.max_target_positions  # fairseq's beam reaches beam // 2 past the predicted length
    with pytest.raises(ValueError, match=rf"^length_beam={beam}: source 0's longest candidate has \d+ tokens"):
        mhfast.mask_predict(cmlm, sources[:1], length_beam=beam)
    with pytest.raises(ValueError, match="length_strategy"):
        mhfast.mask_predict(cmlm, sources[:1], length_strategy="best")
    with pytest.raises(ValueError, match="sources"):
        mhfast.mask_predict(cmlm, [])
    with pytest.raises(TypeError, match="model"):
        mhfast.mask_predict(object(), sources[:1])


def test_mask_predict_takes_numpy_ints(cmlm, sources):
    """np.int64 iterations and length_beam, as the sampler's options take them (they had been refused)."""
    a = mhfast.mask_predict(cmlm, sources[:2], iterations=np.int64(3), length_beam=np.int32(2))
    b = mhfast.mask_predict(cmlm, sources[:2], iterations=3, length_beam=2)
    assert all(torch.equal(x, y) for x, y in zip(a.tokens, b.tokens, strict=True))


class _Refiner:
    """A RefinementModel of vocabulary 8 whose lengths and log-probabilities a test sets."""
    vocab_size, mask_id, pad_id, bos_id, eos_id, special_ids = 8, 3, 1, 0, 2, (0, 1, 2, 3)

    def __init__(self, lengths=None, log_probs=None):
        self.lengths, self.log_probs = lengths, log_probs

    def encode(self, sources):
        return len(sources)

    def predict_lengths(self, context, k, strategy="topk"):
        return self.lengths(context, k) if self.lengths else torch.full((context, k), 3)

    def decoder_log_probs(self, tokens, context, context_index):
        if self.log_probs:
            return self.log_probs(tokens)
        return torch.randn(*tokens.shape, 8, generator=torch.Generator().manual_seed(0)).log_softmax(-1)

    def masked_logits(self, tokens, positions, context=None, context_index=None):
        raise NotImplementedError


@pytest.mark.parametrize("model, message", [
    (_Refiner(lengths=lambda S, k: torch.full((S, k), -1)), r"^model.predict_lengths returned a length of -1"),
    (_Refiner(lengths=lambda S, k: torch.full((S, k + 1), 3)), r"^model.predict_lengths must return Long\[2, 2\]"),
    (_Refiner(lengths=lambda S, k: torch.full((S, k), 3.0)), r"^model.predict_lengths must return Long\[2, 2\] "
                                                             r"\(sources x length_beam\), got torch.float32"),
    (_Refiner(log_probs=lambda t: torch.full((*t.shape, 8), float("nan"))), r"^model.decoder_log_probs returned NaN"),
    (_Refiner(log_probs=lambda t: torch.zeros(*t.shape, 5)), r"^model.decoder_log_probs must return float\[4, 5, 8\]"),
    (_Refiner(log_probs=lambda t: torch.zeros(t.shape[0], 8)), r"^model.decoder_log_probs must return float"),
])
def test_mask_predict_checks_a_models_outputs(model, message):
    """A custom model that breaks the protocol: a ValueError naming its method. A length of -1 had given silent
    [eos] hypotheses, NaN or a wrong vocabulary size silent garbage, the rest errors deep inside torch."""
    mhfast.mask_predict(_Refiner(), [[5], [6]], iterations=2, length_beam=2)  # the well-behaved model decodes
    with pytest.raises(ValueError, match=message):
        mhfast.mask_predict(model, [[5], [6]], iterations=2, length_beam=2)


# ---------------------------------------------------------------------------- sampler
def test_sample_conditional_encodes_once_and_keeps_bos_eos(cmlm, sources):
    srcs = sources[:3]
    before = cmlm.encoder_calls
    with EncoderCounter(cmlm) as enc:
        res = mhfast.sample(cmlm, source=srcs, length_beam=2, chains=2, epochs=3, burn_in=1, seed=0)
    assert enc.calls == 1  # one encoder pass for all sources x length candidates x chains x masked copies
    assert cmlm.encoder_calls == before + 1
    assert res.model_rows > 3 * 2 * 2  # many masked rows went through the decoder meanwhile
    ctx = cmlm.encode(srcs)
    assert torch.equal(res.candidate_lengths, cmlm.predict_lengths(ctx, 2))
    S, C, T = res.tokens.shape
    assert (S, C) == (3, 2)
    for s in range(S):
        L = int(res.lengths[s])  # BOS + content + EOS
        assert L == int(res.candidate_lengths[s, res.chosen_candidate[s]]) + 2
        for states in (res.tokens[s], res.best_tokens[s][None]):
            assert bool((states[:, 0] == cmlm.bos_id).all()) and bool((states[:, L - 1] == cmlm.eos_id).all())
            assert bool((states[:, L:] == cmlm.pad_id).all())
            content = states[:, 1:L - 1]
            assert not bool(torch.isin(content, torch.tensor(cmlm.special_ids)).any())
    assert bool(torch.isfinite(res.best_energy).all())


# ---------------------------------------------------------------------------- errors
def test_adapter_bad_arguments(cmlm, sources, tiny_paths, tmp_path):
    from mhfast.models.fairseq_cmlm import load_fairseq_cmlm

    ctx = cmlm.encode(sources[:2])
    rows = torch.stack([cmlm.frame(4), cmlm.frame(4), cmlm.frame(4)])
    with pytest.raises(ValueError, match="context_index"):
        cmlm.masked_logits(rows, torch.tensor([1, 2, 3]), ctx)  # 3 rows, 2 sources, no index
    with pytest.raises(ValueError, match="context_index"):
        cmlm.masked_logits(rows, torch.tensor([1, 2, 3]), ctx, torch.tensor([0, 1]))
    with pytest.raises(TypeError, match="context"):
        cmlm.masked_logits(rows, torch.tensor([1, 2, 3]), "not a context", torch.tensor([0, 1, 0]))
    with pytest.raises(ValueError, match="positions"):
        cmlm.masked_logits(rows, torch.tensor([1, 2]), ctx, torch.tensor([0, 1, 0]))
    with pytest.raises(ValueError, match="length"):
        cmlm.frame(0)
    with pytest.raises(ValueError, match="length"):
        cmlm.frame(cmlm.max_target_positions)
    with pytest.raises(ValueError, match="k"):
        cmlm.predict_lengths(ctx, 0)
    with pytest.raises(ValueError, match="strategy"):
        cmlm.predict_lengths(ctx, 2, strategy="beam")
    with pytest.raises(ValueError, match="sources"):
        cmlm.encode([torch.tensor([1.5, 2.0])])
    with pytest.raises(ValueError, match="sources"):
        cmlm.encode([torch.tensor([cmlm.src_dict.pad(), 5])])
    with pytest.raises(ValueError, match="sources"):
        cmlm.encode([torch.tensor([len(cmlm.src_dict)])])
    with pytest.raises(ValueError, match="checkpoint"):
        load_fairseq_cmlm(tmp_path / "missing.pt", tiny_paths["data"])
    with pytest.raises(ValueError, match="data_dir_or_dictionary"):
        load_fairseq_cmlm(tiny_paths["checkpoint"], tmp_path)
    with pytest.raises(TypeError, match="data_dir_or_dictionary"):
        load_fairseq_cmlm(tiny_paths["checkpoint"], 42)


def test_load_with_dictionary_object(cmlm, tiny_paths, sources):
    from mhfast.models.fairseq_cmlm import load_fairseq_cmlm

    other = load_fairseq_cmlm(tiny_paths["checkpoint"], cmlm.tgt_dict)  # joint dictionary
    a = mhfast.mask_predict(cmlm, sources[:3], iterations=3)
    b = mhfast.mask_predict(other, sources[:3], iterations=3)
    assert all(torch.equal(x, y) for x, y in zip(a.tokens, b.tokens))


def test_missing_fairseq_names_the_install_command():
    """Without fairseq, importing the adapter works and loading raises ImportError naming the install.

    Run in a fresh interpreter where ``import fairseq`` fails (sys.modules entry None), so this
    session's loaded fairseq and adapter classes stay untouched.
    """
    code = (
        "import sys; sys.modules['fairseq'] = None\n"
        "import mhfast.models.fairseq_cmlm as m\n"
        "try:\n"
        "    m.load_fairseq_cmlm('x.pt', 'data')\n"
        "except ImportError as e:\n"
        "    print('IMPORT-ERROR:', e)\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "IMPORT-ERROR:" in out.stdout
    assert "fairseq-fixed==0.12.3.1" in out.stdout and "pip install" in out.stdout


def test_read_positions_and_empty_batches_like_the_fast_decoder(cmlm, sources):
    """The full CMLM adapter checks its read indices as the fast decoder does (position -1 read the last column
    silently, a list of positions was an AttributeError) and takes an empty batch (fairseq's decoder failed)."""
    context = cmlm.encode(sources[:2])
    rows, ci = cmlm.frame(3)[None].repeat(2, 1), torch.tensor([0, 1])
    for bad in (torch.tensor([1, -1]), torch.tensor([1, 5])):
        with pytest.raises(ValueError, match=r"positions: values must lie in \[0, 5\)"):
            cmlm.masked_logits(rows, bad, context, ci)
    with pytest.raises(ValueError, match="positions: expected Long"):
        cmlm.masked_logits(rows, [1, 2], context, ci)
    empty = torch.zeros(0, dtype=torch.long)
    assert cmlm.masked_logits(rows[:0], empty, context, empty).shape == (0, cmlm.vocab_size)
    full = cmlm.masked_logits(rows, torch.tensor([1, 2]), context, ci)
    from mhfast.models.fast_forward import fast_forward_model

    fast = fast_forward_model(cmlm).masked_logits(rows, torch.tensor([1, 2]), context, ci)
    torch.testing.assert_close(full, fast, rtol=1e-5, atol=1e-4)


def test_token_ids_outside_the_dictionary_are_named(cmlm, sources):
    """An id past the target dictionary (or negative) is one ValueError naming `tokens`, on the full adapter and
    its fast decoder alike (it was an IndexError inside the embedding: a device-side assert on CUDA)."""
    from mhfast.models.fast_forward import fast_forward_model

    context = cmlm.encode(sources[:1])
    for model in (cmlm, fast_forward_model(cmlm)):
        for bad_id in (cmlm.vocab_size, -1):
            rows = cmlm.frame(3)[None].clone()
            rows[0, 2] = bad_id
            with pytest.raises(ValueError, match=rf"tokens: ids must lie in \[0, {cmlm.vocab_size}\)"):
                model.masked_logits(rows, torch.tensor([1]), context)
            with pytest.raises(ValueError, match=r"tokens: ids must lie in"):
                cmlm.decoder_log_probs(rows, context)


def test_fairseqs_filler_symbols_are_special(cmlm):
    """fairseq pads a dictionary to a multiple of 8 with madeupwordNNNN fillers: never proposed (only the
    bundled model's golden outputs noticed when they were not special)."""
    fillers = {i for i, s in enumerate(cmlm.tgt_dict.symbols) if s.startswith("madeupword")}
    assert fillers and fillers <= set(cmlm.special_ids)


def test_an_empty_read_of_a_bfloat16_model_is_in_its_dtype(cmlm, sources):
    """No read positions: both forwards return no features in the model's dtype (the fast decoder's were float32,
    and a bfloat16 model's output layer then failed on the mixed dtypes)."""
    import copy

    from mhfast.models.fast_forward import fast_forward_model

    half = copy.deepcopy(cmlm)
    half.model.to(torch.bfloat16)
    context = half.encode(sources[:2])
    rows, ci, empty = half.frame(3)[None].repeat(2, 1), torch.tensor([0, 1]), torch.zeros(0, dtype=torch.long)
    for model in (half, fast_forward_model(half)):
        assert model.masked_features_at(rows, empty, empty, context, ci).dtype == torch.bfloat16
        assert model.masked_logits_at(rows, empty, empty, context, ci).shape == (0, half.vocab_size)


def test_the_device_follows_the_model_after_the_adapter_is_built(cmlm, sources):
    """``cmlm.device`` is read from the parameters at each call (it was fixed at construction, so after
    ``cmlm.model.cuda()`` the sources were collated on the CPU). The meta device stands in for a GPU here."""
    import copy

    moved = copy.deepcopy(cmlm)
    assert moved.device == torch.device("cpu")
    moved.model.to("meta")
    assert moved.device == torch.device("meta")
    src, lengths = moved.collate_sources([moved.source_ids(s) for s in sources[:2]])
    assert src.device.type == "meta" and lengths.device.type == "meta"


def test_decode_names_ids_outside_the_dictionary(cmlm):
    from test_fairseq_mlm import assert_decode_names_ids_outside_the_dictionary

    assert_decode_names_ids_outside_the_dictionary(cmlm)


def test_a_float64_cmlm_is_refused_naming_it(cmlm, sources):
    """The CMLM has a ``dtype`` like the other adapters, so a float64 one is refused up front, naming the model
    (it had none: mhfast.sample then failed in its first op, ``mhfast.gather_energies: logits must be Float ...``)."""
    import copy

    wide = copy.deepcopy(cmlm)
    wide.model.double()
    assert cmlm.dtype == torch.float32 and wide.dtype == torch.float64
    target = cmlm.frame(3)[1:-1].clone()
    target[:] = 10
    for call, where in ((lambda: mhfast.sample(wide, 3, source=sources[:1], chains=1, epochs=1, burn_in=0),
                         "mhfast.sample"),
                        (lambda: mhfast.energy(wide, target[None], source=sources[:1]), "mhfast.energy"),
                        (lambda: mhfast.score(wide, [target.tolist()], sources=sources[:1]), "mhfast.score")):
        with pytest.raises(ValueError, match=f"^{where}: model is float64"):
            call()


def test_length_logits_of_a_pred_length_offset_model_mean_total_lengths(cmlm, sources):
    """``--pred-length-offset`` models predict the length relative to the source's: class c means total length
    c - 128 + src_len (fairseq's forward_length_prediction). length_logits maps each class to the length it
    stands for, so its argmax is fairseq's own greedy length and every class keeps its score. The length head is
    rolled by 128 classes so that the predicted lengths lie inside the 256 (no test model is trained this way)."""
    import copy

    offset = copy.deepcopy(cmlm)
    head = offset.model.decoder.embed_length.weight
    head.data = torch.roll(head.data, 128, dims=0)
    offset.model.decoder.pred_length_offset = offset.pred_length_offset = True
    context = offset.encode(sources)
    mapped = offset.length_logits(context)
    raw = offset.model.decoder.forward_length(normalize=False, encoder_out=context.encoder_out)
    greedy = offset.greedy_total_lengths(context)
    assert (greedy != cmlm.greedy_total_lengths(cmlm.encode(sources))).any()  # (the source length counts)
    assert torch.equal(mapped.argmax(-1), greedy)
    for s, length in enumerate(context.src_lengths.tolist()):
        c = torch.arange(256)
        kept = (c - 128 + length >= 0) & (c - 128 + length < 256)
        assert torch.equal(mapped[s, c[kept] - 128 + length], raw[s, kept])
        assert torch.isinf(mapped[s]).sum() == (~kept).sum()
