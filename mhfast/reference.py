"""Pure-PyTorch references of mhfast's compiled ops.

Each function has the signature and semantics of its compiled twin in :mod:`mhfast.ops`
(schemas in ``csrc/mhfast.cpp``) and is the specification the kernels are tested against.
They are written for clarity, not speed; ``mhfast.sample(..., backend="reference")``
runs the whole sampler on them. Their argument checks are the ops' own (:mod:`mhfast._validate`:
tensor metadata through the compiled ``torch.ops.mhfast.<op>_check``, data values in Python), so
a reference and its compiled twin reject the same inputs with the same messages.

Example:
    >>> import torch
    >>> from mhfast import reference
    >>> tokens = torch.tensor([[5, 6, 7]])
    >>> idx = torch.zeros(3, dtype=torch.long)
    >>> reference.masked_copies(tokens, idx, torch.arange(3), 0)
    tensor([[0, 6, 7],
            [5, 0, 7],
            [5, 6, 0]])
"""
from __future__ import annotations

import math

import torch

from . import _validate
from .counter_hash import U64, absorb, i64, mix_int, to_uniform
from .op_types import ChainRows, MemoTable, SiteProposal, SiteRows, SiteTerms


def masked_copies(tokens: torch.Tensor, seq_index: torch.Tensor, pos_index: torch.Tensor,
                  mask_id: int) -> torch.Tensor:
    """Row ``n`` is ``tokens[seq_index[n]]`` with position ``pos_index[n]`` set to ``mask_id``.

    Builds the T-way masked batch that scores a sequence (paper, section 2).
    Shapes: tokens Long[B,T], seq_index Long[N], pos_index Long[N] -> Long[N,T].
    """
    _validate.masked_copies(tokens, seq_index, pos_index, mask_id, values=True)
    out = tokens.index_select(0, seq_index)
    out[torch.arange(out.shape[0], device=out.device), pos_index] = mask_id
    return out


def gather_energies(logits: torch.Tensor, targets: torch.Tensor, seq_index: torch.Tensor,
                    num_seqs: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Energies of sequences from the logits of their masked copies (paper, sections 2.1-2.2).

    ``token_logp[n] = logits[n, targets[n]] - logsumexp(logits[n])``;
    ``e_raw[b] = -sum(logits[n, targets[n]])`` and ``e_local[b] = -sum(token_logp[n])`` over the
    rows ``n`` with ``seq_index[n] == b``. Accumulates in fp32 whatever the logits' dtype.
    Returns ``(e_raw f32[num_seqs], e_local f32[num_seqs], token_logp f32[N])``.
    """
    _validate.gather_energies(logits, targets, seq_index, num_seqs, values=True)
    lf = logits.float()
    if lf.shape[0] == 0:
        zeros = torch.zeros(num_seqs, device=logits.device)
        return zeros, zeros.clone(), torch.zeros(0, device=logits.device)
    target_logit = lf.gather(1, targets[:, None]).squeeze(1)
    token_logp = target_logit - torch.logsumexp(lf, dim=1)
    e_raw = torch.zeros(num_seqs, device=logits.device).index_add_(0, seq_index, -target_logit)
    e_local = torch.zeros(num_seqs, device=logits.device).index_add_(0, seq_index, -token_logp)
    return e_raw, e_local, token_logp


def nucleus_log_probs(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """log q: ``softmax(logits / temperature)`` restricted to the nucleus and renormalized.

    The nucleus is the smallest set of tokens, taken by decreasing probability (ties broken by
    lower token id), whose probability mass reaches ``top_p`` (paper, section 4.1). Tokens
    outside it, and tokens whose logit is -inf, get -inf.

    A token whose mass before it lies within float rounding (~1e-7) of ``top_p`` may be in the nucleus of one
    implementation and not of another: this one sums fp32 probabilities in sorted order, the CPU kernel in
    float64, the CUDA kernel in fp32 in parallel (a helper's review, searching 9,000 rows with ``top_p`` put
    at a token's boundary, found the CPU kernel's membership different in 3,226, all within 1e-7; the op tests
    leave rows within 1e-5 out). Each computes the forward and the reverse
    log q of a move the same way, so each sampler stays exact for its own proposal.
    """
    logp = torch.log_softmax(logits.float() / temperature, dim=1)
    p = logp.exp()
    if top_p >= 1.0:
        # The whole support. (The cumulative test below could drop tail tokens worth < 1e-7 once
        # the fp32 running mass rounds to 1.0; the kernels keep every token of nonzero probability.)
        support = logp.masked_fill(p == 0, float("-inf"))
        return support - torch.logsumexp(support, dim=1, keepdim=True)
    # Stable descending sort keeps equal probabilities in increasing token-id order.
    sorted_p, order = torch.sort(p, dim=1, descending=True, stable=True)
    mass_before = sorted_p.cumsum(dim=1) - sorted_p
    keep_sorted = (mass_before < top_p) & (sorted_p > 0)
    keep_sorted[:, 0] = True  # the most probable token is always in the nucleus
    keep = torch.zeros_like(keep_sorted).scatter_(1, order, keep_sorted)
    kept_logp = logp.masked_fill(~keep, float("-inf"))
    return kept_logp - torch.logsumexp(kept_logp, dim=1, keepdim=True)


def proposal_log_probs(logits: torch.Tensor, temperature: float, top_p: float,
                       uniform_mix: float = 0.0) -> torch.Tensor:
    """log q of the proposal: ``(1 - uniform_mix) * q_nucleus + uniform_mix * uniform``.

    ``q_nucleus`` is :func:`nucleus_log_probs`; the uniform part spreads ``uniform_mix`` evenly over
    the *proposable* tokens, those whose tempered logit ``logits.float() / temperature`` is finite
    (a -inf logit, e.g. a special or disallowed token, is never proposed). With a mixture every
    proposable token has q > 0, so MH moves connect every state (the chain is irreducible) even
    when the nucleus alone does not. ``uniform_mix = 0`` returns :func:`nucleus_log_probs` exactly.

    Example:
        >>> lq = proposal_log_probs(torch.tensor([[0.0, -30.0, float("-inf")]]), 1.0, 0.5, 0.1)
        >>> [round(v, 4) for v in lq.exp()[0].tolist()]
        [0.95, 0.05, 0.0]
    """
    logq = nucleus_log_probs(logits, temperature, top_p)
    if uniform_mix == 0.0:
        return logq
    proposable = (logits.float() / temperature) > float("-inf")
    n = proposable.sum(dim=1, keepdim=True).double()
    # float64 logaddexp(log(1 - eps) + log q_nucleus, log(eps / n)): exact enough for any eps in (0, 1).
    mixed = torch.logaddexp(logq.double() + math.log1p(-uniform_mix), math.log(uniform_mix) - n.log())
    return mixed.masked_fill(~proposable, float("-inf")).float()


def _inverse_cdf(logq: torch.Tensor, q: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Per row the smallest id of finite log q whose cumulative q exceeds u; if rounding leaves
    none (u ~ 1), the last id of finite log q."""
    cdf = q.cumsum(dim=1)
    inside = torch.isfinite(logq)
    above = (cdf > uniforms[:, None].to(cdf.dtype)) & inside
    last_kept = inside.shape[1] - 1 - inside.flip(1).int().argmax(dim=1)
    first_above = above.int().argmax(dim=1)
    return torch.where(above.any(dim=1), first_above, last_kept)


def propose(logits: torch.Tensor, current: torch.Tensor, temperature: float, top_p: float,
            uniforms: torch.Tensor, uniform_mix: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Draw one token per row from the proposal q (paper, section 4.1), by inverse CDF.

    q is the tempered nucleus distribution mixed with ``uniform_mix`` of the uniform distribution
    over the proposable tokens (:func:`proposal_log_probs`). ``proposed[b]`` is the smallest id
    (in increasing token-id order) whose cumulative q exceeds ``uniforms[b]``: one uniform per
    row whatever ``uniform_mix``, so ``uniform_mix = 0`` draws exactly the nucleus proposal
    (the fp32 CDF of the nucleus; with a mixture the CDF is accumulated in float64). Returns
    ``(proposed Long[B], logq_proposed f32[B], logq_current f32[B])``: the log q of the proposed
    and of the current token under the same q, -inf where ``current`` cannot be proposed.
    A -inf logit is never proposed.
    """
    _validate.propose(logits, current, temperature, top_p, uniforms, uniform_mix, values=True)
    B = logits.shape[0]
    if B == 0:
        empty = torch.zeros(0, device=logits.device)
        return torch.zeros(0, dtype=torch.long, device=logits.device), empty, empty.clone()
    logq = proposal_log_probs(logits, temperature, top_p, uniform_mix)
    q = logq.exp() if uniform_mix == 0.0 else logq.double().exp()
    proposed = _inverse_cdf(logq, q, uniforms)
    logq_proposed = logq.gather(1, proposed[:, None]).squeeze(1)
    logq_current = logq.gather(1, current[:, None]).squeeze(1)
    return proposed, logq_proposed, logq_current


# ---------------------------------------------------------------------------- counter-based uniforms
def counter_uniforms(keys: torch.Tensor, epoch: int, step: int, stream: int,
                     lanes: torch.Tensor | None = None) -> torch.Tensor:
    """One float32 uniform in (0, 1) per key: the counter hash (csrc/counter_hash.h) of the key
    absorbed with ``epoch``, ``step``, ``stream`` and ``lanes`` (0 when None).

    ``keys``/``lanes``: Long tensors of one shape (a chain's key: :func:`mhfast.runtime.rng.chain_keys`).
    Each counter c enters as ``h = mix(h + GOLDEN * (c + 1))`` (splitmix64's finalizer, wrapping
    uint64 arithmetic on int64 bits); the result is ``(k + 0.5) / 2**23`` for the top 23 bits k.
    """
    _validate.counter_uniforms(keys, epoch, step, stream, lanes)
    h = keys
    for counter in (epoch, step, stream):
        h = absorb(h, counter)
    return to_uniform(absorb(h, lanes if lanes is not None else 0))


def mh_accept_(tokens: torch.Tensor, positions: torch.Tensor, proposed: torch.Tensor,
               energy: torch.Tensor, energy_proposed: torch.Tensor, logq_forward: torch.Tensor,
               logq_reverse: torch.Tensor, beta: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Metropolis-Hastings accept/reject for B chains at once, tokens in place (paper, section 3).

    ``log_alpha = beta * (energy - energy_proposed) + logq_reverse - logq_forward``; chain b
    accepts iff ``log(uniforms[b]) < log_alpha`` (NaN rejects). Where accepted,
    ``tokens[b, positions[b]] = proposed[b]``. ``energy`` is only read: the caller keeps the
    accepted chains' energies (``torch.where(accepted, energy_proposed, energy)``).
    ``positions``/``proposed`` are Long[B] (single site) or Long[B,K] (block of K sites,
    -1 marks an unused slot). Returns ``accepted`` Bool[B].
    """
    _validate.mh_accept_(tokens, positions, proposed, energy, energy_proposed, logq_forward,
                         logq_reverse, beta, uniforms, values=True)
    log_alpha = beta * (energy - energy_proposed) + logq_reverse - logq_forward
    accepted = torch.log(uniforms) < log_alpha  # NaN compares False: rejected
    pos = positions if positions.dim() == 2 else positions[:, None]
    new = proposed if proposed.dim() == 2 else proposed[:, None]
    write = accepted[:, None] & (pos >= 0)
    rows = torch.arange(tokens.shape[0], device=tokens.device)[:, None].expand_as(pos)
    tokens[rows[write], pos[write]] = new[write]
    return accepted


def mh_propose_site(cache: torch.Tensor, tokens: torch.Tensor, keys: torch.Tensor, act: torch.Tensor,
                    pos: torch.Tensor, blocked: torch.Tensor, epoch: int, step: int, stream: int,
                    temperature: float, top_p: float
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The propose phase of a single-site MH step (chains ``act`` at positions ``pos``) in one call.

    The proposal distribution of chain ``act[a]`` is its cached row ``cache[act[a], pos[a]]``
    (logits of X masked at ``pos[a]``) with the ``blocked`` ids (Bool[V]: special tokens) at -inf;
    the uniform is ``counter_uniforms(keys[act[a]], epoch, step, stream)``; then :func:`propose`.
    Shapes: cache [M, T, V] (float, half or bf16), tokens Long[M, T], keys Long[M], act/pos Long[A].
    Returns ``(proposed Long[A], logq_forward f32[A], logq_reverse f32[A], changed Bool[A])``,
    ``changed = proposed != tokens[act, pos]``.

    Example:
        >>> cache = torch.tensor([[[0.0, 5.0, 0.0]]])
        >>> p, lf, lr, ch = mh_propose_site(cache, torch.tensor([[0]]), torch.tensor([7]), torch.tensor([0]),
        ...                                 torch.tensor([0]), torch.tensor([False, False, True]), 0, 0, 1, 1.0, 0.5)
        >>> p.tolist(), ch.tolist()
        ([1], [True])
    """
    _validate.mh_propose_site(cache, tokens, keys, act, pos, blocked, epoch, step, stream, temperature, top_p,
                              values=True)
    logits = cache[act, pos].masked_fill(blocked, float("-inf"))
    current = tokens[act, pos]
    uniforms = counter_uniforms(keys[act], epoch, step, stream, None)
    proposed, logq_forward, logq_reverse = propose(logits, current, temperature, top_p, uniforms)
    return proposed, logq_forward, logq_reverse, proposed != current


def mh_site_rows(tokens: torch.Tensor, energy_mask: torch.Tensor, raw_terms: torch.Tensor, local_terms: torch.Tensor,
                 ch: torch.Tensor, pos: torch.Tensor, proposed: torch.Tensor, num_rows: int, mask_id: int
                 ) -> tuple[torch.Tensor, ...]:
    """The rows phase of a single-site MH step (chain ``ch[j]`` proposes ``proposed[j]`` at ``pos[j]``) in one call.

    ``x_new = tokens[ch]`` with ``x_new[j, pos[j]] = proposed[j]`` (X'); ``raw_new``/``local_new`` are
    copies of the chains' term rows (the caller fills in X''s terms). The model rows of X' are its
    energy positions other than ``pos[j]`` (``energy_mask[ch[j]]``; the term at ``pos[j]`` comes from
    the chain's cached conditional), in row-major order: ``(seq, q)``; there must be exactly
    ``num_rows`` of them (the caller counts them on the host, so that no output shape depends on
    data); ``rows = masked_copies(x_new, seq, q, mask_id)`` and ``targets = x_new[seq, q]``. Shapes:
    state [M, T], moves [n] -> x_new Long[n, T], raw_new/local_new f32[n, T], seq/q/targets
    Long[num_rows], rows Long[num_rows, T].

    Example:
        >>> x, r, l, seq, q, rows, tgt = mh_site_rows(torch.tensor([[5, 6, 7]]), torch.tensor([[True, True, False]]),
        ...     torch.zeros(1, 3), torch.zeros(1, 3), torch.tensor([0]), torch.tensor([1]), torch.tensor([9]), 1, 0)
        >>> x.tolist(), seq.tolist(), q.tolist(), rows.tolist(), tgt.tolist()
        ([[5, 9, 7]], [0], [0], [[0, 9, 7]], [5])
    """
    _validate.mh_site_rows(tokens, energy_mask, raw_terms, local_terms, ch, pos, proposed, num_rows, mask_id,
                           values=True)
    j = torch.arange(ch.shape[0], device=tokens.device)
    x_new = tokens.index_select(0, ch)
    x_new[j, pos] = proposed
    need = energy_mask.index_select(0, ch)
    need[j, pos] = False
    seq, q = need.nonzero().unbind(1)  # row-major
    return (x_new, raw_terms.index_select(0, ch), local_terms.index_select(0, ch), seq, q,
            masked_copies(x_new, seq, q, mask_id), x_new[seq, q])


def mh_commit_site_(chains: ChainRows, proposal: SiteProposal, terms: SiteTerms, rows: SiteRows,
                    beta: float | torch.Tensor | None, epoch: int, step: int, stream: int
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The accept + commit phase of a single-site MH step (the distinct chains ``proposal.ch`` move to
    ``proposal.proposed`` at ``proposal.pos``) in one call; the bundles are :mod:`mhfast.op_types`'.

    MH test as :func:`mh_accept_` with ``energy = chains.target[ch]``, ``energy_proposed = terms.target`` and
    uniforms ``counter_uniforms(chains.keys[ch], epoch, step, stream)``. ``beta``: a number (every chain), a
    float64 tensor ``[M]`` (chain row ``m`` tests with ``beta[m]``, rounded to float32 as a number is: chains at
    different temperatures in one call), or ``None``: accept (beta 0, energy_proposed = energy, logq_reverse =
    logq_forward: log_alpha = 0). Accepted chain ``ch[i]`` gets its token, the term rows ``terms.raw[i]``/
    ``terms.local[i]`` and energies ``terms.e_raw[i]``/``terms.e_local[i]``; its model rows ``r``
    (``rows.seq[r] == i``) are written to ``chains.cache[ch[i], rows.q[r]]`` **in place**
    (``outputs.to(cache.dtype)``), ``rows.outputs`` being the R rows as a list of chunks ``[R_k, D]`` (the model's
    sub-batches, so the caller need not concatenate them). Returns new ``(tokens, raw_terms, local_terms, e_raw,
    e_local)`` and ``accepted`` Bool[n].

    Example:
        >>> z = lambda *s: torch.zeros(*s)
        >>> chains = ChainRows(torch.tensor([[0, 1]]), z(1, 2), z(1, 2), z(1), z(1), z(1), z(1, 2, 3),
        ...                    torch.tensor([5]))
        >>> proposal = SiteProposal(torch.tensor([0]), torch.tensor([1]), torch.tensor([2]), z(1), z(1))
        >>> terms = SiteTerms(torch.ones(1, 2), torch.ones(1, 2), *[torch.full((1,), 2.0)] * 3)
        >>> rows = SiteRows(torch.tensor([0]), torch.tensor([0]), [torch.ones(1, 3)])
        >>> out = mh_commit_site_(chains, proposal, terms, rows, None, 0, 0, 2)
        >>> out[0].tolist(), out[3].tolist(), out[5].tolist(), chains.cache[0, 0].tolist()
        ([[0, 2]], [2.0], [True], [1.0, 1.0, 1.0])
    """
    _validate.mh_commit_site_(chains, proposal, terms, rows, beta, epoch, step, stream, values=True)
    tokens, cache, ch = chains.tokens, chains.cache, proposal.ch
    n, dev = ch.shape[0], tokens.device
    energy = chains.target.index_select(0, ch)
    logq_forward, logq_reverse, energy_new = proposal.logq_forward, proposal.logq_reverse, terms.target
    if beta is None:
        beta_t, energy_new, logq_reverse = torch.zeros(n, device=dev), energy.clone(), logq_forward
    elif isinstance(beta, torch.Tensor):
        beta_t = beta.index_select(0, ch).float()  # the float64 -> float32 rounding of float(beta) below
    else:
        beta_t = torch.full((n,), float(beta), device=dev)
    u = counter_uniforms(chains.keys.index_select(0, ch), epoch, step, stream, None)
    moved = tokens.index_select(0, ch)
    accepted = mh_accept_(moved, proposal.pos, proposal.proposed, energy, energy_new, logq_forward, logq_reverse,
                          beta_t, u)

    def pick(new: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
        keep = accepted[:, None] if new.dim() == 2 else accepted
        return old.index_copy(0, ch, torch.where(keep, new, old.index_select(0, ch)))

    if rows.seq.numel():
        at = ch.index_select(0, rows.seq)
        new = torch.cat(rows.outputs).to(cache.dtype)
        cache[at, rows.q] = torch.where(accepted.index_select(0, rows.seq)[:, None], new, cache[at, rows.q])
    return (tokens.index_copy(0, ch, moved), pick(terms.raw, chains.raw_terms), pick(terms.local, chains.local_terms),
            pick(terms.e_raw, chains.e_raw), pick(terms.e_local, chains.e_local), accepted)


def memo_hash(seq: list[int]) -> int:
    """The memo's 64-bit hash of a token sequence (csrc/memo_table.h): FNV-1a over the tokens, then the splitmix64
    finalizer; returned as the signed int64 the tables store.

    Example:
        >>> memo_hash([1, 2, 3]) == memo_hash([1, 2, 3]) != memo_hash([1, 3, 2])
        True
    """
    h = 0xCBF29CE484222325
    for tok in seq:
        h = ((h ^ (tok & U64)) * 0x100000001B3) & U64
    return i64(mix_int(h))


def memo_lookup_one(stamp: list[int], hashes: list[int], stored: list[list[int]], seq: list[int], ways: int,
                    step: int) -> tuple[int, bool]:
    """One proposal (the sequence ``seq``) against one group's table (lists, changed in place): ``(entry or -1,
    hit)``; see :func:`mh_memo_lookup_` (bench/memo_sharing_trace.py replays traces through it).

    Example:
        >>> stamp, hashes, stored = [-1] * 2, [0] * 2, [[0, 0]] * 2
        >>> memo_lookup_one(stamp, hashes, stored, [1, 2], 2, 0), memo_lookup_one(stamp, hashes, stored, [1, 2], 2, 0)
        ((0, False), (0, True))
    """
    h = memo_hash(seq)
    base = ((h & U64) % (len(stamp) // ways)) * ways
    live = lambda st: st >= 0 or st == -(step + 2)  # noqa: E731
    empty = oldest = -1
    for s in range(base, base + ways):
        st = stamp[s]
        if not live(st):
            empty = s if empty < 0 else empty
            continue
        if hashes[s] == h and stored[s] == seq:
            if st >= 0:
                stamp[s] = step
            return s, True
        if st >= 0 and st != step and (oldest < 0 or st < stamp[oldest]):
            oldest = s
    v = empty if empty >= 0 else oldest
    if v >= 0:
        hashes[v], stored[v], stamp[v] = h, list(seq), -(step + 2)
    return v, False


def mh_memo_lookup_(table: MemoTable, tokens: torch.Tensor, act: torch.Tensor, pos: torch.Tensor,
                    proposed: torch.Tensor, changed: torch.Tensor, ways: int, step: int
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """The proposal memo's lookup (:mod:`mhfast.sampler.memo`), in place on the tables.

    One table per group of chains: entry ``s`` of group ``g`` holds a sequence ``stored[g, s]`` (Long[L]), its
    hash (:func:`memo_hash`) and ``stamp[g, s]``: -1 empty, ``>= 0`` ready (its terms are in the memo), last used at
    that step, ``-(k + 2)`` reserved at step ``k`` (a reservation from an earlier step was never filled and counts as
    empty). The ``S`` entries form ``S // ways`` buckets of ``ways``; a sequence lives in bucket ``hash mod (S //
    ways)`` (the hash as unsigned).

    For each changed proposal ``a`` in order, ``X' = tokens[act[a]]`` with ``X'[pos[a]] = proposed[a]`` is looked
    up in the table of ``g = group[act[a]]``, at step ``step``. A hit (a live entry holding X') returns that
    entry and stamps a ready one with ``step``. A miss reserves an entry of X''s bucket, the first empty one, else
    the least recently used ready one not used in this step (ties: the first), stores X' and its hash there and
    stamps it ``-(step + 2)``; it returns -1 if all ``ways`` are in use in this step. A later proposal of the same
    step with the same X' hits the reserved entry, whose terms :func:`mh_memo_store_` writes before anyone reads
    them.

    Returns ``order`` Bool[2A], ``changed & ~hit`` followed by ``changed & hit`` (one ``nonzero`` of it lists the
    misses first and the hits last, hit ``a`` as ``A + a``), and ``slot`` Long[A], the entry (-1 where unchanged or
    none). Shapes: stamp/hashes Long[G, S], stored Long[G, S, L], tokens Long[M, L], group Long[M], the rest [A].

    Example:
        >>> stamp, hashes, stored = torch.full((1, 2), -1), torch.zeros(1, 2).long(), torch.zeros(1, 2, 3).long()
        >>> table = MemoTable(stamp, hashes, stored, torch.zeros(1, 2, 3), torch.zeros(1, 2, 3), torch.tensor([0, 0]))
        >>> tokens = torch.tensor([[1, 2, 3], [1, 2, 3]])
        >>> args = (torch.tensor([0, 1]), torch.tensor([1, 1]), torch.tensor([4, 4]), torch.tensor([True, True]))
        >>> order, slot = mh_memo_lookup_(table, tokens, *args, 2, 0)
        >>> order.tolist(), slot.tolist(), stamp.tolist(), stored[0, slot[0]].tolist()  # chain 1: same X' as 0
        ([True, False, False, True], [0, 0], [[-2, -1]], [1, 4, 3])
    """
    _validate.mh_memo_lookup_(table, tokens, act, pos, proposed, changed, ways, step, values=True)
    stamp, hashes, stored, group = table.stamp, table.hashes, table.stored, table.group
    A = act.shape[0]
    st, hs, sd = stamp.tolist(), hashes.tolist(), stored.tolist()
    toks, grp = tokens.tolist(), group.tolist()
    order, slot = [False] * (2 * A), [-1] * A
    for a, (c, p, w, ch) in enumerate(zip(act.tolist(), pos.tolist(), proposed.tolist(), changed.tolist())):
        if not ch:
            continue
        seq = list(toks[c])
        seq[p] = w
        g = grp[c]
        slot[a], hit = memo_lookup_one(st[g], hs[g], sd[g], seq, ways, step)
        order[a if not hit else A + a] = True
    # (reshaped: a table of no groups gives torch.tensor([]) of shape [0], not [0, S])
    stamp.copy_(torch.tensor(st, dtype=torch.long).reshape(stamp.shape))
    hashes.copy_(torch.tensor(hs, dtype=torch.long).reshape(hashes.shape))
    if stored.numel():
        stored.copy_(torch.tensor(sd, dtype=torch.long))
    dev = stamp.device
    return torch.tensor(order, dtype=torch.bool, device=dev), torch.tensor(slot, dtype=torch.long, device=dev)


def mh_memo_store_(table: MemoTable, act: torch.Tensor, slot: torch.Tensor, sel: torch.Tensor, raw_new: torch.Tensor,
                   local_new: torch.Tensor, num_misses: int, step: int) -> None:
    """The terms of a step's misses into the entries :func:`mh_memo_lookup_` reserved for them, in place
    (:mod:`mhfast.sampler.memo`).

    ``act`` and ``slot`` are the lookup's proposals and its result; ``sel[j]`` is the proposal whose terms are
    ``raw_new[j]`` and ``local_new[j]`` (the caller lists the misses first). For ``j < num_misses`` whose entry ``s
    = slot[sel[j]]`` of group ``g = group[act[sel[j]]]`` is reserved in this step (``stamp[g, s] == -(step +
    2)``): ``raw[g, s] = raw_new[j]``, ``local[g, s] = local_new[j]``, ``stamp[g, s] = step`` (ready). Any other
    ``j`` (no entry, ``s = -1``) changes nothing. Shapes: stamp Long[G, S], raw/local f32[G, S, L], group Long[M],
    act/slot [A], sel [n], raw_new/local_new f32[n, L].

    Example:
        >>> stamp, local = torch.tensor([[-2, -1]]), torch.zeros(1, 2, 3)
        >>> table = MemoTable(stamp, torch.zeros(1, 2).long(), torch.zeros(1, 2, 3).long(), torch.zeros(1, 2, 3),
        ...                   local, torch.tensor([0]))
        >>> mh_memo_store_(table, torch.tensor([0]), torch.tensor([0]), torch.tensor([0]), torch.ones(1, 3),
        ...                2 * torch.ones(1, 3), 1, 0)
        >>> stamp.tolist(), local[0, 0].tolist()
        ([[0, -1]], [2.0, 2.0, 2.0])
    """
    _validate.mh_memo_store_(table, act, slot, sel, raw_new, local_new, num_misses, step, values=True)
    stamp, raw, local, group = table.stamp, table.raw, table.local, table.group
    for j in range(num_misses):
        s = int(slot[sel[j]])
        g = int(group[act[sel[j]]])
        if s < 0 or int(stamp[g, s]) != -(step + 2):
            continue
        raw[g, s] = raw_new[j]
        local[g, s] = local_new[j]
        stamp[g, s] = step
