"""mhfast: correct and fast Metropolis-Hastings sampling from masked language models.

Implements Goyal, Dyer & Berg-Kirkpatrick (ICLR 2022), "Exposing the Implicit Energy Networks
behind Masked Language Models via Metropolis-Hastings", on compiled CPU/CUDA ops.
"""
from __future__ import annotations

# translation too: the docs write mhfast.translation.load_bundled_model() after import mhfast
from . import ops, reference, surrogates, translation
from ._C_loader import built_with_cuda
from .allocator import tune_cpu_allocator
from .mask_predict import MaskPredictResult, mask_predict
from .sampler import SampleResult, sample
from .scoring import Energies, SequenceScore, energy, score

__all__ = ["ops", "reference", "surrogates", "translation", "built_with_cuda", "sample", "SampleResult", "mask_predict", "MaskPredictResult",
           "energy", "Energies", "score", "SequenceScore", "tune_cpu_allocator"]
__version__ = "0.1.0"
