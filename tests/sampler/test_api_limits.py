"""Limits in the Python API (issue 37). The model's position limit: ``mhfast.score``, ``mhfast.energy`` and
``mhfast.sample`` refuse a sequence longer than the model's position table with a ValueError naming the sequence,
its length and the model's limit (:func:`mhfast.models.base.check_length`), before any model call: never
transformers' "expanded size of the tensor ... must match" from inside the forward. Integer ranges: a token id or
input id beyond 64 bits is a ValueError naming the argument and the range, never torch's "Overflow when unpacking
long long". The command-line side of both is in tests/cli/test_adversarial_cli.py.
"""
from __future__ import annotations

import re

import pytest
import torch

import mhfast
from hf_tiny_models import ids_for, save_tiny_bert_dir, tiny_model
from mhfast.models.base import check_length, position_limit
from mhfast.models.hf import HFMaskedLM
from mhfast.models.tabular import TabularMLM

KINDS = ["bert", "roberta", "distilbert", "electra", "albert"]  # absolute positions: a limit (esm: rotary, none)


@pytest.fixture(scope="module", params=KINDS)
def lm(request) -> HFMaskedLM:
    return HFMaskedLM(tiny_model(request.param), **ids_for(request.param))


def _row(lm: HFMaskedLM, words: int) -> torch.Tensor:
    """``[bos] + words ordinary tokens + [eos]``: Long[words + 2]."""
    return torch.tensor([lm.bos_id] + [5 + i % 7 for i in range(words)] + [lm.eos_id])


def _message(name: str, length: int, limit: int) -> str:
    return rf"{re.escape(name)} has {length} tokens \(special tokens included\), more than the model's maximum of " \
           rf"{limit} positions"


def test_the_limit_is_the_models_own(lm):
    assert position_limit(lm) == lm.max_length is not None
    assert position_limit(object()) is None
    check_length(lm, lm.max_length, "a row that just fits")


def test_energy_refuses_a_row_longer_than_the_positions(lm):
    limit = lm.max_length
    fits, long = _row(lm, limit - 2), _row(lm, limit - 1)
    assert mhfast.energy(lm, [fits]).e_raw.shape == (1,)
    with pytest.raises(ValueError, match=_message("mhfast.energy: tokens row 1", limit + 1, limit)):
        mhfast.energy(lm, [fits, long])


def test_score_refuses_a_sequence_longer_than_the_positions(lm):
    limit = lm.max_length
    with pytest.raises(ValueError, match=_message("mhfast.score: sequences[2]", limit + 5, limit)):
        mhfast.score(lm, [_row(lm, 3).tolist(), _row(lm, limit - 2).tolist(), _row(lm, limit + 3).tolist()])



def test_tempering_replicas_count_against_the_available_memory(lm, monkeypatch):
    """Every chain runs K replicas in one batch, so ``tempering=K`` multiplies the chains the memory must hold: a
    K that does not fit is refused before allocating, naming both options (hypothesis once drew ``tempering=4201300``
    for 5 chains, and the run allocated until the machine's OOM killer stopped the test suite)."""
    from mhfast.sampler import problem, state

    monkeypatch.setattr(problem, "available_memory", lambda device: 2 ** 30)
    monkeypatch.setattr(state.ChainState, "create", lambda *a, **k: pytest.fail("allocated before the check"))
    with pytest.raises(ValueError, match=r"mhfast.sample: length x chains x tempering: 1 input\(s\) x 5 chains x "
                                         r"4201300 replicas x \d+ positions = \d+ token slots need about [\d.]+ GiB "
                                         r".* more than the 1.0 GiB available on cpu: lower chains or tempering"):
        mhfast.sample(lm, 3, chains=5, tempering=4201300, epochs=1, burn_in=0)
    init = torch.stack([_row(lm, 3), _row(lm, 3)])
    with pytest.raises(ValueError, match=r"mhfast.sample: init x chains x tempering: 2 input\(s\) x 2 chains x "
                                         r"1000000 replicas"):
        mhfast.sample(lm, init=init, chains=2, tempering=10 ** 6, epochs=1, burn_in=0)
    # the same chains without tempering fit: the replicas are what is refused
    monkeypatch.undo()
    assert mhfast.sample(lm, 3, chains=5, epochs=1, burn_in=0).tokens.shape[-2] == 5

def test_score_refuses_a_text_longer_than_the_positions(tmp_path):
    directory = save_tiny_bert_dir(tmp_path / "bert")
    with pytest.raises(ValueError, match=_message("mhfast.score: sequences[1]", 62, 40)):
        mhfast.score(directory, ["a b", "a " * 60])


def test_sample_refuses_init_rows_longer_than_the_positions(lm):
    limit = lm.max_length
    init = torch.full((2, limit + 2), lm.pad_id, dtype=torch.long)
    init[0, :5], init[1] = _row(lm, 3), _row(lm, limit)
    with pytest.raises(ValueError, match=_message("mhfast.sample: init row 1", limit + 2, limit)):
        mhfast.sample(lm, init=init, chains=1, epochs=1, burn_in=0)


def test_sample_refuses_a_length_beyond_the_positions(lm):
    limit = lm.max_length
    with pytest.raises(ValueError, match=_message(f"length {limit - 1} (+2 special tokens)", limit + 1, limit)):
        mhfast.sample(lm, limit - 1, chains=1, epochs=1, burn_in=0)


def test_the_model_itself_refuses_a_wider_row(lm):
    """The adapter's own guard (any caller, e.g. a custom loop): a ValueError, not transformers' RuntimeError."""
    rows = _row(lm, lm.max_length)[None]
    with pytest.raises(ValueError, match="tokens: a row has"):
        lm.masked_logits(rows, torch.tensor([1]))


def test_a_translator_checks_targets_and_sources():
    """The bundled CMLM: target rows against its target positions, sources against its source positions."""
    from mhfast.translation import load_bundled_model

    translator = load_bundled_model()
    limit = position_limit(translator)
    assert limit == translator.cmlm.max_target_positions
    long = " ".join(["dog"] * (limit + 10))
    with pytest.raises(ValueError, match=r"mhfast.score: sequences\[0\] has \d+ tokens .* maximum of 1024 positions"):
        mhfast.score(translator, [long], sources=["ein Hund"])
    with pytest.raises(ValueError, match=r"mhfast.score: sources\[1\] has \d+ tokens .* 1024 source positions"):
        mhfast.score(translator, ["a dog", "a dog"], sources=["ein Hund", " ".join(["Hund"] * 1100)])


# -------------------------------------------------------------------- ids beyond 64 bits
def test_ids_beyond_int64_name_the_argument_and_the_range():
    from mhfast.models.tabular import TabularMLM

    model = TabularMLM.random(num_tokens=3, length=3, seed=0)  # vocabulary [0, 5)
    huge = 2 ** 70
    with pytest.raises(ValueError, match=rf"mhfast.energy: tokens\[1\]: token id {huge} is outside the vocabulary "
                                         r"\[0, 5\)"):
        mhfast.energy(model, [[0, 1, 2], [0, 1, huge]])
    with pytest.raises(ValueError, match=rf"mhfast.score: sequences\[0\]: token id {huge} is outside the vocabulary"):
        mhfast.score(model, [[0, huge, 2]])
    with pytest.raises(ValueError, match=rf"mhfast.sample: input_ids: value {huge} is outside \[0, "):
        mhfast.sample(model, 3, input_ids=[huge], chains=1, epochs=1, burn_in=0)
    with pytest.raises(ValueError, match=r"mhfast.sample: input_ids must be >= 0"):
        mhfast.sample(model, 3, input_ids=[-huge], chains=1, epochs=1, burn_in=0)


def test_tensor_input_ids_meet_the_range_of_list_ones():
    """Each id times length_beam is an int64 RNG index: a list past that range was refused, a tensor wrapped round
    silently (2**62 with length_beam 2 gave indices -2**63, -2**63 + 1; with 4, ids 0 and 2**62 drew the same random
    numbers)."""
    from mhfast.models.tabular import ConditionalTabularMLM

    model = ConditionalTabularMLM.random(num_tokens=3, lengths=(2, 3), num_sources=2, seed=0, scale=0.5)
    for ids in ([2 ** 62], torch.tensor([2 ** 62])):
        with pytest.raises(ValueError, match=r"^mhfast.sample: input_ids: value 4611686018427387904 is outside "
                                             r"\[0, 4611686018427387903\)"):
            mhfast.sample(model, source=torch.tensor([0]), length_beam=2, chains=1, epochs=1, burn_in=0,
                          input_ids=ids)


def test_errors_about_the_rows_name_where_they_came_from():
    """Rows the model's frame made are not the user's init, and free_positions that leave nothing free are not the
    init's fault: the messages said "init contains token id 7" for mhfast.sample(model, 4) and "init leaves no free
    position" for free_positions all False."""
    from mhfast.models.tabular import TabularMLM

    class Framed(TabularMLM):
        def frame(self, length):
            return torch.tensor([7] + [self.mask_id] * (length - 1))  # 7: outside the vocabulary [0, 5)

    framed = Framed(TabularMLM.random(3, 4, seed=0).tables, mask_id=3, pad_id=4)
    with pytest.raises(ValueError, match=r"^mhfast.sample: model.frame\(4\) contains token id 7, outside"):
        mhfast.sample(framed, 4, chains=1, epochs=1, burn_in=0)
    model = TabularMLM.random(3, 3, seed=0)
    with pytest.raises(ValueError, match=r"^mhfast.sample: free_positions leaves no free position to sample"):
        mhfast.sample(model, init=torch.tensor([[0, 1, 2]]), free_positions=torch.zeros(1, 3, dtype=torch.bool),
                      chains=1, epochs=1, burn_in=0)


# -------------------------------------------------------------------- chains x inputs x length against memory
def test_the_state_estimate_counts_the_masked_copies_and_the_cache(lm):
    from mhfast.sampler.problem import BYTES_PER_SLOT, state_bytes

    one = state_bytes(lm, 1, 1, 12)
    assert one > 12 * (BYTES_PER_SLOT + 8 * 12 + 4 * 16)  # state + a masked copy per position + d=16 features each
    assert state_bytes(lm, 2, 5, 12) == 10 * one  # linear in inputs x chains
    assert state_bytes(lm, 1, 5, 40) < 2 ** 20  # the paper's chains at the model's longest rows: well under 1 MiB


def test_chains_beyond_the_available_memory_are_refused_before_allocating(lm, monkeypatch):
    from mhfast.sampler import problem, state

    monkeypatch.setattr(problem, "available_memory", lambda device: 2 ** 30)
    monkeypatch.setattr(state.ChainState, "create", lambda *a, **k: pytest.fail("allocated before the check"))
    with pytest.raises(ValueError, match=r"mhfast.sample: length x chains: 1 input\(s\) x 10000000 chains x \d+ "
                                         r"positions = \d+ token slots need about [\d.]+ GiB .* more than the "
                                         r"1.0 GiB available on cpu: lower chains"):
        mhfast.sample(lm, 3, chains=10 ** 7, epochs=1, burn_in=0)
    init = torch.stack([_row(lm, 3), _row(lm, 3)])
    with pytest.raises(ValueError, match=r"mhfast.sample: init x chains: 2 input\(s\) x 5000000 chains"):
        mhfast.sample(lm, init=init, chains=5 * 10 ** 6, epochs=1, burn_in=0)


def test_the_estimate_counts_the_memo_and_the_traces(monkeypatch):
    """The proposal memo's entries (8 per chain by default) and its rows are most of a small model's chain: the
    estimate had left them out, and runs it let through used 3-6x what it said (measured peak RSS; tempering=10**7
    with 2 chains was killed by the OOM killer)."""
    from mhfast.sampler import problem, state

    class Passed(Exception):
        pass

    def create(*args, **kwargs):
        raise Passed  # the check let the run through

    model = TabularMLM.random(3, 6, seed=0)
    monkeypatch.setattr(problem, "available_memory", lambda device: 200 * 2 ** 20)
    monkeypatch.setattr(state.ChainState, "create", create)
    # about 755 bytes a chain without them (75 MB here), 2.6 kB with the memo's 8 entries and rows (260 MB)
    with pytest.raises(ValueError, match=r"length x chains: 1 input\(s\) x 100000 chains .* more than the 0.2 GiB"):
        mhfast.sample(model, 6, chains=10 ** 5)
    with pytest.raises(Passed):
        mhfast.sample(model, 6, chains=10 ** 5, memo=0)
    with pytest.raises(ValueError, match=r"tempering: 1 input\(s\) x 2 chains x 50000 replicas"):
        mhfast.sample(model, 6, chains=2, tempering=5 * 10 ** 4)

def test_a_huge_token_budget_is_named():
    """max_tokens_per_batch beyond 2**40 is one ValueError naming it (an OverflowError inside the runner)."""
    model = TabularMLM.random(3, 3, seed=0)
    for call in (lambda: mhfast.score(model, [torch.tensor([0, 1, 2])], max_tokens_per_batch=10 ** 23),
                 lambda: mhfast.energy(model, torch.tensor([[0, 1, 2]]), max_tokens_per_batch=10 ** 23),
                 lambda: mhfast.sample(model, 3, chains=2, epochs=2, burn_in=1, max_tokens_per_batch=10 ** 23)):
        with pytest.raises(ValueError, match="max_tokens_per_batch"):
            call()
