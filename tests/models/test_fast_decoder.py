"""The fairseq CMLM decoder's fast forward (issue 14; :mod:`mhfast.models.fast_decoder`): encoder-attention keys
and values once per source, the last layer only at the read positions. Same features as fairseq's decoder up to
float rounding, the same chains, clear errors, and the plain adapter wherever the fast path would not be exact.
The ``cmlm`` and ``sources`` fixtures (the tiny fairseq CMLM, held-out sources) are conftest.py's.

Example:
    python3 -m pytest -q tests/models/test_fast_decoder.py
"""
from __future__ import annotations

import copy

import pytest
import torch

import mhfast
from mhfast.models.fast_decoder import FastCMLMDecoder, fast_decoder_model
from mhfast.models.fast_forward import fast_forward_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _reads(cmlm, sources, seed: int = 0):
    """24 masked rows of 3 sources (some padded shorter), 1-3 reads per row, their source per row."""
    g = torch.Generator().manual_seed(seed)
    R, T = 24, 9
    content = [i for i in range(cmlm.vocab_size) if i not in cmlm.special_ids]
    rows = torch.tensor(content)[torch.randint(len(content), (R, T), generator=g)]
    rows[:, 0] = cmlm.bos_id
    rows[:, -1] = cmlm.eos_id
    rows[:6, 6] = cmlm.eos_id  # six rows are shorter: padding after their EOS
    rows[:6, 7:] = cmlm.pad_id
    reads = [(r, p) for r in range(R) for p in sorted(torch.randperm(5, generator=g)[:1 + r % 3].add(1).tolist())]
    row_index = torch.tensor([r for r, _ in reads])
    positions = torch.tensor([p for _, p in reads])
    rows[row_index, positions] = cmlm.mask_id
    return rows, row_index, positions, torch.randint(3, (R,), generator=g)


def _assert_same_features(lm, cmlm, sources):
    ctx = lm.encode(sources[:3])
    rows, row_index, positions, src = _reads(lm, sources)
    fast = fast_decoder_model(lm)
    assert isinstance(fast, FastCMLMDecoder)
    want = lm.masked_features_at(rows, row_index, positions, ctx, src)
    got = fast.masked_features_at(rows, row_index, positions, ctx, src)
    assert got.shape == want.shape
    assert torch.allclose(got, want, atol=2e-5, rtol=1e-5), (got - want).abs().max()
    assert torch.allclose(fast.masked_logits_at(rows, row_index, positions, ctx, src),
                          lm.masked_logits_at(rows, row_index, positions, ctx, src), atol=1e-4, rtol=1e-5)
    one = torch.arange(rows.shape[0])  # one read per row, through masked_features / masked_logits
    first = torch.stack([positions[row_index == r][0] for r in one])
    assert torch.allclose(fast.masked_logits(rows, first, ctx, src), lm.masked_logits(rows, first, ctx, src),
                          atol=1e-4, rtol=1e-5)
    rows3 = rows[:3]  # context_index None: the rows are the three sources in order
    assert torch.allclose(fast.masked_features(rows3, first[:3], ctx), lm.masked_features(rows3, first[:3], ctx),
                          atol=2e-5, rtol=1e-5)


def test_features_equal_fairseq_decoder(cmlm, sources):
    assert fast_forward_model(cmlm).__class__ is FastCMLMDecoder  # what forward="fast" picks
    _assert_same_features(cmlm, cmlm, sources)


def test_pre_layer_norm_decoder(cmlm, sources):
    """normalize_before=True (pre-LN) layers: fairseq reads the flag in forward, so flipping it gives a
    pre-LN decoder with the same weights; the fast path follows it."""
    pre = copy.deepcopy(cmlm)
    for layer in pre.model.decoder.layers:
        layer.normalize_before = True
    _assert_same_features(pre, cmlm, sources)


def test_the_rows_are_counted_and_sources_projected_once(cmlm, sources):
    ctx = cmlm.encode(sources[:3])
    rows, row_index, positions, src = _reads(cmlm, sources)
    fast = fast_decoder_model(cmlm)
    calls = []
    handle = cmlm.model.decoder.layers[0].encoder_attn.k_proj.register_forward_hook(
        lambda _m, args, _out: calls.append(args[0].shape[0]))
    before = cmlm.decoder_rows
    try:
        fast.masked_features_at(rows, row_index, positions, ctx, src)
    finally:
        handle.remove()
    assert cmlm.decoder_rows == before + rows.shape[0]
    assert calls == [len(set(src.tolist()))]  # one projection of each distinct source, not one per row


def test_static_inputs_project_every_source_once_per_context(cmlm, sources):
    """Under static_inputs (the sampler's static step): the same features, the encoder keys/values of every source
    projected by the first call and reused by the next calls with the same context (no per-call torch.unique),
    projected again for another context, and the plain path untouched after the context manager exits."""
    ctx = cmlm.encode(sources[:3])
    rows, row_index, positions, src = _reads(cmlm, sources)
    fast = fast_decoder_model(cmlm)
    want = fast.masked_features_at(rows, row_index, positions, ctx, src)
    calls = []
    handle = cmlm.model.decoder.layers[0].encoder_attn.k_proj.register_forward_hook(
        lambda _m, args, _out: calls.append(args[0].shape[0]))
    try:
        with fast.static_inputs(True):
            got = [fast.masked_features_at(rows, row_index, positions, ctx, src) for _ in range(3)]
            assert calls == [3]  # the 3 sources, once for the three calls
            other = cmlm.encode(sources[3:5])
            fast.masked_features_at(rows, row_index, positions, other, src % 2)
            assert calls == [3, 2]  # a new context: its sources projected
        fast.masked_features_at(rows, row_index, positions, ctx, src[:1].expand(rows.shape[0]))
        assert calls == [3, 2, 1]  # outside: the call's distinct sources again (one here)
    finally:
        handle.remove()
    for g in got:
        assert torch.allclose(g, want, atol=2e-5, rtol=1e-5), (g - want).abs().max()


@pytest.mark.parametrize("sampler", ["mh", "block-mh", "gibbs"])
def test_fast_decoder_leaves_the_chains_unchanged(cmlm, sources, sampler):
    runs = {fwd: mhfast.sample(cmlm, source=sources[:3], length_beam=1, chains=3, epochs=4, burn_in=1,
                               sampler=sampler, seed=7, forward=fwd, record="epoch")
            for fwd in ("fast", "full")}
    fast, full = runs["fast"], runs["full"]
    assert torch.equal(fast.history, full.history) and torch.equal(fast.tokens, full.tokens)
    assert torch.allclose(fast.energy, full.energy, atol=1e-4)
    assert fast.model_rows == full.model_rows
    assert fast.novel_rate.sum() > 0  # the chains moved


@pytest.mark.parametrize("forward", ["fast", "full"])
def test_compile_gives_the_same_chains(cmlm, sources, forward):
    """compile=True on a CMLM: the fast decoder's per-layer function (all layers but the piecewise last), or with
    forward="full" fairseq's own encoder and decoder layers; the same chains as eager on this short run."""
    kwargs = dict(source=sources[:2], length_beam=1, chains=2, epochs=3, burn_in=1, seed=7, forward=forward)
    eager = mhfast.sample(cmlm, **kwargs)
    compiled = mhfast.sample(cmlm, compile=True, **kwargs)
    assert torch.equal(compiled.tokens, eager.tokens) and torch.allclose(compiled.energy, eager.energy, atol=1e-4)
    layers = len(cmlm.model.decoder.layers)
    want = layers - 1 if forward == "fast" else layers + len(cmlm.model.encoder.layers)
    assert compiled.compiled_blocks == want
    fast = fast_decoder_model(cmlm)
    from mhfast.models.compiled_blocks import compiled_blocks

    with compiled_blocks(fast):
        assert fast._layer_fn is not FastCMLMDecoder._layer
    assert fast._layer_fn is FastCMLMDecoder._layer
    assert all(type(m).__name__ != "OptimizedModule" for m in cmlm.model.decoder.layers)


def test_scoring_takes_the_fast_decoder_with_the_same_energies(cmlm, sources):
    """mhfast.energy forwards through the fast decoder; its energies equal the sampler's with forward="full"."""
    res = mhfast.sample(cmlm, source=sources[:2], length_beam=1, chains=2, epochs=2, burn_in=0, seed=3,
                        forward="full")
    S, C, T = res.tokens.shape
    e_raw, e_local = mhfast.energy(cmlm, res.tokens.reshape(S * C, T), source=[s for s in sources[:2] for _ in range(C)])
    assert torch.allclose(e_raw, res.energy_raw.reshape(-1), atol=1e-3)
    assert torch.allclose(e_local, res.energy_local.reshape(-1), atol=1e-3)


def test_bad_arguments_are_named(cmlm, sources):
    ctx = cmlm.encode(sources[:3])
    rows, row_index, positions, src = _reads(cmlm, sources)
    fast = fast_decoder_model(cmlm)
    with pytest.raises(ValueError, match="context_index: expected int64"):
        fast.masked_features_at(rows, row_index, positions, ctx, src.int())
    with pytest.raises(TypeError, match="context: expected the FairseqContext"):
        fast.masked_features_at(rows, row_index, positions, "ctx", src)
    with pytest.raises(ValueError, match="context_index: required"):
        fast.masked_features_at(rows, row_index, positions, ctx, None)
    with pytest.raises(ValueError, match="row_index: expected a Long"):
        fast.masked_features_at(rows, row_index.float(), positions, ctx, src)
    with pytest.raises(ValueError, match="positions: expected Long"):
        fast.masked_features_at(rows, row_index, positions[:2], ctx, src)
    with pytest.raises(ValueError, match="row_index: values must lie in"):
        fast.masked_features_at(rows, row_index + rows.shape[0], positions, ctx, src)
    with pytest.raises(ValueError, match="context_index: values must lie in"):
        fast.masked_features_at(rows, row_index, positions, ctx, src + 3)
    with pytest.raises(ValueError, match="positions: values must lie in"):
        fast.masked_features_at(rows, row_index, positions + rows.shape[1], ctx, src)
    empty = fast.masked_features_at(rows, row_index[:0], positions[:0], ctx, src)
    assert empty.shape == (0, cmlm.model.decoder.output_embed_dim)
    with pytest.raises(ValueError, match="tokens: expected an int64"):
        fast.masked_features_at(rows.float(), row_index, positions, ctx, src)


def test_other_decoders_keep_the_adapter(cmlm):
    """Where the fast path would not be exactly the model, the adapter itself is used."""
    training = copy.deepcopy(cmlm)
    training.model.train()
    assert fast_decoder_model(training) is training
    extra = copy.deepcopy(cmlm)
    extra.model.decoder.layers[1].attn_ln = torch.nn.LayerNorm(4)
    assert fast_decoder_model(extra) is extra
    cross = copy.deepcopy(cmlm)
    cross.model.decoder.layers[0].cross_self_attention = True
    assert fast_decoder_model(cross) is cross


def test_wrapping_a_wrapped_decoder_returns_it(cmlm, sources):
    """fast_forward_model of a FastCMLMDecoder is the same wrapper (as for the encoder wrappers): a second
    wrapper nested the first, whose call then failed with an AttributeError."""
    fast = fast_forward_model(cmlm)
    assert isinstance(fast, FastCMLMDecoder) and fast_forward_model(fast) is fast
    assert fast_decoder_model(fast) is fast


def test_pre_layer_norm_decoder_with_its_final_layer_norm(cmlm, sources):
    """A decoder trained with --decoder-normalize-before has a final layer norm after its last layer (the test
    above flips the layers only, so its decoder has none and a fast path that skipped it passed; skipping it
    moves the features by ~2)."""
    pre = copy.deepcopy(cmlm)
    for layer in pre.model.decoder.layers:
        layer.normalize_before = True
    pre.model.decoder.layer_norm = torch.nn.LayerNorm(pre.model.decoder.embed_dim)
    with torch.no_grad():
        pre.model.decoder.layer_norm.weight.uniform_(0.5, 1.5, generator=torch.Generator().manual_seed(0))
        pre.model.decoder.layer_norm.bias.uniform_(-0.5, 0.5, generator=torch.Generator().manual_seed(1))
    _assert_same_features(pre, cmlm, sources)


def test_each_row_reads_its_own_source_on_a_model_that_uses_it(bundled):
    """On the bundled model, whose logits move by ~10 with the source (the tiny CMLM's by ~1e-4: it barely reads
    its source, so only exact comparisons see a row read against another one): as many rows as sources with a
    non-identity index (the adapter must reorder then too), and under static_inputs a second context of the same
    shape (the sources reversed: cached keys and values of the first one would pass a check of shapes)."""
    cmlm = bundled.cmlm
    srcs = [bundled.source_ids(s) for s in ("Ein Hund läuft.", "Zwei Männer spielen Fußball.", "Eine Frau singt.")]
    ctx, rev = cmlm.encode(srcs), cmlm.encode(srcs[::-1])
    rows = torch.stack([cmlm.frame(6)] * 3)
    positions, index = torch.tensor([1, 3, 5]), torch.tensor([1, 1, 0])
    alone = torch.cat([cmlm.masked_logits(rows[n:n + 1], positions[n:n + 1], cmlm.encode([srcs[int(index[n])]]))
                       for n in range(3)])
    other = cmlm.masked_logits(rows, positions, ctx, torch.tensor([2, 0, 1]))
    assert float((other - alone).abs().max()) > 1.0  # the source matters here
    fast = fast_decoder_model(cmlm)
    for model in (cmlm, fast):
        torch.testing.assert_close(model.masked_logits(rows, positions, ctx, index), alone, atol=1e-4, rtol=1e-5)
    want = fast.masked_features_at(rows, torch.arange(3), positions, rev, torch.arange(3))
    with fast.static_inputs(True):
        fast.masked_features_at(rows, torch.arange(3), positions, ctx, torch.arange(3))
        got = fast.masked_features_at(rows, torch.arange(3), positions, rev, torch.arange(3))
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-5)

