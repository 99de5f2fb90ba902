"""``load_masked_lm``: one entry point from a name, a directory or a model object to the model protocol.

It lives apart from the adapters so that each adapter imports only what it wraps (``antiberty``
builds on ``hf``; this module imports both; neither imports it): no import cycles.
"""
from __future__ import annotations

import os
from typing import Any

from .antiberty import load_antiberty
from .base import MaskedLM
from .hf import HFMaskedLM, _transformers


def load_masked_lm(model: Any, **kwargs: Any) -> Any:
    """Anything mhfast can sample from, from a user's argument.

    Accepts: an object already implementing :class:`mhfast.models.base.MaskedLM` (returned as is),
    a ``transformers`` ``*ForMaskedLM`` model object, a local HuggingFace model directory, or the
    name ``"antiberty"`` (the model shipped in the antiberty package). ``kwargs`` go to
    :class:`HFMaskedLM`.

    Example:
        >>> lm = load_masked_lm("antiberty")      # doctest: +SKIP
        >>> lm.decode(lm.encode("EVQLV"))          # doctest: +SKIP
        'EVQLV'
    """
    if isinstance(model, (str, os.PathLike)):
        if isinstance(model, str) and model.lower() == "antiberty" and not os.path.exists(model):
            return load_antiberty(**kwargs)
        return HFMaskedLM(model, **kwargs)
    try:
        transformers = _transformers()
    except ImportError:
        transformers = None
    if transformers is not None and isinstance(model, transformers.PreTrainedModel):
        return HFMaskedLM(model, **kwargs)
    if isinstance(model, MaskedLM):
        return model
    raise TypeError(f"model: unsupported {type(model).__name__}; expected an object implementing "
                    "mhfast.models.base.MaskedLM, a transformers *ForMaskedLM model, a local HuggingFace "
                    "model directory, or 'antiberty'")
