"""Delayed acceptance with the proposal memo (mhfast.sampler.moves.delayed; docs/delayed.md).

The memo supplies numbers only: a remembered X' meets both stages with its remembered terms (no rows), so on a
model whose rows do not depend on the rest of their batch (the tabular models) the chains equal those of
``memo=0`` bit for bit, with fewer rows. Checks: (1) that equality over energies, extra terms, annealing,
tempering, an influence ranking learnt in burn-in, a conditional model, a small memo (eviction) and the reference
ops; (2) the same-step duplicate: two chains propose one X', the first (the miss that reserved its entry) fails stage 1, so the second (a hit of that
entry) has no terms unless the miss forwarded all its rows: it does, and without that rule the chains differ;
(3) no entry the memo serves ever holds a stage-1-rejected miss's partial terms: every ready entry equals the
exact terms of its sequence, computed by hand. Enumeration with the memo on: tests/sampler/test_delayed.py.
"""
from __future__ import annotations

import pytest
import torch

import mhfast
from mhfast.models.tabular import ConditionalTabularMLM, TabularMLM
from mhfast.sampler import memo as memo_module
from mhfast.sampler.kernels import mh as mh_kernel
from mhfast.sampler.moves import delayed as delayed_module

from exact_checks import assert_energies_exact, ends_term, masks, terms_by_hand

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _term(tokens: torch.Tensor) -> torch.Tensor:
    return (tokens[:, 0] == tokens[:, -1]).float() * 2.0


SAME_CHAINS = [
    ("raw", dict(energy="raw")),
    ("local", dict(energy="local")),
    ("extra-term", dict(energy="local", extra_energy=[_term])),
    ("annealed", dict(energy="raw", target_temperature=1.0, anneal=0.2, min_target_temperature=0.5)),
    ("tempered", dict(energy="raw", tempering=[1.0, 2.0])),
    ("small-memo", dict(energy="local", memo=1)),  # one entry per chain: reservations evict each other
    ("reference-ops", dict(energy="raw", backend="reference", chains=6, epochs=4)),
    ("wide-window", dict(energy="local", delayed="window:2")),
    # the influence ranking learns from the survivors of stage 1 in burn-in (the same proposals with the memo on or
    # off), so its frozen windows are the same too
    ("influence-burn-in", dict(energy="local", delayed="influence:1", burn_in=3)),
]


@pytest.mark.parametrize("name,kwargs", SAME_CHAINS, ids=[c[0] for c in SAME_CHAINS])
def test_memo_gives_the_same_chains_with_fewer_rows(name, kwargs):
    """Chains started from one sequence repeat proposals (within a step and across steps): with the memo the
    delayed chains are those without it, bit for bit (the same kernel), from fewer forwarded rows."""
    model = TabularMLM.random(num_tokens=4, length=7, seed=5, scale=1.0)
    kw = {**dict(init=torch.tensor([[1, 2, 3, 1, 2, 3, 1]]), chains=24, epochs=8, burn_in=0, seed=9,
                 delayed="window:1", memo="auto"), **kwargs}
    on, off = mhfast.sample(model, **kw), mhfast.sample(model, **{**kw, "memo": 0})
    assert on.memo_hits > 0 and off.memo_hits == 0
    assert torch.equal(on.tokens, off.tokens) and torch.equal(on.energy, off.energy)
    assert (on.delayed_tested, on.delayed_passed, on.delayed_accepted) == (
        off.delayed_tested, off.delayed_passed, off.delayed_accepted)
    assert on.model_rows < off.model_rows, (on.model_rows, off.model_rows)
    assert on.delayed_rows_saved <= off.delayed_rows_saved  # saved by stage 1: a hit had no rows to save


def test_conditional_model_sub_batches_with_the_memo():
    cond = ConditionalTabularMLM.random(num_tokens=3, lengths=(5, 6), num_sources=2, seed=5)
    kw = dict(source=torch.tensor([0, 1]), chains=8, epochs=5, burn_in=0, delayed="window:1", seed=2)
    runs = [mhfast.sample(cond, **kw, **extra) for extra in (
        {"memo": 0}, {}, {"max_tokens_per_batch": 6}, {"max_tokens_per_batch": 6, "backend": "reference"})]
    assert runs[1].memo_hits > 0 and runs[1].model_rows < runs[0].model_rows
    for r in runs[1:]:
        assert torch.equal(r.tokens, runs[0].tokens) and torch.equal(r.energy, runs[0].energy)


def _spy_screen(monkeypatch, seen: list) -> None:
    """Record, per step, the misses forwarded in full although stage 1 rejected them (a same-step hit read them)."""
    original = delayed_module.screen

    def screen(ctx, state, tested, *args, **kwargs):
        sc = original(ctx, state, tested, *args, **kwargs)
        seen.append(int((~sc.passed.cpu()[sc.forwarded_host]).sum()))
        return sc

    monkeypatch.setattr(delayed_module, "screen", screen)


def test_same_step_duplicate_whose_miss_fails_stage_1(monkeypatch):
    """Many chains at one sequence visit the positions in the same order (order left-to-right), so they propose
    the same X' in the same step: one miss reserves its entry, the others hit it. When that miss fails stage 1 it
    still forwards all its rows (the hits need its full terms): the chains equal memo=0's. The rule matters:
    with it removed (no miss forwarded for a hit) the hits read an entry never filled and the chains differ."""
    model = TabularMLM.random(num_tokens=4, length=6, seed=3, scale=1.5)
    kw = dict(init=torch.tensor([[0, 1, 2, 3, 0, 1]]), chains=16, epochs=4, burn_in=0, seed=1, order="left-to-right",
              delayed="window:1", energy="local")
    seen: list = []
    _spy_screen(monkeypatch, seen)
    on = mhfast.sample(model, **kw)
    off = mhfast.sample(model, **kw, memo=0)
    assert sum(seen) > 0, "no same-step duplicate whose miss failed stage 1: the case is not exercised"
    assert torch.equal(on.tokens, off.tokens) and torch.equal(on.energy, off.energy)
    monkeypatch.setattr(memo_module.ProposalMemo, "read_by_hits",
                        lambda self, picked: torch.zeros(picked.misses, dtype=torch.bool))
    broken = mhfast.sample(model, **kw)
    assert not (torch.equal(broken.tokens, off.tokens) and torch.equal(broken.energy, off.energy))


def test_memo_never_serves_partial_terms(monkeypatch):
    """After a run in which many misses failed stage 1 (their window's rows only), every ready entry of the memo
    (stamp >= 0: what a later lookup serves) holds the exact terms of its sequence, computed by hand; the
    rejected misses' entries were left unfilled (an unfilled reservation counts as empty at the next lookup)."""
    kernels = []
    original = mh_kernel.SingleSiteMH.init
    monkeypatch.setattr(mh_kernel.SingleSiteMH, "init", lambda self, state: kernels.append(self) or original(self,
                                                                                                           state))
    model = TabularMLM.random(num_tokens=5, length=8, seed=4, scale=1.5)
    r = mhfast.sample(model, init=torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2]]), chains=12, epochs=6, burn_in=0, seed=2,
                      delayed="window:1", energy="raw")
    assert r.delayed_rows_saved > 0 and r.memo_hits > 0  # misses stopped at stage 1, and the memo served others
    memo = kernels[0].memo
    ready = memo.stamp >= 0
    assert int(ready.sum()) > 0 and int((memo.stamp < -1).sum()) > 0  # filled entries, and unfilled reservations
    raw, local = terms_by_hand(model, memo.stored[ready], torch.float32)
    assert torch.allclose(memo.raw[ready], raw, atol=1e-5) and torch.allclose(memo.local[ready], local, atol=1e-5)


def test_forced_epochs_with_extra_terms_and_the_memo():
    """Delayed acceptance keeps the memo on with an extra energy term; its plain epochs (forced-accept here) score
    remembered proposals too, whose extra terms must be evaluated with the rest (a shape error before)."""
    model = TabularMLM.random(num_tokens=3, length=4, seed=7, scale=0.5)
    template, free = masks(model, 4)
    r = mhfast.sample(model, init=template[None], free_positions=free[None], chains=64, energy="local", epochs=6,
                      burn_in=3, seed=3, delayed="window:1", extra_energy=[ends_term], force_accept_epochs=2)
    assert r.memo_hits > 0 and r.delayed_tested > 0
    assert_energies_exact(model, r, "local", extra=ends_term)


@pytest.mark.parametrize("delayed,seed", [("window:1", 6), ("influence:2", 1), ("cascade:1", 0)])
def test_a_step_whose_survivors_are_all_hits(delayed, seed):
    """A cold target, 24 chains on 3^5 sequences: steps where the only proposals that pass stage 1 are memo hits,
    while misses that a hit reads forwarded all their rows and failed. The survivors then forward no row; the
    commit was handed those misses' rows, numbered as if they survived (an op error; these seeds raised it)."""
    model = TabularMLM.random(num_tokens=3, length=[3, 5], seed=7, scale=0.8)
    r = mhfast.sample(model, 5, chains=24, epochs=5, burn_in=1, seed=seed, delayed=delayed, target_temperature=0.2,
                      energy="raw", order="left-to-right")
    assert r.memo_hits > 0 and r.delayed_tested > 0
    assert_energies_exact(model, r, "raw")
