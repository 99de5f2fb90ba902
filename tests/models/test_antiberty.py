"""The real AntiBERTy through mhfast: energies via the protocol + mhfast ops equal a straightforward
computation (one full forward per masked position), on real antibody sequences up to a 121-residue VH.

Tolerance: fp32 model; energies agree to 1e-4 RELATIVE (|a - b| <= 1e-4 * max(1, |b|)), logits to
1e-4 absolute. The two computations differ in batching, padding + attention mask, the head-only
path and the summation order, so only float rounding separates them.
"""
from __future__ import annotations

import pytest
import torch

import mhfast
from mhfast import ops, reference
from mhfast.models import hf
from mhfast.models.antiberty import AMINO_ACIDS, load_antiberty
from mhfast.models.base import has_features

pytestmark = pytest.mark.slow  # loads AntiBERTy's weights: ~45 s

# Adalimumab (HUMIRA, fully human) heavy-chain variable domain, 121 residues; trastuzumab VH, 120;
# the first 34 residues of adalimumab's light chain; a short CDR-H3-like peptide.
ADALIMUMAB_VH = ("EVQLVESGGGLVQPGRSLRLSCAASGFTFDDYAMHWVRQAPGKGLEWVSAITWNSGHIDYADSVEGRFTISRDNAKNSLYLQMNSLRAEDTAVYYCAK"
                 "VSYLSTASSLDYWGQGTLVTVSS")
TRASTUZUMAB_VH = ("EVQLVESGGGLVQPGGSLRLSCAASGFNIKDTYIHWVRQAPGKGLEWVARIYPTNGYTRYADSVKGRFTISADTSKNTAYLQMNSLRAEDTAVYYCSR"
                  "WGGDGFYAMDYWGQGTLVTVSS")
SEQUENCES = [ADALIMUMAB_VH, "DIQMTQSPSSLSASVGDRVTITCRASQGIRNYLA", TRASTUZUMAB_VH, "CARDYWGQ"]
BACKENDS = {"ops": ops, "reference": reference}


@pytest.fixture(scope="module")
def lm():
    return load_antiberty()


def straightforward_energies(model, ids: torch.Tensor) -> tuple[float, float, torch.Tensor]:
    """E_raw, E_local of one sequence ([CLS] x [SEP]) from T full forwards, each masked at one residue.

    Independent of mhfast: no padding, no head split, no ops; float64 sums. Returns the masked
    logits too ([T, V], row t = the full forward's logits at residue t).
    """
    T = ids.shape[0] - 2
    pos = torch.arange(1, T + 1)
    rows = ids.repeat(T, 1)
    rows[torch.arange(T), pos] = 4  # [MASK]
    with torch.no_grad():
        logits = model(input_ids=rows).logits[torch.arange(T), pos]  # row t: forward of X masked at t
    target = ids[1:-1]
    lf = logits.double()
    picked = lf.gather(1, target[:, None]).squeeze(1)
    e_raw = -picked.sum().item()
    e_local = -(picked - torch.logsumexp(lf, dim=1)).sum().item()
    return e_raw, e_local, logits


@pytest.fixture(scope="module")
def batch(lm):
    """All sequences in one right-padded batch and their straightforward energies/logits."""
    encoded = [lm.encode(s) for s in SEQUENCES]
    T = max(len(e) for e in encoded)
    tokens = torch.stack([torch.nn.functional.pad(e, (0, T - len(e)), value=lm.pad_id) for e in encoded])
    expected = [straightforward_energies(lm.model, e) for e in encoded]
    return tokens, encoded, expected


def test_encode_decode_roundtrip(lm):
    ids = lm.encode(ADALIMUMAB_VH)
    assert ids[0] == lm.bos_id and ids[-1] == lm.eos_id and len(ids) == len(ADALIMUMAB_VH) + 2
    assert lm.decode(ids) == ADALIMUMAB_VH
    assert lm.decode(lm.encode("ev_ql")) == "EV_QL"
    with pytest.raises(ValueError, match="'B' at position 2"):
        lm.encode("EVBQL")
    assert lm.vocab_size == 25 and lm.special_ids == (0, 1, 2, 3, 4)
    assert sorted(lm.vocab[a] for a in AMINO_ACIDS) == list(range(5, 25))
    assert has_features(lm)


def test_dtype_is_the_callers_and_loading_keeps_the_log_level():
    """load_antiberty(dtype=) gives the model in that precision (one that ignored it ran fp32 at twice the
    memory); the load silences transformers' report for its own duration only: the caller's verbosity and
    progress bars are as they were (left at ERROR, the user's later warnings were hidden)."""
    import transformers

    log = transformers.utils.logging
    before = (log.get_verbosity(), log.is_progress_bar_enabled())
    log.set_verbosity_warning()
    log.enable_progress_bar()
    try:
        half = load_antiberty(dtype=torch.bfloat16)
        assert log.get_verbosity() == log.WARNING and log.is_progress_bar_enabled()
    finally:
        log.set_verbosity(before[0])
        (log.enable_progress_bar if before[1] else log.disable_progress_bar)()
    assert half.dtype == torch.bfloat16 and next(half.model.parameters()).dtype == torch.bfloat16


@pytest.fixture(scope="module")
def protocol_logits(lm, batch):
    """The masked rows of every residue of every sequence, scored once through the protocol."""
    tokens, encoded, _ = batch
    # Energy positions: the residues of each row (not [CLS]/[SEP]/[PAD]).
    seq_index = torch.cat([torch.full((len(e) - 2,), b) for b, e in enumerate(encoded)])
    pos_index = torch.cat([torch.arange(1, len(e) - 1) for e in encoded])
    rows = reference.masked_copies(tokens, seq_index, pos_index, lm.mask_id)
    return seq_index, pos_index, rows, lm.masked_logits(rows, pos_index)


def test_masked_logits_match_full_forward(batch, protocol_logits):
    _, encoded, expected = batch
    logits = protocol_logits[3]
    sizes = [len(e) - 2 for e in encoded]
    for got, (_, _, want) in zip(logits.split(sizes), expected):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-4)


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_energies_match_one_full_forward_per_position(lm, batch, protocol_logits, backend):
    be = BACKENDS[backend]
    tokens, encoded, expected = batch
    seq_index, pos_index, rows, logits = protocol_logits
    assert torch.equal(be.masked_copies(tokens, seq_index, pos_index, lm.mask_id), rows)
    e_raw, e_local, _ = be.gather_energies(logits, tokens[seq_index, pos_index], seq_index, len(encoded))
    worst_rel = worst_abs = 0.0
    for b, (want_raw, want_local, _) in enumerate(expected):
        for got, want in ((e_raw[b].item(), want_raw), (e_local[b].item(), want_local)):
            rel = abs(got - want) / max(1.0, abs(want))
            worst_rel, worst_abs = max(worst_rel, rel), max(worst_abs, abs(got - want))
            assert rel <= 1e-4, (b, got, want)
    print(f"\nAntiBERTy energies via {backend}: worst difference {worst_abs:.2e} abs, {worst_rel:.2e} rel; "
          f"adalimumab VH E_raw={e_raw[0]:.3f} E_local={e_local[0]:.3f}")


def test_fallback_path_matches_head_split(lm, monkeypatch):
    monkeypatch.delitem(hf._HEADS, "BertForMaskedLM")
    with pytest.warns(UserWarning, match="full forward"):
        full = hf.HFMaskedLM(lm.model, mask_id=lm.mask_id, pad_id=lm.pad_id, special_ids=lm.special_ids)
    ids = lm.encode(TRASTUZUMAB_VH[:40])
    rows = torch.stack([ids, torch.nn.functional.pad(lm.encode(TRASTUZUMAB_VH[:20]), (0, 20), value=lm.pad_id)])
    positions = torch.tensor([7, 15])
    rows[torch.arange(2), positions] = lm.mask_id
    torch.testing.assert_close(full.masked_logits(rows, positions), lm.masked_logits(rows, positions),
                               rtol=0, atol=1e-4)


def test_unconditional_samples_are_amino_acid_sequences(lm):
    import mhfast

    result = mhfast.sample(lm, 8, chains=3, epochs=2, burn_in=1, seed=3)
    assert result.tokens.shape == (1, 3, 10)
    assert (result.tokens[..., 0] == lm.bos_id).all() and (result.tokens[..., -1] == lm.eos_id).all()
    for c in range(3):
        seq = lm.decode(result.tokens[0, c])
        assert len(seq) == 8 and set(seq) <= set(AMINO_ACIDS), seq
    assert set(lm.decode(result.best_tokens[0])) <= set(AMINO_ACIDS)


def test_infilling_a_cdr_like_span_never_changes_fixed_positions(lm):
    import mhfast

    init = torch.stack([lm.encode(ADALIMUMAB_VH[:20]), lm.encode(TRASTUZUMAB_VH[:20])])
    free = torch.zeros_like(init, dtype=torch.bool)
    free[:, 11:15] = True  # residues 10..13 (token 0 is [CLS])
    result = mhfast.sample(lm, init=init, free_positions=free, chains=2, epochs=2, burn_in=0, seed=1,
                           record="epoch", proposal_temperature=2.0)
    states = torch.cat([result.history.flatten(0, 2), result.tokens.flatten(0, 1)])
    inputs = torch.cat([init.repeat_interleave(2, 0).repeat(2, 1), init.repeat_interleave(2, 0)])
    fixed = ~free.repeat_interleave(2, 0).repeat(3, 1)
    assert torch.equal(states[fixed], inputs[fixed])
    for s in states:
        assert set(lm.decode(s)) <= set(AMINO_ACIDS)
    # decode drops [CLS]/[SEP]/[PAD]: the ids themselves show that no special token entered the span
    assert not bool(torch.isin(states[~fixed], torch.tensor(lm.special_ids)).any())
    # The span was actually sampled (temperature 2 proposals on 2 inputs x 2 chains x 2 epochs).
    assert bool((states[~fixed] != inputs[~fixed]).any())


def test_decode_names_ids_outside_the_vocabulary_and_a_dtype_may_be_named(lm):
    """decode had shown 99 and -1 as '?' and 7.5 as a residue; load_masked_lm("antiberty", dtype="bfloat16"), the
    name mhfast.sample and the CLI take, had been a bare TypeError of torch's (a review)."""
    from test_fairseq_mlm import assert_decode_names_ids_outside_the_dictionary

    from mhfast.models.loading import load_masked_lm

    assert_decode_names_ids_outside_the_dictionary(lm)
    with pytest.raises(ValueError, match=r"^ids: expected ints, got 7\.5"):
        lm.decode([7.5])
    with pytest.raises(ValueError, match=r"text: '\*' at residue 2 marks a masked residue, which cannot be scored"):
        mhfast.score(lm, ["E*QL"])
    assert load_masked_lm("antiberty", dtype="bfloat16").dtype == torch.bfloat16
    with pytest.raises(ValueError, match=r"^dtype: must be None or one of float32, bfloat16, float16 .* got 'bf16'"):
        load_masked_lm("antiberty", dtype="bf16")
