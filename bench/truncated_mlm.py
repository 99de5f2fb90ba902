"""A smaller model for delayed acceptance's first stage: AntiBERTy cut to its first k transformer layers, with its
own MLM head (issue 34's "first layers of the same model with its LM head").

BERT is post-LN: each encoder layer ends with its own LayerNorm and there is no final one, so the cut model is the
embeddings, layers 0..k-1 and the unchanged head (dense + GELU + LayerNorm + decoder). It is wrapped as an
:class:`~mhfast.models.antiberty.AntiBERTyMaskedLM`, so it is an ordinary mhfast model adapter (``mhfast.energy``,
``mhfast.surrogates.model_energy`` take it). Bench-only: nothing here is in the library.

Example:
    >>> from mhfast.models.antiberty import load_antiberty       # doctest: +SKIP
    >>> small = first_layers(load_antiberty(), 2)                  # doctest: +SKIP
    >>> len(small.model.bert.encoder.layer)                        # doctest: +SKIP
    2
"""
from __future__ import annotations

import copy
import statistics
import time

import torch


def first_layers(lm, k: int):
    """AntiBERTy adapter ``lm`` truncated to its first ``k`` encoder layers (a deep copy; ``lm`` is unchanged)."""
    from mhfast.models.antiberty import AntiBERTyMaskedLM

    layers = lm.model.bert.encoder.layer
    if not 1 <= k <= len(layers):
        raise ValueError(f"k: expected 1..{len(layers)} layers, got {k}")
    small = copy.deepcopy(lm.model)
    small.bert.encoder.layer = torch.nn.ModuleList(list(small.bert.encoder.layer)[:k])
    small.config.num_hidden_layers = k
    return AntiBERTyMaskedLM(small, lm.vocab)


def row_cost(lm, small_lms: dict, length: int, rows: int = 256, reps: int = 7, seed: int = 0) -> dict:
    """Measured cost of one masked row of each small model relative to one row of ``lm`` (same batch of ``rows``
    random sequences of ``length`` tokens, one masked position each), median over ``reps`` interleaved timings
    (A/B in one process: the machine is shared, so absolute times drift but the ratio holds)."""
    gen = torch.Generator().manual_seed(seed)
    aa = torch.tensor(sorted(set(range(len(lm.vocab))) - set(lm.special_ids)))
    x = aa[torch.randint(len(aa), (rows, length), generator=gen)]
    x[:, 0], x[:, -1] = lm.bos_id, lm.eos_id
    pos = torch.randint(1, length - 1, (rows,), generator=gen)
    x[torch.arange(rows), pos] = lm.mask_id
    models = {"full": lm, **small_lms}
    times: dict = {name: [] for name in models}
    with torch.no_grad():
        for name, m in models.items():  # warm-up
            m.masked_logits(x, pos)
        for _ in range(reps):
            for name, m in models.items():
                t = time.perf_counter()
                m.masked_logits(x, pos)
                times[name].append(time.perf_counter() - t)
    full = statistics.median(times["full"])
    return {name: statistics.median(times[name]) / full for name in small_lms}
