"""``torch.compile`` of a masked LM's repeated blocks for the length of one run (the sampler's ``compile=True``).

Almost all of a forwarded row's time is in the model's repeated blocks (the encoder or decoder layers). Each
block is compiled on its own ("regional compilation": one graph per block class instead of one for the
whole model, so compile time is about that of a layer and graph breaks elsewhere in the adapter do not
matter), with dynamic shapes (the sampler's sub-batches change size and rows have many lengths), by
inductor, the default backend. What it can fuse is the elementwise work between the matmuls (GELU,
LayerNorm, residual adds, the attention's reshapes) and the Python of each layer call; the matmuls
themselves are the same library kernels. So it can pay where those are a sizeable part of the row, not
where the forward is bound by the matmuls, as on CPU: AntiBERTy at T=32 forwarded rows 0.97-1.03x as fast
with it in the sampler on an AMD EPYC (bench/bench_mixmatch.py --captures none compile) and its layers ran
0.93-1.01x as fast on an Intel Xeon (bench/bench_forward.py --compile-only; bench/RESULTS.md), for seconds
of compiling (inductor's on-disk cache keeps them for the next run); a 5-sentence translation with the
small bundled CMLM is slower with it. Not yet measured on a GPU, where launch-bound layers should gain.

The blocks are found as follows: a model (an adapter or a fast-forward wrapper) may say itself which of
its blocks a run calls, through the optional hook ``compiled_blocks()`` (a context manager that yields the
number of blocks it compiled): :class:`mhfast.models.fast_forward.LastLayerAtMask` compiles every encoder
layer but the last (which it runs piecewise, at the masked positions only) and
:class:`mhfast.models.fast_decoder.FastCMLMDecoder` its per-layer function. Any other model with a
``model`` attribute that is a ``torch.nn.Module`` (HuggingFace and AntiBERTy adapters, fairseq CMLMs with
``forward="full"``) gets each entry of every ``nn.ModuleList`` of two or more blocks of one class
compiled, in place (the list holds the compiled wrapper during the run and the original block after it,
also when the run raises). A model with no such blocks (e.g. a tabular test model) is an error: there is
nothing to compile. So is a compile that fails during the run (inductor without a working C++ compiler, say):
a :class:`CompileError` naming the cause, never a silent fall back to eager.

Compiled arithmetic is not bit-identical to eager (inductor fuses and reorders float operations: the
masked features differ by ~1e-6 relative), so the chains are those of the model as compiled, the same
target up to float rounding, as with ``forward="full"`` against ``"fast"``; MH is exact for the model as
evaluated.

Example:
    >>> import torch, transformers
    >>> from mhfast.models.hf import HFMaskedLM
    >>> cfg = transformers.BertConfig(vocab_size=8, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
    ...                               intermediate_size=32)
    >>> lm = HFMaskedLM(transformers.BertForMaskedLM(cfg), mask_id=4, pad_id=0, special_ids=(0, 1, 2, 3, 4))
    >>> layers = list(lm.model.bert.encoder.layer)
    >>> with compiled_blocks(lm) as report:
    ...     report.blocks, lm.model.bert.encoder.layer[0] is layers[0]
    (2, False)
    >>> all(a is b for a, b in zip(lm.model.bert.encoder.layer, layers))   # the original blocks again
    True
"""
from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator

import torch


class CompileError(RuntimeError):
    """torch.compile could not compile a block during the run (e.g. inductor found no working C++ compiler)."""


@dataclass
class CompileReport:
    """What :func:`compiled_blocks` did: ``blocks`` compiled, ``graphs`` compiled by torch (first calls and
    recompiles for new shapes) and ``seconds`` spent compiling them, by torch's compile callbacks, so far."""

    blocks: int = 0
    graphs: int = 0
    seconds: float = 0.0


def compile_block(block: Any) -> Any:
    """``block`` (a module or a function) compiled as a run compiles it: inductor, dynamic shapes."""
    return torch.compile(block, dynamic=True)


def repeated_blocks(module: torch.nn.Module, skip: tuple = ()) -> list[tuple[torch.nn.ModuleList, int]]:
    """(list, index) of every entry of each ``nn.ModuleList`` in ``module`` that holds two or more blocks of one
    class with parameters (a transformer's layers), except the modules in ``skip``."""
    found = []
    for sub in module.modules():
        if not isinstance(sub, torch.nn.ModuleList) or len(sub) < 2:
            continue
        kinds = {type(m) for m in sub}
        if len(kinds) != 1 or next(iter(sub.parameters()), None) is None:
            continue
        found += [(sub, i) for i, m in enumerate(sub) if not any(m is s for s in skip)]
    return found


@contextlib.contextmanager
def swapped_in(entries: list[tuple[torch.nn.ModuleList, int]]) -> Iterator[int]:
    """Inside: each listed block replaced by its compiled wrapper in its list; after: the original block."""
    originals = [(lst, i, lst[i]) for lst, i in entries]
    try:
        for lst, i, block in originals:
            lst[i] = compile_block(block)
        yield len(originals)
    finally:
        for lst, i, block in originals:
            lst[i] = block


@contextlib.contextmanager
def _timed(report: CompileReport) -> Iterator[None]:
    """Adds the compiles torch starts in this thread while inside to ``report`` (torch's compile callbacks; a torch
    without them leaves ``report.seconds`` NaN: unknown, not zero)."""
    try:
        from torch._dynamo.callback import callback_handler as handler
    except ImportError:
        handler = None
    hooks = ("register_start_callback", "register_end_callback", "remove_start_callback", "remove_end_callback")
    if handler is None or not all(callable(getattr(handler, h, None)) for h in hooks):
        report.seconds = float("nan")
        yield
        return
    thread, started = threading.get_ident(), []

    def start(_args: Any) -> None:
        if threading.get_ident() == thread:
            started.append(time.perf_counter())

    def end(_args: Any) -> None:
        if threading.get_ident() == thread and started:
            report.seconds += time.perf_counter() - started.pop()
            report.graphs += 1

    handler.register_start_callback(start)
    handler.register_end_callback(end)
    try:
        yield
    finally:
        handler.remove_start_callback(start)
        handler.remove_end_callback(end)


def _refuse_compiled(model: Any, context: str) -> None:
    """ValueError if ``model``'s module already holds compiled blocks: a second compile=True run while another is
    inside (or layers the user compiled) would compile the compiled wrappers, which torch returns as functions
    that a ModuleList refuses (it was a bare TypeError, "cannot assign ... as child module")."""
    module = getattr(model, "model", None)
    compiled = getattr(getattr(torch, "_dynamo", None), "eval_frame", None)
    compiled = getattr(compiled, "OptimizedModule", None)
    if compiled is None or not isinstance(module, torch.nn.Module):
        return
    if any(isinstance(m, compiled) for m in module.modules()):
        raise ValueError(f"{context}{type(model).__name__}'s blocks are compiled already (another compile=True run "
                         "on this model is inside, or its layers were torch.compile'd): run this one without compile")


@contextlib.contextmanager
def compiled_blocks(model: Any, context: str = "") -> Iterator[CompileReport]:
    """Inside: ``model``'s repeated blocks compiled (see the module docstring); yields a :class:`CompileReport`
    that keeps counting while inside. ValueError if the model has no blocks to compile, CompileError if a compile
    fails during the run; their messages start with ``context`` (the caller's name for the option)."""
    _refuse_compiled(model, context)
    hook = getattr(model, "compiled_blocks", None)
    if callable(hook):
        blocks = hook()
    else:
        module = getattr(model, "model", None)
        entries = repeated_blocks(module) if isinstance(module, torch.nn.Module) else []
        if not entries:
            raise ValueError(f"{context}{type(model).__name__} has no repeated blocks to compile (an nn.Module `model` "
                             "attribute holding a ModuleList of layers, or a compiled_blocks() hook)")
        blocks = swapped_in(entries)
    report = CompileReport()
    with blocks as count, _timed(report):
        if not count:
            raise ValueError(f"{context}{type(model).__name__} has no repeated blocks that its forward calls whole (a "
                             "one-layer model whose layer the fast forward runs piecewise): nothing to compile")
        report.blocks = int(count)
        try:
            yield report
        except torch._dynamo.exc.TorchDynamoException as e:  # compile-time failures (user errors pass unwrapped)
            detail = " ".join(str(e).split("\n\n")[0].split())[:300]
            what = f"{context}torch.compile of {type(model).__name__}'s blocks failed ({type(e).__name__}: {detail})"
            raise CompileError(f"{what}; run without compile (inductor on a CPU needs a working C++ compiler)") from e
