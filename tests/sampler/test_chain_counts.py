"""Per-chain proposal counts (``SampleResult.chain_proposals/_accepted/_novel``, ``rates_per_input``).

The pooled rates are checked against the per-chain sums; the per-input rates against independent
one-input runs (``input_ids`` keeps each input's random numbers, so the chains are the same), which
is what makes them usable as per-sentence statistics (e.g. a paired bootstrap over sentences).
"""
from __future__ import annotations

import pytest
import torch

import mhfast
from mhfast.models.tabular import ConditionalTabularMLM, TabularMLM
from mhfast.sampler.state import ChainCounts

SAMPLERS = ["mh", "gibbs", "block-mh", "block-gibbs"]
MODEL = TabularMLM.random(num_tokens=3, length=(2, 3, 4), seed=11)


def _init() -> torch.Tensor:
    m, p = MODEL.mask_id, MODEL.pad_id
    return torch.tensor([[m, m, m, m], [m, m, p, p], [m, m, m, p]])


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_counts_add_up_to_the_pooled_rates(sampler):
    r = mhfast.sample(MODEL, init=_init(), chains=3, epochs=4, burn_in=1, seed=2, sampler=sampler)
    E, B, C = 4, 3, 3
    for x in (r.chain_proposals, r.chain_accepted, r.chain_novel):
        assert x.shape == (E, B, C) and x.dtype == torch.long
    assert bool((r.chain_novel >= 0).all() & (r.chain_novel <= r.chain_accepted).all()
                & (r.chain_accepted <= r.chain_proposals).all())
    proposals = r.chain_proposals.sum(dim=(1, 2)).double()
    assert int(proposals.sum()) == r.proposals
    torch.testing.assert_close(r.chain_accepted.sum(dim=(1, 2)) / proposals, r.acceptance_rate.double())
    torch.testing.assert_close(r.chain_novel.sum(dim=(1, 2)) / proposals, r.novel_rate.double())
    if sampler in ("gibbs", "block-gibbs"):  # Gibbs accepts every proposal
        assert torch.equal(r.chain_accepted, r.chain_proposals)
    else:  # MH rejects some: the counts are not all equal
        assert bool((r.chain_accepted < r.chain_proposals).any())
    if sampler in ("mh", "gibbs"):  # single-site: one proposal per free position and epoch
        lengths = torch.tensor([4, 2, 3])
        assert torch.equal(r.chain_proposals, lengths[None, :, None].expand(E, B, C))


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_rates_per_input_equal_one_input_runs(sampler):
    """Input b's rates in a batch are those of a run of input b alone (same input_ids: same chains)."""
    init = _init()
    kw = dict(chains=4, epochs=5, burn_in=2, seed=7, sampler=sampler)
    whole = mhfast.sample(MODEL, init=init, **kw)
    acc, novel = whole.rates_per_input(first_epoch=2)
    for b in range(init.shape[0]):
        alone = mhfast.sample(MODEL, init=init[b:b + 1, :int((init[b] != MODEL.pad_id).sum())], input_ids=[b], **kw)
        assert torch.equal(whole.chain_proposals[:, b], alone.chain_proposals[:, 0])
        assert torch.equal(whole.chain_accepted[:, b], alone.chain_accepted[:, 0])
        assert torch.equal(whole.chain_novel[:, b], alone.chain_novel[:, 0])
        a_acc, a_novel = alone.rates_per_input(first_epoch=2)
        assert float(acc[b]) == pytest.approx(float(a_acc[0]))
        assert float(novel[b]) == pytest.approx(float(a_novel[0]))
        pooled = alone.chain_accepted[2:].sum() / alone.chain_proposals[2:].sum()
        assert float(a_acc[0]) == pytest.approx(float(pooled))


def test_rates_per_input_differ_between_inputs_and_match_a_recount():
    """A recount from the recorded states: a chain's novel proposals change its state, so a chain
    whose end-of-epoch state differs from the one before made at least one novel proposal."""
    r = mhfast.sample(MODEL, init=_init(), chains=6, epochs=6, burn_in=0, seed=4, record="epoch")
    moved = (r.history[1:] != r.history[:-1]).any(dim=3)  # [E-1, B, C]
    assert bool((r.chain_novel[1:][moved] >= 1).all())
    acc, novel = r.rates_per_input()
    assert acc.shape == novel.shape == (3,)
    assert len(set(acc.tolist())) > 1  # per input, not one pooled number copied


def test_counts_follow_the_kept_length_candidate():
    model = ConditionalTabularMLM.random(num_tokens=3, lengths=(2, 3), num_sources=3, seed=4)
    kw = dict(length_beam=2, chains=2, epochs=3, burn_in=1, seed=9)
    r = mhfast.sample(model, source=torch.tensor([0, 1, 2]), **kw)
    assert r.chain_proposals.shape == (3, 3, 2)
    lengths = r.lengths  # single-site MH: one proposal per free position of the kept candidate
    assert torch.equal(r.chain_proposals, lengths[None, :, None].expand(3, 3, 2))
    one = mhfast.sample(model, source=torch.tensor([1]), input_ids=[1], **kw)
    assert torch.equal(r.chain_accepted[:, 1], one.chain_accepted[:, 0])


def test_rates_per_input_rejects_a_bad_first_epoch():
    r = mhfast.sample(MODEL, 2, chains=2, epochs=2, burn_in=0)
    with pytest.raises(ValueError, match="first_epoch"):
        r.rates_per_input(first_epoch=2)
    with pytest.raises(ValueError, match="first_epoch"):
        r.rates_per_input(first_epoch=-1)


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_counts_reduced_early_equal_counts_reduced_per_epoch(sampler, monkeypatch):
    """Pending entries are folded in whenever there are many (bounded memory): the same counts."""
    kw = dict(init=_init(), chains=3, epochs=3, burn_in=1, seed=5, sampler=sampler)
    per_epoch = mhfast.sample(MODEL, **kw)
    monkeypatch.setattr(ChainCounts, "MAX_PENDING", 2)
    early = mhfast.sample(MODEL, **kw)
    for key in ("chain_proposals", "chain_accepted", "chain_novel"):
        assert torch.equal(getattr(early, key), getattr(per_epoch, key)), key
