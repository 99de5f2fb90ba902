"""The op sweep's checks of the ops added after it was written (bench/op_sweep.py runs them).

* propose with ``uniform_mix > 0`` (the mixture path: -inf entries stored as -0, the count n of
  proposable tokens, the eps / n share added in the walk) against the reference;
* ``mh_propose_site`` (the propose kernel in its SITE mode: rows gathered from a [M, T, V] cache,
  blocked ids, counter-hash uniforms) against the reference and, bit for bit, against the unfused
  op sequence; out-of-range ``act`` / ``pos`` under ``validate=False``: the CUDA kernel reads no row
  and proposes 0 with NaN log q and ``changed = False`` (csrc/cuda/propose_cuda.cu, write_bad_row),
  the CPU kernel raises ValueError naming the argument;
* ``mh_commit_site_`` (one launch per output chunk) against the reference, bit for bit, cache included:
  MH test, forced accept (``beta=None``), several output sub-batches (an empty one among them),
  fp32 / fp16 / bf16 caches;
* the proposal memo's ``mh_memo_lookup_`` and ``mh_memo_store_``: a run of steps of the memo's protocol against
  the reference tables, bit for bit, and out-of-range ``act`` / ``group`` / ``slot`` / ``sel`` under
  ``validate=False`` (CUDA: a miss without an entry, nothing written; CPU: ValueError).

Each check returns None when it matched, else a message.

Example:
    >>> import sys, torch; sys.path.insert(0, "bench")
    >>> from op_sweep_site import check_commit_site
    >>> check_commit_site(9, 6, 5, 5, torch.float32, 1.0, 3, "cpu") is None
    True
"""
from __future__ import annotations

import functools

import torch

import mhfast.ops as ops
import mhfast.reference as reference
from mhfast.op_types import ChainRows, MemoTable, SiteProposal, SiteRows, SiteTerms

U_MARGIN = 1e-4  # a uniform this close to a CDF boundary may legitimately land either side (fp32 vs fp64)
P_MARGIN = 1e-5  # a token's mass-before this close to top_p may legitimately be in or out of the nucleus


def ambiguous_rows(logits: torch.Tensor, temperature: float, top_p: float, eps: float,
                   u: torch.Tensor) -> torch.Tensor:
    """Bool[B]: rows where the compiled op and the reference may both be right yet differ (u within
    U_MARGIN of a CDF boundary of the mixture, or a token's nucleus membership within P_MARGIN)."""
    logq = reference.proposal_log_probs(logits, temperature, top_p, eps).double()
    cdf = logq.exp().cumsum(1)
    bad = ((cdf - u[:, None].double()).abs() < U_MARGIN).any(1)
    if top_p < 1:
        p = torch.softmax(logits.double() / temperature, dim=1)
        sp = torch.sort(p, dim=1, descending=True, stable=True).values
        bad |= ((sp.cumsum(1) - sp - top_p).abs() < P_MARGIN).any(1)
    return bad


def check_propose_mix(B: int, logits: torch.Tensor, top_p: float, eps: float, device: str) -> str | None:
    """propose(uniform_mix=eps) vs the reference on the rows away from rounding boundaries."""
    V = logits.shape[1]
    g = torch.Generator().manual_seed(V * 3 + B)
    current = torch.randint(0, V, (B,), generator=g)  # anywhere: nucleus, tail, -inf logits
    u = torch.rand(B, generator=g)
    exp = reference.propose(logits, current, 0.9, top_p, u, eps)
    got = [t.cpu() for t in ops.propose(logits.to(device), current.to(device), 0.9, top_p, u.to(device), eps)]
    ok = ~ambiguous_rows(logits, 0.9, top_p, eps, u)
    if ok.sum() * 2 < B:
        return f"setup: only {int(ok.sum())} of {B} rows away from the boundaries"
    if not torch.equal(got[0][ok], exp[0][ok]):
        return f"proposed differs on rows {(got[0] != exp[0]).nonzero().flatten().tolist()}"
    for name, a, b in (("logq_proposed", got[1], exp[1]), ("logq_current", got[2], exp[2])):
        if not torch.equal(torch.isfinite(a), torch.isfinite(b)):
            return f"{name}: finite where the reference is not (or the reverse)"
        fin = torch.isfinite(b) & ok
        if not torch.allclose(a[fin], b[fin], rtol=1e-4, atol=1e-4):
            return f"{name} differs (max {(a[fin] - b[fin]).abs().max().item():.3g})"
    if not torch.isfinite(logits.float().gather(1, got[0][:, None])).all():
        return "proposed a -inf logit"
    return None


def site_inputs(M: int, T: int, V: int, A: int, dtype: torch.dtype, seed: int):
    """(cache, tokens, keys, act, pos, blocked): cache rows with -inf entries, the last two ids blocked."""
    g = torch.Generator().manual_seed(seed)
    cache = torch.randn(M, T, V, generator=g) * 3
    cache[torch.rand(M, T, V, generator=g) < 0.1] = float("-inf")
    cache[:, :, 0] = 1.0  # every row keeps a proposable id
    blocked = torch.zeros(V, dtype=torch.bool)
    blocked[V - min(2, V - 1):] = True
    tokens = torch.randint(0, V, (M, T), generator=g)
    keys = torch.randint(-2**62, 2**62, (M,), generator=g)
    act = torch.randperm(M, generator=g)[:A]
    pos = torch.randint(0, T, (A,), generator=g)
    return cache.to(dtype), tokens, keys, act, pos, blocked


def unfused_site(cache, tokens, keys, act, pos, blocked, scalars) -> tuple[torch.Tensor, ...]:
    """The compiled op sequence mh_propose_site replaces (the sampler's chains must not change)."""
    epoch, step, stream, temperature, top_p = scalars
    logits = cache[act, pos].masked_fill(blocked, float("-inf"))
    current = tokens[act, pos]
    u = ops.counter_uniforms(keys[act], epoch, step, stream)
    prop, lf, lr = ops.propose(logits, current, temperature, top_p, u)
    return prop, lf, lr, prop != current


def check_propose_site(M: int, T: int, V: int, A: int, dtype: torch.dtype, top_p: float, device: str) -> str | None:
    """mh_propose_site vs the reference and (bit for bit) the unfused compiled sequence."""
    args = [t.to(device) for t in site_inputs(M, T, V, A, dtype, seed=M * T + V)]
    scalars = (3, V % 7, 1, 0.8, top_p)
    got = [t.cpu() for t in ops.mh_propose_site(*args, *scalars)]
    want = reference.mh_propose_site(*[t.cpu() for t in args], *scalars)
    if not (torch.equal(got[0], want[0]) and torch.equal(got[3], want[3])):
        return f"proposed/changed differ from the reference: {got[0].tolist()} vs {want[0].tolist()}"
    for name, a, b in (("logq_forward", got[1], want[1]), ("logq_reverse", got[2], want[2])):
        fin = torch.isfinite(b)
        if not (torch.equal(fin, torch.isfinite(a)) and torch.allclose(a[fin], b[fin], rtol=1e-4, atol=1e-4)):
            return f"{name} differs from the reference"
    for name, a, b in zip(("proposed", "logq_forward", "logq_reverse", "changed"), got,
                          unfused_site(*args, scalars)):
        if not torch.equal(a, b.cpu()):
            return f"{name} differs from the unfused ops (must be bit-identical)"
    if args[5].cpu()[got[0]].any():
        return "proposed a blocked id"
    return None


def cpu_raises_naming(calls: list) -> str | None:
    """None if each ``(name, call)`` raises ValueError naming ``name`` (the CPU kernels' value checks), else a
    message."""
    for name, call in calls:
        try:
            call()
        except ValueError as e:
            if name not in str(e):
                return f"the error does not name {name}: {e}"
        else:
            return f"out-of-range {name} did not raise on CPU"
    return None


def check_propose_site_out_of_range(device: str) -> str | None:
    """validate=False with act / pos outside the cache: CUDA proposes 0 with NaN log q and changed False
    on those rows (no row read: memcheck sees any out-of-bounds read) and the reference's answer on the
    others; CPU raises ValueError naming the argument."""
    M, T, V = 5, 4, 37
    cache, tokens, keys, act, pos, blocked = site_inputs(M, T, V, 4, torch.float32, seed=11)
    act_bad, pos_bad = torch.cat([act, torch.tensor([-1, M, 0, 2])]), torch.cat([pos, torch.tensor([0, 1, T, -1])])
    dev = lambda *ts: [t.to(device) for t in ts]  # noqa: E731
    if device == "cpu":
        call = lambda a, p: functools.partial(ops.mh_propose_site, *dev(cache, tokens, keys, a, p, blocked),  # noqa
                                              0, 0, 1, 1.0, 0.9, validate=False)
        return cpu_raises_naming([("act", call(act_bad[:6], pos_bad[:6])), ("pos", call(act_bad[6:], pos_bad[6:]))])
    got = [t.cpu() for t in ops.mh_propose_site(*dev(cache, tokens, keys, act_bad, pos_bad, blocked), 0, 0, 1, 1.0,
                                                0.9, validate=False)]
    want = reference.mh_propose_site(cache, tokens, keys, act, pos, blocked, 0, 0, 1, 1.0, 0.9)
    n = act.shape[0]
    if not all(torch.equal(a[:n], b) for a, b in zip((got[0], got[3]), (want[0], want[3]))):
        return "in-range rows differ from the reference"
    if not ((got[0][n:] == 0).all() and got[1][n:].isnan().all() and got[2][n:].isnan().all()
            and not got[3][n:].any()):
        return f"out-of-range rows gave {got[0][n:].tolist()} {got[1][n:].tolist()} {got[3][n:].tolist()}"
    return None


def commit_inputs(M: int, T: int, D: int, n: int, dtype: torch.dtype, chunks: int, seed: int) -> list:
    """The 20 tensors and the output chunks of mh_commit_site_, flat (:func:`bundled` makes its bundles): n distinct
    chains, each with T - 1 model rows (the positions other than the moved one), the rows split into ``chunks``
    sub-batches, one of them empty."""
    g = torch.Generator().manual_seed(seed)
    f = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    tokens = torch.randint(0, 9, (M, T), generator=g)
    raw, local = f(M, T), f(M, T)
    target = raw.sum(1) + 0.5
    keys = torch.randint(-2**62, 2**62, (M,), generator=g)
    ch = torch.randperm(M, generator=g)[:n]
    pos = torch.randint(0, T, (n,), generator=g)
    raw_new, local_new = f(n, T), f(n, T)
    need = torch.ones(n, T, dtype=torch.bool)
    need[torch.arange(n), pos] = False
    seq, q = need.nonzero(as_tuple=True)
    R = seq.shape[0]
    cuts = [0, 0] + sorted(torch.randint(0, R + 1, (chunks - 2,), generator=g).tolist()) + [R]  # cuts[:2]: empty
    outputs = [o.to(dtype) for o in f(R, D).split([b - a for a, b in zip(cuts[:-1], cuts[1:])])]
    return [tokens, raw, local, raw.sum(1), local.sum(1), target, f(M, T, D).to(dtype), keys, ch, pos,
            torch.randint(0, 9, (n,), generator=g), -f(n).abs(), -f(n).abs(), raw_new, local_new, raw_new.sum(1),
            local_new.sum(1), target[ch] + f(n), seq, q, outputs]


def bundled(args: list) -> tuple[ChainRows, SiteProposal, SiteTerms, SiteRows]:
    """:func:`commit_inputs`' flat list as mh_commit_site_'s four bundles (mhfast.op_types)."""
    return ChainRows(*args[:8]), SiteProposal(*args[8:13]), SiteTerms(*args[13:18]), SiteRows(*args[18:21])


def check_commit_site(M: int, T: int, D: int, n: int, dtype: torch.dtype, beta: float | str | None, chunks: int,
                      device: str) -> str | None:
    """mh_commit_site_ vs the reference, bit for bit (outputs, and the cache updated in place); ``beta="rows"``: a
    float64 beta per chain row."""
    args = commit_inputs(M, T, D, n, dtype, chunks, seed=M + T + D + n)
    if beta == "rows":
        beta = torch.linspace(0.0, 1.3, M, dtype=torch.float64)
    clone = lambda a, dev: [o.to(dev, copy=True) for o in a] if isinstance(a, list) else a.to(dev, copy=True)  # noqa
    mine = [clone(a, device) for a in args]
    theirs = [clone(a, "cpu") for a in args]
    per_row = isinstance(beta, torch.Tensor)
    got = [t.cpu() for t in ops.mh_commit_site_(*bundled(mine), beta.to(device) if per_row else beta, 2, 7, 2)]
    want = reference.mh_commit_site_(*bundled(theirs), beta, 2, 7, 2)
    names = ("tokens", "raw_terms", "local_terms", "e_raw", "e_local", "accepted")
    for name, a, b in zip(names, got, want):
        if not (a.dtype == b.dtype and torch.equal(a, b)):
            return f"{name} differs"
    if not torch.equal(mine[6].cpu(), theirs[6]):
        return "cache differs"
    if beta is None and not got[5].all():
        return "beta=None did not accept every move"
    if not all(torch.equal(a.cpu(), b) for a, b in zip(mine[20], args[20])):
        return "outputs were modified"
    return None


def check_memo_ops(G: int, S: int, L: int, M: int, A: int, steps: int, device: str) -> str | None:
    """``steps`` rounds of lookup (A proposals of few distinct sequences, half the chains in one state, so that many
    hit, within a round too) then store of the misses' terms on compiled and reference tables: equal outputs and
    tables after every call (G groups of S entries in buckets of min(8, S), sequences of length L, M chains)."""
    g = torch.Generator().manual_seed(G * 1000 + S * 10 + L)
    V, ways = 3, min(8, S)
    tables = [[torch.full((G, S), -1, dtype=torch.long), torch.zeros(G, S, dtype=torch.long),
               torch.zeros(G, S, L, dtype=torch.long), torch.zeros(G, S, L), torch.zeros(G, S, L)] for _ in range(2)]
    tables = [[t.to(device) for t in m] for m in tables]
    tokens = torch.randint(0, V, (M, L), generator=g)
    tokens[M // 2:] = tokens[0].clone()
    tokens, group = tokens.to(device), (torch.arange(M) % G).to(device)
    for step in range(steps):
        act = torch.randint(0, M, (A,), generator=g).to(device)
        pos, prop = torch.randint(0, L, (A,), generator=g).to(device), torch.randint(0, V, (A,), generator=g).to(device)
        changed = (torch.rand(A, generator=g) < 0.9).to(device)
        args = (tokens, act, pos, prop, changed, ways, step)
        got = ops.mh_memo_lookup_(MemoTable(*tables[0], group), *args, validate=False)
        want = reference.mh_memo_lookup_(MemoTable(*tables[1], group), *args)
        if not all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(got, want)):
            return f"lookup differs from the reference at step {step}"
        misses = got[0][:A].nonzero().squeeze(1)
        terms = torch.randn(misses.numel(), L, generator=g).to(device)
        store = (act, got[1], misses, terms, -terms, misses.numel(), step)
        ops.mh_memo_store_(MemoTable(*tables[0], group), *store, validate=False)
        reference.mh_memo_store_(MemoTable(*tables[1], group), *store)
        if not all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(*tables)):
            return f"the tables differ from the reference after step {step}"
    return None


def check_memo_out_of_range(device: str) -> str | None:
    """validate=False with act, group, slot or sel outside the tables: CUDA treats the proposal as a miss without an
    entry and writes nothing for it (memcheck sees any out-of-bounds access), the rest as the reference; CPU raises
    ValueError."""
    G, S, L = 2, 8, 3
    stamp = torch.full((G, S), -1, dtype=torch.long, device=device)
    hashes, stored = torch.zeros(G, S, dtype=torch.long, device=device), torch.zeros(G, S, L, dtype=torch.long,
                                                                                     device=device)
    raw, local = torch.zeros(G, S, L, device=device), torch.zeros(G, S, L, device=device)
    tokens = torch.tensor([[1, 2, 0], [1, 2, 0], [0, 0, 0]], device=device)
    group = torch.tensor([0, 5, 1], device=device)  # chain 1's group is out of range
    act, pos, prop = (torch.tensor(v, device=device) for v in ([0, -1, 1, 3, 2], [0, 0, 0, 0, 1], [2, 2, 2, 2, 1]))
    changed = torch.ones(5, dtype=torch.bool, device=device)
    table = MemoTable(stamp, hashes, stored, raw, local, group)
    lookup = lambda: ops.mh_memo_lookup_(table, tokens, act, pos, prop, changed, 8, 0, validate=False)  # noqa: E731
    # store's proposals: chain 0 (valid), act 4, slot 9, chain 1 (group 5), sel 7: all but the first invalid
    ch, slot = torch.tensor([0, 4, 2, 1, 0], device=device), torch.tensor([0, 0, 9, 0, 0], device=device)
    sel = torch.tensor([0, 1, 2, 3, 7], device=device)
    terms = torch.ones(5, L, device=device)
    store = lambda: ops.mh_memo_store_(table, ch, slot, sel, terms, terms, 5, 0, validate=False)  # noqa: E731
    if device == "cpu":
        return cpu_raises_naming([("act", lookup), ("sel", store)])
    order, slots = lookup()
    # chains 0 and 2 are valid (groups 0 and 1): misses with entries; act -1, act 3, chain 1 (group 5): no entry
    ok_slots = slots.cpu().tolist()
    if order.cpu().tolist() != [True] * 5 + [False] * 5 or [ok_slots[i] for i in (1, 2, 3)] != [-1] * 3:
        return f"lookup with out-of-range act/group gave {order.cpu().tolist()} {ok_slots}"
    if ok_slots[0] < 0 or ok_slots[4] < 0 or int((stamp == -2).sum()) != 2:
        return f"lookup reserved {stamp.cpu().tolist()} for the valid chains"
    slot[0] = ok_slots[0]  # the one valid store; act 4, slot 9, group 5, sel 7 must write nothing
    store()
    if int(stamp[0, ok_slots[0]]) != 0 or float(raw.sum()) != L or int((stamp == 0).sum()) != 1:
        return f"store with out-of-range act/slot/group/sel gave {stamp.cpu().tolist()}"
    return None

