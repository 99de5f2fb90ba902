"""mh_commit_site_ (the fused accept + commit phase of a single-site MH step) against its reference,
which is the op sequence the sampler ran before the fusion: every output and the cache bit for bit."""
from __future__ import annotations

import pytest
import torch

import mhfast.ops as ops
import mhfast.reference as reference
from op_checks import raises_everywhere

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def commit_inputs(M: int, T: int, D: int, n: int, seed: int, cache_dtype=torch.float32, device="cpu",
                  rows_per_chain: int | None = None):
    """The 20 tensors and the outputs chunks of mh_commit_site_: n distinct chains, each with up to T - 1
    model rows, the rows split into random chunks (as the model's sub-batches)."""
    g = torch.Generator().manual_seed(seed)
    f = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    tokens = torch.randint(0, 9, (M, T), generator=g)
    raw, local = f(M, T), f(M, T)
    e_raw, e_local = raw.double().sum(1).float(), local.double().sum(1).float()
    target = e_raw + 0.5
    cache = f(M, T, D).to(cache_dtype)
    keys = torch.randint(-2**62, 2**62, (M,), generator=g)
    ch = torch.randperm(M, generator=g)[:n]
    pos = torch.randint(0, T, (n,), generator=g)
    proposed = torch.randint(0, 9, (n,), generator=g)
    logq_f, logq_r = -f(n).abs(), -f(n).abs()
    raw_new, local_new = f(n, T), f(n, T)
    e_raw_new, e_local_new = raw_new.double().sum(1).float(), local_new.double().sum(1).float()
    target_new = target[ch] + f(n)  # close to the current energies: some accept, some reject
    k = rows_per_chain if rows_per_chain is not None else T - 1
    need = torch.zeros(n, T, dtype=torch.bool)
    for i in range(n):
        need[i, torch.randperm(T, generator=g)[:k]] = True
    seq, q = need.nonzero(as_tuple=True)
    R = seq.shape[0]
    cuts = sorted(torch.randint(0, R + 1, (2,), generator=g).tolist())
    outputs = [o.to(device) for o in f(R, D).split([cuts[0], cuts[1] - cuts[0], R - cuts[1]])]
    ts = (tokens, raw, local, e_raw, e_local, target, cache, keys, ch, pos, proposed, logq_f, logq_r, raw_new,
          local_new, e_raw_new, e_local_new, target_new, seq, q)
    return (*(t.to(device) for t in ts), outputs)


def cloned(args):
    return tuple([o.clone() for o in a] if isinstance(a, list) else a.clone() for a in args)


def run_both(args, beta, epoch=3, step=5, stream=2):
    a, b = cloned(args), cloned(args)
    got = ops.mh_commit_site_(*a, beta, epoch, step, stream)
    want = reference.mh_commit_site_(*b, beta, epoch, step, stream)
    return got, want, a[6], b[6]


@pytest.mark.parametrize("cache_dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("beta", [1.0, 0.3, None])
def test_matches_reference_bit_for_bit(device, cache_dtype, beta):
    for seed, (M, T, D, n, k) in enumerate([(9, 6, 5, 5, None), (3, 4, 33, 3, 0), (40, 12, 7, 17, 3),
                                            (1, 1, 2, 1, 0)]):
        args = commit_inputs(M, T, D, n, seed, cache_dtype, device, k)
        got, want, cache_got, cache_want = run_both(args, beta)
        for x, y in zip(got, want):
            assert x.dtype == y.dtype and torch.equal(x, y)
        assert torch.equal(cache_got, cache_want)
        if beta is None:
            assert got[5].all()
        acc = got[5]
        if 0 < int(acc.sum()) < n:  # both branches taken: the unaccepted chains kept their state
            ch = args[8]
            assert torch.equal(got[0][ch[~acc]], args[0][ch[~acc]])
            assert torch.equal(got[1][ch[acc]], args[13][acc])


def test_inputs_unchanged_except_cache(device):
    args = commit_inputs(8, 5, 4, 6, seed=7, device=device)
    before = cloned(args)
    ops.mh_commit_site_(*args, 1.0, 0, 0, 2)
    for i, (x, y) in enumerate(zip(args, before)):
        if i == 20:
            assert all(torch.equal(a, b) for a, b in zip(x, y))
        elif i != 6:
            assert torch.equal(x, y)


def test_strided_views_and_no_moves(device):
    args = list(commit_inputs(7, 5, 6, 4, seed=3, device=device))
    wide = torch.zeros(7, 5, 12, device=device)
    wide[:, :, ::2] = args[6]
    args_strided = list(args)
    args_strided[6] = wide[:, :, ::2]  # cache with dim-2 stride 2, updated in place through the view
    args_strided[13] = args[13].t().contiguous().t()  # column-major raw_new
    got = ops.mh_commit_site_(*args_strided, 0.8, 1, 2, 2)
    want = reference.mh_commit_site_(*cloned(args), 0.8, 1, 2, 2)
    for x, y in zip(got, want):
        assert torch.equal(x, y)
    ref_cache = args[6].clone()
    reference.mh_commit_site_(*(args[:6] + [ref_cache] + args[7:]), 0.8, 1, 2, 2)
    assert torch.equal(wide[:, :, ::2], ref_cache)
    empty = [t[:0] if 8 <= i < 20 else t for i, t in enumerate(args[:20])] + [[]]
    out = ops.mh_commit_site_(*empty, 1.0, 0, 0, 2)
    assert torch.equal(out[0], args[0]) and out[5].shape == (0,)


def test_bad_input(device):
    args = commit_inputs(6, 4, 3, 3, seed=1, device=device)
    s = (1.0, 0, 0, 2)
    raw_values = device == "cpu"

    def swap(i, x):
        return tuple(x if j == i else t for j, t in enumerate(args))

    raises_everywhere("mh_commit_site_", (*swap(0, args[0].int()), *s), "tokens")
    raises_everywhere("mh_commit_site_", (*swap(1, args[1][:, :2]), *s), "raw_terms")
    raises_everywhere("mh_commit_site_", (*swap(5, args[5].double()), *s), "target")
    raises_everywhere("mh_commit_site_", (*swap(6, args[6][:, :, :2]), *s), "outputs")
    raises_everywhere("mh_commit_site_", (*swap(20, [torch.cat(args[20])[1:]]), *s), "outputs")
    raises_everywhere("mh_commit_site_", (*swap(20, [o.long() for o in args[20]]), *s), "outputs")
    raises_everywhere("mh_commit_site_", (*swap(6, args[6].long()), *s), "cache")
    raises_everywhere("mh_commit_site_", (*swap(7, args[7][1:]), *s), "keys")
    raises_everywhere("mh_commit_site_", (*swap(9, args[9][1:]), *s), "pos")
    raises_everywhere("mh_commit_site_", (*swap(14, args[14][1:]), *s), "local_new")
    raises_everywhere("mh_commit_site_", (*swap(17, args[17][:, None]), *s), "target_new")
    raises_everywhere("mh_commit_site_", (*swap(19, args[19][1:]), *s), "q")
    raises_everywhere("mh_commit_site_", (*args, float("nan"), 0, 0, 2), "beta")
    raises_everywhere("mh_commit_site_", (*args, 1.0, -1, 0, 2), "epoch")
    for i, name, bad in ((8, "ch", 6), (8, "ch", -1), (9, "pos", 4), (18, "seq", 3), (19, "q", -2)):
        x = args[i].clone()
        x[0] = bad
        raises_everywhere("mh_commit_site_", (*swap(i, x), *s), name, raw=raw_values)
    twice = args[8].clone()
    twice[1] = twice[0]
    raises_everywhere("mh_commit_site_", (*swap(8, twice), *s), "ch", raw=raw_values)
    for bad in (torch.cat(args[20]), [o.tolist() for o in args[20]]):
        with pytest.raises(TypeError, match="outputs"):
            ops.mh_commit_site_(*args[:20], bad, *s)
        with pytest.raises(TypeError, match="outputs"):
            reference.mh_commit_site_(*args[:20], bad, *s)


def _sample(energy: str, device: str, **kw):
    import mhfast
    from mhfast.energy_terms import Hamming
    from mhfast.models.tabular import TabularMLM

    model = TabularMLM.random(num_tokens=5, length=4, seed=3)
    extra = kw.pop("hamming", False)
    if extra:
        kw["extra_energy"] = [(Hamming(torch.tensor([[0, 1, 2, 3]])), 0.7)]
    return mhfast.sample(model, 4, chains=3, epochs=4, burn_in=1, seed=11, energy=energy, device=device, **kw)


@pytest.mark.parametrize("case", [dict(energy="raw"), dict(energy="local", force_accept_epochs=2),
                                  dict(energy="local", hamming=True), dict(energy="raw", dtype="bfloat16")])
def test_fused_step_gives_the_unfused_chains(monkeypatch, case, device):
    """Single-site MH with the fused ops and with the op sequence they replace: the same chains,
    bit for bit (tokens, energies, acceptance counts), on each device (the fused kernels on CUDA too)."""
    import dataclasses

    from mhfast.sampler import moves

    kw = dict(case, memo=0)  # (the memo skips rows in both; its own tests are tests/sampler/test_proposal_memo.py's)
    fused = _sample(kw.pop("energy"), device, **dict(kw))

    def unfused_commit(ctx, state, ch, ch_host, pos, prop, lf, lr, known, beta, epoch, step):
        return moves.evaluate_and_accept(ctx, state, ch, ch_host, pos[:, None], prop[:, None], lf, lr, known, beta,
                                         epoch, step)

    monkeypatch.setattr(moves, "can_fuse_propose", lambda ctx, state: False)
    monkeypatch.setattr(moves, "site_evaluate_and_accept", unfused_commit)
    unfused = _sample(case["energy"], device, **dict(kw))
    for f in dataclasses.fields(fused):
        a, b = getattr(fused, f.name), getattr(unfused, f.name)
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b), f.name
        else:
            assert a == b, f.name
