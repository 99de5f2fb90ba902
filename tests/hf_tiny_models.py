"""Tiny randomly initialized transformers masked LMs for fast adapter/sampler/CLI tests.

Every model has the same 12-token vocabulary: 5 specials then 7 "words" a..g, so a
BertTokenizer built from ``VOCAB`` works for all of them; RoBERTa-style models use
pad 1 / bos 0 / eos 2 as in fairseq, the rest BERT ids.

Example:
    >>> model = tiny_model("bert")
    >>> model.config.num_hidden_layers
    2
"""
from __future__ import annotations

import os

import torch
import transformers

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c", "d", "e", "f", "g"]
BERT_IDS = dict(pad_id=0, mask_id=4, bos_id=2, eos_id=3, special_ids=(0, 1, 2, 3, 4))
# fairseq/RoBERTa convention: <s>=0 <pad>=1 </s>=2; <mask> reuses id 4 here.
ROBERTA_IDS = dict(pad_id=1, mask_id=4, bos_id=0, eos_id=2, special_ids=(0, 1, 2, 3, 4))
WORDS = list(range(5, 12))

# initializer_range=1 (not the usual 0.02): with small random weights the masked conditionals hardly
# depend on the context, the MLM is then almost a consistent product distribution and MH accepts
# everything, which would hide bugs; large weights give peaked, context-dependent conditionals.
_SMALL = dict(vocab_size=len(VOCAB), num_attention_heads=2, intermediate_size=32, max_position_embeddings=40,
              initializer_range=1.0)


def tiny_model(kind: str, seed: int = 0) -> transformers.PreTrainedModel:
    """A random ``*ForMaskedLM`` of kind bert|roberta|distilbert|electra|albert|esm (d=16, 2 layers)."""
    torch.manual_seed(seed)
    if kind == "bert":
        model = transformers.BertForMaskedLM(transformers.BertConfig(
            hidden_size=16, num_hidden_layers=2, pad_token_id=0, **_SMALL))
    elif kind == "roberta":
        model = transformers.RobertaForMaskedLM(transformers.RobertaConfig(
            hidden_size=16, num_hidden_layers=2, pad_token_id=1, bos_token_id=0, eos_token_id=2, **_SMALL))
    elif kind == "distilbert":
        model = transformers.DistilBertForMaskedLM(transformers.DistilBertConfig(
            vocab_size=len(VOCAB), dim=16, n_layers=2, n_heads=2, hidden_dim=32, max_position_embeddings=40,
            pad_token_id=0, initializer_range=1.0))
    elif kind == "electra":  # embedding_size != hidden_size exercises ELECTRA's projections
        model = transformers.ElectraForMaskedLM(transformers.ElectraConfig(
            embedding_size=8, hidden_size=16, num_hidden_layers=2, pad_token_id=0, **_SMALL))
    elif kind == "albert":
        model = transformers.AlbertForMaskedLM(transformers.AlbertConfig(
            embedding_size=8, hidden_size=16, num_hidden_layers=2, pad_token_id=0, **_SMALL))
    elif kind == "esm":
        model = transformers.EsmForMaskedLM(transformers.EsmConfig(
            hidden_size=16, num_hidden_layers=2, pad_token_id=1, mask_token_id=4,
            position_embedding_type="rotary", **_SMALL))
    else:
        raise ValueError(f"kind: unknown tiny model {kind!r}")
    return model.eval()


def ids_for(kind: str) -> dict:
    return ROBERTA_IDS if kind in ("roberta", "esm") else BERT_IDS


def save_tiny_bert_dir(path: str | os.PathLike, seed: int = 0) -> str:
    """A local model directory (weights + BertTokenizer) as ``save_pretrained`` writes it."""
    path = os.fspath(path)
    tiny_model("bert", seed).save_pretrained(path)
    vocab = {w: i for i, w in enumerate(VOCAB)}
    transformers.BertTokenizer(vocab=vocab, do_lower_case=False).save_pretrained(path)
    return path


# The same 12 ids, with word pieces: "ab ca d" is 5 tokens (a ##b c ##a d) in 3 words, so token and word scores,
# counts and pseudo-perplexities differ, and within_word_l2r differs from original.
WORDPIECE_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c", "##a", "##b", "##c", "d"]


def wordpiece_tokenizer() -> transformers.BertTokenizerFast:
    """A fast tokenizer (it has ``word_ids``) over :data:`WORDPIECE_VOCAB`."""
    return transformers.BertTokenizerFast(vocab={w: i for i, w in enumerate(WORDPIECE_VOCAB)}, do_lower_case=False)


def save_tiny_wordpiece_dir(path: str | os.PathLike, seed: int = 2) -> str:
    """A local model directory of :func:`tiny_model` ("bert") with :func:`wordpiece_tokenizer`."""
    path = os.fspath(path)
    tiny_model("bert", seed).save_pretrained(path)
    wordpiece_tokenizer().save_pretrained(path)
    return path
