"""mh_site_rows (the fused rows phase of a single-site MH step: X', its term copies and its model rows) against its
reference and against the unfused op sequence it replaces (equal: the sampler's chains must not change)."""
from __future__ import annotations

import pytest
import torch

import mhfast.ops as ops
import mhfast.reference as reference
from op_checks import raises_everywhere

pytestmark = pytest.mark.usefixtures("one_torch_thread")

MASK = 99


def site_rows_inputs(M: int, T: int, n: int, seed: int, device="cpu", density: float = 0.7):
    """(tokens, energy_mask, raw_terms, local_terms, ch, pos, proposed, num_rows): n distinct chains, each at
    one of its energy positions (as the sampler proposes), num_rows counted on the host as the sampler does."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 50, (M, T), generator=g)
    mask = torch.rand(M, T, generator=g) < density
    raw, local = torch.randn(M, T, generator=g), torch.randn(M, T, generator=g)
    ch = torch.randperm(M, generator=g)[:n]
    pos = torch.randint(0, T, (n,), generator=g)
    mask[ch, pos] = True
    proposed = torch.randint(0, 50, (n,), generator=g)
    num_rows = int(mask.sum(1)[ch].sum()) - n
    return (*(t.to(device) for t in (tokens, mask, raw, local, ch, pos, proposed)), num_rows)


def unfused(tokens, mask, raw, local, ch, pos, proposed, num_rows):
    """The op sequence the sampler ran before the fusion (mhfast/sampler/moves.py)."""
    at = pos[:, None]
    x_new = tokens.index_select(0, ch).scatter_(1, at, proposed[:, None])
    need = mask.index_select(0, ch).scatter_(1, at, False)
    seq, q = torch.nonzero_static(need, size=num_rows).unbind(1)
    rows = ops.masked_copies(x_new, seq, q, MASK)
    return x_new, raw.index_select(0, ch), local.index_select(0, ch), seq, q, rows, x_new[seq, q]


def assert_same(got, want):
    for name, a, b in zip(("x_new", "raw_new", "local_new", "seq", "q", "rows", "targets"), got, want):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert torch.equal(a.cpu(), b.cpu()), name


@pytest.mark.parametrize("seed", range(6))
def test_matches_reference_and_the_unfused_ops(device, seed):
    g = torch.Generator().manual_seed(100 + seed)
    M, T = int(torch.randint(1, 9, (1,), generator=g)), int(torch.randint(1, 24, (1,), generator=g))
    n = int(torch.randint(0, M + 1, (1,), generator=g))
    args = site_rows_inputs(M, T, n, seed, device, density=[0.2, 0.7, 1.0][seed % 3])
    got = ops.mh_site_rows(*args, MASK)
    assert_same(got, reference.mh_site_rows(*args, MASK))
    assert_same(got, unfused(*args))
    assert all(t.device.type == torch.device(device).type for t in got)
    x_new, _, _, seq, q, rows, targets = got
    assert (rows[torch.arange(len(q), device=rows.device), q] == MASK).all()


def test_large_batch_parallel_rows(device):
    """Enough rows for several threads' chunks of the masked copies."""
    args = site_rows_inputs(300, 40, 250, seed=7, device=device, density=0.9)
    assert_same(ops.mh_site_rows(*args, MASK), reference.mh_site_rows(*args, MASK))


def test_strided_inputs(device):
    tokens, mask, raw, local, ch, pos, prop, num_rows = site_rows_inputs(6, 10, 4, seed=3, device=device)
    wide = lambda t: torch.stack([t, t], dim=2)[:, :, 0]  # noqa: E731  (column stride 2)
    args = (wide(tokens), wide(mask), wide(raw), local.t().contiguous().t(), ch, pos, prop, num_rows)
    assert not args[0].is_contiguous() and not args[3].is_contiguous()
    assert_same(ops.mh_site_rows(*args, MASK), reference.mh_site_rows(tokens, mask, raw, local, ch, pos, prop,
                                                                      num_rows, MASK))


def test_no_moving_chains_and_no_rows(device):
    tokens, mask, raw, local, ch, pos, prop, _ = site_rows_inputs(4, 5, 2, seed=1, device=device)
    out = ops.mh_site_rows(tokens, mask, raw, local, ch[:0], pos[:0], prop[:0], 0, MASK)
    assert [tuple(t.shape) for t in out] == [(0, 5), (0, 5), (0, 5), (0,), (0,), (0, 5), (0,)]
    only = torch.zeros_like(mask)  # each chain's one energy position is its proposal: nothing to forward
    only[ch, pos] = True
    out = ops.mh_site_rows(tokens, only, raw, local, ch, pos, prop, 0, MASK)
    assert out[5].shape == (0, 5) and torch.equal(out[0][torch.arange(2, device=ch.device), pos], prop)


def test_bad_input(device):
    tokens, mask, raw, local, ch, pos, prop, num_rows = ok_args = site_rows_inputs(5, 6, 3, seed=2, device=device)
    ok = ok_args[:7]
    raw_values = device == "cpu"
    swap = lambda i, x: ok[:i] + (x,) + ok[i + 1:]  # noqa: E731
    call = lambda args, rows=num_rows: (*args, rows, MASK)  # noqa: E731
    raises_everywhere("mh_site_rows", call(swap(0, tokens.int())), "tokens")
    raises_everywhere("mh_site_rows", call(swap(0, tokens[0])), "tokens")
    raises_everywhere("mh_site_rows", call(swap(1, mask.long())), "energy_mask")
    raises_everywhere("mh_site_rows", call(swap(1, mask[:4])), "energy_mask")
    raises_everywhere("mh_site_rows", call(swap(2, raw.double())), "raw_terms")
    raises_everywhere("mh_site_rows", call(swap(3, local[:, :5])), "local_terms")
    raises_everywhere("mh_site_rows", call(swap(4, ch.float())), "ch")
    raises_everywhere("mh_site_rows", call(swap(5, pos[1:])), "pos")
    raises_everywhere("mh_site_rows", call(swap(6, prop[:, None])), "proposed")
    raises_everywhere("mh_site_rows", call(ok, -1), "num_rows")
    raises_everywhere("mh_site_rows", call(ok, 3 * 5 + 1), "num_rows")  # more than len(ch) * (T - 1)
    raises_everywhere("mh_site_rows", call(ok, num_rows + 1), "num_rows", raw=raw_values)  # a wrong count
    for i, name, bad in ((4, "ch", 5), (4, "ch", -1), (5, "pos", 6)):
        x = ok[i].clone()
        x[1] = bad
        raises_everywhere("mh_site_rows", call(swap(i, x)), name, raw=raw_values)
    with pytest.raises(TypeError, match="num_rows"):
        ops.mh_site_rows(*ok, float(num_rows), MASK)
    with pytest.raises(TypeError, match="energy_mask"):
        ops.mh_site_rows(tokens, mask.tolist(), raw, local, ch, pos, prop, num_rows, MASK)
