"""The static-shape single-site MH step (``capture="static"`` / ``"cuda-graph"``): the same chains as the dynamic
step, no host sync inside a step, exactness on an enumerable network, deferred model checks, option errors.

On CPU the static body runs eagerly (what a CUDA graph replays); on a GPU (the ``device`` fixture's "cuda")
the same tests run ``capture="cuda-graph"``.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

import mhfast
from mhfast.models.tabular import ConditionalTabularMLM, TabularMLM
from mhfast.sampler import options
from mhfast.runtime.backend import get_backend
from mhfast.sampler.graphed import STEP_FIELDS, StaticSiteSteps
from mhfast.sampler.kernels.mh import SingleSiteMH
from mhfast.sampler.moves.site_types import SiteMove
from mhfast.sampler.schedules import Epoch
from mhfast.runtime.runner import ModelRunner
from mhfast.sampler.state import ChainCounts, ChainState, rescore
from mhfast.sampler.step import StepContext

FIELDS = ("tokens", "e_raw", "e_local", "best_tokens", "best_e_raw", "chain_proposals", "chain_accepted",
          "chain_novel", "acceptance_rate", "novel_rate")


def same_result(a: mhfast.SampleResult, b: mhfast.SampleResult) -> list[str]:
    """The fields of :data:`FIELDS` in which ``a`` and ``b`` differ (bit for bit)."""
    return [f for f in FIELDS if hasattr(a, f) and not torch.equal(getattr(a, f), getattr(b, f))]


CASES = [
    ("default", {}, {}),
    ("local", {}, {"energy": "local"}),
    ("annealed", {}, {"target_temperature": 0.5, "anneal": 0.1}),
    ("forced", {}, {"force_accept_epochs": 2}),
    ("nucleus", {}, {"top_p": 0.8, "proposal_temperature": 1.5}),
    ("features", {"features": True}, {}),
    ("features-nucleus", {"features": True}, {"top_p": 0.7}),
    ("left-to-right", {}, {"order": "left-to-right", "energy": "local"}),
    ("reference", {}, {"backend": "reference"}),
]


@pytest.mark.parametrize("name,model_kwargs,kwargs", CASES, ids=[c[0] for c in CASES])
def test_static_step_gives_the_dynamic_chains(name, model_kwargs, kwargs):
    """TabularMLM's rows do not depend on their batch, so the static step must give the dynamic step's chains
    bit for bit: tokens, energies, best states and every per-chain count; it forwards more rows."""
    model = TabularMLM.random(3, 4, seed=2, **model_kwargs)
    common = dict(chains=5, epochs=6, burn_in=2, seed=11, **kwargs)
    a = mhfast.sample(model, 4, **common)
    b = mhfast.sample(model, 4, capture="static", **common)
    assert same_result(a, b) == []
    assert float(a.novel_rate.min()) < 1.0  # some proposals kept the state: the static step had chains to mask
    assert b.model_rows > a.model_rows


def test_static_step_with_fixed_positions_inputs_and_sources():
    """Inputs with different numbers of free positions (steps move different chain sets: one static shape per
    set) and a conditional model (rows read their source)."""
    model = TabularMLM.random(3, 4, seed=5)
    init = torch.tensor([[0, 1, 2, 0], [1, 1, 0, 2], [2, 0, 1, 1]])
    free = torch.tensor([[True, True, True, True], [False, True, False, True], [True, False, False, False]])
    common = dict(init=init, free_positions=free, chains=3, epochs=5, burn_in=1, seed=3)
    a, b = mhfast.sample(model, **common), mhfast.sample(model, capture="static", **common)
    assert same_result(a, b) == []
    assert torch.equal(b.tokens[:, :, ~free[1]][1], init[1, ~free[1]].expand(3, -1))  # fixed positions kept
    cond = ConditionalTabularMLM.random(3, [3], num_sources=2, seed=4)
    common = dict(source=torch.tensor([0, 1]), chains=4, epochs=4, burn_in=1, seed=9)
    a, b = mhfast.sample(cond, **common), mhfast.sample(cond, capture="static", **common)
    assert same_result(a, b) == []


def test_static_step_with_allowed_tokens():
    """An AllowedTokens mask (the one extra-energy object capture= accepts: it shapes proposals, adds no term):
    the static step's chains equal the dynamic step's and never hold a forbidden token."""
    from mhfast.energy_terms import AllowedTokens

    model = TabularMLM.random(4, 4, seed=8)
    mask = torch.ones(4, model.vocab_size, dtype=torch.bool)
    mask[1, 2] = mask[2, 0] = mask[3, 3] = False
    common = dict(chains=6, epochs=5, burn_in=1, seed=4, extra_energy=AllowedTokens(mask))
    a = mhfast.sample(model, 4, **common)
    b = mhfast.sample(model, 4, capture="static", **common)
    assert same_result(a, b) == []
    assert not bool((b.tokens[..., 1] == 2).any() or (b.tokens[..., 2] == 0).any() or (b.tokens[..., 3] == 3).any())


@pytest.mark.parametrize("case", range(12))
def test_static_step_gives_the_dynamic_chains_on_random_problems(case):
    """Random problems (vocabulary, length, inputs, chains, fixed positions, energy, temperatures, nucleus, uniform
    share, order, seed) drawn from a seeded generator: the static step's chains equal the dynamic step's."""
    g = torch.Generator().manual_seed(1000 + case)
    pick = lambda *xs: xs[int(torch.randint(len(xs), (1,), generator=g))]  # noqa: E731
    V, T, B, C = pick(2, 3, 5), pick(2, 3, 4), pick(1, 2, 3), pick(1, 3, 6)
    model = TabularMLM.random(V, T, seed=case, scale=pick(0.5, 1.0, 3.0), features=bool(case % 2))
    init = torch.randint(V, (B, T), generator=g)
    free = torch.rand(B, T, generator=g) < 0.7
    free[:, 0] = True  # every input moves somewhere
    kwargs = dict(energy=pick("raw", "local"), target_temperature=pick(0.5, 1.0, 2.0), top_p=pick(1.0, 0.8),
                  proposal_temperature=pick(1.0, 1.7), order=pick("random", "left-to-right"),
                  anneal=pick(0.0, 0.05), force_accept_epochs=pick(0, 1), seed=int(torch.randint(10 ** 6, (1,),
                                                                                                generator=g)))
    if kwargs["top_p"] < 1.0:
        kwargs["uniform_mix"] = pick("auto", 0.0, 0.2)
    common = dict(init=init, free_positions=free, chains=C, epochs=4, burn_in=1, **kwargs)
    a = mhfast.sample(model, **common)
    b = mhfast.sample(model, capture="static", **common)
    assert same_result(a, b) == [], kwargs


@pytest.mark.slow  # 13 s on the 2-core CI machine
def test_exact_on_an_enumerable_network(device):
    """MH with the static step (CPU) or its CUDA graph (GPU) samples the tiny BERT's exp(-E): the empirical
    distribution of 2000 chains is within the bound derived from the sample size (test_sampler_exact's)."""
    from exact_checks import run_and_compare, tiny_bert

    model = tiny_bert(device)
    template = model.frame(3)
    free = template == model.mask_id
    capture = "cuda-graph" if device == "cuda" else "static"
    # (proposal temperature 2: at 1 this model's MH accepts 0.9997, so an accept test that did nothing would pass)
    tv, bound, result = run_and_compare(device, model, template, free, energy="local", n=2000, epochs=15, burn_in=3,
                                        seed=7, capture=capture, proposal_temperature=2.0)
    assert tv < bound, f"TV {tv:.4f} >= bound {bound:.4f}"
    assert 0.05 < float(result.novel_rate[-1]) < 0.95 and float(result.acceptance_rate[3:].mean()) < 0.9


class FxReplayedSteps(StaticSiteSteps):
    """StaticSiteSteps whose capture is torch.fx's (make_fx) instead of a CUDA graph's, on CPU: the same contract.
    Python runs once, at capture, and the buffers come out unchanged (a CUDA capture runs nothing; make_fx runs the
    step, so the buffers are restored); each replay runs the recorded ops on the buffers as they are then. A
    value the body took from Python at capture (an epoch, a step, a position) would be frozen into every replay
    just as in a graph, and a host read of a value raises while make_fx traces."""

    captures = 0

    def __init__(self, ctx, state, graphs, has_pad=None):
        super().__init__(ctx, state, graphs=False, has_pad=has_pad)
        self.graphs = True

    def capture(self, body):
        from torch.fx.experimental.proxy_tensor import make_fx

        saved = [t.clone() for t in self._buffers()]
        with torch.no_grad():
            gm = make_fx(body)()
        for t, old in zip(self._buffers(), saved):
            t.copy_(old)
        FxReplayedSteps.captures += 1

        def replay():
            with torch.no_grad():
                return tuple(gm())
        return replay

    def _buffers(self):
        return [getattr(self.buffers, f) for f in (*STEP_FIELDS, "cache")]


def test_a_failed_capture_names_the_body_error_and_restores_the_stream(monkeypatch):
    """torch.cuda.graph's exit ends the capture first; after a body that failed (a host sync inside the capture),
    that fails too, and its exit never restores the caller's stream. The message named the second error ("a
    previous error during capture") and the caller was left on the side stream. Run on CPU with torch.cuda's
    graph calls replaced by stand-ins that fail as torch 2.13's do."""
    import contextlib

    current = {"stream": "caller's"}

    @contextlib.contextmanager
    def graph(g, pool=None, stream=None):
        current["stream"] = "side"
        try:
            yield
        except BaseException:
            raise RuntimeError("operation failed due to a previous error during capture")
        current["stream"] = "caller's"

    for name, value in (("CUDAGraph", lambda: None), ("graph", graph), ("synchronize", lambda: None),
                        ("current_stream", lambda: current["stream"]),
                        ("set_stream", lambda s: current.update(stream=s))):
        monkeypatch.setattr(torch.cuda, name, value)
    steps = object.__new__(StaticSiteSteps)
    steps.pool, steps.stream = None, "side"
    steps.ctx = type("Ctx", (), {"runner": type("R", (), {"model": TabularMLM.random(3, 3, seed=0)})()})()

    def body():
        raise RuntimeError("operation not permitted when stream is capturing")
    with pytest.raises(RuntimeError, match=r"could not capture a step of TabularMLM .*: operation not permitted when "
                                           r"stream is capturing$"):
        steps.capture(body)
    assert current["stream"] == "caller's"


@pytest.mark.parametrize("kwargs", [{}, {"energy": "local", "top_p": 0.9}, {"target_temperature": 0.6, "anneal": 0.1},
                                    {"force_accept_epochs": 2}, {"dtype": "bfloat16"}],
                         ids=["default", "local-nucleus", "annealed", "forced", "bf16"])
@pytest.mark.slow  # 11-20 s on the 2-core CI machine
def test_replayed_captures_give_the_same_chains(kwargs, request, monkeypatch):
    """The capture-and-replay logic of capture='cuda-graph' (first step of a (chains, beta) pair eager, the second
    captured, every later one replayed; counters folded into the keys on the device; positions copied into a
    buffer; a new capture per beta when annealing; the runner's row counts advanced per replay), run on CPU with
    torch.fx standing in for the CUDA graph: the tiny BERT's chains and row counts equal the dynamic step's, with
    inputs whose free positions differ (two moving-chain counts, so two graphs per beta)."""
    import mhfast.sampler.kernels.mh as mh_kernel
    from exact_checks import tiny_bert

    name = request.node.callspec.id
    model = tiny_bert()
    template = model.frame(3)
    init = template.repeat(2, 1)
    free = init == model.mask_id
    free[1, 1] = False  # input 1 keeps its first token: 2 free positions against 3
    init[1, 1] = 6
    common = dict(init=init, free_positions=free, chains=4, epochs=5, burn_in=1, seed=3, **kwargs)
    # memo=0: the static step has no memo, and the memo may hand a chain terms another chain's rows gave in another
    # batch, which this real (tiny) network rounds differently in the last bit
    a = mhfast.sample(model, memo=0, **common)
    monkeypatch.setattr(mh_kernel, "StaticSiteSteps", FxReplayedSteps)
    FxReplayedSteps.captures = 0
    b = mhfast.sample(model, capture="static", **common)  # the kernel builds FxReplayedSteps: graphs on
    assert same_result(a, b) == []
    assert 0.0 < float(a.novel_rate.mean()) < 1.0
    # Steps 0, 1 move 8 chains, step 2 moves 4 (input 0's); a pair (chains, beta) is captured at its second step.
    # Annealing: a beta per epoch, so only the 8-chain step is captured (at step 1), 5 times; forced acceptance:
    # beta None for 2 epochs, then 1: both counts captured for each; otherwise once each.
    expected = {"annealed": 5, "forced": 4}.get(name, 2)
    assert FxReplayedSteps.captures == expected
    steps_static = mhfast.sample(model, capture="static", **common)
    assert b.model_rows == steps_static.model_rows  # replays counted like eager steps


@pytest.mark.slow  # 62 s on the 2-core CI machine
def test_replayed_captures_on_the_bundled_translation_model(monkeypatch):
    """The bundled De->En CMLM (fast decoder, conditional rows, padded sources) through the same stand-in capture:
    make_fx raises at any host read, so its fast decoder under ``static_inputs`` has none (no bounds checks, every
    source's keys/values instead of torch.unique); the replayed chains equal the eager static step's bit for bit
    and the dynamic step's tokens."""
    import mhfast.sampler.kernels.mh as mh_kernel
    from mhfast.translation import load_bundled_model

    translator = load_bundled_model("cpu")
    ids = [translator.source_ids(s) for s in ("ein mann mit einem orangefarbenen hut .", "zwei hunde spielen .")]
    common = dict(source=ids, chains=2, epochs=3, burn_in=1, seed=1)
    dynamic = mhfast.sample(translator.cmlm, **common)
    eager = mhfast.sample(translator.cmlm, capture="static", **common)
    monkeypatch.setattr(mh_kernel, "StaticSiteSteps", FxReplayedSteps)
    FxReplayedSteps.captures = 0
    replayed = mhfast.sample(translator.cmlm, capture="static", **common)
    assert FxReplayedSteps.captures >= 1
    assert same_result(eager, replayed) == []
    assert torch.equal(dynamic.tokens, replayed.tokens)
    assert torch.allclose(dynamic.e_raw, replayed.e_raw, atol=1e-3)  # other batch shapes: rounding only


def _tiny_bert_state(has_pad: bool, fast: bool):
    """A scored state of 4 chains of a tiny BERT on CPU, then the same state and model on the meta device."""
    from mhfast.models.fast_forward import fast_forward_model
    from exact_checks import tiny_bert

    lm = tiny_bert()
    M, T = 4, 6
    tokens = torch.randint(5, 8, (M, T), generator=torch.Generator().manual_seed(0))
    energy = torch.ones(M, T, dtype=torch.bool)
    if has_pad:  # the last chain is shorter: padding outside its energy and free positions
        tokens[3, 4:] = lm.pad_id
        energy[3, 4:] = False
    state = ChainState.create(tokens, energy, energy.clone(), torch.zeros(M, dtype=torch.long), torch.arange(M),
                              None, "raw", 0)
    config = options.config_from_kwargs({})

    def context(model, device):
        return StepContext(config, get_backend("compiled"), ModelRunner(model, None, 4096, device), 0.0)

    ctx = context(fast_forward_model(lm) if fast else lm, "cpu")
    state = rescore(state, ctx.runner, ctx.backend, keep_cache=True)
    lm.model.to("meta")
    meta = {f.name: getattr(state, f.name).to("meta") for f in dataclasses.fields(state)
            if isinstance(getattr(state, f.name), torch.Tensor) and not f.name.endswith("_host")}
    return context(fast_forward_model(lm) if fast else lm, "meta"), dataclasses.replace(state, counts=None, **meta)


@pytest.mark.parametrize("has_pad", [False, True])
@pytest.mark.parametrize("fast", [True, False], ids=["fast-forward", "full-forward"])
def test_static_step_makes_no_host_sync(has_pad, fast, monkeypatch):
    """A step of the static body on the meta device, where tensors have shapes but no data: any read of a value
    on the host (.item(), float(), a branch on a tensor, nonzero, the model's padding test) raises there. The
    body runs through (propose, masked rows, the HF forward, energies, accept, commit, the copy back); the
    dynamic step, which reads which chains changed, raises: the check can fail.

    With padding, transformers tests whether the attention mask is all ones (a host read) unless it sees a
    tracer or a CUDA stream capturing (masking_utils.is_tracing); a real capture is one, the meta device is not,
    so the test tells transformers what a capture would."""
    if has_pad:
        import transformers.masking_utils as masking_utils

        monkeypatch.setattr(masking_utils, "is_tracing", lambda tensor=None: True)
    ctx, state = _tiny_bert_state(has_pad, fast)
    steps = StaticSiteSteps(ctx, state, graphs=False, has_pad=has_pad)
    act_host = torch.arange(4)
    act, pos = act_host.to("meta"), torch.tensor([0, 3, 1, 2]).to("meta")
    accepted, changed = steps._body(act, act_host, pos, 1.0)
    assert accepted.shape == changed.shape == (4,) and accepted.device.type == "meta"
    steps._body(act, act_host, pos, None)  # forced acceptance too
    with pytest.raises(NotImplementedError, match="meta"):
        SingleSiteMH(ctx).step(state, Epoch(0, 1.0, 1.0, True), SiteMove(0, act, act_host, pos))


class NaNAfter:
    """A TabularMLM whose logits turn NaN after ``calls`` model calls (a model that breaks mid-run)."""

    def __init__(self, calls: int):
        self.inner, self.left = TabularMLM.random(3, 3, seed=1), calls
        for a in ("vocab_size", "mask_id", "pad_id", "special_ids"):
            setattr(self, a, getattr(self.inner, a))

    def masked_logits(self, tokens, positions, context=None, context_index=None):
        out = self.inner.masked_logits(tokens, positions)
        self.left -= 1
        return out if self.left >= 0 else out * float("nan")


def test_broken_model_raises_at_the_epochs_end(device):
    """The static step (any device) and every step on a GPU defer the model's NaN check to a device flag: the run
    still raises the ValueError naming the model (at the end of the epoch in which the NaN came), never returns a
    sample; the driver reads the flag after each epoch's steps."""
    capture = "static" if device == "cpu" else "none"
    model = NaNAfter(4)
    seen = []  # per reported epoch: whether the model had returned NaN logits by its end
    with pytest.raises(ValueError, match=r"NaNAfter\.masked_logits returned non-finite values"):
        mhfast.sample(model, 3, chains=2, epochs=3, burn_in=0, capture=capture, device=device,
                      progress=lambda epoch, stats: seen.append(model.left < 0))
    # The NaN came (in epoch 0 with the static step, which forwards every chain; later on a GPU's dynamic step,
    # which skips the calls of steps that change nothing), and no epoch in which it came was reported.
    assert model.left < 0 and not any(seen), seen
    r = mhfast.sample(NaNAfter(10 ** 6), 3, chains=2, epochs=3, burn_in=0, capture=capture, device=device)
    assert r.tokens.shape == (1, 2, 3)  # a model that never breaks runs through


@pytest.mark.parametrize("kwargs,message", [
    ({"sampler": "gibbs", "capture": "static"}, "capture static needs sampler mh"),
    ({"sampler": "block-mh", "capture": "cuda-graph"}, "capture cuda-graph needs sampler mh"),
    ({"backend": "reference", "capture": "cuda-graph"}, "capture cuda-graph needs backend compiled"),
    ({"capture": "graph"}, "capture must be one of"),
])
def test_option_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        mhfast.sample(TabularMLM.random(3, 2, seed=0), 2, **kwargs)


def test_cuda_graph_needs_a_cuda_device_and_no_extra_terms():
    model = TabularMLM.random(3, 2, seed=0)
    with pytest.raises(ValueError, match="capture='cuda-graph' needs the chains on a CUDA device, not cpu"):
        mhfast.sample(model, 2, capture="cuda-graph", device="cpu")
    with pytest.raises(ValueError, match="extra_energy cannot be used with capture='static'"):
        mhfast.sample(model, 2, capture="static", extra_energy=lambda x: x.float().sum(dim=1))


def test_cli_takes_capture(tmp_path, capsys):
    """`mhfast sample --capture` is one of the spec's flags; a bad value is one line, exit 2."""
    from mhfast.cli import main

    with pytest.raises(SystemExit) as e:
        main(["sample", "--model", "x", "--length", "3", "--capture", "sometimes"])
    assert e.value.code == 2
    assert "--capture" in capsys.readouterr().err


def test_counts_where_ignores_unchanged_chains():
    """ChainCounts.tested(where=changed): an unchanged chain's entry counts neither as novel nor as rejected."""
    c = ChainCounts(3, torch.device("cpu"))
    c.proposed(torch.tensor([0, 1, 2]))
    c.tested(torch.tensor([0, 1, 2]), torch.tensor([True, False, True]), where=torch.tensor([True, True, False]))
    # rows (proposals, accepted, novel), one column per chain: chain 1 rejected, chain 2 kept its state (accepted,
    # not novel), chain 0 moved
    assert c.snapshot().tolist() == [[1, 1, 1], [1, 0, 1], [1, 0, 0]]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU (gpu_check runs this)")
def test_cuda_graph_replays_the_static_step():
    """On a GPU: the captured graphs give the eager static step's chains bit for bit (same kernels, same shapes),
    counting the same model rows; annealing re-captures per epoch and stays equal; bf16; and, where fairseq is
    installed, the bundled translation model."""
    from exact_checks import tiny_bert

    model = tiny_bert("cuda")
    for kwargs in ({}, {"target_temperature": 0.7, "anneal": 0.1}, {"force_accept_epochs": 1, "dtype": "bfloat16"}):
        common = dict(length=3, chains=64, epochs=5, burn_in=1, seed=5, device="cuda", **kwargs)
        a = mhfast.sample(model, capture="static", **common)
        b = mhfast.sample(model, capture="cuda-graph", **common)
        assert same_result(a, b) == [], kwargs
        assert a.model_rows == b.model_rows
    import importlib.util

    if importlib.util.find_spec("fairseq") is not None:  # the bundled translation model (gpu_check installs fairseq)
        from mhfast.translation import load_bundled_model

        translator = load_bundled_model("cuda")
        ids = [translator.source_ids(s) for s in ("ein mann mit einem orangefarbenen hut .", "zwei hunde spielen .")]
        common = dict(source=ids, chains=4, epochs=4, burn_in=1, seed=1)
        a = mhfast.sample(translator.cmlm, capture="static", **common)
        b = mhfast.sample(translator.cmlm, capture="cuda-graph", **common)
        assert same_result(a, b) == []
