"""The input of one layer of a model's forward, captured by a pre-hook that stops the forward there.

The fast paths (:mod:`~mhfast.models.fast_forward`, :mod:`~mhfast.models.fast_encoder`) run a model's own body up
to its last layer and the last layer themselves, at the masked positions only. Stopping the body's own forward
keeps every detail of the stock model before that layer (embeddings, scaling, dropout off, padding masks) without
re-implementing it.

Why the hook checks the thread: it sits on a module the model shares. A second thread forwarding through the same
model meanwhile (a plain ``masked_logits``, or another fast path) ran into it: its hidden states went into the
first caller's capture and its own forward was stopped (a helper's review, 2026-12-02: 77 of 300 fast calls wrong
on a tiny BERT). The hook now acts only in the thread that registered it.

Example:
    >>> import torch
    >>> body = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU(), torch.nn.Linear(2, 1))
    >>> x, = layer_input(body[2], lambda: body(torch.ones(1, 2)), ("input",))
    >>> x.shape
    torch.Size([1, 2])
"""
from __future__ import annotations

import threading
from typing import Any, Callable

import torch


class _Stop(Exception):
    """Raised by the pre-hook once the layer's input is captured (the rest of the forward is not run)."""


def layer_input(layer: torch.nn.Module, run: Callable[[], Any], names: tuple[str, ...]) -> tuple:
    """``layer``'s first ``len(names)`` inputs (positional, else the keyword ``names[i]``; a missing optional one
    is None) in the forward that ``run()`` starts, which stops before ``layer`` runs."""
    owner = threading.get_ident()
    captured: list = []

    def capture(_module: Any, args: tuple, kwargs: dict) -> None:
        if threading.get_ident() != owner:
            return None  # another thread's forward through the shared model: not ours to stop
        captured.append(tuple(args[i] if len(args) > i else (kwargs[n] if i == 0 else kwargs.get(n))
                              for i, n in enumerate(names)))
        raise _Stop

    handle = layer.register_forward_pre_hook(capture, with_kwargs=True)
    try:
        run()
    except _Stop:
        pass
    finally:
        handle.remove()
    if not captured:
        raise RuntimeError(f"the forward did not reach {type(layer).__name__}, the layer whose input was asked for")
    return captured[0]
