"""Text -> token ids with word boundaries, for the model kinds ``mhfast score`` reads text for.

* HuggingFace models with a fast tokenizer: ``word_ids()`` of the encoding; with a slow tokenizer
  every token is its own word.
* AntiBERTy: every residue is a word (``[CLS]``/``[SEP]`` belong to none).
* A CMLM :class:`~mhfast.translation.Translator` (target side): SentencePiece pieces, a word starts
  at a piece beginning with ``▁`` (whitespace-tokenized input: every token is a word); the target
  row is ``[bos] + ids + [eos]`` as the sampler frames it.

Example:
    >>> enc = Encoded(torch.tensor([2, 7, 8, 3]), torch.tensor([-1, 0, 0, -1]), ["[CLS]", "ab", "##c", "[SEP]"],
    ...               ["abc"])
    >>> enc.num_words
    1
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..ids import id_row
from ..models.base import residue_letters


@dataclass(frozen=True)
class Encoded:
    """One sequence: ids Long[T], word_ids Long[T] (-1: no word), one string per position, the words;
    ``groups`` Long[T]: the word of each piece for within_word_l2r's masking, special pieces inside a word
    included (an ``<unk>`` piece of a SentencePiece word: not scored, yet masked while the word's earlier pieces
    are, as minicons masks by the tokenizer's word ids); None: ``word_ids``."""

    ids: torch.Tensor
    word_ids: torch.Tensor
    pieces: list[str]
    words: list[str]
    groups: torch.Tensor | None = None

    @property
    def mask_groups(self) -> torch.Tensor:
        return self.word_ids if self.groups is None else self.groups

    @property
    def num_words(self) -> int:
        return len(self.words)


def _from_ids(model: Any, ids: Any) -> Encoded:
    """Token ids given directly: every non-special token is its own word; an id outside the vocabulary is a
    ValueError (also one beyond 64 bits)."""
    ids = id_row(ids, vocab_size=int(model.vocab_size))
    special = {int(i) for i in model.special_ids} | {int(model.pad_id)}
    word, words, pieces = [], [], []
    for i in ids.tolist():
        piece = model.decode([i]) if callable(getattr(model, "decode", None)) and i not in special else str(i)
        pieces.append(piece or str(i))
        word.append(-1 if i in special else len(words))
        if i not in special:
            words.append(pieces[-1])
    return Encoded(ids, torch.tensor(word, dtype=torch.long), pieces, words)


def _antiberty(model: Any, text: str) -> Encoded:
    ids = model.encode(text)
    masked = (ids == model.mask_id).nonzero().flatten()
    if masked.numel():  # (named by its character: Sapiens reads 'X' as a mask too, which the message had not said)
        k = int(masked[0]) - 1
        raise ValueError(f"text: {residue_letters(text)[k]!r} at residue {k + 1} marks a masked residue, which cannot "
                         "be scored")
    n = ids.numel() - 2
    word = torch.tensor([-1] + list(range(n)) + [-1], dtype=torch.long)
    pieces = ["[CLS]"] + [model.id_to_token[int(i)] for i in ids[1:-1]] + ["[SEP]"]
    return Encoded(ids, word, pieces, pieces[1:-1])


def _hf(model: Any, text: str) -> Encoded:
    tok = model.tokenizer
    if tok is None:
        raise ValueError("text: this model has no tokenizer; give token ids instead")
    enc = tok(text)
    ids = list(enc["input_ids"])
    pieces = tok.convert_ids_to_tokens(ids)
    special = set(int(i) for i in model.special_ids)
    groups = None
    if getattr(tok, "is_fast", False):
        wids = [-1 if w is None or ids[k] in special else int(w) for k, w in enumerate(enc.word_ids())]
        groups = torch.tensor([-1 if w is None else int(w) for w in enc.word_ids()], dtype=torch.long)
        seen = sorted({w for w in wids if w >= 0})
        renum = {w: j for j, w in enumerate(seen)}  # words without a scored token are dropped
        words = []
        for w in seen:
            span = enc.word_to_chars(w)
            words.append(text[span.start:span.end] if span is not None else str(w))
        wids = [renum.get(w, -1) for w in wids]
    else:
        wids, words = [], []
        for k, i in enumerate(ids):
            wids.append(-1 if i in special else len(words))
            if i not in special:
                words.append(pieces[k])
    return Encoded(torch.tensor(ids, dtype=torch.long), torch.tensor(wids, dtype=torch.long), pieces, words, groups)


def encode_target(translator: Any, text: str) -> Encoded:
    """A CMLM target sentence: ``[bos] + pieces + [eos]``, words from SentencePiece's ``▁`` marks."""
    cmlm, processor = translator.cmlm, translator.processor
    pieces = processor.encode(text).split()
    unknown = [p for p in pieces if cmlm.tgt_dict.index(p) == cmlm.tgt_dict.unk()]
    if unknown:
        raise ValueError(f"text: {unknown[0]!r} is not in the target dictionary (it would be <unk>, the CMLM's mask)")
    ids = [cmlm.bos_id] + [cmlm.tgt_dict.index(p) for p in pieces] + [cmlm.eos_id]
    spm = processor.kind == "spm"
    wids, groups = [-1], []
    for p in pieces:
        if not groups or not spm or p.startswith("\u2581"):
            groups.append([])
        groups[-1].append(p)
        wids.append(len(groups) - 1)
    wids.append(-1)
    words = [processor.decode(g) for g in groups]
    return Encoded(torch.tensor(ids, dtype=torch.long), torch.tensor(wids, dtype=torch.long),
                   ["<s>"] + pieces + ["</s>"], words)


def encode(model: Any, item: Any) -> Encoded:
    """A text (str) or a token id sequence of ``model`` (a model protocol object or a Translator);
    an :class:`Encoded` is returned as it is."""
    if isinstance(item, Encoded):
        return item
    if hasattr(model, "cmlm") and hasattr(model, "processor"):
        if not isinstance(item, str):
            return _from_ids(model.cmlm, item)
        return encode_target(model, item)
    if not isinstance(item, str):
        return _from_ids(model, item)
    if hasattr(model, "id_to_token") and hasattr(model, "vocab"):  # AntiBERTy: residues are words
        return _antiberty(model, item)
    if callable(getattr(model, "predict_lengths", None)):  # its encode() is the SOURCE encoder (and a CMLM's
        # tokenizer attribute is a str -> str function, not HuggingFace's: it had failed "string indices ...")
        raise ValueError("text: give a conditional model as its Translator (mhfast.translation) or token ids")
    if hasattr(model, "tokenizer"):
        return _hf(model, item)
    if callable(getattr(model, "encode", None)):
        return _from_ids(model, model.encode(item))
    raise ValueError("text: this model has no tokenizer; give token ids instead")
