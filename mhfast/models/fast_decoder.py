"""The fairseq CMLM decoder's fast forward: encoder-attention keys/values once per source, the last layer only
where it is read.

A masked read of a CMLM row (``FairseqCMLM.masked_features_at``) runs fairseq's decoder over the whole row.
Two parts of that work are wasted for the sampler, which forwards many rows per source (chains x positions)
and reads one or a few positions of each:

* every decoder layer's encoder attention projects the row's copy of the encoder output to keys and values
  (``k_proj``/``v_proj`` over the source tokens): the same numbers for every row of one source. Here they are
  computed once per distinct source of a call and indexed per row (about 12% of a row of the bundled
  Multi30k model, more for long sources); under ``static_inputs`` (the sampler's static step), once per
  run for every source;
* after the last layer's self-attention nothing but the read positions is used, so its query, both attention
  outputs and the feed-forward block run at those positions only (keys and values of the row are still
  computed: the read position attends to all of them). For a 3-layer decoder that is most of a third.

The arithmetic is the layers' own: their modules (``q_proj``/``k_proj``/``v_proj``/``out_proj``, layer
norms, ``fc1``/``fc2``, the activation), the same residual order and ``normalize_before`` placement, and
fairseq's ``q * head_dim**-0.5`` scaling; only the softmax-weighted sum is
``scaled_dot_product_attention`` (fairseq computes it with bmm + softmax), so features agree to float
rounding (tests: ~1e-6 relative) and the sampler's chains are the same (tests). It applies only where that
is exactly the model: ``NATransformerDecoder`` layers in eval mode without cross-self-attention, head
scaling, extra layer norms, residual weights or bias/zero-attention keys; anything else keeps the adapter
(:func:`fast_decoder_model` returns it unchanged).

Example:
    >>> from mhfast.models.fast_decoder import fast_decoder_model
    >>> fast = fast_decoder_model(cmlm)                                # doctest: +SKIP
    >>> fast.masked_logits(rows, positions, ctx, context_index)     # same logits, less work  # doctest: +SKIP
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch
import torch.nn.functional as F

from .base import PerThread, check_reads
from .fairseq_cmlm import FairseqCMLM

_LAYER_EXTRAS = ("c_attn", "attn_ln", "ffn_layernorm", "w_resid")


def _attention_ok(mha: Any) -> bool:
    """fairseq MultiheadAttention that is plain scaled dot-product attention with in/out projections."""
    needed = ("q_proj", "k_proj", "v_proj", "out_proj", "num_heads", "head_dim", "scaling")
    if mha is None or not all(hasattr(mha, a) for a in needed):
        return False
    if getattr(mha, "bias_k", None) is not None or getattr(mha, "add_zero_attn", False):
        return False
    if getattr(mha, "beam_size", 1) != 1 or getattr(mha, "rotary_pos_embed", False):
        return False
    return abs(float(mha.scaling) - mha.head_dim ** -0.5) < 1e-12


def _decoder_ok(lm: Any) -> bool:
    """Whether the fast path is exactly ``lm``'s decoder (else the adapter is kept)."""
    dec = getattr(getattr(lm, "model", None), "decoder", None)
    if dec is None or lm.model.training or type(dec).__name__ not in ("NATransformerDecoder",):
        return False
    layers = getattr(dec, "layers", None)
    if not layers or not callable(getattr(dec, "forward_embedding", None)):
        return False
    for layer in layers:
        if type(layer).__name__ not in ("TransformerDecoderLayerBase", "TransformerDecoderLayer"):
            return False
        if getattr(layer, "cross_self_attention", True) or any(getattr(layer, a, None) is not None
                                                                for a in _LAYER_EXTRAS):
            return False
        if not (_attention_ok(layer.self_attn) and _attention_ok(getattr(layer, "encoder_attn", None))):
            return False
    return True


def _heads(x: torch.Tensor, mha: Any) -> torch.Tensor:
    """[B, L, d] -> [B, H, L, hd]."""
    B, L, _ = x.shape
    return x.view(B, L, mha.num_heads, mha.head_dim).transpose(1, 2)


def _attend(mha: Any, q_in: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """fairseq's attention for queries ``q_in`` [B, Lq, d] over projected keys/values [B, H, Lk, hd];
    ``keep`` [B, 1, 1, Lk] is True where a key may be attended (fairseq masks padding with -inf)."""
    B, Lq, _ = q_in.shape
    q = _heads(mha.q_proj(q_in) * mha.scaling, mha)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=1.0)  # q already scaled, as fairseq does
    return mha.out_proj(out.transpose(1, 2).reshape(B, Lq, mha.num_heads * mha.head_dim))


class FastCMLMDecoder:
    """A ``FairseqCMLM`` whose masked reads take the fast decoder forward (see the module docstring)."""

    def __init__(self, lm: Any):
        self.lm = lm
        for a in ("vocab_size", "mask_id", "pad_id", "special_ids", "model"):
            setattr(self, a, getattr(lm, a))
        self.output_layer = lm.output_layer
        self.decoder = lm.model.decoder
        self._static_flag = PerThread(False)  #: inside static_inputs, per thread
        # (context, per layer (keys, values) [S, H, Ls, hd] of every source, _weights_key()): the cache of
        # static_inputs calls
        self._encoder_kv: tuple[Any, list[tuple[torch.Tensor, torch.Tensor]], tuple] | None = None
        self._layer_fn = FastCMLMDecoder._layer  # compiled inside compiled_blocks()

    @property
    def device(self) -> torch.device:
        """The adapter's, read at each call (a copy taken when the wrapper was built went stale after
        ``lm.model.to(...)``)."""
        return self.lm.device

    @contextlib.contextmanager
    def compiled_blocks(self) -> Iterator[int]:
        """The optional hook of :func:`mhfast.models.compiled_blocks.compiled_blocks`: the decoder's per-layer
        function compiled while inside, for every layer but the last (which runs at the read positions only);
        yields the number of layers it serves."""
        from .compiled_blocks import compile_block

        before, self._layer_fn = self._layer_fn, compile_block(FastCMLMDecoder._layer)
        try:
            yield len(self.decoder.layers) - 1
        finally:
            self._layer_fn = before

    @contextlib.contextmanager
    def static_inputs(self, has_pad: bool) -> Iterator[None]:
        """Inside: the caller's rows, sources and read indices are taken as valid (no bounds checks), and the
        encoder-attention keys/values come from a per-context cache of every source's (kept while the context,
        the projections' weights and the autocast state stay the same), projected by the first call (no
        ``torch.unique`` of each call's sources, whose size depends on data): no host sync, so the sampler's static
        step can be captured as a CUDA graph. ``has_pad`` changes nothing here (the decoder's
        padding mask is computed on the device). The protocol's optional hook (mhfast.models.base)."""
        with self._static_flag.set(True):
            yield

    @property
    def _static(self) -> bool:
        """Whether this thread is inside ``static_inputs``."""
        return self._static_flag.get()

    # The adapter's own wrappers around masked_features_at / output_layer (they call nothing else of it).
    masked_features = FairseqCMLM.masked_features
    masked_logits = FairseqCMLM.masked_logits
    masked_logits_at = FairseqCMLM.masked_logits_at

    @torch.no_grad()
    def masked_features_at(self, tokens: torch.Tensor, row_index: torch.Tensor, positions: torch.Tensor,
                           context: Any = None, context_index: torch.Tensor | None = None) -> torch.Tensor:
        """Features at ``positions[n]`` of row ``row_index[n]``: float[N, d], as the adapter's, from one pass."""
        lm = self.lm
        lm._check_rows(tokens, values=not self._static)
        R = tokens.shape[0]
        if not self._static:  # value checks (host syncs), unless the caller vouches for its indices
            lm.check_context(context, context_index, R)
            check_reads(row_index, positions, R, tokens.shape[1])
        enc = context.encoder_out  # unreordered: keys/values are projected per distinct source below
        device = lm.device
        if row_index.numel() == 0:  # nothing to read: no forward
            return torch.zeros(0, self.decoder.output_embed_dim if hasattr(self.decoder, "output_embed_dim")
                               else self.decoder.embed_dim, device=device,
                               dtype=lm.dtype)  # (the adapter's: a bf16 head takes it)
        tokens, row_index, positions = tokens.to(device), row_index.to(device), positions.to(device)
        sources = (torch.arange(R, device=device) if context_index is None else context_index.to(device))
        memory = enc["encoder_out"][0]  # [Ls, S, d]
        pad = enc["encoder_padding_mask"][0] if len(enc["encoder_padding_mask"]) > 0 else None  # [S, Ls]
        # Keys/values of the encoder output, per layer: projected once per distinct source of this call and indexed
        # per row; with static inputs, once per run for every source (a shape that does not depend on data).
        if self._static:
            used, per_row = torch.arange(memory.shape[1], device=device), sources
            kv = self._static_encoder_kv(context, memory)
        else:
            used, per_row = torch.unique(sources, return_inverse=True)
            kv = self._encoder_kv_of(memory.index_select(1, used).transpose(0, 1))  # [U, Ls, d] in
        src_keep = (~pad.index_select(0, used) if pad is not None
                    else torch.ones(kv[0][0].shape[0], kv[0][0].shape[2], dtype=torch.bool, device=device)
                    )[:, None, None, :]
        lm.decoder_rows += R

        x, dec_pad = self.decoder.forward_embedding(tokens)  # [R, T, d]
        keep = (~dec_pad)[:, None, None, :]
        layers = self.decoder.layers
        for i, layer in enumerate(layers):
            last = i == len(layers) - 1
            if last:  # eager even when compiled: its reads change shapes every call (one graph per branch otherwise)
                x = self._layer(layer, x, keep, kv[i], src_keep, per_row, (row_index, positions))
            else:
                x = self._layer_fn(layer, x, keep, kv[i], src_keep, per_row, None)
        if self.decoder.layer_norm is not None:
            x = self.decoder.layer_norm(x)
        if self.decoder.project_out_dim is not None:
            x = self.decoder.project_out_dim(x)
        return x

    def _encoder_kv_of(self, mem: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Every layer's encoder-attention keys and values of ``mem`` [U, Ls, d]: [(k, v) [U, H, Ls, hd]]."""
        return [(_heads(layer.encoder_attn.k_proj(mem), layer.encoder_attn),
                 _heads(layer.encoder_attn.v_proj(mem), layer.encoder_attn)) for layer in self.decoder.layers]

    def _static_encoder_kv(self, context: Any, memory: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """:meth:`_encoder_kv_of` every source of ``context``, computed by the first call with it and kept while
        calls bring the same context (a sampler run's: the encoder output never changes during the run)."""
        key = self._weights_key()
        # read once into a local: static_inputs holds per thread, and another thread's run (another context) may
        # replace the cache between this check and the return, which re-reading the attribute would then return
        cached = self._encoder_kv
        if cached is None or cached[0] is not context or cached[2] != key:
            cached = (context, self._encoder_kv_of(memory.transpose(0, 1)), key)
            self._encoder_kv = cached
        return cached[1]

    def _weights_key(self) -> tuple:
        """What the cached keys/values depend on besides the context: each projection tensor's version (in-place
        changes), storage and dtype, and autocast's state. Keyed on the context alone, a later run with the same
        context object read keys of the old weights (0.78 off after an in-place change) or of another dtype (an
        error after a run under autocast). A static step enters and leaves ``static_inputs`` at every step on a
        CPU, so the cache cannot simply be dropped on leaving."""
        params = [p for layer in self.decoder.layers for proj in (layer.encoder_attn.k_proj, layer.encoder_attn.v_proj)
                  for p in (proj.weight, proj.bias) if p is not None]
        device = params[0].device.type if params else "cpu"
        autocast = (torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)) \
            if device in ("cpu", "cuda") else None
        return tuple((p._version, p.data_ptr(), p.dtype) for p in params), autocast

    @staticmethod
    def _layer(layer: Any, x: torch.Tensor, keep: torch.Tensor, enc_kv: tuple[torch.Tensor, torch.Tensor],
               src_keep: torch.Tensor, per_row: torch.Tensor, reads: tuple[torch.Tensor, torch.Tensor] | None
               ) -> torch.Tensor:
        """One TransformerDecoderLayer: x [R, T, d] -> [R, T, d], or -> [N, d] at ``reads`` (rows, positions);
        ``enc_kv``: the layer's encoder-attention keys/values [U, H, Ls, hd], ``per_row`` each row's index in them."""
        pre = layer.normalize_before
        sa, ea = layer.self_attn, layer.encoder_attn
        h = layer.self_attn_layer_norm(x) if pre else x
        k, v = _heads(sa.k_proj(h), sa), _heads(sa.v_proj(h), sa)
        if reads is not None:  # the last layer: from here on only the read positions
            rows, positions = reads
            k, v, keep = k.index_select(0, rows), v.index_select(0, rows), keep.index_select(0, rows)
            x, h, per_row = x[rows, positions][:, None], h[rows, positions][:, None], per_row.index_select(0, rows)
        y = x + _attend(sa, h, k, v, keep)
        x = y if pre else layer.self_attn_layer_norm(y)

        h = layer.encoder_attn_layer_norm(x) if pre else x
        ek, ev = enc_kv[0].index_select(0, per_row), enc_kv[1].index_select(0, per_row)
        y = x + _attend(ea, h, ek, ev, src_keep.index_select(0, per_row))
        x = y if pre else layer.encoder_attn_layer_norm(y)

        h = layer.final_layer_norm(x) if pre else x
        y = x + layer.fc2(layer.activation_fn(layer.fc1(h)))
        x = y if pre else layer.final_layer_norm(y)
        return x[:, 0] if reads is not None else x


def fast_decoder_model(lm: Any) -> Any:
    """``lm`` wrapped in :class:`FastCMLMDecoder` when that is exact for it, else ``lm`` itself (a wrapper already,
    too: wrapping twice nested it, and its first call failed)."""
    return FastCMLMDecoder(lm) if not isinstance(lm, FastCMLMDecoder) and _decoder_ok(lm) else lm
