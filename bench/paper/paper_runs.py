"""One sampler configuration of the paper's experiments, run over several seeds, kept per sentence.

:func:`run_sampler` calls :func:`mhfast.sample` once per seed (``record="epoch"``) and keeps what the
statistics of ``bench/paper/paper_stats.py`` need: sacreBLEU's per-sentence BLEU and chrF statistics of every
chain's end-of-epoch state after burn-in (one group per seed, epoch and chain: averaging the groups' corpus
scores is the paper's "averaged statistics over chains"), of each seed's lowest-energy state (best-of), and
the raw / local energy of every distinct end-of-epoch state, recomputed here by scoring its masked copies
(:func:`score_energies`), so that energies can be averaged per sentence and correlated with quality.

Example (``setup`` and ``args`` as in paper_experiments.py)::

    >>> run = run_sampler(setup, args, "MH raw", sampler="mh", energy="raw")     # doctest: +SKIP
    >>> run.bleu_ci().text(), run.n                                               # doctest: +SKIP
    ('22.91 [15.02, 30.11]', 8)
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import subprocess
import time
import types
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

import mhfast
import paper_stats as ps
from mhfast.sampler.state import ChainCounts


@dataclasses.dataclass
class Run:
    """Statistics of one sampler configuration (n sentences, G = seeds x post-burn-in epochs x chains groups)."""

    label: str
    seeds: list[int]
    burn_in: int
    chains: int
    bleu: list[float]              #: per post-burn-in epoch: mean over seeds and chains of corpus BLEU (plots)
    e_local: list[float]           #: per epoch (ALL epochs), mean over seeds (the sampler's statistics)
    e_raw: list[float]
    acceptance: list[float]
    novel: list[float]
    target_temperature: list[float]
    bleu_stats: np.ndarray         #: float64[G, n, k] sacreBLEU BLEU statistics per group and sentence
    chrf_stats: np.ndarray         #: float64[G, n, k'] the same for chrF
    best_stats: np.ndarray         #: float64[seeds, n, k] BLEU statistics of each seed's best_tokens
    seed_bleu: list[float]         #: per seed: mean over its chains and epochs of corpus BLEU
    sent_e_local: np.ndarray       #: float64[n] per sentence: mean E_local of its end-of-epoch states
    sent_e_raw: np.ndarray
    candidates: list[dict[tuple, tuple[float, float, float]]]  #: per sentence: ids -> (E_raw, E_local, chrF)
    seconds: float
    #: float64[n] per sentence: accepted (novel) proposals / proposals after burn-in, over its chains and seeds
    #: (None for runs cached before SampleResult had per-chain counts)
    sent_acceptance: np.ndarray | None = None
    sent_novel: np.ndarray | None = None

    def post(self, xs: list[float]) -> list[float]:
        return xs[self.burn_in:]

    @property
    def n(self) -> int:
        return self.bleu_stats.shape[1]

    @property
    def epochs_after_burn_in(self) -> int:
        return self.bleu_stats.shape[0] // (len(self.seeds) * self.chains)

    @functools.cache
    def bleu_ci(self) -> ps.Estimate:
        """The paper's BLEU: mean over seeds, chains and post-burn-in epochs of corpus BLEU, CI over sentences."""
        return ps.averaged_score(self.bleu_stats, "bleu")

    @functools.cache
    def best_ci(self) -> ps.Estimate:
        """Best-of BLEU: each source's lowest-energy state after burn-in (mean over seeds)."""
        return ps.averaged_score(self.best_stats, "bleu")

    @functools.cache
    def e_local_ci(self) -> ps.Estimate:
        return ps.mean_ci(self.sent_e_local)

    def sent_rate(self, which: str) -> np.ndarray | None:
        """Each sentence's post-burn-in ``which`` ("acceptance" / "novel") rate; None without per-sentence counts."""
        return self.sent_acceptance if which == "acceptance" else self.sent_novel

    def rate_ci(self, which: str) -> ps.Estimate | None:
        """Mean over sentences of :meth:`sent_rate`, bootstrap CI over sentences; None without per-sentence counts."""
        values = self.sent_rate(which)
        return None if values is None else ps.mean_ci(values)

    @property
    def avg_acceptance(self) -> float:
        return float(np.mean(self.post(self.acceptance)))

    @property
    def avg_novel(self) -> float:
        return float(np.mean(self.post(self.novel)))

    def seed_spread(self) -> str:
        """Each seed's BLEU and their range, e.g. ``'seed 0: 22.9, seed 1: 21.7 (range 1.2)'``."""
        parts = ", ".join(f"seed {s}: {b:.2f}" for s, b in zip(self.seeds, self.seed_bleu))
        return parts + (f" (range {max(self.seed_bleu) - min(self.seed_bleu):.2f})" if len(self.seeds) > 1 else "")

    __hash__ = object.__hash__  # functools.cache on methods: identity hashing (a Run is never mutated)


@torch.no_grad()
def score_energies(model: Any, context: Any, rows: torch.Tensor, source: int, chunk: int = 256
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(E_raw, E_local) of each row of ``rows`` (Long[N, T], ``[bos] ... [eos]`` of ONE source, unpadded):
    the sum over its ordinary positions of -logit / -log softmax of the token at its masked copy (section 2)."""
    V = int(model.vocab_size)
    special = torch.zeros(V, dtype=torch.bool)
    special[[int(i) for i in model.special_ids if 0 <= int(i) < V]] = True
    seq, pos = (~special[rows]).nonzero(as_tuple=True)
    copies = rows[seq].clone()
    copies[torch.arange(seq.numel()), pos] = int(model.mask_id)
    raw, local = torch.zeros(rows.shape[0], dtype=torch.float64), torch.zeros(rows.shape[0], dtype=torch.float64)
    for s in range(0, seq.numel(), chunk):
        sl = slice(s, s + chunk)
        ctx_index = torch.full((copies[sl].shape[0],), source, dtype=torch.long)
        logits = model.masked_logits(copies[sl], pos[sl], context, ctx_index).float().cpu()
        target = logits.gather(1, rows[seq[sl], pos[sl]][:, None]).squeeze(1)
        logp = target - torch.logsumexp(logits, dim=1)
        raw.index_add_(0, seq[sl], -target.double())
        local.index_add_(0, seq[sl], -logp.double())
    return raw.numpy(), local.numpy()


ROOT = Path(__file__).resolve().parents[2]
#: What a cached run keeps of its SampleResult (all that the statistics read).
#: (from the cache, computed) counts of the (configuration, seed) runs of this process, for the report.
CACHE_COUNTS = {"cached": 0, "computed": 0}
COUNTS = ChainCounts.FIELDS  #: Long[E, B, C] per-chain counts (sources on dim 1)
KEPT = ("history", "lengths", "best_tokens", "e_local", "e_raw", "acceptance_rate", "novel_rate",
        "target_temperature") + COUNTS


def git(*args: str) -> str:
    """``git -C ROOT args`` -> its stripped stdout (OSError / CalledProcessError when git cannot answer)."""
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout.strip()


@functools.cache
def code_fingerprint() -> str | None:
    """Git tree ids of ``mhfast/`` and ``csrc/`` (the code that decides the chains), or None when either has
    uncommitted changes or git is unavailable: then nothing is cached, since the key could not name the code."""
    try:
        if git("status", "--porcelain", "--", "mhfast", "csrc"):
            return None
        return git("rev-parse", "HEAD:mhfast") + ":" + git("rev-parse", "HEAD:csrc")
    except (OSError, subprocess.CalledProcessError):
        return None


@functools.cache
def _file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def options_key(kwargs: dict) -> str:
    """The sampler options of a run as they enter its cache key: those left at mhfast.sample's defaults are
    dropped, so that one configuration spelled two ways (Table 1's proposal temperature 1.0, Table 2's top_p
    1.0 and Table 3's single-site reference are the same run) shares one cache entry.

    >>> options_key({"proposal_temperature": 1.0, "energy": "local"}) == options_key({"energy": "local"})
    True
    >>> options_key({"proposal_temperature": 0.8}) == options_key({})
    False
    """
    from mhfast.sampler.options import OPTIONS

    kept = {k: v for k, v in kwargs.items() if not (k in OPTIONS and type(v) is type(OPTIONS[k].default)
                                                     and v == OPTIONS[k].default)}
    return repr(sorted(kept.items()))


def cache_key(setup: Any, args: Any, seed: int, kwargs: dict, chunk: list[int] | None = None) -> str | None:
    """The key of one (configuration, seed) run, or of one chunk of its sources (``chunk``: their indices): code,
    model file, sources, sampler options, torch and threads. None (no caching) when the code has uncommitted
    changes or no model file is named."""
    code, model_file = code_fingerprint(), getattr(args, "model", None)
    if setup is None or code is None or model_file is None or not Path(model_file).is_file():
        return None
    h = hashlib.sha256()
    for src in (setup.sources if chunk is None else [setup.sources[i] for i in chunk]):
        h.update(src.numpy().tobytes() + b"|")
    parts = [code, _file_sha256(str(model_file)), h.hexdigest(), options_key(kwargs), str(seed),
             str(args.chains), str(args.epochs), str(args.burn_in), str(args.device), torch.__version__,
             str(torch.get_num_threads())] + ([] if chunk is None else [f"chunk {chunk}"])
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def _chunks(n: int, size: int) -> list[list[int] | None]:
    """Source indices per sample() call: None = all at once (``size`` 0 or >= n), else runs of ``size``.

    >>> _chunks(5, 0), _chunks(5, 2)
    ([None], [[0, 1], [2, 3], [4]])
    """
    if size <= 0 or size >= n:
        return [None]
    return [list(range(i, min(n, i + size))) for i in range(0, n, size)]


def _sample_one(setup: Any, args: Any, seed: int, kwargs: dict, chunk: list[int] | None) -> tuple[dict, float, bool]:
    """``(kept fields, seconds, from_cache)`` of one sample() call over the sources ``chunk`` (None: all); the
    chunk's sources keep their global input ids, so their chains are those of the whole run (same RNG
    streams). Stored in ``args.cache`` once finished (atomically), read back when there."""
    folder = getattr(args, "cache", None)
    key = cache_key(setup, args, seed, kwargs, chunk) if folder else None
    path = Path(folder) / f"{key}.pt" if key else None
    if path is not None and path.is_file():
        saved = torch.load(path, weights_only=True)
        return saved["fields"], float(saved["seconds"]), True
    start = time.perf_counter()
    sources = setup.sources if chunk is None else [setup.sources[i] for i in chunk]
    res = mhfast.sample(setup.model, source=sources, input_ids=chunk, length_beam=1, chains=args.chains,
                        epochs=args.epochs, burn_in=args.burn_in, seed=seed, record="epoch", **kwargs)
    fields = {name: getattr(res, name).detach().cpu() for name in KEPT}
    fields["proposals"] = torch.tensor(res.proposals)
    seconds = time.perf_counter() - start
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        torch.save({"fields": fields, "seconds": seconds}, tmp)
        os.replace(tmp, path)  # atomic: a run killed while saving leaves no half-written entry
    return fields, seconds, False


def _pad_cat(parts: list[torch.Tensor], dim: int, value: int) -> torch.Tensor:
    """Concatenate along dim 0 (sources) tensors whose last dim (T) differs, right-padded with ``value``."""
    T = max(t.shape[-1] for t in parts)
    parts = [torch.nn.functional.pad(t, (0, T - t.shape[-1]), value=value) for t in parts]
    return torch.cat(parts, dim=dim)


def _combine(parts: list[dict], pad_id: int) -> dict:
    """One run's fields from its chunks': sources concatenated; per-epoch means weighted by each chunk's
    chains (energies) and proposals (rates)."""
    if len(parts) == 1:
        return parts[0]
    chains = torch.tensor([float(p["history"].shape[1] * p["history"].shape[2]) for p in parts])
    props = torch.tensor([float(p["proposals"]) for p in parts])
    mean = lambda name, w: (torch.stack([p[name].double() for p in parts]) * (w / w.sum())[:, None]).sum(0).float()  # noqa: E731
    counts = {k: torch.cat([p[k] for p in parts], dim=1) for k in COUNTS if all(k in p for p in parts)}
    return {**counts, "history": _pad_cat([p["history"] for p in parts], 1, pad_id),
            "lengths": torch.cat([p["lengths"] for p in parts]),
            "best_tokens": _pad_cat([p["best_tokens"] for p in parts], 0, pad_id),
            "e_local": mean("e_local", chains), "e_raw": mean("e_raw", chains),
            "acceptance_rate": mean("acceptance_rate", props), "novel_rate": mean("novel_rate", props),
            "target_temperature": parts[0]["target_temperature"], "proposals": props.sum()}


def _sample_cached(setup: Any, args: Any, seed: int, kwargs: dict) -> tuple[dict, float, bool]:
    """``(kept fields of the run, sampling seconds, whether every chunk came from the cache)``: the sources in chunks of
    ``args.chunk`` sentences (0: one call), each kept in ``args.cache`` once finished, so a long experiment
    killed midway (or spread over several sittings) resumes from its finished chunks."""
    parts, seconds, cached = [], 0.0, 0
    chunks = _chunks(len(setup.sources), int(getattr(args, "chunk", 0) or 0))
    for chunk in chunks:
        fields, took, hit = _sample_one(setup, args, seed, kwargs, chunk)
        parts.append(fields)
        seconds, cached = seconds + took, cached + hit
    return _combine(parts, int(setup.model.pad_id)), seconds, cached == len(chunks)


def _one_seed(setup: Any, args: Any, seed: int, kwargs: dict) -> tuple[Any, list[list[list[tuple]]], float, bool]:
    fields, seconds, cached = _sample_cached(setup, args, seed, kwargs)
    CACHE_COUNTS["cached" if cached else "computed"] += 1
    res = types.SimpleNamespace(**fields)
    hist, lengths = res.history, res.lengths
    # ids[e][c][b]: the chain's end-of-epoch state, unpadded
    ids = [[[tuple(hist[e, b, c, :int(lengths[b])].tolist()) for b in range(hist.shape[1])]
            for c in range(hist.shape[2])] for e in range(hist.shape[0])]
    return res, ids, seconds, cached


def _candidates(setup: Any, context: Any, states: list[list[tuple]], chrf: dict) -> list[dict]:
    """Per sentence: every distinct state -> (E_raw, E_local, sentence chrF)."""
    out = []
    for b, distinct in enumerate(states):
        keys = sorted(set(distinct))
        raw, local = score_energies(setup.model, context, torch.tensor(keys, dtype=torch.long), b)
        out.append({k: (float(r), float(lo), chrf[b, k]) for k, r, lo in zip(keys, raw, local)})
    return out


def run_sampler(setup: Any, args: Any, label: str, **kwargs: Any) -> Run:
    """``mhfast.sample`` over all sources for every seed of ``args.seeds``, and the per-sentence statistics."""
    results, groups, seconds, cached = [], [], 0.0, 0
    for seed in args.seeds:
        res, ids, took, from_cache = _one_seed(setup, args, seed, kwargs)
        seconds, cached = seconds + took, cached + from_cache
        results.append(res)
        groups += [(seed, e, c, ids[e][c]) for e in range(len(ids)) for c in range(len(ids[e]))]
    text = functools.cache(lambda key: setup.to_text(torch.tensor(key, dtype=torch.long)))
    hyps = [[text(k) for k in g[3]] for g in groups]
    bleu_stats = np.stack([ps.sentence_stats(h, setup.refs, "bleu") for h in hyps])
    chrf_stats = np.stack([ps.sentence_stats(h, setup.refs, "chrf") for h in hyps])
    n = len(setup.refs)
    chrf = {}
    for g, group in enumerate(groups):
        for b, key in enumerate(group[3]):
            if (b, key) not in chrf:
                chrf[b, key] = float(ps.score_from_stats("chrf", chrf_stats[g, b]))
    context = setup.model.encode(setup.sources)
    candidates = _candidates(setup, context, [[g[3][b] for g in groups] for b in range(n)], chrf)
    e = np.array([[candidates[b][g[3][b]][:2] for b in range(n)] for g in groups])  # [G, n, 2]
    best = np.stack([ps.sentence_stats([setup.to_text(t) for t in r.best_tokens.cpu()], setup.refs) for r in results])
    per_group = ps.score_from_stats("bleu", bleu_stats.sum(axis=1))
    seed_of = np.array([g[0] for g in groups])
    epochs = len(results[0].history)
    bleu_epoch = [float(np.mean([per_group[i] for i, g in enumerate(groups) if g[1] == ep])) for ep in range(epochs)]
    mean_of = (lambda name: np.mean([getattr(r, name).tolist() for r in results], axis=0).tolist())
    sent_rates: tuple[np.ndarray | None, np.ndarray | None] = (None, None)
    if all(hasattr(r, k) for r in results for k in COUNTS):  # per sentence: post-burn-in counts over chains, seeds
        total = lambda k: sum(getattr(r, k)[args.burn_in:].sum(dim=(0, 2)).double() for r in results).numpy()  # noqa: E731
        proposals, accepted, novel = (total(k) for k in COUNTS)
        sent_rates = (accepted / proposals, novel / proposals)
    run = Run(label, list(args.seeds), args.burn_in, args.chains, bleu_epoch, mean_of("e_local"), mean_of("e_raw"),
              mean_of("acceptance_rate"), mean_of("novel_rate"), mean_of("target_temperature"), bleu_stats, chrf_stats,
              best, [float(per_group[seed_of == s].mean()) for s in args.seeds], e[..., 1].mean(axis=0),
              e[..., 0].mean(axis=0), candidates, seconds, *sent_rates)
    print(f"  {label:<38} BLEU {run.bleu_ci().text()}  best-of {run.best_ci().text()}  E_local "
          f"{run.e_local_ci().text()}  acc {run.avg_acceptance:.3f}  novel {run.avg_novel:.3f}  ({seconds:.1f} s"
          f"{f'; {cached} of {len(args.seeds)} seed(s) from the cache' if cached else ''})",
          flush=True)
    return run


def energy_quality_correlation(runs: Sequence[Run], energy: str) -> ps.Estimate:
    """Within-sentence Spearman of -E (``energy``: "raw" / "local") vs sentence chrF over the distinct states
    that ``runs`` produced (pooled), averaged over sentences, with its bootstrap CI over sentences."""
    col = {"raw": 0, "local": 1}[energy]
    groups = []
    for b in range(runs[0].n):
        pooled: dict[tuple, tuple] = {}
        for r in runs:
            pooled.update(r.candidates[b])
        groups.append(([-v[col] for v in pooled.values()], [v[2] for v in pooled.values()]))
    return ps.within_sentence_correlation(groups)


def candidate_count(runs: Sequence[Run]) -> float:
    """Mean number of distinct states per sentence pooled over ``runs``."""
    return float(np.mean([len(set().union(*(r.candidates[b] for r in runs))) for b in range(runs[0].n)]))
