"""Golden cases: chains, energies and CLI output bytes fixed before a refactor of the Python layer.

Each case runs ``mhfast.sample`` (or the CLI) with fixed seeds and reduces what it returns to plain
JSON: every token of every chain, every energy (float32 values, exact in JSON), the per-epoch
statistics and the model-row counts. ``tests/golden/sampler.json`` and ``tests/golden/cli.json``
hold the values taken at commit cd47560 (before the sampler was split into kernels and a driver);
``tests/guards/test_golden.py`` recomputes them and requires equality (for the CLI's printed decimals, up to 2 units
in the last digit: fp32 rounds differently on other CPUs). A golden is regenerated only when a
commit fixes a bug that changes it, and that commit says which case and why::

    python3 tests/golden_cases.py --write          # rewrite both files (then review the diff!)

Example:
    >>> sorted(SAMPLER_CASES)[:2]
    ['block-gibbs-local', 'block-gibbs-raw']
"""
from __future__ import annotations

import contextlib
import io
import json
import re
import sys
from pathlib import Path
from typing import Any, Callable

import torch

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
SAMPLERS = ("mh", "gibbs", "block-mh", "block-gibbs")


def _tabular(**kw):
    from mhfast.models.tabular import TabularMLM

    return TabularMLM.random(num_tokens=4, length=(3, 5), seed=11, scale=1.5, **kw)


def _conditional():
    from mhfast.models.tabular import ConditionalTabularMLM

    return ConditionalTabularMLM.random(num_tokens=3, lengths=(2, 3, 4), num_sources=3, seed=5)


def _init(model) -> torch.Tensor:
    m, p = model.mask_id, model.pad_id
    return torch.tensor([[m, m, m, m, m], [0, m, 2, m, 1], [m, 1, m, p, p]])


def _filled(model) -> torch.Tensor:
    """Rows with ordinary tokens and a few masks (infilling: masks must be free)."""
    m = model.mask_id
    return torch.tensor([[0, 1, 2, 3, 0], [0, m, 2, m, 1], [3, 1, m, m, m]])


def _result_json(r: Any) -> dict:
    out = {k: getattr(r, k).tolist() for k in ("tokens", "lengths", "best_tokens", "best_energy", "energy",
                                               "energy_raw", "energy_local", "e_raw", "e_local", "acceptance_rate",
                                               "novel_rate", "target_temperature")}
    out["model_rows"], out["model_calls"] = r.model_rows, r.model_calls
    for k in ("history", "candidate_lengths", "chosen_candidate"):
        v = getattr(r, k)
        out[k] = None if v is None else v.tolist()
    return out


def _case(model_fn: Callable, inputs: Callable, **kw) -> Callable[[], dict]:
    def run() -> dict:
        import mhfast

        model = model_fn()
        return _result_json(mhfast.sample(model, **inputs(model), **kw))
    return run


def _sampler_cases() -> dict[str, Callable[[], dict]]:
    base = dict(chains=3, epochs=4, burn_in=1, seed=7)
    init = lambda m: {"init": _init(m)}  # noqa: E731
    cases = {}
    for s in SAMPLERS:
        for e in ("raw", "local"):
            cases[f"{s}-{e}"] = _case(_tabular, init, sampler=s, energy=e, **base)
    feat = lambda: _tabular(features=True, row_hooks=True)  # noqa: E731
    cases["mh-features-hooks"] = _case(feat, init, energy="local", **base)
    cases["block-mh-features-hooks"] = _case(feat, init, sampler="block-mh", block_schedule=2, **base)
    # top_p < 1: uniform_mix="auto" (0.01) since issue 17; explicit 0 is the nucleus proposal of before
    # (its golden is the one "mh-tempered-top-p" had until then).
    cases["mh-tempered-top-p"] = _case(_tabular, init, proposal_temperature=0.7, top_p=0.8, **base)
    cases["mh-tempered-top-p-mix0"] = _case(_tabular, init, proposal_temperature=0.7, top_p=0.8, uniform_mix=0.0,
                                            **base)
    cases["block-mh-top-p-mix"] = _case(_tabular, init, sampler="block-mh", block_schedule=2, top_p=0.7,
                                        uniform_mix=0.2, **base)
    cases["mh-anneal-force"] = _case(_tabular, init, energy="local", target_temperature=1.5, anneal=0.4,
                                     min_target_temperature=0.3, force_accept_epochs=1, **base)
    cases["mh-left-to-right-record"] = _case(_tabular, init, order="left-to-right", record="epoch", **base)
    cases["block-mh-list-schedule"] = _case(_tabular, init, sampler="block-mh", block_schedule=[3, 2, 2, 1],
                                            energy="local", **base)
    cases["block-gibbs-callable"] = _case(_tabular, init, sampler="block-gibbs", block_schedule=lambda e: 3 - e % 2,
                                          **base)
    free = torch.tensor([[True, False, True, True, False], [False, True, False, True, False],
                         [False, False, True, True, True]])
    cases["mh-infill"] = _case(_tabular, lambda m: {"init": _filled(m), "free_positions": free}, **base)
    cases["mh-length"] = _case(_tabular, lambda m: {"length": 5}, energy="local", **base)
    cases["mh-source-beam"] = _case(_conditional, lambda m: {"source": torch.tensor([0, 2, 1])}, length_beam=2,
                                    record="epoch", **base)
    cases["mh-source-input-ids"] = _case(_conditional, lambda m: {"source": torch.tensor([1, 2]),
                                                                  "input_ids": [4, 9]},
                                         length_beam=2, select="energy", **base)
    cases["mh-small-batches"] = _case(_tabular, init, max_tokens_per_batch=7, **base)
    cases["mh-generator"] = _case(_tabular, init, generator=torch.Generator().manual_seed(3),
                                  **{k: v for k, v in base.items() if k != "seed"})
    return cases


SAMPLER_CASES = _sampler_cases()

_SECONDS = re.compile(r"\d+\.\d+ s\b")


def _cli(argv: list[str], hide: str = "") -> dict:
    """stdout/stderr of ``mhfast ...`` in this process, with wall times replaced by ``<t> s`` (and the
    temporary path ``hide``, when given, by ``<dir>``)."""
    from mhfast.cli import main

    out, err = io.StringIO(), io.StringIO()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    finally:
        torch.set_num_threads(threads)
    clean = lambda text: _SECONDS.sub("<t> s", text.replace(hide, "<dir>") if hide else text)  # noqa: E731
    return {"code": code, "stdout": clean(out.getvalue()), "stderr": clean(err.getvalue())}


def cli_cases(tiny_bert_dir: str) -> dict[str, Callable[[], dict]]:
    """CLI runs: the bundled translation model (MH and Mask-Predict) and ``sample`` on a tiny BERT."""
    tr = ["translate", "--input", "bundled", "--ref", "bundled", "--limit", "2", "--format", "fairseq", "--quiet"]
    fast = ["--chains", "2", "--epochs", "3", "--burn-in", "1", "--seed", "3"]
    return {
        "translate-mh-raw": lambda: _cli(tr + fast + ["--energy", "raw", "--anneal", "0.1"]),
        "translate-block-mh-local": lambda: _cli(tr + fast + ["--energy", "local", "--sampler", "block-mh",
                                                              "--block-schedule", "2"]),
        "translate-mask-predict": lambda: _cli(tr + ["--method", "mask-predict", "--iterations", "3",
                                                     "--length-beam", "2"]),
        "sample-tiny-bert-both": lambda: _cli(["sample", "--model", tiny_bert_dir, "--length", "4", "--energy",
                                               "both", "--chains", "2", "--epochs", "3", "--burn-in", "1",
                                               "--seed", "2"], tiny_bert_dir),
        "sample-tiny-bert-infill": lambda: _cli(["sample", "--model", tiny_bert_dir, "--init", "a b c d e f",
                                                 "--free", "1:4", "--sampler", "block-mh", "--chains", "2",
                                                 "--epochs", "3", "--burn-in", "0", "--quiet"], tiny_bert_dir),
    }


def _write() -> None:  # pragma: no cover - run by hand
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from hf_tiny_models import save_tiny_bert_dir

    GOLDEN_DIR.mkdir(exist_ok=True)
    sampler = {name: fn() for name, fn in sorted(SAMPLER_CASES.items())}
    (GOLDEN_DIR / "sampler.json").write_text(json.dumps(sampler, indent=0, sort_keys=True) + "\n")
    with tempfile.TemporaryDirectory() as tmp:
        cases = cli_cases(save_tiny_bert_dir(Path(tmp) / "tiny_bert"))
        cli = {name: fn() for name, fn in sorted(cases.items())}
    (GOLDEN_DIR / "cli.json").write_text(json.dumps(cli, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    print(f"wrote {len(sampler)} sampler and {len(cli)} CLI goldens to {GOLDEN_DIR}")


if __name__ == "__main__":  # pragma: no cover
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python3 tests/golden_cases.py --write")
    _write()
