"""Product-of-experts sampling: ``extra_energy`` terms are sampled exactly (checked by enumeration).

The bound is the one of tests/sampler/test_sampler_exact.py (TV < 3 x the expected TV of n independent
draws from the target; see its docstring). The power check samples the same model WITHOUT the
term and shows that the comparison with the term's target then fails, so the test can detect a
term dropped from the MH ratio.
"""
from __future__ import annotations

import pytest
import torch

import mhfast
from cli_runner import run_main
from mhfast.energy_terms import AllowedTokens, Hamming, HFClassifier
from mhfast.models.tabular import TabularMLM
from exact_checks import empirical, energies, enumerate_states, masks, tv_and_bound

N = 3000
V_ORD = 3  # ordinary tokens 0..2; mask 3, pad 4


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def model3(**kw) -> TabularMLM:
    return TabularMLM.random(num_tokens=V_ORD, length=3, seed=11, scale=0.5, **kw)


class TableTerm:
    """A random tabular energy term: f(X) = table[code(X)] over the 5**3 codes of length-3 rows."""

    name = "table"

    def __init__(self, seed: int, scale: float = 1.5):
        g = torch.Generator().manual_seed(seed)
        self.table = torch.randn(5 ** 3, generator=g) * scale
        self.rows_seen = 0

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        self.rows_seen += tokens.shape[0]
        code = (tokens * torch.tensor([25, 5, 1], device=tokens.device)).sum(dim=1)
        return self.table.to(tokens.device)[code]


def term_target(model, states, energy: str, extra: torch.Tensor) -> torch.Tensor:
    e_raw, e_local = energies(model, states, torch.ones(3, dtype=torch.bool))
    return torch.softmax(-((e_raw if energy == "raw" else e_local) + extra.double()), dim=0)


CASES = [("mh", "raw"), ("mh", "local"), ("block-mh", "raw"), ("block-mh", "local")]


#: the term's weight in the enumeration test: far from 1, so a sampler that took every weight as 1 in its MH test
#: (while reporting the weighted energy) misses the target (0.7 could not tell them apart)
WEIGHT = -1.0


@pytest.mark.parametrize("sampler,energy", CASES)
def test_tabular_term_matches_enumeration(sampler, energy):
    model = model3(features=sampler == "mh", row_hooks=sampler == "block-mh")
    template, free = masks(model, 3)
    states = enumerate_states(model, template, free)
    term = TableTerm(seed=3)
    p = term_target(model, states, energy, WEIGHT * term(states))
    r = mhfast.sample(model, init=template[None], chains=N, epochs=60, burn_in=5, seed=1, energy=energy,
                      sampler=sampler, block_schedule=2 if sampler == "block-mh" else None,
                      extra_energy=[(term, WEIGHT)])
    tv, bound = tv_and_bound(p, empirical(states, r.tokens[0]), N)
    assert tv < bound, f"{sampler}/{energy}: TV {tv:.4f} >= bound {bound:.4f}"
    # the reported energy is the target's: MLM energy + weighted term; the term's value is reported
    e_mlm = r.energy_raw if energy == "raw" else r.energy_local
    assert torch.allclose(r.energy, e_mlm + WEIGHT * r.terms[..., 0], atol=1e-5)
    assert torch.allclose(r.terms[..., 0], term(r.tokens[0]).float()[None], atol=1e-6)
    assert r.terms_per_epoch.shape == (60, 1, N, 1) and r.term_names == ["table"]


@pytest.mark.parametrize("sampler", ["mh", "block-mh"])
def test_dropping_the_term_is_detected(sampler):
    """Power: chains of the plain MLM energy are far (TV > bound) from the product-of-experts target."""
    model = model3()
    template, free = masks(model, 3)
    states = enumerate_states(model, template, free)
    p = term_target(model, states, "local", 0.7 * TableTerm(seed=3)(states))
    r = mhfast.sample(model, init=template[None], chains=N, epochs=30, burn_in=5, seed=1, energy="local",
                      sampler=sampler, block_schedule=2 if sampler == "block-mh" else None)
    tv, bound = tv_and_bound(p, empirical(states, r.tokens[0]), N, fit=False)
    assert tv > 2 * bound, f"TV {tv:.4f} vs bound {bound:.4f}: the check could not see a missing term"


@pytest.mark.parametrize("energy", ["raw", "local"])
def test_hamming_and_allowed_tokens_match_enumeration(energy):
    """A Hamming penalty to a parent plus a hard constraint (token 2 never at position 1), from the parent."""
    model = model3()
    parent = torch.tensor([0, 1, 0])
    allowed = torch.ones(3, model.vocab_size, dtype=torch.bool)
    allowed[1, 2] = False
    template, free = parent.clone(), torch.ones(3, dtype=torch.bool)
    states = enumerate_states(model, template, free)
    states = states[states[:, 1] != 2]  # the constraint's support
    p = term_target(model, states, energy, 1.2 * (states != parent).sum(dim=1).double())
    r = mhfast.sample(model, init=parent[None], chains=N, epochs=30, burn_in=5, seed=2, energy=energy,
                      extra_energy=[(Hamming(parent), 1.2), AllowedTokens(allowed)])
    assert not bool((r.tokens[0, :, 1] == 2).any())
    tv, bound = tv_and_bound(p, empirical(states, r.tokens[0]), N)
    assert tv < bound, f"TV {tv:.4f} >= bound {bound:.4f}"


def test_term_with_input_index_and_batched_inputs():
    """A term declaring input_index gets each row's input (row of init): two inputs, two references."""
    model = model3()
    refs = torch.tensor([[0, 0, 0], [2, 2, 2]])
    seen = []

    def near(tokens, input_index):
        seen.append(input_index.clone())
        return (tokens != refs[input_index]).sum(dim=1).float()

    m = model.mask_id
    r = mhfast.sample(model, init=torch.tensor([[m, m, m], [m, m, m]]), chains=200, epochs=8, burn_in=2, seed=4,
                      extra_energy=[(near, 4.0)])
    assert set(torch.cat(seen).tolist()) == {0, 1}
    # a strong pull: most chains sit on their own input's reference
    assert float((r.tokens[0] == refs[0]).all(dim=1).float().mean()) > 0.5
    assert float((r.tokens[1] == refs[1]).all(dim=1).float().mean()) > 0.5


def test_a_defaulted_second_parameter_keeps_its_default():
    """``lambda t, w=w: ...`` (a loop's value bound by a default) is called with the tokens alone; a second parameter
    without a default, or named input_index, gets each row's input. Before, any second positional parameter got the
    index, and ``scale`` below became [0, 1, 2]: terms 0, 3, 6 instead of 6, 6, 6."""
    model = model3()
    rows = [[1, 1, 1]] * 3
    scaled = mhfast.energy(model, rows, extra_energy=[lambda t, scale=2.0: scale * t.eq(1).sum(1).float()])
    assert scaled.terms[:, 0].tolist() == [6.0, 6.0, 6.0]
    named = mhfast.energy(model, rows, extra_energy=[lambda t, input_index=None: input_index.float()])
    assert named.terms[:, 0].tolist() == [0.0, 1.0, 2.0]
    plain = mhfast.energy(model, rows, extra_energy=[lambda t, i: 10.0 * i.float()])
    assert plain.terms[:, 0].tolist() == [0.0, 10.0, 20.0]


def test_a_weighted_sum_past_float32_is_an_error():
    """Each term finite, their weighted sum not in float32 (it was inf: no chain moved, ``e_extra`` inf)."""
    term = (lambda t: torch.full((t.shape[0],), 1e30), 1e10)
    for caller, call in (("energy", lambda: mhfast.energy(model3(), [[1, 1, 1]], extra_energy=[term])),
                         ("sample", lambda: mhfast.sample(model3(), 3, chains=2, epochs=2, burn_in=0,
                                                          extra_energy=[term]))):
        # each call names itself (mhfast.energy said "mhfast.sample: ...")
        with pytest.raises(ValueError, match=rf"^mhfast.{caller}: extra_energy: the weighted sum of the terms "
                                             "overflows float32"):
            call()


def test_a_module_term_is_called_as_its_forward_declares():
    """A ``torch.nn.Module`` term is read by its ``forward``: ``forward(tokens)`` gets the tokens alone (its
    ``__call__(*args)`` had made every Module get the index too: "forward() takes 2 positional arguments but 3 were
    given"), ``forward(tokens, input_index)`` gets the index."""
    class Ones(torch.nn.Module):
        def forward(self, tokens):
            return tokens.eq(1).sum(1).float()

    class Index(torch.nn.Module):
        def forward(self, tokens, input_index):
            return input_index.float()

    e = mhfast.energy(model3(), [[1, 1, 2]] * 3, extra_energy=[Ones(), Index()])
    assert e.terms.tolist() == [[2.0, 0.0], [2.0, 1.0], [2.0, 2.0]]


@pytest.mark.parametrize("where", ["extra_energy", "delayed"])
def test_a_term_with_parameters_builds_no_autograd_graph(where):
    """A term or a surrogate made of modules with parameters (values that require grad): the run had chained one
    autograd graph through every committed energy (21 nodes behind result.energy after 2 epochs, 315 after 80)
    and returned tensors that require grad (``.numpy()`` refused). The sampler runs without autograd."""
    emb = torch.nn.Embedding(5, 1)
    fn = (lambda t: emb(t).sum((1, 2))) if where == "extra_energy" else (lambda t, p: emb(t).sum((1, 2)))
    kwargs = {"extra_energy": [fn]} if where == "extra_energy" else {"delayed": fn}
    r = mhfast.sample(TabularMLM.random(3, 5, seed=0), 5, chains=3, epochs=3, burn_in=0, seed=0, memo=0, **kwargs)
    grads = [k for k, v in vars(r).items() if isinstance(v, torch.Tensor) and v.requires_grad]
    assert grads == [] and r.energy.grad_fn is None
    r.energy.numpy()
    if where == "extra_energy":  # mhfast.energy's terms too (its e_extra and terms had required grad)
        e = mhfast.energy(TabularMLM.random(3, 5, seed=0), [[0, 1, 2, 0, 1]], extra_energy=[fn])
        assert not any(v.requires_grad for v in (e.e_raw, e.e_local, e.e_extra, e.terms))


def test_terms_are_never_evaluated_for_no_op_proposals():
    model = model3()
    term = TableTerm(seed=5)
    C = 40
    r = mhfast.sample(model, 3, chains=C, epochs=6, burn_in=1, seed=6, extra_energy=[term])
    warm, init_rows = 3, 3 * C  # warm start: 3 rows (one per mask); initial energies: 3 rows per chain
    changed = (r.model_rows - warm - init_rows) // 2  # a changed single-site proposal forwards T_e - 1 = 2 rows
    assert term.rows_seen == C + changed
    assert changed < 6 * 3 * C  # some proposals were no-ops (the count above excludes them)


def test_compiled_and_reference_chains_are_identical_with_terms():
    model = model3()
    kw = dict(chains=6, epochs=4, burn_in=1, seed=8, extra_energy=[(TableTerm(seed=1), 0.5)], record="epoch")
    a = mhfast.sample(model, 3, backend="compiled", **kw)
    b = mhfast.sample(model, 3, backend="reference", **kw)
    assert torch.equal(a.history, b.history) and torch.equal(a.terms, b.terms)


@pytest.mark.parametrize("fn,exc,match", [
    (lambda t: torch.zeros(t.shape[0] + 1), ValueError, "shape"),
    (lambda t: torch.zeros(t.shape[0], dtype=torch.long), TypeError, "dtype"),
    (lambda t: [0.0] * t.shape[0], TypeError, "list"),
    (lambda t: torch.full((t.shape[0],), float("nan")), ValueError, "NaN"),
    (lambda t: torch.full((t.shape[0],), float("inf")), ValueError, "infinite"),
    (lambda t: torch.zeros(t.shape[0], device="meta"), ValueError, "device"),
    # finite in float64, inf once cast (until 2026-12-01: accepted, every MH test inf - inf = NaN, no chain moved)
    (lambda t: torch.full((t.shape[0],), 1e39, dtype=torch.float64), ValueError, "beyond float32's range"),
])
def test_bad_terms_get_an_error_naming_the_term(fn, exc, match):
    def bad_term(tokens):
        return fn(tokens)

    with pytest.raises(exc, match=f"'bad_term'.*{match}"):
        mhfast.sample(model3(), 3, chains=2, epochs=2, burn_in=0, extra_energy=bad_term)


@pytest.mark.parametrize("kwargs,match", [
    (dict(sampler="gibbs", extra_energy=lambda t: t.sum(1).float()), "gibbs"),
    (dict(sampler="block-gibbs", extra_energy=lambda t: t.sum(1).float()), "block-gibbs"),
    (dict(extra_energy=3), "extra_energy"),
    (dict(extra_energy=[(len, float("nan"))]), "finite"),
    (dict(extra_energy=[AllowedTokens(torch.ones(2, 5, dtype=torch.bool))]), "AllowedTokens mask has shape"),
])
def test_bad_extra_energy_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        mhfast.sample(model3(), 3, chains=2, epochs=2, burn_in=0, **kwargs)


def test_a_term_that_cannot_be_called_with_the_tokens_is_refused_before_sampling():
    """A third argument without a default, a keyword-only one or none at all had failed at the first call with
    a bare TypeError naming nothing of mhfast's (a review)."""
    def three(tokens, input_index, k):
        return tokens.sum(1).float()

    def keyword(tokens, *, scale):
        return tokens.sum(1).float()

    for fn, needs in ((three, "argument 'k'"), (keyword, "argument 'scale'"), (lambda: 0, "a positional argument")):
        with pytest.raises(ValueError, match=rf"^mhfast\.sample: extra_energy term '\S+' needs {needs}: a term is "
                                             r"called as f\(tokens\) or f\(tokens, input_index\)"):
            mhfast.sample(model3(), 3, chains=2, epochs=1, burn_in=0, extra_energy=[(fn, 1.0)])
    mhfast.sample(model3(), 3, chains=2, epochs=1, burn_in=0, extra_energy=[lambda t, i=0, k=1: t.sum(1).float()])


def test_ids_outside_the_vocabulary_are_refused_in_a_reference_and_a_classifier():
    """A Hamming reference id that no sequence can hold had counted as a difference wherever it stood, and a
    classifier with fewer ids than the sampled model (or a short token_map) failed mid-run with a bare IndexError
    (a review). The padding of a reference is not an id."""
    model = model3()
    for bad in (torch.tensor([0, 99, 1]), torch.tensor([-1, 0, 1])):
        with pytest.raises(ValueError, match=r"^mhfast\.sample: extra_energy: Hamming reference row 0 holds id "
                                             rf"{int(bad[bad.ne(0) & bad.ne(1)][0])} at position \d, outside the "
                                             rf"model's vocabulary \[0, {model.vocab_size}\)"):
            mhfast.sample(model, 3, chains=2, epochs=1, burn_in=0, extra_energy=[Hamming(bad)])
    padded = Hamming(torch.tensor([[0, 1, 2], [1, 2, -7]]), pad_id=-7)  # -7 pads row 1: no id
    two_lengths = TabularMLM.random(num_tokens=V_ORD, length=(2, 3), seed=1)
    mhfast.energy(two_lengths, torch.tensor([[0, 1, 2], [1, 2, two_lengths.pad_id]]), extra_energy=[padded])
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(vocab_size=3, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                  intermediate_size=8, num_labels=2)
    small = transformers.BertForSequenceClassification(cfg).eval()
    for clf, match in ((HFClassifier(small), "the classifier's vocabulary has 3 ids, the sampled model's 5"),
                       (HFClassifier(small, token_map=torch.tensor([0, 1, 2])), r"token_map must be a Long\[V\]"),
                       (HFClassifier(small, token_map=torch.tensor([0, 1, 2, 3, 0])), "token_map maps ids outside")):
        with pytest.raises(ValueError, match=r"^mhfast\.sample: extra_energy: HFClassifier: " + match):
            mhfast.sample(model, 3, chains=2, epochs=1, burn_in=0, extra_energy=[clf])
    ok = HFClassifier(small, token_map=torch.tensor([0, 1, 2, 0, 0]))
    assert mhfast.sample(model, 3, chains=2, epochs=1, burn_in=0, extra_energy=[ok]).terms.shape == (1, 2, 1)


def test_allowed_tokens_must_leave_a_choice_and_allow_the_start():
    model = model3()
    none_left = torch.ones(3, model.vocab_size, dtype=torch.bool)
    none_left[0, :V_ORD] = False
    with pytest.raises(ValueError, match="no ordinary token at free position 0"):
        mhfast.sample(model, 3, chains=2, epochs=1, burn_in=0, extra_energy=AllowedTokens(none_left))
    no_two = torch.ones(3, model.vocab_size, dtype=torch.bool)
    no_two[1, 2] = False
    with pytest.raises(ValueError, match="forbids token 2"):
        mhfast.sample(model, init=torch.tensor([[0, 2, 1]]), chains=2, epochs=1, burn_in=0,
                      extra_energy=AllowedTokens(no_two))


def test_hf_classifier_term_steers_toward_its_label():
    """Controlled generation with a classifier term on a tiny random BERT MLM: the label's probability rises."""
    transformers = pytest.importorskip("transformers")
    from hf_tiny_models import tiny_model
    from mhfast.models.hf import HFMaskedLM

    lm = HFMaskedLM(tiny_model("bert", seed=0), mask_id=4, pad_id=0, special_ids=(0, 1, 2, 3, 4))
    torch.manual_seed(1)
    cfg = transformers.BertConfig(vocab_size=lm.vocab_size, hidden_size=16, num_hidden_layers=1,
                                  num_attention_heads=2, intermediate_size=16, num_labels=2, initializer_range=1.0)
    clf = HFClassifier(transformers.BertForSequenceClassification(cfg).eval(), label=1)
    kw = dict(chains=16, epochs=6, burn_in=2, seed=3)
    plain = mhfast.sample(lm, 6, **kw)
    steered = mhfast.sample(lm, 6, extra_energy=[(clf, 3.0)], **kw)
    nll = lambda r: float(clf(r.tokens[0]).mean())  # noqa: E731
    assert nll(steered) < nll(plain)
    assert torch.allclose(steered.terms[0, :, 0], clf(steered.tokens[0]), atol=1e-5)


def test_a_half_precision_classifier_directory_loads_in_float32(tmp_path):
    """As a masked LM's directory: transformers 5 had loaded a classifier saved in fp16 in fp16."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(vocab_size=12, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                  intermediate_size=16, num_labels=2)
    transformers.BertForSequenceClassification(cfg).half().save_pretrained(tmp_path / "clf")
    assert next(HFClassifier(str(tmp_path / "clf"), label=1).model.parameters()).dtype == torch.float32


def test_hf_classifier_masks_the_classifiers_own_pad_id_by_default():
    """A RoBERTa classifier pads with 1 and starts every row with 0 (<s>): by default only id 1 is masked out of
    attention (config.pad_token_id), as with pad_id=1 given; a fixed 0 had masked <s> (1.68816 for 1.69247 in the
    review's example). With a token_map the classifier cannot know the MLM's pad: 0 unless given."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.RobertaConfig(vocab_size=12, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=16, num_labels=2, initializer_range=1.0, pad_token_id=1)
    model = transformers.RobertaForSequenceClassification(cfg).eval()
    rows = torch.tensor([[0, 5, 6, 2], [0, 7, 2, 1]])
    default, given, zero = (HFClassifier(model, label=1, pad_id=p) for p in (None, 1, 0))
    assert default.pad_id == 1 and torch.equal(default(rows), given(rows))
    assert not torch.allclose(default(rows), zero(rows))  # masking <s> changes the term: the bug would show
    assert HFClassifier(model, label=1, token_map=torch.arange(12)).pad_id == 0


# ---------------------------------------------------------------------------- CLI flags
@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from hf_tiny_models import save_tiny_bert_dir

    return save_tiny_bert_dir(tmp_path_factory.mktemp("terms") / "bert")


def test_sample_hamming_flag_keeps_infills_close_to_the_init(tiny_dir):
    base = ["sample", "--model", tiny_dir, "--init", "a b c d e f", "--chains", "6", "--epochs", "4", "--burn-in", "1",
            "--quiet"]
    dist = []
    for extra in ([], ["--hamming", "20"]):
        code, out, err = run_main([*base, *extra])
        assert code == 0, err
        seqs = [line.split("\t")[0].split() for line in out.splitlines() if line.startswith("  ")
                and not line.strip().startswith("best")]
        dist.append(sum(sum(a != b for a, b in zip(s, "a b c d e f".split())) for s in seqs))
    assert dist[1] < dist[0] and dist[1] == 0  # weight 20: leaving the init costs e^-20 per token


@pytest.mark.parametrize("argv,needle", [
    (["sample", "--length", "3", "--hamming", "1"], "--hamming needs --hamming-reference"),
    (["sample", "--length", "3", "--hamming-reference", "x.txt"], "no such file"),
    (["sample", "--length", "3", "--hamming", "-1"], "--hamming must be in [0, 3.40282e+38], got -1"),
    (["sample", "--length", "3", "--classifier", "/no/such/dir"], "--classifier: no such directory"),
    (["sample", "--length", "3", "--classifier-weight", "nan"], "--classifier-weight must be a finite number"),
    (["translate", "--input", "bundled", "--limit", "1", "--hamming", "1"], "--hamming needs --hamming-reference"),
])
def test_energy_term_flag_errors_are_one_line(tiny_dir, argv, needle):
    if argv[0] == "sample":
        argv = [argv[0], "--model", tiny_dir, *argv[1:]]
    code, out, err = run_main([*argv])
    assert code == 2 and err.count("\n") == 1 and needle in err, err


@pytest.mark.parametrize("label,needle", [
    ("5", "--classifier-label '5': label must be in [0, 2), got 5"),
    ("²", "--classifier-label '²': label '²' is not one of ['LABEL_0', 'LABEL_1']"),  # (int('²') had raised)
])
def test_a_bad_classifier_label_names_the_flag(tiny_dir, tmp_path, label, needle):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(vocab_size=12, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                  intermediate_size=16, num_labels=2)
    transformers.BertForSequenceClassification(cfg).save_pretrained(tmp_path / "clf")
    code, out, err = run_main(["sample", "--model", tiny_dir, "--length", "3", "--classifier", str(tmp_path / "clf"),
                               "--classifier-label", label])
    assert code == 2 and err.count("\n") == 1 and needle in err, err
    # a load error that says "label" (here the folder's name) is the classifier's, not the label's
    (tmp_path / "my_labels").mkdir()
    (tmp_path / "my_labels" / "config.json").write_text((tmp_path / "clf" / "config.json").read_text())
    code, out, err = run_main(["sample", "--model", tiny_dir, "--length", "3", "--classifier",
                               str(tmp_path / "my_labels"), "--classifier-label", label])
    assert code == 2 and "--classifier-label" not in err and "my_labels" in err, err


def test_mhfast_energy_reports_the_same_terms_as_sample():
    model = model3()
    term = TableTerm(seed=3)
    r = mhfast.sample(model, 3, chains=5, epochs=3, burn_in=1, seed=2, energy="local",
                      extra_energy=[(term, 0.7), Hamming(torch.tensor([0, 1, 2]))])
    e = mhfast.energy(model, r.tokens[0], extra_energy=[(term, 0.7), Hamming(torch.tensor([0, 1, 2]))])
    assert e.term_names == r.term_names == ["table", "hamming"]
    assert torch.equal(e.terms, r.terms[0])
    assert torch.allclose(e.e_local + e.e_extra, r.energy[0], atol=1e-5)
    with pytest.raises(ValueError, match="mhfast.energy: extra_energy"):
        mhfast.energy(model, r.tokens[0], extra_energy=3)


def test_hamming_counts_no_padding_when_the_pads_differ():
    """Past a row's length both the row and its reference are padding, each with its own pad id (the model's 4
    here; an unpadded reference has none, a padded one may use another id): none of it is a difference. Before,
    an unpadded reference was padded with 0 and each pad column of a wider ``init`` counted 1, so
    ``result.terms`` and ``energy`` were off by the padding (the chains' target only by a constant)."""
    model = TabularMLM.random(num_tokens=V_ORD, length=[3, 4], seed=1)  # pad 4
    h = Hamming(torch.tensor([0, 1, 2]))
    assert h(torch.tensor([[0, 1, 2, 4], [0, 2, 2, 4]]), torch.tensor([0, 0])).tolist() == [0.0, 1.0]
    assert mhfast.energy(model, torch.tensor([[0, 1, 2, 4]]), extra_energy=[h]).terms.tolist() == [[0.0]]
    padded_with_0 = Hamming(torch.tensor([[0, 1, 2, 0, 0], [1, 1, 1, 1, 0]]), pad_id=0)
    rows = torch.tensor([[0, 1, 2, 4, 4], [1, 1, 1, 1, 4]])
    assert padded_with_0(rows, torch.tensor([0, 1])).tolist() == [0.0, 0.0]
    init = torch.tensor([[3, 3, 3, 4], [0, 3, 3, 4]])  # rows of length 3 in a width of 4
    r = mhfast.sample(model, init=init, chains=2, epochs=2, burn_in=0, seed=0, extra_energy=[(h, 1.0)])
    recomputed = (r.tokens[..., :3] != torch.tensor([0, 1, 2])).sum(dim=-1).float()
    assert torch.equal(r.terms[..., 0], recomputed)


def test_mhfast_energy_reads_extra_energy_as_sample_does_and_checks_it_first():
    """A tuple of terms is a list of them (as in mhfast.sample, not a (term, weight) pair); a bad term or a
    reference of another length is refused before any model call; a term's bad value names mhfast.energy."""
    model = TabularMLM.random(num_tokens=V_ORD, length=3, seed=1)
    x = torch.tensor([[0, 1, 2], [2, 2, 2]])
    h = Hamming(torch.tensor([0, 1, 2]))
    as_tuple, as_list = mhfast.energy(model, x, extra_energy=(h, h)), mhfast.energy(model, x, extra_energy=[h, h])
    assert as_tuple.term_names == as_list.term_names == ["hamming_0", "hamming_1"]
    assert torch.equal(as_tuple.e_extra, as_list.e_extra) and as_list.e_extra.tolist() == [0.0, 4.0]
    calls = []
    original = model.masked_logits
    model.masked_logits = lambda *a, **k: calls.append(1) or original(*a, **k)
    with pytest.raises(ValueError, match="mhfast.energy: extra_energy: Hamming reference row 0 has 4 tokens"):
        mhfast.energy(model, x, extra_energy=[Hamming(torch.tensor([0, 1, 2, 0]))])
    with pytest.raises(ValueError, match="mhfast.energy: extra_energy weights must be finite"):
        mhfast.energy(model, x, extra_energy=[(h, float("nan"))])
    assert calls == []
    with pytest.raises(ValueError, match=r"^mhfast.energy: extra_energy term 'nan' returned NaN"):
        def nan(tokens):
            return torch.full((tokens.shape[0],), float("nan"))
        mhfast.energy(model, x, extra_energy=[nan])
    with pytest.raises(TypeError, match=r"^mhfast.energy: extra_energy term 'ints' returned dtype"):
        def ints(tokens):
            return tokens[:, 0]
        mhfast.energy(model, x, extra_energy=[ints])


def test_a_hamming_reference_of_another_length_is_refused():
    """Issue 37: a reference shorter or longer than its sequence would count padding and specials as
    differences; mhfast.sample and mhfast.energy refuse it before any work, naming it and both lengths."""
    model = TabularMLM.random(num_tokens=V_ORD, length=[3, 4], seed=1)
    init = torch.tensor([[0, 1, 2, 4], [0, 1, 2, 0]])  # lengths 3 and 4 (pad 4)
    fits = Hamming(torch.tensor([[1, 1, 1, 4], [2, 2, 2, 2]]), pad_id=4)
    assert mhfast.sample(model, init=init, chains=1, epochs=1, burn_in=0, extra_energy=[fits]).terms.shape == (2, 1, 1)
    short = Hamming(torch.tensor([[1, 1, 1], [2, 2, 2]]), pad_id=4)
    with pytest.raises(ValueError, match=r"mhfast.sample: extra_energy: Hamming reference row 1 has 3 tokens, the "
                                         r"sequence it is compared with 4"):
        mhfast.sample(model, init=init, chains=1, epochs=1, burn_in=0, extra_energy=[short])
    with pytest.raises(ValueError, match=r"mhfast.sample: extra_energy: Hamming reference row 0 has 4 tokens, "
                                         r"the sequence it is compared with 3"):
        mhfast.sample(model, 3, chains=1, epochs=1, burn_in=0,
                      extra_energy=[(Hamming(torch.tensor([0, 1, 2, 0])), 1.0)])
    named = Hamming(torch.tensor([[1, 1], [2, 2]]), names=["ref.txt line 1", "ref.txt line 2"])
    with pytest.raises(ValueError, match=r"mhfast.energy: extra_energy: ref.txt line 1 has 2 tokens, the sequence it "
                                         r"is compared with 3"):
        mhfast.energy(model, init, extra_energy=[named])


def test_more_hamming_references_than_inputs_are_refused():
    """One reference for all inputs or one per input: with more rows than inputs the first ones had been used,
    silently (references of another batch). mhfast.sample, mhfast.energy and the sharded sample say so."""
    from mhfast import distributed

    model = TabularMLM.random(num_tokens=V_ORD, length=4, seed=1)
    init = torch.tensor([[0, 1, 2, 0], [1, 1, 1, 1]])
    three = Hamming(torch.cat([init, init[:1]]))
    message = r"extra_energy: Hamming has 3 reference rows for 2 inputs: give one reference for all inputs, or one"
    with pytest.raises(ValueError, match=r"^mhfast\.sample: " + message):
        mhfast.sample(model, init=init, chains=1, epochs=1, burn_in=0, extra_energy=[(three, 1.0)])
    with pytest.raises(ValueError, match=r"^mhfast\.energy: " + message):
        mhfast.energy(model, init, extra_energy=[three])
    with pytest.raises(ValueError, match=message):
        distributed.sample(model, init=init, chains=1, epochs=1, burn_in=0, extra_energy=[three])
    for refs in (init[:1], init):  # one for all, one per input: as before
        r = mhfast.sample(model, init=init, chains=1, epochs=1, burn_in=0, extra_energy=[Hamming(refs)])
        assert r.terms.shape == (2, 1, 1)


def test_the_best_state_is_the_targets_best_with_extra_terms():
    """best_energy / best_tokens are judged by the target, model energy plus the weighted terms: a best state kept
    by the model energy alone passed every test (no best-state check used an extra term)."""
    model = model3()
    term = TableTerm(seed=3)
    r = mhfast.sample(model, 3, chains=6, epochs=12, burn_in=2, seed=4, energy="local", extra_energy=[(term, 3.0)],
                      record="epoch")
    e = mhfast.energy(model, r.best_tokens[0][None]).e_local
    best = float(e[0]) + 3.0 * float(term(r.best_tokens[0][None])[0])
    assert abs(float(r.best_energy[0]) - best) < 1e-4
    seen = mhfast.energy(model, r.history[:, 0].reshape(-1, 3)).e_local.double() \
        + 3.0 * term(r.history[:, 0].reshape(-1, 3)).double()
    assert float(r.best_energy[0]) <= float(seen.min()) + 1e-4  # no state visited after burn-in was better
