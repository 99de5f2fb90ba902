"""mh_propose_site (the fused propose phase of a single-site MH step) against its reference and
against the unfused op sequence it replaces (bit-identical: the sampler's chains must not change)."""
from __future__ import annotations

import pytest
import torch

import mhfast.ops as ops
import mhfast.reference as reference
from op_checks import raises_everywhere

pytestmark = pytest.mark.usefixtures("one_torch_thread")

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def site_inputs(M: int, T: int, V: int, A: int, seed: int, dtype=torch.float32, device="cpu"):
    """(cache, tokens, keys, act, pos, blocked): A distinct chains at random positions, last 2 ids blocked."""
    g = torch.Generator().manual_seed(seed)
    cache = (torch.randn(M, T, V, generator=g) * 3).to(dtype)
    blocked = torch.zeros(V, dtype=torch.bool)
    blocked[V - min(2, V - 1):] = True
    tokens = torch.randint(0, V, (M, T), generator=g)
    keys = torch.randint(-2**62, 2**62, (M,), generator=g)
    act = torch.randperm(M, generator=g)[:A].sort().values
    pos = torch.randint(0, T, (A,), generator=g)
    return tuple(t.to(device) for t in (cache, tokens, keys, act, pos, blocked))


def unfused(cache, tokens, keys, act, pos, blocked, epoch, step, stream, temperature, top_p):
    """The op sequence the sampler ran before the fusion (compiled ops)."""
    logits = cache[act, pos].masked_fill(blocked, float("-inf"))
    current = tokens[act, pos]
    u = ops.counter_uniforms(keys[act], epoch, step, stream)
    prop, lf, lr = ops.propose(logits, current, temperature, top_p, u)
    return prop, lf, lr, prop != current


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("top_p", [1.0, 0.8])
def test_matches_reference_and_unfused(device, dtype, top_p):
    for seed, (M, T, V, A) in enumerate([(7, 5, 11, 4), (3, 9, 40, 3), (20, 3, 200, 13), (1, 1, 2, 1)]):
        args = site_inputs(M, T, V, A, seed, dtype, device)
        scalars = (seed + 1, 2 * seed, 1, 0.7 + 0.1 * seed, top_p)
        got = ops.mh_propose_site(*args, *scalars)
        want = reference.mh_propose_site(*args, *scalars)
        assert torch.equal(got[0], want[0]) and torch.equal(got[3], want[3])
        torch.testing.assert_close(got[1], want[1], rtol=1e-4, atol=1e-4)
        finite = torch.isfinite(want[2])
        assert torch.equal(finite, torch.isfinite(got[2]))
        torch.testing.assert_close(got[2][finite], want[2][finite], rtol=1e-4, atol=1e-4)
        for a, b in zip(got, unfused(*args, *scalars)):  # bit for bit
            assert torch.equal(a, b)
        assert not args[5][got[0]].any(), "proposed a blocked id"


def test_strided_cache_and_repeated_chains(device):
    cache, tokens, keys, act, pos, blocked = site_inputs(6, 4, 17, 5, seed=3, device=device)
    wide = torch.zeros(6, 8, 17, device=device)
    wide[:, ::2] = cache  # dim-1 stride 2
    act = torch.tensor([1, 1, 4, 0, 5], device=device)  # the op never assumes distinct chains
    scalars = (0, 3, 1, 1.0, 1.0)
    got = ops.mh_propose_site(wide[:, ::2], tokens, keys, act, pos, blocked, *scalars)
    want = unfused(cache, tokens, keys, act, pos, blocked, *scalars)
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b)
    transposed = cache.transpose(1, 2).contiguous().transpose(1, 2)  # dim-2 stride != 1: copied once
    for a, b in zip(ops.mh_propose_site(transposed, tokens, keys, act, pos, blocked, *scalars), want):
        assert torch.equal(a, b)


def test_empty_and_all_but_one_blocked(device):
    cache, tokens, keys, act, pos, blocked = site_inputs(4, 3, 6, 4, seed=1, device=device)
    out = ops.mh_propose_site(cache, tokens, keys, act[:0], pos[:0], blocked, 0, 0, 1, 1.0, 1.0)
    assert [t.shape for t in out] == [torch.Size([0])] * 4
    assert [t.dtype for t in out] == [torch.long, torch.float32, torch.float32, torch.bool]
    only = torch.ones(6, dtype=torch.bool, device=device)
    only[2] = False
    prop, lf, _, changed = ops.mh_propose_site(cache, tokens, keys, act, pos, only, 0, 0, 1, 1.0, 0.5)
    assert (prop == 2).all() and (lf == 0).all()
    assert torch.equal(changed, tokens[act, pos] != 2)


def test_bad_input(device):
    cache, tokens, keys, act, pos, blocked = site_inputs(5, 4, 9, 3, seed=2, device=device)
    s = (1, 2, 1, 1.0, 0.9)
    raw_values = device == "cpu"
    ok = (cache, tokens, keys, act, pos, blocked)
    swap = lambda i, x: ok[:i] + (x,) + ok[i + 1:]  # noqa: E731
    raises_everywhere("mh_propose_site", (*swap(0, cache.double()), *s), "cache")
    raises_everywhere("mh_propose_site", (*swap(0, cache[0]), *s), "cache")
    raises_everywhere("mh_propose_site", (*swap(1, tokens.int()), *s), "tokens")
    raises_everywhere("mh_propose_site", (*swap(1, tokens[:4]), *s), "tokens")
    raises_everywhere("mh_propose_site", (*swap(2, keys[1:]), *s), "keys")
    raises_everywhere("mh_propose_site", (*swap(3, act.float()), *s), "act")
    raises_everywhere("mh_propose_site", (*swap(4, pos[1:]), *s), "pos")
    raises_everywhere("mh_propose_site", (*swap(5, blocked.long()), *s), "blocked")
    raises_everywhere("mh_propose_site", (*swap(5, blocked[1:]), *s), "blocked")
    raises_everywhere("mh_propose_site", (*ok, 1, -2, 1, 1.0, 0.9), "step")
    for t in (0.0, float("nan"), 1e300, 1e-320):  # 1e-320: positive, but 0 in fp32
        raises_everywhere("mh_propose_site", (*ok, 1, 2, 1, t, 0.9), "temperature")
    raises_everywhere("mh_propose_site", (*ok, 1, 2, 1, 10 ** 400, 0.9), "temperature", raw=False)
    raises_everywhere("mh_propose_site", (*ok, 1, 2 ** 63, 1, 1.0, 0.9), "step must fit in 64 bits", raw=False)
    raises_everywhere("mh_propose_site", (*ok, 1, 2, 1, 1.0, 1.5), "top_p")
    for i, name, bad in ((3, "act", 5), (3, "act", -1), (4, "pos", 4)):
        x = ok[i].clone()
        x[1] = bad
        raises_everywhere("mh_propose_site", (*swap(i, x), *s), name, raw=raw_values)
    t = tokens.clone()
    t[act[0], pos[0]] = 9
    raises_everywhere("mh_propose_site", (*swap(1, t), *s), r"tokens\[act, pos\]", raw=raw_values)
    for bad in (float("nan"), float("inf")):
        c = cache.clone()
        c[act[2], pos[2], 3] = bad
        raises_everywhere("mh_propose_site", (*swap(0, c), *s), "cache", raw=raw_values)
    c = cache.clone()
    c[act[1], pos[1], :7] = float("-inf")  # the two unblocked... none left: ids 7, 8 are blocked
    raises_everywhere("mh_propose_site", (*swap(0, c), *s), "cache", raw=raw_values)
    c = cache.clone()
    c[act[1], pos[1], 8] = float("nan")  # a blocked id is never read: fine
    ops.mh_propose_site(c, tokens, keys, act, pos, blocked, *s)
    reference.mh_propose_site(c, tokens, keys, act, pos, blocked, *s)
    with pytest.raises(TypeError, match="cache"):
        ops.mh_propose_site(cache.tolist(), tokens, keys, act, pos, blocked, *s)
