"""Model adapters: the protocol (:mod:`.base`) and implementations for tabular, HuggingFace and fairseq models."""
from .base import ConditionalMaskedLM, FeatureMaskedLM, MaskedLM, RefinementModel, has_features

__all__ = ["MaskedLM", "FeatureMaskedLM", "ConditionalMaskedLM", "RefinementModel", "has_features"]
