"""The proposal memo (option ``memo``; issue 14: "never forward a row whose result is known"): a proposal whose
sequence a chain of the same input evaluated before (or earlier in the same step) is decided from its remembered
energy terms, without rows. Shown here: the same chains as without the memo, bit for bit, on models whose rows do
not depend on their batch (every option that reaches the dynamic single-site step, feature caches and the CUDA
device included), with fewer rows; the per-position cache stays the current state's after every step (a remembered
proposal that is accepted gets its rows from the memo, or, over the memo's row budget, forwards them); MH with the
memo matches enumeration on a tiny BERT with many hits; the memo itself (shared per input, within a step too, least
recently used out, unfilled reservations forgotten); option errors.

Example:
    python3 -m pytest -q tests/sampler/test_proposal_memo.py
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

import mhfast
from mhfast.models.tabular import ConditionalTabularMLM, TabularMLM
from mhfast.sampler.moves import site_commit
from mhfast.sampler.kernels.mh import SingleSiteMH
from mhfast.runtime.backend import get_backend
from mhfast.sampler import memo as memo_module
from mhfast.sampler.memo import ProposalMemo
from mhfast.sampler.state import rescore


def differing_fields(a: mhfast.SampleResult, b: mhfast.SampleResult) -> list[str]:
    """The tensor fields of two results that differ (bit for bit)."""
    return [f.name for f in dataclasses.fields(a) if isinstance(getattr(a, f.name), torch.Tensor)
            and not torch.equal(getattr(a, f.name), getattr(b, f.name))]


CASES = {
    "default": {},
    "local": {"energy": "local"},
    "cold": {"target_temperature": 0.3},
    "annealed-forced": {"anneal": 0.1, "force_accept_epochs": 2},
    "nucleus": {"top_p": 0.8, "proposal_temperature": 1.5},
    "left-to-right": {"order": "left-to-right"},
    "reference-ops": {"backend": "reference"},
    "small-batches": {"max_tokens_per_batch": 7},
    "one-slot": {"memo": 1},
}
ON = 8  # the memo's entries per chain where a test turns it on


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_chains_fewer_rows(name, device):
    model = TabularMLM.random(num_tokens=4, length=5, seed=3)
    kw = dict(chains=6, epochs=20, burn_in=2, seed=5, device=device, **CASES[name])
    off = mhfast.sample(model, 5, **{**kw, "memo": 0})
    on = mhfast.sample(model, 5, **{"memo": ON, **kw})
    assert differing_fields(off, on) == []
    assert off.memo_hits == 0 and on.memo_hits > 0
    assert on.model_rows < off.model_rows


@pytest.mark.parametrize("features", [False, True])
def test_same_chains_with_a_feature_cache_and_a_source(features):
    """A feature cache (the LM head applied at proposal time) and a conditional model (rows with a source)."""
    model = ConditionalTabularMLM.random(4, [4], num_sources=2, seed=1, features=features)
    kw = dict(source=torch.tensor([0, 1]), chains=5, epochs=15, burn_in=1, seed=2, target_temperature=0.5)
    off, on = mhfast.sample(model, memo=0, **kw), mhfast.sample(model, memo=ON, **kw)
    assert differing_fields(off, on) == [] and on.memo_hits > 0 and on.model_rows < off.model_rows


def test_rows_are_te_minus_one_per_changed_proposal_the_memo_did_not_know(monkeypatch):
    """The row count with the memo: T_e - 1 per proposal X' != X, less T_e - 1 per memo hit. Where the memo keeps
    no model rows (over its budget), plus T_e - 1 per hit that was accepted (its rows forwarded for the cache);
    where it keeps them (the default here), the accepted hits' rows are copied: the same chains, fewer rows."""
    T, chains = 5, 6
    model = TabularMLM.random(num_tokens=4, length=T, seed=3)
    accepted_hits, real_refresh = [], site_commit.refresh_rows

    def refresh(ctx, state, **kw):  # the memo's hits, those that were accepted
        accepted_hits.append(int(kw["accepted"].sum()))
        return real_refresh(ctx, state, **kw)

    monkeypatch.setattr(site_commit, "refresh_rows", refresh)
    kw = dict(chains=chains, epochs=20, burn_in=2, seed=5, target_temperature=0.5, memo=ON)
    kept = mhfast.sample(model, T, **kw)
    assert accepted_hits == []  # no rows forwarded for a remembered X'
    monkeypatch.setattr(memo_module, "ROWS_BUDGET_BYTES", 0)  # terms only
    r = mhfast.sample(model, T, **kw)
    changed = int(r.chain_proposals.sum() - r.chain_accepted.sum() + r.chain_novel.sum())  # tested proposals
    assert r.memo_hits > 0 and sum(accepted_hits) > 0
    assert r.model_rows - r.init_rows == (T - 1) * (changed - r.memo_hits + sum(accepted_hits))
    assert differing_fields(r, kept) == [] and kept.memo_hits == r.memo_hits  # the same chains
    assert kept.model_rows - kept.init_rows == (T - 1) * (changed - r.memo_hits)


@pytest.mark.parametrize("delayed", [None, "window:1"])
@pytest.mark.parametrize("rows_kept", [True, False])
def test_the_cache_is_the_current_states_after_every_step(monkeypatch, rows_kept, delayed):
    """After each step the per-position cache equals a fresh rescore of the state: the rows of a remembered
    proposal that was accepted were copied from the memo (``rows_kept``) or forwarded (the test counts both);
    with delayed acceptance too (a miss's rows come from both stages' forwards)."""
    model = TabularMLM.random(num_tokens=4, length=5, seed=3, features=True)
    refreshed, restored, checked = [], [], []
    real_refresh, real_step, real_rows_of = site_commit.refresh_rows, SingleSiteMH.step, ProposalMemo.rows_of

    def refresh(ctx, state, **kw):  # the memo's hits, those that were accepted
        refreshed.append(int(kw["accepted"].sum()))
        return real_refresh(ctx, state, **kw)

    def rows_of(self, sel):
        rows = real_rows_of(self, sel)
        restored.append(0 if rows is None else sel.numel())
        return rows

    def step(self, state, epoch, move):
        state, info = real_step(self, state, epoch, move)
        fresh = rescore(state, self.ctx.runner, self.ctx.backend, keep_cache=True)
        mask = state.energy_mask
        assert torch.equal(state.cache[mask], fresh.cache[mask])
        assert torch.equal(state.raw_terms, fresh.raw_terms) and torch.equal(state.local_terms, fresh.local_terms)
        checked.append(1)
        return state, info

    monkeypatch.setattr(site_commit, "refresh_rows", refresh)
    monkeypatch.setattr(ProposalMemo, "rows_of", rows_of)
    monkeypatch.setattr(SingleSiteMH, "step", step)
    if not rows_kept:
        monkeypatch.setattr(memo_module, "ROWS_BUDGET_BYTES", 0)
    r = mhfast.sample(model, 5, chains=6, epochs=20, burn_in=2, seed=5, target_temperature=0.7, memo=ON,
                      delayed=delayed)
    assert r.memo_hits > 0 and len(checked) == 20 * 5
    if rows_kept:
        assert refreshed == [] and sum(restored) > 0
    else:
        assert sum(refreshed) > 0 and sum(restored) == 0


@pytest.mark.slow  # 48 s on the 2-core CI machine
def test_mh_with_the_memo_matches_enumeration():
    """Exactness with the memo on a real network: a tiny BERT at a low target temperature, where the chains
    stay put and repeat many proposals (hits are counted), against the enumerated target."""
    from exact_checks import two_layer_bert
    from exact_checks import empirical, tv_and_bound

    lm = two_layer_bert()
    template = lm.frame(3)
    tau, n = 0.5, 2000
    r = mhfast.sample(lm, init=template[None], chains=n, energy="local", epochs=15, burn_in=3, seed=5,
                      target_temperature=tau, memo=ON)
    assert r.memo_hits > n // 4  # hundreds of proposals were repeats (858 here)
    from exact_checks import local_target
    states, p = local_target(lm, template)
    p_tau = torch.softmax(torch.log(p) / tau, dim=0)  # exp(-E/tau) from exp(-E)
    tv, bound = tv_and_bound(p_tau, empirical(states, r.tokens[0]), n)
    assert tv < bound, f"TV {tv:.4f} >= bound {bound:.4f}"


@pytest.mark.slow  # 24 s on the 2-core CI machine
def test_a_real_network_gives_the_same_tokens_with_fewer_rows():
    from exact_checks import two_layer_bert

    lm = two_layer_bert()
    kw = dict(chains=8, epochs=8, burn_in=1, seed=7, energy="local", target_temperature=0.2)
    off, on = mhfast.sample(lm, 5, memo=0, **kw), mhfast.sample(lm, 5, memo=ON, **kw)
    assert torch.equal(off.tokens, on.tokens)  # rounding between batch sizes flips no decision here
    assert torch.allclose(off.energy, on.energy, atol=1e-5)
    assert on.memo_hits > 0 and on.model_rows < off.model_rows


@pytest.mark.parametrize("backend", ["compiled", "reference"])
def test_the_memo_is_shared_per_input_and_evicts_the_least_recently_used(backend):
    """Chains 0 and 1 share an input, chain 2 has its own; one bucket of 8 entries per input (slots 4 x 2 chains)."""
    memo = ProposalMemo(torch.tensor([0, 0, 1]), slots=4, length=3, device="cpu", backend=get_backend(backend))
    assert tuple(memo.stamp.shape) == (2, 8)
    tokens = torch.tensor([[1, 2, 3]] * 3)
    terms = lambda v: torch.full((1, 3), float(v))  # noqa: E731

    def step(*proposals, value=None):
        """One step's lookup of (chain, pos, token) proposals; the misses' terms are stored as value, value + 1, ...
        Returns each proposal's remembered raw term (None: a miss)."""
        ch, pos, tok = (torch.tensor(list(c)) for c in zip(*proposals))
        order = memo.lookup(tokens, ch, pos, tok, torch.ones(len(proposals), dtype=torch.bool))
        miss, hit = order[:len(proposals)], order[len(proposals):]
        assert bool((miss ^ hit).all())
        if value is not None and bool(miss.any()):
            i = miss.nonzero()[:, 0]
            memo.store(i, torch.cat([terms(value + k) for k in range(len(i))]),
                       torch.cat([terms(-value - k) for k in range(len(i))]), num_misses=len(i))
        return [float(memo.terms(torch.tensor([j]))[0][0, 0]) if bool(hit[j]) else None
                for j in range(len(proposals))]

    # chain 1 proposes chain 0's X' in the same step: answered by chain 0's entry; chain 2 (another input) is not
    assert step((0, 1, 5), (1, 1, 5), (2, 1, 5), value=10.0) == [None, 10.0, None]
    assert step((1, 1, 5), (2, 1, 5), (0, 1, 6)) == [10.0, 11.0, None]  # later steps; a new X' misses
    assert step((0, 1, 6)) == [None]  # reserved in the last step but never stored: not remembered
    # fill input 0's bucket: (1, 5) was used two steps ago, (1, 6) comes in again, 6 more take the empty entries
    assert step((0, 1, 6), (0, 0, 4), (0, 0, 5), (0, 0, 6), (0, 2, 4), (0, 2, 5), (0, 2, 6), value=20.0) == [None] * 7
    assert step((1, 1, 5)) == [10.0]  # (1, 5) used again: the oldest are the last 7, (1, 6) first in the bucket
    assert step((0, 0, 7), value=30.0) == [None]  # evicts (1, 6)
    assert step((1, 1, 6), (1, 1, 5), (0, 0, 7)) == [None, 10.0, 30.0]
    # in one step, 9 new sequences for a bucket of 8: the 9th finds every entry in use and is not remembered
    nine = [(0, p, t) for p in range(3) for t in (0, 8, 9)]
    order = memo.lookup(tokens, *(torch.tensor(list(c)) for c in zip(*nine)), torch.ones(9, dtype=torch.bool))
    slot = memo._slot.tolist()
    assert slot[-1] == -1 and sorted(slot[:-1]) == list(range(8)) and order[:9].all()
    assert step((2, 1, 5)) == [11.0]  # the other input's table is untouched by all of this


def test_the_memo_is_on_by_default_where_it_can_act():
    """``memo="auto"`` (the default) is memo=8 for single-site mh with capture none and no extra terms (the same
    chains, hits and rows), and off without an error where the memo cannot act."""
    from mhfast.energy_terms import Hamming

    model = TabularMLM.random(num_tokens=4, length=4, seed=0)
    kw = dict(chains=4, epochs=10, burn_in=1, seed=1, target_temperature=0.5)
    default, eight, off = (mhfast.sample(model, 4, **kw, **m) for m in ({}, {"memo": 8}, {"memo": 0}))
    assert differing_fields(default, eight) == [] and default.memo_hits > 0
    assert off.memo_hits == 0 and default.model_rows < off.model_rows
    for other in (dict(sampler="gibbs"), dict(capture="static"), dict(sampler="block-mh"),
                  dict(extra_energy=[(Hamming(torch.tensor([[0, 1, 2, 3]])), 0.5)])):
        run = {k: v for k, v in {**kw, **other}.items()  # gibbs has no acceptance test: no target temperature
               if not (k == "target_temperature" and other.get("sampler") == "gibbs")}
        assert mhfast.sample(model, 4, **run).memo_hits == 0


@pytest.mark.parametrize("value", [-1, 1.5, True, "on", None, 65, 2 ** 62, 2 ** 70])
def test_memo_must_be_a_count(value):
    """Huge counts too: the memo allocates (chains, memo, T) terms, so 2**62 would be an allocator error."""
    with pytest.raises(ValueError, match=r"memo must be 'auto' or an int in \[0, 64\]"):
        mhfast.sample(TabularMLM.random(3, 2, seed=0), 2, memo=value)


@pytest.mark.parametrize("other", [dict(sampler="gibbs"), dict(capture="static"), dict(sampler="block-mh")])
def test_a_memo_where_it_cannot_act_is_refused(other):
    with pytest.raises(ValueError, match="memo 4 needs sampler mh and capture none"):
        mhfast.sample(TabularMLM.random(3, 2, seed=0), 2, memo=4, **other)


def test_a_memo_with_extra_terms_is_refused():
    from mhfast.energy_terms import Hamming

    with pytest.raises(ValueError, match="memo=4 cannot be used with extra_energy"):
        mhfast.sample(TabularMLM.random(3, 2, seed=0), 2, memo=4,
                      extra_energy=[(Hamming(torch.tensor([[0, 1]])), 0.5)])


@pytest.mark.slow  # 19 s on the 2-core CI machine
def test_the_cli_flag(capsys, tmp_path):
    """``--memo`` on ``mhfast sample``: 8 runs with it (fewer rows, the same samples), as does the default (auto) and
    ``--memo auto``; a bad value is one line and exit 2."""
    from hf_tiny_models import save_tiny_bert_dir
    from mhfast.cli import main

    argv = ["sample", "--model", save_tiny_bert_dir(tmp_path / "bert"), "--length", "6", "--chains", "4",
            "--epochs", "8", "--burn-in", "1", "--seed", "3"]
    outs = []
    for memo in (["--memo", "0"], ["--memo", str(ON)], [], ["--memo", "auto"]):
        assert main(argv + memo) == 0
        outs.append(capsys.readouterr().out.splitlines())
    rows = [int(lines[-1].split("model rows ")[1].split()[0]) for lines in outs]
    assert "memo hits" not in outs[0][-1] and int(outs[1][-1].split("(memo hits ")[1].split(")")[0]) > 0
    samples = [[line for line in lines[:-1] if not line.startswith("# model")] for lines in outs]  # no timings
    summary = [lines[-1].rsplit("  ", 1)[0] for lines in outs]  # without the seconds
    assert samples[0] == samples[1] == samples[2] == samples[3] and rows[1] < rows[0]
    assert summary[1] == summary[2] == summary[3]
    with pytest.raises(SystemExit) as stop:
        main(argv + ["--memo", "x"])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and "--memo" in err[0]
