"""fairseq CMLM translation models (``cmlm_transformer``, task ``translation_lev``) as mhfast energy networks.

:func:`load_fairseq_cmlm` loads a checkpoint trained by ``fairseq-train --task translation_lev
--arch cmlm_transformer`` (Ghazvininejad et al. 2019, the conditional MLM of the paper's translation
experiments) and returns a :class:`FairseqCMLM` implementing the conditional protocol of
:mod:`mhfast.models.base` (``ConditionalMaskedLM`` with the ``FeatureMaskedLM`` split):

* ``encode(sources)`` runs the encoder ONCE for a batch of sources; the returned
  :class:`FairseqContext` is reused by every decoder call (``context_index[n]`` picks the source of
  masked row ``n`` by ``index_select`` on the encoder output and padding mask, never re-encoding).
* ``masked_features`` / ``masked_logits`` run the (bidirectional) decoder on target rows and apply
  the LM head (``decoder.output_layer``) only at the requested masked positions.
* ``predict_lengths(context, k)`` reads the model's length head (``decoder.forward_length`` +
  ``forward_length_prediction``'s offset logic) and returns CONTENT lengths (without BOS/EOS).
* ``frame(length)`` is the target template ``[bos] + [mask] * length + [eos]`` exactly as
  translation_lev's targets are built; the sampler keeps BOS/EOS fixed (special ids).

The mask symbol is the dictionary's ``<unk>`` (fairseq's CMLM noise ``random_mask`` writes ``unk``
into the decoder input), pad/bos/eos come from the target dictionary.

fairseq is an optional dependency; on Python 3.11 only the ``fairseq-fixed`` fork installs::

    pip install cython && env -u CUDA_HOME pip install --no-build-isolation fairseq-fixed==0.12.3.1

Example (a checkpoint and its ``fairseq-preprocess`` data directory)::

    >>> from mhfast.models.fairseq_cmlm import load_fairseq_cmlm      # doctest: +SKIP
    >>> cmlm = load_fairseq_cmlm("ckpt/checkpoint_best.pt", "data-bin")  # doctest: +SKIP
    >>> ctx = cmlm.encode(["ein hund läuft ."])                        # doctest: +SKIP
    >>> cmlm.predict_lengths(ctx, 3)                                  # doctest: +SKIP
    tensor([[4, 5, 3]])
    >>> cmlm.frame(4)                                                 # doctest: +SKIP
    tensor([0, 3, 3, 3, 3, 2])
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import torch

from ..ids import id_row
from .base import PerThread, check_length, check_positions, check_reads, decode_ids

INSTALL_COMMAND = ("pip install cython && env -u CUDA_HOME pip install --no-build-isolation "
                   "fairseq-fixed==0.12.3.1")
_INSTALL_HINT = ("mhfast.models.fairseq_cmlm needs fairseq (on Python 3.11 the 'fairseq-fixed' fork): "
                 + INSTALL_COMMAND)

#: Number of entries of fairseq's NAT length head (``decoder.embed_length`` = Embedding(256, d)).
_LENGTH_CLASSES = 256
#: ``--pred-length-offset`` models predict ``target_len - source_len + 128``.
_LENGTH_OFFSET = 128


def import_fairseq(modules: tuple[str, ...], install_hint: str) -> Any:
    """Import fairseq and ``modules`` (which register the tasks and architectures a loader needs) lazily, so
    mhfast works without it; a missing fairseq is an ImportError carrying ``install_hint``."""
    import importlib
    import logging

    # Importing fairseq registers every task; the speech tasks log an INFO line asking for tensorboardX.
    logging.getLogger("fairseq.tasks.text_to_speech").setLevel(logging.WARNING)
    root_level = logging.getLogger().level
    try:
        import fairseq
        for module in modules:
            importlib.import_module(module)
    except ImportError as e:
        raise ImportError(install_hint) from e
    finally:
        # fairseq's import sets the ROOT logger to DEBUG (logging.basicConfig in one of its modules), which would
        # send every library's debug lines to stderr (filelock's, 148 of them in a --compile run); the level is
        # the application's to choose
        logging.getLogger().setLevel(root_level)
    return fairseq


def _fairseq() -> Any:
    # checkpoint_utils loads; models.nat registers cmlm_transformer; tasks.translation_lev its task
    return import_fairseq(("fairseq.checkpoint_utils", "fairseq.models.nat", "fairseq.tasks.translation_lev"),
                          _INSTALL_HINT)


@dataclass
class FairseqContext:
    """Encoder output of S sources, computed once by :meth:`FairseqCMLM.encode`.

    Attributes:
        encoder_out: fairseq's encoder output dict (``encoder_out`` T x S x C, ``encoder_padding_mask``
            S x T, ...), as the decoder consumes it.
        src_tokens: Long[S, L] the left-padded source ids that were encoded (fairseq's default
            ``left_pad_source=True``).
        src_lengths: Long[S] number of non-pad source tokens (EOS included).
    """

    encoder_out: dict
    src_tokens: torch.Tensor
    src_lengths: torch.Tensor

    @property
    def num_sources(self) -> int:
        return int(self.src_tokens.shape[0])


class FairseqCMLM:
    """A fairseq ``cmlm_transformer`` behind mhfast's conditional masked-LM protocol.

    Build it with :func:`load_fairseq_cmlm` (or directly from a loaded fairseq model and its
    dictionaries). The model is put in eval mode (no dropout) and all calls run without autograd.

    Attributes:
        vocab_size, mask_id (= ``<unk>``), pad_id, bos_id, eos_id: from the target dictionary.
        special_ids: pad, bos, eos, mask and fairseq's ``madeupword`` fillers (never sampled).
        encoder_calls: number of encoder forwards so far (one per :meth:`encode`), for tests.
        decoder_rows: number of target rows forwarded through the decoder so far.

    Example::

        >>> from mhfast.translation import load_bundled_model
        >>> cmlm = load_bundled_model().cmlm                         # a FairseqCMLM (needs fairseq)
        >>> ctx = cmlm.encode([torch.tensor([10, 11, 2])])           # one source sentence, eos-terminated
        >>> rows = cmlm.frame(3)[None]                               # [bos, unk, unk, unk, eos]
        >>> cmlm.masked_logits(rows, torch.tensor([1]), ctx, torch.tensor([0])).shape  # V = 8008
        torch.Size([1, 8008])
    """

    def __init__(self, model: Any, src_dict: Any, tgt_dict: Any, device: str | torch.device | None = None,
                 tokenizer: Callable[[str], str] | None = None):
        _fairseq()
        self.model = model.eval()
        if device is not None:
            self.model.to(device)
        self.src_dict, self.tgt_dict = src_dict, tgt_dict
        self.tokenizer = tokenizer
        self.vocab_size = len(tgt_dict)
        self.mask_id = tgt_dict.unk()
        self.pad_id = tgt_dict.pad()
        self.bos_id = tgt_dict.bos()
        self.eos_id = tgt_dict.eos()
        fillers = [i for i, s in enumerate(tgt_dict.symbols) if s.startswith("madeupword")]
        self.special_ids = tuple(sorted({self.pad_id, self.bos_id, self.eos_id, self.mask_id, *fillers}))
        decoder = self.model.decoder
        self.pred_length_offset = bool(getattr(decoder, "pred_length_offset", False))
        self.max_target_positions = int(decoder.max_positions())
        self.max_source_positions = int(self.model.encoder.max_positions())
        self.encoder_calls = 0
        self.decoder_rows = 0
        self._static_flag = PerThread(False)  #: inside static_inputs, per thread (read indices not checked)

    @property
    def device(self) -> torch.device:
        """The parameters' device, read at each call as the other adapters do (it was fixed when the adapter was
        built, so after ``cmlm.model.cuda()`` every input went to the CPU)."""
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        """The parameters' dtype, as the other adapters have it: mhfast.sample and mhfast.score refuse a float64
        model by it, naming the model (the ops take float32, float16 or bfloat16 logits)."""
        return next(self.model.parameters()).dtype

    # ------------------------------------------------------------------ sources
    def source_ids(self, source: str | torch.Tensor | Sequence[int]) -> torch.Tensor:
        """Source token ids ending in EOS (as fairseq's datasets give them): Long[S_i] on CPU.

        A string is tokenized by ``tokenizer`` (if given), mapped by the source dictionary
        (unknown words -> ``<unk>``) and framed ``[bos] + ids + [eos]``, the layout
        ``translation_lev`` trains CMLMs on (``load_langpair_dataset(prepend_bos=True)``): the
        length head must see the source lengths it was trained with. Token ids are taken as
        given and get a trailing EOS if they lack one.
        """
        if isinstance(source, str):
            return self.piece_ids(self.tokenizer(source) if self.tokenizer is not None else source)
        if isinstance(source, torch.Tensor) and (source.dtype != torch.long or source.dim() != 1):
            raise ValueError(f"sources: each source must be a string or a 1-D int64 tensor of token ids, "
                             f"got {source.dtype} of shape {tuple(source.shape)}")
        # each id checked before it becomes a tensor (a float id had been truncated: 5.5 read as 5, True as 1), a
        # list's and a tensor's alike
        ids = id_row(source, "sources: a source", len(self.src_dict), "sources: token id", "the source dictionary ")
        if (ids == self.src_dict.pad()).any():
            raise ValueError("sources: a source contains the pad id; pass unpadded sources")
        if ids.numel() == 0 or int(ids[-1]) != self.src_dict.eos():
            ids = torch.cat([ids, ids.new_tensor([self.src_dict.eos()])])
        return ids

    def piece_ids(self, line: str) -> torch.Tensor:
        """``[bos] + ids + [eos]`` of an already tokenized source line (space-separated pieces; unknown ones ->
        ``<unk>``): :meth:`source_ids` of a string without the tokenizer."""
        ids = self.src_dict.encode_line(line, add_if_not_exist=False, append_eos=True).long()
        return torch.cat([ids.new_tensor([self.src_dict.bos()]), ids])

    def collate_sources(self, sources: Sequence[Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(src_tokens Long[S, L] left-padded, src_lengths Long[S])`` exactly as fairseq collates them.

        This is also how to feed the same batch to fairseq's own generators (see the tests).
        """
        if isinstance(sources, (str, torch.Tensor)) or not isinstance(sources, Sequence) or len(sources) == 0:
            if isinstance(sources, torch.Tensor) and sources.dim() == 2:
                sources = list(sources)  # a [S, L] batch of unpadded equal-length sources
            else:
                raise ValueError("sources: expected a non-empty list of sources (strings or 1-D token id tensors)")
        ids = [self.source_ids(s) for s in sources]
        lengths = torch.tensor([len(i) for i in ids], dtype=torch.long)
        longest = int(lengths.argmax())
        check_length(self, int(lengths[longest]), f"sources[{longest}]", side="source")
        L = int(lengths.max())
        src = torch.full((len(ids), L), self.src_dict.pad(), dtype=torch.long)
        for r, i in enumerate(ids):  # left padding: fairseq's translation default (left_pad_source=True)
            src[r, L - len(i):] = i
        return src.to(self.device), lengths.to(self.device)

    @torch.no_grad()
    def encode(self, sources: Sequence[Any]) -> FairseqContext:
        """Encode S sources once (one encoder forward): strings or Long[S_i] token ids -> context."""
        src_tokens, src_lengths = self.collate_sources(sources)
        encoder_out = self.model.forward_encoder([src_tokens, src_lengths])
        self.encoder_calls += 1
        return FairseqContext(encoder_out, src_tokens, src_lengths)

    @staticmethod
    def check_context(context: FairseqContext, context_index: torch.Tensor | None, rows: int) -> None:
        """ValueError/TypeError naming the argument unless ``context`` is an encode() result and
        ``context_index`` picks one of its sources for each of ``rows`` rows (None: the rows are the
        sources in order)."""
        if not isinstance(context, FairseqContext):
            raise TypeError(f"context: expected the FairseqContext returned by encode(), got {type(context).__name__}")
        if context_index is None:
            if rows != context.num_sources:
                raise ValueError(f"context_index: required when the {rows} rows are not the "
                                 f"{context.num_sources} encoded sources in order")
            return
        if context_index.dtype != torch.long or context_index.shape != (rows,):
            raise ValueError(f"context_index: expected int64 of shape ({rows},), got {context_index.dtype} "
                             f"of shape {tuple(context_index.shape)}")
        if rows and (int(context_index.min()) < 0 or int(context_index.max()) >= context.num_sources):
            raise ValueError(f"context_index: values must lie in [0, {context.num_sources}) (the encoded "
                             f"sources), got {int(context_index.min())}..{int(context_index.max())}")

    def select(self, context: FairseqContext, context_index: torch.Tensor | None, rows: int) -> dict:
        """The encoder output of source ``context_index[n]`` for each of ``rows`` rows (index_select, no re-encoding)."""
        self.check_context(context, context_index, rows)
        if context_index is None:
            return context.encoder_out
        return self.model.encoder.reorder_encoder_out(context.encoder_out, context_index.to(self.device))

    # ------------------------------------------------------------------ lengths
    @torch.no_grad()
    def length_logits(self, context: FairseqContext) -> torch.Tensor:
        """Raw scores of the length head over TOTAL target lengths 0..255 (BOS/EOS included): f32[S, 256].

        For ``--pred-length-offset`` models entry ``j`` means total length ``j - 128 + src_len``;
        this method maps it back so entry ``j`` always means total length ``j`` (-inf where no class
        predicts it).
        """
        out = self.model.decoder.forward_length(normalize=False, encoder_out=context.encoder_out)
        if not self.pred_length_offset:
            return out
        # Class c of source s predicts total length c - 128 + src_len[s] (fairseq's
        # forward_length_prediction); scatter each class to the length it stands for.
        S, C = out.shape
        lengths = torch.arange(C, device=out.device)[None, :] - _LENGTH_OFFSET + context.src_lengths[:, None]
        valid = (lengths >= 0) & (lengths < C)
        mapped = out.new_full((S, C), float("-inf"))
        rows = torch.arange(S, device=out.device)[:, None].expand(S, C)
        mapped[rows[valid], lengths[valid]] = out[valid]
        return mapped

    @torch.no_grad()
    def greedy_total_lengths(self, context: FairseqContext) -> torch.Tensor:
        """fairseq's own length prediction (``forward_length_prediction``, greedy): Long[S], BOS/EOS included,
        not yet clamped (fairseq's generator clamps it to >= 2)."""
        dec = self.model.decoder
        return dec.forward_length_prediction(dec.forward_length(normalize=True, encoder_out=context.encoder_out),
                                             encoder_out=context.encoder_out)

    @torch.no_grad()
    def predict_lengths(self, context: FairseqContext, k: int, strategy: str = "topk") -> torch.Tensor:
        """The k target CONTENT lengths (BOS/EOS excluded) to try per source: Long[S, k], best first.

        ``strategy="topk"`` (default; Ghazvininejad et al. 2019, "length beam"): the k most likely
        lengths of the length head with at least one content token and at most the model's target
        positions; its first column is fairseq's greedy prediction minus 2 (when that is >= 1).
        ``strategy="fairseq"``: fairseq's ``IterativeRefinementGenerator`` length beam, the window
        ``greedy + j - k // 2`` for j = 0..k-1 (total lengths clamped to >= 2, so content lengths
        may be 0), in that order; :func:`mhfast.mask_predict` uses it to match fairseq exactly.
        """
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k: expected an int >= 1, got {k!r}")
        if strategy == "fairseq":
            greedy = self.greedy_total_lengths(context).clamp(min=2)
            if k == 1:  # fairseq's initialize_output_tokens (no window)
                return (greedy - 2)[:, None]
            total = (greedy[:, None] + torch.arange(k, device=greedy.device)[None, :] - k // 2).clamp(min=2)
            return total - 2
        if strategy != "topk":
            raise ValueError(f"strategy: expected 'topk' or 'fairseq', got {strategy!r}")
        scores = self.length_logits(context)
        totals = torch.arange(scores.shape[1], device=scores.device)
        allowed = (totals >= 3) & (totals <= self.max_target_positions)
        if k > int(allowed.sum()):
            raise ValueError(f"k (length_beam): at most {int(allowed.sum())} lengths exist, got {k}")
        scores = scores.masked_fill(~allowed, float("-inf"))
        return scores.topk(k, dim=1).indices - 2

    def frame(self, length: int) -> torch.Tensor:
        """Target template ``[bos] + [mask] * length + [eos]`` (translation_lev's target layout): Long[length+2].

        Example: ``cmlm.frame(2)`` -> ``tensor([0, 3, 3, 2])`` with fairseq's default ids.
        """
        if isinstance(length, bool) or not isinstance(length, int) or length < 1:
            raise ValueError(f"length: expected an int >= 1, got {length!r}")
        check_length(self, length + 2, f"length {length} (+2 for BOS/EOS)")
        return torch.tensor([self.bos_id] + [self.mask_id] * length + [self.eos_id], dtype=torch.long)

    # ------------------------------------------------------------------ decoder
    @contextlib.contextmanager
    def static_inputs(self, has_pad: bool) -> Iterator[None]:
        """Inside: the caller (the sampler's static step) vouches for its read indices, so they are not checked
        (each check is a host sync on a GPU). The protocol's optional hook (mhfast.models.base)."""
        with self._static_flag.set(True):
            yield

    @property
    def _static(self) -> bool:
        """Whether this thread is inside ``static_inputs``."""
        return self._static_flag.get()

    def _check_rows(self, tokens: torch.Tensor, values: bool | None = None) -> None:
        """The rows' type and width, and (``values``; default: outside ``static_inputs``) their ids. A wrapper with
        its own static_inputs (the fast decoder) passes its own flag: a value check is a host sync, which a traced
        or captured step cannot make."""
        if not isinstance(tokens, torch.Tensor) or tokens.dtype != torch.long or tokens.dim() != 2:
            raise ValueError(f"tokens: expected an int64 tensor [N, T], got "
                             f"{getattr(tokens, 'dtype', type(tokens).__name__)} {tuple(getattr(tokens, 'shape', ()))}")
        check_length(self, int(tokens.shape[1]), "tokens: a row")
        # An id past the dictionary is an IndexError deep in the embedding (a device-side assert on CUDA); the
        # static step vouches for its ids, and each check is a host sync there.
        values = not self._static if values is None else values
        if values and tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= self.vocab_size):
            raise ValueError(f"tokens: ids must lie in [0, {self.vocab_size}) (the target dictionary)")

    @torch.no_grad()
    def decoder_features(self, tokens: torch.Tensor, context: FairseqContext,
                         context_index: torch.Tensor | None = None) -> torch.Tensor:
        """Decoder hidden states of every position: Long[R, T] -> float[R, T, d] (pad rows ignored by attention)."""
        self._check_rows(tokens)
        encoder_out = self.select(context, context_index, tokens.shape[0])
        features, _ = self.model.decoder.extract_features(tokens.to(self.device), encoder_out=encoder_out)
        self.decoder_rows += tokens.shape[0]
        return features

    @torch.no_grad()
    def decoder_log_probs(self, tokens: torch.Tensor, context: FairseqContext,
                          context_index: torch.Tensor | None = None) -> torch.Tensor:
        """fairseq's ``decoder(normalize=True, ...)`` on every position: float[R, T, V] (what Mask-Predict uses)."""
        self._check_rows(tokens)
        encoder_out = self.select(context, context_index, tokens.shape[0])
        self.decoder_rows += tokens.shape[0]
        return self.model.decoder(normalize=True, prev_output_tokens=tokens.to(self.device), encoder_out=encoder_out)

    @torch.no_grad()
    def output_layer(self, features: torch.Tensor) -> torch.Tensor:
        """The LM head (``decoder.output_layer``): float[M, d] -> float[M, V]."""
        return self.model.decoder.output_layer(features)

    def masked_features_at(self, tokens: torch.Tensor, row_index: torch.Tensor, positions: torch.Tensor,
                           context: FairseqContext = None, context_index: torch.Tensor | None = None
                           ) -> torch.Tensor:
        """Features at ``positions[n]`` of row ``row_index[n]``: one decoder pass per row -> float[N, d]."""
        self._check_rows(tokens)
        if not self._static:  # value checks (host syncs), unless the caller vouches for its indices
            check_reads(row_index, positions, tokens.shape[0], tokens.shape[1])  # -1 read the last column, silently
        if tokens.shape[0] == 0 or row_index.numel() == 0:  # fairseq's decoder fails on an empty batch
            decoder = self.model.decoder
            width = int(getattr(decoder, "output_embed_dim", decoder.embed_dim))
            return torch.empty(0, width, device=self.device, dtype=self.dtype)
        features = self.decoder_features(tokens, context, context_index)
        return features[row_index.to(features.device), positions.to(features.device)]

    def masked_logits_at(self, tokens: torch.Tensor, row_index: torch.Tensor, positions: torch.Tensor,
                         context: FairseqContext = None, context_index: torch.Tensor | None = None) -> torch.Tensor:
        """Logits at ``positions[n]`` of row ``row_index[n]`` (LM head only there): float[N, V]."""
        return self.output_layer(self.masked_features_at(tokens, row_index, positions, context, context_index))

    def masked_features(self, tokens: torch.Tensor, positions: torch.Tensor, context: FairseqContext = None,
                        context_index: torch.Tensor | None = None) -> torch.Tensor:
        """Features at ``positions[n]`` of row ``n``: Long[N, T], Long[N] -> float[N, d]."""
        check_positions(tokens, positions)  # (shared with FastCMLMDecoder: its masked_features_at checks the rest)
        rows = torch.arange(tokens.shape[0], device=positions.device)
        return self.masked_features_at(tokens, rows, positions, context, context_index)

    def masked_logits(self, tokens: torch.Tensor, positions: torch.Tensor, context: FairseqContext = None,
                      context_index: torch.Tensor | None = None) -> torch.Tensor:
        """Logits at ``positions[n]`` of row ``n`` (LM head only at those positions): float[N, V]."""
        return self.output_layer(self.masked_features(tokens, positions, context, context_index))

    # ------------------------------------------------------------------ text
    def decode(self, ids: torch.Tensor | Sequence[int]) -> str:
        """Target text of ``ids`` without special tokens (pad, BOS/EOS, mask)."""
        ids = decode_ids(ids, self.vocab_size)
        return " ".join(self.tgt_dict[i] for i in ids if i not in self.special_ids)


def _load_dictionaries(data: Any, cfg: Any) -> tuple[Any, Any]:
    """(src_dict, tgt_dict) from a fairseq-preprocess directory, a joint Dictionary, or a (src, tgt) pair."""
    from fairseq.data import Dictionary

    if isinstance(data, Dictionary):
        return data, data
    if isinstance(data, tuple) and len(data) == 2 and all(isinstance(d, Dictionary) for d in data):
        return data
    if isinstance(data, (str, os.PathLike)):
        path = os.fspath(data)
        src, tgt = cfg.task.source_lang, cfg.task.target_lang
        if src is None or tgt is None:  # as fairseq's TranslationTask.setup_task: infer from file names
            from fairseq.data import data_utils

            src, tgt = data_utils.infer_language_pair(path)
        files = [os.path.join(path, f"dict.{lang}.txt") for lang in (src, tgt)]
        missing = [f for f in files if not os.path.isfile(f)]
        if missing:
            raise ValueError(f"data_dir_or_dictionary: {missing[0]} not found (expected the fairseq-preprocess "
                             f"directory of this {src}->{tgt} checkpoint)")
        dicts = []
        for f in files:
            try:
                dicts.append(Dictionary.load(f))
            except (ValueError, RuntimeError, UnicodeDecodeError, IndexError) as e:
                raise ValueError(f"data_dir_or_dictionary: {f} is not a fairseq dictionary ({_first_line(e)})"
                                 ) from None
        return dicts[0], dicts[1]
    raise TypeError("data_dir_or_dictionary: expected a fairseq-preprocess directory, a fairseq Dictionary "
                    f"or a (src_dict, tgt_dict) pair, got {type(data).__name__}")


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text else type(e).__name__


def _read_checkpoint(checkpoint: str | os.PathLike) -> tuple[dict, Any]:
    """(state, cfg) of a fairseq checkpoint file; a truncated, corrupt or foreign file (not a dict with
    a fairseq config) is a ValueError naming the file, never the unpickler's or fairseq's traceback."""
    from fairseq import checkpoint_utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    try:
        with open(checkpoint, "rb") as f:
            state = torch.load(f, map_location="cpu", weights_only=False)
    except MemoryError:
        raise
    except Exception as e:  # unpickling a damaged file raises nearly anything (EOFError, UnpicklingError, ...)
        raise ValueError(f"checkpoint: {checkpoint} is not a readable torch checkpoint (truncated or corrupt?): "
                         f"{type(e).__name__}: {_first_line(e)}") from None
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict) or \
            (state.get("cfg") is None and state.get("args") is None):
        raise ValueError(f"checkpoint: {checkpoint} is not a fairseq checkpoint (expected a dict with 'model' "
                         f"and 'cfg' or 'args', got {type(state).__name__}"
                         f"{' with keys ' + repr(sorted(map(str, state))[:6]) if isinstance(state, dict) else ''})")
    try:
        # What fairseq's load_checkpoint_to_cpu does after its torch.load (which fails on torch >= 2.6
        # because of the weights_only default): the config is saved as a plain dict.
        if state.get("cfg") is not None:
            from omegaconf import OmegaConf

            state["cfg"] = OmegaConf.create(state["cfg"], flags={"allow_objects": True})
        state = checkpoint_utils._upgrade_state_dict(state)
        cfg = state.get("cfg")
        if cfg is None and state.get("args") is not None:
            cfg = convert_namespace_to_omegaconf(state["args"])
        cfg.model  # noqa: B018 - a config without a model section is not a model checkpoint
    except Exception as e:  # fairseq's upgrade code indexes whatever keys it expects
        raise ValueError(f"checkpoint: {checkpoint} is not a fairseq checkpoint fairseq can read "
                         f"({type(e).__name__}: {_first_line(e)})") from None
    return state, cfg


def load_fairseq_cmlm(checkpoint: str | os.PathLike, data_dir_or_dictionary: Any,
                      device: str | torch.device | None = None,
                      tokenizer: Callable[[str], str] | None = None) -> FairseqCMLM:
    """Load a ``cmlm_transformer`` checkpoint (task ``translation_lev``) as a :class:`FairseqCMLM`.

    Args:
        checkpoint: path of a fairseq checkpoint (``checkpoint_best.pt``). It is unpickled with
            ``torch.load(weights_only=False)`` (fairseq stores its config objects in it): load only
            checkpoints you trust.
        data_dir_or_dictionary: the ``fairseq-preprocess`` directory (``dict.{src,tgt}.txt``), a joint
            fairseq ``Dictionary``, or a ``(src_dict, tgt_dict)`` pair.
        device: where to put the model (default: CPU).
        tokenizer: optional ``str -> str`` applied to string sources before the dictionary lookup.

    Example::

        >>> cmlm = load_fairseq_cmlm("ckpt/checkpoint_best.pt", "data-bin")   # doctest: +SKIP
    """
    _fairseq()
    from fairseq.tasks.translation_lev import TranslationLevenshteinTask

    if not os.path.isfile(checkpoint):
        raise ValueError(f"checkpoint: file not found: {checkpoint}")
    state, cfg = _read_checkpoint(checkpoint)
    arch = getattr(cfg.model, "arch", None) or getattr(cfg.model, "_name", None)
    if not str(arch).startswith("cmlm_transformer"):
        raise ValueError(f"checkpoint: expected a cmlm_transformer model, got arch {arch!r}")
    src_dict, tgt_dict = _load_dictionaries(data_dir_or_dictionary, cfg)
    task = TranslationLevenshteinTask(cfg.task, src_dict, tgt_dict)
    try:
        model = task.build_model(cfg.model)
        model.load_state_dict(state["model"], strict=True, model_cfg=cfg.model)
    except (RuntimeError, KeyError, TypeError, ValueError, AttributeError) as e:  # weights that do not fit
        raise ValueError(f"checkpoint: {checkpoint}: its weights do not fit its config and dictionaries "
                         f"({type(e).__name__}: {_first_line(e)})") from None
    return FairseqCMLM(model, src_dict, tgt_dict, device=device, tokenizer=tokenizer)
