"""Delayed acceptance with the context table (option delayed="table:K"; mhfast.sampler.moves.move_table).

Checks: (1) enumeration on tabular models (the TV bound of tests/exact_checks.py) for both energies, memo off and
on, annealed, tempered, with an extra energy term, after a burn-in that fills the table: each run must have used
the frozen table (moves screened with no row), and the table must be imperfect there, so that stage 2 has work;
(2) the table itself: the reverse move reads the same entry with the other sign (antisymmetry: what keeps each
position's kernel reversible), cells are keyed by the other position's token, non-energy positions are never
cells, and keys that would not fit in 62 bits leave the table empty; (3) the option's checks.
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import mhfast
from mhfast.models.tabular import TabularMLM
from mhfast.op_types import SiteProposal
from mhfast.sampler.moves import move_table
from mhfast.sampler.moves.move_table import ContextTable

from exact_checks import N_CHAINS, empirical, enumerate_states, masks, run_and_compare, target_distribution, \
    tv_and_bound

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CASES = [
    ("raw", dict(), dict(energy="raw")),
    ("local", dict(features=True), dict(energy="local")),
    ("raw-coupled", dict(scale=1.2), dict(energy="raw", tau=2.0)),
    ("local-annealed", dict(), dict(energy="local", tau=0.5, start_tau=1.0, anneal=0.1, min_target_temperature=0.5)),
    ("raw-tempered", dict(scale=1.2), dict(energy="raw", tempering=[1.0, 2.5])),
    ("local-tempered-tuned", dict(), dict(energy="local", tempering=3)),
]
MEMO_CASES = [(f"{name}-memo{m}", mk, {**kw, "memo": m}) for name, mk, kw in CASES for m in (0, "auto")]


@pytest.fixture
def table_use(monkeypatch):
    """Counts the proposals the frozen tables knew (screened with no row) and the step's tested proposals."""
    seen = {"known": 0, "asked": 0}
    predict = ContextTable.predict

    def counting(self, state, proposal):
        shift, known = predict(self, state, proposal)
        seen["known"] += int(known.sum())
        seen["asked"] += int(known.numel())
        return shift, known
    monkeypatch.setattr(ContextTable, "predict", counting)
    return seen


@pytest.mark.parametrize("name,model_kwargs,kwargs", MEMO_CASES, ids=[c[0] for c in MEMO_CASES])
def test_table_matches_enumeration(name, model_kwargs, kwargs, device, table_use):
    model = TabularMLM.random(num_tokens=3, length=4, seed=11, **{"scale": 0.5, **model_kwargs})
    template, free = masks(model, 4)
    tv, bound, result = run_and_compare(device, model, template, free, epochs=30, burn_in=5, seed=1,
                                        delayed="table:1", **kwargs)
    assert tv < bound, f"{name}: TV {tv:.4f} >= bound {bound:.4f}"
    assert 0 < result.delayed_accepted < result.delayed_passed < result.delayed_tested  # both stages reject
    assert table_use["known"] > table_use["asked"] // 2  # the frozen table screened most proposals


@pytest.mark.parametrize("memo", [0, "auto"])
@pytest.mark.parametrize("energy", ["raw", "local"])
def test_table_matches_enumeration_where_its_terms_are_large(energy, memo, device, table_use):
    """A sharper model (scale 1, 3 positions, 27 states), where the table's predictions are large enough that a
    table read without the move's sign (dE~ the same both ways: not antisymmetric) fails: TV 0.27 (raw) / 0.19
    (local) against bounds 0.10 / 0.11, memo off. (A table that the memo's hits do not read passes here, since
    nearly every proposal soon is a hit; tests/sampler/test_delayed_memo.py's equal chains catch it.)"""
    model = TabularMLM.random(num_tokens=3, length=3, seed=11, scale=1.0)
    template, free = masks(model, 3)
    tv, bound, result = run_and_compare(device, model, template, free, energy=energy, epochs=60, burn_in=5, seed=1,
                                        delayed="table:1", memo=memo)
    assert tv < bound, f"TV {tv:.4f} >= bound {bound:.4f}"
    assert table_use["known"] > table_use["asked"] // 2
    assert (result.memo_hits > 0) == (memo != 0)


@pytest.mark.parametrize("energy", ["raw", "local"])
def test_table_with_an_extra_energy_term_matches_enumeration(energy, device, table_use):
    model = TabularMLM.random(num_tokens=3, length=4, seed=7, scale=0.5)
    template, free = masks(model, 4)
    states = enumerate_states(model, template, free)
    energy_mask = torch.ones(template.shape[0], dtype=torch.bool)
    ends = lambda t: (t[:, 0] == t[:, -1]).float() * 1.5  # noqa: E731
    p_model = target_distribution(model, states, energy_mask, energy, 1.0)
    weight = torch.softmax(torch.log(p_model) - ends(states).double(), 0)
    result = mhfast.sample(model, init=template[None], free_positions=free[None], chains=N_CHAINS, energy=energy,
                           epochs=30, burn_in=5, seed=3, delayed="table:1", extra_energy=[ends], device=device)
    tv, bound = tv_and_bound(weight, empirical(states, result.tokens[0].cpu()), N_CHAINS)
    assert tv < bound, f"TV {tv:.4f} >= bound {bound:.4f}"
    assert table_use["known"] > 0


def _state(tokens: list[list[int]], mask: torch.Tensor | None = None, energy: str = "raw") -> SimpleNamespace:
    t = torch.tensor(tokens)
    G, T = t.shape
    return SimpleNamespace(inputs=torch.arange(G), tokens=t, energy=energy,
                           energy_mask=torch.ones(G, T, dtype=torch.bool) if mask is None else mask,
                           raw_terms=torch.zeros(G, T), local_terms=torch.zeros(G, T))


def _proposal(ch: list[int], pos: list[int], proposed: list[int]) -> SiteProposal:
    n = len(ch)
    return SiteProposal(torch.tensor(ch), torch.tensor(pos), torch.tensor(proposed), torch.zeros(n), torch.zeros(n))


def test_the_reverse_move_reads_the_same_entry_negated_and_cells_are_keyed_by_the_token():
    table = ContextTable(learn_until=1)
    assert table.learning(0) and not table.learning(1)
    x = _state([[0, 1, 2, 1]])
    new = torch.tensor([[0.0, 0.5, 2.0, -1.0]])  # X with position 0 changed 0 -> 3: terms 1, 2, 3 move
    table.observe(x, _proposal([0], [0], [3]), new, new)
    table.update(x, 1)
    assert table.frozen
    shift, known = table.predict(x, _proposal([0], [0], [3]))
    assert known.tolist() == [True] and shift.tolist() == [pytest.approx(1.5)]
    back = _state([[3, 1, 2, 1]])  # the reverse move from X': the same tokens at j != 0, the other sign
    shift, known = table.predict(back, _proposal([0], [0], [0]))
    assert known.tolist() == [True] and shift.tolist() == [pytest.approx(-1.5)]
    other = _state([[0, 1, 0, 1]])  # position 2 holds another token: its cell is unknown, the others count
    shift, known = table.predict(other, _proposal([0], [0], [3]))
    assert known.tolist() == [True] and shift.tolist() == [pytest.approx(-0.5)]
    for state, p in ((x, _proposal([0], [1], [3])), (x, _proposal([0], [0], [2])), (_state([[1, 2, 2, 2]]),
                                                                                     _proposal([0], [0], [3]))):
        shift, known = table.predict(state, p)  # another position, another move, no cell in common
        assert known.tolist() == [False] and shift.tolist() == [0.0]


def test_means_over_observations_and_non_energy_positions_are_never_cells():
    mask = torch.tensor([[False, True, True, False]])  # a frame: its ends are not energy positions
    x = _state([[5, 1, 2, 6]], mask)
    table = ContextTable(learn_until=0)
    table.observe(x, _proposal([0, 0], [1, 1], [3, 3]), torch.tensor([[9.0, 0, 1.0, 9.0], [9.0, 0, 3.0, 9.0]]),
                  torch.zeros(2, 4))
    table.freeze(x)
    assert table.keys.numel() == 1  # position 2 only (1 is the proposed one; 0 and 3 are the frame)
    shift, known = table.predict(x, _proposal([0], [1], [3]))
    assert shift.tolist() == [pytest.approx(2.0)] and known.tolist() == [True]


def test_keys_that_do_not_fit_leave_the_table_empty(monkeypatch):
    x = _state([[0, 1, 2, 1]])
    table = ContextTable(learn_until=0)
    table.observe(x, _proposal([0], [0], [3]), torch.ones(1, 4), torch.ones(1, 4))
    monkeypatch.setattr(move_table, "KEY_BITS", 4)
    table.freeze(x)
    assert table.frozen and table.keys is None
    shift, known = table.predict(x, _proposal([0], [0], [3]))
    assert known.tolist() == [False] and shift.tolist() == [0.0]


def test_without_burn_in_table_is_influence_is_the_distance_window():
    model = TabularMLM.random(num_tokens=3, length=6, seed=2)
    runs = [mhfast.sample(model, 6, chains=3, epochs=4, burn_in=0, delayed=d, seed=5)
            for d in ("window:1", "influence:1", "table:1")]
    assert all(torch.equal(runs[0].tokens, r.tokens) and runs[0].model_rows == r.model_rows for r in runs[1:])


@pytest.mark.parametrize("value", ["table:", "table:-1", "table:x"])
def test_bad_table_values_are_refused(value):
    model = TabularMLM.random(num_tokens=3, length=4, seed=0)
    with pytest.raises(ValueError, match="delayed"):
        mhfast.sample(model, 4, chains=2, epochs=1, burn_in=0, delayed=value)


def test_table_needs_single_site_mh():
    model = TabularMLM.random(num_tokens=3, length=4, seed=0)
    with pytest.raises(ValueError, match="delayed table:1 needs sampler mh"):
        mhfast.sample(model, 4, chains=2, epochs=1, burn_in=0, delayed="table:1", sampler="block-mh")
