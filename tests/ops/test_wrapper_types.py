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
from op_checks import raises_everywhere  # noqa: E402
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
