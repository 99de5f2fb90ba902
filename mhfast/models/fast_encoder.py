"""The last fairseq encoder layer at the masked positions only: the fast forward of fairseq masked LMs
(:mod:`mhfast.models.fairseq_mlm`; HuggingFace encoders: :mod:`mhfast.models.fast_forward`, CMLM decoders:
:mod:`mhfast.models.fast_decoder`).

The sampler and the scorer read one position of each masked row (or, through ``masked_features_at``, the few
masked positions of a block). After the last layer's self-attention nothing but those positions is used, so
that layer computes keys and values of every position (the read position attends to all of them) and its
query, attention output, residuals, layer norms and feed-forward block at the read positions only. For
Sapiens (4 layers) that is most of a quarter of the encoder.

The arithmetic is the layer's own: its modules (``self_attn.q_proj``/``k_proj``/``v_proj``/``out_proj``,
``self_attn_layer_norm``, ``fc1``/``fc2``, ``final_layer_norm``, the activation), fairseq's residual order and
``normalize_before`` placement, ``q * head_dim**-0.5``; only the softmax-weighted sum is
``scaled_dot_product_attention`` (fairseq: bmm + softmax), so features agree to float rounding and the chains
are the same (tests). The layers before the last run as fairseq runs them (the encoder's own forward, stopped
by a hook at the last layer's input). It applies only where that is exactly the model: a
``TransformerEncoderLayer`` of fairseq in eval mode, plain attention (no bias/zero-attention keys, default
scaling), the stock residual connection; anything else keeps the adapter (:func:`fast_encoder_model`).

Example:
    >>> from mhfast.models.fast_encoder import fast_encoder_model
    >>> fast = fast_encoder_model(lm)                                  # doctest: +SKIP
    >>> fast.masked_logits(rows, positions)     # the same logits, less work   # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any

import torch

from .base import check_positions, check_reads
from .fairseq_mlm import FairseqMaskedLM
from .fast_decoder import _attend, _attention_ok, _heads

_LAYERS = ("TransformerEncoderLayerBase", "TransformerEncoderLayer")


def _last_layer(lm: Any) -> Any | None:
    """The encoder's last layer when the fast path is exactly it, else None."""
    encoder = getattr(lm, "encoder", None)
    if not isinstance(lm, FairseqMaskedLM) or encoder is None or lm.model.training:
        return None
    layers = getattr(encoder, "layers", None)
    if not layers or type(layers[-1]).__name__ not in _LAYERS:
        return None
    from fairseq.modules.transformer_layer import TransformerEncoderLayerBase

    last = layers[-1]
    # a subclass that changes the forward or the residual would not be the layer computed below
    stock = isinstance(last, TransformerEncoderLayerBase) and all(
        getattr(type(last), f) is getattr(TransformerEncoderLayerBase, f) for f in ("forward", "residual_connection"))
    needed = ("self_attn_layer_norm", "final_layer_norm", "fc1", "fc2", "activation_fn", "normalize_before")
    if not stock or not all(hasattr(last, a) for a in needed) or not _attention_ok(last.self_attn):
        return None
    return last


class LastEncoderLayerAtMask:
    """A :class:`~mhfast.models.fairseq_mlm.FairseqMaskedLM` whose masked reads run its last encoder layer at the
    read positions only (see the module docstring)."""

    def __init__(self, lm: FairseqMaskedLM, last: Any):
        self.lm, self.last = lm, last
        for a in ("vocab_size", "mask_id", "pad_id", "special_ids", "model", "static_inputs"):
            setattr(self, a, getattr(lm, a))
        self.output_layer = lm.output_layer

    @property
    def device(self) -> torch.device:
        """The adapter's, read at each call (a copy taken when the wrapper was built went stale after
        ``lm.model.to(...)``)."""
        return self.lm.device

    def compiled_blocks(self) -> Any:
        """The optional hook of :func:`mhfast.models.compiled_blocks.compiled_blocks`: every encoder layer but the
        last (which runs here in pieces, at the read positions) compiled while inside."""
        from .compiled_blocks import repeated_blocks, swapped_in

        return swapped_in(repeated_blocks(self.model, skip=(self.last,)))

    def masked_logits(self, tokens: torch.Tensor, positions: torch.Tensor, context: Any = None,
                      context_index: torch.Tensor | None = None) -> torch.Tensor:
        return self.output_layer(self.masked_features(tokens, positions, context, context_index))

    def masked_features(self, tokens: torch.Tensor, positions: torch.Tensor, context: Any = None,
                        context_index: torch.Tensor | None = None) -> torch.Tensor:
        check_positions(tokens, positions)
        return self._features(tokens, None, positions, context, context_index)

    def masked_logits_at(self, tokens: torch.Tensor, row_index: torch.Tensor, positions: torch.Tensor,
                         context: Any = None, context_index: torch.Tensor | None = None) -> torch.Tensor:
        return self.output_layer(self.masked_features_at(tokens, row_index, positions, context, context_index))

    def masked_features_at(self, tokens: torch.Tensor, row_index: torch.Tensor, positions: torch.Tensor,
                           context: Any = None, context_index: torch.Tensor | None = None) -> torch.Tensor:
        """Several masked positions of a row from one forward (the adapter's hook), the last layer at those only."""
        return self._features(tokens, row_index, positions, context, context_index)

    @torch.no_grad()
    def _features(self, tokens: torch.Tensor, rows: torch.Tensor | None, positions: torch.Tensor, context: Any,
                  context_index: Any) -> torch.Tensor:
        lm = self.lm
        tokens = lm._prepare(tokens, context, context_index)
        if lm._static_inputs is None:
            check_reads(rows if rows is not None else torch.arange(tokens.shape[0]), positions, tokens.shape[0],
                        tokens.shape[1])
        positions = positions.to(tokens.device)
        rows = rows.to(tokens.device) if rows is not None else None
        if positions.numel() == 0:
            return torch.zeros(0, lm.width, device=lm.device, dtype=lm.dtype)
        x, padding = self._last_input(tokens)
        return self._last_at(x, padding, rows, positions)

    def _last_input(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The last layer's input [T, R, d] and the key padding mask it gets (None: no padding), as the
        encoder's own forward computes them (:meth:`FairseqMaskedLM.run_encoder`, sync-free under static_inputs)."""
        return self.lm.run_encoder(tokens, stop_before=self.last)

    def _last_at(self, x: torch.Tensor, padding: torch.Tensor | None, rows: torch.Tensor | None,
                 positions: torch.Tensor) -> torch.Tensor:
        """The last layer's output at ``positions[n]`` of row ``rows[n]`` (None: row n) of ``x`` [T, R, d], then
        the encoder's final layer norm if it has one: [N, d]."""
        layer, sa = self.last, self.last.self_attn
        x = x.transpose(0, 1)  # [R, T, d]
        pre = layer.normalize_before
        h = layer.self_attn_layer_norm(x) if pre else x
        k, v = _heads(sa.k_proj(h), sa), _heads(sa.v_proj(h), sa)  # [R, H, T, hd]
        keep = (~padding)[:, None, None, :] if padding is not None else None
        if rows is None:
            rows = torch.arange(x.shape[0], device=x.device)
        else:  # several reads of one row: its keys and values repeated per read
            k, v = k.index_select(0, rows), v.index_select(0, rows)
            keep = keep.index_select(0, rows) if keep is not None else None
        y = x[rows, positions][:, None] + _attend(sa, h[rows, positions][:, None], k, v, keep)
        x = y if pre else layer.self_attn_layer_norm(y)
        h = layer.final_layer_norm(x) if pre else x
        y = x + layer.fc2(layer.activation_fn(layer.fc1(h)))
        x = (y if pre else layer.final_layer_norm(y))[:, 0]
        return self.lm.encoder.layer_norm(x) if self.lm.encoder.layer_norm is not None else x


def fast_encoder_model(lm: Any) -> Any:
    """``lm`` wrapped in :class:`LastEncoderLayerAtMask` when that is exact for it, else ``lm`` itself."""
    last = _last_layer(lm)
    return LastEncoderLayerAtMask(lm, last) if last is not None else lm
