"""counter_uniforms: the compiled counter-based RNG equals its PyTorch twin bit for bit (so moving the
sampler's randomness into the op left every chain unchanged: see tests/guards/test_golden.py)."""
from __future__ import annotations

import pytest
import torch

import mhfast.ops as ops
import mhfast.reference as reference
from mhfast.runtime import rng


@pytest.mark.parametrize("n", [0, 1, 5, 1000, 20011])
@pytest.mark.parametrize("with_lanes", [False, True])
def test_compiled_equals_reference(device, n, with_lanes):
    g = torch.Generator().manual_seed(n)
    keys = torch.randint(-(2 ** 63), 2 ** 63 - 1, (n,), generator=g, dtype=torch.int64).to(device)
    lanes = torch.randint(0, 2 ** 40, (n,), generator=g, dtype=torch.int64).to(device) if with_lanes else None
    for counters in [(0, 0, 0), (3, 17, rng.ACCEPT), (2 ** 40, 2 ** 33 + 5, 7)]:
        got = ops.counter_uniforms(keys, *counters, lanes)
        want = reference.counter_uniforms(keys, *counters, lanes)
        assert got.dtype == torch.float32 and got.device == keys.device
        assert torch.equal(got, want)
        if n:
            assert bool(((got > 0) & (got < 1)).all())


def test_shapes_are_kept_and_the_python_hash_is_the_same(device):
    keys = rng.chain_keys(5, torch.arange(6, device=device).view(2, 3), torch.zeros(2, 3, dtype=torch.long,
                                                                                  device=device))
    u = ops.counter_uniforms(keys, 1, 2, rng.PROPOSE)
    assert u.shape == (2, 3)
    assert torch.equal(u, rng.uniforms(5, torch.arange(6, device=device).view(2, 3),
                                       torch.zeros(2, 3, dtype=torch.long, device=device), 1, 2, rng.PROPOSE))


def test_opcheck():
    keys = torch.randint(0, 2 ** 62, (17,), dtype=torch.int64)
    torch.library.opcheck(torch.ops.mhfast.counter_uniforms.default, (keys, 1, 2, 3, None))
    torch.library.opcheck(torch.ops.mhfast.counter_uniforms.default, (keys, 1, 2, 3, keys.abs() % 9))


@pytest.mark.parametrize("fn", [ops.counter_uniforms, reference.counter_uniforms])
@pytest.mark.parametrize("args,exc,match", [
    ((torch.zeros(3), 0, 0, 0, None), TypeError, "keys must be"),
    ((torch.zeros(3, dtype=torch.long), 0, 0, 0, torch.zeros(2, dtype=torch.long)), ValueError, "lanes has shape"),
    ((torch.zeros(3, dtype=torch.long), 0, 0, 0, torch.zeros(3)), TypeError, "lanes must be"),
    ((torch.zeros(3, dtype=torch.long), -1, 0, 0, None), ValueError, ">= 0"),
])
def test_bad_inputs_name_the_argument(fn, args, exc, match):
    with pytest.raises(exc, match=match):
        fn(*args)


def test_unmix_inverts_the_hash_finalizer():
    from mhfast.counter_hash import mix as _mix
    x = torch.cat([torch.randint(-2**63, 2**63 - 1, (10000,), generator=torch.Generator().manual_seed(0)),
                   torch.tensor([0, 1, -1, -2**63, 2**63 - 1])])
    assert torch.equal(rng._unmix(_mix(x)), x) and torch.equal(_mix(rng._unmix(x)), x)


@pytest.mark.parametrize("epoch,step", [(0, 0), (0, 5), (3, 0), (17, 123), (2**40 + 7, 2**33), (2**63 - 2, 2**62)])
@pytest.mark.parametrize("as_tensors", [False, True])
def test_counters_folded_into_keys_draw_the_same_numbers(device, epoch, step, as_tensors):
    """counters_into_keys(k, e, s) drawn at epoch = step = 0 equals k drawn at (e, s), bit for bit, in every
    stream and lane, compiled and reference (what lets one captured CUDA graph replay any step)."""
    g = torch.Generator().manual_seed(epoch % 1000 + step % 1000)
    keys = torch.randint(-2**63, 2**63 - 1, (2000,), generator=g).to(device)
    lanes = torch.randint(0, 1 << 20, (2000,), generator=g).to(device)
    e, s = (torch.tensor(epoch, device=device), torch.tensor(step, device=device)) if as_tensors else (epoch, step)
    folded = rng.counters_into_keys(keys, e, s)
    for op in (ops.counter_uniforms, reference.counter_uniforms):
        for stream in (rng.PROPOSE, rng.ACCEPT, rng.ORDER):
            assert torch.equal(op(folded, 0, 0, stream, None), op(keys, epoch, step, stream, None))
            assert torch.equal(op(folded, 0, 0, stream, lanes), op(keys, epoch, step, stream, lanes))


def test_counters_folded_into_keys_give_the_fused_ops_the_same_proposals(device):
    """mh_propose_site with the folded keys at epoch = step = 0 proposes what it proposes at (epoch, step)."""
    from test_mh_propose_site import site_inputs
    cache, tokens, keys, act, pos, blocked = site_inputs(12, 6, 50, 9, seed=5, device=device)
    for epoch, step in [(0, 0), (4, 2), (31, 7)]:
        want = ops.mh_propose_site(cache, tokens, keys, act, pos, blocked, epoch, step, rng.PROPOSE, 0.9, 0.95)
        got = ops.mh_propose_site(cache, tokens, rng.counters_into_keys(keys, epoch, step), act, pos, blocked, 0, 0,
                                  rng.PROPOSE, 0.9, 0.95)
        for a, b in zip(got, want, strict=True):
            assert torch.equal(a, b)


def test_a_numpy_seed_is_the_python_int():
    """rng.uniforms/chain_keys with np.int64(1) had taken numpy's modulo and raised OverflowError (2**64 in a C
    long)."""
    import numpy as np
    args = (torch.tensor([0, 1]), torch.tensor([0, 3]), 2, 1, rng.ACCEPT)
    for seed in (1, -1, 2 ** 63 - 1):
        assert torch.equal(rng.uniforms(np.int64(seed), *args), rng.uniforms(seed, *args))
