"""The moves' own contracts that the sampler's end-to-end tests do not isolate: the unfused MH test with one
inverse temperature per chain row (parallel tempering's beta) and the do-nothing memo's hooks."""
from __future__ import annotations

import pytest
import torch

from mhfast.runtime.backend import get_backend
from mhfast.sampler.memo import NO_MEMO
from mhfast.sampler.moves.accept import accept
from mhfast.sampler.moves.site_types import Picked, SiteDraw
from mhfast.sampler.state import ChainState
from mhfast.sampler.step import StepContext


def _state(M: int = 4, T: int = 3) -> ChainState:
    tokens = torch.arange(M * T).reshape(M, T) % 5
    ones = torch.ones(M, T, dtype=torch.bool)
    return ChainState.create(tokens=tokens, energy_mask=ones, free=ones, inputs=torch.zeros(M, dtype=torch.long),
                             chain_ids=torch.arange(M), ctx_index=None, energy="raw", seed=3)


@pytest.mark.parametrize("backend", ["compiled", "reference"])
def test_accept_takes_one_beta_per_chain_row(backend):
    """A tensor beta [M] equal everywhere decides as the number does; rows with beta 0 accept a worse X' (log alpha
    = 0), a row with a huge beta rejects it."""
    ctx = StepContext(config=None, backend=get_backend(backend), runner=None, uniform_mix=0.0)
    state = _state()
    chains = torch.tensor([0, 2, 3])
    positions, proposed = torch.tensor([[0], [1], [2]]), torch.tensor([[4], [4], [4]])
    worse, logq = torch.full((3,), 5.0), torch.zeros(3)

    def run(beta):
        return accept(ctx, state, chains, positions, proposed, worse, logq, logq, beta, epoch=1, step=2)

    by_number, by_rows = run(0.3), run(torch.full((4,), 0.3, dtype=torch.float64))
    assert torch.equal(by_number[0], by_rows[0]) and torch.equal(by_number[1], by_rows[1])
    tokens, accepted = run(torch.tensor([0.0, 7.0, 1e6, 0.0], dtype=torch.float64))
    assert accepted.tolist() == [True, False, True]
    assert tokens[0, 0] == 4 and torch.equal(tokens[2], state.tokens[2]) and tokens[3, 2] == 4


def test_no_memo_picks_the_changed_proposals_and_keeps_the_terms():
    draw = SiteDraw(torch.tensor([1, 2, 3]), torch.zeros(3), torch.zeros(3), torch.tensor([True, False, True]), None)
    picked = NO_MEMO.pick(torch.zeros(3, 2, dtype=torch.long), None, draw)
    assert picked.index.tolist() == [0, 2] and picked.hits == 0 and picked.misses == 2
    raw, local = torch.ones(2, 2), torch.zeros(2, 2)
    assert NO_MEMO.completed(Picked(picked.index, picked.index_host, 0), raw, local) == (raw, local)
    assert NO_MEMO.select(torch.tensor([0])) is NO_MEMO and NO_MEMO.hits == 0
