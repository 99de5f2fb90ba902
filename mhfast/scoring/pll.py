"""``mhfast.score``: pseudo-log-likelihood scores of texts or token sequences, with words and perplexity.

Definitions (natural logarithms):

* token score ``s_t = log p(x_t | X with x_t masked)``; ``PLL(X) = sum_t s_t = -E_local(X)``
  (Salazar et al. 2020; minicons' ``PLL_metric="original"``);
* ``metric="within_word_l2r"`` (Kauf & Ivanova 2023; minicons): when piece t of a word is scored, the
  pieces of the same word after t are masked too;
* word score = the sum of its pieces' scores;
* pseudo-perplexity ``PPPL = exp(-PLL / N)`` with N the scored tokens (per token) or the words (per
  word, for word-piece models); over a corpus, sums of PLL and N (:func:`corpus_pppl`).

Example:
    >>> import torch, mhfast
    >>> from mhfast.models.tabular import TabularMLM
    >>> model = TabularMLM.random(num_tokens=3, length=3, seed=0)
    >>> s = mhfast.score(model, [[0, 1, 2]])[0]
    >>> s.num_tokens, abs(s.pll + float(mhfast.energy(model, [[0, 1, 2]]).e_local[0])) < 1e-5
    (3, True)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from ..models.base import check_length
from ..sampler.problem import check_devices
from ..runtime.runner import sum_terms
from .api import (as_model, check_options, checked_sources, compute_terms, energy_positions, translator_of,
                  translator_sources)
from .text import Encoded, encode

METRICS = ("original", "within_word_l2r")


@dataclass
class SequenceScore:
    """The scores of one sequence (see the module docstring for the definitions)."""

    pll: float  #: sum of token scores (= -E_local under metric "original")
    e_raw: float  #: sum of -logit of each token in its masked row (the paper's E_raw under "original")
    tokens: list[str] = field(default_factory=list)  #: the scored tokens
    token_scores: list[float] = field(default_factory=list)  #: log p of each scored token
    words: list[str] = field(default_factory=list)
    word_scores: list[float] = field(default_factory=list)  #: sum of each word's token scores

    @property
    def num_tokens(self) -> int:
        return len(self.token_scores)

    @property
    def num_words(self) -> int:
        return len(self.word_scores)

    @property
    def pppl(self) -> float:
        """Pseudo-perplexity per token, ``exp(-PLL / tokens)`` (nan without tokens)."""
        return _pppl(self.pll, self.num_tokens)

    @property
    def pppl_word(self) -> float:
        """Pseudo-perplexity per word, ``exp(-PLL / words)`` (nan without words)."""
        return _pppl(self.pll, self.num_words)


def _pppl(pll: float, n: int) -> float:
    """``exp(-pll / n)``: nan for n = 0, inf past float's range. A word of many unlikely pieces (a URL, a DNA
    string) gives over 709.78 nats per word, and math.exp raised OverflowError: a traceback from mhfast score.

    Example:
        >>> _pppl(-800.0, 1), _pppl(-2.0, 2), _pppl(0.0, 0)
        (inf, 2.718281828459045, nan)
    """
    if not n:
        return math.nan
    try:
        return math.exp(-pll / n)
    except OverflowError:
        return math.inf


def corpus_pppl(scores: Sequence[SequenceScore], per: str = "token") -> float:
    """``exp(-sum PLL / sum N)`` over a corpus, N = tokens (``per="token"``) or words (``"word"``)."""
    if per not in ("token", "word"):
        raise ValueError(f"per: must be 'token' or 'word', got {per!r}")
    n = sum(s.num_tokens if per == "token" else s.num_words for s in scores)
    return _pppl(sum(s.pll for s in scores), n)


def _result(enc: Encoded, scored: torch.Tensor, raw: torch.Tensor, local: torch.Tensor) -> SequenceScore:
    pos = scored.nonzero().flatten().tolist()
    logp = [0.0 - float(local[t]) for t in pos]  # (0.0 - x, not -x: a term of 0 is a score of 0, not -0.0)
    word_scores = [0.0] * enc.num_words
    for t, s in zip(pos, logp):
        w = int(enc.word_ids[t])
        if w >= 0:
            word_scores[w] += s
    return SequenceScore(pll=0.0 - float(sum_terms(local[None])[0]), e_raw=float(sum_terms(raw[None])[0]) + 0.0,
                         tokens=[enc.pieces[t] for t in pos], token_scores=logp, words=list(enc.words),
                         word_scores=word_scores)


def _encode_all(model: Any, lm: Any, items: Sequence[Any]) -> list[Encoded | None]:
    """Each item encoded (``model``: the model or its Translator; None for an empty text), checked to fit the
    model's positions and against ``lm``'s vocabulary; an error names the item (``sequences[k]``), not the padded
    batch it would be scored in."""
    out: list[Encoded | None] = []
    for k, item in enumerate(items):
        if isinstance(item, str) and not item.strip():
            out.append(None)  # an empty text scores 0 with no tokens
            continue
        try:
            enc = encode(model, item)
        except (TypeError, ValueError) as e:
            raise type(e)(f"mhfast.score: sequences[{k}]: {e}") from None
        check_length(model, int(enc.ids.numel()), f"mhfast.score: sequences[{k}]")
        energy_positions(lm, enc.ids[None], "mhfast.score", f"sequences[{k}]")
        out.append(enc)
    return out


def _check_sources(lm: Any, translator: Any, sources: Any, count: int) -> None:
    """``sources``: one per sequence for a conditional model (a CMLM or its Translator), none otherwise."""
    conditional = translator is not None or callable(getattr(lm, "predict_lengths", None))
    if sources is None and not conditional:
        return
    if not conditional:
        raise ValueError("mhfast.score: sources needs a conditional model (with encode and predict_lengths)")
    if sources is None or isinstance(sources, (str, torch.Tensor)) or not isinstance(sources, Sequence) \
            or len(sources) != count:
        raise ValueError(f"mhfast.score: sources must give one source per sequence ({count}): the model is "
                         "conditional")


def score(model: Any, sequences: Sequence[Any], *, sources: Sequence[Any] | None = None, metric: str = "original",
          max_tokens_per_batch: int | None = None, backend: str = "compiled") -> list[SequenceScore]:
    """PLL, E_raw, token and word scores of each sequence (texts or token id sequences).

    Args:
        model: as :func:`mhfast.energy`, or a :class:`mhfast.translation.Translator` (a CMLM with its
            text processing; then ``sources`` gives one source sentence per target).
        sequences: texts (encoded with the model's tokenizer, specials added) or token id sequences.
            Empty texts get an empty score.
        metric: "original" (one masked copy per token) or "within_word_l2r" (needs words: with token id
            sequences each token is its own word, so it gives the same scores as "original").
    """
    if metric not in METRICS:
        raise ValueError(f"mhfast.score: metric must be one of {', '.join(METRICS)}, got {metric!r}")
    max_tokens_per_batch = check_options("mhfast.score", max_tokens_per_batch, backend)
    if isinstance(sequences, (str, torch.Tensor)) or not isinstance(sequences, Sequence):
        raise TypeError("mhfast.score: sequences must be a list of texts or token id sequences")
    check_devices("mhfast.score", sequences=sequences, sources=sources)
    translator = translator_of(model)
    # (a Translator's CMLM is checked too: a float64 one failed after a whole forward, in gather_energies)
    lm = as_model(translator.cmlm if translator is not None else model, "mhfast.score")
    _check_sources(lm, translator, sources, len(sequences))
    encoded = _encode_all(translator or lm, lm, sequences)
    keep = [k for k, e in enumerate(encoded) if e is not None]
    results = [SequenceScore(0.0, 0.0) for _ in sequences]
    if not keep:
        return results
    rows = torch.full((len(keep), max(encoded[k].ids.numel() for k in keep)), int(lm.pad_id), dtype=torch.long)
    words = torch.full_like(rows, -1)
    for j, k in enumerate(keep):
        n = encoded[k].ids.numel()
        rows[j, :n], words[j, :n] = encoded[k].ids, encoded[k].mask_groups
    mask = energy_positions(lm, rows)
    src = None
    if sources is not None:
        src = checked_sources(lm, translator_sources(translator, [sources[k] for k in keep]), "mhfast.score",
                              "sources", keep)
    raw, local = compute_terms(lm, rows, mask, source=src, word_ids=words if metric == "within_word_l2r" else None,
                               max_tokens_per_batch=max_tokens_per_batch, backend=backend)
    raw, local, mask = raw.cpu(), local.cpu(), mask.cpu()
    for j, k in enumerate(keep):
        results[k] = _result(encoded[k], mask[j], raw[j], local[j])
    return results
