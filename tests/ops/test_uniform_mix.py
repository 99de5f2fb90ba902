"""uniform_mix (issue 17): proposals q = (1 - eps) q_nucleus + eps / n over the n proposable tokens.

* the op: compiled == reference (fixed uniforms away from the mixture's CDF boundaries, random
  shapes, dtypes, temperatures, top_p), draws follow the mixture (chi-square), -inf logits are
  never proposed, bad uniform_mix is rejected naming it;
* the sampler: exact by enumeration with eps > 0 and top_p < 1 (single-site and block MH; the
  machinery and the tolerance of tests/sampler/test_sampler_exact.py); a model that top_p < 1 makes
  reducible: with eps = 0 the chains never leave the class they start in (TV ~0.5), with eps > 0
  they reach the enumerated target; gibbs/block-gibbs reject eps > 0 ("auto" gives them 0).
"""
from __future__ import annotations

import pytest
import torch
from scipy import stats

import mhfast
import mhfast.ops as ops
import mhfast.reference as reference
from mhfast.models.tabular import TabularMLM
from mhfast.sampler import options
from op_checks import raises_everywhere
from test_propose import P_MARGIN, U_MARGIN, ambiguous_current, mass_before_sorted, random_logits
from exact_checks import agreeing_pair, masks, nucleus_connected, run_and_compare

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ---------------------------------------------------------------------------- the op
def mixture_uniforms(logits, temperature, top_p, eps, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row a uniform at least U_MARGIN from every CDF boundary of the mixture, and whether the row is
    unambiguous (no token's nucleus membership within P_MARGIN of top_p: it moves the mixture's CDF)."""
    B = logits.shape[0]
    q = reference.proposal_log_probs(logits, temperature, top_p, eps).double().exp()
    cdf = torch.cat([torch.zeros(B, 1, dtype=torch.float64), q.cumsum(1)], dim=1).contiguous()
    cand = torch.rand(B, 64, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).contiguous()
    idx = torch.searchsorted(cdf, cand).clamp(1, cdf.shape[1] - 1)
    dist = torch.minimum((cdf.gather(1, idx) - cand).abs(), (cand - cdf.gather(1, idx - 1)).abs())
    good = dist > U_MARGIN
    u = cand.gather(1, good.int().argmax(1)[:, None]).squeeze(1).float()
    ok = good.any(1)
    if top_p < 1:
        mass, _ = mass_before_sorted(logits, temperature)
        ok &= ~((mass - top_p).abs() < P_MARGIN).any(1)
    return u, ok


CASES = [  # V, dtype, temperature, top_p, eps
    (2, torch.float32, 1.0, 0.5, 0.01), (5, torch.float32, 0.5, 0.9, 0.3), (100, torch.float32, 2.0, 0.3, 0.01),
    (100, torch.float16, 1.0, 1.0, 0.2), (1000, torch.bfloat16, 0.8, 0.7, 0.05), (1000, torch.float32, 1.0, 0.05, 0.5),
    (3000, torch.float32, 1.0, 1.0, 0.01),
]


@pytest.mark.parametrize("V,dtype,temperature,top_p,eps", CASES)
def test_op_matches_reference(device, V, dtype, temperature, top_p, eps):
    logits = random_logits(64, V, seed=V + int(eps * 100)).to(dtype)
    u, ok = mixture_uniforms(logits, temperature, top_p, eps, seed=V)
    assert ok.float().mean() >= 0.25, "test setup: too few rows away from boundaries"
    g = torch.Generator().manual_seed(V + 1)
    current = torch.randint(0, V, (64,), generator=g)  # anywhere: in, out of the nucleus, -inf logits
    expected = reference.propose(logits, current, temperature, top_p, u, eps)
    cmp = ok & ~ambiguous_current(logits, temperature, top_p, current)
    fns = [ops.propose] + ([torch.ops.mhfast.propose] if device == "cpu" else [])
    for fn in fns:
        got = [t.cpu() for t in fn(logits.to(device), current.to(device), temperature, top_p, u.to(device), eps)]
        assert torch.equal(got[0][ok], expected[0][ok])
        torch.testing.assert_close(got[1][ok], expected[1][ok], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(got[2][cmp], expected[2][cmp], rtol=1e-4, atol=1e-4)
        assert torch.isfinite(logits.gather(1, got[0][:, None])).all(), "proposed a -inf logit"
        assert torch.isfinite(got[1]).all()
    # Every token of finite logit has q > 0 under the mixture, a -inf logit has q = 0.
    proposable = torch.isfinite(logits.float() / temperature).gather(1, current[:, None]).squeeze(1)
    assert torch.equal(torch.isfinite(expected[2]), proposable)


@pytest.mark.parametrize("top_p,eps", [(0.5, 0.2), (1.0, 0.1), (0.05, 0.01)])
def test_draws_follow_the_mixture_chi_square(device, top_p, eps):
    n, V = 100_000, 12
    g = torch.Generator().manual_seed(99)
    row = torch.randn(1, V, generator=g) * 2.0
    row[0, 3] = float("-inf")  # never proposed, not part of the uniform share
    row[0, 8] = -60.0  # p underflows to 0 in fp32, but the logit is finite: proposable
    logits = row.expand(n, V)
    proposed, logq_p, _ = (t.cpu() for t in ops.propose(logits.to(device), torch.zeros(n, dtype=torch.long,
                                                                                         device=device),
                                                         0.9, top_p, torch.rand(n, generator=g).to(device), eps))
    q = reference.proposal_log_probs(row, 0.9, top_p, eps)[0].double().exp()
    assert q[3] == 0 and q[8] > 0 and bool((q[torch.arange(V) != 3] >= eps / (V - 1) * (1 - 1e-5)).all())
    counts = torch.bincount(proposed, minlength=V).double()
    assert counts[3] == 0, "proposed a -inf logit"
    torch.testing.assert_close(logq_p, q.log().float()[proposed], rtol=1e-5, atol=1e-5)
    kept = q > 0
    _, p_value = stats.chisquare(counts[kept].numpy(), (q[kept] / q[kept].sum() * n).numpy())
    assert p_value > 1e-4, f"draws do not follow the mixture (chi-square p = {p_value:.2e})"


def test_zero_mix_is_the_nucleus_proposal(device):
    """uniform_mix = 0 is the op of before: the same tokens and log q as without the argument, and the
    reference's log q is nucleus_log_probs itself (tokens outside the nucleus: -inf)."""
    logits = random_logits(64, 300, seed=5).to(device)
    current = torch.randint(0, 300, (64,)).to(device)
    u = torch.rand(64).to(device)
    for fn in (ops.propose, reference.propose):
        a, b = fn(logits, current, 1.0, 0.6, u), fn(logits, current, 1.0, 0.6, u, 0.0)
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert torch.equal(reference.proposal_log_probs(logits.cpu(), 1.0, 0.6, 0.0),
                       reference.nucleus_log_probs(logits.cpu(), 1.0, 0.6))


def test_bad_uniform_mix(device):
    logits = random_logits(4, 10, seed=0).to(device)
    current, u = torch.randint(0, 10, (4,)).to(device), torch.rand(4).to(device)
    for bad in (-0.1, 1.0, 1.5, float("nan"), float("inf")):
        raises_everywhere("propose", (logits, current, 1.0, 0.9, u, bad), "uniform_mix")
    raises_everywhere("propose", (logits, current, 1.0, 0.9, u, "0.1"), "uniform_mix", raw=False)


# ---------------------------------------------------------------------------- the option
def test_option_checks_and_auto():
    cfg = lambda **kw: options.config_from_kwargs(kw)  # noqa: E731
    assert options.resolved_uniform_mix(cfg()) == 0.0  # top_p = 1: full support already
    assert options.resolved_uniform_mix(cfg(top_p=0.9)) == options.AUTO_UNIFORM_MIX
    assert options.resolved_uniform_mix(cfg(top_p=0.9, sampler="block-mh")) == options.AUTO_UNIFORM_MIX
    assert options.resolved_uniform_mix(cfg(top_p=0.9, sampler="gibbs")) == 0.0  # auto: none for Gibbs
    assert options.resolved_uniform_mix(cfg(top_p=0.9, uniform_mix=0)) == 0.0
    assert options.resolved_uniform_mix(cfg(uniform_mix=0.25)) == 0.25
    for bad in (-0.1, 1.0, float("nan"), "0.1", True, None):
        with pytest.raises(ValueError, match="uniform_mix must be 'auto' or a number in"):
            cfg(uniform_mix=bad)
    for sampler in ("gibbs", "block-gibbs"):
        cfg(sampler=sampler, uniform_mix=0.0, top_p=0.5)
        with pytest.raises(ValueError, match=f"uniform_mix \\(0.1\\) must be 0 or 'auto' with sampler {sampler}"):
            cfg(sampler=sampler, uniform_mix=0.1)


def test_cli_flag():
    from mhfast.cli import build_parser as cli_parser

    args = cli_parser().parse_args(["sample", "--model", "m", "--length", "3", "--uniform-mix", "0.05"])
    assert options.config_from_args(args).uniform_mix == 0.05
    args = cli_parser().parse_args(["sample", "--model", "m", "--length", "3", "--sampler", "gibbs",
                                    "--uniform-mix", "0.05"])
    with pytest.raises(ValueError, match="--uniform-mix \\(0.05\\) must be 0 or 'auto' with --sampler gibbs"):
        options.config_from_args(args)


# ---------------------------------------------------------------------------- exactness
@pytest.mark.parametrize("name,kwargs", [
    ("mh-local", dict(energy="local")),
    ("block-mh-raw", dict(energy="raw", sampler="block-mh", block_schedule=lambda e: 1 + e % 3)),
])
def test_mixture_matches_enumeration(name, kwargs, device):
    model = TabularMLM.random(num_tokens=3, length=3, seed=11, scale=0.5, features=True)
    template, free = masks(model, 3)
    tv, bound, result = run_and_compare(device, model, template, free, epochs=30, burn_in=5, seed=8, top_p=0.6,
                                        uniform_mix=0.3, **kwargs)
    assert tv < bound, f"{name}: TV {tv:.4f} >= bound {bound:.4f}"
    assert 0 < float(result.novel_rate[-5:].mean()) <= float(result.acceptance_rate[-5:].mean()) <= 1


REDUCIBLE = [("mh", {}), ("block-mh", dict(sampler="block-mh", block_schedule=lambda e: 1 + e % 2))]


@pytest.mark.parametrize("name,kwargs", REDUCIBLE, ids=[r[0] for r in REDUCIBLE])
def test_reducible_nucleus_needs_the_mixture(name, kwargs, device):
    model = agreeing_pair()
    template, free = masks(model, 2)
    assert not nucleus_connected(model, template, free, 1.0, 0.5), "test model must be reducible at top_p=0.5"
    run = lambda eps, epochs, fit=True: run_and_compare(  # noqa: E731
        device, model, template, free, energy="local", n=2000, epochs=epochs, burn_in=0, seed=9, top_p=0.5,
        uniform_mix=eps, fit=fit, **kwargs)
    tv0, bound0, r0 = run(0.0, 30, fit=False)
    start = r0.tokens[0, 0]
    assert bool((r0.tokens[0] == start).all()), "eps = 0: every chain stays at its warm start"
    assert tv0 > 0.45 and tv0 > 5 * bound0, f"eps = 0: TV {tv0:.4f} (bound {bound0:.4f})"
    tv, bound, _ = run(0.2, 60)
    assert tv < bound, f"eps = 0.2: TV {tv:.4f} >= bound {bound:.4f}"
    # auto (0.01 here): slow to mix on this model, but chains do leave the start state.
    _, _, r_auto = run("auto", 30, fit=False)  # (not mixed: only its leaving the start is checked)
    left = float((r_auto.tokens[0] != start).any(dim=1).double().mean())
    assert 0.05 < left, f"auto: only {left:.3f} of the chains left the start state"


@pytest.mark.parametrize("sampler", ["gibbs", "block-gibbs"])
def test_gibbs_rejects_the_mixture(sampler):
    model = agreeing_pair()
    with pytest.raises(ValueError, match="uniform_mix"):
        mhfast.sample(model, 2, sampler=sampler, top_p=0.5, uniform_mix=0.1, chains=2, epochs=2, burn_in=0)
    r = mhfast.sample(model, 2, sampler=sampler, top_p=0.5, chains=2, epochs=2, burn_in=0)  # auto: 0
    assert r.tokens.shape == (1, 2, 2)


def test_a_mixture_too_fine_for_fp32_uniforms_warns():
    """eps / V below 2^-20: the per-token uniform share is coarser than the draw can realize: a warning, not
    silence; a share the uniforms resolve gives none."""
    import warnings

    model = TabularMLM.random(3, 2, seed=0)
    with pytest.warns(UserWarning, match="uniform_mix=1e-07 over a vocabulary of 5 "):
        mhfast.sample(model, 2, chains=2, epochs=1, burn_in=0, uniform_mix=1e-7)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mhfast.sample(model, 2, chains=2, epochs=1, burn_in=0, uniform_mix=0.01)
