"""End-to-end sampler timing: mhfast.sample on the bundled De->En CMLM and a BERT-base-sized random MLM.

For each model and dtype (fp32, bf16) it samples many inputs x chains with the compiled backend
and reports wall time, proposals per second and the mean energy of the best samples (a sanity
value: a broken kernel shows up as NaN or an absurd energy). On CUDA it also runs the reference
backend once on a smaller batch and checks that compiled and reference agree exactly on the
tokens (the sampler is deterministic given its seed; boundary draws within fp32 rounding may
legitimately differ, so the agreement fraction is reported, not asserted).

Writes ``OUT/sampler_e2e.md`` and ``OUT/sampler_e2e.json``.

Example:
    python3 bench/sampler_e2e.py --out /tmp/o --device cuda
    python3 bench/sampler_e2e.py --out /tmp/o --device cpu --quick
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import mhfast  # noqa: E402


def bert_base_random(device: str, dtype: torch.dtype, quick: bool) -> Any:
    """A random BertForMaskedLM of BERT-base size (12 x 768, V = 30522); tiny with --quick."""
    import transformers
    from mhfast.models.hf import HFMaskedLM
    torch.manual_seed(0)
    if quick:
        cfg = transformers.BertConfig(vocab_size=1000, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                      intermediate_size=64, max_position_embeddings=64)
    else:
        cfg = transformers.BertConfig()  # bert-base-uncased's shape
    model = transformers.BertForMaskedLM(cfg).eval()
    return HFMaskedLM(model, device=device, dtype=dtype, pad_id=0, mask_id=103, bos_id=101, eos_id=102,
                      special_ids=(0, 100, 101, 102, 103))


def bundled_translator(device: str, dtype: torch.dtype) -> Any:
    from mhfast.translation import load_bundled_model
    tr = load_bundled_model(device=device)
    if dtype != torch.float32:
        tr.cmlm.model.to(dtype)  # the fairseq model behind the adapter (weights ship as fp16)
    return tr


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def run_mlm(device: str, dtype: torch.dtype, inputs: int, chains: int, T: int, epochs: int, quick: bool) -> dict:
    lm = bert_base_random(device, dtype, quick)
    g = torch.Generator().manual_seed(1)
    init = torch.randint(1000 if not quick else 200, 2000 if not quick else 900, (inputs, T), generator=g)
    kw = dict(init=init, chains=chains, epochs=epochs, burn_in=0, device=device, seed=3)
    mhfast.sample(lm, **{**kw, "epochs": 1})  # warm-up (module load, allocator)
    sync(device)
    t0 = time.perf_counter()
    res = mhfast.sample(lm, **kw)
    sync(device)
    secs = time.perf_counter() - t0
    proposals = inputs * chains * T * epochs
    row = dict(model="bert-base-random" if not quick else "tiny-bert-random", dtype=str(dtype), inputs=inputs,
               chains=chains, T=T, epochs=epochs, seconds=secs, proposals_per_s=proposals / secs,
               best_energy_mean=float(res.best_energy.float().mean()))
    if device == "cuda":
        small = dict(kw, init=init[: max(1, inputs // 8)], epochs=2)
        a = mhfast.sample(lm, **small, backend="compiled")
        b = mhfast.sample(lm, **small, backend="reference")
        row["compiled_vs_reference_token_agreement"] = float((a.tokens == b.tokens).float().mean())
    return row


def run_translation(device: str, dtype: torch.dtype, sentences: int, chains: int, epochs: int) -> dict:
    from mhfast.translation import BUNDLED_TEST_SOURCE
    import gzip
    opener = gzip.open if str(BUNDLED_TEST_SOURCE).endswith(".gz") else open
    with opener(BUNDLED_TEST_SOURCE, "rt") as f:
        sources = [line.strip() for _, line in zip(range(sentences), f)]
    tr = bundled_translator(device, dtype)
    opts = dict(chains=chains, epochs=epochs, burn_in=0)
    tr.translate(sources[:2], sampler_options=dict(opts, epochs=1))  # warm-up
    sync(device)
    t0 = time.perf_counter()
    out = tr.translate(sources, sampler_options=opts)
    sync(device)
    secs = time.perf_counter() - t0
    return dict(model="bundled-de-en", dtype=str(dtype), inputs=len(sources), chains=chains, epochs=epochs,
                seconds=secs, sentences_per_s=len(sources) / secs,
                nonempty=sum(1 for h in out.hypotheses if h.text) if hasattr(out, "hypotheses") else None)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--quick", action="store_true", help="tiny model and batch (smoke run)")
    p.add_argument("--skip-translation", action="store_true", help="no bundled model (fairseq missing)")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rows, errors = [], []
    inputs, chains, T, epochs = (2, 2, 8, 1) if args.quick else (64, 5, 32, 2)
    for dtype in (torch.float32, torch.bfloat16):
        try:
            rows.append(run_mlm(args.device, dtype, inputs, chains, T, epochs, args.quick))
        except Exception as e:  # reported in the summary, and the exit code says so
            errors.append(f"mlm {dtype}: {type(e).__name__}: {e}")
        # --quick: the translation path once (fp32), to keep the smoke run short.
        if not args.skip_translation and not (args.quick and dtype != torch.float32):
            try:
                rows.append(run_translation(args.device, dtype, 2 if args.quick else 64, 2 if args.quick else 5,
                                            1 if args.quick else 2))
            except Exception as e:
                errors.append(f"translation {dtype}: {type(e).__name__}: {e}")
        print(json.dumps(rows[-1:], default=str), flush=True)
    lines = [f"# sampler end to end ({args.device})", "", "| model | dtype | inputs x chains | epochs | seconds | rate |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        rate = (f"{r['proposals_per_s']:.0f} proposals/s" if "proposals_per_s" in r
                else f"{r['sentences_per_s']:.2f} sentences/s")
        lines.append(f"| {r['model']} | {r['dtype']} | {r['inputs']} x {r['chains']} | {r['epochs']} "
                     f"| {r['seconds']:.2f} | {rate} |")
    lines += ["", *[f"- ERROR {e}" for e in errors]]
    (args.out / "sampler_e2e.md").write_text("\n".join(lines) + "\n")
    (args.out / "sampler_e2e.json").write_text(json.dumps(dict(rows=rows, errors=errors), indent=1, default=str))
    print("\n".join(lines))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
