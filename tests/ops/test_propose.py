"""propose: with fixed uniforms the compiled op draws the reference's tokens (uniforms and top_p
kept away from CDF / nucleus boundaries, where fp32 rounding may legitimately differ); with
random uniforms 10^5 draws follow q (chi-square); -inf logits are never proposed; bad input
is rejected with an error naming the argument."""
from __future__ import annotations

import math

import pytest
import torch
from scipy import stats

import mhfast.ops as ops
import mhfast.reference as reference
from op_checks import raises_everywhere

U_MARGIN = 1e-4  # |u - CDF boundary| below this: either side is a correct fp32 answer
P_MARGIN = 1e-5  # |mass before a token - top_p| below this: the token's membership is ambiguous


def random_logits(B: int, V: int, seed: int, scale: float = 3.0, ties: bool = True, neg_inf: float = 0.2):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, V, generator=g) * scale
    if ties:  # coarse values make many equal probabilities: exercises the tie-breaking by token id
        logits = (logits * 2).round() / 2
    logits[torch.rand(B, V, generator=g) < neg_inf] = float("-inf")
    logits[:, torch.randint(0, V, (1,), generator=g)] = 1.0  # at least one finite entry per row
    return logits


def mass_before_sorted(logits: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(mass before each token in the nucleus order (p desc, id asc), that token's id), float64."""
    p = torch.softmax(logits.float() / temperature, dim=1)  # the reference's fp32 probabilities
    sorted_p, order = torch.sort(p, dim=1, descending=True, stable=True)
    sorted_p = sorted_p.double()
    mass = sorted_p.cumsum(1) - sorted_p
    return mass.masked_fill(sorted_p == 0, float("nan")), order


def pick_uniforms(logits, temperature, top_p, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row a uniform at least U_MARGIN away from every CDF boundary of q, and whether the row is
    unambiguous (no token's nucleus membership within P_MARGIN of top_p; at top_p = 1 only the
    negligible tail can be ambiguous, and those rows stay usable)."""
    B = logits.shape[0]
    q = reference.nucleus_log_probs(logits, temperature, top_p).double().exp()
    cdf = torch.cat([torch.zeros(B, 1, dtype=torch.float64), q.cumsum(1)], dim=1).contiguous()
    g = torch.Generator().manual_seed(seed)
    cand = torch.rand(B, 64, generator=g, dtype=torch.float64).contiguous()
    idx = torch.searchsorted(cdf, cand).clamp(1, cdf.shape[1] - 1)
    dist = torch.minimum((cdf.gather(1, idx) - cand).abs(), (cand - cdf.gather(1, idx - 1)).abs())
    good = dist > U_MARGIN
    first = good.int().argmax(1)
    u = cand.gather(1, first[:, None]).squeeze(1).float()
    ok = good.any(1)
    if top_p < 1:
        mass, _ = mass_before_sorted(logits, temperature)
        ok &= ~((mass - top_p).abs() < P_MARGIN).any(1)
    return u, ok


def ambiguous_current(logits, temperature, top_p, current) -> torch.Tensor:
    mass, order = mass_before_sorted(logits, temperature)
    mass_of = torch.empty_like(mass).scatter_(1, order, mass)
    m = mass_of.gather(1, current[:, None]).squeeze(1)
    return (m - top_p).abs() < P_MARGIN


def check_against_reference(logits, temperature, top_p, seed, device, min_usable=0.5):
    u, ok = pick_uniforms(logits, temperature, top_p, seed)
    B, V = logits.shape
    g = torch.Generator().manual_seed(seed + 1)
    # Current tokens: half anywhere in the vocabulary, half drawn from q (inside the nucleus).
    current = torch.randint(0, V, (B,), generator=g)
    from_q = reference.propose(logits, current, temperature, top_p, torch.rand(B, generator=g))[0]
    current = torch.where(torch.arange(B) % 2 == 0, current, from_q)
    expected = reference.propose(logits, current, temperature, top_p, u)
    assert ok.float().mean() >= min_usable, "test setup: too few rows away from boundaries"
    fns = [ops.propose] + ([torch.ops.mhfast.propose] if device == "cpu" else [])
    dev = lambda t: t.to(device)
    for fn in fns:
        proposed, logq_p, logq_c = (t.cpu() for t in fn(dev(logits), dev(current), temperature, top_p, dev(u)))
        assert proposed.dtype == torch.int64 and logq_p.dtype == torch.float32
        assert torch.equal(proposed[ok], expected[0][ok])
        torch.testing.assert_close(logq_p[ok], expected[1][ok], rtol=1e-4, atol=1e-4)
        cmp = ok & ~ambiguous_current(logits, temperature, top_p, current)
        torch.testing.assert_close(logq_c[cmp], expected[2][cmp], rtol=1e-4, atol=1e-4)
        # Whatever the boundaries, a proposal is a token with a finite logit.
        assert torch.isfinite(logits.gather(1, proposed[:, None])).all()


@pytest.mark.parametrize("top_p", [1.0, 0.9, 0.5, 0.05])
@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
@pytest.mark.parametrize("V", [2, 5, 100, 1000])
def test_matches_reference_fixed_uniforms(device, V, temperature, top_p):
    logits = random_logits(64, V, seed=V)
    check_against_reference(logits, temperature, top_p, seed=V + 1, device=device,
                            min_usable=0.25 if V == 1000 else 0.5)


@pytest.mark.parametrize("top_p", [1.0, 0.9, 0.3])
def test_matches_reference_large_vocab(device, top_p):
    # A peaked distribution keeps enough of u's range away from the 50K CDF boundaries.
    logits = random_logits(4, 50_000, seed=3, scale=8.0, ties=False, neg_inf=0.0)
    check_against_reference(logits, 1.0, top_p, seed=4, device=device, min_usable=0.5)


# The CUDA kernel keeps a row of V + 3 floats in shared memory next to its ~5 KB of static shared
# memory: from V ~ 11,045 the total passes the 48 KB default (opt-in needed; the old kernel forgot
# the static part and failed at 11.7k-12.3k); V ~ 56,870 is the H100's opt-in limit (a global
# scratch row beyond); 250k is a large-vocabulary model. Odd V, rows starting unaligned.
@pytest.mark.parametrize("V,top_p", [(11_000, 0.8), (11_100, 1.0), (12_288, 0.8), (56_800, 1.0), (57_000, 0.8),
                                     (250_001, 0.8)])
def test_shared_memory_edges_and_large_vocab(device, V, top_p):
    logits = random_logits(3, V + 1, seed=V, scale=8.0, ties=False, neg_inf=0.1)[:, 1:]  # rows start unaligned
    check_against_reference(logits, 1.0, top_p, seed=V + 5, device=device, min_usable=0.3)


def test_nan_or_inf_rows_never_propose_an_invalid_token(device):
    """validate=False (the sampler's hot path): the CPU kernel still raises naming logits; the CUDA
    kernel cannot raise without a device sync, so such a row proposes its current token with NaN
    log q, which mh_accept_ rejects: the chain stays put and no -1 reaches an embedding."""
    logits = random_logits(4, 300, seed=2)
    logits[1, 7], logits[2, 9], logits[3] = float("nan"), float("inf"), float("-inf")
    current = torch.tensor([5, 6, 7, 8])
    args = (logits.to(device), current.to(device), 1.0, 0.9, torch.full((4,), 0.5, device=device))
    if device == "cpu":
        with pytest.raises(ValueError, match="logits"):
            ops.propose(*args, validate=False)
        return
    proposed, logq_p, logq_c = (t.cpu() for t in ops.propose(*args, validate=False))
    assert torch.equal(proposed[1:], current[1:])
    assert torch.isnan(logq_p[1:]).all() and torch.isnan(logq_c[1:]).all()
    assert 0 <= int(proposed[0]) < 300 and torch.isfinite(logq_p[0])
    tokens = torch.arange(12, device=device).view(4, 3)
    before = tokens.clone()
    f = lambda *v: torch.tensor(v, device=device)
    accepted = ops.mh_accept_(tokens, f(0, 0, 0, 0), proposed.to(device), f(0.0, 0.0, 0.0, 0.0), f(0.0, 0.0, 0.0, 0.0),
                              logq_p.to(device), logq_c.to(device), f(1.0, 1.0, 1.0, 1.0), f(0.5, 0.5, 0.5, 0.5),
                              validate=False)
    assert not accepted[1:].any() and torch.equal(tokens[1:], before[1:])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("top_p", [1.0, 0.7])
def test_half_precision_logits(device, dtype, top_p):
    logits = random_logits(64, 300, seed=8).to(dtype)
    check_against_reference(logits, 0.8, top_p, seed=9, device=device)


@pytest.mark.parametrize("top_p", [1.0, 0.6])
def test_strided_logits(device, top_p):
    wide = random_logits(64, 200, seed=11)
    check_against_reference(wide[:, ::2], 1.3, top_p, seed=12, device=device)  # stride(1) == 2
    check_against_reference(wide.t().contiguous().t(), 1.3, top_p, seed=13, device=device)


def test_ties_broken_by_lower_id(device):
    # 10 equally likely tokens, top_p = 0.35: the nucleus is the 4 lowest ids (mass before id 3 is 0.3).
    V = 10
    logits = torch.zeros(V, V, device=device)
    current = torch.arange(V, device=device)
    u = torch.linspace(0.01, 0.99, V, device=device)
    proposed, logq_p, logq_c = (t.cpu() for t in ops.propose(logits, current, 1.0, 0.35, u))
    assert torch.equal(torch.isfinite(logq_c), torch.arange(V) < 4)
    torch.testing.assert_close(logq_c[:4], torch.full((4,), -torch.log(torch.tensor(4.0)).item()))
    assert torch.equal(proposed, (u.cpu() * 4).floor().long())
    torch.testing.assert_close(logq_p, torch.full((V,), -torch.log(torch.tensor(4.0)).item()))


def test_empty_batch(device):
    out = ops.propose(torch.zeros(0, 5, device=device), torch.zeros(0, dtype=torch.long, device=device), 1.0, 0.9,
                      torch.zeros(0, device=device))
    assert [t.shape for t in out] == [(0,), (0,), (0,)]


@pytest.mark.parametrize("top_p", [1.0, 0.5])
def test_never_proposes_outside_nucleus(device, top_p):
    B, V = 512, 300
    logits = random_logits(B, V, seed=21, neg_inf=0.9)
    u = torch.rand(B)
    u[:100], u[100:200] = 0.0, 1.0  # the ends of the inverse CDF
    current = torch.randint(0, V, (B,))
    proposed, logq_p, _ = (t.cpu() for t in ops.propose(logits.to(device), current.to(device), 1.0, top_p,
                                                         u.to(device)))
    logq = reference.nucleus_log_probs(logits, 1.0, top_p)
    assert torch.isfinite(logq.gather(1, proposed[:, None])).all()
    assert torch.isfinite(logq_p).all()


@pytest.mark.parametrize("top_p", [1.0, 0.9, 0.5])
@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_draws_follow_q_chi_square(device, temperature, top_p):
    n, V = 100_000, 12
    g = torch.Generator().manual_seed(1234)
    row = torch.randn(1, V, generator=g) * 1.5
    row[0, 3] = float("-inf")
    row[0, 7] = row[0, 5]  # a tie
    logits = row.expand(n, V)  # stride 0 over rows: every draw from the same distribution
    u = torch.rand(n, generator=g)
    current = torch.zeros(n, dtype=torch.long)
    proposed, logq_p, _ = (t.cpu() for t in ops.propose(logits.to(device), current.to(device), temperature, top_p,
                                                         u.to(device)))
    q = reference.nucleus_log_probs(row, temperature, top_p)[0].double().exp()
    counts = torch.bincount(proposed, minlength=V).double()
    assert counts[q == 0].sum() == 0, "proposed a token outside the nucleus"
    torch.testing.assert_close(logq_p, q.log().float()[proposed], rtol=1e-5, atol=1e-5)
    kept = q > 0
    if kept.sum() > 1:
        _, p_value = stats.chisquare(counts[kept].numpy(), (q[kept] / q[kept].sum() * n).numpy())
        assert p_value > 1e-4, f"draws do not follow q (chi-square p = {p_value:.2e})"


def test_bad_input(device):
    B, V = 4, 10
    logits = random_logits(B, V, seed=0).to(device)
    current = torch.randint(0, V, (B,)).to(device)
    u = torch.rand(B).to(device)
    raw_values = device == "cpu"
    raises_everywhere("propose", (logits.double(), current, 1.0, 0.9, u), "logits")
    raises_everywhere("propose", (logits, current.int(), 1.0, 0.9, u), "current")
    raises_everywhere("propose", (logits, current, 1.0, 0.9, u.double()), "uniforms")
    raises_everywhere("propose", (logits[0], current, 1.0, 0.9, u), "logits")
    raises_everywhere("propose", (logits, current[:, None], 1.0, 0.9, u), "current")
    raises_everywhere("propose", (logits, current[:3], 1.0, 0.9, u), "current")
    raises_everywhere("propose", (logits, current, 1.0, 0.9, u[1:]), "uniforms")
    raises_everywhere("propose", (logits[:, :0], current, 1.0, 0.9, u), "logits")
    for t in (0.0, -1.0, float("nan"), float("inf"), 1e300):  # 1e300: beyond fp32, where the kernels divide
        raises_everywhere("propose", (logits, current, t, 0.9, u), "temperature")
    for t in (1e-320, 7e-46):  # positive, but 0 in fp32: the logits were divided by zero (blamed on the logits)
        raises_everywhere("propose", (logits, current, t, 0.9, u), r"temperature must be a finite number in \[1.4")
    for huge in (10 ** 400, 10 ** 5000):  # no float holds them (and str() refuses the second: 4,300 digits at most)
        raises_everywhere("propose", (logits, current, huge, 0.9, u), "temperature must be a finite number",
                          raw=False)
    for p in (0.0, -0.1, 1.5, float("nan")):
        raises_everywhere("propose", (logits, current, 1.0, p, u), "top_p")
    for bad in (-1, V):
        c = current.clone()
        c[2] = bad
        raises_everywhere("propose", (logits, c, 1.0, 0.9, u), "current", raw=raw_values)
    for bad in (float("nan"), float("inf")):
        lg = logits.clone()
        lg[1, 4] = bad
        raises_everywhere("propose", (lg, current, 1.0, 0.9, u), "logits", raw=raw_values)
    lg = logits.clone()
    lg[3] = float("-inf")
    raises_everywhere("propose", (lg, current, 1.0, 0.9, u), "logits", raw=raw_values)
    for bad in (-0.1, 1.5, float("nan")):
        uu = u.clone()
        uu[0] = bad
        raises_everywhere("propose", (logits, current, 1.0, 0.9, uu), "uniforms", raw=raw_values)
    other = "cpu" if device == "cuda" else "meta"
    raises_everywhere("propose", (logits, current, 1.0, 0.9, u.to(other)), "uniforms", raw=device == "cuda")


@pytest.mark.parametrize("V", [37, 1001, 12289])
@pytest.mark.parametrize("top_p", [1.0, 0.8])
def test_a_row_gives_the_same_bits_anywhere_in_the_batch(device, V, top_p):
    """Batch invariance: a row's pick and log q's do not depend on the rows before it (with an odd V the same row
    starts at another offset mod 16 bytes). On an H200 (2026-11-26) the CUDA kernel's sum of exp ran in the order of
    its alignment-dependent loads, so mh_propose_site (rows inside the cache) and propose (the rows gathered) gave
    log q's 1 ulp apart."""
    g = torch.Generator().manual_seed(V)
    logits = (torch.randn(9, V, generator=g) * 3).to(device)
    current = torch.randint(0, V, (9,), generator=g).to(device)
    u = torch.rand(9, generator=g).to(device)
    full = ops.propose(logits, current, 1.0, top_p, u)
    for k in (1, 2, 3):
        sub = ops.propose(logits[k:].clone(), current[k:], 1.0, top_p, u[k:])
        for a, b in zip(sub, full):
            assert torch.equal(a, b[k:]), k


def test_logits_that_overflow_when_divided_by_the_temperature_are_refused_everywhere():
    """What is sampled from is logits / temperature: the compiled kernel checked that, the reference only the raw
    logits, and returned a NaN log q for [3e38, 1] at temperature 0.1 (and for a row that all underflows to
    -inf); now both refuse it with the same message."""
    current, u = torch.tensor([0]), torch.tensor([0.5])
    raises_everywhere("propose", (torch.tensor([[3e38, 1.0]]), current, 0.1, 1.0, u),
                      r"logits contains NaN or \+inf \(or overflows fp32")
    raises_everywhere("propose", (torch.tensor([[-3e38, -3e38]]), current, 0.01, 1.0, u),
                      "logits has a row with no finite entry")
    cache = torch.tensor([[[3e38, 1.0, 0.0]]])
    site = (cache, torch.zeros(1, 1, dtype=torch.long), torch.tensor([3]), torch.tensor([0]), torch.tensor([0]),
            torch.zeros(3, dtype=torch.bool), 0, 0, 1, 0.1, 1.0)
    raises_everywhere("mh_propose_site", site, r"cache contains NaN or \+inf at a proposed site \(or overflows")


def test_the_proposal_against_a_hand_computed_row(device):
    """Not against the reference: against the definition, worked by hand (section 4.1: temperature first, then
    the nucleus of the tempered distribution). Logits [2, 1, 0, -1] at temperature 2 give p ~ [.455, .276, .167,
    .102]; the nucleus of mass 0.6 is tokens 0 and 1 (mass before token 1: .455 < .6; before token 2: .731), so q =
    softmax([1, .5]) on them. Applying top_p before the temperature would keep token 0 alone (.644 >= .6), and
    ignoring the temperature too."""
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    z = math.exp(1.0) + math.exp(0.5)
    want = torch.tensor([1.0 - math.log(z), 0.5 - math.log(z), float("-inf"), float("-inf")])
    torch.testing.assert_close(reference.nucleus_log_probs(logits, 2.0, 0.6)[0], want)
    n = 20_000
    u = torch.rand(n, generator=torch.Generator().manual_seed(3))
    for op in (ops.propose, reference.propose):
        current = torch.full((n,), 2, device=device)
        proposed, logq, logq_current = (t.cpu() for t in op(logits.expand(n, 4).to(device), current, 2.0, 0.6,
                                                             u.to(device)))
        torch.testing.assert_close(logq, want[proposed])
        assert bool(torch.isinf(logq_current).all()), "token 2 lies outside the nucleus"
        share = float((proposed == 0).double().mean())
        assert abs(share - math.exp(1.0) / z) < 5 * math.sqrt(0.25 / n), share  # 0.6225
