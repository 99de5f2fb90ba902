"""mh_commit_site_ (the fused accept + commit phase of a single-site MH step) against its reference,
which is the op sequence the sampler ran before the fusion: every output and the cache bit for bit."""
from __future__ import annotations

import re

import pytest
import torch

import mhfast.ops as ops
import mhfast.reference as reference
from mhfast import op_types
from mhfast.op_types import ChainRows, SiteProposal, SiteRows, SiteTerms
from op_checks import raises_aliased, raises_everywhere

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def commit_inputs(M: int, T: int, D: int, n: int, seed: int, cache_dtype=torch.float32, device="cpu",
                  rows_per_chain: int | None = None) -> tuple[ChainRows, SiteProposal, SiteTerms, SiteRows]:
    """mh_commit_site_'s four bundles: n distinct chains, each with up to T - 1 model rows, the rows split into
    random chunks (as the model's sub-batches)."""
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
    d = lambda *ts: [t.to(device) for t in ts]  # noqa: E731
    return (ChainRows(*d(tokens, raw, local, e_raw, e_local, target, cache, keys)),
            SiteProposal(*d(ch, pos, proposed, logq_f, logq_r)),
            SiteTerms(*d(raw_new, local_new, e_raw_new, e_local_new, target_new)), SiteRows(*d(seq, q), outputs))


def betas(M: int, seed: int, device="cpu") -> torch.Tensor:
    """Double[M]: a per-row beta as parallel tempering has it (a ladder in (0, 1], and one row at 0)."""
    g = torch.Generator().manual_seed(seed)
    b = torch.rand(M, generator=g, dtype=torch.float64) * 1.5
    b[0] = 0.0
    return b.to(device)


def cloned(bundles):
    """A deep copy of bundles (and of SiteRows' chunk list)."""
    copy = lambda x: [o.clone() for o in x] if isinstance(x, list) else x.clone()  # noqa: E731
    return tuple(type(b)(*(copy(x) for x in b)) for b in bundles)


def run_both(args, beta, epoch=3, step=5, stream=2):
    a, b = cloned(args), cloned(args)
    got = ops.mh_commit_site_(*a, beta, epoch, step, stream)
    want = reference.mh_commit_site_(*b, beta, epoch, step, stream)
    return got, want, a[0].cache, b[0].cache


SHAPES = [(9, 6, 5, 5, None), (3, 4, 33, 3, 0), (40, 12, 7, 17, 3), (1, 1, 2, 1, 0)]


@pytest.mark.parametrize("cache_dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("beta", [1.0, 0.3, None, "rows"])
def test_matches_reference_bit_for_bit(device, cache_dtype, beta):
    for seed, (M, T, D, n, k) in enumerate(SHAPES):
        args = commit_inputs(M, T, D, n, seed, cache_dtype, device, k)
        b = betas(M, seed, device) if beta == "rows" else beta
        got, want, cache_got, cache_want = run_both(args, b)
        for x, y in zip(got, want, strict=True):
            assert x.dtype == y.dtype and torch.equal(x, y)
        assert torch.equal(cache_got, cache_want)
        if beta is None:
            assert got[5].all()
        acc = got[5]
        if 0 < int(acc.sum()) < n:  # both branches taken: the unaccepted chains kept their state
            ch = args[1].ch
            assert torch.equal(got[0][ch[~acc]], args[0].tokens[ch[~acc]])
            assert torch.equal(got[1][ch[acc]], args[2].raw[acc])


@pytest.mark.parametrize("seed", range(12))
def test_beta_per_row_matches_reference_over_random_shapes(device, seed):
    """A beta per chain row against the reference over random shapes, cache dtypes and ladders; and a ladder of
    equal values is the number itself, bit for bit (the same float64 -> float32 rounding)."""
    g = torch.Generator().manual_seed(100 + seed)
    M = int(torch.randint(1, 30, (1,), generator=g))
    T, D = int(torch.randint(1, 9, (1,), generator=g)), int(torch.randint(1, 40, (1,), generator=g))
    n = int(torch.randint(0, M + 1, (1,), generator=g))
    dtype = (torch.float32, torch.bfloat16, torch.float16)[seed % 3]
    args = commit_inputs(M, T, D, n, seed, dtype, device)
    got, want, cache_got, cache_want = run_both(args, betas(M, seed, device), epoch=seed, step=2 * seed)
    assert all(x.dtype == y.dtype and torch.equal(x, y) for x, y in zip(got, want, strict=True))
    assert torch.equal(cache_got, cache_want)
    beta = 0.1 + 0.7 * seed / 11  # not a float32 number: the rounding matters
    same = run_both(args, torch.full((M,), beta, dtype=torch.float64, device=device))
    number = run_both(args, beta)
    assert all(torch.equal(x, y) for x, y in zip(same[0], number[0])) and torch.equal(same[2], number[2])


def test_beta_per_row_is_each_rows_own():
    """Each chain row tests at its own beta: at beta 0 every move is accepted whatever its energy, at a huge beta
    every uphill move is rejected; in one call."""
    M = 8
    chains, proposal, terms, rows = commit_inputs(M, 3, 2, M, seed=4)
    ch = proposal.ch
    proposal = proposal._replace(logq_forward=torch.zeros(M), logq_reverse=torch.zeros(M))
    terms = terms._replace(target=chains.target.index_select(0, ch) + 5.0)  # every move uphill by 5
    beta = torch.where(torch.arange(M) % 2 == 0, 0.0, 1e6).double()
    accepted = ops.mh_commit_site_(chains, proposal, terms, rows, beta, 0, 0, 2)[5]
    assert torch.equal(accepted, beta.index_select(0, ch) == 0)


def test_inputs_unchanged_except_cache(device):
    args = commit_inputs(8, 5, 4, 6, seed=7, device=device)
    before = cloned(args)
    ops.mh_commit_site_(*args, betas(8, 7, device), 0, 0, 2)
    for bundle, old in zip(args, before):
        for field, x, y in zip(bundle._fields, bundle, old):
            if field == "outputs":
                assert all(torch.equal(a, b) for a, b in zip(x, y))
            elif field != "cache":
                assert torch.equal(x, y), field


def test_strided_views_and_no_moves(device):
    chains, proposal, terms, rows = commit_inputs(7, 5, 6, 4, seed=3, device=device)
    wide = torch.zeros(7, 5, 12, device=device)
    wide[:, :, ::2] = chains.cache
    strided = (chains._replace(cache=wide[:, :, ::2]), proposal,  # cache with dim-2 stride 2, written through the view
               terms._replace(raw=terms.raw.t().contiguous().t()), rows)  # column-major raw_new
    beta = torch.stack([betas(7, 3, device)] * 2, 1)[:, 1]  # (stride 2)
    got = ops.mh_commit_site_(*strided, beta, 1, 2, 2)
    ref = cloned((chains, proposal, terms, rows))
    want = reference.mh_commit_site_(*ref, beta.contiguous(), 1, 2, 2)
    for x, y in zip(got, want, strict=True):
        assert torch.equal(x, y)
    assert torch.equal(wide[:, :, ::2], ref[0].cache)
    none = proposal._replace(**{f: t[:0] for f, t in proposal._asdict().items()})
    out = ops.mh_commit_site_(chains, none, terms._replace(**{f: t[:0] for f, t in terms._asdict().items()}),
                              SiteRows(rows.seq[:0], rows.q[:0], []), 1.0, 0, 0, 2)
    assert torch.equal(out[0], chains.tokens) and out[5].shape == (0,)


def test_bad_input(device):
    chains, proposal, terms, rows = commit_inputs(6, 4, 3, 3, seed=1, device=device)
    s = (1.0, 0, 0, 2)
    raw_values = device == "cpu"

    def bad(i, **fields):
        """The four bundles with fields of bundle i replaced."""
        return tuple(b._replace(**fields) if j == i else b for j, b in enumerate((chains, proposal, terms, rows)))

    raises_everywhere("mh_commit_site_", (*bad(0, tokens=chains.tokens.int()), *s), "tokens")
    raises_everywhere("mh_commit_site_", (*bad(0, raw_terms=chains.raw_terms[:, :2]), *s), "raw_terms")
    raises_everywhere("mh_commit_site_", (*bad(0, target=chains.target.double()), *s), "target")
    raises_everywhere("mh_commit_site_", (*bad(0, cache=chains.cache[:, :, :2]), *s), "outputs")
    raises_everywhere("mh_commit_site_", (*bad(3, outputs=[torch.cat(rows.outputs)[1:]]), *s), "outputs")
    raises_everywhere("mh_commit_site_", (*bad(3, outputs=[o.long() for o in rows.outputs]), *s), "outputs")
    raises_everywhere("mh_commit_site_", (*bad(0, cache=chains.cache.long()), *s), "cache")
    raises_everywhere("mh_commit_site_", (*bad(0, keys=chains.keys[1:]), *s), "keys")
    raises_everywhere("mh_commit_site_", (*bad(1, pos=proposal.pos[1:]), *s), "pos")
    raises_everywhere("mh_commit_site_", (*bad(2, local=terms.local[1:]), *s), "terms.local")
    raises_everywhere("mh_commit_site_", (*bad(2, target=terms.target[:, None]), *s), "terms.target")
    raises_everywhere("mh_commit_site_", (*bad(3, seq=rows.seq, q=rows.q[1:]), *s), "q")
    raises_everywhere("mh_commit_site_", (chains, proposal, terms, rows, float("nan"), 0, 0, 2), "beta")
    raises_everywhere("mh_commit_site_", (chains, proposal, terms, rows, 10 ** 400, 0, 0, 2),
                      "beta must be a finite number", raw=False)  # (the raw op's schema takes a float)
    raises_everywhere("mh_commit_site_", (chains, proposal, terms, rows, 1.0, -1, 0, 2), "epoch")
    for name, t, at in (("ch", proposal.ch, 6), ("ch", proposal.ch, -1), ("pos", proposal.pos, 4),
                        ("seq", rows.seq, 3), ("q", rows.q, -2)):
        x = t.clone()
        x[0] = at
        raises_everywhere("mh_commit_site_", (*bad(1 if name in ("ch", "pos") else 3, **{name: x}), *s), name,
                          raw=raw_values)
    twice = proposal.ch.clone()
    twice[1] = twice[0]
    raises_everywhere("mh_commit_site_", (*bad(1, ch=twice), *s), "ch", raw=raw_values)
    # the first value to repeat an earlier one, in order, named everywhere (Python had named the smallest)
    four = commit_inputs(6, 4, 3, 4, seed=1, device=device)
    twice = torch.tensor([3, 1, 3, 1], device=device)
    raises_everywhere("mh_commit_site_", (four[0], four[1]._replace(ch=twice), *four[2:], *s), "ch contains 3 twice",
                      raw=raw_values)
    for outputs in (torch.cat(rows.outputs), [o.tolist() for o in rows.outputs]):
        for impl in (ops, reference):
            with pytest.raises(TypeError, match="rows.outputs"):
                impl.mh_commit_site_(*bad(3, outputs=outputs), *s)


def test_bad_bundles_and_beta(device):
    """A bundle of the wrong kind or with a field that is no tensor, and a per-row beta of the wrong dtype, shape,
    device or value: errors naming it."""
    args = commit_inputs(6, 4, 3, 3, seed=1, device=device)
    chains, proposal, terms, rows = args
    for impl in (ops, reference):
        for not_chains in (tuple(chains), None):  # the wrapper read chains.tokens first: an AttributeError
            with pytest.raises(TypeError, match="chains must be a mhfast.op_types.ChainRows, got"):
                impl.mh_commit_site_(not_chains, proposal, terms, rows, 1.0, 0, 0, 2)
        with pytest.raises(TypeError, match="proposal must be a mhfast.op_types.SiteProposal, got tuple"):
            impl.mh_commit_site_(chains, tuple(proposal), terms, rows, 1.0, 0, 0, 2)
        with pytest.raises(TypeError, match="terms must be a mhfast.op_types.SiteTerms, got SiteRows"):
            impl.mh_commit_site_(chains, proposal, rows, terms, 1.0, 0, 0, 2)
        with pytest.raises(TypeError, match="chains.keys must be a torch.Tensor, got list"):
            impl.mh_commit_site_(chains._replace(keys=chains.keys.tolist()), proposal, terms, rows, 1.0, 0, 0, 2)
        for beta in ("1.0", True, [1.0] * 6):
            with pytest.raises(TypeError, match="beta must be None, a number or a float64 tensor"):
                impl.mh_commit_site_(*args, beta, 0, 0, 2)
    good = betas(6, 1, device)
    for beta, match in ((good.float(), "beta must be Double, got Float"), (good[1:], "beta has size 5 in dim 0"),
                        (good[:, None], "beta must be 1-D"), (good.cpu() if device != "cpu" else good.to("meta"),
                                                               "beta is on")):
        raises_everywhere("mh_commit_site_", (*args, beta, 0, 0, 2), match)
    for v in (float("nan"), float("inf"), 1e39):  # 1e39: finite in float64, inf once rounded to float32
        beta = good.clone()
        beta[4] = v
        raises_everywhere("mh_commit_site_", (*args, beta, 0, 0, 2),
                          rf"beta must be finite \(within float32's range\), got {re.escape(str(v))} in row 4",
                          raw=device == "cpu")
    for v in (1e39, -1e39):  # a number beyond float32: named, where the reference failed in torch.full
        raises_everywhere("mh_commit_site_", (*args, v, 0, 0, 2), "beta must be a finite number within float32")
    raw = list(op_types.commit_site_op_args(*args, good, 0, 0, 2))
    raw[7] = 1.0  # float? beta too
    with pytest.raises(ValueError, match="beta is given twice"):
        torch.ops.mhfast.mh_commit_site_(*raw)
    for i, name, count in ((0, "chains", 7), (2, "proposal", 5), (3, "terms", 5)):  # a bundle of the wrong length
        short = list(op_types.commit_site_op_args(*args, 1.0, 0, 0, 2))
        short[i] = short[i][:-1]
        with pytest.raises(ValueError, match=f"{name} must hold {count} tensors"):
            torch.ops.mhfast.mh_commit_site_(*short)



def test_rows_sharing_memory_with_the_cache_are_refused(device):
    """A chunk of rows.outputs that is a view of chains.cache: the kernel read rows that its own earlier writes had
    changed (a silent difference from the reference, which reads them all first)."""
    def make():
        chains, proposal, terms, rows = commit_inputs(6, 4, 3, 3, seed=1, device=device)
        R = rows.seq.shape[0]
        view = chains.cache.view(-1, 3)[:R]  # the first R cache rows of D = 3 features, as the model's output
        return chains, proposal, terms, rows._replace(outputs=[view]), 1.0, 0, 0, 2

    raises_aliased("mh_commit_site_", make, "rows.outputs shares memory with chains.cache")


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

    from mhfast.sampler.kernels import mh
    from mhfast.sampler.moves import block, site_propose

    kw = dict(case, memo=0)  # (the memo skips rows in both; its own tests are tests/sampler/test_proposal_memo.py's)
    fused = _sample(kw.pop("energy"), device, **dict(kw))

    def unfused_commit(ctx, state, tested, scored, beta, epoch, step):  # scored: None (scored here, unfused)
        p = tested.proposal
        return block.evaluate_and_accept(ctx, state, p.ch, tested.chains_host, p.pos[:, None], p.proposed[:, None],
                                         p.logq_forward, p.logq_reverse, tested.known_logits, beta, epoch, step)

    monkeypatch.setattr(site_propose, "can_fuse_propose", lambda ctx, state: False)
    monkeypatch.setattr(mh, "score_sites", lambda ctx, state, tested, memo: None)
    monkeypatch.setattr(mh, "commit_sites", unfused_commit)
    unfused = _sample(case["energy"], device, **dict(kw))
    for f in dataclasses.fields(fused):
        a, b = getattr(fused, f.name), getattr(unfused, f.name)
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b), f.name
        else:
            assert a == b, f.name
