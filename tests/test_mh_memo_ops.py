"""mh_memo_lookup and mh_memo_update_ (the proposal memo's two ops, mhfast/sampler/memo.py) against their references:
random memos and proposals, strided inputs, empty steps, a long run of lookups and updates kept in step, bad input."""
from __future__ import annotations

import pytest
import torch

import mhfast.ops as ops
import mhfast.reference as reference
from op_checks import raises_everywhere

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def memo_state(C: int, S: int, T: int, V: int, seed: int, device="cpu"):
    """(keys, raw, local, next): a memo with some empty slots (-1) and keys of positions < T, tokens < V."""
    g = torch.Generator().manual_seed(seed)
    keys = torch.randint(0, T * V, (C, S), generator=g)
    keys[torch.rand(C, S, generator=g) < 0.3] = -1
    raw, local = torch.randn(C, S, T, generator=g), torch.randn(C, S, T, generator=g)
    nxt = torch.randint(0, S, (C,), generator=g)
    return tuple(t.to(device) for t in (keys, raw, local, nxt))


def lookup_inputs(keys: torch.Tensor, A: int, T: int, V: int, seed: int):
    """(act, pos, proposed, changed): half of the proposals copy a key the chain holds (a hit where it is
    not empty), the rest are random."""
    g = torch.Generator().manual_seed(seed)
    C, S = keys.shape
    act = torch.randint(0, C, (A,), generator=g)
    pos, proposed = torch.randint(0, T, (A,), generator=g), torch.randint(0, V, (A,), generator=g)
    held = keys.cpu()[act, torch.randint(0, S, (A,), generator=g)]
    copy = (torch.rand(A, generator=g) < 0.5) & (held >= 0)
    pos, proposed = torch.where(copy, held // V, pos), torch.where(copy, held % V, proposed)
    changed = torch.rand(A, generator=g) < 0.8
    return tuple(t.to(keys.device) for t in (act, pos, proposed, changed))


@pytest.mark.parametrize("seed", range(8))
def test_lookup_matches_reference(device, seed):
    g = torch.Generator().manual_seed(seed)
    C, S, T, V = (int(torch.randint(lo, hi, (), generator=g)) for lo, hi in ((1, 40), (1, 9), (1, 30), (2, 60)))
    A = int(torch.randint(0, 2 * C, (), generator=g))
    keys = memo_state(C, S, T, V, seed, device)[0]
    args = (keys, *lookup_inputs(keys, A, T, V, seed), V)
    order, slot = ops.mh_memo_lookup(*args)
    want_order, want_slot = reference.mh_memo_lookup(*args)
    assert order.dtype == torch.bool and order.shape == (2 * A,) and slot.dtype == torch.long
    assert torch.equal(order.cpu(), want_order.cpu()) and torch.equal(slot.cpu(), want_slot.cpu())
    assert not bool((order[:A] & order[A:]).any()) and torch.equal((order[:A] | order[A:]).cpu(), args[4].cpu())


@pytest.mark.parametrize("seed", range(8))
def test_update_matches_reference(device, seed):
    g = torch.Generator().manual_seed(50 + seed)
    C, S, T, V = (int(torch.randint(lo, hi, (), generator=g)) for lo, hi in ((1, 40), (1, 9), (1, 30), (2, 60)))
    n = int(torch.randint(0, C + 1, (), generator=g))
    state = memo_state(C, S, T, V, seed, device)
    ch = torch.randperm(C, generator=g)[:n]
    pos, proposed = torch.randint(0, T, (n,), generator=g), torch.randint(0, V, (n,), generator=g)
    raw_new, local_new = torch.randn(n, T, generator=g), torch.randn(n, T, generator=g)
    accepted = torch.rand(n, generator=g) < 0.3
    num_misses = int(torch.randint(0, n + 1, (), generator=g))
    moves = tuple(t.to(device) for t in (ch, pos, proposed, raw_new, local_new, accepted))
    got, want = [t.clone() for t in state], [t.clone() for t in state]
    ops.mh_memo_update_(*got, *moves, num_misses, V)
    reference.mh_memo_update_(*want, *moves, num_misses, V)
    for name, a, b in zip(("keys", "raw", "local", "next"), got, want):
        assert torch.equal(a.cpu(), b.cpu()), name
    # what the update did: stored rejected misses hold their key and terms, accepted chains are empty
    stored = (~accepted & (torch.arange(n) < num_misses)).tolist()
    keys, raw = got[0].cpu(), got[1].cpu()
    for j, c in enumerate(ch.tolist()):
        if accepted[j]:
            assert bool((keys[c] == -1).all()) and int(got[3][c]) == 0
        elif stored[j]:
            s = (int(state[3][c]) % S)
            assert int(keys[c, s]) == int(pos[j]) * V + int(proposed[j]) and torch.equal(raw[c, s], raw_new[j])
            assert int(got[3][c]) == (s + 1) % S


def test_a_run_of_lookups_and_updates_stays_in_step(device):
    """200 steps of the memo's protocol (lookup, then update with the misses first) on compiled and reference memos
    fed the same proposals and decisions: the same hits and the same memo at every step."""
    C, S, T, V = 6, 3, 4, 3  # few keys (12): repeats are frequent
    g = torch.Generator().manual_seed(7)
    memos = [[t.clone() for t in memo_state(C, S, T, V, 0, device)] for _ in range(2)]
    for m in memos:
        m[0].fill_(-1)
        m[3].zero_()
    hits = 0
    for step in range(200):
        act = torch.randperm(C, generator=g)[:4].to(device)
        pos, proposed = (torch.randint(0, hi, (4,), generator=g).to(device) for hi in (T, V))
        changed = torch.ones(4, dtype=torch.bool, device=device)
        out = [impl.mh_memo_lookup(m[0], act, pos, proposed, changed, V) for impl, m in zip((ops, reference), memos)]
        assert all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(*out)), step
        order = out[0][0]
        local = order.nonzero().squeeze(1) % 4  # misses first, then hits
        num_misses = int(order[:4].sum())
        hits += 4 - num_misses
        accepted = (torch.rand(4, generator=g) < 0.2).to(device)
        terms = torch.randn(4, T, generator=g).to(device)
        for impl, m in zip((ops, reference), memos):
            impl.mh_memo_update_(*m, act[local], pos[local], proposed[local], terms, -terms, accepted, num_misses, V)
        assert all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(*memos)), step
    assert hits > 100


def test_strided_inputs(device):
    keys, raw, local, nxt = memo_state(10, 4, 6, 7, seed=3, device=device)
    act, pos, prop, changed = lookup_inputs(keys, 8, 6, 7, seed=3)
    every_other = lambda t: torch.stack([t, t], 1)[:, 0]  # noqa: E731  (stride 2)
    want = ops.mh_memo_lookup(keys, act, pos, prop, changed, 7)
    got = ops.mh_memo_lookup(keys.t().contiguous().t(), every_other(act), every_other(pos), every_other(prop),
                             every_other(changed), 7)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    ch = torch.tensor([3, 0, 7], device=device)
    terms = torch.randn(6, 3, device=device)
    args = (ch, pos[:3], prop[:3])
    a, b = [t.clone() for t in (keys, raw, local, nxt)], [t.clone() for t in (keys, raw, local, nxt)]
    flags = torch.tensor([False, False, True], device=device)
    ops.mh_memo_update_(*a, *args, terms.t(), 2 * terms.t(), flags, 2, 7)  # transposed term rows
    ops.mh_memo_update_(*b, *args, terms.t().contiguous(), 2 * terms.t().contiguous(), flags, 2, 7)
    assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_empty_steps(device):
    keys, raw, local, nxt = memo_state(3, 2, 4, 5, seed=1, device=device)
    e = torch.zeros(0, dtype=torch.long, device=device)
    order, slot = ops.mh_memo_lookup(keys, e, e, e, e.bool(), 5)
    assert order.shape == (0,) and slot.shape == (0,)
    before = [t.clone() for t in (keys, raw, local, nxt)]
    f = torch.zeros(0, 4, device=device)
    ops.mh_memo_update_(keys, raw, local, nxt, e, e, e, f, f, e.bool(), 0, 5)
    assert all(torch.equal(x, y) for x, y in zip(before, (keys, raw, local, nxt)))


def test_lookup_bad_input(device):
    keys = memo_state(4, 2, 3, 5, seed=2, device=device)[0]
    ok = (keys, *lookup_inputs(keys, 3, 3, 5, seed=2), 5)
    swap = lambda i, x: ok[:i] + (x,) + ok[i + 1:]  # noqa: E731
    raises_everywhere("mh_memo_lookup", swap(0, keys.int()), "keys")
    raises_everywhere("mh_memo_lookup", swap(0, keys[0]), "keys")
    raises_everywhere("mh_memo_lookup", swap(1, ok[1].float()), "act")
    raises_everywhere("mh_memo_lookup", swap(2, ok[2][1:]), "pos")
    raises_everywhere("mh_memo_lookup", swap(3, ok[3][:, None]), "proposed")
    raises_everywhere("mh_memo_lookup", swap(4, ok[4].long()), "changed")
    raises_everywhere("mh_memo_lookup", swap(5, 0), "vocab_size")
    bad = ok[1].clone()
    bad[1] = 4
    raises_everywhere("mh_memo_lookup", swap(1, bad), "act", raw=device == "cpu")
    with pytest.raises(TypeError, match="vocab_size"):
        ops.mh_memo_lookup(*ok[:5], 5.0)
    with pytest.raises(TypeError, match="changed"):
        ops.mh_memo_lookup(*ok[:4], [True] * 3, 5)


def test_update_bad_input(device):
    keys, raw, local, nxt = memo_state(5, 3, 4, 6, seed=4, device=device)
    ch, pos, prop = (torch.tensor(v, device=device) for v in ([4, 1], [0, 3], [5, 2]))
    terms, acc = torch.zeros(2, 4, device=device), torch.tensor([False, True], device=device)
    ok = (keys, raw, local, nxt, ch, pos, prop, terms, terms, acc, 2, 6)
    swap = lambda i, x: ok[:i] + (x,) + ok[i + 1:]  # noqa: E731
    raises_everywhere("mh_memo_update_", swap(0, keys.int()), "keys")
    raises_everywhere("mh_memo_update_", swap(0, keys[:, :0]), "keys")  # no slot
    raises_everywhere("mh_memo_update_", swap(0, keys.t().contiguous().t()), "keys must be contiguous")
    raises_everywhere("mh_memo_update_", swap(1, raw.double()), "raw")
    raises_everywhere("mh_memo_update_", swap(2, local[:, :2]), "local")
    raises_everywhere("mh_memo_update_", swap(3, nxt[:4]), "next")
    raises_everywhere("mh_memo_update_", swap(4, ch[:1]), "pos")
    raises_everywhere("mh_memo_update_", swap(7, terms[:, :3]), "raw_new")
    raises_everywhere("mh_memo_update_", swap(8, terms[:1]), "local_new")
    raises_everywhere("mh_memo_update_", swap(9, acc.long()), "accepted")
    raises_everywhere("mh_memo_update_", swap(10, 3), "num_misses")
    raises_everywhere("mh_memo_update_", swap(10, -1), "num_misses")
    raises_everywhere("mh_memo_update_", swap(11, 0), "vocab_size")
    values = device == "cpu"  # value checks: the CPU kernel and the Python wrappers (no sync on CUDA)
    raises_everywhere("mh_memo_update_", swap(4, torch.tensor([5, 1], device=device)), "ch", raw=values)
    raises_everywhere("mh_memo_update_", swap(4, torch.tensor([1, 1], device=device)), "ch contains 1 twice",
                      raw=values)
    bad_next = nxt.clone()
    bad_next[4] = 3
    raises_everywhere("mh_memo_update_", swap(3, bad_next), "next contains 3", raw=values)
    with pytest.raises(TypeError, match="num_misses"):
        ops.mh_memo_update_(*ok[:10], 2.0, 6)
