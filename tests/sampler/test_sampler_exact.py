"""mhfast.sample draws from exp(-E / tau) / Z exactly: checked against full enumeration.

On models small enough to enumerate every sequence (tabular conditionals, a tiny random BERT),
the final states of n independent chains (one batched call, counter-based RNG, so chains are
independent) are compared with the target computed by enumeration, the energies coming from
the reference ops (:mod:`mhfast.reference`).

Tolerance. For K states with target p_k and empirical frequencies from n independent draws,
E|p_hat_k - p_k| <= sqrt(p_k (1 - p_k) / n), so E[TV] <= 0.5 * sum_k sqrt(p_k (1 - p_k) / n)
=: m (<= 0.5 sqrt(K / n)). TV changes by at most 1/n when one draw changes, so McDiarmid gives
P(TV > m + t) <= exp(-2 n t^2). We assert TV < 3 m: with the n and m used here (n >= 2000,
m >= ~0.02) a false failure has probability < exp(-2 n (2m)^2) < 1e-6, while a sampler with the
wrong stationary distribution (degenerate Gibbs on the paper's counter-example) misses by 10x.
The number of epochs is chosen so that the chains (all warm-started at the same greedy state)
have mixed: the distance to stationarity is far below m.
"""
from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch

import mhfast
from mhfast import reference
from mhfast.models.tabular import TabularMLM, counter_example


def sample(device: str, *args, **kwargs) -> mhfast.SampleResult:
    """``mhfast.sample(*args, device=device, **kwargs)`` with its tensors moved to the CPU, where the
    assertions compare them; checks first that the chains lived on ``device``."""
    result = mhfast.sample(*args, device=device, **kwargs)
    assert result.tokens.device.type == device, f"chains on {result.tokens.device}, asked for {device}"
    return dataclasses.replace(result, **{f.name: getattr(result, f.name).cpu() for f in dataclasses.fields(result)
                                          if isinstance(getattr(result, f.name), torch.Tensor)})

N_CHAINS = 3000


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def ordinary_tokens(model) -> list[int]:
    special = set(int(i) for i in model.special_ids) | {model.mask_id, model.pad_id}
    return [t for t in range(model.vocab_size) if t not in special]


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


def tv_and_bound(p: torch.Tensor, p_hat: torch.Tensor, n: int) -> tuple[float, float]:
    tv = 0.5 * float((p - p_hat).abs().sum())
    mean_bound = 0.5 * float(torch.sqrt(p * (1 - p) / n).sum())
    return tv, 3 * mean_bound


def run_and_compare(device, model, template, free, *, energy, tau=1.0, n=N_CHAINS, **kwargs):
    energy_mask = ~torch.isin(template, torch.tensor(sorted(set(model.special_ids) - {model.mask_id})))
    states = enumerate_states(model, template, free)
    p = target_distribution(model, states, energy_mask, energy, tau)
    start_tau = kwargs.pop("start_tau", tau)  # annealed runs start hotter and end at tau
    result = sample(device, model, init=template[None], free_positions=free[None], chains=n, energy=energy,
                    target_temperature=start_tau, **kwargs)
    p_hat = empirical(states, result.tokens[0])
    return (*tv_and_bound(p, p_hat, n), result)


def nucleus_connected(model, template, free, proposal_temperature, top_p) -> bool:
    """Whether single-site moves inside the nucleus connect every state (else MH is reducible)."""
    states = enumerate_states(model, template, free)
    K = states.shape[0]
    special = torch.zeros(model.vocab_size, dtype=torch.bool)
    special[list(model.special_ids)] = True
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


TABULAR_CASES = [
    # id, model kwargs, sample kwargs
    ("mh-raw", dict(), dict(energy="raw")),
    ("mh-local-ptemp0.5-features", dict(features=True), dict(energy="local", proposal_temperature=0.5)),
    ("mh-raw-ptemp2-tau0.5-l2r", dict(), dict(energy="raw", proposal_temperature=2.0, tau=0.5,
                                              order="left-to-right")),
    ("mh-local-top_p0.8", dict(features=True), dict(energy="local", top_p=0.8)),
    ("mh-local-annealed-to-0.5", dict(), dict(energy="local", tau=0.5, start_tau=1.0, anneal=0.1,
                                              min_target_temperature=0.5)),
    ("block2-raw-hooks", dict(row_hooks=True), dict(energy="raw", sampler="block-mh", block_schedule=2)),
    ("block3-local-ptemp2-features", dict(features=True, row_hooks=True),
     dict(energy="local", sampler="block-mh", block_schedule=3, proposal_temperature=2.0)),
    ("block-schedule-local-tau0.5", dict(), dict(energy="local", sampler="block-mh", tau=0.5,
                                                 block_schedule=lambda e: 1 + e % 3)),
]


@pytest.mark.parametrize("name,model_kwargs,kwargs", TABULAR_CASES, ids=[c[0] for c in TABULAR_CASES])
def test_tabular_matches_enumeration(name, model_kwargs, kwargs, device):
    # scale 0.5: peaked enough that MH rejects often, flat enough that 30 epochs mix at tau = 0.5
    model = TabularMLM.random(num_tokens=3, length=3, seed=11, scale=0.5, **model_kwargs)
    template, free = masks(model, 3)
    if "top_p" in kwargs:
        assert nucleus_connected(model, template, free, 1.0, kwargs["top_p"]), "test model must be irreducible"
    tv, bound, result = run_and_compare(device, model, template, free, epochs=30, burn_in=5, seed=1, **kwargs)
    assert tv < bound, f"{name}: TV {tv:.4f} >= bound {bound:.4f}"
    assert 0 < float(result.novel_rate[-5:].mean()) <= float(result.acceptance_rate[-5:].mean()) <= 1


@pytest.mark.parametrize("sampler", ["gibbs", "block-gibbs"])
def test_tabular_degenerate_gibbs_misses_the_target(sampler, device):
    """Negative control: the same comparison rejects the degenerate samplers on the tabular model
    (its random conditionals are inconsistent), so the bound above has power."""
    model = TabularMLM.random(num_tokens=3, length=3, seed=11, scale=0.5)
    template, free = masks(model, 3)
    blocks = {"block_schedule": 2} if sampler == "block-gibbs" else {}  # an ineffective option is an error
    tv, bound, _ = run_and_compare(device, model, template, free, energy="local", epochs=30, burn_in=5, seed=1,
                                   sampler=sampler, **blocks)
    assert tv > bound, f"{sampler}: TV {tv:.4f} <= bound {bound:.4f}"


def test_infilling_with_padding_matches_enumeration(device):
    """A length-3 row padded to 4 with its middle token fixed: the fixed token counts in the energy."""
    model = TabularMLM.random(num_tokens=3, length=(3, 4), seed=5)
    template = torch.tensor([model.mask_id, 1, model.mask_id])
    free = torch.tensor([True, False, True])
    states = enumerate_states(model, template, free)
    p = target_distribution(model, states, torch.ones(3, dtype=torch.bool), "local", 0.7)
    init = torch.tensor([[model.mask_id, 1, model.mask_id, model.pad_id]])
    result = sample(device, model, init=init, free_positions=torch.tensor([[True, False, True, False]]),
                    chains=N_CHAINS, energy="local", target_temperature=0.7, epochs=30, burn_in=5, seed=2)
    assert bool((result.tokens[0, :, 3] == model.pad_id).all())
    tv, bound = tv_and_bound(p, empirical(states, result.tokens[0, :, :3]), N_CHAINS)
    assert tv < bound, f"TV {tv:.4f} >= bound {bound:.4f}"


@pytest.mark.parametrize("energy", ["raw", "local"])
def test_counter_example_mh_is_exact(energy, device):
    """Appendix C: MH samples pi(x1, x2) ~ p(x1 | x2) (.495 on aa/bb); the chains need ~100 epochs to
    cross between the two modes, so this runs longer."""
    model = counter_example()
    template, free = masks(model, 2)
    tv, bound, _ = run_and_compare(device, model, template, free, energy=energy, n=2000, epochs=200, burn_in=5, seed=3)
    assert tv < bound, f"TV {tv:.4f} >= bound {bound:.4f}"


def test_counter_example_degenerate_gibbs_is_not(device):
    """The paper's point (section 2.1, appendix C): Gibbs with the MLM conditionals samples another
    distribution. Left-to-right, the last update draws X2 uniformly whatever X1: the final states
    are uniform, at TV 0.49 from the target."""
    model = counter_example()
    template, free = masks(model, 2)
    tv, bound, result = run_and_compare(device, model, template, free, energy="raw", n=2000, epochs=20, burn_in=5,
                                        sampler="gibbs", order="left-to-right", seed=4)
    assert tv > 0.4 and tv > 5 * bound, f"degenerate Gibbs TV {tv:.4f} (bound {bound:.4f})"
    assert float(result.acceptance_rate.min()) == 1.0


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


@pytest.mark.parametrize("sampler,energy", [("mh", "local"), ("block-mh", "raw")])
def test_tiny_bert_matches_enumeration(sampler, energy, device):
    model = tiny_bert(device)
    template = model.frame(3)  # [CLS] m m m [SEP]: the specials are fixed and outside the energy
    free = template == model.mask_id
    n = 2000
    tv, bound, result = run_and_compare(device, model, template, free, energy=energy, n=n, epochs=15, burn_in=3, seed=5,
                                        sampler=sampler, block_schedule=2 if sampler == "block-mh" else None)
    assert tv < bound, f"TV {tv:.4f} >= bound {bound:.4f}"
    assert bool((result.tokens[0, :, 0] == 2).all()) and bool((result.tokens[0, :, 4] == 3).all())
