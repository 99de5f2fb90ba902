"""The real Sapiens models (sapiens==1.0.5, heavy and light chain) through mhfast's fairseq masked-LM adapter.

* the adapter's masked logits equal the RobertaModel the sapiens package loads itself (same files, fairseq's hub
  loader), and its vocabulary order is the package's;
* ``sapiens.predict_scores`` (the package's own per-position probabilities, what BioPhi humanizes with) is
  reproduced through the adapter, unmasked and with masked residues;
* E_local (mhfast.energy) equals a direct computation (one masked forward per residue, float64 sums);
* the fast forward (last layer at the masked positions) gives the same chains as the full forward;
* MH is exact on an enumerable restriction of the real model: two free residues of a real heavy-chain fragment,
  three allowed amino acids each (AllowedTokens), 9 states; the empirical distribution of n independent chains
  is within the total-variation bound of tests/sampler/test_sampler_exact.py (3 x the expected TV of n draws from the
  target; McDiarmid: a false failure has probability < 1e-6 at this n);
* load errors name what is missing.

Sequences (real antibodies; the Hu-mAb 25 pairs of Marks et al., Bioinformatics 2021, as distributed with the
BioPhi publication, github.com/Merck/BioPhi-2021-publication, data/tasks/humab_25_pairs/pairs/): the mouse 4D5
parent of trastuzumab (Herceptin) VH and VL (parental.fa), and the humanized VH and VL that experimental.fa lists
for Herceptin (the VH is trastuzumab's, as in tests/models/test_antiberty.py).
"""
from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import mhfast
from exact_checks import empirical, tv_and_bound
from mhfast.energy_terms import AllowedTokens
from mhfast.models.fast_forward import fast_forward_model
from mhfast.models.sapiens import AMINO_ACIDS, SapiensMaskedLM, chain_name, load_sapiens

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ROOT = Path(__file__).resolve().parents[2]
MOUSE_4D5_VH = "QVQLQQSGPELVKPGASLKLSCTASGFNIKDTYIHWVKQRPEQGLEWIGRIYPTNGYTRYDPKFQDKATITADTSSNTAYLQVSRLTSEDTAVYYCSRWGGDGFYAMDYWGQGASVTVSS"
MOUSE_4D5_VL = "DIVMTQSHKFMSTSVGDRVSITCKASQDVNTAVAWYQQKPGHSPKLLIYSASFRYTGVPDRFTGNRSGTDFTFTISSVQAEDLAVYYCQQHYTTPPTFGGGTKVEIK"
TRASTUZUMAB_VH = "EVQLVESGGGLVQPGGSLRLSCAASGFNIKDTYIHWVRQAPGKGLEWVARIYPTNGYTRYADSVKGRFTISADTSKNTAYLQMNSLRAEDTAVYYCSRWGGDGFYAMDYWGQGTLVTVSS"
HUMANIZED_4D5_VL = "DIQMTQSPSSLSASVGDRVTITCRASQDVNTAVAWYQQKPGKAPKLLIYSASFLESGVPSRFSGSRSGTDFTLTISSLQPEDFATYYCQQHYTTPTTFGQGTKVEIK"
SEQUENCES = {"H": [MOUSE_4D5_VH, TRASTUZUMAB_VH], "L": [MOUSE_4D5_VL, HUMANIZED_4D5_VL]}


@pytest.fixture(scope="module", params=["H", "L"])
def chain(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def lm(chain) -> SapiensMaskedLM:
    return load_sapiens(chain)


def predict_scores(seq: str, chain: str):
    import sapiens

    with torch.serialization.safe_globals([argparse.Namespace]):
        return sapiens.predict_scores(seq, chain)


def package_model(chain: str):
    """The RobertaModel inside the sapiens package's loaded model (cached by the package)."""
    from sapiens.predict import get_model_path, load_cached_model

    with torch.serialization.safe_globals([argparse.Namespace]):
        model = load_cached_model(get_model_path("v1"), {"H": "checkpoint_vh.pt", "L": "checkpoint_vl.pt"}[chain])
    return model.interface


def test_vocabulary_is_the_packages(lm, chain):
    hub = package_model(chain)
    assert lm.symbols == list(hub.task.target_dictionary.symbols) == list(hub.task.source_dictionary.symbols)
    assert lm.vocab_size == 25 and lm.special_ids == (0, 1, 2, 3, 24) and lm.mask_id == 24
    assert lm.chain == chain and lm.max_length == hub.model.encoder.max_positions() == {"H": 144, "L": 128}[chain]
    assert lm.decode(lm.encode(SEQUENCES[chain][0])) == SEQUENCES[chain][0]
    assert lm.decode(lm.encode("ev*ql_x")) == "EV_QL__"
    with pytest.raises(ValueError, match="'B' at position 2"):
        lm.encode("EVBQL")
    longest = {"H": 142, "L": 126}[chain]  # the longest sequence the model's positions take (with <s>, </s>)
    assert lm.encode("A" * longest).numel() == lm.max_length
    with pytest.raises(ValueError, match="variable region"):
        lm.encode("A" * (longest + 1))
    with pytest.raises(ValueError, match="variable region"):
        lm.encode("A" * 143)


def test_dtype_is_the_callers(chain):
    """load_sapiens(dtype=) gives the model in that precision (one that ignored it ran fp32 at twice the memory)."""
    half = load_sapiens(chain, dtype=torch.bfloat16)
    assert half.dtype == torch.bfloat16 and next(half.model.parameters()).dtype == torch.bfloat16


def test_the_cpu_sub_batches_follow_the_model_width(lm, chain):
    """The CPU rule sizes sub-batches from d (the L2 cache over d floats per row): the adapter's width, 128, is
    what it reads. Before, nothing read a fairseq masked LM's width and Sapiens ran 65,536-token sub-batches."""
    from mhfast.models.base import model_width
    from mhfast.runtime.runner import cpu_max_tokens, default_max_tokens

    assert model_width(lm) == lm.width == 128
    assert default_max_tokens(lm, "cpu") == cpu_max_tokens(128)


def test_masked_logits_equal_the_packages_model(lm, chain):
    model = package_model(chain).model.eval()
    encoded = [lm.encode(s) for s in SEQUENCES[chain]]
    width = max(len(e) for e in encoded)
    g = torch.Generator().manual_seed(0)
    rows, positions, lengths = [], [], []
    for e in encoded:
        for p in torch.randint(1, len(e) - 1, (6,), generator=g).tolist():
            row = torch.full((width,), lm.pad_id)
            row[:len(e)] = e
            row[p] = lm.mask_id
            rows.append(row)
            positions.append(p)
            lengths.append(len(e))
    rows, positions = torch.stack(rows), torch.tensor(positions)
    logits = lm.masked_logits(rows, positions)
    fast = fast_forward_model(lm).masked_logits(rows, positions)
    for n, L in enumerate(lengths):
        with torch.no_grad():
            want = model(rows[n:n + 1, :L])[0][0, positions[n]]
        torch.testing.assert_close(logits[n], want, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(fast[n], want, atol=1e-5, rtol=1e-5)


def test_predict_scores_reproduced(lm, chain):
    columns = [lm.vocab[a] for a in AMINO_ACIDS]
    for seq in (SEQUENCES[chain][0], SEQUENCES[chain][1][:40] + "**" + SEQUENCES[chain][1][42:]):
        df = predict_scores(seq, chain)
        assert list(df.columns) == list(AMINO_ACIDS)
        ids = lm.encode(seq)
        probs = lm.position_logits(ids[None])[0].softmax(-1)[1:-1][:, columns]  # <s>/</s> dropped, as it does
        torch.testing.assert_close(probs, torch.tensor(df.values), atol=1e-6, rtol=1e-5)
    # The masked rows' predictions are the adapter's masked_logits (several masks of one row, one forward).
    at = lm.masked_logits_at(ids[None], torch.tensor([0, 0]), torch.tensor([41, 42])).softmax(-1)[:, columns]
    torch.testing.assert_close(at, torch.tensor(df.values[40:42]), atol=1e-6, rtol=1e-5)


def test_energy_equals_a_direct_masked_computation(lm, chain):
    model = package_model(chain).model.eval()
    got = mhfast.energy(lm, [lm.encode(s) for s in SEQUENCES[chain]])
    for b, seq in enumerate(SEQUENCES[chain]):
        ids = lm.encode(seq)
        T = len(seq)
        rows = ids.repeat(T, 1)
        rows[torch.arange(T), torch.arange(1, T + 1)] = lm.mask_id
        with torch.no_grad():
            logits = model(rows)[0][torch.arange(T), torch.arange(1, T + 1)].double()
        picked = logits.gather(1, ids[1:-1, None]).squeeze(1)
        e_local = -float((picked - logits.logsumexp(1)).sum())
        assert abs(float(got.e_local[b]) - e_local) <= 1e-4 * max(1.0, abs(e_local)), (b, got.e_local[b], e_local)
        assert abs(float(got.e_raw[b]) + float(picked.sum())) <= 1e-4 * max(1.0, float(picked.abs().sum()))


def test_fast_and_full_forwards_give_the_same_chains(lm, chain):
    init = lm.encode(SEQUENCES[chain][0][:24])[None]
    free = torch.zeros_like(init, dtype=torch.bool)
    free[0, 3:20] = True
    runs = [mhfast.sample(lm, init=init, free_positions=free, chains=3, epochs=2, burn_in=0, seed=2,
                          energy="local", proposal_temperature=1.5, forward=f) for f in ("fast", "full")]
    assert torch.equal(runs[0].tokens, runs[1].tokens)
    assert runs[0].model_rows == runs[1].model_rows and float(runs[0].novel_rate.mean()) > 0


def enumerable_restriction(lm: SapiensMaskedLM, start: str = "NK"):
    """Two free residues of a real VH fragment (GFNIKDTY: the start of CDR-H1 with its framework flank), three amino
    acids allowed at each (N and K of the parent, and two others each): ``(init Long[1, W] with ``start`` at the free
    residues, free Bool[1, W], allowed Bool[W, V] for AllowedTokens, the 9 states Long[9, W])``."""
    init = lm.encode(TRASTUZUMAB_VH[25:33])[None]
    free_pos, options = [3, 5], ["NQS", "KRT"]
    init[0, free_pos] = torch.tensor([lm.vocab[a] for a in start])
    allowed = torch.ones(init.shape[1], lm.vocab_size, dtype=torch.bool)
    for p, aas in zip(free_pos, options):
        allowed[p] = False
        allowed[p, [lm.vocab[a] for a in aas]] = True
    states = init.repeat(9, 1)
    for k, (a, b) in enumerate(itertools.product(*options)):
        states[k, free_pos] = torch.tensor([lm.vocab[a], lm.vocab[b]])
    free = torch.zeros_like(init, dtype=torch.bool)
    free[0, free_pos] = True
    return init, free, allowed, states


def assert_chains_within_bound(r: mhfast.SampleResult, states: torch.Tensor, p: torch.Tensor) -> None:
    """The final states of the run's n chains, each one of ``states``, within the TV bound of the target ``p``."""
    n = r.tokens.shape[1]
    p_hat = empirical(states, r.tokens[0])  # (a chain outside the states fails here)
    tv, bound = tv_and_bound(p, p_hat, n)
    assert tv < bound, f"TV {tv:.4f} >= bound {bound:.4f}; p={p.tolist()}, p_hat={p_hat.tolist()}"


@pytest.mark.slow  # 29 s on the 2-core CI machine
def test_mh_is_exact_on_an_enumerable_restriction():
    """Two free residues of a real VH fragment, three amino acids allowed at each: 9 states, enumerated."""
    lm = load_sapiens("H")
    init, free, allowed, states = enumerable_restriction(lm)
    p = torch.softmax(-mhfast.energy(lm, states, energy="local").e_local.double(), 0)
    # 20 epochs: from the parent, every chain's start, the TV of the epochs' states fell 0.39, 0.15 (6), 0.07 (11),
    # 0.02-0.03 from epoch 16 on (1200 chains): the conditionals the proposals come from are far from the joint
    r = mhfast.sample(lm, init=init, free_positions=free, chains=1000, epochs=20, burn_in=2, seed=3, energy="local",
                      extra_energy=AllowedTokens(allowed))
    assert_chains_within_bound(r, states, p)
    assert float(p.max()) < 0.99  # the target is not one state: the test has power


@pytest.mark.slow  # ~20 s on the 2-core CI machine
@pytest.mark.parametrize("tempering", [[0.5, 2.0, 8.0], 3], ids=["fixed-ladder", "tuned-ladder"])
def test_tempered_mh_is_exact_on_an_enumerable_restriction(tempering):
    """Parallel tempering on the real model: the target rung's chains of the 9-state restriction above (from its
    other corner, another seed) within the same bound, with a fixed ladder and one tuned in burn-in. The tabular tests
    hold the tempering code to enumeration; this one adds the real model's paths (the fast forward's cache, swaps
    exchanging cached rows). At target temperature 0.5, a sharper target than the hot rungs': there swaps that are
    always accepted, or accepted with the sign of their exponent flipped, fail it (at temperature 1 they did not)."""
    lm = load_sapiens("H")
    init, free, allowed, states = enumerable_restriction(lm, start="ST")
    p = torch.softmax(-2 * mhfast.energy(lm, states, energy="local").e_local.double(), 0)
    r = mhfast.sample(lm, init=init, free_positions=free, chains=400, epochs=20, burn_in=6, seed=5, energy="local",
                      target_temperature=0.5, extra_energy=AllowedTokens(allowed), tempering=tempering)
    assert float(r.swap_rate.min()) > 0.05  # the replicas do exchange: the swaps are exercised
    assert_chains_within_bound(r, states, p)


def test_load_errors_name_what_is_missing(monkeypatch):
    with pytest.raises(ValueError, match="chain: expected 'H'"):
        load_sapiens("X")
    assert chain_name("kappa") == "L" and chain_name("vh") == "H"
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "sapiens" else real(name, *a))
    with pytest.raises(ImportError, match=r"pip install --no-deps sapiens==1.0.5 pandas"):
        load_sapiens("H")


@pytest.mark.slow  # 17 s on the 2-core CI machine
def test_cli_score_by_name():
    run = subprocess.run([sys.executable, "-m", "mhfast", "score", "--model", "sapiens-l", "-q"], input=MOUSE_4D5_VL
                         + "\n", capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr
    lm = load_sapiens("L")
    want = -float(mhfast.energy(lm, [lm.encode(MOUSE_4D5_VL)]).e_local[0])
    assert abs(float(run.stdout.split()[0]) - want) < 1e-3 and int(run.stdout.split()[2]) == len(MOUSE_4D5_VL)


@pytest.mark.slow  # 40 s on the 2-core CI machine
def test_score_over_two_torchrun_ranks_writes_the_bytes_of_one_process(tmp_path):
    """``torchrun -m mhfast score --model sapiens-h``: the file of one process (gloo over loopback, 2 ranks)."""
    import os
    import socket

    src = tmp_path / "heavy.txt"
    src.write_text("\n".join([MOUSE_4D5_VH, TRASTUZUMAB_VH[:60], MOUSE_4D5_VH[:40], "EVQLV"]) + "\n")
    argv = ["score", "--model", "sapiens-h", "-i", str(src), "-q", "--batch-size", "1", "--per-token"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *sys.path]), OMP_NUM_THREADS="1",
               MHFAST_DIST_TIMEOUT="60")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    one, two = tmp_path / "one.tsv", tmp_path / "two.tsv"
    subprocess.run([sys.executable, "-m", "mhfast", *argv, "-o", str(one)], env=env, check=True, timeout=300,
                   capture_output=True)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                           str(port), "-m", "mhfast", *argv, "-o", str(two)], env=env, timeout=300,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert two.read_bytes() == one.read_bytes() and len(one.read_text().splitlines()) == 4


def test_decode_names_ids_outside_the_vocabulary_and_x_is_named_as_a_mask(lm):
    """Its decode had dropped the parent's id check: 99 and -1 showed as '?', 7.5 as a residue (a review). A
    score of a row with 'X', which Sapiens reads as a mask, had named only '_'/'*'."""
    from test_fairseq_mlm import assert_decode_names_ids_outside_the_dictionary

    assert_decode_names_ids_outside_the_dictionary(lm)
    with pytest.raises(ValueError, match=r"^ids: expected ints, got 7\.5"):
        lm.decode([7.5])
    with pytest.raises(ValueError, match=r"text: 'X' at residue 3 marks a masked residue, which cannot be scored"):
        mhfast.score(lm, ["evXql"])
