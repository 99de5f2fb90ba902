"""Random combinations of the sampler's options (hypothesis): every run is refused with a ValueError naming an
option, or returns committed energies equal to the exact energies of its final tokens.

Why: each option has its own tests, but the paths where options meet (a plain epoch of a delayed-acceptance run
with the memo's hits and an extra energy term; early rejection with the memo off on a forced-accept epoch) crashed
before a sweep like this one found them (2026-11-29). The invariant is the one every kernel must keep whatever it
forwards or remembers: the state's energy is the model's energy of the state's tokens.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mhfast
from mhfast.models.tabular import ConditionalTabularMLM, TabularMLM
from mhfast.sampler.options import SPEC

from exact_checks import assert_energies_exact

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TAB = TabularMLM.random(num_tokens=3, length=[3, 5], seed=7, scale=0.8)
COND = ConditionalTabularMLM.random(num_tokens=3, lengths=(4, 5), num_sources=2, seed=5)
OPTION_NAMES = [o.name for o in SPEC]


def ends(tokens: torch.Tensor) -> torch.Tensor:
    """An extra energy term that couples a sequence's two ends (outside each other's delayed-acceptance window)."""
    return (tokens[:, 0] == tokens[:, -1]).float() * 1.5


TEMPERATURES = {"fixed": {}, "cold": {"target_temperature": 0.2}, "annealed": {"anneal": 0.15},
                "tuned ladder": {"tempering": 3, "target_temperature": 0.6},
                "fixed ladder": {"tempering": [0.6, 1.0, 2.0], "target_temperature": 0.6}}


@st.composite
def runs(draw) -> tuple[str, dict]:
    """A model ('one', 'two lengths' or 'conditional') and the options of one run, drawn so that most combinations
    are ones the sampler accepts (the refused ones must still name an option), weighted toward single-site MH, whose
    options meet in the most ways."""
    sampler = draw(st.sampled_from(["mh", "mh", "mh", "block-mh", "gibbs", "block-gibbs"]))
    mh = sampler in ("mh", "block-mh")
    kw: dict = dict(sampler=sampler, chains=draw(st.sampled_from([1, 7, 24])), epochs=5,
                    burn_in=draw(st.sampled_from([0, 2])), seed=draw(st.integers(0, 2 ** 31)),
                    energy=draw(st.sampled_from(["raw", "local"])), order=draw(st.sampled_from(["random",
                                                                                                "left-to-right"])),
                    proposal_temperature=draw(st.sampled_from([1.0, 0.8])), top_p=draw(st.sampled_from([1.0, 0.9])),
                    start=draw(st.sampled_from(["greedy", "sampled", "random"])),
                    backend=draw(st.sampled_from(["compiled", "reference"])),
                    max_tokens_per_batch=draw(st.sampled_from([None, 8])))
    if mh:
        kw.update(TEMPERATURES[draw(st.sampled_from(sorted(TEMPERATURES)))])
        kw["force_accept_epochs"] = draw(st.sampled_from([0, 2]))
        if draw(st.booleans()):
            kw["extra_energy"] = [ends]
    if sampler == "mh":
        kw["capture"] = draw(st.sampled_from(["none", "none", "static"]))
        if kw["capture"] == "none":
            kw["memo"] = draw(st.sampled_from([0, "auto", 2]))
    delayed = None
    if sampler == "mh" and kw.get("capture") == "none":
        delayed = draw(st.sampled_from([None, "window:0", "window:1", "influence:2", "early:1", "cascade:1", "auto"]))
    elif sampler == "block-mh":
        delayed = draw(st.sampled_from([None, "window:1", "auto"]))
    if "anneal" not in kw and kw["chains"] > 1 and draw(st.booleans()):  # inputs leave the batch when they mix
        kw.update(draw(st.sampled_from([{"until_rhat": 1.5}, {"min_ess": 5.0}])), epochs=12, force_accept_epochs=0)
    if delayed is not None:
        kw["delayed"] = delayed
        if delayed.startswith("early"):
            kw["energy"] = "local"
        if "anneal" in kw and draw(st.booleans()):
            kw["delayed_min_temperature"] = 0.5
    return draw(st.sampled_from(["one", "two lengths", "conditional"])), kw


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs())
def test_a_run_is_refused_naming_an_option_or_its_energies_are_exact(case):
    model_name, kw = case
    if model_name == "one":
        model, args = TAB, (5,)
    elif model_name == "two lengths":
        m, p = TAB.mask_id, TAB.pad_id
        model, args = TAB, ()
        kw["init"] = torch.tensor([[m] * 5, [m, m, m, p, p]])
    else:
        model, args = COND, ()
        kw["source"] = torch.tensor([0, 1])
    try:
        r = mhfast.sample(model, *args, **kw)
    except ValueError as e:
        assert any(name in str(e) for name in OPTION_NAMES), f"{kw}: {e}"
        return
    assert_energies_exact(model, r, kw["energy"], extra=ends if "extra_energy" in kw else None,
                          sources=kw["source"].tolist() if model_name == "conditional" else None, atol=1e-3)
