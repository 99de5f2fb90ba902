"""AntiBERTy (Ruffolo et al. 2021), the antibody-sequence BERT shipped in the ``antiberty`` package.

The package (antiberty==0.1.3) ships its weights in ``trained_models/AntiBERTy_md_smooth`` and a
25-entry ``trained_models/vocab.txt`` ([PAD] [UNK] [CLS] [SEP] [MASK] + the 20 amino acids). We load
the weights as a plain ``BertForMaskedLM`` (the MLM head is a standard BERT head; the species/chain/
graft heads are dropped) and build the residue <-> id map from vocab.txt ourselves: the package's
own tokenizer path (``BertTokenizer`` on space-separated residues) is not reliable under
transformers 5, and a sequence of one-letter residues needs no tokenizer.

Example:
    >>> from mhfast.models.antiberty import load_antiberty
    >>> lm = load_antiberty()                               # doctest: +SKIP
    >>> lm.encode("EVQL")                                   # doctest: +SKIP
    tensor([ 2,  8, 22, 18, 14,  3])
    >>> lm.decode(lm.encode("EVQL"))                        # doctest: +SKIP
    'EVQL'
"""
from __future__ import annotations

import importlib.util
import os
from typing import Sequence

import torch

from .base import AMINO_ACIDS, decode_ids, residue_letters
from .hf import HFMaskedLM, _loader_threads_joined, import_transformers, quiet_transformers

_CHECKPOINT = "AntiBERTy_md_smooth"


def antiberty_dir() -> str:
    """``<site-packages>/antiberty/trained_models`` without importing the package (its import pulls
    in its own model code, which we do not need)."""
    spec = importlib.util.find_spec("antiberty")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("AntiBERTy needs the antiberty package: pip install antiberty==0.1.3")
    path = os.path.join(list(spec.submodule_search_locations)[0], "trained_models")
    if not os.path.isdir(os.path.join(path, _CHECKPOINT)):
        raise FileNotFoundError(f"antiberty package found but {os.path.join(path, _CHECKPOINT)} is missing")
    return path


def read_vocab(path: str) -> dict[str, int]:
    """vocab.txt (one token per line, id = line number) -> {token: id}."""
    with open(path, encoding="utf-8") as f:
        tokens = [line.strip() for line in f if line.strip()]
    return {tok: i for i, tok in enumerate(tokens)}


class AntiBERTyMaskedLM(HFMaskedLM):
    """:class:`HFMaskedLM` for AntiBERTy with a residue-level :meth:`encode`/:meth:`decode`.

    ``special_ids`` are [PAD] [UNK] [CLS] [SEP] [MASK], so samples contain only the 20 amino acids.
    """

    def __init__(self, model, vocab: dict[str, int], **kwargs) -> None:
        self.vocab = dict(vocab)
        self.id_to_token = {i: t for t, i in self.vocab.items()}
        specials = [self.vocab[t] for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")]
        super().__init__(model, mask_id=self.vocab["[MASK]"], pad_id=self.vocab["[PAD]"], special_ids=specials,
                         bos_id=self.vocab["[CLS]"], eos_id=self.vocab["[SEP]"], **kwargs)

    def encode(self, text: str) -> torch.Tensor:
        """[CLS] + residues + [SEP] as Long[T+2]; ``_`` or ``*`` marks a masked residue (to be sampled).

        Whitespace is ignored and letters are upper-cased. Raises ValueError naming the first
        character that is not one of the 20 amino acids.
        """
        if not isinstance(text, str):
            raise TypeError(f"text: expected a str of one-letter amino acids, got {type(text).__name__}")
        ids = [self.bos_id]
        for k, ch in enumerate(residue_letters(text)):
            if ch in "_*":
                ids.append(self.mask_id)
            elif ch in AMINO_ACIDS:
                ids.append(self.vocab[ch])
            else:
                raise ValueError(f"text: {ch!r} at position {k} is not one of the 20 amino acids {AMINO_ACIDS}")
        ids.append(self.eos_id)
        return torch.tensor(ids, dtype=torch.long)

    def decode(self, ids: torch.Tensor | Sequence[int]) -> str:
        """Residue string of ``ids`` ([CLS]/[SEP]/[PAD] dropped, [MASK] shown as ``_``, [UNK] as ``X``)."""
        out = []
        for i in decode_ids(ids, self.vocab_size):  # (an unknown id had shown as "?", 7.5 as residue 7)
            tok = self.id_to_token[i]
            if tok == "[MASK]":
                out.append("_")
            elif tok == "[UNK]":
                out.append("X")
            elif len(tok) == 1:
                out.append(tok)
        return "".join(out)


def load_antiberty(device: str | torch.device | None = None, dtype: torch.dtype | None = None) -> AntiBERTyMaskedLM:
    """AntiBERTy's masked LM from the installed antiberty package, on ``device`` (default CPU)."""
    transformers = import_transformers()
    root = antiberty_dir()
    vocab = read_vocab(os.path.join(root, "vocab.txt"))
    with quiet_transformers(), _loader_threads_joined():
        model, info = transformers.BertForMaskedLM.from_pretrained(
            os.path.join(root, _CHECKPOINT), local_files_only=True, output_loading_info=True)
    missing = [k for k in info.get("missing_keys", ()) if "position_ids" not in k]
    if missing:  # would mean a randomly initialized head: refuse rather than sample nonsense
        raise RuntimeError(f"AntiBERTy checkpoint lacks weights: {missing}")
    if int(model.config.vocab_size) != len(vocab):
        raise RuntimeError(f"AntiBERTy vocab.txt has {len(vocab)} tokens but the model {model.config.vocab_size}")
    return AntiBERTyMaskedLM(model, vocab, device=device, dtype=dtype)
