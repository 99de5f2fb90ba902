"""mhfast.sample: backends, RNG independence from batching, infilling, padding, recording, schedules,
caching (rows per step), the conditional path and argument errors."""
from __future__ import annotations


import pytest
import torch

import mhfast
from mhfast import reference
from mhfast.models.tabular import ConditionalTabularMLM, TabularMLM
from exact_checks import sample  # the device-checking wrapper of mhfast.sample

SAMPLERS = ["mh", "gibbs", "block-mh", "block-gibbs"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def for_sampler(sampler: str, **kw) -> dict:
    """``kw`` and ``sampler``, without the options that ``sampler`` rejects as having no effect: block sizes for
    the single-site samplers, the acceptance options for the always-accepting Gibbs samplers."""
    from mhfast.sampler.kernels import KERNELS
    from mhfast.sampler.options import ACCEPTANCE_OPTIONS

    caps = KERNELS[sampler].capabilities
    drop = ({"block_schedule"} if not caps.blocks else set()) | \
        (set(ACCEPTANCE_OPTIONS) if caps.always_accepts else set())
    return {**{name: v for name, v in kw.items() if name not in drop}, "sampler": sampler}


def model4(**kwargs) -> TabularMLM:
    return TabularMLM.random(num_tokens=3, length=(2, 3, 4), seed=3, scale=0.7, **kwargs)


def energy_of(model, tokens: torch.Tensor) -> tuple[float, float]:
    """(E_raw, E_local) of one unpadded row, every non-special position in the energy."""
    tokens = tokens.cpu()
    pos = (~torch.isin(tokens, torch.tensor(model.special_ids))).nonzero().squeeze(1)
    rows = reference.masked_copies(tokens[None], torch.zeros_like(pos), pos, model.mask_id)
    e_raw, e_local, _ = reference.gather_energies(model.masked_logits(rows, pos), tokens[pos],
                                                  torch.zeros_like(pos), 1)
    return float(e_raw), float(e_local)


@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize("energy", ["raw", "local"])
def test_compiled_and_reference_backends_give_identical_chains(sampler, energy, device):
    model = model4(features=True, row_hooks=True)
    kw = for_sampler(sampler, chains=6, epochs=6, burn_in=2, seed=7, energy=energy, record="epoch",
                     block_schedule=[3, 3, 2, 2, 1, 1], force_accept_epochs=1, anneal=0.1)
    a = sample(device, model, 4, backend="compiled", **kw)
    b = sample(device, model, 4, backend="reference", **kw)
    assert torch.equal(a.history, b.history)
    assert torch.equal(a.best_tokens, b.best_tokens)
    torch.testing.assert_close(a.energy, b.energy)
    torch.testing.assert_close(a.acceptance_rate, b.acceptance_rate)
    assert a.model_rows == b.model_rows


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: scripts/gpu_check.sh runs it there")
@pytest.mark.parametrize("sampler", SAMPLERS)
def test_cuda_compiled_chains_equal_cpu_reference_chains(sampler):
    """The compiled CUDA kernels against the pure-PyTorch reference on the CPU: the counter-based RNG
    gives both the same uniforms and the tabular model the same logits, so the chains must agree
    (a draw within fp32 rounding of a CDF boundary could differ: none does at these sizes)."""
    model = model4(features=True, row_hooks=True)
    kw = for_sampler(sampler, chains=6, epochs=6, burn_in=2, seed=7, energy="local", record="epoch",
                     block_schedule=[3, 3, 2, 2, 1, 1], force_accept_epochs=1, anneal=0.1, top_p=0.9)
    a = sample("cuda", model, 4, backend="compiled", **kw)
    b = sample("cpu", model, 4, backend="reference", **kw)
    assert torch.equal(a.history, b.history)
    assert torch.equal(a.best_tokens, b.best_tokens)
    torch.testing.assert_close(a.energy, b.energy)
    assert a.model_rows == b.model_rows


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_chain_does_not_depend_on_batch_or_sub_batching(sampler, device):
    """Input 0 alone, or first in a padded batch with longer/shorter rows, more chains and tiny
    sub-batches, follows the same chains (the RNG is keyed by input, chain, epoch and step)."""
    model = model4()
    m, p = model.mask_id, model.pad_id
    alone = torch.tensor([[m, m, m]])
    batch = torch.tensor([[m, m, m, p], [m, m, m, m], [m, m, p, p]])
    kw = for_sampler(sampler, epochs=5, burn_in=1, seed=11, record="epoch", block_schedule=2)
    a = sample(device, model, init=alone, chains=3, **kw)
    b = sample(device, model, init=batch, chains=5, max_tokens_per_batch=7, **kw)
    assert torch.equal(a.history[:, 0], b.history[:, 0, :3, :3])
    assert bool((b.history[:, 0, :, 3] == p).all()) and bool((b.history[:, 2, :, 2:] == p).all())
    torch.testing.assert_close(a.energy[0], b.energy[0, :3])
    assert b.lengths.tolist() == [3, 4, 2]


@pytest.mark.parametrize("kwargs", [dict(), dict(force_accept_epochs=6),
                                    dict(force_accept_epochs=6, sampler="block-mh", block_schedule=2)],
                         ids=["mh", "mh-forced", "block-mh-forced"])
def test_energies_and_best_state_are_consistent(kwargs, device):
    """The cached energies are the final tokens' (also after forced-accept epochs, whose moves skip the test: a
    commit that kept the old energies there was seen only by comparing two samplers) and the best state's."""
    model = model4(features=True)
    r = sample(device, model, 4, chains=5, epochs=6, burn_in=2, seed=2, energy="local", **kwargs)
    for c in range(5):
        e_raw, e_local = energy_of(model, r.tokens[0, c])
        assert abs(e_raw - float(r.energy_raw[0, c])) < 1e-4
        assert abs(e_local - float(r.energy_local[0, c])) < 1e-4
    assert abs(energy_of(model, r.best_tokens[0])[1] - float(r.best_energy[0])) < 1e-4
    assert float(r.best_energy[0]) <= float(r.energy_local.min()) + 1e-6
    assert abs(float(r.e_local[-1]) - float(r.energy_local.mean())) < 1e-4


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_infilling_never_changes_fixed_positions(sampler, device):
    model = model4()
    m = model.mask_id
    init = torch.tensor([[2, m, 0, m], [1, 1, 1, 1]])
    free = torch.tensor([[False, True, False, True], [True, False, False, True]])
    r = sample(device, model, init=init, free_positions=free, chains=4, epochs=5, burn_in=0, seed=1,
               sampler=sampler, record="epoch", proposal_temperature=3.0)
    fixed = ~free
    for e in range(5):
        for c in range(4):
            assert torch.equal(r.history[e, :, c][fixed], init[fixed])
    assert bool((r.tokens[0, :, [1, 3]] < 3).all())  # masks filled with ordinary tokens
    changed = (r.history[:, 1, :, 0] != 1) | (r.history[:, 1, :, 3] != 1)
    assert bool(changed.any()), "free positions should move with a hot proposal"


def test_record_epoch_history_shapes(device):
    model = model4()
    r = sample(device, model, 3, chains=4, epochs=9, burn_in=3, record="epoch")
    assert r.history.shape == (6, 1, 4, 3)
    assert torch.equal(r.history[-1], r.tokens)
    assert sample(device, model, 3, chains=4, epochs=9, burn_in=3).history is None
    assert sample(device, model, 3, chains=2, epochs=3, burn_in=3, record="epoch").history.shape == (0, 1, 2, 3)
    for name in ("e_raw", "e_local", "acceptance_rate", "novel_rate", "target_temperature"):
        assert getattr(r, name).shape == (9,)


def test_annealing_schedule_and_force_accept(device):
    model = model4()
    r = sample(device, model, 4, chains=20, epochs=12, burn_in=2, target_temperature=1.0, anneal=0.2,
               min_target_temperature=0.3, force_accept_epochs=3, proposal_temperature=4.0, seed=3)
    expected = [max(0.3, 1.0 - 0.2 * e) for e in range(12)]
    torch.testing.assert_close(r.target_temperature, torch.tensor(expected))
    assert r.acceptance_rate[:3].tolist() == [1.0, 1.0, 1.0]
    assert float(r.acceptance_rate[3:].max()) < 1.0  # hot proposals, cold target: real rejections
    assert bool((r.novel_rate <= r.acceptance_rate).all())


@pytest.mark.parametrize("sampler", ["mh", "block-mh"])
def test_each_annealed_epoch_accepts_at_its_own_temperature(sampler, device):
    """The acceptance rate of each of the first two epochs equals the exact one at that epoch's temperature (one
    free position: the chain's law after epoch 0 is known in closed form). The reported schedule was checked, but
    not the beta the MH test used: a beta one epoch ahead (1 / tau(e + 1)) passed every test."""
    model = TabularMLM.random(num_tokens=4, length=1, seed=5, scale=1.5)
    logits = model.masked_logits(torch.tensor([[model.mask_id]]), torch.tensor([0]))[0, :4].double()
    q = torch.softmax(logits, 0)  # proposal temperature 1, top_p 1: the conditional itself

    def accept(beta):  # a[x, x'] = min(1, exp(-beta dE) q(x) / q(x')), dE = -(l[x'] - l[x])
        return torch.clamp(torch.exp((beta - 1) * (logits[None, :] - logits[:, None])), max=1.0)

    n, taus = 6000, (0.5, 0.25)
    x0 = int(logits.argmax())  # the greedy start
    a0, a1 = accept(1 / taus[0]), accept(1 / taus[1])
    after0 = q * a0[x0]
    after0[x0] += 1 - float(after0.sum())
    want = [float((q * a0[x0]).sum()), float((after0[:, None] * q[None, :] * a1).sum())]
    kw = dict(block_schedule=1) if sampler == "block-mh" else {}
    r = sample(device, model, 1, chains=n, epochs=2, burn_in=0, seed=8, sampler=sampler, target_temperature=0.5,
               anneal=0.25, min_target_temperature=0.1, proposal_temperature=1.0, top_p=1.0, **kw)
    torch.testing.assert_close(r.target_temperature, torch.tensor(taus, dtype=torch.float32))
    for e in range(2):
        bound = 5 * (want[e] * (1 - want[e]) / n) ** 0.5
        assert abs(float(r.acceptance_rate[e]) - want[e]) < bound, (e, float(r.acceptance_rate[e]), want[e])


class RowCounter:
    """Wraps a model and records the rows of every masked_logits call."""

    def __init__(self, model):
        self.inner = model
        self.vocab_size, self.mask_id, self.pad_id = model.vocab_size, model.mask_id, model.pad_id
        self.special_ids = model.special_ids
        self.rows: list[int] = []

    def masked_logits(self, tokens, positions, context=None, context_index=None):
        self.rows.append(tokens.shape[0])
        return self.inner.masked_logits(tokens, positions)


def test_mh_rows_per_step_are_te_minus_one_per_changed_chain(device):
    """Single-site MH forwards T_e - 1 rows per chain whose proposal differs from its current
    token and none otherwise: per epoch, rows = (T_e - 1) * (proposals - unchanged)."""
    T, chains = 4, 8
    model = RowCounter(model4())
    epoch_rows, epoch_stats = [], []
    r = sample(device, model, T, chains=chains, epochs=5, burn_in=1, seed=5, memo=0,  # (with the memo: its tests)
               progress=lambda e, s: (epoch_rows.append(s["model_rows"]), epoch_stats.append(s)))
    assert sum(model.rows) == r.model_rows
    # warm start: the all-mask row repeated once per position (no row hook), then T_e rows per chain
    previous = T + chains * T
    for rows_now, s in zip(epoch_rows, epoch_stats):
        proposals = chains * T
        unchanged = round(proposals * s["acceptance_rate"]) - round(proposals * s["novel_rate"])
        assert rows_now - previous == (T - 1) * (proposals - unchanged)
        previous = rows_now


def test_unchanged_proposals_make_no_model_call(device):
    """A model whose conditionals always put (almost) all mass on token 0: after the warm start and
    the initial scoring, every proposal equals the current token, so the sampler never calls it."""
    base = model4()
    for table in base.tables.values():
        table[:, :, 0] = 60.0
    model = RowCounter(base)
    r = sample(device, model, 4, chains=6, epochs=4, burn_in=1)
    assert r.model_rows == 4 + 6 * 4  # warm start + initial energy pass only
    assert bool((r.tokens == 0).all())
    assert r.acceptance_rate.tolist() == [1.0] * 4 and r.novel_rate.tolist() == [0.0] * 4


def test_gibbs_and_block_rows(device):
    T, chains = 4, 3
    g = sample(device, RowCounter(model4()), T, chains=chains, epochs=3, burn_in=0, sampler="gibbs")
    assert g.model_rows == T + 3 * (chains * T + chains * T)  # 1 row / chain / step + 1 energy pass / epoch
    # block-MH with row hooks: 1 row per chain and step + T_e rows per changed chain
    rows, stats = [], []
    model = model4(row_hooks=True)
    sample(device, model, T, chains=chains, epochs=3, burn_in=0, sampler="block-mh", block_schedule=2,
           progress=lambda e, s: (rows.append(s["model_rows"]), stats.append(s)))
    previous = 1 + chains * T
    for now, s in zip(rows, stats):
        proposals = chains * (T // 2)
        unchanged = round(proposals * s["acceptance_rate"]) - round(proposals * s["novel_rate"])
        assert now - previous == proposals + T * (proposals - unchanged)
        previous = now


@pytest.mark.parametrize("features", [False, True])
def test_block_mh_with_one_position_blocks_is_single_site_mh(features, device):
    """Block MH with |I| = 1 is single-site MH: same proposal (the cached row), same uniforms (slot 0),
    same rows (T_e - 1 per changed chain, no proposal forward), so the chains are identical."""
    model = model4(features=features, row_hooks=True)
    m, p = model.mask_id, model.pad_id
    init = torch.tensor([[m, m, m, m], [m, m, p, p], [m, m, m, p]])
    kw = dict(init=init, chains=5, epochs=6, burn_in=2, seed=4, record="epoch", force_accept_epochs=1, anneal=0.1,
              energy="local", proposal_temperature=1.5)
    a = sample(device, model, sampler="mh", memo=0, **kw)  # memo=0: block-mh has no proposal memo (same rows)
    b = sample(device, model, sampler="block-mh", block_schedule=1, **kw)
    assert torch.equal(a.history, b.history)
    assert torch.equal(a.best_tokens, b.best_tokens)
    assert torch.equal(a.energy, b.energy) and torch.equal(a.acceptance_rate, b.acceptance_rate)
    assert (a.model_rows, a.model_calls) == (b.model_rows, b.model_calls)


@pytest.mark.parametrize("features", [False, True])
def test_block_mh_cache_stays_valid_across_block_and_forced_moves(features, device):
    """Block moves (some forced), then one-position blocks reading the cache: a stale cached row
    would give a wrong proposal and a wrong energy term, so the final energies would not match."""
    model = model4(features=features, row_hooks=True)
    m, p = model.mask_id, model.pad_id
    init = torch.tensor([[m, m, m, m], [m, m, m, p]])
    r = sample(device, model, init=init, chains=6, epochs=6, burn_in=0, seed=3, sampler="block-mh",
               block_schedule=[3, 2, 2, 1, 2, 1], force_accept_epochs=2, proposal_temperature=2.0)
    for b, L in enumerate([4, 3]):
        for c in range(6):
            e_raw, e_local = energy_of(model, r.tokens[b, c, :L])
            assert abs(e_raw - float(r.energy_raw[b, c])) < 1e-4
            assert abs(e_local - float(r.energy_local[b, c])) < 1e-4


def test_block_mh_rows_per_step_drop_to_single_site_cost_at_size_one(device):
    """Schedule 2, 2, 1, 1, 1 on T = 4 with the row hooks. Size 2: 1 proposal row per block + T_e rows
    of X' per changed chain. Size 1: no proposal row (cached) and T_e - 1 rows per changed chain, none
    for an unchanged one. Both backends agree on chains and rows."""
    T, chains = 4, 6
    model = model4(row_hooks=True)
    runs = {}
    for backend in ("compiled", "reference"):
        rows, stats, kinds = [], [], set()
        r = sample(device, model, T, chains=chains, epochs=5, burn_in=0, seed=9, sampler="block-mh",
                   block_schedule=[2, 2, 1, 1, 1], record="epoch", backend=backend, proposal_temperature=2.0,
                   progress=lambda e, s: (rows.append(s["model_rows"]), stats.append(s)))
        runs[backend] = r
        previous = 1 + chains * T  # warm start (one row with the hooks) + the initial T_e rows per chain
        for e, (now, s) in enumerate(zip(rows, stats)):
            size = 2 if e < 2 else 1
            proposals = chains * (T // size)
            changed = proposals - (round(proposals * s["acceptance_rate"]) - round(proposals * s["novel_rate"]))
            expected = proposals + T * changed if size == 2 else (T - 1) * changed
            assert now - previous == expected, f"{backend} epoch {e}"
            if size == 1:
                kinds.add(changed == proposals)
                kinds.add(changed == 0)
            previous = now
        assert kinds == {False}, "size-1 epochs should mix changed and unchanged proposals"
    assert torch.equal(runs["compiled"].history, runs["reference"].history)
    assert runs["compiled"].model_rows == runs["reference"].model_rows


def test_block_mh_unchanged_single_site_proposals_make_no_model_call(device):
    """Peaked conditionals: after the warm start and the initial scoring, block proposals need their
    one row per chain and block, one-position blocks nothing at all."""
    base = model4(row_hooks=True)
    for table in base.tables.values():
        table[:, :, 0] = 60.0
    r = sample(device, base, 4, chains=6, epochs=4, burn_in=1, sampler="block-mh", block_schedule=[2, 1, 1, 1])
    assert r.model_rows == 1 + 6 * 4 + 6 * 2  # warm start + initial energy pass + size-2 proposals
    assert bool((r.tokens == 0).all())


def test_conditional_sources_encode_once_and_pick_a_length(device):
    model = ConditionalTabularMLM.random(num_tokens=3, lengths=(2, 3), num_sources=3, seed=4)
    r = sample(device, model, source=torch.tensor([2, 0, 1]), length_beam=2, chains=4, epochs=6, burn_in=2,
               energy="local")
    assert model.encode_calls == 1
    assert r.tokens.shape == (3, 4, 3) and r.candidate_lengths.shape == (3, 2)
    assert r.lengths.tolist() == r.candidate_lengths[torch.arange(3), r.chosen_candidate].tolist()
    for s, src in enumerate([2, 0, 1]):
        L = int(r.lengths[s])
        assert bool((r.tokens[s, :, L:] == model.pad_id).all())
        best = r.best_tokens[s, :L]
        pos = torch.arange(L)
        rows = reference.masked_copies(best[None], torch.zeros_like(pos), pos, model.mask_id)
        logits = model.masked_logits(rows, pos, context=torch.tensor([src]), context_index=torch.zeros_like(pos))
        _, e_local, _ = reference.gather_energies(logits, best[pos], torch.zeros_like(pos), 1)
        assert abs(float(e_local) - float(r.best_energy[s])) < 1e-4


def test_generator_seed_is_reproducible(device):
    model = model4()
    a = sample(device, model, 4, chains=3, epochs=4, burn_in=1, generator=torch.Generator().manual_seed(5))
    b = sample(device, model, 4, chains=3, epochs=4, burn_in=1, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a.tokens, b.tokens)


@pytest.mark.parametrize("kwargs,name", [
    (dict(sampler="hmc"), "sampler"),
    (dict(energy="norm"), "energy"),
    (dict(epochs=3, burn_in=5), "epochs"),
    (dict(proposal_temperature=0.0), "proposal_temperature"),
    (dict(target_temperature=-1.0), "target_temperature"),
    (dict(min_target_temperature=0), "min_target_temperature"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.5), "top_p"),
    (dict(chains=0), "chains"),
    (dict(order="sideways"), "order"),
    (dict(record="all"), "record"),
    (dict(block_schedule=0, sampler="block-mh"), "block_schedule"),
    (dict(block_schedule=[1, 2], sampler="block-mh", epochs=3, burn_in=0), "block_schedule"),
    (dict(anneal=-0.1), "anneal"),
    (dict(backend="gpu"), "backend"),
    (dict(block_schedule=2 ** 63, sampler="block-mh"), "block_schedule"),  # (a RuntimeError in the step)
    (dict(block_schedule=[1, 2 ** 63, 1], sampler="block-mh", epochs=3, burn_in=0), "block_schedule"),
    (dict(max_tokens_per_batch=10 ** 23), "max_tokens_per_batch"),  # (an OverflowError in the runner)
    (dict(trace_every=5, epochs=4, burn_in=0), "trace_every"),  # no sweep traced: diagnostics would read nothing
    (dict(trace_every=3, epochs=5, burn_in=3), "trace_every"),  # sweep 3 traced, but inside burn-in
])
def test_bad_arguments_raise_value_error_naming_them(kwargs, name, device):
    with pytest.raises(ValueError, match=name):
        sample(device, model4(), 3, **kwargs)


def test_bad_inputs_raise_value_error_naming_them(device):
    model = model4()
    m, p = model.mask_id, model.pad_id
    with pytest.raises(ValueError, match="length"):
        sample(device, model, 0)
    with pytest.raises(ValueError, match="exactly one of length, init or source"):
        sample(device, model)
    with pytest.raises(ValueError, match="exactly one of length, init or source"):
        sample(device, model, 3, init=torch.tensor([[m, m, m]]))
    with pytest.raises(ValueError, match="init"):
        sample(device, model, init=torch.tensor([[0, 9, 1]]))  # outside the vocabulary
    with pytest.raises(ValueError, match="init"):
        sample(device, model, init=torch.tensor([[0, p, 1]]))  # padding in the middle
    with pytest.raises(ValueError, match="free_positions"):  # a special id at a free position
        sample(device, model, init=torch.tensor([[0, p, p]]), free_positions=torch.tensor([[True, True, False]]))
    with pytest.raises(ValueError, match="free_positions"):  # a mask left fixed
        sample(device, model, init=torch.tensor([[0, m, 1]]), free_positions=torch.tensor([[True, False, True]]))
    with pytest.raises(ValueError, match="free_positions"):
        sample(device, model, init=torch.tensor([[0, m, 1]]), free_positions=torch.tensor([[True, True]]))
    with pytest.raises(TypeError, match="source"):
        sample(device, model, source=torch.tensor([0]))
    with pytest.raises(ValueError, match="free_positions cannot be combined with length"):  # (was named init)
        sample(device, model, 3, free_positions=torch.tensor([[True, False, True]]))


def test_numpy_numbers_are_numbers():
    """Option values read from numpy arrays are ints and floats like Python's (np.int64(2) was refused with "must
    be an int >= 1, got np.int64(2)"), stored as Python's, and give the same chains."""
    np = pytest.importorskip("numpy")
    model = model4()
    blocks = dict(sampler="block-mh", target_temperature=0.5)
    plain = mhfast.sample(model, 3, chains=2, epochs=4, burn_in=1, seed=3, block_schedule=[1, 2, 2, 1], input_ids=[7],
                          **blocks)
    numpy = mhfast.sample(model, np.int64(3), chains=np.int32(2), epochs=np.int64(4), burn_in=np.uint8(1),
                          seed=np.int64(3), block_schedule=list(np.array([1, 2, 2, 1])),
                          input_ids=list(np.array([7])), **{**blocks, "target_temperature": np.float32(0.5)})
    assert torch.equal(plain.tokens, numpy.tokens)
    plain = mhfast.sample(model, 3, chains=2, epochs=4, burn_in=1, seed=3, memo=4, uniform_mix=0.25, tempering=2)
    numpy = mhfast.sample(model, 3, chains=2, epochs=4, burn_in=1, seed=3, memo=np.int16(4),
                          uniform_mix=np.float16(0.25), tempering=np.int64(2))
    assert torch.equal(plain.tokens, numpy.tokens)
    call = mhfast.sample(model, 3, chains=2, epochs=3, burn_in=1, seed=3, sampler="block-mh",
                         block_schedule=lambda e: np.int64(1 + e % 2))
    assert call.tokens.shape == (1, 2, 3)
    with pytest.raises(ValueError, match=r"chains must be an int in \[1, 1099511627776\]"):
        mhfast.sample(model, 3, chains=np.bool_(True))
    from mhfast.sampler.options import config_from_kwargs

    cfg = config_from_kwargs({"target_temperature": np.float64(0.5), "chains": np.int64(2), "memo": np.uint8(4)})
    assert (type(cfg.target_temperature), type(cfg.chains), type(cfg.memo)) == (float, int, int)
    for bad in (dict(chains=np.timedelta64(2)), dict(uniform_mix=10 ** 400),  # (ran 2 chains; an OverflowError)
                dict(block_schedule=[np.timedelta64(1, "D")] * 3, sampler="block-mh", epochs=3, burn_in=0)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            mhfast.sample(model, 3, **bad)


def test_counter_rng_is_uniform_and_a_pure_function_of_its_counters():
    from mhfast.runtime import rng

    chains = torch.arange(20000)
    u = rng.uniforms(3, torch.zeros_like(chains), chains, 0, 0, rng.PROPOSE)
    assert bool(((u > 0) & (u < 1)).all())
    # Kolmogorov-Smirnov distance to U(0,1); 1.63 / sqrt(n) is the 1% critical value
    ks = float((torch.sort(u.double()).values - torch.arange(1, 20001, dtype=torch.float64) / 20000).abs().max())
    assert ks < 1.63 / 20000 ** 0.5
    assert torch.equal(u[123:125], rng.uniforms(3, torch.zeros(2, dtype=torch.long), chains[123:125], 0, 0,
                                                rng.PROPOSE))
    other = rng.uniforms(3, torch.zeros_like(chains), chains, 0, 0, rng.ACCEPT)
    assert abs(float(torch.corrcoef(torch.stack([u, other]))[0, 1])) < 0.03
    assert not torch.equal(u, rng.uniforms(4, torch.zeros_like(chains), chains, 0, 0, rng.PROPOSE))


def test_default_block_schedule_uses_blocks_for_short_inputs():
    """Appendix D for every length: blocks > 1 first whenever an input has >= 2 free positions, 1 at the end."""
    from mhfast.sampler.schedules import block_sizes

    n = torch.tensor([1, 2, 3, 5, 7, 8, 20, 40])
    first, last = block_sizes(None, 0, 33, n), block_sizes(None, 32, 33, n)
    assert first.tolist() == [1, 2, 2, 2, 2, 2, 5, 10]
    assert last.tolist() == [1] * 8
    sizes = torch.stack([block_sizes(None, e, 33, n) for e in range(33)])
    assert bool((sizes[1:] <= sizes[:-1]).all())  # never grows



@pytest.mark.parametrize("schedule", [None, 3, [1, 4, 4, 2, 2, 2, 1] * 5 + [3, 3], lambda e: 1 + (e * 7) % 3])
@pytest.mark.parametrize("epochs", [1, 2, 7, 37, 200])
def test_block_size_runs_give_every_epoch_s_sizes(schedule, epochs):
    """The runs of equal block sizes (found by bisection for the default and an int) give, at every epoch, the
    sizes that evaluating that epoch gives, and the requested sizes before clamping (for the oversize warning)."""
    from mhfast.sampler.schedules import BlockSizeRuns, block_sizes, requested_block_sizes

    if isinstance(schedule, list):
        schedule = (schedule * 10)[:epochs]
    n = torch.tensor([1, 2, 3, 5, 7, 8, 20, 40, 0])
    runs = BlockSizeRuns(schedule, epochs, n)
    for e in range(epochs):
        assert torch.equal(runs.at(e), block_sizes(schedule, e, epochs, n)), e
        assert any(torch.equal(r, requested_block_sizes(schedule, e, epochs, n)) for r in runs.requested)
    assert runs.starts[0] == 0 and runs.starts == sorted(set(runs.starts))
    keep = torch.tensor([6, 2])
    assert all(torch.equal(runs.select(keep).at(e), block_sizes(schedule, e, epochs, n[keep])) for e in range(epochs))


@pytest.mark.parametrize("sampler", ["mh", "block-mh", "block-gibbs"])
def test_the_most_epochs_start_at_once_and_one_more_is_refused(sampler):
    """A run of ``MAX_EPOCHS`` epochs holds no per-epoch list (the schedule and the block sizes are computed as
    read): it starts at once and is stopped here after 2 epochs by its progress callback; one epoch more is a
    ValueError naming epochs (it would overflow the schedules' int64 arithmetic)."""
    from mhfast.sampler.options import MAX_EPOCHS

    class Enough(Exception):
        pass

    def stop(epoch: int, stats: dict) -> None:
        if epoch >= 1:
            raise Enough

    with pytest.raises(Enough):
        mhfast.sample(model4(), 4, chains=2, epochs=MAX_EPOCHS, burn_in=0, sampler=sampler, progress=stop)
    with pytest.raises(ValueError, match=r"epochs must be an int in \[1, 2147483647\], got 2147483648"):
        mhfast.sample(model4(), 4, chains=2, epochs=MAX_EPOCHS + 1, sampler=sampler)

def test_a_callable_block_schedule_is_called_only_for_the_epochs_run():
    """A callable ``block_schedule`` is evaluated as the run reaches each epoch, not for every epoch up to the
    ``epochs`` cap at the start (which, with ``until_rhat`` and a large cap, took as long as the cap): stopped after
    2 of 10,000 epochs, it was called for epochs 0 and 1 only; its oversize warning comes at the epoch that asks for
    too much."""
    class Enough(Exception):
        pass

    def stop(epoch: int, stats: dict) -> None:
        if epoch >= 1:
            raise Enough

    calls: list[int] = []

    def schedule(epoch: int) -> int:
        calls.append(epoch)
        return 4 if epoch == 0 else 9  # model4 has 4 free positions: epoch 1 asks for too many (clamped alike)

    with pytest.raises(Enough), pytest.warns(UserWarning, match="blocks of 9 positions, more than an input's 4"):
        mhfast.sample(model4(), 4, chains=2, epochs=10_000, burn_in=0, sampler="block-mh",
                      block_schedule=schedule, progress=stop)
    assert calls == [0, 1]


def test_fixed_target_temperature_is_used_as_given():
    model = model4()
    r = mhfast.sample(model, 4, chains=2, epochs=3, burn_in=0, target_temperature=0.02)
    assert r.target_temperature.tolist() == pytest.approx([0.02] * 3)
    r = mhfast.sample(model, 4, chains=2, epochs=3, burn_in=0, target_temperature=0.5, anneal=0.3,
                      min_target_temperature=0.1)
    assert r.target_temperature.tolist() == pytest.approx([0.5, 0.2, 0.1])  # the explicit floor


@pytest.mark.parametrize("kwargs,match", [
    (dict(target_temperature=0.5, anneal=0.1, min_target_temperature=0.8), "min_target_temperature .* <= "),
    (dict(target_temperature=1e-40), "too small"),
    (dict(anneal=0.1, min_target_temperature=1e-39), "too small"),
])
def test_temperatures_that_cannot_be_honoured_are_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        mhfast.sample(model4(), 3, **kwargs)


def test_rows_per_proposal_is_reported():
    """Single-site MH on T = 4 free positions: a changed proposal forwards T - 1 = 3 rows, a no-op none."""
    r = mhfast.sample(model4(), 4, chains=6, epochs=5, burn_in=1, seed=2)
    assert r.proposals == 6 * 4 * 5
    changed = (r.model_rows - r.init_rows) / 3
    assert changed == int(changed) and 0 < changed <= r.proposals
    assert r.rows_per_proposal == pytest.approx(3 * changed / r.proposals)


def test_bfloat16_chains_match_enumeration_of_the_bf16_model():
    """dtype=bfloat16: MH is exact for the model as evaluated in bf16 (target from bf16 logits), not for the fp32
    model. The head's bias is raised by 200 on every token: softmax ignores a common offset, but bf16 rounds logits
    near 200 to steps of 1, so the two targets differ (TV 0.23; it was 0.0008 without, where a sampler of the fp32
    target would have passed)."""
    from exact_checks import empirical, fit_p_value, local_target, tiny_bert, tv_and_bound

    model = tiny_bert()
    with torch.no_grad():
        model.model.get_output_embeddings().bias.add_(200.0)
    template = model.frame(3)
    states, p = local_target(model, template, torch.bfloat16)
    p32 = local_target(model, template)[1]
    n = 2000
    r = mhfast.sample(model, init=template[None], chains=n, energy="local", epochs=15, burn_in=3, seed=5,
                      dtype=torch.bfloat16)
    got = empirical(states, r.tokens[0])
    tv, bound = tv_and_bound(p, got, n)
    assert tv < bound, f"TV {tv:.4f} >= bound {bound:.4f}"
    assert float(0.5 * (p - p32).abs().sum()) > bound and fit_p_value(p32, got, n) < 1e-20, "the fp32 target differs"


@pytest.mark.parametrize("value", ["bf16", torch.int64, 3])
def test_bad_dtype(value):
    with pytest.raises(ValueError, match="dtype"):
        mhfast.sample(model4(), 3, dtype=value)


def test_sample_accepts_a_model_directory_and_a_plain_transformers_model(tmp_path):
    transformers = pytest.importorskip("transformers")
    from hf_tiny_models import save_tiny_bert_dir

    d = save_tiny_bert_dir(tmp_path / "bert")
    a = mhfast.sample(d, 4, chains=2, epochs=2, burn_in=0, seed=1)
    b = mhfast.sample(transformers.AutoModelForMaskedLM.from_pretrained(d), 4, chains=2, epochs=2, burn_in=0, seed=1)
    assert a.tokens.shape == (1, 2, 6) and torch.equal(a.tokens, b.tokens)  # [CLS] + 4 + [SEP]


def test_a_row_without_free_positions_is_an_error_in_any_batch():
    """A row with nothing to sample is named whatever rows share its call: torchrun and mhfast.distributed
    shard the rows, so a batch-wide check failed on the one rank that got that row alone (issue 37)."""
    model = model4()
    m = model.mask_id
    rows = torch.tensor([[m, 1, 2], [0, 1, 2]])
    free = torch.tensor([[True, True, False], [False, False, False]])  # row 1: every position fixed
    with pytest.raises(ValueError, match="free_positions leaves no free position"):
        mhfast.sample(model, init=rows[1:], free_positions=free[1:], epochs=1, burn_in=0)
    with pytest.raises(ValueError, match="free_positions row 1 leaves no free position"):
        mhfast.sample(model, init=rows, free_positions=free, epochs=1, burn_in=0)
    mhfast.sample(model, init=rows[:1], free_positions=free[:1], epochs=1, burn_in=0)
