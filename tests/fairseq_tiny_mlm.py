"""Builds a tiny random RoBERTa masked_lm checkpoint with fairseq's own classes, as fairseq-train would save it.

The checkpoint holds ``args`` (an argparse.Namespace: task ``masked_lm``, the criterion and architecture named)
and ``model`` (the state dict), beside a ``dict.txt`` of 8 symbols, the layout of a real fairseq masked_lm
checkpoint (the Sapiens ones are the same), so the adapter is tested without the sapiens package. The weights
are fairseq's initialization scaled up (std 0.02 gives near-uniform conditionals; x25 gives peaked ones, so
MH rejects often and the tests have power), and the layer norms' weights and biases drawn away from fairseq's
1 and 0 (with those, a layer norm applied twice, or to the wrong tensor, changes nothing: a fast forward that
did so matched the full one here and not on Sapiens). Used by tests/models/test_fairseq_mlm.py.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch

SYMBOLS = list("abcdefgh")


def build(out_dir: str | Path, arch: str = "roberta_base", seed: int = 0, task: str = "masked_lm",
          criterion: str = "masked_lm", name_arch: str | None = None, layers: int = 2,
          symbols: list[str] | None = None) -> Path:
    """Write ``checkpoint.pt`` and ``dict.txt`` into ``out_dir``; returns the checkpoint's path.

    ``arch`` is the fairseq architecture the model is built with; ``name_arch``, ``task`` and ``criterion`` are
    what the checkpoint says it was (to test the adapter's checks on names); ``symbols`` the dictionary's
    (default :data:`SYMBOLS`)."""
    from fairseq.data import Dictionary
    from fairseq.models import ARCH_CONFIG_REGISTRY
    from fairseq.models.roberta import RobertaModel
    from fairseq.tasks.masked_lm import MaskedLMConfig, MaskedLMTask

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dictionary = Dictionary()
    for s in symbols or SYMBOLS:
        dictionary.add_symbol(s)
    dictionary.save(str(out / "dict.txt"))  # before <mask>: dict.txt holds the data's symbols only
    mlm_task = MaskedLMTask(MaskedLMConfig(data=str(out), tokens_per_sample=24), dictionary)
    args = argparse.Namespace(arch=arch, task="masked_lm", criterion=criterion, encoder_layers=layers,
                              encoder_embed_dim=32, encoder_ffn_embed_dim=64, encoder_attention_heads=4,
                              max_positions=24, tokens_per_sample=24, dropout=0.1, attention_dropout=0.1)
    ARCH_CONFIG_REGISTRY[arch](args)
    torch.manual_seed(seed)
    model = RobertaModel.build_model(args, mlm_task)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.mul_(25.0)
            elif "norm" in name:  # every layer norm (its weight and bias)
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.5 * torch.randn_like(p))
    args.task, args.arch = task, name_arch or arch  # what the checkpoint claims (the tests of names)
    path = out / "checkpoint.pt"
    history = [{"criterion_name": "MaskedLmLoss", "optimizer_name": "FairseqAdam", "lr_scheduler_state": {"best": None},
                "num_updates": 0}]  # what fairseq-train records (fairseq's own loader reads its last entry)
    torch.save({"args": args, "model": model.state_dict(), "optimizer_history": history,
                "extra_state": {"epoch": 1}}, path)
    return path

