"""The fairseq CMLM decoder's fast forward against fairseq's own decoder, on the bundled Multi30k De->En model.

Three measurements, each alternating the two forwards within a round (median over ``--repeats`` rounds):

* ms per masked row: ``--rows`` rows of one target length (random target tokens, one mask each, sources
  spread over ``--sentences`` test sentences) through the sampler's
  runner at the default sub-batch, ``forward="full"`` (``FairseqCMLM.masked_features_at``: the whole decoder,
  encoder-attention keys/values projected for every row) vs ``forward="fast"``
  (:class:`mhfast.models.fast_decoder.FastCMLMDecoder`);
* the sub-batch budget: ms per row of the fast forward for each of ``--budgets`` tokens per model call,
  against the default rule (tokens from the width d and the CPU's L2 cache, 2 L2 / 4d in fp32);
* the whole sampler: ``mhfast.sample`` (single-site MH, raw energy, 5 chains) over the first ``--sentences``
  test sentences for ``--epochs`` epochs, both forwards, with the check that they give the same chains.

Writes its section of bench/RESULTS.md.

    python3 bench/bench_decoder.py                        # ~5 min on one core
    python3 bench/bench_decoder.py --sentences 2 --epochs 2 --repeats 1 --no-write
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results_md  # noqa: E402

import mhfast  # noqa: E402
from mhfast.models.fast_decoder import FastCMLMDecoder, fast_decoder_model  # noqa: E402
from mhfast.runtime import cpu_info  # noqa: E402
from mhfast.runtime.runner import ModelRunner, default_max_tokens  # noqa: E402

START, END = "<!-- bench_decoder:start -->", "<!-- bench_decoder:end -->"
BUNDLE = Path(mhfast.__file__).resolve().parent / "data" / "multi30k_de_en"


def load_bundled(device: str = "cpu"):
    from mhfast.models.fairseq_cmlm import load_fairseq_cmlm

    return load_fairseq_cmlm(BUNDLE / "model.pt", BUNDLE, device=device)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def masked_rows(lm, n: int, T: int, sources: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """``n`` rows BOS + T random target tokens + EOS, one mask each, row r conditioned on source r % sources."""
    g = torch.Generator().manual_seed(seed)
    content = torch.tensor([i for i in range(lm.vocab_size) if i not in lm.special_ids])
    rows = content[torch.randint(len(content), (n, T + 2), generator=g)]
    rows[:, 0], rows[:, -1] = lm.bos_id, lm.eos_id
    pos = torch.randint(1, T + 1, (n,), generator=g)
    rows[torch.arange(n), pos] = lm.mask_id
    return rows, pos, torch.arange(n) % sources


def time_rows(runner: ModelRunner, rows: torch.Tensor, pos: torch.Tensor, index: torch.Tensor) -> float:
    device = torch.device(runner.device_type)
    sync(device)
    start = time.perf_counter()
    runner.to_logits(runner.outputs(rows, pos, index))  # the LM head included (the same in both)
    sync(device)
    return (time.perf_counter() - start) * 1e3 / rows.shape[0]


def alternate(runners: dict, rows: torch.Tensor, pos: torch.Tensor, index: torch.Tensor, repeats: int) -> dict:
    """Median ms per row of each runner: a warm-up call each, then ``repeats`` rounds, every runner once per round
    (so a change of machine load hits all alike)."""
    for r in runners.values():
        time_rows(r, rows[:8], pos[:8], index[:8])
    times: dict = {k: [] for k in runners}
    for _ in range(repeats):
        for k, r in runners.items():
            times[k].append(time_rows(r, rows, pos, index))
    return {k: statistics.median(t) for k, t in times.items()}


def measure_rows(lm, ctx, lengths: list[int], n: int, sources: int, repeats: int) -> list[dict]:
    device = torch.device(lm.device)
    budget = default_max_tokens(lm, device)
    models = {"full": lm, "fast": fast_decoder_model(lm)}
    assert isinstance(models["fast"], FastCMLMDecoder)
    out = []
    for T in lengths:
        rows, pos, index = masked_rows(lm, n, T, sources)
        runners = {k: ModelRunner(m, ctx, budget, device) for k, m in models.items()}
        logits = {k: r.to_logits(r.outputs(rows, pos, index)).float() for k, r in runners.items()}
        diff = float((logits["fast"] - logits["full"]).abs().max())
        ms = alternate(runners, rows, pos, index, repeats)
        full, fast = ms["full"], ms["fast"]
        out.append({"T": T, "full": full, "fast": fast, "budget": budget, "diff": diff})
        print(f"T={T}: full {full:.3f} ms/row, fast {fast:.3f} ms/row ({full / fast:.2f}x), max |logit diff| "
              f"{diff:.1e}", flush=True)
    return out


def measure_budgets(lm, ctx, T: int, n: int, sources: int, budgets: list[int], repeats: int) -> dict[int, float]:
    """ms per row of the fast forward at each sub-batch budget (tokens), alternating within a round: does the
    width-and-L2 rule of ``default_max_tokens`` (2 L2 / 4d tokens in fp32) pick a fast budget for this model too?"""
    rows, pos, index = masked_rows(lm, n, T, sources)
    fast = fast_decoder_model(lm)
    runners = {b: ModelRunner(fast, ctx, b, torch.device(lm.device)) for b in budgets}
    out = alternate(runners, rows, pos, index, repeats)
    print("budgets: " + ", ".join(f"{b}: {ms:.3f}" for b, ms in out.items()), flush=True)
    return out


def measure_sampler(lm, sources: list[str], epochs: int, repeats: int) -> dict:
    opts = dict(source=sources, length_beam=1, chains=5, epochs=epochs, burn_in=1, energy="raw", seed=0)
    times = {"full": [], "fast": []}
    results = {}
    for _ in range(repeats):
        for fwd in ("full", "fast"):
            sync(torch.device(lm.device))
            start = time.perf_counter()
            results[fwd] = mhfast.sample(lm, forward=fwd, **opts)
            sync(torch.device(lm.device))
            times[fwd].append(time.perf_counter() - start)
    same = torch.equal(results["full"].tokens, results["fast"].tokens)
    full, fast = statistics.median(times["full"]), statistics.median(times["fast"])
    print(f"sampler: full {full:.2f} s, fast {fast:.2f} s ({full / fast:.2f}x), same chains: {same}", flush=True)
    return {"full": full, "fast": fast, "same": same, "rows": results["fast"].model_rows,
            "proposals": results["fast"].proposals}


def report(rows: list[dict], sampler: dict, args, lm, budgets: dict[int, float]) -> str:
    dec = lm.model.decoder
    layers, d = len(dec.layers), dec.embed_dim
    lines = ["## The fairseq CMLM decoder's fast forward (bench/bench_decoder.py)", "",
             f"The bundled Multi30k De->En CMLM ({layers} decoder layers, d={d}, vocab {lm.vocab_size}); fairseq's "
             f"decoder (`forward=\"full\"`) vs mhfast's fast decoder forward (`forward=\"fast\"`, the default: "
             f"encoder-attention keys/values once per distinct source of a call, the last layer only at the read "
             f"positions). Runs alternate within a round; medians over {args.repeats} rounds. "
             f"{results_md.machine_description(torch.device(lm.device).type)}.", "",
             f"ms per masked row ({args.rows} rows of target length T, sources spread over {args.sentences} test "
             f"sentences, one sub-batch budget of {rows[0]['budget']} tokens = the sampler's default):", "",
             "| T | full (ms / row) | fast (ms / row) | full / fast | max abs logit difference |", "|---|---|---|---|---|"]
    lines += [f"| {r['T']} | {r['full']:.3f} | {r['fast']:.3f} | {r['full'] / r['fast']:.2f}x | {r['diff']:.1e} |"
              for r in rows]
    if budgets:
        best = min(budgets, key=budgets.get)
        chosen = rows[0]["budget"]
        lines += ["", f"Sub-batch budget (tokens per model call) for the fast forward at T={args.budget_length}, "
                  f"{args.rows * 4} rows, ms per row; the default rule gives {chosen} for d={lm.model.decoder.embed_dim} "
                  f"(2 x {cpu_info.l2_bytes() >> 10} KiB of L2 / 4d, from bench_forward.py's AntiBERTy sweeps):", "",
                  "| " + " | ".join(f"{b}" for b in budgets) + " |", "|" + "---|" * len(budgets),
                  "| " + " | ".join(f"{ms:.3f}" for ms in budgets.values()) + " |", "",
                  f"Fastest: {best} ({budgets[best]:.3f} ms / row); the default's "
                  + (f"{budgets[chosen]:.3f} ms / row is {budgets[chosen] / budgets[best]:.2f}x the fastest."
                     if chosen in budgets else "budget was not in the sweep.")]
    lines += ["", f"The whole sampler (`mhfast.sample`, single-site MH, raw energy, 5 chains, {args.epochs} epochs "
              f"over the first {args.sentences} sentences of test_2016_flickr, {sampler['proposals']} proposals, "
              f"{sampler['rows']} decoder rows): full {sampler['full']:.2f} s, fast {sampler['fast']:.2f} s = "
              f"{sampler['full'] / sampler['fast']:.2f}x; same chains: {'yes' if sampler['same'] else 'NO'}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[12, 20, 32])
    p.add_argument("--rows", type=int, default=256)
    p.add_argument("--sentences", type=int, default=4)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--budgets", type=int, nargs="*", default=[512, 1024, 2048, 4096, 8192, 16384, 65536],
                   help="sub-batch budgets to sweep (none: skip the sweep)")
    p.add_argument("--budget-length", type=int, default=20, help="target length of the budget sweep")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu", help="cpu or cuda (scripts/gpu_check.sh runs it on the GPU)")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    lm = load_bundled(args.device)
    sources = (BUNDLE / "test_2016_flickr.de").read_text(encoding="utf-8").splitlines()[:args.sentences]
    ctx = lm.encode(sources)
    rows = measure_rows(lm, ctx, args.lengths, args.rows, len(sources), args.repeats)
    budgets = (measure_budgets(lm, ctx, args.budget_length, args.rows * 4, len(sources), args.budgets, args.repeats)
               if args.budgets else {})
    sampler = measure_sampler(lm, sources, args.epochs, args.repeats)
    text = report(rows, sampler, args, lm, budgets)
    print(text)
    if not args.no_write:
        results_md.write_section(START, END, text)
    return 0 if sampler["same"] else 1


if __name__ == "__main__":
    sys.exit(main())
