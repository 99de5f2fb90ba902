"""gather_energies: compiled op == reference (fp32/fp16/bf16, -inf/+inf/NaN entries, strided
logits, N = 0), bit-for-bit deterministic whatever the thread count, and bad input is rejected."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import mhfast.ops as ops
import mhfast.reference as reference
from op_checks import raises_everywhere

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# fp32 accumulation on both sides; the kernel's blockwise logsumexp and its exp differ from
# torch's by a few ulp of fp32 per row.
TOL = dict(rtol=2e-5, atol=2e-5, equal_nan=True)


def random_case(N: int, V: int, num_seqs: int, dtype, seed: int, device: str, layout: str = "contiguous",
                neg_inf: float = 0.0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(N, V, generator=g) * 4
    if neg_inf:
        logits[torch.rand(N, V, generator=g) < neg_inf] = float("-inf")
        logits[:, 0] = 0.0  # keep one finite entry per row
    logits = logits.to(dtype)
    if layout == "transposed":  # stride(1) != 1
        logits = logits.t().contiguous().t()
    elif layout == "row_strided":  # rows of a wider buffer: stride(0) > V
        wide = torch.full((N, V + 3), 99.0, dtype=dtype)
        wide[:, :V] = logits
        logits = wide[:, :V]
    targets = torch.randint(0, V, (N,), generator=g)
    seq_index = torch.randint(0, max(num_seqs, 1), (N,), generator=g)
    return logits.to(device), targets.to(device), seq_index.to(device)


def check_matches(logits, targets, seq_index, num_seqs):
    expected = reference.gather_energies(logits, targets, seq_index, num_seqs)
    fns = [ops.gather_energies] + ([torch.ops.mhfast.gather_energies] if logits.device.type == "cpu" else [])
    for fn in fns:
        got = fn(logits, targets, seq_index, num_seqs)
        for g, e in zip(got, expected):
            assert g.dtype == torch.float32 and g.device == logits.device and g.shape == e.shape
            torch.testing.assert_close(g, e, **TOL)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("N,V,num_seqs", [(1, 2, 1), (7, 3, 3), (40, 17, 5), (33, 1000, 4), (3, 50_000, 2),
                                          (0, 11, 0), (0, 11, 3), (5, 2049, 9)])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "row_strided"])
def test_matches_reference(device, dtype, N, V, num_seqs, layout):
    check_matches(*random_case(N, V, num_seqs, dtype, N * V, device, layout), num_seqs)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(N=st.integers(0, 20), V=st.integers(1, 300), extra_seqs=st.integers(0, 3), neg_inf=st.sampled_from([0, 0.5]),
       dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**31))
def test_matches_reference_random_cpu(N, V, extra_seqs, neg_inf, dtype, seed):
    num_seqs = 1 + extra_seqs
    check_matches(*random_case(N, V, num_seqs, dtype, seed, "cpu", neg_inf=neg_inf), num_seqs)


def test_special_values(device):
    # Rows: all -inf (logsumexp -inf), one +inf, a NaN, -inf target in a finite row, huge values.
    inf, nan = float("inf"), float("nan")
    logits = torch.tensor([[-inf, -inf, -inf, -inf],
                           [0.0, inf, 1.0, 2.0],
                           [0.0, 1.0, nan, 2.0],
                           [-inf, 1.0, 2.0, 3.0],
                           [3e38, 3e38, -3e38, 0.0]], device=device)
    targets = torch.tensor([1, 2, 0, 0, 1], device=device)
    seq_index = torch.tensor([0, 1, 2, 3, 4], device=device)
    check_matches(logits, targets, seq_index, 5)
    # Spread over more than one block of the CPU kernel, with +inf / NaN in a later block.
    wide = torch.randn(3, 5000, device=device)
    wide[0, 4500], wide[1, 4500], wide[2, :] = inf, nan, -inf
    check_matches(wide, torch.tensor([0, 1, 2], device=device), torch.tensor([0, 0, 1], device=device), 2)


@pytest.mark.parametrize("N,V", [(257, 3001), (5000, 25)])  # (5000, 25): the small-V path, split
def test_deterministic_across_runs_and_threads(N, V):
    logits, targets, seq_index = random_case(N, V, 7, torch.float32, 5, "cpu")
    threads = torch.get_num_threads()
    try:
        runs = []
        for n in (1, 2, 1, 2):
            torch.set_num_threads(n)
            runs.append(ops.gather_energies(logits, targets, seq_index, 7))
    finally:
        torch.set_num_threads(threads)
    for run in runs[1:]:
        for a, b in zip(runs[0], run):
            assert torch.equal(a.view(torch.int32), b.view(torch.int32))  # same bits


@pytest.mark.parametrize("pattern", ["one_row_per_sequence", "grouped", "shuffled"])
def test_sampler_call_pattern_at_n_16k(device, pattern):
    """N = 16,384 rows: the sampler scores one row per sequence (seq_index = arange(N), num_seqs = N)
    or T rows per sequence in order; the CUDA sums are linear in N for these sorted patterns (a
    binary search per sequence) and fall back to a scan for a shuffled seq_index."""
    N, V = 16_384, 7
    g = torch.Generator().manual_seed(16)
    logits = torch.randn(N, V, generator=g) * 3
    targets = torch.randint(0, V, (N,), generator=g)
    if pattern == "one_row_per_sequence":
        seq_index, num_seqs = torch.arange(N), N
    elif pattern == "grouped":
        seq_index, num_seqs = torch.arange(N // 16).repeat_interleave(16), N // 16
    else:
        seq_index, num_seqs = torch.randperm(N, generator=g) % 512, 512
    check_matches(logits.to(device), targets.to(device), seq_index.to(device), num_seqs)


def test_bad_input(device):
    logits, targets, seq_index = random_case(6, 10, 3, torch.float32, 0, device)
    raw_values = device == "cpu"
    raises_everywhere("gather_energies", (logits.double(), targets, seq_index, 3), "logits")
    raises_everywhere("gather_energies", (logits.long(), targets, seq_index, 3), "logits")
    raises_everywhere("gather_energies", (logits, targets.int(), seq_index, 3), "targets")
    raises_everywhere("gather_energies", (logits, targets, seq_index.float(), 3), "seq_index")
    raises_everywhere("gather_energies", (logits[0], targets, seq_index, 3), "logits")
    raises_everywhere("gather_energies", (logits, targets[:, None], seq_index, 3), "targets")
    raises_everywhere("gather_energies", (logits, targets[:5], seq_index, 3), "targets")
    raises_everywhere("gather_energies", (logits, targets, seq_index[1:], 3), "seq_index")
    raises_everywhere("gather_energies", (logits, targets, seq_index, -1), "num_seqs")
    raises_everywhere("gather_energies", (logits[:, :0], targets, seq_index, 3), "logits")
    for bad in (-1, 10):
        t = targets.clone()
        t[3] = bad
        raises_everywhere("gather_energies", (logits, t, seq_index, 3), "targets", raw=raw_values)
    for bad in (-1, 3):
        s = seq_index.clone()
        s[4] = bad
        raises_everywhere("gather_energies", (logits, targets, s, 3), "seq_index", raw=raw_values)
    other = "cpu" if device == "cuda" else "meta"
    raises_everywhere("gather_energies", (logits, targets.to(other), seq_index, 3), "targets",
                      raw=device == "cuda")


@pytest.mark.parametrize("V", [7, 37, 1001, 30522])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_row_gives_the_same_bits_anywhere_in_the_batch(device, V, dtype):
    """Batch invariance: a row's log-probabilities do not depend on the rows before it. With an odd V the same row
    starts at another offset mod 16 bytes in a batch without its predecessors; the CUDA kernel once summed such rows
    in an alignment-dependent order, 1 ulp apart (an H200, 2026-11-26), which broke the proposal memo's same-chains
    promise there. The sampler's memo and sub-batches forward a row in batches of any size."""
    g = torch.Generator().manual_seed(V)
    logits = (torch.randn(9, V, generator=g) * 3).to(device=device, dtype=dtype)
    targets = torch.randint(0, V, (9,), generator=g).to(device)
    full = ops.gather_energies(logits, targets, torch.arange(9, device=device), 9)[2]
    for k in (1, 2, 3):
        part = logits[k:].clone()  # fresh storage: its row j sits where row j + k did not, mod 16 bytes
        sub = ops.gather_energies(part, targets[k:], torch.arange(9 - k, device=device), 9 - k)[2]
        assert torch.equal(sub, full[k:]), (k, (sub - full[k:]).abs().max())
