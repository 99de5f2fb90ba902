"""Delayed acceptance with a user's surrogate (option ``delayed=<callable>``, API only; mhfast.sampler.moves.
user_surrogate, mhfast.surrogates) samples the exact target.

Checks: (1) enumeration on tabular models (the TV bound of tests/exact_checks.py) with a poor surrogate (a random
fixed function of the sequence and the proposed position), both energies, the memo off and on, an extra energy term,
annealing and parallel tempering; (2) an exact surrogate (the model's own energy: dE~ = dE) makes stage 2 accept
every survivor and gives plain MH's acceptance; (3) :func:`mhfast.surrogates.model_energy` of a second tabular model
as the small model, against enumeration; (4) the two-stage probability of every move from one state at one
position, by hand, against many chains' one step; (5) stage 1 forwards no rows; (6) bad surrogates and options are
clear errors naming ``delayed``.
"""
from __future__ import annotations

import pytest
import torch

import mhfast
from mhfast.models.tabular import TabularMLM
from mhfast.sampler.moves.user_surrogate import surrogate_delta
from mhfast.surrogates import model_energy

from exact_checks import N_CHAINS, empirical, ends_term, enumerate_states, masks, ordinary_tokens, run_and_compare, \
    tv_and_bound

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class RandomSurrogate:
    """A poor surrogate: E~(X, i) = sum_j W[i, j, X_j] for a random table W (fixed: a function of X and i only)."""

    def __init__(self, length: int, vocab: int, seed: int, scale: float = 1.0):
        g = torch.Generator().manual_seed(seed)
        self.w = torch.randn(length, length, vocab, generator=g) * scale

    def __call__(self, tokens: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        w = self.w.to(tokens.device)[pos]  # [n, T, V]: the table of each row's proposed position
        return w.gather(2, tokens[:, :, None]).squeeze(2).sum(1)


def _model() -> TabularMLM:
    return TabularMLM.random(num_tokens=3, length=4, seed=11, scale=0.5)


#: id, the surrogate's scale, sample kwargs. A poor surrogate slows mixing (a move it gets wrong by d costs about
#: exp(-2 beta |d|) both ways); at tau 0.5 a scale of 1 needs hundreds of epochs, so the annealed case uses 0.5
#: (stage 2 still rejects most survivors there), and 300 epochs (at 60 and 150 the chi-square test saw the chains
#: short of the target: p 2e-27 and 6e-7)
CASES = [
    ("raw", 1.0, dict(energy="raw")),
    ("local", 1.0, dict(energy="local")),
    ("raw-annealed", 0.5, dict(energy="raw", tau=0.5, start_tau=1.0, anneal=0.1, min_target_temperature=0.5,
                               epochs=300)),
    ("local-tempered", 1.0, dict(energy="local", tempering=[1.0, 2.5])),
]
MEMO_CASES = [(f"{name}-memo{m}", scale, {**kw, "memo": m}) for name, scale, kw in CASES for m in (0, "auto")]


@pytest.mark.parametrize("name,scale,kwargs", MEMO_CASES, ids=[c[0] for c in MEMO_CASES])
def test_poor_surrogate_matches_enumeration(name, scale, kwargs, device):
    model = _model()
    template, free = masks(model, 4)
    sur = RandomSurrogate(4, model.vocab_size, seed=5, scale=scale)
    tv, bound, r = run_and_compare(device, model, template, free, burn_in=5, seed=1, delayed=sur,
                                   **{"epochs": 60, **kwargs})
    assert tv < bound, f"{name}: TV {tv:.4f} >= bound {bound:.4f}"
    assert 0 < r.delayed_accepted <= r.delayed_passed < r.delayed_tested  # a real screen, then a real correction
    assert r.delayed_accepted < r.delayed_passed  # the surrogate is poor: stage 2 rejects some survivors
    assert (r.memo_hits > 0) == (kwargs["memo"] != 0)
    if kwargs["memo"] == 0:
        assert r.delayed_rows_saved == 3 * (r.delayed_tested - r.delayed_passed)  # T_e - 1 = 3 rows per rejection


def _target(model, states: torch.Tensor, energy: str) -> torch.Tensor:
    e = mhfast.energy(model, states, energy=energy)
    return torch.softmax(-(e.e_raw if energy == "raw" else e.e_local).double(), 0)


@pytest.mark.parametrize("memo", [0, "auto"])
@pytest.mark.parametrize("energy", ["raw", "local"])
def test_poor_surrogate_with_extra_energy_matches_enumeration(energy, memo, device):
    model = TabularMLM.random(num_tokens=3, length=4, seed=7, scale=0.5)
    template, free = masks(model, 4)
    states = enumerate_states(model, template, free)
    weight = torch.softmax(torch.log(_target(model, states, energy)) - ends_term(states).double(), 0)
    r = mhfast.sample(model, init=template[None], free_positions=free[None], chains=N_CHAINS, energy=energy,
                      epochs=60, burn_in=5, seed=3, delayed=RandomSurrogate(4, model.vocab_size, seed=2),
                      extra_energy=[ends_term], memo=memo, device=device)
    tv, bound = tv_and_bound(weight, empirical(states, r.tokens[0].cpu()), N_CHAINS)
    assert tv < bound, f"TV {tv:.4f} >= bound {bound:.4f}"
    assert r.delayed_accepted < r.delayed_passed < r.delayed_tested
    assert (r.memo_hits > 0) == (memo != 0)


@pytest.mark.parametrize("energy", ["raw", "local"])
def test_exact_surrogate_accepts_as_plain_mh(energy):
    """The model's own energy as the surrogate: dE~ = dE (to float rounding), so stage 2 accepts every survivor
    and the acceptance is plain MH's (the same kernel with other uniforms); the chains still match enumeration."""
    model = TabularMLM.random(num_tokens=4, length=5, seed=2, scale=0.8)
    kw = dict(chains=2000, epochs=8, burn_in=0, seed=5, energy=energy, memo=0)
    plain = mhfast.sample(model, 5, **kw)
    exact = mhfast.sample(model, 5, delayed=model_energy(model, energy), **kw)
    assert exact.delayed_accepted == exact.delayed_passed > 0
    assert exact.delayed_rows_saved == 4 * (exact.delayed_tested - exact.delayed_passed) > 0
    n = plain.proposals
    a, b = float(plain.acceptance_rate.mean()), float(exact.acceptance_rate.mean())
    assert abs(a - b) < 6 * (a * (1 - a) / n) ** 0.5 * 2 ** 0.5 * 3, (a, b)  # x3: steps of a chain correlate


@pytest.mark.parametrize("memo", [0, "auto"])
@pytest.mark.parametrize("energy", ["raw", "local"])
def test_model_energy_of_a_smaller_model_matches_enumeration(energy, memo, device):
    """mhfast.surrogates.model_energy of a second tabular model (same vocabulary, other tables) as stage 1."""
    model = _model()
    small = TabularMLM.random(num_tokens=3, length=4, seed=12, scale=0.5)
    template, free = masks(model, 4)
    tv, bound, r = run_and_compare(device, model, template, free, epochs=30, burn_in=5, seed=2, energy=energy,
                                   memo=memo, delayed=model_energy(small, energy))
    assert tv < bound, f"TV {tv:.4f} >= bound {bound:.4f}"
    assert 0 < r.delayed_accepted < r.delayed_passed < r.delayed_tested


def test_model_energy_loads_its_model_and_checks_its_options_once_up_front(monkeypatch, tmp_path):
    """model_energy resolves its model (a name, a directory, a transformers object) once, when made: before, each
    MH step's call passed the directory to mhfast.energy, which loaded it from disk again (9 loads in a 2-chain,
    2-epoch run); bad options are refused when it is made, naming it, not at the first step."""
    from hf_tiny_models import BERT_IDS, save_tiny_bert_dir, tiny_model
    from mhfast.models import loading
    from mhfast.models.hf import HFMaskedLM

    small_dir = save_tiny_bert_dir(tmp_path / "small", seed=1)
    loads: list[object] = []
    real = loading.load_masked_lm
    monkeypatch.setattr(loading, "load_masked_lm", lambda m, *a, **k: loads.append(m) or real(m, *a, **k))
    surrogate = model_energy(small_dir)
    big = HFMaskedLM(tiny_model("bert", seed=0), **BERT_IDS)
    r = mhfast.sample(big, 5, chains=2, epochs=2, burn_in=0, start="random", top_p=1.0, delayed=surrogate)
    assert r.delayed_tested > 0 and loads.count(small_dir) == 1
    small = TabularMLM.random(num_tokens=3, length=4, seed=12, scale=0.5)
    with pytest.raises(ValueError, match="mhfast.surrogates.model_energy: max_tokens_per_batch must be"):
        model_energy(small, max_tokens_per_batch=0)
    with pytest.raises(ValueError, match="mhfast.surrogates.model_energy: backend"):
        model_energy(small, backend="gpu")


def _two_stage(model, sur, x: torch.Tensor, i: int, energy: str, tau: float) -> torch.Tensor:
    """By hand: the probability of each token at position i after one delayed-acceptance step from ``x`` with the
    surrogate ``sur``: q(y | x) alpha1(y) alpha2(y), the rest on x_i (f64[V])."""
    words = ordinary_tokens(model)
    row = x.clone()[None]
    row[0, i] = model.mask_id
    logits = model.masked_logits(row, torch.tensor([i]))[0].double()
    logq = torch.log_softmax(logits[words], 0)
    ys = torch.stack([x.clone() for _ in words])
    ys[:, i] = torch.tensor(words)
    states = torch.cat([x[None], ys])
    e = mhfast.energy(model, states, energy=energy)
    e = (e.e_raw if energy == "raw" else e.e_local).double()
    e_sur = sur(states, torch.full((states.shape[0],), i)).double()
    d_exact, d_sur = e[1:] - e[0], e_sur[1:] - e_sur[0]
    hastings = logq[words.index(int(x[i]))] - logq
    a1 = torch.clamp(torch.exp(-d_sur / tau + hastings), max=1.0)
    a2 = torch.clamp(torch.exp(-(d_exact - d_sur) / tau), max=1.0)
    p = torch.zeros_like(logits)
    p[words] = torch.exp(logq) * a1 * a2
    p[x[i]] = 0.0
    p[x[i]] = 1.0 - p.sum()
    return p


@pytest.mark.parametrize("energy", ["raw", "local"])
def test_two_stage_probability_of_every_move(energy):
    """One step at one position (only it is free) from one state, 20000 chains: the new token's distribution
    matches q alpha1 alpha2 computed by hand with the user's surrogate."""
    model = TabularMLM.random(num_tokens=5, length=6, seed=4, scale=1.5)
    words = ordinary_tokens(model)
    x = torch.tensor([words[t % len(words)] for t in (5, 6, 7, 5, 8, 6)])
    i, n, tau = 2, 20000, 0.8
    free = torch.zeros(6, dtype=torch.bool)
    free[i] = True
    sur = RandomSurrogate(6, model.vocab_size, seed=8)
    r = mhfast.sample(model, init=x[None], free_positions=free[None], chains=n, epochs=1, burn_in=0, seed=9,
                      energy=energy, target_temperature=tau, delayed=sur)
    got = torch.bincount(r.tokens[0, :, i], minlength=model.vocab_size).double() / n
    want = _two_stage(model, sur, x, i, energy, tau)
    bound = 5 * torch.sqrt(want * (1 - want) / n) + 1e-9
    assert bool(((got - want).abs() <= bound).all()), f"{got.tolist()} vs {want.tolist()}"
    assert r.delayed_passed < r.delayed_tested


def test_stage_one_forwards_no_rows():
    """A surrogate that rejects every move away from the start (E~ = -1000 there): no proposal passes stage 1,
    and the run forwards no more rows than one with a single epoch (the start's scoring only)."""
    model = TabularMLM.random(num_tokens=4, length=6, seed=1)
    start = torch.tensor([ordinary_tokens(model)[0]] * 6)

    def at_start(tokens, pos):
        return -1000.0 * (tokens == start.to(tokens.device)).all(1).float()

    kw = dict(init=start[None], chains=4, burn_in=0, seed=3, memo=0, delayed=at_start)
    one, four = mhfast.sample(model, epochs=1, **kw), mhfast.sample(model, epochs=4, **kw)
    assert four.delayed_tested > 0 and four.delayed_passed == 0 and four.model_rows == one.model_rows
    assert four.delayed_rows_saved == 5 * four.delayed_tested and bool((four.tokens == start).all())


def test_surrogate_delta_is_antisymmetric():
    sur = RandomSurrogate(5, 4, seed=0)
    g = torch.Generator().manual_seed(1)
    old, new = torch.randint(0, 4, (7, 5), generator=g), torch.randint(0, 4, (7, 5), generator=g)
    pos = torch.randint(0, 5, (7,), generator=g)
    d = surrogate_delta(sur, old, new, pos)
    assert d.dtype == torch.float32 and d.shape == (7,)
    assert torch.equal(surrogate_delta(sur, new, old, pos), -d)
    assert torch.allclose(d, sur(new, pos) - sur(old, pos))


@pytest.mark.parametrize("delayed,words", [
    (lambda t, p: torch.zeros(t.shape[0], 2), ["delayed", "one energy per row"]),
    (lambda t, p: torch.full((t.shape[0],), float("nan")), ["delayed", "not finite"]),
    (lambda t, p: [0.0] * t.shape[0], ["delayed", "float tensor", "list"]),
    (lambda t, p: torch.zeros(t.shape[0], dtype=torch.bool), ["delayed", "float tensor", "bool"]),
    (object(), ["delayed", "callable"]),
    # [N/2, 2]: 2 N numbers, but pairs of them (it had been flattened, pairing energies with other rows)
    (lambda t, p: torch.zeros(t.shape[0] // 2, 2), ["delayed", "one energy per row"]),
    (lambda t, p: torch.zeros(t.shape[0], device="meta"), ["delayed", "meta device"]),
])
def test_bad_surrogates_are_clear_errors(delayed, words):
    model = TabularMLM.random(num_tokens=3, length=4, seed=0)
    with pytest.raises(ValueError) as err:
        mhfast.sample(model, 4, chains=3, epochs=2, burn_in=0, delayed=delayed)
    for w in words:
        assert w in str(err.value), str(err.value)


def test_block_mh_and_bad_model_energy_are_clear_errors():
    model = TabularMLM.random(num_tokens=3, length=4, seed=0)
    with pytest.raises(ValueError) as err:
        mhfast.sample(model, 4, chains=2, epochs=1, burn_in=0, sampler="block-mh", delayed=model_energy(model))
    assert "delayed" in str(err.value) and "sampler" in str(err.value) and "block-mh" in str(err.value)
    with pytest.raises(ValueError, match="energy must be 'raw' or 'local'"):
        model_energy(model, "pll")


def test_an_integer_surrogate_of_any_width_is_taken():
    """int32 energies had been refused ("must return a float tensor") where int64 ones were taken."""
    model = TabularMLM.random(num_tokens=3, length=4, seed=0)
    runs = [mhfast.sample(model, 4, chains=3, epochs=3, burn_in=0, seed=2,
                          delayed=lambda t, p, d=dtype: (t == 1).sum(1).to(d)) for dtype in (torch.int32, torch.long)]
    assert torch.equal(runs[0].tokens, runs[1].tokens) and runs[0].delayed_tested == runs[1].delayed_tested > 0


def test_model_energy_of_another_vocabulary_is_refused():
    """Its model must share the sampled model's token ids: a smaller vocabulary had failed inside mhfast.energy
    ("tokens holds mask_id (2)", naming neither), a larger one ran with a surrogate of other tokens."""
    big = TabularMLM.random(num_tokens=3, length=4, seed=0)
    for other in (TabularMLM.random(num_tokens=2, length=4, seed=1), TabularMLM.random(num_tokens=4, length=4, seed=1)):
        with pytest.raises(ValueError, match=r"^mhfast.sample: delayed: model_energy's model has \(vocab_size, "
                                             r"mask_id, pad_id, special_ids\) = "):
            mhfast.sample(big, 4, chains=3, epochs=2, burn_in=0, delayed=model_energy(other))


def test_a_model_energy_that_cannot_score_the_rows_names_delayed():
    """A model of the same vocabulary that takes no rows of the sampled length passes the vocabulary check and
    fails at the first step: its message had named neither delayed nor the surrogate (a review)."""
    big = TabularMLM.random(num_tokens=3, length=(2, 3), seed=5)
    short = TabularMLM.random(num_tokens=3, length=(2,), seed=6)
    with pytest.raises(ValueError, match=r"^mhfast.sample: delayed: model_energy's model cannot score the sampled "
                                         r"rows: .*length 3"):
        mhfast.sample(big, 3, chains=2, epochs=2, burn_in=0, delayed=model_energy(short))


@pytest.mark.parametrize("energy", ["raw", "local"])
def test_memo_gives_the_same_chains_with_fewer_rows(energy):
    """The memo supplies numbers only (a hit forwards no rows; a miss rejected at stage 1 stores nothing; a miss a
    same-step hit reads forwards all its rows): with a surrogate whose rows do not depend on their batch, the
    chains with the memo on are those with it off, bit for bit, with fewer rows."""
    model = TabularMLM.random(num_tokens=3, length=5, seed=3, scale=0.8)
    kw = dict(chains=64, epochs=6, burn_in=0, seed=4, energy=energy, delayed=RandomSurrogate(5, model.vocab_size, 1),
              extra_energy=[ends_term])
    off, on = mhfast.sample(model, 5, memo=0, **kw), mhfast.sample(model, 5, memo="auto", **kw)
    assert torch.equal(off.tokens, on.tokens) and torch.equal(off.energy, on.energy)
    assert (off.delayed_tested, off.delayed_passed, off.delayed_accepted) == (
        on.delayed_tested, on.delayed_passed, on.delayed_accepted)
    assert on.memo_hits > 0 and on.model_rows < off.model_rows
