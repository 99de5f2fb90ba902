"""mh_memo_lookup_ and mh_memo_store_ (the proposal memo's two ops, mhfast/sampler/memo.py) against their
references: random tables and proposals (repeats within a step, across groups, full buckets), strided inputs, empty
steps, a long run of lookups and stores kept in step, bad input."""
from __future__ import annotations

import pytest
import torch

import mhfast.ops as ops
import mhfast.reference as reference
from mhfast.op_types import MemoTable
from op_checks import raises_aliased, raises_everywhere

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def memo_tables(G: int, S: int, L: int, device="cpu"):
    """(stamp, hashes, stored, raw, local) of an empty memo: G groups of S entries of length L."""
    return (torch.full((G, S), -1, dtype=torch.long, device=device), torch.zeros(G, S, dtype=torch.long, device=device),
            torch.zeros(G, S, L, dtype=torch.long, device=device), torch.zeros(G, S, L, device=device),
            torch.zeros(G, S, L, device=device))


def lookup_call(flat: tuple) -> tuple:
    """mh_memo_lookup_'s arguments (a :class:`MemoTable` first) from the flat list (stamp, hashes, stored, tokens,
    group, act, pos, proposed, changed, ways, step); the table's terms, which the lookup never reads, empty."""
    stamp, hashes, stored, tokens, group, *rest = flat
    none = torch.zeros(0)
    return (MemoTable(stamp, hashes, stored, none, none, group), tokens, *rest)


def store_call(flat: tuple) -> tuple:
    """mh_memo_store_'s arguments from the flat list (stamp, raw, local, group, act, slot, sel, raw_new, local_new,
    num_misses, step); the table's hashes and sequences, which the store never reads, empty."""
    stamp, raw, local, group, *rest = flat
    none = torch.zeros(0, dtype=torch.long)
    return (MemoTable(stamp, none, none, raw, local, group), *rest)


def proposals(M: int, A: int, L: int, V: int, g: torch.Generator, device="cpu"):
    """(act, pos, proposed, changed): A proposals of few distinct values, so that sequences repeat."""
    act = torch.randint(0, M, (A,), generator=g)
    pos, proposed = torch.randint(0, L, (A,), generator=g), torch.randint(0, V, (A,), generator=g)
    changed = torch.rand(A, generator=g) < 0.85
    return tuple(t.to(device) for t in (act, pos, proposed, changed))


def run_in_step(device, seed: int, steps: int, G: int, ways: int, buckets: int, M: int, L: int, V: int, A: int) -> int:
    """``steps`` steps of the memo's protocol (lookup, then store of the misses' terms) on compiled and reference
    tables fed the same proposals: the same order, slots and tables after every call. Returns the hits."""
    g = torch.Generator().manual_seed(seed)
    tables = [list(memo_tables(G, ways * buckets, L, device)) for _ in range(2)]
    tokens = torch.randint(0, V, (M, L), generator=g).to(device)
    tokens[M // 2:] = tokens[0].clone()  # half the chains in one state: they propose the same sequences
    group = (torch.arange(M) % G).to(device)
    hits = 0
    for step in range(steps):
        act, pos, prop, changed = proposals(M, A, L, V, g, device)
        out = [impl.mh_memo_lookup_(MemoTable(*t, group), tokens, act, pos, prop, changed, ways, step)
               for impl, t in zip((ops, reference), tables)]
        (order, slot), want = out
        assert order.dtype == torch.bool and order.shape == (2 * A,) and slot.dtype == torch.long
        assert all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(out[0], want)), step
        assert all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(*tables)), step
        assert not bool((order[:A] & order[A:]).any()) and torch.equal((order[:A] | order[A:]).cpu(), changed.cpu())
        misses = order[:A].nonzero().squeeze(1)
        hits += int(order[A:].sum())
        if step % 5 == 4:  # an interrupted step: its misses are never stored, so their reservations are forgotten
            continue
        terms = torch.randn(misses.numel(), L, generator=g).to(device)
        for impl, t in zip((ops, reference), tables):
            impl.mh_memo_store_(MemoTable(*t, group), act, slot, misses, terms, -terms, misses.numel(), step)
        assert all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(*tables)), step
    return hits


@pytest.mark.parametrize("seed", range(6))
def test_lookup_and_store_match_reference_over_random_shapes(device, seed):
    g = torch.Generator().manual_seed(seed)
    G, ways, buckets, L, V = (int(torch.randint(lo, hi, (), generator=g))
                              for lo, hi in ((1, 4), (1, 9), (1, 5), (1, 12), (2, 6)))
    M = G * int(torch.randint(1, 6, (), generator=g))
    A = int(torch.randint(0, 2 * M + 1, (), generator=g))
    run_in_step(device, seed, steps=12, G=G, ways=ways, buckets=buckets, M=M, L=L, V=V, A=A)


def test_a_long_run_stays_in_step_and_hits(device):
    """200 steps, few distinct sequences (L=3, V=3), small buckets: hits within a step and across steps, evictions,
    full buckets (slot -1) and unfilled reservations all occur, and both implementations agree throughout."""
    assert run_in_step(device, 7, steps=200, G=2, ways=2, buckets=3, M=8, L=3, V=3, A=6) > 200


def test_hits_read_the_terms_stored_for_their_sequence(device):
    """Through the memo's own tables: a hit's entry holds exactly its X' (tokens), and the terms stored for it."""
    g = torch.Generator().manual_seed(3)
    stamp, hashes, stored, raw, local = memo_tables(2, 16, 4, device)
    tokens = torch.randint(0, 3, (6, 4), generator=g).to(device)
    group = torch.tensor([0, 0, 0, 1, 1, 1], device=device)
    table = MemoTable(stamp, hashes, stored, raw, local, group)
    truth: dict[tuple[int, tuple[int, ...]], float] = {}
    hits = 0
    for step in range(60):
        act, pos, prop, changed = proposals(6, 5, 4, 3, g, device)
        order, slot = ops.mh_memo_lookup_(table, tokens, act, pos, prop, changed, 4, step)
        seqs = []
        for a in range(5):
            x = tokens[act[a]].tolist()
            x[int(pos[a])] = int(prop[a])
            seqs.append((int(group[act[a]]), tuple(x)))
        misses = order[:5].nonzero().squeeze(1)
        values = torch.tensor([float(hash(seqs[j]) % 1000) for j in misses.tolist()], device=device)
        ops.mh_memo_store_(table, act, slot, misses, values[:, None].expand(-1, 4), values[:, None].expand(-1, 4),
                           misses.numel(), step)
        for j in misses.tolist():
            truth[seqs[j]] = float(hash(seqs[j]) % 1000)
        for a in order[5:].nonzero().squeeze(1).tolist():
            gr, s = seqs[a][0], int(slot[a])
            assert tuple(stored[gr, s].tolist()) == seqs[a][1] and float(raw[gr, s, 0]) == truth[seqs[a]]
            hits += 1
    assert hits > 0  # (the loop above checks the hits: there were some)


def test_strided_inputs(device):
    g = torch.Generator().manual_seed(5)
    tables = memo_tables(2, 8, 5, device)
    tokens = torch.randint(0, 4, (6, 5), generator=g).to(device)
    group = torch.tensor([0, 1, 0, 1, 0, 1], device=device)
    act, pos, prop, changed = proposals(6, 7, 5, 4, g, device)
    every_other = lambda t: torch.stack([t, t], 1)[:, 0]  # noqa: E731  (stride 2)
    a, b = [t.clone() for t in tables], [t.clone() for t in tables]
    want = ops.mh_memo_lookup_(MemoTable(*a, group), tokens, act, pos, prop, changed, 4, 0)
    got = ops.mh_memo_lookup_(MemoTable(*b, every_other(group)), tokens.t().contiguous().t(), every_other(act),
                              every_other(pos), every_other(prop), every_other(changed), 4, 0)
    assert all(torch.equal(x, y) for x, y in zip(got, want, strict=True)) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    misses = want[0][:7].nonzero().squeeze(1)
    terms = torch.randn(5, misses.numel(), device=device)
    ops.mh_memo_store_(MemoTable(*a, group), act, want[1], misses, terms.t(), 2 * terms.t(),
                       misses.numel(), 0)  # transposed term rows
    ops.mh_memo_store_(MemoTable(*b, every_other(group)), every_other(act), every_other(want[1]),
                       every_other(misses), terms.t().contiguous(), 2 * terms.t().contiguous(), misses.numel(), 0)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_empty_steps(device):
    tables = memo_tables(2, 8, 3, device)
    tokens, group = torch.zeros(4, 3, dtype=torch.long, device=device), torch.zeros(4, dtype=torch.long, device=device)
    e = torch.zeros(0, dtype=torch.long, device=device)
    before = [t.clone() for t in tables]
    order, slot = ops.mh_memo_lookup_(MemoTable(*tables, group), tokens, e, e, e, e.bool(), 8, 0)
    assert order.shape == (0,) and slot.shape == (0,)
    f = torch.zeros(0, 3, device=device)
    ops.mh_memo_store_(MemoTable(*tables, group), e, e, e, f, f, 0, 0)
    assert all(torch.equal(x, y) for x, y in zip(before, tables))


def test_a_table_of_no_groups(device):
    """G = 0 (no chains): the reference gives what the op gives (it failed copying a [0] list into [0, S])."""
    for S in (1, 8):
        stamp, hashes, stored = memo_tables(0, S, 3, device)[:3]
        e = torch.zeros(0, dtype=torch.long, device=device)
        args = lookup_call((stamp, hashes, stored, torch.zeros(0, 3, dtype=torch.long, device=device), e, e, e, e,
                            e.bool(), 1, 0))
        for impl in (ops, reference):
            order, slot = impl.mh_memo_lookup_(*args)
            assert order.shape == slot.shape == (0,) and stamp.shape == (0, S)


def lookup_args(device):
    stamp, hashes, stored = memo_tables(2, 8, 3, device)[:3]
    tokens = torch.tensor([[1, 2, 3], [1, 2, 3], [0, 0, 0]], device=device)
    group = torch.tensor([0, 0, 1], device=device)
    act, pos, prop = (torch.tensor(v, device=device) for v in ([0, 1, 2], [0, 2, 1], [4, 4, 4]))
    return (stamp, hashes, stored, tokens, group, act, pos, prop, torch.ones(3, dtype=torch.bool, device=device),
            4, 0)


def test_lookup_bad_input(device):
    ok = lookup_args(device)
    swap = lambda i, x: lookup_call(ok[:i] + (x,) + ok[i + 1:])  # noqa: E731
    op = "mh_memo_lookup_"
    raises_everywhere(op, swap(0, ok[0].int()), "stamp")
    raises_everywhere(op, swap(0, ok[0][0]), "stamp")
    six = (ok[0][:, :6].contiguous(), ok[1][:, :6].contiguous(), ok[2][:, :6].contiguous())
    raises_everywhere(op, lookup_call(six + ok[3:]), "stamp must have a positive multiple of ways")
    raises_everywhere(op, swap(0, ok[0].t().contiguous().t()), "stamp must be contiguous")
    raises_everywhere(op, swap(1, ok[1][:1]), "hashes")
    raises_everywhere(op, swap(2, ok[2][:, :, :2]), "stored")
    raises_everywhere(op, swap(3, ok[3].float()), "tokens")
    raises_everywhere(op, swap(4, ok[4][:2]), "group")
    raises_everywhere(op, swap(5, ok[5].float()), "act")
    raises_everywhere(op, swap(6, ok[6][1:]), "pos")
    raises_everywhere(op, swap(7, ok[7][:, None]), "proposed")
    raises_everywhere(op, swap(8, ok[8].long()), "changed")
    raises_everywhere(op, swap(9, 0), "ways")
    raises_everywhere(op, swap(9, 3), "multiple of ways")
    raises_everywhere(op, swap(10, -1), "step")
    for step in (2 ** 63 - 2, 2 ** 63 - 1):  # a reservation is -(step + 2): it would overflow int64
        raises_everywhere(op, swap(10, step), r"step must be an int in \[0, 9223372036854775805\]")
    ops.mh_memo_lookup_(*swap(10, 2 ** 63 - 3))  # the largest step allowed runs
    values = device == "cpu"  # value checks: the CPU kernel and the Python wrappers (no sync on CUDA)
    raises_everywhere(op, swap(5, torch.tensor([0, 3, 1], device=device)), "act contains 3", raw=values)
    raises_everywhere(op, swap(4, torch.tensor([0, 2, 1], device=device)), "group contains 2", raw=values)
    raises_everywhere(op, swap(6, torch.tensor([0, 3, 1], device=device)), "pos contains 3", raw=values)
    with pytest.raises(TypeError, match="ways"):
        ops.mh_memo_lookup_(*swap(9, 4.0))
    with pytest.raises(TypeError, match="changed"):
        ops.mh_memo_lookup_(*swap(8, [True] * 3))
    with pytest.raises(TypeError, match="table must be a mhfast.op_types.MemoTable"):
        ops.mh_memo_lookup_(tuple(swap(0, ok[0])[0]), *swap(0, ok[0])[1:])
    with pytest.raises(TypeError, match="table.hashes"):
        ops.mh_memo_lookup_(*swap(1, None))


def test_store_bad_input(device):
    stamp, _, _, raw, local = memo_tables(2, 8, 3, device)
    stamp[0, 2] = -2  # reserved at step 0
    group = torch.tensor([0, 0, 1], device=device)
    act, slot = torch.tensor([2, 1, 0], device=device), torch.tensor([-1, 2, 5], device=device)
    sel = torch.tensor([1, 0], device=device)  # proposal 1 (chain 1, entry 2) and proposal 0 (no entry)
    terms = torch.ones(2, 3, device=device)
    ok = (stamp, raw, local, group, act, slot, sel, terms, terms, 2, 0)
    swap = lambda i, x: store_call(ok[:i] + (x,) + ok[i + 1:])  # noqa: E731
    op = "mh_memo_store_"
    raises_everywhere(op, swap(0, stamp.int()), "stamp")
    raises_everywhere(op, swap(0, stamp.t().contiguous().t()), "stamp must be contiguous")
    raises_everywhere(op, swap(1, raw.double()), "raw")
    raises_everywhere(op, swap(2, local[:, :2]), "local")
    raises_everywhere(op, swap(3, group.float()), "group")
    raises_everywhere(op, swap(5, slot[:2]), "slot")
    raises_everywhere(op, swap(6, sel[:, None]), "sel")
    raises_everywhere(op, swap(7, terms[:, :2]), "raw_new")
    raises_everywhere(op, swap(8, terms[:1]), "local_new")
    raises_everywhere(op, swap(9, 3), "num_misses")
    raises_everywhere(op, swap(10, 2 ** 63 - 2), r"step must be an int in \[0, 9223372036854775805\]")
    raises_everywhere(op, swap(9, -1), "num_misses")
    raises_everywhere(op, swap(10, -1), "step")
    values = device == "cpu"
    raises_everywhere(op, swap(6, torch.tensor([1, 3], device=device)), "sel contains 3", raw=values)
    raises_everywhere(op, swap(4, torch.tensor([3, 1, 0], device=device)), "act contains 3", raw=values)
    raises_everywhere(op, swap(5, torch.tensor([8, 2, 5], device=device)), "slot contains 8", raw=values)
    raises_everywhere(op, swap(3, torch.tensor([0, 2, 1], device=device)), "group contains 2", raw=values)
    with pytest.raises(TypeError, match="num_misses"):
        ops.mh_memo_store_(*swap(9, 2.0))
    with pytest.raises(TypeError, match="table.raw"):
        reference.mh_memo_store_(*swap(1, raw.tolist()))
    # good input: the reserved entry is filled and ready; the miss without an entry and the third proposal
    # (not among the misses) change nothing
    ops.mh_memo_store_(*store_call(ok))
    assert stamp[0, 2].item() == 0 and raw[0, 2].tolist() == [1.0] * 3 and int((stamp >= 0).sum()) == 1


def test_an_argument_sharing_memory_with_a_written_table_is_refused(device):
    """act a view of table.stamp: the lookup's reservation rewrote act[1] to -7, then read group[-7] and
    tokens[-7] (out of bounds, and a slot unlike the reference's). The same for the store and the terms."""
    def lookup(view: str):
        def make():
            stamp, hashes, stored = memo_tables(1, 2, 1, device)[:3]
            stamp[0, 0] = 1
            act = stamp[0] if view == "act" else torch.tensor([0, 0], device=device)
            tokens = stored[0] if view == "tokens" else torch.tensor([[3], [4]], device=device)
            return lookup_call((stamp, hashes, stored, tokens, torch.tensor([0, 0], device=device), act,
                                torch.tensor([0, 0], device=device), torch.tensor([5, 6], device=device),
                                torch.tensor([True, True], device=device), 2, 5))
        return make

    raises_aliased("mh_memo_lookup_", lookup("act"), "act shares memory with table.stamp")
    raises_aliased("mh_memo_lookup_", lookup("tokens"), "tokens shares memory with table.stored")

    def store(view: str):
        def make():
            stamp, _, _, raw, local = memo_tables(2, 8, 3, device)
            stamp[0, 2] = -2
            slot = stamp[1, :3] if view == "slot" else torch.tensor([-1, 2, 5], device=device)
            terms = raw[0, :2] if view == "raw_new" else torch.ones(2, 3, device=device)
            return store_call((stamp, raw, local, torch.tensor([0, 0, 1], device=device),
                               torch.tensor([2, 1, 0], device=device), slot, torch.tensor([1, 0], device=device),
                               terms, torch.ones(2, 3, device=device), 2, 0))
        return make

    raises_aliased("mh_memo_store_", store("slot"), "slot shares memory with table.stamp")
    raises_aliased("mh_memo_store_", store("raw_new"), "raw_new shares memory with table.raw")

