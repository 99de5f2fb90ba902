"""Scoring sequences with a masked LM: the paper's energies and pseudo-log-likelihoods, no sampling.

:func:`energy` (module ``api``): ``(e_raw, e_local)`` of token sequences, equal to what
:func:`mhfast.sample` reports; :func:`score` (module ``pll``): PLL, token/word scores and
pseudo-perplexity of texts, with minicons' ``within_word_l2r`` variant. Both chunk the masked copies
to a memory budget (module ``budget``) and use the model runner of :mod:`mhfast.runtime` and the compiled ops
(module ``terms``).
"""
from .api import Energies, energy
from .pll import SequenceScore, corpus_pppl, score

__all__ = ["energy", "Energies", "score", "SequenceScore", "corpus_pppl"]
