"""masked_copies: compiled op == reference on random shapes (incl. N = 0, strided tokens), and
bad input raises an error naming the argument on the op, its wrapper and the reference."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import mhfast.ops as ops
import mhfast.reference as reference
from op_checks import raises_everywhere


def random_case(B: int, T: int, N: int, seed: int, device: str, transposed: bool = False):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 1000, (B, T), generator=g)
    if transposed:  # same values, column-major storage: stride(1) != 1
        tokens = tokens.t().contiguous().t()
    seq_index = torch.randint(0, B, (N,), generator=g)
    pos_index = torch.randint(0, T, (N,), generator=g)
    return tokens.to(device), seq_index.to(device), pos_index.to(device)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(B=st.integers(1, 6), T=st.integers(1, 12), N=st.integers(0, 30), seed=st.integers(0, 2**31),
       transposed=st.booleans(), mask_id=st.integers(-5, 10**6))
def test_matches_reference_cpu(B, T, N, seed, transposed, mask_id):
    tokens, seq_index, pos_index = random_case(B, T, N, seed, "cpu", transposed)
    expected = reference.masked_copies(tokens, seq_index, pos_index, mask_id)
    for fn in (ops.masked_copies, torch.ops.mhfast.masked_copies):
        out = fn(tokens, seq_index, pos_index, mask_id)
        assert out.dtype == torch.int64 and out.is_contiguous()
        assert torch.equal(out, expected)


@pytest.mark.parametrize("B,T,N", [(1, 1, 1), (3, 7, 21), (4, 5, 0), (64, 130, 1000), (2, 3000, 40)])
def test_matches_reference(device, B, T, N):
    tokens, seq_index, pos_index = random_case(B, T, N, B * T + N, device, transposed=True)
    out = ops.masked_copies(tokens, seq_index, pos_index, 7)
    assert out.device.type == device and out.shape == (N, T)
    assert torch.equal(out, reference.masked_copies(tokens, seq_index, pos_index, 7))


def test_strided_index_views(device):
    tokens, seq_index, pos_index = random_case(5, 9, 40, 3, device)
    args = (tokens[::2], seq_index[::2] % 3, pos_index[1::2])  # every argument is a strided view
    assert torch.equal(ops.masked_copies(*args, 0), reference.masked_copies(*args, 0))


def test_empty_tokens_and_index(device):
    tokens = torch.zeros(0, 4, dtype=torch.long, device=device)
    empty = torch.zeros(0, dtype=torch.long, device=device)
    out = ops.masked_copies(tokens, empty, empty, 1)
    assert out.shape == (0, 4)


def test_bad_input(device):
    tokens, seq_index, pos_index = random_case(3, 5, 4, 0, device)
    raw_values = device == "cpu"  # CUDA kernels skip value-range checks (no device sync)
    raises_everywhere("masked_copies", (tokens.float(), seq_index, pos_index, 0), "tokens")
    raises_everywhere("masked_copies", (tokens, seq_index.int(), pos_index, 0), "seq_index")
    raises_everywhere("masked_copies", (tokens, seq_index, pos_index.double(), 0), "pos_index")
    raises_everywhere("masked_copies", (tokens[0], seq_index, pos_index, 0), "tokens")
    raises_everywhere("masked_copies", (tokens, seq_index[:, None], pos_index, 0), "seq_index")
    raises_everywhere("masked_copies", (tokens, seq_index, pos_index[:3], 0), "pos_index")
    for bad in (-1, 3):
        s = seq_index.clone()
        s[2] = bad
        raises_everywhere("masked_copies", (tokens, s, pos_index, 0), "seq_index", raw=raw_values)
    for bad in (-1, 5):
        p = pos_index.clone()
        p[1] = bad
        raises_everywhere("masked_copies", (tokens, seq_index, p, 0), "pos_index", raw=raw_values)
    # Device mismatch: the Python-side check of the wrapper and reference (a "meta" tensor stands in
    # for a second device on CPU-only machines).
    other = "cpu" if device == "cuda" else "meta"
    raises_everywhere("masked_copies", (tokens, seq_index.to(other), pos_index, 0), "seq_index|device",
                      raw=device == "cuda")
    raises_everywhere("masked_copies", (tokens.to(other), seq_index, pos_index, 0), "device|tokens",
                      raw=False)
