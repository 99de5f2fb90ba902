"""The energy terms of the CLI flags ``--hamming`` and ``--classifier`` (shared by sample and translate).

The flags are declared in the option spec (:mod:`mhfast.sampler.options`, CLI-only entries); this
module turns them into ``extra_energy`` terms of :func:`mhfast.sample` (:mod:`mhfast.energy_terms`).

Example:
    >>> import argparse
    >>> args = argparse.Namespace(hamming=0.0, hamming_reference=None, classifier=None)
    >>> classifier_term(args, pad_id=0, decode=None) is None
    True
"""
from __future__ import annotations

import argparse
import os
from typing import Any, Callable, Sequence

import torch

from ..energy_terms import Hamming, HFClassifier


def reference_lines(args: argparse.Namespace, count: int, limit: int | None = None) -> list[str] | None:
    """The lines of ``--hamming-reference`` (one per input; the first ``limit`` with --limit), or None."""
    path = args.hamming_reference
    if path is None:
        return None
    from ..files import read_records

    lines = read_records(path, "--hamming-reference")[:limit]  # the line rule; bad UTF-8 names file and line
    if len(lines) != count:
        raise ValueError(f"--hamming-reference has {len(lines)} lines, expected one per input ({count})")
    return lines


def padded(rows: Sequence[torch.Tensor], pad_id: int) -> torch.Tensor:
    """Long[B, max length] of the rows, padded with ``pad_id``."""
    width = max(int(r.numel()) for r in rows)
    out = torch.full((len(rows), width), pad_id, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, :r.numel()] = r
    return out


def reference_names(args: argparse.Namespace, lines: Sequence[int]) -> list[str] | None:
    """How messages name the --hamming-reference lines ``lines`` (0-based): ``--hamming-reference 'r.txt': line 3``
    (None without --hamming-reference: the references are the inputs themselves)."""
    if args.hamming_reference is None:
        return None
    from ..files import line_of

    return [line_of(args.hamming_reference, "--hamming-reference", int(i) + 1) for i in lines]


def hamming_term(args: argparse.Namespace, references: torch.Tensor | None, pad_id: int,
                 names: Sequence[str] | None = None) -> Any:
    """``(Hamming(references), --hamming)`` when ``--hamming`` > 0, else None; ``names``: how messages name each
    reference row (a reference of another length than its sequence is an error naming it and both lengths)."""
    if not args.hamming:
        if args.hamming_reference is not None:
            raise ValueError("--hamming-reference needs --hamming WEIGHT > 0")
        return None
    if references is None:
        raise ValueError("--hamming needs --hamming-reference FILE (or, for mhfast sample, --init sequences)")
    return (Hamming(references, pad_id=pad_id, names=names), float(args.hamming))


def classifier_term(args: argparse.Namespace, pad_id: int, decode: Callable[[torch.Tensor], str] | None) -> Any:
    """``(HFClassifier(--classifier), --classifier-weight)``, or None without ``--classifier``.

    With a tokenizer saved beside the classifier and a model that can ``decode``, rows go to the
    classifier as text; otherwise the token ids are fed as they are (shared vocabulary).
    """
    if args.classifier is None:
        return None
    if not os.path.isdir(args.classifier):
        raise FileNotFoundError(f"--classifier: no such directory: {args.classifier!r}")
    given = args.classifier_label  # ('²'.isdigit(), yet int('²') fails)
    label: Any = int(given) if given.isascii() and given.isdigit() else given
    token_map = None
    if decode is not None and os.path.isfile(os.path.join(args.classifier, "tokenizer_config.json")):
        from ..models.hf import import_transformers

        tokenizer = import_transformers().AutoTokenizer.from_pretrained(args.classifier, local_files_only=True)
        token_map = text_token_map(tokenizer, decode)
    try:
        term = HFClassifier(args.classifier, label=label, token_map=token_map, pad_id=pad_id)
    except ValueError as e:  # (the class names its own argument: the command names the flag)
        if not str(e).startswith("HFClassifier: label"):  # (a path or a config may say "label" too)
            raise
        raise ValueError(f"--classifier-label {given!r}: {str(e).removeprefix('HFClassifier: ')}") from None
    return (term, float(args.classifier_weight))


def text_token_map(tokenizer: Any, decode: Callable[[torch.Tensor], str]) -> Callable[[torch.Tensor], Any]:
    """MLM rows -> the classifier's inputs through text: decode each row, tokenize the batch."""
    def to_inputs(tokens: torch.Tensor) -> dict:
        return dict(tokenizer([decode(row) for row in tokens], padding=True, return_tensors="pt"))
    return to_inputs


def extra_energy(*terms: Any) -> list | None:
    """The ``extra_energy`` argument from the terms that are on (None if none is)."""
    on = [t for t in terms if t is not None]
    return on or None
