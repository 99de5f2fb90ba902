"""The tools of the exactness tests: enumerate every sequence of a tiny model, compute the target by
enumeration with the reference ops, run n independent chains and compare (total variation against the bound
that tests/sampler/test_sampler_exact.py derives), and the tiny models these checks run on.

Used by the exactness tests of every layer (tests/sampler/, tests/ops/test_uniform_mix.py,
tests/models/test_compile_option.py, tests/bench/test_bench_smoke.py).

Example:
    >>> from mhfast.models.tabular import TabularMLM
    >>> template, free = masks(agreeing_pair(), 2)
    >>> enumerate_states(agreeing_pair(), template, free).tolist()
    [[0, 0], [0, 1], [1, 0], [1, 1]]
"""
from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch

import mhfast
from mhfast import reference
from mhfast.models.base import never_proposed, ordinary_tokens
from mhfast.models.tabular import TabularMLM


def sample(device: str, *args, **kwargs) -> mhfast.SampleResult:
    """``mhfast.sample(*args, device=device, **kwargs)`` with its tensors moved to the CPU, where the
    assertions compare them; checks first that the chains lived on ``device``."""
    result = mhfast.sample(*args, device=device, **kwargs)
    assert result.tokens.device.type == device, f"chains on {result.tokens.device}, asked for {device}"
    return dataclasses.replace(result, **{f.name: getattr(result, f.name).cpu() for f in dataclasses.fields(result)
                                          if isinstance(getattr(result, f.name), torch.Tensor)})

N_CHAINS = 3000


def enumerate_states(model, template: torch.Tensor, free: torch.Tensor):
    """All sequences that agree with ``template`` outside ``free``: Long[K, T]."""
    words = ordinary_tokens(model)
    free_pos = free.nonzero().squeeze(1).tolist()
    states = []
    for combo in itertools.product(words, repeat=len(free_pos)):
        x = template.clone()
        x[free_pos] = torch.tensor(combo)
        states.append(x)
    return torch.stack(states)


def energies(model, states: torch.Tensor, energy_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(E_raw, E_local) of each state with the reference ops: one masked row per energy position."""
    K = states.shape[0]
    seq, pos = energy_mask.expand(K, -1).nonzero(as_tuple=True)
    rows = reference.masked_copies(states, seq, pos, model.mask_id)
    with torch.no_grad():
        logits = model.masked_logits(rows, pos).float().cpu()
    e_raw, e_local, _ = reference.gather_energies(logits, states[seq, pos], seq, K)
    return e_raw.double(), e_local.double()


def terms_by_hand(model, states: torch.Tensor, dtype: torch.dtype = torch.float64
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-position (raw, local) terms of each state [K, T], by hand in ``dtype``: -logit and -log_softmax of its
    masked row at every position (no mhfast op involved: what the sampler's and the memo's terms are checked on)."""
    K, T = states.shape
    raw, local = torch.zeros(K, T, dtype=dtype), torch.zeros(K, T, dtype=dtype)
    for j in range(T):
        rows = states.clone()
        rows[:, j] = model.mask_id
        logits = model.masked_logits(rows, torch.full((K,), j)).to(dtype)
        raw[:, j] = -logits.gather(1, states[:, j:j + 1]).squeeze(1)
        local[:, j] = -torch.log_softmax(logits, 1).gather(1, states[:, j:j + 1]).squeeze(1)
    return raw, local


def ends_term(tokens: torch.Tensor) -> torch.Tensor:
    """An extra energy term coupling a sequence's two ends (2 where they are the same token): outside each other's
    window of a delayed-acceptance surrogate, so the first stage must take it exactly."""
    return (tokens[:, 0] == tokens[:, -1]).float() * 2.0


def assert_energies_exact(model, result, energy: str, extra=None, sources=None, atol: float = 1e-4) -> None:
    """Every input's committed energies in ``result`` equal ``mhfast.energy`` of its final tokens (plus ``extra``,
    an extra energy term, of them; ``sources``: a conditional model's source per input): what every kernel must
    keep, whatever it forwarded or remembered."""
    for b in range(result.tokens.shape[0]):
        tokens = result.tokens[b].cpu()
        source = {} if sources is None else {"source": [sources[b]] * tokens.shape[0]}
        e = mhfast.energy(model, tokens, energy=energy, **source)
        exact = (e.e_raw if energy == "raw" else e.e_local) + (extra(tokens) if extra is not None else 0)
        assert torch.allclose(result.energy[b].float().cpu(), exact, atol=atol), (b, result.energy[b], exact)


def one_site_moves(model, x: torch.Tensor, i: int, energy: str
                   ) -> tuple[torch.Tensor, list[int], torch.Tensor]:
    """By hand, every single-site proposal at position ``i`` from state ``x`` [T]: (logq f64[V], the masked
    conditional over the ordinary tokens, -inf elsewhere; ``words``, those tokens; d f64[len(words), T], the change
    of each position's ``energy`` term when x_i becomes each word). What the delayed-acceptance tests build each
    stage's acceptance from."""
    words = ordinary_tokens(model)
    row = x.clone()[None]
    row[0, i] = model.mask_id
    logits = model.masked_logits(row, torch.tensor([i]))[0].double()
    logq = torch.full_like(logits, float("-inf"))
    logq[words] = torch.log_softmax(logits[words], 0)
    ys = torch.stack([x.clone() for _ in words])
    ys[:, i] = torch.tensor(words)
    raw, local = terms_by_hand(model, torch.cat([x[None], ys]))
    terms = raw if energy == "raw" else local
    return logq, words, terms[1:] - terms[0]


def one_step_distribution(logq: torch.Tensor, words: list[int], stay: int, accept: torch.Tensor) -> torch.Tensor:
    """The distribution f64[V] of the token after one step: q(y) accept(y) on each word y, the rest on ``stay``
    (the current token, whose own proposal is a no-op)."""
    p = torch.zeros_like(logq)
    p[words] = torch.exp(logq[words]) * accept
    p[stay] = 0.0
    p[stay] = 1.0 - p.sum()
    return p


def target_distribution(model, states, energy_mask, energy: str, tau: float) -> torch.Tensor:
    e_raw, e_local = energies(model, states, energy_mask)
    e = e_raw if energy == "raw" else e_local
    return torch.softmax(-e / tau, dim=0)


def empirical(states: torch.Tensor, samples: torch.Tensor) -> torch.Tensor:
    """Frequencies of ``samples`` [n, T] over the enumerated ``states`` [K, T] (every sample must be one)."""
    match = (samples[:, None, :] == states[None, :, :]).all(dim=2)  # [n, K]
    assert bool((match.sum(dim=1) == 1).all()), "a sample is outside the enumerated state space"
    return match.double().mean(dim=0)


def local_target(model, template: torch.Tensor, dtype: torch.dtype | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """The states that agree with ``template`` outside its masks and the local-energy target over them, from the
    model's logits as evaluated (under CPU autocast to ``dtype`` when given): (states Long[K, T], p f64[K])."""
    free = template == model.mask_id
    states = enumerate_states(model, template, free)
    K = states.shape[0]
    seq, pos = free.expand(K, -1).nonzero(as_tuple=True)
    rows = reference.masked_copies(states, seq, pos, model.mask_id)
    with torch.no_grad(), torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
        logits = model.masked_logits(rows, pos)
    _, e_local, _ = reference.gather_energies(logits, states[seq, pos], seq, K)
    return states, torch.softmax(-e_local.double(), dim=0)


#: The goodness-of-fit test of :func:`tv_and_bound` fails below this p-value: an exact sampler's chains fail it once
#: in a million checks (chi-square approximation), while the samplers with a wrong MH test that the TV bound let
#: through (a dropped Hastings ratio in block MH, a skipped second stage, always-accepted swaps) sit at p < 1e-11.
FIT_P = 1e-6


def fit_p_value(p: torch.Tensor, p_hat: torch.Tensor, n: int) -> float:
    """Pearson's chi-square p-value of ``n`` independent draws with frequencies ``p_hat`` against ``p``. States
    expected fewer than 5 times are pooled into one bin (the chi-square approximation wants about 5 a bin), merged
    into the smallest other bin if still short; a draw of a state of probability 0 gives 0.

    Example:
        >>> p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
        >>> fit_p_value(p, p, 1000) == 1.0, fit_p_value(p, torch.tensor([0.6, 0.3, 0.1]), 1000) < 1e-6
        (True, True)
    """
    from scipy.stats import chi2

    p, p_hat = p.double(), p_hat.double()
    if bool(((p == 0) & (p_hat > 0)).any()):
        return 0.0
    expected, observed = p * n, p_hat * n
    small = expected < 5
    bins_e, bins_o = list(expected[~small]), list(observed[~small])
    if bool(small.any()):
        rest_e, rest_o = expected[small].sum(), observed[small].sum()
        if rest_e < 5 and bins_e:
            k = min(range(len(bins_e)), key=lambda i: float(bins_e[i]))
            bins_e[k], bins_o[k] = bins_e[k] + rest_e, bins_o[k] + rest_o
        else:
            bins_e.append(rest_e)
            bins_o.append(rest_o)
    if len(bins_e) < 2:
        return 1.0
    e, o = torch.stack(bins_e), torch.stack(bins_o)
    return float(chi2.sf(float(((o - e) ** 2 / e).sum()), len(bins_e) - 1))


def tv_and_bound(p: torch.Tensor, p_hat: torch.Tensor, n: int, *, fit: bool = True) -> tuple[float, float]:
    """The total variation of ``p_hat`` (frequencies of ``n`` independent draws) from ``p`` and its bound (three
    times its expectation bound; tests/sampler/test_sampler_exact.py). With ``fit`` (not for the negative
    controls, which expect a miss) it also asserts Pearson's chi-square test at :data:`FIT_P`: the TV bound alone
    had let samplers with a wrong acceptance through on the smallest state spaces (a tests review)."""
    tv = 0.5 * float((p - p_hat).abs().sum())
    mean_bound = 0.5 * float(torch.sqrt(p * (1 - p) / n).sum())
    if fit:
        pv = fit_p_value(p, p_hat, n)
        assert pv > FIT_P, f"chi-square p-value {pv:.3g} <= {FIT_P} (TV {tv:.4f}, bound {3 * mean_bound:.4f})"
    return tv, 3 * mean_bound


def run_and_compare(device, model, template, free, *, energy, tau=1.0, n=N_CHAINS, fit=True, **kwargs):
    energy_mask = ~torch.isin(template, torch.tensor(sorted(set(model.special_ids) - {model.mask_id})))
    states = enumerate_states(model, template, free)
    p = target_distribution(model, states, energy_mask, energy, tau)
    start_tau = kwargs.pop("start_tau", tau)  # annealed runs start hotter and end at tau
    result = sample(device, model, init=template[None], free_positions=free[None], chains=n, energy=energy,
                    target_temperature=start_tau, **kwargs)
    p_hat = empirical(states, result.tokens[0])
    return (*tv_and_bound(p, p_hat, n, fit=fit), result)


def nucleus_connected(model, template, free, proposal_temperature, top_p) -> bool:
    """Whether single-site moves inside the nucleus connect every state (else MH is reducible)."""
    states = enumerate_states(model, template, free)
    K = states.shape[0]
    special = never_proposed(model)  # what the sampler masks before it proposes
    adj = torch.zeros(K, K, dtype=torch.bool)
    for i in free.nonzero().squeeze(1).tolist():
        rows = states.clone()
        rows[:, i] = model.mask_id
        logits = model.masked_logits(rows, torch.full((K,), i)).masked_fill(special, float("-inf"))
        inside = torch.isfinite(reference.nucleus_log_probs(logits, proposal_temperature, top_p))  # [K, V]
        same_ctx = (rows[:, None, :] == rows[None, :, :]).all(dim=2)
        ok_from = inside.gather(1, states[:, i:i + 1]).squeeze(1)
        adj |= same_ctx & ok_from[:, None] & ok_from[None, :]
    reach = torch.zeros(K, dtype=torch.bool)
    reach[0] = True
    for _ in range(K):
        reach = reach | (adj & reach[:, None]).any(dim=0)
    return bool(reach.all())


def masks(model, T):
    return torch.full((T,), model.mask_id, dtype=torch.long), torch.ones(T, dtype=torch.bool)


def tiny_bert(device: str = "cpu"):
    transformers = pytest.importorskip("transformers")
    from mhfast.models.hf import HFMaskedLM

    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=8, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=16, pad_token_id=0)
    model = transformers.BertForMaskedLM(config).eval()
    with torch.no_grad():  # random init is nearly uniform: sharpen the conditionals a little
        model.get_output_embeddings().weight.mul_(4.0)
    # vocabulary: [PAD] [UNK] [CLS] [SEP] [MASK] then words 5, 6, 7
    return HFMaskedLM(model, device=device, pad_id=0, mask_id=4, bos_id=2, eos_id=3, special_ids=(0, 1, 2, 3, 4))


def two_layer_bert(layers: int = 2):
    """tiny_bert (words 5, 6, 7; sharpened head) with ``layers`` layers."""
    transformers = pytest.importorskip("transformers")
    from mhfast.models.hf import HFMaskedLM

    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=8, hidden_size=16, num_hidden_layers=layers, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=16, pad_token_id=0)
    model = transformers.BertForMaskedLM(config).eval()
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(4.0)
    return HFMaskedLM(model, pad_id=0, mask_id=4, bos_id=2, eos_id=3, special_ids=(0, 1, 2, 3, 4))


def agreeing_pair() -> TabularMLM:
    """T = 2, tokens a = 0, b = 1 (mask 2, pad 3): each position repeats its neighbour with probability
    0.8 (a masked neighbour: 0.5 / 0.5). Target (local energy) pi(x) ~ p(x1 | x2) p(x2 | x1): .47 on aa
    and bb, .03 on ab and ba. With top_p = 0.5 the nucleus holds the neighbour's token only (a for a
    masked neighbour: ties go to the lower id), so MH never leaves {aa} or {bb}: reducible."""
    V = 4
    table = torch.full((V ** 2, 2, V), float("-inf"))
    agree = torch.tensor([[0.8, 0.2], [0.2, 0.8]]).log()
    for x1 in range(V):
        for x2 in range(V):
            code = x1 * V + x2
            table[code, 0, :2] = agree[x2] if x2 < 2 else torch.tensor([0.5, 0.5]).log()
            table[code, 1, :2] = agree[x1] if x1 < 2 else torch.tensor([0.5, 0.5]).log()
    return TabularMLM({2: table}, mask_id=2, pad_id=3)


def coupled_modes(T: int = 6, J: float = 1.5) -> TabularMLM:
    """Two tokens a = 0, b = 1 (mask 2, pad 3) on T positions; a position's conditional given the rest is
    ``softmax(J * (#a, #b among the other unmasked positions))``: symmetric under a <-> b, so all-a and all-b are
    two modes of equal energy. A chain flips single positions inside its mode, but reaching the other mode means
    crossing the half-a half-b states, which single-site MH at J = 1.5 practically never does."""
    V = 4
    codes = torch.arange(V ** T)
    digits = torch.stack([(codes // V ** (T - 1 - t)) % V for t in range(T)], dim=1)
    table = torch.full((V ** T, T, V), float("-inf"))
    for t in range(T):
        others = torch.cat([digits[:, :t], digits[:, t + 1:]], dim=1)
        table[:, t, :2] = torch.log_softmax(J * torch.stack([(others == 0).sum(1), (others == 1).sum(1)], 1).float(), 1)
    return TabularMLM({T: table}, mask_id=2, pad_id=3)


def consistent_joint(num_tokens: int = 3, length: int = 3, seed: int = 1, scale: float = 1.5
                     ) -> tuple[TabularMLM, torch.Tensor]:
    """A tabular MLM whose conditionals are those of one random joint ``p`` over ``num_tokens ** length``
    sequences: position t's logits given a row are log p(x_t | the row's unmasked others), its masked positions
    marginalized. Gibbs with these conditionals samples ``p`` exactly (for the paper's inconsistent MLMs it does
    not). Returns (model, p f64[num_tokens ** length] in the order of :func:`enumerate_states`)."""
    n, V = num_tokens, num_tokens + 2  # mask n, pad n + 1
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(n ** length, generator=g, dtype=torch.float64) * scale, 0).view([n] * length)
    table = torch.full((V ** length, length, V), -30.0)  # specials: finite but never proposed, never scored
    for code in range(V ** length):
        digits = [(code // V ** (length - 1 - i)) % V for i in range(length)]
        if n + 1 in digits:
            continue  # a row with padding inside is never looked up
        for t in range(length):
            index = tuple(slice(None) if i == t or d == n else d for i, d in enumerate(digits))
            sub = p[index]  # axes: t and the masked positions, in order
            axis_t = sum(1 for i, d in enumerate(digits[:t]) if d == n)
            marginal = sub.sum(dim=[a for a in range(sub.dim()) if a != axis_t]) if sub.dim() > 1 else sub
            table[code, t, :n] = (marginal / marginal.sum()).log().float()
    return TabularMLM({length: table}, mask_id=n, pad_id=n + 1), p.flatten()


def independent_positions(num_tokens: int = 3, length: int = 3, seed: int = 2, scale: float = 1.5) -> TabularMLM:
    """A tabular MLM whose position t ignores its context: p(x) = prod_t softmax(logits_t)[x_t]. Every block
    conditional is then a product of the single-site ones, so block Gibbs with any block size samples p, and
    exp(-E_local) = p (E_raw differs by a constant)."""
    V = num_tokens + 2
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(length, V, generator=g) * scale
    return TabularMLM({length: logits[None].expand(V ** length, length, V).clone()},
                      mask_id=num_tokens, pad_id=num_tokens + 1)
