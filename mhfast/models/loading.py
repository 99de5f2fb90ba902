"""``load_masked_lm``: one entry point from a name, a directory or a model object to the model protocol.

It lives apart from the adapters so that each adapter imports only what it wraps (``antiberty``
builds on ``hf``; this module imports both; neither imports it): no import cycles.

Names: ``"antiberty"``, ``"sapiens-h"`` / ``"sapiens-l"`` (the Sapiens heavy/light-chain models of the sapiens
package), a fairseq masked_lm checkpoint file (its ``dict.txt`` beside it), a local HuggingFace model directory,
or a HuggingFace hub id
(``"bert-base-cased"``, ``"facebook/esm2_t6_8M_UR50D"``). A hub id resolves as ``from_pretrained``
resolves it: through the local HuggingFace cache (``HF_HUB_CACHE`` / ``HF_HOME``) first, then the
network unless ``HF_HUB_OFFLINE=1``; when it is neither cached nor downloadable, one
:class:`FileNotFoundError` says so (and how to get it).
"""
from __future__ import annotations

import os
import re
from typing import Any

from .antiberty import load_antiberty
from .base import MaskedLM
from .hf import HFMaskedLM, _load_tokenizer, import_transformers

#: Model names load_masked_lm knows (besides paths and hub ids), lower case.
SAPIENS_NAMES = {"sapiens-h": "H", "sapiens-l": "L"}

#: The files a masked LM needs from a hub repository (weights in either format, config, tokenizer).
_HUB_FILES = ["config.json", "*.safetensors", "pytorch_model.bin", "*.json", "*.txt", "*.model"]
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")


def resolve_hub_id(name: str, cache_dir: str | os.PathLike | None = None, option: str = "model") -> str:
    """The local snapshot directory of HuggingFace hub id ``name`` (cache first, then the network).

    Raises FileNotFoundError naming ``option`` when ``name`` is not cached and cannot be
    downloaded (no network, ``HF_HUB_OFFLINE=1``, or no such repository).

    Example:
        >>> resolve_hub_id("bert-base-cased")        # doctest: +SKIP
        '/root/.cache/huggingface/hub/models--bert-base-cased/snapshots/cd5ef92a9fb2f889e972770a36d4ed042daf221e'
    """
    if not _HUB_ID.match(name) or ".." in name:
        raise FileNotFoundError(f"{option}: {name!r} is not an existing path, 'antiberty', 'sapiens-h', 'sapiens-l', "
                                "nor a HuggingFace hub id")
    try:
        from huggingface_hub import constants, snapshot_download
    except ImportError:  # pragma: no cover - installed with transformers
        raise ImportError(f"{option}: resolving the hub id {name!r} needs huggingface_hub (pip install "
                          "transformers)") from None
    cache = os.fspath(cache_dir) if cache_dir is not None else constants.HF_HUB_CACHE
    try:  # the cache alone first: no network call at all when the model is there
        return snapshot_download(name, cache_dir=cache, local_files_only=True)
    except Exception:  # noqa: BLE001 - any miss (not cached, partial snapshot) goes on to the download
        pass
    offline = os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE") or constants.HF_HUB_OFFLINE
    why = "HF_HUB_OFFLINE is set"
    if not offline:
        try:
            return snapshot_download(name, cache_dir=cache, allow_patterns=_HUB_FILES)
        except Exception as e:  # noqa: BLE001 - connection, 404, auth: all end in the one message below
            why = f"the download failed: {' '.join(str(e).split())[:160]}"
    raise FileNotFoundError(
        f"{option}: {name!r} is not a local directory and not in the HuggingFace cache ({cache}), and {why}; "
        f"download it where there is network (huggingface-cli download {name}) and copy the cache, or pass a "
        "local model directory")


def _wrap_model_object(model: Any, **kwargs: Any) -> HFMaskedLM:
    """A transformers model object; without explicit ids, the tokenizer saved where it was loaded from."""
    if "tokenizer" not in kwargs and not {"mask_id", "pad_id"} <= kwargs.keys():
        where = getattr(model, "name_or_path", "") or ""
        if where and not os.path.isdir(where):
            try:
                where = resolve_hub_id(where)
            except (FileNotFoundError, ImportError):
                where = ""
        tokenizer = _load_tokenizer(where) if where and os.path.isdir(where) else None
        if tokenizer is not None:
            kwargs["tokenizer"] = tokenizer
    return HFMaskedLM(model, **kwargs)


#: Endings of the files of a HuggingFace model directory (a fairseq checkpoint beside a config.json is still one).
_HF_FILES = (".json", ".safetensors", ".bin", ".txt", ".model", ".msgpack", ".h5")


def load_masked_lm(model: Any, **kwargs: Any) -> Any:
    """Anything mhfast can sample from, from a user's argument.

    Accepts: an object already implementing :class:`mhfast.models.base.MaskedLM` (returned as is),
    a ``transformers`` ``*ForMaskedLM`` model object (its tokenizer is looked up where it was
    loaded from, ``model.name_or_path``), a local HuggingFace model directory, a HuggingFace hub
    id (see :func:`resolve_hub_id`), the name ``"antiberty"`` (the model shipped in the antiberty
    package), ``"sapiens-h"`` / ``"sapiens-l"`` (:func:`mhfast.models.sapiens.load_sapiens`), or a fairseq
    masked_lm checkpoint file with its ``dict.txt`` beside it (:func:`mhfast.models.fairseq_mlm.load_fairseq_mlm`).
    ``kwargs`` go to :class:`HFMaskedLM` (``device``/``dtype`` to every loader).

    Example:
        >>> lm = load_masked_lm("antiberty")      # doctest: +SKIP
        >>> lm.decode(lm.encode("EVQLV"))          # doctest: +SKIP
        'EVQLV'
    """
    if isinstance(model, (str, os.PathLike)):
        named = isinstance(model, str) and not os.path.exists(model) and \
            (model.lower() == "antiberty" or model.lower() in SAPIENS_NAMES)
        if named and set(kwargs) - {"device", "dtype"}:  # the named models' loaders take these two only
            raise TypeError(f"model: {model!r} takes only device= and dtype=, got "
                            f"{', '.join(sorted(set(kwargs) - {'device', 'dtype'}))}")
        if named and model.lower() == "antiberty":
            return load_antiberty(**kwargs)
        if named:
            from .sapiens import load_sapiens  # fairseq is imported only when a fairseq model is asked for

            return load_sapiens(SAPIENS_NAMES[model.lower()], **kwargs)
        if os.path.isfile(model):  # a file, not a model directory: a fairseq checkpoint, unless it is a part of one
            name = os.path.basename(os.fspath(model))
            if name.endswith(_HF_FILES) and os.path.isfile(os.path.join(os.path.dirname(os.path.abspath(model)),
                                                                       "config.json")):
                raise ValueError(f"model: {os.fspath(model)!r} is a file of a HuggingFace model directory; pass the "
                                 f"directory ({os.path.dirname(os.path.abspath(model))!r})")
            from .fairseq_mlm import load_fairseq_mlm

            return load_fairseq_mlm(model, **kwargs)
        if isinstance(model, str) and not os.path.exists(model):
            return HFMaskedLM(resolve_hub_id(model), **kwargs)
        return HFMaskedLM(model, **kwargs)
    try:
        transformers = import_transformers()
    except ImportError:
        transformers = None
    if transformers is not None and isinstance(model, transformers.PreTrainedModel):
        return _wrap_model_object(model, **kwargs)
    if isinstance(model, MaskedLM):
        return model
    raise TypeError(f"model: unsupported {type(model).__name__}; expected an object implementing "
                    "mhfast.models.base.MaskedLM, a transformers *ForMaskedLM model, a local HuggingFace "
                    "model directory, a fairseq masked_lm checkpoint file, a HuggingFace hub id, 'antiberty', "
                    "'sapiens-h' or 'sapiens-l'")
