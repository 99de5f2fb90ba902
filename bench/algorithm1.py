"""A literal pure-PyTorch transcription of the paper's Algorithm 1 (Goyal et al., ICLR 2022): the baseline.

Per chain, per epoch, per position t (python loops, no caching, no mhfast ops):
    line 6:  E_old = f_E(sigma(X))                T masked copies of X, one full forward (T rows)
    line 7:  w_o = X_t; mask X at t
    line 8:  w_n ~ f_mlm(sigma(X), t)            one full forward of X masked at t
    line 9:  q(X'|X) = q[w_n], q(X|X') = q[w_o]
    line 10: E_new = f_E(sigma(X'))               T masked copies of X', one full forward (T rows)
    line 11: a = min(1, exp(-E_new) q(X|X') / (exp(-E_old) q(X'|X)))
    line 12: accept with probability a
"One full forward" of T rows is one batched ``model(input_ids).logits`` call (the LM head over
every position of every row, as a plain HuggingFace forward does): the paper's O(T) energy op.
Warm start (line 3): greedy argmax of the all-[MASK] sequence's conditionals (non-special tokens).

Example:
    >>> from mhfast.models.antiberty import load_antiberty                # doctest: +SKIP
    >>> out = algorithm1(load_antiberty(), length=10, chains=2, epochs=1)  # doctest: +SKIP
    >>> out["tokens"].shape                                                # doctest: +SKIP
    torch.Size([2, 12])
"""
from __future__ import annotations

import math
from typing import Any

import torch


def _logits(model: Any, rows: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=rows).logits.float()


def energy(model: Any, x: torch.Tensor, positions: torch.Tensor, mask_id: int, kind: str) -> tuple[float, int]:
    """f_E(sigma(X)): raw (-sum of logits) or local (-sum of log-probs) over ``positions``; (energy, rows)."""
    rows = x.repeat(len(positions), 1)
    rows[torch.arange(len(positions)), positions] = mask_id
    logits = _logits(model, rows)[torch.arange(len(positions)), positions]  # row i masked at positions[i]
    picked = logits.gather(1, x[positions][:, None]).squeeze(1)
    if kind == "local":
        picked = picked - torch.logsumexp(logits, dim=1)
    return -float(picked.double().sum()), len(positions)


def algorithm1(lm: Any, length: int, *, chains: int = 5, epochs: int = 1, energy_kind: str = "raw",
               proposal_temperature: float = 1.0, seed: int = 0, steps: int | None = None) -> dict:
    """Run Algorithm 1 on an :class:`mhfast.models.hf.HFMaskedLM` (only its ``model`` and ids are used).

    ``steps`` stops each chain after that many MH steps (for benchmarks); ``None`` = full epochs.
    Returns tokens Long[chains, T'] (with [CLS]/[SEP] from ``lm.frame``), final energies,
    acceptance rate, proposals and model rows forwarded.
    """
    model, mask_id = lm.model, lm.mask_id
    g = torch.Generator().manual_seed(seed)
    template = lm.frame(length) if callable(getattr(lm, "frame", None)) else torch.full((length,), mask_id)
    positions = (template == mask_id).nonzero().flatten()  # the T sampled positions
    special = torch.zeros(lm.vocab_size, dtype=torch.bool)
    special[list(lm.special_ids)] = True
    rows = proposals = accepted = 0
    finals, energies = [], []
    for _ in range(chains):
        # Line 2-3: X <- [MASK]^T, greedy decode of the MLM's conditionals.
        x = template.clone()
        warm = _logits(model, x[None])[0].masked_fill(special, -math.inf)
        x[positions] = warm[positions].argmax(dim=1)
        rows += 1
        done = 0
        for _e in range(epochs):
            for t in positions[torch.randperm(len(positions), generator=g)]:  # line 5, random order
                if steps is not None and done >= steps:
                    break
                e_old, n = energy(model, x, positions, mask_id, energy_kind)  # line 6
                rows += n
                w_o = int(x[t])  # line 7
                masked = x.clone()
                masked[t] = mask_id
                logits = _logits(model, masked[None])[0, t].masked_fill(special, -math.inf)  # line 8
                rows += 1
                logq = torch.log_softmax(logits / proposal_temperature, dim=0)
                w_n = int(torch.multinomial(logq.exp(), 1, generator=g))
                x_new = x.clone()
                x_new[t] = w_n
                e_new, n = energy(model, x_new, positions, mask_id, energy_kind)  # line 10
                rows += n
                log_a = (e_old - e_new) + float(logq[w_o]) - float(logq[w_n])  # line 11, in log space
                proposals += 1
                done += 1
                if math.log(float(torch.rand((), generator=g)) + 1e-300) < log_a:  # line 12
                    x = x_new
                    accepted += 1
        finals.append(x)
        energies.append(energy(model, x, positions, mask_id, energy_kind)[0])
    return {"tokens": torch.stack(finals), "energy": torch.tensor(energies), "proposals": proposals,
            "acceptance_rate": accepted / max(proposals, 1), "model_rows": rows}
