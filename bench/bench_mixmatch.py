"""mhfast.sample against a re-implementation of the mixmatch MH loop, side by side, on AntiBERTy (or Sapiens).

The baseline re-implements, from its description, the batched MH loop of mixmatch (Mireshghallah, Goyal
& Berg-Kirkpatrick, "Mix and Match", ACL 2022; github.com/mireshghallah/mixmatch, ``batched_MH``): per
step every chain proposes at one position from the MLM conditional (X masked there: 1 row), then the
energies of X and X' are recomputed from scratch with one masked copy per position each (2T rows), all
chains batched, full forward (LM head at every position, as ``model(input_ids).logits``): 2T+1 rows per
proposal. mhfast forwards T-1 rows for a proposal that changes the state and none otherwise. In bf16 both
loops run every model call under autocast and keep autocast's weight-cast cache alive over the whole run (the
baseline as if its loop were wrapped in one autocast context; mhfast through ``ModelRunner.session``), so
neither casts the fp32 weights per call (runs before 2026-11-24 08:00 cast them per call in both loops).

Design (per case T, chains C, dtype, start): same model, same start for both loops (``--starts``: random
residues, where most proposals change the state, mhfast's worst case; or a real antibody, where few do;
a greedy warm start is no use: there AntiBERTy almost never proposes a change and mhfast forwards nothing),
replicated over the chains; the same ``n`` proposal sites per chain (evenly spaced residues, a random order
per chain), single-site MH, raw energy, default options. What is timed:

* mixmatch: one sweep over the ``n`` sites, all of it (it has no setup: every step recomputes both
  energies from scratch), ``C * n`` proposals;
* mhfast: ``epochs=2`` over the same sites; the time from the end of epoch 1 to the end of epoch 2
  (``progress`` callback), also ``C * n`` proposals. Its initial energies and first sweep are thus
  *cancelled out* (excluded), not included: the table is the steady-state cost per proposal.
  Rows per proposal are ``SampleResult.rows_per_proposal`` (both epochs, initial energies excluded).

Runs alternate in one process (mixmatch, mhfast, mixmatch, mhfast, ...); the speed-up is the median of
the per-repeat ratios. The baseline forwards a step's rows in one batch (capped at 65536 tokens, as
mhfast's default was when this bench was written); mhfast runs with its default options (its sub-batch
budget is then sized from the model's width and the CPU's L2 cache: 2048 tokens for AntiBERTy in fp32 and 8192
in bf16 on a Xeon with 2 MiB of L2 and AMX, 1024 and 2048 on an EPYC with 1 MiB and no AMX). ``n`` is about
``--budget / T`` proposals per case (at least one per chain), so every case costs the baseline about the same
model work; the table gives the number. Also
measured in the same run: an achievable peak (a 2048^3 fp32 and a bf16 matmul before every case, the best
kept) and the model forward's FLOP rate in each loop as a fraction of it; and, with ``--batch-sweep``,
mhfast alone at T=32 and 16 chains for a few ``max_tokens_per_batch`` values.

    python3 bench/bench_mixmatch.py --batch-sweep       # T 16/32/64 x C 1/5/16, fp32 + bf16, both starts
    python3 bench/bench_mixmatch.py --lengths 16 --chains 1 5 --repeats 1 --no-write   # a few minutes
    python3 bench/bench_mixmatch.py --device cuda --model antiberty-random --starts random --no-write  # on a GPU

``--model sapiens-h`` runs both loops on the Sapiens heavy-chain model (a fairseq RoBERTa, 4 layers, d=128, through
mhfast.models.sapiens; the baseline's full forward is fairseq's ``model(rows)[0]``).
``--device cuda`` runs both loops' model calls on the GPU (timings between synchronizations); ``--model
antiberty-random`` is a randomly initialized BERT of AntiBERTy's shape, for machines without the antiberty package
(scripts/gpu_check.sh uses it: the package's weights do not travel to the GPU machine).

The section in RESULTS.md was made in parts on a busy machine (``--json`` saves after every case):
``--lengths 16 32 --json a.json``, ``--lengths 64 --starts random --json b.json``, two
``--lengths --batch-sweep 65536 4096 1088 --json c.json`` runs, then ``--render a.json b.json c.json d.json
--batch-sweep --note "..."`` (the note holds the reading of the numbers).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results_md  # noqa: E402

import mhfast  # noqa: E402
from mhfast.runtime import cpu_info, precision  # noqa: E402

START, END = "<!-- bench_mixmatch:start -->", "<!-- bench_mixmatch:end -->"
DEFAULT_MAX_TOKENS = 65536  # the baseline's batch cap: mixmatch forwards a step's rows in one batch
CPU_FEATURES = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")
GOALS = {"float32": 2.5, "bfloat16": 4.0}  # issue 14: at every T=32 size


# ---------------------------------------------------------------------------- the baseline
def full_logits(lm) -> "Callable[[torch.Tensor], torch.Tensor]":
    """The model's whole forward, the LM head at every position: rows Long[N, T] -> logits [N, T, V] (a
    transformers model's ``.logits``, a fairseq RoBERTa's first output)."""
    if hasattr(lm.model, "config"):
        return lambda rows: lm.model(input_ids=rows).logits
    return lambda rows: lm.model(rows)[0]


def _forward(model, rows: torch.Tensor, dtype: torch.dtype, max_tokens: int) -> torch.Tensor:
    """Full logits [N, T, V] of ``rows`` by ``model`` (:func:`full_logits`), in sub-batches of at most
    ``max_tokens`` tokens (as mhfast)."""
    step = max(1, max_tokens // rows.shape[1])
    with torch.no_grad(), torch.autocast(rows.device.type, dtype=dtype, enabled=dtype != torch.float32):
        return torch.cat([model(rows[s:s + step]).float() for s in range(0, len(rows), step)])


def _energies(model, x: torch.Tensor, positions: torch.Tensor, mask_id: int, dtype, max_tokens: int
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Raw and local energies (paper, 2.1 and 2.2) of the rows of ``x`` from scratch: one masked copy per energy
    position each, both energies from the same logits. ``(e_raw f64[N], e_local f64[N])``."""
    C, T = x.shape[0], positions.numel()
    rows = x.repeat_interleave(T, dim=0)
    idx, pos = torch.arange(C * T, device=x.device), positions.repeat(C)
    rows[idx, pos] = mask_id
    logits = _forward(model, rows, dtype, max_tokens)[idx, pos]
    raw = -logits.gather(1, x.repeat_interleave(T, dim=0)[idx, pos][:, None]).squeeze(1)
    local = raw + torch.logsumexp(logits, dim=1)  # -log_softmax at the target
    return raw.view(C, T).double().sum(1), local.view(C, T).double().sum(1)


#: ``on_sweep(sweep, x, energies)`` after each sweep: 0-based sweep, the chains' tokens Long[C, W] and their
#: energies f64[C, 2] (raw, local); both are the loop's own tensors (read them, do not keep them).
SweepHook = Callable[[int, torch.Tensor, torch.Tensor], None]


def mixmatch_loop(lm, start: torch.Tensor, positions: torch.Tensor, sites: torch.Tensor, dtype,
                  max_tokens: int = DEFAULT_MAX_TOKENS, seed: int = 0, energy: str = "raw", sweeps: int = 1,
                  on_sweep: SweepHook | None = None) -> dict:
    """``sweeps`` sweeps over the proposal ``sites`` (a fresh random order per chain and sweep) of the chains in
    the rows of ``start``, target exp(-E) with E the ``energy`` ("raw" or "local") over ``positions``: 2T+1 rows
    per proposal. Returns rows, proposals, acceptance (all sweeps) and the accepted count of each sweep;
    ``on_sweep`` sees the state after each sweep (bench/bench_ess.py traces it). Runs on ``lm``'s device
    (``start``, ``positions`` and ``sites`` are moved there); the sweeps' site orders come from a CPU generator,
    the proposals and MH uniforms from one on the device.

    Example:
        >>> mixmatch_loop(lm, start.repeat(5, 1), positions, sites[:2], torch.float32)  # doctest: +SKIP
        {'rows': 650, 'proposals': 10, 'acceptance': 0.6, 'accepted': [6]}
    """
    if energy not in ("raw", "local"):
        raise ValueError(f"energy: 'raw' or 'local', got {energy!r}")
    g = torch.Generator().manual_seed(seed)
    model, mask_id = full_logits(lm), lm.mask_id
    dev = lm.device
    g_dev = g if dev.type == "cpu" else torch.Generator(device=dev).manual_seed(seed)
    special = torch.zeros(lm.vocab_size, dtype=torch.bool, device=dev)
    special[list(lm.special_ids)] = True
    x, positions, sites = start.to(dev, copy=True), positions.to(dev), sites.to(dev)
    C = x.shape[0]
    ar = torch.arange(C, device=dev)
    energies = torch.full((C, 2), float("nan"), dtype=torch.float64, device=dev)  # every step sets them
    accepted: list[int] = []
    # An autocast context held open over the loop (disabled: it changes no op) keeps autocast's cache of weight
    # casts alive between the model calls, so in bf16 each fp32 weight is cast once per sweep, not once per call:
    # what wrapping the loop in autocast, as a user would, does; mhfast's runner.session() does the same.
    with torch.autocast(dev.type, enabled=False):
        for sweep in range(sweeps):
            order = torch.stack([torch.randperm(len(sites), generator=g) for _ in range(C)]).to(dev)
            accepted.append(sum(_mixmatch_step(model, x, energies, ar, sites[order[:, k]], special, mask_id,
                                               positions, dtype, max_tokens, g_dev, energy == "local")
                                for k in range(len(sites))))
            if on_sweep is not None:
                on_sweep(sweep, x, energies)
    proposals = C * len(sites) * sweeps
    return {"rows": proposals * (2 * len(positions) + 1), "proposals": proposals,
            "acceptance": sum(accepted) / proposals, "accepted": accepted}


def _mixmatch_step(model, x: torch.Tensor, energies: torch.Tensor, ar: torch.Tensor, t: torch.Tensor,
                   special: torch.Tensor, mask_id: int, positions: torch.Tensor, dtype, max_tokens: int,
                   g: torch.Generator, local: bool) -> int:
    """One step of every chain at its site ``t``: propose, both energies from scratch, accept (``x`` and its
    ``energies`` f64[C, 2] (raw, local) in place); the target's energy is the local one if ``local``."""
    C = x.shape[0]
    masked = x.clone()
    masked[ar, t] = mask_id
    logits = _forward(model, masked, dtype, max_tokens)[ar, t].masked_fill(special, -1e9)
    logq = torch.log_softmax(logits, 1)
    w_new = torch.multinomial(logq.exp(), 1, generator=g).squeeze(1)
    x_new = x.clone()
    x_new[ar, t] = w_new
    both = torch.stack(_energies(model, torch.cat([x, x_new]), positions, mask_id, dtype, max_tokens), 1)  # 1 batch
    e = both[:, 1 if local else 0]
    log_a = (e[:C] - e[C:]) + logq[ar, x[ar, t]].double() - logq[ar, w_new].double()
    acc = torch.log(torch.rand(C, generator=g, dtype=torch.float64, device=x.device)) < log_a
    x.copy_(torch.where(acc[:, None], x_new, x))
    energies.copy_(torch.where(acc[:, None], both[C:], both[:C]))
    return int(acc.sum())


# ---------------------------------------------------------------------------- mhfast, timed per epoch
def mhfast_run(lm, start: torch.Tensor, free: torch.Tensor, chains: int, dtype, max_tokens: int | None,
               capture: str = "none") -> dict:
    """mhfast.sample for 2 epochs over the ``free`` sites; times the last epoch only (progress callback).

    ``capture="cuda-graph"``: 3 epochs, so that the timed one only replays graphs (a graph is captured at
    the second step with its shape: with one site per chain that is the second epoch's first step).
    ``capture="compile"``: not a capture but ``compile=True`` (capture none); the first epoch compiles, the timed
    one runs the compiled layers (the compiling is not in the timed epoch).

    Example:
        >>> mhfast_run(lm, start, free, 5, torch.float32, 65536)["seconds"]  # doctest: +SKIP
        1.93
    """
    marks: list[tuple[float, int]] = []
    epochs = 3 if capture == "cuda-graph" else 2

    def progress(epoch: int, stats: dict) -> None:
        sync(lm)  # the epoch's kernels finished (a no-op on CPU)
        marks.append((time.perf_counter(), stats["model_rows"]))
    dev = lm.device
    r = mhfast.sample(lm, init=start.to(dev), free_positions=free.to(dev), chains=chains, epochs=epochs, burn_in=0,
                      seed=0, dtype=None if dtype == torch.float32 else dtype, max_tokens_per_batch=max_tokens,
                      progress=progress, capture="none" if capture == "compile" else capture,
                      compile=capture == "compile")
    (t1, rows1), (t2, rows2) = marks[-2:]
    return {"seconds": t2 - t1, "rows_timed": rows2 - rows1, "rows_per_proposal": r.rows_per_proposal,
            "proposals": r.proposals // epochs, "acceptance": float(r.acceptance_rate[-1]),
            "novel": float(r.novel_rate[-1])}


def sync(lm) -> None:
    """Wait for ``lm``'s device (CUDA kernels run asynchronously; nothing to wait for on CPU, or for a model without
    ``.device``, e.g. a tabular one)."""
    device = getattr(lm, "device", None)
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


# ---------------------------------------------------------------------------- the model
#: AntiBERTy's config.json (antiberty==0.1.3, trained_models/AntiBERTy_md_smooth) and vocab.txt, so that a model of
#: its exact shape can be built where the package (100 MB of weights) is not installed, e.g. the GPU machine.
ANTIBERTY_CONFIG = dict(vocab_size=25, hidden_size=512, num_hidden_layers=8, num_attention_heads=8,
                        intermediate_size=2048, hidden_act="gelu", max_position_embeddings=512, type_vocab_size=2,
                        layer_norm_eps=1e-12, pad_token_id=0, position_embedding_type="absolute")
ANTIBERTY_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"ACDEFGHIKLMNPQRSTVWY"]
MODELS = {"antiberty": "AntiBERTy (antiberty==0.1.3 through `mhfast.models.antiberty`; 8 layers, d=512, V=25)",
          "sapiens-h": "Sapiens, heavy chain (sapiens==1.0.5 through `mhfast.models.sapiens`: a fairseq RoBERTa, 4 "
                       "layers, d=128, V=25)",
          "antiberty-random": "a randomly initialized BERT of AntiBERTy's exact shape and vocabulary (8 layers, "
                              "d=512, V=25; seed 0): the same cost per row, but its conditionals are near uniform, "
                              "so nearly every proposal changes the state (mhfast's worst case) from any start"}


def load_model(name: str, device: str) -> "mhfast.models.antiberty.AntiBERTyMaskedLM":
    """The benchmark's model on ``device``: a key of :data:`MODELS`.

    Example:
        >>> load_model("antiberty-random", "cpu").vocab_size
        25
    """
    from mhfast.models.antiberty import AntiBERTyMaskedLM, load_antiberty
    if name == "sapiens-h":
        from mhfast.models.sapiens import load_sapiens
        return load_sapiens("H", device=device)
    if name == "antiberty":
        return load_antiberty(device=device)
    import transformers
    torch.manual_seed(0)
    model = transformers.BertForMaskedLM(transformers.BertConfig(**ANTIBERTY_CONFIG)).eval()
    return AntiBERTyMaskedLM(model, {t: i for i, t in enumerate(ANTIBERTY_VOCAB)}, device=device)


# ---------------------------------------------------------------------------- FLOPs and peak
def flops_per_row(lm, width: int, head_positions: int) -> float:
    """FLOPs of one BERT forward of a row of ``width`` tokens (2 per multiply-add): every weight matrix of
    the encoder once per token (2*params*tokens: Q, K, V, O, the two FFN matrices), QK^T and AV
    (4*width^2*d per layer), and the MLM head (transform d x d + decoder d x V) at ``head_positions``
    tokens. Biases, LayerNorm, softmax, GELU and embeddings are not counted."""
    d, f, L = model_shape(lm)
    V = lm.vocab_size
    per_token = L * (4 * d * d + 2 * d * f)
    return 2.0 * per_token * width + L * 4.0 * width * width * d + 2.0 * (d * d + d * V) * head_positions


def model_shape(lm) -> tuple[int, int, int]:
    """(d, feed-forward width, layers) of a BERT (transformers config) or a fairseq RoBERTa (its args)."""
    cfg = getattr(lm.model, "config", None)
    if cfg is not None:
        return cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    args = lm.model.args
    return args.encoder_embed_dim, args.encoder_ffn_embed_dim, args.encoder_layers


#: (d, feed-forward width, layers) of each model of MODELS, for the report's words (the FLOPs use the loaded model).
SHAPES = {"antiberty": (512, 2048, 8), "antiberty-random": (512, 2048, 8), "sapiens-h": (128, 256, 4)}


def flops_text(model: str) -> str:
    """How the report counts a row's FLOPs, with the numbers of ``model`` (a key of MODELS)."""
    d, f, L = SHAPES[model]
    weights = L * (4 * d * d + 2 * d * f) / 1e6
    return (f"2 x {weights:.2f}M encoder weights x W (Q, K, V, O and both FFN matrices of {L} layers) + {L} x 4 x "
            f"W^2 x {d} (QK^T and AV) + the MLM head (2 x ({d}^2 + {d} x 25))")


def matmul_peak(dtype: torch.dtype, device: str = "cpu", n: int = 2048, reps: int = 3) -> float:
    """Achievable GFLOP/s of one n x n x n matmul in ``dtype`` on ``device`` (best of ``reps``, after one warm-up;
    on CUDA 8192^3, each timed between two synchronizations)."""
    n = 8192 if torch.device(device).type == "cuda" else n
    a, b = torch.randn(n, n, device=device).to(dtype), torch.randn(n, n, device=device).to(dtype)
    wait = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    a @ b
    wait()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ b
        wait()
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n ** 3 / best / 1e9


def budgets_text(width: int = ANTIBERTY_CONFIG["hidden_size"], name: str = "AntiBERTy") -> str:
    """mhfast's default CPU sub-batches for a model of ``width`` on this machine, in words."""
    from mhfast.runtime.runner import cpu_max_tokens
    fp32, bf16 = (cpu_max_tokens(width, dt) for dt in (torch.float32, torch.bfloat16))
    return f"{fp32} tokens for {name} in fp32 and {bf16} in bf16"


def cpu_features() -> list[str]:
    """The vector/matrix extensions of :data:`CPU_FEATURES` this CPU reports in /proc/cpuinfo."""
    flags = cpu_info.flags()
    return [f for f in CPU_FEATURES if f in flags]


# ---------------------------------------------------------------------------- one case
PARENT = "EVQLVESGGGLVQPGRSLRLSCAASGFTFDDYAMHWVRQAPGKGLEWVSAITWNSGHIDYADSVEGRFTISRDNAKNSLYLQMNSLRAEDTAVYYCAK"
STARTS = {"random": "uniformly random residues (seeded): most proposals change the state, mhfast's worst case",
          "parent": "the first T residues of adalimumab's VH: a real antibody, few proposals change it"}


def make_start(lm, T: int, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The common start of a case, [CLS] + T residues + [SEP] as Long[1, T+2], and its energy positions (the
    residues; [CLS]/[SEP] are fixed). ``kind``: a key of :data:`STARTS`. (A greedy warm start is no use
    here: AntiBERTy's proposals there almost never differ from the state, so mhfast forwards nothing.)"""
    if kind == "parent":
        if T > len(PARENT):
            raise ValueError(f"T: the parent start has {len(PARENT)} residues, got T={T}")
        text = PARENT[:T]
    else:
        g = torch.Generator().manual_seed(T)
        text = "".join("ACDEFGHIKLMNPQRSTVWY"[i] for i in torch.randint(0, 20, (T,), generator=g).tolist())
    start = lm.encode(text)[None]
    return start, torch.arange(1, T + 1)


def evenly_spaced_sites(start: torch.Tensor, positions: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` proposal sites spread evenly over the energy ``positions`` of ``start`` (Long[1, W]), and the
    ``free_positions`` mask of mhfast.sample that frees exactly them: ``(sites Long[n], free Bool[1, W])``."""
    sites = positions[torch.linspace(0, positions.numel() - 1, n).round().long()]
    free = torch.zeros_like(start, dtype=torch.bool)
    free[0, sites] = True
    return sites, free


def one_case(lm, starts: dict[str, tuple[torch.Tensor, torch.Tensor]], C: int, n: int, dtype, repeats: int,
             max_tokens: int = DEFAULT_MAX_TOKENS, captures: tuple[str, ...] = ("none",)) -> list[dict]:
    """``repeats`` rounds of alternating runs (per start: mixmatch, then mhfast with each of ``captures``) over the
    same ``n`` sites per chain; one result per start and capture, each paired with the mixmatch run of its round."""
    cases = [(kind, cap) for kind in starts for cap in captures]
    times: dict[tuple[str, str], tuple[list[float], list[float]]] = {c: ([], []) for c in cases}
    last: dict[tuple[str, str], tuple[dict, dict]] = {}
    for _ in range(repeats):
        for kind, (start, positions) in starts.items():
            sites, free = evenly_spaced_sites(start, positions, n)
            sync(lm)
            t0 = time.perf_counter()
            base = mixmatch_loop(lm, start.repeat(C, 1), positions, sites, dtype, max_tokens)
            sync(lm)
            base_s = time.perf_counter() - t0
            for cap in captures:
                mh = mhfast_run(lm, start, free, C, dtype, None, cap)  # mhfast: default options (but capture)
                times[kind, cap][0].append(base_s)
                times[kind, cap][1].append(mh["seconds"])
                if not mh["proposals"] == base["proposals"] == C * n:
                    raise RuntimeError(f"proposal counts differ: mhfast {mh['proposals']}, mixmatch "
                                       f"{base['proposals']}")
                last[kind, cap] = base, mh
    return [{**summarize(lm, kind, starts[kind][0], C, n, dtype, *times[kind, cap], *last[kind, cap]),
             "capture": cap} for kind, cap in cases]


def summarize(lm, kind: str, start: torch.Tensor, C: int, n: int, dtype, base_s: list[float],
              mh_s: list[float], base: dict, mh: dict) -> dict:
    """One table row from the per-repeat times (medians) and the last run's counts (all runs are identical
    but for time: fixed seeds)."""
    width = start.shape[1]
    T, P = width - 2, C * n
    b, m = statistics.median(base_s), statistics.median(mh_s)
    row = {"start": kind, "T": T, "C": C, "n": n, "P": P, "dtype": str(dtype).replace("torch.", ""),
            "base_rows": base["rows"] / P, "mh_rows": mh["rows_per_proposal"], "mh_rows_timed": mh["rows_timed"] / P,
            "base_acc": base["acceptance"], "mh_acc": mh["acceptance"], "mh_novel": mh["novel"],
            "base_ms": 1e3 * b / P, "mh_ms": 1e3 * m / P, "ratios": [x / max(y, 1e-9) for x, y in zip(base_s, mh_s)],
            "base_gflops": base["rows"] * flops_per_row(lm, width, width) / b / 1e9,
            "mh_gflops": mh["rows_timed"] * flops_per_row(lm, width, 1) / max(m, 1e-9) / 1e9,
            "base_ms_row": 1e3 * b / base["rows"],
            "mh_ms_row": 1e3 * m / mh["rows_timed"] if mh["rows_timed"] else float("nan")}
    return with_speedup(row)


def with_speedup(row: dict) -> dict:
    """``row`` with its speed-up: the median of the per-repeat ratios, each mixmatch run against the mhfast run
    right after it (paired, so a change of machine load between repeats cancels out)."""
    return {**row, "speedup": statistics.median(row["ratios"])}


def batch_sweep(lm, T: int, C: int, n: int, values: list[int], dtypes: list[torch.dtype], repeats: int
                ) -> list[dict]:
    """mhfast alone at (T, C): second-epoch ms per proposal for each ``max_tokens_per_batch`` value
    (round-robin over the values, median of ``repeats``)."""
    start, positions = make_start(lm, T, "random")
    _, free = evenly_spaced_sites(start, positions, n)
    out = []
    for dtype in dtypes:
        times: dict[int, list[float]] = {v: [] for v in values}
        for _ in range(repeats):
            for v in values:
                times[v].append(mhfast_run(lm, start, free, C, dtype, v)["seconds"])
        for v in values:
            out.append({"dtype": str(dtype).replace("torch.", ""), "max_tokens": v, "rows_per_forward":
                        max(1, v // start.shape[1]), "ms": 1e3 * statistics.median(times[v]) / (C * n),
                        "all_ms": [round(1e3 * t / (C * n), 1) for t in times[v]]})
            print(out[-1], flush=True)
    return out


# ---------------------------------------------------------------------------- the report
def _ms(x: float) -> str:
    """Milliseconds to three significant digits: a CPU proposal takes tens of ms, a GPU one a fraction of one
    (whole numbers printed the GPU's as 0 and 1)."""
    return f"{x:.3g}"


def _rows_ratio(r: dict) -> float:
    """mixmatch rows / mhfast rows per timed proposal: the speed-up if both cost the same per row."""
    return r["base_rows"] / max(r["mh_rows_timed"], 1e-9)


def _goal(r: dict, fp32_base: dict | None) -> str:
    """Whether a T=32 row meets its issue-14 goal, and why not (model-bound or overhead)."""
    goal, ratio = GOALS[r["dtype"]], _rows_ratio(r)
    text = f"goal >= {goal:g}x: " + ("met" if r["speedup"] >= goal else "MISSED")
    if r["speedup"] < goal:
        if r["speedup"] >= 0.8 * ratio:
            changed = r["mh_rows_timed"] / (r["T"] - 1)
            per_row = r["base_ms_row"] / r["mh_ms_row"]
            text += (f" (model-bound: speed-up = rows ratio x per-row cost ratio = {ratio:.2f} x {per_row:.2f}; the "
                     f"rows ratio (2T+1)/rows = {r['base_rows']:.0f}/{r['mh_rows_timed']:.1f} is fixed by exact MH: "
                     f"mhfast forwards T-1 rows for each proposal that changes the state, {changed:.0%} of them from "
                     f"this start, so at most (2T+1)/(T-1) = {r['base_rows'] / (r['T'] - 1):.2f}x when all change; "
                     "bf16 speeds up both loops' rows alike)")
        else:
            text += (f" (overhead: rows ratio {ratio:.2f}x, but mhfast's ms per row is "
                     f"{r['mh_ms_row'] / r['base_ms_row']:.2f}x the baseline's)")
    if fp32_base is not None:
        cross = fp32_base["base_ms"] / r["mh_ms"]
        text += f"; against fp32 mixmatch: {cross:.1f}x" if cross < 100 else f"; against fp32 mixmatch: {cross:.0f}x"
    return text


LABELS = {"float32": "fp32", "bfloat16": "bf16"}  #: the report's names of the peaks' dtypes


def table(rows: list[dict], peaks: dict[str, float]) -> list[str]:
    """The markdown table, one line per (start, dtype, T, chains)."""
    lines = ["| start | dtype | T | chains | proposals timed (C x n) | mixmatch rows / proposal "
             "| mhfast rows / proposal (all; timed) | mhfast acceptance, novel | mixmatch ms / proposal "
             "| mhfast ms / proposal | speed-up (each repeat) | rows ratio | ms / row mixmatch, mhfast "
             "| model GFLOP/s mixmatch, mhfast (% of peak) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    order = {k: i for i, k in enumerate(STARTS)}
    for r in sorted(rows, key=lambda r: (order[r["start"]], r.get("capture", "none") != "none", r["dtype"] != "float32",
                                         r["T"], r["C"])):
        peak = peaks[r["dtype"]]
        start = r["start"] if r.get("capture", "none") == "none" else f"{r['start']}, {variant(r['capture'])}"
        reps = ", ".join(f"{x:.2f}" if x < 100 else f"{x:.0f}" for x in r["ratios"])
        if not r["mh_rows_timed"]:  # no proposal changed the state: mhfast's own bookkeeping only
            lines.append(
                f"| {start} | {r['dtype']} | {r['T']} | {r['C']} | {r['P']} ({r['C']} x {r['n']}) | "
                f"{r['base_rows']:.0f} | {r['mh_rows']:.1f}; 0 | {r['mh_acc']:.2f}, {r['mh_novel']:.2f} | "
                f"{_ms(r['base_ms'])} | {r['mh_ms']:.2f} | **{r['speedup']:.0f}x** (no rows forwarded) | inf | "
                f"{_ms(r['base_ms_row'])}, - | {r['base_gflops']:.0f} ({r['base_gflops'] / peak:.0%}), - |")
            continue
        lines.append(
            f"| {start} | {r['dtype']} | {r['T']} | {r['C']} | {r['P']} ({r['C']} x {r['n']}) | "
            f"{r['base_rows']:.0f} | {r['mh_rows']:.1f}; {r['mh_rows_timed']:.1f} | {r['mh_acc']:.2f}, "
            f"{r['mh_novel']:.2f} | {_ms(r['base_ms'])} | {_ms(r['mh_ms'])} | **{r['speedup']:.2f}x** ({reps}) | "
            f"{_rows_ratio(r):.2f}x | {_ms(r['base_ms_row'])}, {_ms(r['mh_ms_row'])} | {r['base_gflops']:.0f} "
            f"({r['base_gflops'] / peak:.0%}), {r['mh_gflops']:.0f} ({r['mh_gflops'] / peak:.0%}) |")
    return lines


def variant(capture: str) -> str:
    """How a table names an mhfast variant of ``--captures``: capture=static / cuda-graph, or compile=True."""
    return "compile=True" if capture == "compile" else f"capture={capture}"


def hardware(setup: dict) -> str:
    """What ran the models: the CPU's extensions, or the GPU (``setup``: device, gpu, model of the run)."""
    if setup.get("device", "cpu") == "cuda":
        return (f"Models on the GPU: {setup.get('gpu', 'a CUDA GPU')} (bf16 on its tensor cores); "
                "the samplers' host side on the CPU above.")
    feats = cpu_features()
    bf16 = "native bf16" if precision.native(torch.bfloat16, torch.device("cpu")) else "NO native bf16"
    return (f"CPU extensions (from /proc/cpuinfo): {', '.join(feats) or 'none of ' + ', '.join(CPU_FEATURES)} "
            f"({bf16}). No GPU was measured (CPU-only machine).")


def report(args, rows: list[dict], peaks: dict[str, float], sweep: list[dict], load: tuple[float, float],
           minutes: float, machine: str, setup: dict) -> str:
    """The RESULTS.md section: setup, machine, the table, the goals, the batch-size sweep, what is not measured."""
    now = f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M}"
    cuda = setup.get("device", "cpu") == "cuda"
    lines = [
        (f"Run {now} UTC, {minutes:.0f} min. " if not args.render else
         f"Report written {now} UTC from {len(args.render)} runs (parts of the grid, then the sweeps, one after the "
         f"other) of {minutes:.0f} min in all. ") +
        f"Machine: {machine}; load average {load[0]:.2f} at the start. {hardware(setup)}", "",
        f"{MODELS[setup.get('model', 'antiberty')]}, single-site MH, "
        f"raw energy, default options; {args.threads} torch CPU thread(s). Starts: "
        + "; ".join(f"{k} = {STARTS[k]}" for k in args.starts) + ". Per case and start: the same start for "
        "both loops (replicated over the chains), the same n evenly spaced sites per chain, C x n proposals timed "
        "for each loop: mixmatch's whole sweep (no setup), mhfast's second epoch of `epochs=2` (the third of "
        "3 with capture=cuda-graph, which captures its graphs in the first two) "
        "(its initial energies and first sweep are cancelled "
        "out, i.e. excluded, via the `progress` callback). n is about "
        f"{args.budget}/T proposals per case (>= 1 per chain), so the largest cases use few proposals. Median of "
        f"{args.repeats} alternating runs (per start: mixmatch, mhfast; then the next start and repeat); speed-up = "
        "the median of the per-repeat ratios (each in brackets). mixmatch forwards a step's rows in one batch "
        f"(<= {DEFAULT_MAX_TOKENS} tokens), mhfast with its default options (" + (
            "on a GPU its sub-batches are 65536 tokens" if cuda else "on CPU its sub-batches, sized from the model's "
            f"width and this CPU's {cpu_info.l2_bytes() >> 10} KiB of L2 per core, are "
            + ("65536 tokens for Sapiens (its width is not read from a fairseq model: the default of models "
               "without one)" if setup.get("model") == "sapiens-h" else budgets_text()))
        + " (mhfast.runtime.runner."
        "default_max_tokens), and forward='fast' runs the last layer only at the masked position, so "
        "its counted FLOPs, those of full rows, overstate its rate by up to ~10%). mhfast rows / proposal = "
        "`SampleResult.rows_per_proposal` (T-1 per proposal that changes the state, 0 otherwise); mixmatch 2T+1.", "",
        ("Peak (one 8192^3 matmul on the GPU, " if cuda else f"Peak (one 2048^3 matmul, {args.threads} thread(s), ")
        + "best of 3 before each case of this run): "
        + ", ".join(f"{LABELS[k]} {v:.0f} GFLOP/s" for k, v in peaks.items())
        + ". Model FLOPs counted per row of W = T+2 tokens as "
        + flops_text(setup.get("model", "antiberty")) +
        " at W positions (mixmatch's full logits) or at one "
        "(mhfast); biases, LayerNorm, softmax, GELU not counted. GFLOP/s = counted FLOPs / the loop's whole time "
        "(the sampler's own work included).", ""]
    lines += table(rows, peaks)
    key = lambda r: (r["start"], r.get("capture", "none"), r["T"], r["C"])  # noqa: E731
    fp32 = {key(r): r for r in rows if r["dtype"] == "float32"}
    goals = [f"- {r['start']} start"
             + (f" ({variant(r['capture'])})" if r.get("capture", "none") != "none" else "")
             + f", T={r['T']}, C={r['C']}, {r['dtype']}: "
             + (f"{r['speedup']:.2f}x, " if r["mh_rows_timed"] else f"{r['speedup']:.0f}x (no rows forwarded), ")
             + _goal(r, fp32.get(key(r)) if r["dtype"] != "float32" else None)
             for r in rows if r["T"] == 32]
    if goals:
        lines += ["", "Issue-14 goals (reported, not asserted): >= 2.5x at every T=32 size in fp32; >= 4x with "
                  "bf16 where the hardware has native bf16 (same-dtype comparison; also given against fp32 mixmatch):",
                  ""] + goals
    if sweep:
        lines += ["", f"mhfast alone at T={args.sweep_T}, {args.sweep_chains} chains, random start, second epoch, "
                  "ms per proposal against `max_tokens_per_batch` (median of the runs listed; round-robin over "
                  "the values):",
                  "", "| dtype | max_tokens_per_batch | rows per forward | ms / proposal | vs 65536 | runs |",
                  "|---|---|---|---|---|---|"]
        ref = {s["dtype"]: s["ms"] for s in sweep if s["max_tokens"] == DEFAULT_MAX_TOKENS}
        for s in sweep:
            rel = f"{ref[s['dtype']] / s['ms']:.2f}x" if s["dtype"] in ref else "-"
            lines.append(f"| {s['dtype']} | {s['max_tokens']} | {s['rows_per_forward']} | {s['ms']:.0f} | {rel} | "
                         f"{', '.join(map(str, s['all_ms']))} |")
    if args.note:
        lines += ["", args.note]
    lines += ["", "Not measured: " + ("the CPU (other runs); " if cuda else "GPU (none here); more threads; ")
              + "other models; the mixmatch code itself (this is a "
              "re-implementation of its loop from the paper and repository description)."]
    return "\n".join(lines)


def proposals_per_chain(T: int, C: int, budget: int) -> int:
    """n: about ``budget / T`` proposals per case, at least one per chain, at most T (one sweep)."""
    return max(1, min(T, round(budget / T / C)))


def run_grid(args, lm, save) -> tuple[list[dict], dict[str, float], list[dict]]:
    """Peaks, every case of the grid (each saved as it finishes), then the optional batch-size sweep."""
    # The achievable peak is re-measured before every case and the best kept: on a shared machine one
    # measurement can land in a busy moment (and then the model would seem to beat the "peak").
    # only the dtypes the run measures: a bf16 matmul has no fast path on a CPU without AVX512-BF16/AMX (2048^3 took
    # 63 s on an AVX2-only AMD EPYC, against 0.26 s in fp32), so a float32-only run must not pay for its peak
    peaks = {name: 0.0 for name in ("float32", "bfloat16") if name in args.dtypes}
    print("features", cpu_features() if args.device == "cpu" else torch.cuda.get_device_name(), flush=True)
    rows: list[dict] = []
    sweep: list[dict] = []
    for T in args.lengths:
        starts = {kind: make_start(lm, T, kind) for kind in args.starts}
        for C in args.chains:
            for name in args.dtypes:
                peaks = {k: max(v, matmul_peak(precision.NAMES[k], args.device)) for k, v in peaks.items()}
                print("peaks GFLOP/s so far", peaks, flush=True)
                n = proposals_per_chain(T, C, args.budget)
                for r in one_case(lm, starts, C, n, precision.NAMES[name], args.repeats, captures=tuple(args.captures)):
                    rows.append(r)
                    print(r, flush=True)
                save(rows, peaks, sweep)
    if args.batch_sweep is not None:
        values = args.batch_sweep or [DEFAULT_MAX_TOKENS, 4096, 1088, 544]
        sweep = batch_sweep(lm, args.sweep_T, args.sweep_chains, args.sweep_n, values,
                            [precision.NAMES[d] for d in args.dtypes], args.sweep_repeats)
        save(rows, peaks, sweep)
    return rows, peaks, sweep


def merge(parts: list[dict]) -> tuple[list[dict], dict[str, float], list[dict], list[float], float, str, dict]:
    """Several --json files (parts of one grid, run one after the other) as one run: rows and sweeps
    concatenated, the best peaks, the first load, the summed minutes, the last machine line and setup (device,
    GPU and model: the parts must share them; files written before the GPU option: CPU, AntiBERTy)."""
    setups = [{"device": "cpu", "model": "antiberty", **part.get("setup", {})} for part in parts]
    if any(s != setups[0] for s in setups):
        raise SystemExit(f"--render: the parts ran on different setups: {setups}")
    rows = [with_speedup(r) for part in parts for r in part["rows"]]
    sweep: dict[tuple[str, int], dict] = {}  # the same value measured in several parts: all runs, one median
    for s in (s for part in parts for s in part["sweep"]):
        old = sweep.setdefault((s["dtype"], s["max_tokens"]), {**s, "all_ms": []})
        old["all_ms"] = old["all_ms"] + s["all_ms"]
        old["ms"] = statistics.median(old["all_ms"])
    names = [k for k in ("float32", "bfloat16") if any(k in part["peaks"] for part in parts)]
    peaks = {k: max(part["peaks"].get(k, 0.0) for part in parts) for k in names}
    return (rows, peaks, list(sweep.values()), parts[0]["load"], sum(part["minutes"] for part in parts),
            parts[-1]["machine"], setups[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lengths", type=int, nargs="*", default=[16, 32, 64], help="none: no grid (--batch-sweep only)")
    p.add_argument("--chains", type=int, nargs="+", default=[1, 5, 16])
    p.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16"])
    p.add_argument("--starts", nargs="+", default=list(STARTS), choices=list(STARTS))
    p.add_argument("--budget", type=int, default=384, help="proposals per case ~ budget / T")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where both loops run the model")
    p.add_argument("--captures", nargs="+", default=["none"], choices=["none", "static", "cuda-graph", "compile"],
                   help="mhfast's capture option: each one timed against the same mixmatch run of a round; "
                        "'compile': compile=True instead (capture none)")
    p.add_argument("--model", default="antiberty", choices=list(MODELS),
                   help="antiberty-random: AntiBERTy's shape with random weights (no antiberty package needed)")
    p.add_argument("--batch-sweep", type=int, nargs="*", default=None, metavar="TOKENS",
                   help="also time mhfast alone for these max_tokens_per_batch values (none given: a default set)")
    p.add_argument("--sweep-T", type=int, default=32)
    p.add_argument("--sweep-chains", type=int, default=16)
    p.add_argument("--sweep-n", type=int, default=2, help="proposals per chain in the batch sweep")
    p.add_argument("--sweep-repeats", type=int, default=2)
    p.add_argument("--json", type=Path, default=None, help="save the raw results here (after every case)")
    p.add_argument("--render", type=Path, nargs="+", default=None,
                   help="only rebuild the report from --json files (of runs of parts of the grid, merged in order)")
    p.add_argument("--note", default="", help="a sentence added to the report (e.g. what a part of the grid left out)")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    t_start, load = time.perf_counter(), os.getloadavg()
    if args.render:
        rows, peaks, sweep, load, minutes, machine, setup = merge([json.loads(f.read_text()) for f in args.render])
    else:
        if args.device == "cuda" and not torch.cuda.is_available():
            p.error("--device cuda: no CUDA device is available")
        setup = {"device": args.device, "model": args.model}
        if args.device == "cuda":
            setup["gpu"] = torch.cuda.get_device_name()

        def save(rows: list[dict], peaks: dict, sweep: list[dict]) -> None:
            if args.json is not None:
                args.json.write_text(json.dumps({"rows": rows, "peaks": peaks, "sweep": sweep, "load": load,
                                                 "minutes": (time.perf_counter() - t_start) / 60,
                                                 "machine": results_md.machine_description(), "setup": setup}))
        rows, peaks, sweep = run_grid(args, load_model(args.model, args.device), save)
        minutes, machine = (time.perf_counter() - t_start) / 60, results_md.machine_description()
    text = report(args, rows, peaks, sweep, load, minutes, machine, setup)
    print(text)
    if not args.no_write:
        model = setup.get("model", "antiberty")
        if model == "sapiens-h":  # a section of its own: the AntiBERTy section stays
            results_md.write_section(START.replace(":", "_sapiens:"), END.replace(":", "_sapiens:"),
                                     "## mhfast vs the mixmatch MH loop on Sapiens (bench/bench_mixmatch.py --model "
                                     "sapiens-h)\n\n" + text)
        else:
            results_md.write_section(START, END, "## mhfast vs the mixmatch MH loop (bench/bench_mixmatch.py)\n\n"
                                     + text)


if __name__ == "__main__":
    main()
