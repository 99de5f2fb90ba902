"""torch.library.opcheck on every op (schema, fake kernel, dispatch, AOT) and a
torch.compile(fullgraph=True, backend="aot_eager") smoke test of one MH step made of all four ops."""
from __future__ import annotations

import pytest
import torch

import mhfast.ops as ops
import mhfast.reference as reference
from mhfast.op_types import commit_site_op_args, memo_lookup_op_args, memo_store_op_args
from test_mh_commit_site import betas, commit_inputs
from test_mh_memo_ops import lookup_args, lookup_call, memo_tables, store_call
from test_mh_site_rows import site_rows_inputs


def sample_inputs(device: str):
    g = torch.Generator().manual_seed(0)
    B, T, V = 3, 5, 11
    tokens = torch.randint(0, V, (B, T), generator=g)
    N = B * T
    seq_index = torch.arange(B).repeat_interleave(T)
    pos_index = torch.arange(T).repeat(B)
    logits = torch.randn(N, V, generator=g)
    targets = tokens.reshape(-1)
    d = lambda *ts: tuple(t.to(device) if isinstance(t, torch.Tensor) else t for t in ts)
    f = lambda: torch.randn(B, generator=g)
    return {
        "masked_copies": [d(tokens, seq_index, pos_index, 0), d(tokens[:, :0].new_zeros(2, 0), seq_index[:0],
                                                                pos_index[:0], 3)],
        "gather_energies": [d(logits, targets, seq_index, B), d(logits.half(), targets, seq_index, B + 2),
                            d(logits[:0], targets[:0], seq_index[:0], 0)],
        "propose": [d(logits[:B], tokens[:, 0], 1.0, 1.0, torch.rand(B, generator=g)),
                    d(logits[:B].bfloat16(), tokens[:, 1], 0.7, 0.8, torch.rand(B, generator=g)),
                    d(logits[:B], tokens[:, 2], 1.3, 0.6, torch.rand(B, generator=g), 0.1)],  # uniform_mix
        "mh_accept_": [d(tokens, torch.randint(0, T, (B,), generator=g), torch.randint(0, V, (B,), generator=g),
                         f(), f(), f(), f(), torch.ones(B), torch.rand(B, generator=g)),
                       d(tokens, torch.tensor([[0, -1], [1, 2], [-1, -1]]), torch.randint(0, V, (B, 2), generator=g),
                         f(), f(), f(), f(), torch.ones(B), torch.rand(B, generator=g))],
        "mh_propose_site": [d(torch.randn(B, T, V, generator=g), tokens, torch.arange(B) * 7919, torch.tensor([2, 0]),
                              torch.tensor([4, 1]), torch.arange(V) >= V - 2, 1, 2, 1, 0.9, 1.0),
                            d(torch.randn(B, T, V, generator=g).bfloat16(), tokens, torch.arange(B),
                              torch.tensor([1]), torch.tensor([3]), torch.zeros(V, dtype=torch.bool), 0, 0, 1, 1.0,
                              0.7)],
        "mh_commit_site_": [commit_site_op_args(*commit_inputs(5, 4, 3, 3, seed=0, device=device), 1.0, 1, 2, 2),
                            commit_site_op_args(*commit_inputs(4, 3, 6, 2, seed=1, cache_dtype=torch.bfloat16,
                                                               device=device), None, 0, 0, 2),
                            commit_site_op_args(*commit_inputs(6, 3, 4, 4, seed=2, device=device),
                                                betas(6, 2, device), 0, 3, 2)],  # a beta per chain row
        "mh_site_rows": [(*site_rows_inputs(5, 6, 3, seed=0, device=device), 9),
                         (*site_rows_inputs(4, 3, 0, seed=1, device=device), 2)],
        "mh_memo_lookup_": [memo_lookup_op_args(*lookup_call(lookup_args(device))),
                            memo_lookup_op_args(*lookup_call((*memo_tables(2, 8, 3, device)[:3],
                                                              *lookup_args(device)[3:5],
                                                              *d(torch.zeros(0).long(), torch.zeros(0).long(),
                                                                 torch.zeros(0).long(), torch.zeros(0).bool(), 8,
                                                                 3))))],
        "counter_uniforms": [d(torch.arange(B) * 7919, 0, 1, 2), d(torch.tensor(5), 3, 0, 1),  # one 0-d key
                             # transposed keys, with lanes
                             d(torch.arange(6).reshape(2, 3).t(), 1, 2, 3, torch.arange(6).reshape(3, 2)),
                             d(torch.zeros(0, dtype=torch.long), 0, 0, 0)],
        "mh_memo_store_": [memo_store_op_args(*store_call((
            torch.tensor([[-1, -3, -1, -1], [-3, -1, -1, -1]], device=device),  # reserved at step 1
            *memo_tables(2, 4, 3, device)[3:], *d(torch.tensor([0, 1, 1]), torch.tensor([1, 0, 2]),
                                                  torch.tensor([0, 1, -1]), torch.tensor([0, 1, 2]),
                                                  torch.randn(3, 3, generator=g), torch.randn(3, 3, generator=g), 2,
                                                  1))))],
    }


@pytest.mark.parametrize("op", ["masked_copies", "gather_energies", "propose", "mh_accept_", "mh_propose_site",
                                "mh_commit_site_", "mh_site_rows", "mh_memo_lookup_", "mh_memo_store_",
                                "counter_uniforms"])
def test_opcheck(device, op):
    for args in sample_inputs(device)[op]:
        torch.library.opcheck(getattr(torch.ops.mhfast, op).default, args)


def mh_step(tokens, logits_fn_weight, energy, pos, u_prop, u_acc, beta):
    """One single-site MH step on B chains with a toy "model" (a linear map of one-hot tokens)."""
    B, T = tokens.shape
    rows = torch.arange(B, device=tokens.device)
    masked = ops.masked_copies(tokens, rows, pos, 0, validate=False)
    logits = torch.nn.functional.one_hot(masked, logits_fn_weight.shape[0]).float().sum(1) @ logits_fn_weight
    current = tokens.gather(1, pos[:, None]).squeeze(1)
    proposed, logq_f, logq_r = ops.propose(logits, current, 1.0, 0.9, u_prop, validate=False)
    e_raw, _, _ = ops.gather_energies(logits, proposed, rows, B, validate=False)
    accepted = ops.mh_accept_(tokens, pos, proposed, energy, e_raw, logq_f, logq_r, beta, u_acc, validate=False)
    return accepted


def test_compile_fullgraph_smoke(device):
    g = torch.Generator().manual_seed(1)
    B, T, V = 4, 6, 9
    weight = torch.randn(V, V, generator=g).to(device)
    args = lambda: (torch.randint(1, V, (B, T), generator=torch.Generator().manual_seed(2)).to(device),
                    weight, torch.zeros(B, device=device), torch.tensor([0, 2, 4, 5], device=device),
                    torch.full((B,), 0.5, device=device), torch.full((B,), 0.3, device=device),
                    torch.ones(B, device=device))
    eager_args, compiled_args = args(), args()
    expected = mh_step(*eager_args)
    # aot_eager: the full graph capture (dynamo + fake kernels + functionalization of the in-place
    # mh_accept_) without inductor's C++ codegen, which costs ~1 min of the 2 CI cores.
    compiled = torch.compile(mh_step, fullgraph=True, backend="aot_eager")
    got = compiled(*compiled_args)
    assert torch.equal(got, expected)
    assert torch.equal(compiled_args[0], eager_args[0]) and torch.equal(compiled_args[2], eager_args[2])
