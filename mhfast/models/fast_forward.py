"""The last encoder layer at the masked positions only: the sampler's and scorer's fast forward for BERT-family models
(fairseq CMLM decoders: :mod:`mhfast.models.fast_decoder`).

A masked copy is read at ONE position (or, through ``masked_features_at``, at the few masked positions
of a block), so after the last attention nothing but those positions is needed. The HF adapter
already applies the LM head there only; this wrapper goes one step
earlier: the last layer computes keys and values of every position (the masked position attends to
all of them) but its query, attention output projection and feed-forward block only at the masked
position. For BERT-base that removes 10/12 of the last layer's per-token matrix work (about 7% of
the body) on top of the head.

It applies only where it is exactly the layer's own computation: ``BertLayer``-shaped encoder
layers (BERT, RoBERTa, XLM-R, CamemBERT; AntiBERTy is a BERT) with absolute position embeddings,
no decoder/cross-attention, eager or SDPA attention, in eval mode. Every piece used is the layer's
own module (``query``/``key``/``value``, ``attention.output``, ``feed_forward_chunk``); only the
attention softmax is ``scaled_dot_product_attention`` with the mask HF built for that layer,
captured by a forward pre-hook. Anything else keeps the adapter as it is (:func:`fast_forward_model`).

Example:
    >>> import torch, transformers
    >>> from mhfast.models.hf import HFMaskedLM
    >>> cfg = transformers.BertConfig(vocab_size=8, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
    ...                               intermediate_size=32)
    >>> lm = HFMaskedLM(transformers.BertForMaskedLM(cfg), mask_id=4, pad_id=0, special_ids=(0, 1, 2, 3, 4))
    >>> fast = fast_forward_model(lm)
    >>> rows, pos = torch.tensor([[2, 4, 6, 3]]), torch.tensor([1])
    >>> torch.allclose(fast.masked_logits(rows, pos), lm.masked_logits(rows, pos), atol=1e-5)
    True
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from .layer_input import layer_input

_LAYERS = ("BertLayer", "RobertaLayer", "XLMRobertaLayer", "CamembertLayer")


def _last_layer(lm: Any) -> Any | None:
    """The body's last encoder layer when the fast path is exact for it, else None."""
    model = getattr(lm, "model", None)
    body, head = getattr(lm, "_body", None), getattr(lm, "_head", None)
    if model is None or body is None or head is None or model.training:
        return None
    config = model.config
    if getattr(config, "is_decoder", False) or getattr(config, "add_cross_attention", False):
        return None
    if getattr(config, "position_embedding_type", "absolute") != "absolute":
        return None
    if getattr(config, "_attn_implementation", "eager") not in ("eager", "sdpa"):
        return None
    layers = getattr(getattr(body, "encoder", None), "layer", None)
    if layers is None or len(layers) == 0 or type(layers[-1]).__name__ not in _LAYERS:
        return None
    last = layers[-1]
    sa = getattr(getattr(last, "attention", None), "self", None)
    needed = ("query", "key", "value", "scaling", "num_attention_heads", "attention_head_size")
    if sa is None or not all(hasattr(sa, a) for a in needed) or not callable(getattr(last, "feed_forward_chunk", None)):
        return None
    return last


class LastLayerAtMask:
    """An HFMaskedLM whose ``masked_features`` runs the last layer at the masked positions only."""

    def __init__(self, lm: Any, last: Any):
        self.lm, self.last = lm, last
        for a in ("vocab_size", "mask_id", "pad_id", "special_ids"):
            setattr(self, a, getattr(lm, a))
        self.model = lm.model
        self.output_layer = lm.output_layer
        self.static_inputs = lm.static_inputs  # the body's _prepare is the adapter's

    @property
    def device(self) -> torch.device:
        """The adapter's, read at each call (a copy taken when the wrapper was built went stale after
        ``lm.model.to(...)``)."""
        return self.lm.device

    def compiled_blocks(self) -> Any:
        """The optional hook of :func:`mhfast.models.compiled_blocks.compiled_blocks`: every encoder layer but the
        last (which runs here in pieces, at the masked positions) compiled while inside."""
        from .compiled_blocks import repeated_blocks, swapped_in

        return swapped_in(repeated_blocks(self.model, skip=(self.last,)))

    def masked_logits(self, tokens: torch.Tensor, positions: torch.Tensor, context: Any = None,
                      context_index: torch.Tensor | None = None) -> torch.Tensor:
        return self.output_layer(self.masked_features(tokens, positions, context, context_index))

    @torch.no_grad()
    def masked_features(self, tokens: torch.Tensor, positions: torch.Tensor, context: Any = None,
                        context_index: torch.Tensor | None = None) -> torch.Tensor:
        tokens, positions, attention_mask = self.lm._prepare(tokens, positions, context, context_index)
        N = tokens.shape[0]
        if N == 0:
            return self.lm.masked_features(tokens, positions)
        hidden, mask = self._last_input(tokens, attention_mask)
        return self._last_at(hidden, None, positions, mask)

    def masked_logits_at(self, tokens: torch.Tensor, row_index: torch.Tensor, positions: torch.Tensor,
                         context: Any = None, context_index: torch.Tensor | None = None) -> torch.Tensor:
        return self.output_layer(self.masked_features_at(tokens, row_index, positions, context, context_index))

    @torch.no_grad()
    def masked_features_at(self, tokens: torch.Tensor, row_index: torch.Tensor, positions: torch.Tensor,
                           context: Any = None, context_index: torch.Tensor | None = None) -> torch.Tensor:
        """Several masked positions of one row from one forward (the adapter's hook), last layer at those only."""
        tokens, row_index, positions, attention_mask = self.lm._prepare_at(tokens, row_index, positions, context,
                                                                           context_index)
        if row_index.shape[0] == 0:
            return self.lm.masked_features_at(tokens, row_index, positions)
        hidden, mask = self._last_input(tokens, attention_mask)
        return self._last_at(hidden, row_index, positions, mask)

    def _last_input(self, tokens: torch.Tensor, attention_mask: torch.Tensor | None) -> tuple[torch.Tensor, Any]:
        """The last layer's input hidden states [R, T, d] and attention mask (the body stops before it)."""
        return layer_input(self.last, lambda: self.lm._body(input_ids=tokens, attention_mask=attention_mask),
                           ("hidden_states", "attention_mask"))

    def _last_at(self, hidden: torch.Tensor, rows: torch.Tensor | None, positions: torch.Tensor,
                 mask: torch.Tensor | None) -> torch.Tensor:
        """The last layer's output at ``positions[n]`` of row ``rows[n]`` (None: row n) of ``hidden`` [R, T, d]:
        [N, d]. Keys and values are computed once per row, the query only at the read positions."""
        sa = self.last.attention.self
        R, T, _ = hidden.shape
        H, hd = sa.num_attention_heads, sa.attention_head_size
        k = sa.key(hidden).view(R, T, H, hd).transpose(1, 2)
        v = sa.value(hidden).view(R, T, H, hd).transpose(1, 2)
        if rows is None:
            rows = torch.arange(R, device=hidden.device)
        else:  # several reads of one row: its keys and values repeated per read
            k, v = k.index_select(0, rows), v.index_select(0, rows)
            if mask is not None:
                mask = mask.expand(R, -1, -1, -1).index_select(0, rows)
        N = rows.shape[0]
        here = hidden[rows, positions]  # [N, d]
        q = sa.query(here).view(N, 1, H, hd).transpose(1, 2)
        if mask is not None:  # [N or 1, 1, T or 1, T]: keep the query row of each read position
            mask = mask.expand(N, -1, -1, -1)
            mask = mask[torch.arange(N, device=hidden.device), :, positions][:, :, None, :] if mask.shape[2] != 1 \
                else mask
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=sa.scaling)
        out = self.last.attention.output(out.transpose(1, 2).reshape(N, 1, H * hd), here[:, None, :])
        return self.last.feed_forward_chunk(out)[:, 0]


def fast_forward_model(lm: Any) -> Any:
    """``lm`` wrapped in its fast forward when one is exact for it, else ``lm`` itself: BERT-family HF models
    in :class:`LastLayerAtMask`, fairseq masked LMs in :class:`mhfast.models.fast_encoder.LastEncoderLayerAtMask`,
    fairseq CMLMs in :class:`mhfast.models.fast_decoder.FastCMLMDecoder`."""
    last = _last_layer(lm)
    if last is not None:
        return LastLayerAtMask(lm, last)
    from .fast_decoder import fast_decoder_model  # fairseq adapters only; imports nothing of fairseq itself
    from .fast_encoder import fast_encoder_model

    fast = fast_encoder_model(lm)  # fairseq masked LMs (RoBERTa, Sapiens)
    return fast if fast is not lm else fast_decoder_model(lm)
