"""Sapiens (Prihoda et al., "BioPhi", mAbs 2022): human antibody heavy- and light-chain masked LMs.

Two RoBERTa models (fairseq task ``masked_lm``, arch ``roberta_small``: 4 layers, d=128, 8 heads) trained on
human variable regions from the Observed Antibody Space, one for heavy chains (``"H"``) and one for light chains
(``"L"``, kappa and lambda), shipped in the ``sapiens`` package (``sapiens/models/v1/checkpoint_vh.pt``,
``checkpoint_vl.pt`` and their ``dict.txt``: the 4 fairseq specials, the 20 amino acids, then ``<mask>``).
:func:`load_sapiens` reads them with :func:`mhfast.models.fairseq_mlm.load_fairseq_mlm`, without importing the
package (whose import loads pandas and registers its own fairseq plugins); residues go in and out as one-letter
strings, as with AntiBERTy (:mod:`mhfast.models.antiberty`).

The sapiens package pins torch<2.5 in its metadata but runs on newer torch, so it is installed without its
dependencies: ``pip install --no-deps sapiens==1.0.5 pandas`` (fairseq, which it needs, separately).

Example:
    >>> from mhfast.models.sapiens import load_sapiens
    >>> lm = load_sapiens("H")                              # doctest: +SKIP
    >>> lm.encode("EVQL")                                   # doctest: +SKIP
    tensor([ 0,  7, 21, 17, 13,  2])
    >>> lm.decode(lm.encode("EV_QL"))                       # doctest: +SKIP
    'EV_QL'
"""
from __future__ import annotations

import importlib.util
import os
from typing import Sequence

import torch

from .base import AMINO_ACIDS, decode_ids, residue_letters
from .fairseq_mlm import FairseqMaskedLM, load_fairseq_mlm

INSTALL_COMMAND = "pip install --no-deps sapiens==1.0.5 pandas"
CHECKPOINTS = {"H": "checkpoint_vh.pt", "L": "checkpoint_vl.pt"}


def sapiens_dir(version: str = "v1") -> str:
    """``<site-packages>/sapiens/models/<version>`` without importing the package; an ImportError naming the
    install command when the package is missing."""
    spec = importlib.util.find_spec("sapiens")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"Sapiens needs the sapiens package: {INSTALL_COMMAND}")
    path = os.path.join(list(spec.submodule_search_locations)[0], "models", version)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"sapiens package found but its model folder {path} is missing")
    return path


def chain_name(chain: str) -> str:
    """``"H"`` or ``"L"`` from a chain argument (``"H"``, ``"heavy"``, ``"L"``, ``"K"``, ``"light"``, any case);
    ValueError naming the argument otherwise.

    >>> chain_name("heavy"), chain_name("k")
    ('H', 'L')
    """
    key = chain.strip().upper() if isinstance(chain, str) else None
    if key in ("H", "HEAVY", "VH"):
        return "H"
    if key in ("L", "K", "LIGHT", "VL", "KAPPA", "LAMBDA"):
        return "L"
    raise ValueError(f"chain: expected 'H' (heavy) or 'L' (light: kappa or lambda), got {chain!r}")


class SapiensMaskedLM(FairseqMaskedLM):
    """:class:`FairseqMaskedLM` for Sapiens, with a residue-level :meth:`encode`/:meth:`decode`.

    ``special_ids`` are ``<s> <pad> </s> <unk> <mask>``, so samples hold only the 20 amino acids.

    Attributes:
        chain: ``"H"`` or ``"L"``.
        vocab: ``{symbol: id}`` of the dictionary; ``id_to_token`` the reverse (a residue is its one letter).
    """

    def __init__(self, model, dictionary, device=None, dtype=None, chain: str = "H") -> None:
        super().__init__(model, dictionary, device=device, dtype=dtype)
        self.chain = chain_name(chain)
        self.vocab = {s: i for i, s in enumerate(self.symbols)}
        self.id_to_token = dict(enumerate(self.symbols))
        missing = [a for a in AMINO_ACIDS if a not in self.vocab]
        if missing:
            raise ValueError(f"dictionary: a Sapiens dictionary holds the 20 amino acids; missing {missing}")

    def encode(self, text: str) -> torch.Tensor:
        """``<s>`` + residues + ``</s>`` as Long[T+2]; ``_``, ``*`` or ``X`` marks a masked residue (``X`` and ``*``
        as in sapiens.predict_scores). Whitespace is ignored, letters upper-cased; another character is a
        ValueError naming it and its position."""
        if not isinstance(text, str):
            raise TypeError(f"text: expected a str of one-letter amino acids, got {type(text).__name__}")
        ids = [self.bos_id]
        for k, ch in enumerate(residue_letters(text)):
            if ch in "_*X":
                ids.append(self.mask_id)
            elif ch in AMINO_ACIDS:
                ids.append(self.vocab[ch])
            else:
                raise ValueError(f"text: {ch!r} at position {k} is not one of the 20 amino acids {AMINO_ACIDS}")
        if len(ids) + 1 > self.max_length:
            raise ValueError(f"text: {len(ids) - 1} residues, more than Sapiens' {self.max_length - 2} (give the "
                             "variable region only)")
        return torch.tensor(ids + [self.eos_id], dtype=torch.long)

    def decode(self, ids: torch.Tensor | Sequence[int]) -> str:
        """Residue string of ``ids`` (``<s>``/``</s>``/``<pad>`` dropped, ``<mask>`` as ``_``, ``<unk>`` as ``X``)."""
        out = []
        for i in decode_ids(ids, self.vocab_size):  # (an unknown id had shown as "?", 7.5 as residue 7)
            tok = self.id_to_token[i]
            if tok == "<mask>":
                out.append("_")
            elif tok == "<unk>":
                out.append("X")
            elif len(tok) == 1:
                out.append(tok)
        return "".join(out)


def load_sapiens(chain: str = "H", device: str | torch.device | None = None,
                 dtype: torch.dtype | None = None) -> SapiensMaskedLM:
    """The Sapiens heavy (``"H"``) or light (``"L"``) chain model from the installed sapiens package."""
    name = chain_name(chain)
    root = sapiens_dir()
    return load_fairseq_mlm(os.path.join(root, CHECKPOINTS[name]), os.path.join(root, "dict.txt"), device=device,
                            dtype=dtype, adapter=lambda m, d, device, dtype: SapiensMaskedLM(m, d, device, dtype,
                                                                                            chain=name))
