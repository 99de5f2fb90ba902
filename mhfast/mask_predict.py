"""Mask-Predict (Ghazvininejad et al. 2019), the paper's non-MCMC baseline for CMLM translation.

:func:`mask_predict` decodes a batch of sources with any :class:`mhfast.models.base.RefinementModel`
(the fairseq adapter :class:`mhfast.models.fairseq_cmlm.FairseqCMLM` is one; this module never touches
fairseq itself)
and returns exactly what fairseq's ``IterativeRefinementGenerator`` returns for the same model and
inputs with ``max_iter=iterations``, ``beam_size=length_beam``, ``adaptive=False`` (no early stop),
``retain_history=False``, no reranking (what ``fairseq-generate --task translation_lev
--iter-decode-max-iter N --iter-decode-with-beam k`` runs when ``--iter-decode-force-max-iter`` is
set). All sources and length candidates are decoded together: one decoder pass over all
``S * length_beam`` rows per iteration, the encoder run once.

The algorithm, as in fairseq (``cmlm_transformer.forward_decoder``, ``_skeptical_unmasking``):

1. Lengths: fairseq's greedy length prediction ``L`` (BOS/EOS included, clamped to >= 2); with a
   length beam k the candidates ``L + j - k // 2`` (j = 0..k-1, clamped to >= 2).
2. Start from ``[bos] + [<unk>] * (L - 2) + [eos]``, all scores 0.
3. For step t = 0..iterations: one decoder pass; every masked position takes its argmax token and
   that token's log-probability as its score. If t < iterations, re-mask the
   ``floor((L - 2) * (1 - (t + 1) / (iterations + 1)))`` positions with the lowest scores
   (``torch.sort`` over the padded row, exactly fairseq's tie-breaking) and zero their scores.
4. Per source keep the candidate with the highest mean score over its non-pad positions (BOS/EOS
   count with score 0, as in fairseq; the first candidate wins ties).

So ``iterations=10`` (fairseq's default ``max_iter``) makes 11 decoder passes.

One consequence of fairseq's sort, kept for identity: BOS, EOS and pads score 0, so a model that gives a predicted
token a log-probability of exactly 0 (probability 1 in its dtype) ties with them, and the sort may re-mask BOS or
EOS, which the next pass then overwrites (fairseq picks the same positions). The bundled model gave no exact 0 on
100 test sentences in fp32, bf16 or fp16 (a helper's review, 2026-12-02).

Example::

    >>> from mhfast.models.fairseq_cmlm import load_fairseq_cmlm        # doctest: +SKIP
    >>> cmlm = load_fairseq_cmlm("ckpt/checkpoint_best.pt", "data-bin")   # doctest: +SKIP
    >>> out = mhfast.mask_predict(cmlm, ["ein hund läuft ."], iterations=10, length_beam=3)  # doctest: +SKIP
    >>> cmlm.decode(out.tokens[0])                                       # doctest: +SKIP
    'a dog runs .'
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from .models.base import check_length
from .runtime.attention import without_cudnn_attention


@dataclass
class MaskPredictResult:
    """Output of :func:`mask_predict` for S sources and a length beam of k.

    Attributes:
        tokens: per source, the chosen hypothesis with BOS/EOS (fairseq's ``hypo["tokens"]``): list of Long[L_s].
        positional_scores: per source, the per-token log-probabilities of ``tokens`` (fairseq's
            ``hypo["positional_scores"]``; 0 at BOS/EOS): list of f32[L_s].
        score: f32[S], mean of ``positional_scores`` (fairseq's ``hypo["score"]``).
        beam_tokens: Long[S, k, Lmax] every length candidate's final tokens (pad-padded).
        beam_scores: f32[S, k] every candidate's mean score.
        best_beam: Long[S] the chosen candidate per source.
        lengths: Long[S, k] the candidates' total lengths (BOS/EOS included).
    """

    tokens: list[torch.Tensor]
    positional_scores: list[torch.Tensor]
    score: torch.Tensor
    beam_tokens: torch.Tensor
    beam_scores: torch.Tensor
    best_beam: torch.Tensor
    lengths: torch.Tensor


def _skeptical_unmasking(scores: torch.Tensor, nonpad: torch.Tensor, p: float) -> torch.Tensor:
    """Bool[R, L]: the ``floor((nonpad - 2) * p)`` lowest-scoring positions of each row.

    A copy of fairseq's ``cmlm_transformer._skeptical_unmasking`` (same unstable ``sort`` on the same
    padded rows), so ties break exactly as there.
    """
    sorted_index = scores.sort(-1)[1]
    boundary_len = ((nonpad.sum(1, keepdim=True).type_as(scores) - 2) * p).long()
    arange = torch.arange(scores.shape[1], device=scores.device).expand_as(scores)
    skeptical = arange < boundary_len
    return skeptical.scatter(1, sorted_index, skeptical)


def _initial_tokens(total: torch.Tensor, bos: int, eos: int, unk: int, pad: int) -> torch.Tensor:
    """``[bos] + [unk] * (L - 2) + [eos]`` rows padded to max L (fairseq's initialize_output_tokens)."""
    L = int(total.max())
    idx = torch.arange(L, device=total.device)
    tokens = torch.full((total.shape[0], L), pad, dtype=torch.long, device=total.device)
    tokens.masked_fill_(idx[None, :] < total[:, None], unk)
    tokens[:, 0] = bos
    tokens.scatter_(1, total[:, None] - 1, eos)
    return tokens


@torch.no_grad()
def mask_predict(model: Any, sources: Sequence[Any], iterations: int = 10, length_beam: int = 1,
                 length_strategy: str = "fairseq") -> MaskPredictResult:
    """Mask-Predict decoding of a batch of sources, identical to fairseq's IterativeRefinementGenerator.

    Args:
        model: a :class:`mhfast.models.base.RefinementModel`, e.g. a
            :class:`mhfast.models.fairseq_cmlm.FairseqCMLM`.
        sources: non-empty list of source strings or Long[S_i] token ids (see ``FairseqCMLM.encode``).
        iterations: refinement iterations after the first pass (fairseq's ``--iter-decode-max-iter``,
            default 10 = 11 decoder passes); >= 0.
        length_beam: number of length candidates per source (fairseq's ``--iter-decode-with-beam``).
        length_strategy: ``"fairseq"`` (window around the greedy length, identical to fairseq) or
            ``"topk"`` (the k most likely lengths of the length head, as in Ghazvininejad et al.).

    Returns:
        :class:`MaskPredictResult`.

    Example::

        >>> out = mask_predict(cmlm, [torch.tensor([41, 9, 77, 2])], iterations=4, length_beam=3)  # doctest: +SKIP
        >>> out.tokens[0]                                                       # doctest: +SKIP
        tensor([0, 12, 50, 8, 2])
    """
    from .models.base import RefinementModel
    from .sampler.problem import check_devices
    from .sampler.scalars import as_int

    if not isinstance(model, RefinementModel) and isinstance(getattr(model, "cmlm", None), RefinementModel):
        model = model.cmlm  # a Translator, as mhfast.energy and mhfast.score take it
    if not isinstance(model, RefinementModel):
        missing = [n for n in ("encode", "decoder_log_probs", "predict_lengths", "bos_id", "eos_id", "mask_id",
                               "pad_id") if not hasattr(model, n)]
        raise TypeError("model: mask_predict needs a mhfast.models.base.RefinementModel (missing "
                        f"{', '.join(missing)})")
    # numpy's ints count, as the sampler's options take them (np.int64(3) had been refused)
    if as_int(iterations) is None or as_int(iterations) < 0:
        raise ValueError(f"iterations: expected an int >= 0, got {iterations!r}")
    if as_int(length_beam) is None or as_int(length_beam) < 1:
        raise ValueError(f"length_beam: expected an int >= 1, got {length_beam!r}")
    iterations, length_beam = as_int(iterations), as_int(length_beam)
    if length_strategy not in ("fairseq", "topk"):
        raise ValueError(f"length_strategy: expected 'fairseq' or 'topk', got {length_strategy!r}")
    check_devices("mhfast.mask_predict", sources=sources)
    decoder = getattr(getattr(model, "model", None), "decoder", None)  # (a fairseq model inside the adapter)
    if getattr(decoder, "src_embedding_copy", False) is True:
        raise ValueError("model: its decoder was trained with src_embedding_copy, which fairseq's Mask-Predict uses "
                         "at its first step and mask_predict does not (it decodes through the adapter's MLM "
                         "conditionals): the output would not be fairseq's")
    with without_cudnn_attention(getattr(model, "device", None)):  # a plan per new shape: runtime/attention.py
        return _decode(model, sources, iterations, length_beam, length_strategy)


# A model's outputs are checked as the sampler's runner checks them: a custom RefinementModel that breaks the
# protocol had given silent [eos] hypotheses (a length of -1), garbage (NaN log-probabilities, a wrong vocabulary
# size) or an error deep inside torch (a helper's review, 2026-12-02).
def _checked_lengths(content: Any, S: int, k: int) -> torch.Tensor:
    """``model.predict_lengths``'s Long[S, k] of lengths >= 0, else a ValueError naming it."""
    if not isinstance(content, torch.Tensor) or content.dtype not in (torch.int64, torch.int32) or \
            tuple(content.shape) != (S, k):
        got = f"{content.dtype} of shape {tuple(content.shape)}" if isinstance(content, torch.Tensor) else \
            type(content).__name__
        raise ValueError(f"model.predict_lengths must return Long[{S}, {k}] (sources x length_beam), got {got}")
    if content.numel() and int(content.min()) < 0:
        raise ValueError(f"model.predict_lengths returned a length of {int(content.min())} (lengths count the "
                         "target tokens without BOS/EOS: >= 0)")
    return content.long()


def _checked_log_probs(model: Any, lp: Any, tokens: torch.Tensor) -> torch.Tensor:
    """``model.decoder_log_probs``'s float[R, L, V] for ``tokens`` Long[R, L], else a ValueError (NaN is looked for
    in the maxima, by :func:`_decode`: max propagates it)."""
    R, L = tokens.shape
    V = getattr(model, "vocab_size", None)
    if not isinstance(lp, torch.Tensor) or not lp.is_floating_point() or lp.dim() != 3 or \
            tuple(lp.shape[:2]) != (R, L) or (V is not None and lp.shape[2] != V):
        got = f"{lp.dtype} of shape {tuple(lp.shape)}" if isinstance(lp, torch.Tensor) else type(lp).__name__
        raise ValueError(f"model.decoder_log_probs must return float[{R}, {L}, {V if V is not None else 'V'}] "
                         f"(rows x positions x vocab_size), got {got}")
    return lp


def _decode(model: Any, sources: Sequence[Any], iterations: int, k: int, length_strategy: str) -> MaskPredictResult:
    """mask_predict's decoding, its arguments checked."""
    context = model.encode(sources)                                            # opaque to this function
    content = _checked_lengths(model.predict_lengths(context, k, strategy=length_strategy), len(sources), k)
    S = content.shape[0]
    total = (content + 2).reshape(-1)                                         # source-major rows
    if total.numel():  # fairseq's beam reaches k // 2 beyond the predicted length: past the table, name length_beam
        longest = int(total.argmax())
        check_length(model, int(total[longest]), f"length_beam={k}: source {longest // k}'s longest candidate")
    context_index = torch.arange(S, device=total.device).repeat_interleave(k)
    bos, eos, unk, pad = model.bos_id, model.eos_id, model.mask_id, model.pad_id

    tokens = _initial_tokens(total, bos, eos, unk, pad)
    scores = None  # in the dtype of the model's log-probabilities (fairseq: the encoder's dtype)
    nan = torch.zeros((), dtype=torch.bool, device=tokens.device)  # read once, after the loop: no sync per pass
    max_step = iterations + 1
    for step in range(max_step):
        masks = tokens.eq(unk)
        best_scores, best_tokens = _checked_log_probs(model, model.decoder_log_probs(tokens, context, context_index),
                                                      tokens).max(-1)
        nan |= best_scores.isnan().any()
        if scores is None:
            scores = torch.zeros(tokens.shape, dtype=best_scores.dtype, device=tokens.device)
        tokens.masked_scatter_(masks, best_tokens[masks])
        scores.masked_scatter_(masks, best_scores[masks])
        if step + 1 < max_step:
            remask = _skeptical_unmasking(scores, tokens.ne(pad), 1 - (step + 1) / max_step)
            tokens.masked_fill_(remask, unk)
            scores.masked_fill_(remask, 0.0)
    if bool(nan):
        raise ValueError("model.decoder_log_probs returned NaN")

    # fairseq's finalized_hypos: keep the non-pad positions, score = their mean (computed the same
    # way, row by row, so that the candidate choice below is bit-for-bit fairseq's).
    keep = tokens.ne(pad)
    hyp_tokens = [tokens[r][keep[r]] for r in range(tokens.shape[0])]
    hyp_scores = [scores[r][keep[r]] for r in range(tokens.shape[0])]
    beam_scores = torch.stack([s.mean() for s in hyp_scores]).reshape(S, k)
    best = beam_scores.argmax(dim=1)  # first maximum on ties, like fairseq's np.argmax
    chosen = (torch.arange(S, device=best.device) * k + best).tolist()
    return MaskPredictResult(
        tokens=[hyp_tokens[r] for r in chosen],
        positional_scores=[hyp_scores[r] for r in chosen],
        score=beam_scores.gather(1, best[:, None])[:, 0],
        beam_tokens=tokens.reshape(S, k, -1),
        beam_scores=beam_scores,
        best_beam=best,
        lengths=total.reshape(S, k),
    )
