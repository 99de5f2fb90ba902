"""The typed wrappers (mhfast.ops) reject arguments of the wrong Python type on every device, naming them, as their
reference twins do: on CPU, where the kernels check the values themselves, the wrappers once skipped the type
checks too, so an epoch of 1.5 was truncated to 1 and a temperature given as a string was accepted."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from op_checks import mapped, raises_everywhere  # noqa: E402
from test_mh_commit_site import commit_inputs  # noqa: E402

KEYS = torch.tensor([3, 4])
LOGITS = torch.tensor([[0.0, 1.0, 2.0]])
CURRENT = torch.tensor([0])
U = torch.tensor([0.5])
TOKENS = torch.zeros(1, 3, dtype=torch.long)
SITE = (torch.zeros(1, 1, 3), TOKENS[:, :1], KEYS[:1], CURRENT, CURRENT, torch.zeros(3, dtype=torch.bool))

CASES = [
    ("counter_uniforms", (KEYS, 1.5, 0, 0, None), "epoch"),
    ("counter_uniforms", (KEYS, 0, "1", 0, None), "step"),
    ("counter_uniforms", ([3, 4], 0, 0, 0, None), "keys"),
    ("masked_copies", (TOKENS, CURRENT, CURRENT, True), "mask_id"),
    ("masked_copies", (TOKENS, CURRENT, CURRENT, 0.0), "mask_id"),
    ("gather_energies", (LOGITS, None, CURRENT, 1), "targets"),
    ("gather_energies", (LOGITS, CURRENT, CURRENT, 1.0), "num_seqs"),
    ("propose", (LOGITS, CURRENT, "0.5", 1.0, U), "temperature"),
    ("propose", (LOGITS, CURRENT, 1.0, None, U), "top_p"),
    ("propose", ([[0.0, 1.0]], CURRENT, 1.0, 1.0, U), "logits"),
    ("mh_accept_", (TOKENS, CURRENT, CURRENT, U, U, U, U, 1.0, U), "beta"),
    ("mh_propose_site", (*SITE, 1.9, 0, 1, 1.0, 1.0), "epoch"),
    ("mh_propose_site", (*SITE, 1, 0, 1, "1", 1.0), "temperature"),
    ("mh_site_rows", (TOKENS, TOKENS.bool(), U, U, CURRENT, CURRENT, CURRENT, 2.0, 0), "num_rows"),
]


@pytest.mark.parametrize("op, args, name", CASES, ids=[f"{c[0]}-{c[2]}-{i}" for i, c in enumerate(CASES)])
def test_a_wrong_python_type_is_an_error_naming_it_in_the_wrapper_and_the_reference(op, args, name):
    raises_everywhere(op, args, name, raw=False)


@pytest.mark.parametrize("counter", ["epoch", "step", "stream"])
def test_commit_site_counters_are_not_truncated(counter):
    args = commit_inputs(9, 6, 5, 5, 0)
    counters = dict(epoch=1, step=0, stream=2)
    counters[counter] = 1.5
    raises_everywhere("mh_commit_site_", (*args, 1.0, *counters.values()), counter, raw=False)


BEYOND_INT64 = [
    ("counter_uniforms", (KEYS, 2 ** 63, 0, 0, None), "epoch must fit in 64 bits"),
    ("counter_uniforms", (KEYS, 0, 0, -2 ** 63 - 1, None), "stream must fit in 64 bits"),
    ("masked_copies", (TOKENS, CURRENT, CURRENT, 2 ** 63), "mask_id must fit in 64 bits"),
    ("gather_energies", (LOGITS, CURRENT, CURRENT, 2 ** 64), "num_seqs must fit in 64 bits"),
    ("mh_site_rows", (TOKENS, TOKENS.bool(), U, U, CURRENT, CURRENT, CURRENT, 2 ** 70, 0), "num_rows must fit"),
]


@pytest.mark.parametrize("op, args, message", BEYOND_INT64, ids=[c[2].split()[0] for c in BEYOND_INT64])
def test_an_int_beyond_int64_is_named(op, args, message):
    """torch's schema error had said "Expected a value of type 'int' ... but instead found type 'int'" (the
    wrapper) or "Overflow when unpacking long long" (the reference), naming no argument."""
    raises_everywhere(op, args, message, raw=False)


def test_propose_reports_in_the_kernels_order():
    """A NaN logit and a uniform of 2 at once: every implementation names the uniforms (the CPU kernel checks them
    before its pass; Python had named the logits)."""
    raises_everywhere("propose", (torch.tensor([[float("nan"), 0.0]]), CURRENT, 1.0, 0.9, torch.tensor([2.0])),
                      "uniforms must lie in")


def test_the_wrappers_take_meta_tensors_as_the_raw_ops_do():
    """Shapes only: the raw op answers with meta outputs; the wrapper had tried to read values (Tensor.item() on
    a meta tensor, naming nothing)."""
    import mhfast.ops as ops

    meta = lambda t: t.to("meta")  # noqa: E731
    got = ops.masked_copies(meta(TOKENS), meta(CURRENT), meta(CURRENT), 0)
    assert got.is_meta and got.shape == torch.ops.mhfast.masked_copies(meta(TOKENS), meta(CURRENT), meta(CURRENT),
                                                                       0).shape == (1, 3)
    proposed, logq_p, logq_c = ops.propose(meta(LOGITS), meta(CURRENT), 1.0, 0.9, meta(U))
    assert proposed.is_meta and proposed.shape == logq_p.shape == logq_c.shape == (1,)


def _value_checked_calls() -> dict[str, tuple[str, tuple]]:
    """Each reference that reads values, with valid arguments: the argument its meta error names, and the args."""
    from test_mh_memo_ops import lookup_args, lookup_call, memo_tables, store_call
    from test_mh_site_rows import site_rows_inputs

    stamp, _, _, raw, local = memo_tables(2, 8, 3)
    store = (stamp, raw, local, torch.tensor([0]), torch.tensor([0]), torch.tensor([0]), torch.tensor([0]),
             torch.zeros(1, 3), torch.zeros(1, 3), 1, 0)
    return {"masked_copies": ("tokens", (TOKENS, CURRENT, CURRENT, 0)),
            "gather_energies": ("logits", (LOGITS, CURRENT, CURRENT, 1)),
            "propose": ("logits", (LOGITS, CURRENT, 1.0, 0.9, U)),
            "mh_accept_": ("tokens", (TOKENS.clone(), CURRENT, CURRENT, U, U, U, U, U, U)),
            "mh_propose_site": ("cache", (*SITE, 1, 0, 1, 1.0, 1.0)),
            "mh_site_rows": ("tokens", (*site_rows_inputs(4, 5, 2, 0), 0)),
            "mh_commit_site_": ("chains.tokens", (*commit_inputs(9, 6, 5, 5, 0), 1.0, 1, 0, 2)),
            "mh_memo_lookup_": ("tokens", lookup_call(lookup_args("cpu"))),
            "mh_memo_store_": ("act", store_call(store))}


@pytest.mark.parametrize("op", list(_value_checked_calls()))
def test_the_references_name_a_meta_tensor(op):
    """A pure-PyTorch twin computes values: on meta tensors every reference that reads values is a ValueError
    naming the op's first tensor (the first value read, Tensor.item() deep inside, had named nothing), where the
    compiled op answers with shapes. The same arguments on the CPU are valid (the reference runs)."""
    import mhfast.reference as reference

    name, args = _value_checked_calls()[op]
    getattr(reference, op)(*args)
    with pytest.raises(ValueError, match=f"mhfast.{op}: {name} is on the meta device"):
        getattr(reference, op)(*(mapped(a, lambda t: t.to("meta")) for a in args))
