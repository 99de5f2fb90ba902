"""Delayed acceptance with influence-ranked windows (option delayed="influence:K"; mhfast.sampler.moves.influence).

Checks: (1) enumeration on tabular models (the TV bound of tests/exact_checks.py) for both energies, memo off and
on, annealed, after a burn-in that learns the ranking (the kernel after burn-in is fixed, so the target is exact);
(2) the ranking: each frozen set has the distance window's row count at every position and picks the positions
whose terms changed most, the nearest on ties and where nothing was observed; (3) the option's checks.
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import mhfast
from mhfast.models.tabular import TabularMLM
from mhfast.op_types import SiteProposal
from mhfast.sampler.moves.influence import InfluenceWindows

from exact_checks import masks, run_and_compare

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CASES = [
    ("raw-influence1", dict(), dict(energy="raw")),
    ("local-influence1", dict(features=True), dict(energy="local")),
    ("raw-influence1-coupled", dict(scale=1.2), dict(energy="raw", tau=2.0)),
    ("local-influence1-annealed", dict(), dict(energy="local", tau=0.5, start_tau=1.0, anneal=0.1,
                                               min_target_temperature=0.5, epochs=90)),  # (mixes slower at 0.5)
    # parallel tempering (delayed="auto" runs influence:2, so the two meet by default): every rung's replicas
    # feed one ranking per input in burn-in, frozen with the ladder; rung 0 is the target
    ("raw-influence1-tempered", dict(scale=1.2), dict(energy="raw", tempering=[1.0, 2.5])),
    ("local-influence1-tempered-tuned", dict(), dict(energy="local", tempering=3)),
]
MEMO_CASES = [(f"{name}-memo{m}", mk, {**kw, "memo": m}) for name, mk, kw in CASES for m in (0, "auto")]


@pytest.mark.parametrize("name,model_kwargs,kwargs", MEMO_CASES, ids=[c[0] for c in MEMO_CASES])
def test_influence_windows_match_enumeration(name, model_kwargs, kwargs, device):
    model = TabularMLM.random(num_tokens=3, length=4, seed=11, **{"scale": 0.5, **model_kwargs})
    template, free = masks(model, 4)
    tv, bound, result = run_and_compare(device, model, template, free, burn_in=5, seed=1, delayed="influence:1",
                                        **{"epochs": 30, **kwargs})
    assert tv < bound, f"{name}: TV {tv:.4f} >= bound {bound:.4f}"
    assert 0 < result.delayed_accepted <= result.delayed_passed < result.delayed_tested  # a real screen


def _state(G: int, T: int, energy_mask: torch.Tensor) -> SimpleNamespace:
    return SimpleNamespace(inputs=torch.arange(G), tokens=torch.zeros(G, T, dtype=torch.long),
                           energy_mask=energy_mask, raw_terms=torch.zeros(G, T), local_terms=torch.zeros(G, T),
                           energy="raw")


def _proposal(ch: list[int], pos: list[int]) -> SiteProposal:
    n = len(ch)
    return SiteProposal(torch.tensor(ch), torch.tensor(pos), torch.zeros(n, dtype=torch.long), torch.zeros(n),
                        torch.zeros(n))


def test_the_frozen_sets_are_the_most_changed_positions_with_the_window_s_row_count():
    T = 8
    mask = torch.ones(2, T, dtype=torch.bool)
    mask[1, 0] = mask[1, -1] = False  # input 1: a frame (its ends are not energy positions)
    state = _state(2, T, mask)
    inf = InfluenceWindows(k=1, learn_until=3)
    assert inf.learning(0) and inf.learning(2) and not inf.learning(3)
    new = torch.zeros(2, T)
    new[0, 6], new[0, 4], new[1, 5] = 3.0, 1.0, 2.0  # a proposal at 2 moves term 6 most, then 4 (input 0)
    inf.observe(state, _proposal([0, 1], [2, 2]), new, new)
    inf.freeze(state)
    window_rows = lambda g, i: sum(1 for j in range(T) if 0 < abs(j - i) <= 1 and mask[g, j])  # noqa: E731
    for g in range(2):
        for i in range(T):
            assert int(inf.sets[g, i].sum()) == window_rows(g, i) and not bool(inf.sets[g, i, i])
            assert not bool((inf.sets[g, i] & ~mask[g]).any())  # energy positions only
    assert inf.sets[0, 2].nonzero().flatten().tolist() == [4, 6]
    assert inf.sets[1, 2].nonzero().flatten().tolist() == [1, 5]  # 5 first, then a zero-change tie: the nearest
    assert inf.sets[0, 5].nonzero().flatten().tolist() == [4, 6]  # never proposed at: the distance window
    near = inf.near(state, _proposal([0, 1], [2, 0]))
    assert near[0].nonzero().flatten().tolist() == [2, 4, 6] and near[1].nonzero().flatten().tolist() == [0, 1]


def test_influence_without_burn_in_is_the_distance_window():
    model = TabularMLM.random(num_tokens=3, length=6, seed=2)
    runs = [mhfast.sample(model, 6, chains=3, epochs=4, burn_in=0, delayed=d, seed=5) for d in ("window:1",
                                                                                                 "influence:1")]
    assert torch.equal(runs[0].tokens, runs[1].tokens) and runs[0].model_rows == runs[1].model_rows


@pytest.mark.parametrize("delayed", ["influence:1", "early:1"])
def test_the_tables_have_a_row_per_input_whatever_its_id(monkeypatch, delayed):
    """A piece of a long list keeps its inputs' global ids (option input_ids), so an id indexes no table: the sums
    and ranks have one row per input of the call (until 2026-11-30 one per id up to the largest: 100,001 rows of
    T x T for one input with id 100,000), and each input's chains are those it gets alone."""
    import mhfast.sampler.moves.influence as influence

    shapes = []
    real = influence.InfluenceWindows._rank
    monkeypatch.setattr(influence.InfluenceWindows, "_rank", lambda self, state: real(self, state) or
                        shapes.append(tuple(self.rank.shape)))
    model = TabularMLM.random(num_tokens=3, length=6, seed=2)
    kw = dict(chains=3, epochs=4, burn_in=2, delayed=delayed, seed=5, energy="local")
    init = torch.full((2, 6), model.mask_id)
    both = mhfast.sample(model, init=init, input_ids=[7, 100_000], **kw)
    assert set(shapes) == {(2, 6, 6)}, shapes
    alone = mhfast.sample(model, init=init[1:], input_ids=[100_000], **kw)
    assert shapes[-1] == (1, 6, 6) and torch.equal(both.tokens[1], alone.tokens[0])
    assert both.delayed_tested > alone.delayed_tested > 0


@pytest.mark.parametrize("value", ["influence:", "influence:-1", "influence:x"])
def test_bad_influence_values_are_refused(value):
    model = TabularMLM.random(num_tokens=3, length=4, seed=0)
    with pytest.raises(ValueError, match="delayed"):
        mhfast.sample(model, 4, chains=2, epochs=1, burn_in=0, delayed=value)


def test_influence_needs_single_site_mh():
    model = TabularMLM.random(num_tokens=3, length=4, seed=0)
    with pytest.raises(ValueError, match="delayed influence:1 needs sampler mh"):
        mhfast.sample(model, 4, chains=2, epochs=1, burn_in=0, delayed="influence:1", sampler="block-mh")
