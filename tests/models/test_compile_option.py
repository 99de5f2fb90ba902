"""``compile=True`` (issue 14: "optional compile=True where it pays, with its compile time reported"): the model's
repeated blocks compiled by torch.compile for one run (:mod:`mhfast.models.compiled_blocks`). The chains are the
model's as compiled (MH exact for it: enumeration test), the same as eager here, the compile time reported, the
model's own blocks back after the run however it ends, clear errors where there is nothing to compile.

Each compiled run costs seconds of inductor compiling (a C++ compiler on the CPU), so the runs are few and small.

Example:
    python3 -m pytest -q tests/models/test_compile_option.py
"""
from __future__ import annotations

import pytest
import torch

import mhfast
from mhfast.models.compiled_blocks import CompileReport, compiled_blocks, repeated_blocks
from mhfast.models.fast_forward import fast_forward_model
from mhfast.models.tabular import TabularMLM
from exact_checks import two_layer_bert

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def layer_objects(lm) -> list:
    return list(lm.model.bert.encoder.layer)


@pytest.fixture(scope="module")
def compiled_run():
    """One eager and one compiled run of the same chains (compiles from scratch: torch's caches reset first)."""
    torch.compiler.reset()
    lm = two_layer_bert()
    before = layer_objects(lm)
    kwargs = dict(chains=8, epochs=4, burn_in=1, seed=7, energy="local")
    eager = mhfast.sample(lm, 5, **kwargs)
    compiled = mhfast.sample(lm, 5, compile=True, **kwargs)
    return lm, before, eager, compiled


@pytest.mark.slow  # its compiled_run fixture: 16 s on the 2-core CI machine
def test_compiled_chains_are_the_eager_chains_and_the_time_is_reported(compiled_run):
    lm, before, eager, compiled = compiled_run
    assert torch.equal(compiled.tokens, eager.tokens)  # rounding (~1e-6) flips no decision of this short run
    assert torch.allclose(compiled.energy, eager.energy, atol=1e-4, rtol=1e-5)
    assert compiled.model_rows == eager.model_rows
    # the fast forward runs the last layer in pieces: the one other layer is compiled
    assert (compiled.compiled_blocks, eager.compiled_blocks) == (1, 0)
    assert compiled.compile_seconds > 0 and eager.compile_seconds == 0.0
    assert all(a is b for a, b in zip(layer_objects(lm), before))  # the model's own layers again


def test_compiled_energies_are_the_models_energies(compiled_run):
    """The cached energies of the compiled run are the (eager) model's energies of its final states."""
    lm, _, _, compiled = compiled_run
    tokens = compiled.tokens.flatten(0, 1)
    scores = mhfast.energy(lm, tokens)
    assert torch.allclose(compiled.energy_local.flatten(), scores.e_local, atol=1e-4)


def test_full_forward_compiles_every_layer():
    lm = two_layer_bert()
    with compiled_blocks(lm) as report:
        assert isinstance(report, CompileReport) and report.blocks == 2
        assert all(type(m).__name__ == "OptimizedModule" for m in lm.model.bert.encoder.layer)
    assert all(type(m).__name__ == "BertLayer" for m in lm.model.bert.encoder.layer)
    with compiled_blocks(fast_forward_model(lm)) as report:
        layers = lm.model.bert.encoder.layer
        assert report.blocks == 1 and type(layers[0]).__name__ == "OptimizedModule"
        assert type(layers[1]).__name__ == "BertLayer"  # the fast forward's piecewise last layer stays eager


def test_compiled_bert_matches_enumeration():
    """MH with compile=True is exact for the model (compiled logits differ from eager by float rounding only)."""
    from exact_checks import empirical, local_target, tv_and_bound

    lm = two_layer_bert()
    template = lm.frame(3)
    states, p = local_target(lm, template)  # the eager model's target (compiled logits differ by rounding)
    n = 2000
    # (proposal temperature 2: at 1 this model's MH accepts nearly all, so an accept test that did nothing passed)
    r = mhfast.sample(lm, init=template[None], chains=n, energy="local", epochs=15, burn_in=3, seed=5, compile=True,
                      proposal_temperature=2.0)
    assert r.compiled_blocks == 1 and float(r.acceptance_rate[3:].mean()) < 0.95
    tv, bound = tv_and_bound(p, empirical(states, r.tokens[0]), n)
    assert tv < bound, f"TV {tv:.4f} >= bound {bound:.4f}"


def test_the_blocks_come_back_when_the_run_raises():
    lm = two_layer_bert()
    before = layer_objects(lm)

    def stop(epoch, stats):
        raise RuntimeError("stopped by the caller")

    with pytest.raises(RuntimeError, match="stopped by the caller"):
        mhfast.sample(lm, 4, chains=2, epochs=2, burn_in=0, compile=True, progress=stop)
    assert all(a is b for a, b in zip(layer_objects(lm), before))


def test_nothing_to_compile_is_an_error_naming_the_option():
    with pytest.raises(ValueError, match=r"compile=True: TabularMLM has no repeated blocks"):
        mhfast.sample(TabularMLM.random(3, 2, seed=0), 2, compile=True)
    one_layer = two_layer_bert(layers=1)
    with pytest.raises(ValueError, match="compile=True: LastLayerAtMask has no repeated blocks that its forward"):
        mhfast.sample(one_layer, 3, compile=True)  # its only layer runs piecewise in the fast forward
    assert type(one_layer.model.bert.encoder.layer[0]).__name__ == "BertLayer"


def test_compile_time_is_unknown_not_zero_without_torchs_callbacks(monkeypatch):
    import torch._dynamo.callback as callback

    monkeypatch.setattr(callback, "callback_handler", object())  # a torch without the compile callbacks
    lm = two_layer_bert()
    with compiled_blocks(lm) as report:
        assert report.blocks == 2
    assert report.seconds != report.seconds  # NaN


@pytest.mark.parametrize("value", [1, "yes", None])
def test_compile_must_be_a_bool(value):
    with pytest.raises(ValueError, match=r"mhfast.sample: compile must be True or False"):
        mhfast.sample(TabularMLM.random(3, 2, seed=0), 2, compile=value)


def test_compile_and_cuda_graph_capture_are_refused():
    with pytest.raises(ValueError, match="compile cannot be combined with capture cuda-graph"):
        mhfast.sample(TabularMLM.random(3, 2, seed=0), 2, compile=True, capture="cuda-graph")


def test_repeated_blocks_finds_layer_lists_only():
    lm = two_layer_bert()
    found = repeated_blocks(lm.model)
    assert [i for _, i in found] == [0, 1] and all(lst is lm.model.bert.encoder.layer for lst, _ in found)
    mixed = torch.nn.ModuleList([torch.nn.Linear(2, 2), torch.nn.ReLU()])
    no_params = torch.nn.ModuleList([torch.nn.ReLU(), torch.nn.ReLU()])
    assert repeated_blocks(torch.nn.Sequential(mixed, no_params)) == []


def test_cli_flag(capsys, tmp_path):
    from hf_tiny_models import save_tiny_bert_dir

    from mhfast.cli import main

    model_dir = save_tiny_bert_dir(tmp_path / "bert")
    code = main(["sample", "--model", str(model_dir), "--length", "4", "--chains", "2", "--epochs", "2",
                 "--burn-in", "0", "--quiet", "--compile"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "(compiling " in out.splitlines()[-1]


def failing_compile(block):
    """compile_block with a backend that cannot compile (as inductor without a C++ compiler)."""
    def backend(graph, example_inputs):
        raise RuntimeError("no working C++ compiler (test)")
    return torch.compile(block, backend=backend, dynamic=True)


def test_a_failed_compile_is_a_clear_error_and_the_blocks_come_back(monkeypatch):
    import mhfast.models.compiled_blocks as cb

    torch.compiler.reset()  # so that the layers compile again, with the failing backend
    monkeypatch.setattr(cb, "compile_block", failing_compile)
    lm = two_layer_bert()
    before = layer_objects(lm)
    with pytest.raises(cb.CompileError, match=r"mhfast.sample: compile=True: torch.compile of LastLayerAtMask's "
                                              r"blocks failed \(.*no working C\+\+ compiler \(test\)"):
        mhfast.sample(lm, 4, chains=2, epochs=2, burn_in=0, compile=True)
    assert all(a is b for a, b in zip(layer_objects(lm), before))
    torch.compiler.reset()


def test_cli_a_failed_compile_is_one_line(capsys, tmp_path, monkeypatch):
    import mhfast.models.compiled_blocks as cb
    from hf_tiny_models import save_tiny_bert_dir

    from mhfast.cli import main

    torch.compiler.reset()
    monkeypatch.setattr(cb, "compile_block", failing_compile)
    model_dir = save_tiny_bert_dir(tmp_path / "bert")
    capsys.readouterr()  # the model saver's progress bar
    code = main(["sample", "--model", str(model_dir), "--length", "4", "--chains", "2", "--epochs", "2",
                 "--burn-in", "0", "--quiet", "--compile"])
    _, err = capsys.readouterr()
    torch.compiler.reset()
    assert code == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "error: mhfast.sample: compile=True: torch.compile of" in lines[0], err
