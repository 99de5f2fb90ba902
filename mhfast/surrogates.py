"""Ready-made surrogates for delayed acceptance (option ``delayed=<callable>`` of :func:`mhfast.sample`).

A surrogate is a fixed function ``E~(tokens Long[n, T], pos Long[n]) -> f32[n]`` of a sequence and its proposed
position (:mod:`mhfast.sampler.moves.user_surrogate`; docs/delayed.md, "Your own surrogate"). Stage 1 of each
proposal tests ``E~(X', i) - E~(X, i)`` instead of forwarding rows of the sampled model, and only the survivors
pay the exact ``T_e - 1`` rows; the chain still targets the exact distribution of the sampled model.

:func:`model_energy` makes one of a smaller model with the same vocabulary (a shallower MLM, a distilled one).

Example:
    >>> import mhfast
    >>> from mhfast.models.tabular import TabularMLM
    >>> big, small = TabularMLM.random(3, 6, seed=0), TabularMLM.random(3, 6, seed=1)
    >>> r = mhfast.sample(big, 6, chains=2, epochs=3, burn_in=0, delayed=model_energy(small))
    >>> r.delayed_passed <= r.delayed_tested
    True
"""
from __future__ import annotations

from typing import Any

import torch

ENERGIES = ("raw", "local")


class ModelEnergy:
    """The surrogate ``E~(X, i) = E_small(X)``: a model's whole pseudo-log-likelihood energy of the sequence (the
    same for every position i: a fixed function, as the kernel needs). Made by :func:`model_energy`.

    Cost per step: ``2 n`` sequences scored by the small model (X and X' of each of the ``n`` tested proposals),
    ``T_e`` masked rows each: ``2 T_e`` small-model rows per proposal in place of the sampled model's ``T_e - 1``
    for those stage 1 rejects (the small model must be more than about twice cheaper per row to save time; its
    energy of X is not cached). Measured on AntiBERTy with its first 2 or 4 layers and its own head as the small
    model (bench/delayed_surrogates.py, bench/RESULTS.md "Which first stage?"): it forwarded 1.7-4.2x *more*
    rows per accepted change than exact MH (its energy change correlates poorly with the full model's), while
    the window surrogate (``delayed="window:2"``) forwarded fewer. A small BERT distilled from AntiBERTy on the
    infilling job's sequences (bench/distilled_mlm.py) tracks it closely (corr 0.93-0.995) but, in the sampler,
    forwarded as many rows per accepted change as plain MH (bench/RESULTS.md, "A distilled small model as the first
    stage"): its errors of about a nat make stage 2 reject half of what it passes.
    """

    def __init__(self, model: Any, energy: str = "local", max_tokens_per_batch: int | None = None,
                 backend: str = "compiled"):
        from .scoring.api import as_model, check_options  # (here: mhfast.scoring imports the sampler's options)

        where = "mhfast.surrogates.model_energy"
        if energy not in ENERGIES:
            raise ValueError(f"{where}: energy must be 'raw' or 'local', got {energy!r}")
        max_tokens_per_batch = check_options(where, max_tokens_per_batch, backend)
        # Loaded (a name, a directory, a transformers object) once here, not at every call: mhfast.energy would
        # resolve it again at each MH step.
        model = as_model(model, where)
        if callable(getattr(model, "predict_lengths", None)):
            raise ValueError(f"{where}: model is conditional (a CMLM needs a source per sequence); pass an "
                             "unconditional MLM")
        self.model, self.energy = model, energy
        self.max_tokens_per_batch, self.backend = max_tokens_per_batch, backend

    def check_model(self, sampled: Any) -> None:
        """A ValueError naming ``delayed`` unless the sampled model has this model's vocabulary (size, mask, pad and
        special ids): called by :func:`mhfast.sample` before the run. A mismatch had surfaced as an energy error
        naming neither (``mhfast.energy: tokens holds mask_id (2)``), or not at all (a larger vocabulary).

        Example:
            >>> from mhfast.models.tabular import TabularMLM
            >>> model_energy(TabularMLM.random(3, 4, seed=1)).check_model(TabularMLM.random(3, 4, seed=0))
        """
        def vocabulary(m: Any) -> tuple:
            return (int(m.vocab_size), int(m.mask_id), int(m.pad_id), tuple(sorted(int(i) for i in m.special_ids)))

        mine, theirs = vocabulary(self.model), vocabulary(sampled)
        if mine != theirs:
            fields = "vocab_size, mask_id, pad_id, special_ids"
            raise ValueError(f"mhfast.sample: delayed: model_energy's model has ({fields}) = {mine}, the sampled "
                             f"model {theirs}: the surrogate's model must share the sampled model's vocabulary (the "
                             "same token ids)")

    def __call__(self, tokens: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """f32[n]: the small model's energy of each row of ``tokens`` (``pos`` is not used: see the class)."""
        from .scoring import energy  # (at call time: mhfast.scoring imports the sampler's options)
        try:
            e = energy(self.model, tokens, energy=self.energy, max_tokens_per_batch=self.max_tokens_per_batch,
                       backend=self.backend)
        except ValueError as err:  # (e.g. rows longer than its model takes: that message named neither)
            raise ValueError(f"mhfast.sample: delayed: model_energy's model cannot score the sampled rows: {err}"
                             ) from None
        return (e.e_raw if self.energy == "raw" else e.e_local).to(tokens.device)

    def __repr__(self) -> str:
        return f"model_energy({type(self.model).__name__}, energy={self.energy!r})"


def model_energy(model: Any, energy: str = "local", *, max_tokens_per_batch: int | None = None,
                 backend: str = "compiled") -> ModelEnergy:
    """A surrogate for ``mhfast.sample(..., delayed=...)`` from a smaller model with the same vocabulary (the same
    token ids, pad, mask and special tokens as the sampled model): its raw or local energy of the whole sequence.

    Args:
        model: an mhfast model adapter (anything :func:`mhfast.energy` accepts), unconditional.
        energy: "local" (the pseudo-log-likelihood, default) or "raw"; independent of the sampled run's energy.
        max_tokens_per_batch, backend: as :func:`mhfast.energy`.

    Example:
        >>> from mhfast.models.tabular import TabularMLM
        >>> s = model_energy(TabularMLM.random(3, 4, seed=1))
        >>> s(torch.tensor([[0, 1, 2, 0]]), torch.tensor([2])).shape
        torch.Size([1])
    """
    return ModelEnergy(model, energy, max_tokens_per_batch, backend)
