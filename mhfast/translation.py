"""Translation with a fairseq CMLM: model loading, text pre/post-processing, batch decoding.

Shared by ``mhfast translate`` and ``mhfast evaluate``. A :class:`Translator` wraps a
:class:`mhfast.models.fairseq_cmlm.FairseqCMLM` with its text processing and turns a batch of raw
source sentences into detokenized hypotheses, either by Metropolis-Hastings
(:func:`mhfast.sample` with ``source=``; the best sample per source) or by Mask-Predict
(:func:`mhfast.mask_predict`).

Source ids are built as ``translation_lev`` built them in training: ``[bos] + pieces + [eos]``
(fairseq's ``load_langpair_dataset(prepend_bos=True)``), so the length head sees the lengths it
was trained on.

The bundled De->En model (:func:`load_bundled_model`) lives in ``mhfast/data/multi30k_de_en/``:
``model.pt`` (exported by ``training/export_model.py``), ``dict.de.txt``, ``dict.en.txt``,
``spm.model`` (SentencePiece, shared by both sides) and the raw ``test_2016_flickr.{de,en}``.

Example::

    >>> from mhfast.translation import load_bundled_model                  # doctest: +SKIP
    >>> tr = load_bundled_model()                                           # doctest: +SKIP
    >>> out = tr.translate(["Ein Hund läuft."], method="mh", input_ids=[0],
    ...                    sampler_options=dict(chains=2, epochs=4, burn_in=1))   # doctest: +SKIP
    >>> out.hypotheses[0].text                                              # doctest: +SKIP
    'A dog is running while up.'
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from .files.errors import check_input
from .models.base import check_length

#: The bundled Multi30k De->En CMLM.
BUNDLE_DIR = Path(__file__).resolve().parent / "data" / "multi30k_de_en"
BUNDLE_FILES = ("model.pt", "dict.de.txt", "dict.en.txt", "spm.model")
#: The bundled references (raw text, one sentence per line).
BUNDLED_TEST_SOURCE = BUNDLE_DIR / "test_2016_flickr.de"
BUNDLED_TEST_REFERENCE = BUNDLE_DIR / "test_2016_flickr.en"
METHODS = ("mh", "mask-predict")


class TextProcessor:
    """Raw text <-> the model's token strings.

    ``kind="spm"``: SentencePiece pieces (``encode`` joins them with spaces, ``decode`` is
    ``sp.decode(pieces)``); ``kind="none"``: the text is already tokenized (whitespace split,
    hypotheses joined with single spaces).

    Example:
        >>> TextProcessor.none().encode("  ein  hund . ")
        'ein hund .'
        >>> TextProcessor.none().decode(["a", "dog", "."])
        'a dog .'
    """

    def __init__(self, kind: str, spm_model: str | os.PathLike | None = None):
        if kind not in ("spm", "none"):
            raise ValueError(f"tokenizer: expected 'spm' or 'none', got {kind!r}")
        self.kind = kind
        self.spm_model = None if spm_model is None else str(spm_model)
        self._sp = None
        if kind == "spm":
            missing = f"--spm: SentencePiece model not found: {spm_model}"
            if spm_model is None:
                raise FileNotFoundError(missing)
            check_input(spm_model, "--spm", missing)
            try:
                import sentencepiece
            except ImportError as e:  # pragma: no cover - installed by scripts/install.sh
                raise ImportError("the SentencePiece tokenizer needs 'pip install sentencepiece'") from e
            try:
                self._sp = sentencepiece.SentencePieceProcessor(model_file=str(spm_model))
            except (RuntimeError, OSError) as e:  # a truncated or foreign file: name it, in one line
                raise ValueError(f"--spm: {spm_model} is not a SentencePiece model ({' '.join(str(e).split())})"
                                 ) from None

    @classmethod
    def none(cls) -> "TextProcessor":
        return cls("none")

    def encode(self, text: str) -> str:
        """Raw sentence -> space-separated token strings (the dictionary's symbols)."""
        if self._sp is None:
            return " ".join(text.split())
        return " ".join(self._sp.encode(text, out_type=str))

    def decode(self, tokens: Sequence[str]) -> str:
        """Token strings of a hypothesis -> detokenized text."""
        if self._sp is None:
            return " ".join(tokens)
        return self._sp.decode(list(tokens))


@dataclass
class Hypothesis:
    """One translation.

    Attributes:
        text: detokenized hypothesis ("" for an empty source).
        tokens: its token strings (BOS/EOS excluded).
        score: higher is better. MH: ``-best_energy / energy positions`` (the negative energy per
            token; for the local energy the mean masked log-probability); Mask-Predict: fairseq's
            mean positional log-probability.
        details: method-specific numbers: MH the energies (``--format fairseq`` prints them; ``best_energy``
            includes the weighted extra energy terms when ``with_terms``) and the
            sentence's own post-burn-in ``acceptance_rate``/``novel_rate``; Mask-Predict the positional scores.
    """

    text: str
    tokens: list[str] = field(default_factory=list)
    score: float = 0.0
    details: dict = field(default_factory=dict)


@dataclass
class BatchOutput:
    """What :meth:`Translator.translate` returns for one batch.

    Attributes:
        hypotheses: one per source, in input order.
        epochs: per-epoch sampler statistics of the batch (MH only; empty for Mask-Predict):
            dicts with ``epoch``, ``acceptance_rate``, ``novel_rate``, ``e_raw``, ``e_local``,
            ``target_temperature``.
        sentences: number of non-empty sources (the ones that were decoded).
        acceptance: mean post-burn-in acceptance rate of the batch (MH; None otherwise).
        compile_seconds: the batch's time spent compiling (MH with ``compile=True``; 0.0 otherwise).
        memo_hits: the batch's proposals decided by the proposal memo (single-site MH with the memo on, as by default;
            0 otherwise).
        delayed: delayed acceptance's counters of the batch (option delayed; SampleResult's ``delayed_tested``,
            ``delayed_passed``, ``delayed_accepted``, ``delayed_rows_saved`` without the prefix); empty when it did
            not act.
    """

    hypotheses: list[Hypothesis]
    epochs: list[dict]
    sentences: int
    acceptance: float | None
    compile_seconds: float = 0.0
    memo_hits: int = 0
    delayed: dict = field(default_factory=dict)


class Translator:
    """A fairseq CMLM with its text processing: raw sentences in, detokenized hypotheses out.

    Example::

        >>> tr = Translator(cmlm, TextProcessor.none())                                   # doctest: +SKIP
        >>> tr.translate(["ein hund ."], method="mask-predict", iterations=10).hypotheses[0].text  # doctest: +SKIP
        'a dog .'
    """

    def __init__(self, cmlm: Any, processor: TextProcessor):
        self.cmlm = cmlm
        self.processor = processor

    def source_ids(self, text: str) -> torch.Tensor:
        """``[bos] + ids + [eos]`` of a raw sentence, as translation_lev's training sources. A SentencePiece
        processor's pieces are final. A processor of kind "none" only splits on spaces, so the CMLM's own
        tokenizer, if it has one (a Translator built by hand), makes the pieces. (Pieces through a second
        SentencePiece gain a "▁" each and change the translation: a second processor on the same model file is
        another bound method, so the old identity test had applied both.)"""
        return self._source_ids(self.processor.encode(text))

    def _source_ids(self, pieces: str) -> torch.Tensor:
        """:meth:`source_ids` of the processor's ``pieces`` of a sentence."""
        tokenizer = getattr(self.cmlm, "tokenizer", None)
        if tokenizer is None or self.processor.kind == "spm" or tokenizer == self.processor.encode:
            return self.cmlm.piece_ids(pieces)
        return self.cmlm.source_ids(pieces)

    def target_ids(self, text: str) -> torch.Tensor:
        """``[bos] + ids + [eos]`` of a raw target sentence (a reference for a Hamming term). A piece that is not
        in the target dictionary is a ValueError naming it: its id would be ``<unk>``, the CMLM's mask, and the
        Hamming term would silently leave that position unconstrained."""
        d = self.cmlm.tgt_dict
        pieces = self.processor.encode(text).split()
        unknown = [w for w in pieces if d.index(w) == d.unk()]
        if unknown:
            raise ValueError(f"{unknown[0]!r} is not in the target dictionary (it would be <unk>, the CMLM's mask)")
        return torch.tensor([self.cmlm.bos_id, *(d.index(w) for w in pieces), self.cmlm.eos_id], dtype=torch.long)

    def _tokens(self, ids: torch.Tensor) -> list[str]:
        special = set(self.cmlm.special_ids)
        return [self.cmlm.tgt_dict[i] for i in ids.tolist() if i not in special]

    def detokenize(self, ids: torch.Tensor) -> str:
        """Target ids (specials and padding dropped) -> raw text."""
        return self.processor.decode(self._tokens(ids))

    def _mask_predict(self, ids: list[torch.Tensor], keep: list[int], hyps: list[Hypothesis], iterations: Any,
                      length_beam: Any) -> BatchOutput:
        """:meth:`translate`'s Mask-Predict: ``ids`` the kept sources' (``keep``: their indices), ``hyps`` filled in."""
        from .mask_predict import mask_predict
        from .sampler.scalars import as_int

        if as_int(iterations) is None or as_int(iterations) < 1:  # (numpy's ints count)
            raise ValueError(f"iterations: expected an int >= 1, got {iterations!r}")
        out = mask_predict(self.cmlm, ids, iterations=as_int(iterations) - 1, length_beam=length_beam)
        for j, i in enumerate(keep):
            toks = self._tokens(out.tokens[j])
            hyps[i] = Hypothesis(self.processor.decode(toks), toks, float(out.score[j]),
                                 {"positional_scores": [float(x) for x in out.positional_scores[j]]})
        return BatchOutput(hyps, [], len(keep), None)

    def translate(self, sources: Sequence[str], method: str = "mh", input_ids: Sequence[int] | None = None,
                  sampler_options: dict | None = None, iterations: int = 10, length_beam: int = 1,
                  progress: Callable[[int, dict], None] | None = None,
                  extra_energy: Callable[[list[int]], Any] | None = None, diagnostics: bool = False) -> BatchOutput:
        """Translate a batch of raw sentences (empty ones, with no piece, give empty hypotheses and cost nothing).

        Args:
            method: "mh" (mhfast.sample with ``source=``, best sample per source) or "mask-predict".
            input_ids: global index of each source (the sampler's RNG identity, so a sentence gets
                the same random numbers whatever batch it is in: the same chains up to the model's
                float rounding); default ``0..len(sources)-1``.
            sampler_options: keyword arguments of :func:`mhfast.sample` (MH only).
            iterations: Mask-Predict decoder passes (the paper's T; fairseq's max_iter + 1), >= 1.
            length_beam: length candidates per source (both methods).
            progress: passed to :func:`mhfast.sample` (called after each epoch).
            extra_energy: ``f(input_ids of the non-empty sources) -> extra_energy`` of
                :func:`mhfast.sample` (MH only): terms see each source's index in that list.
            diagnostics: MH: each hypothesis's details get ``diagnostics``, its convergence diagnostics
                (:func:`mhfast.sampler.diagnostics_report.per_input_reports`: R-hat, ESS, MCSE, epochs, the
                energy trace per chain). Without it, details get ``epochs_run`` and ``converged`` only with
                ``until_rhat``/``min_ess``.
        """
        if method not in METHODS:
            raise ValueError(f"method: expected one of {', '.join(METHODS)}, got {method!r}")
        check_sources(sources)
        input_ids = list(range(len(sources))) if input_ids is None else list(input_ids)
        if len(input_ids) != len(sources):
            raise ValueError(f"input_ids: {len(input_ids)} ids for {len(sources)} sources")
        # empty: no piece (a zero-width space or a BOM is not whitespace to str.strip, but SentencePiece drops it,
        # and the model had been decoded from [bos, eos], inventing a sentence)
        pieces = [self.processor.encode(s) if s.strip() else "" for s in sources]
        keep = [i for i, p in enumerate(pieces) if p.strip()]
        hyps = [Hypothesis("") for _ in sources]
        if not keep:
            return BatchOutput(hyps, [], 0, None)
        ids = [self._source_ids(pieces[i]) for i in keep]
        for i, row in zip(keep, ids):  # named by its index in ``sources`` (the model's check sees only the kept)
            check_length(self.cmlm, len(row), f"sources[{i}]", side="source")
        if method == "mask-predict":
            return self._mask_predict(ids, keep, hyps, iterations, length_beam)

        from .sampler import sample
        from .sampler.options import OPTIONS
        from .sampler.result import summary_epochs

        opts = dict(sampler_options or {})
        if extra_energy is not None:
            if opts.get("extra_energy") is not None:  # (the argument's terms had silently replaced the option's)
                raise ValueError("extra_energy: given both as translate's argument and in sampler_options; give "
                                 "every term in one of them")
            opts["extra_energy"] = extra_energy([input_ids[i] for i in keep])
        res = sample(self.cmlm, source=ids, length_beam=length_beam, input_ids=[input_ids[i] for i in keep],
                     progress=progress, **opts)
        special = torch.tensor(sorted(set(self.cmlm.special_ids)), dtype=torch.long)
        energy = opts.get("energy", "raw")
        burn_in = int(opts.get("burn_in", OPTIONS["burn_in"].default))
        first, _ = summary_epochs(burn_in, len(res.e_raw))  # the post-burn-in epochs (all of them without any)
        acceptance, novel = res.rates_per_input(first)  # each sentence's own rates after burn-in (kept candidate)
        reports = _reports(res, energy) if diagnostics else None
        for j, i in enumerate(keep):
            best = res.best_tokens[j].cpu()
            toks = self._tokens(best)
            L = int(res.lengths[j])
            positions = max(int((~torch.isin(best[:L], special)).sum()), 1)
            hyps[i] = Hypothesis(self.processor.decode(toks), toks, -float(res.best_energy[j]) / positions, {
                "energy": energy, "best_energy": float(res.best_energy[j]), "with_terms": res.term_names is not None,
                **_chain_details(res, j, float(acceptance[j]), float(novel[j])),
                **({} if reports is None else {"diagnostics": reports[j]})})
        epochs = [{"epoch": e, "acceptance_rate": float(res.acceptance_rate[e]), "novel_rate": float(res.novel_rate[e]),
                   "e_raw": float(res.e_raw[e]), "e_local": float(res.e_local[e]),
                   "target_temperature": float(res.target_temperature[e])} for e in range(len(res.e_raw))]
        delayed = {k: getattr(res, "delayed_" + k) for k in ("tested", "passed", "accepted", "rows_saved")}
        return BatchOutput(hyps, epochs, len(keep), float(res.acceptance_rate[first:].mean()), res.compile_seconds,
                           res.memo_hits, delayed if delayed["tested"] else {})


def _chain_details(res: Any, j: int, acceptance: float, novel: float) -> dict:
    """Input ``j``'s per-chain energies, its acceptance and novel rates and, where the run has them, its convergence
    (until_rhat / min_ess) and tempering counters (after burn-in, :mod:`mhfast.sampler.tempering`), for a
    hypothesis's details (in the order the stats files have always had)."""
    out = {"chains_raw": [float(x) for x in res.energy_raw[j]], "chains_local": [float(x) for x in res.energy_local[j]],
           "acceptance_rate": acceptance, "novel_rate": novel}
    if res.converged is not None:
        out.update(epochs_run=int(res.epochs_run[j]), converged=bool(res.converged[j]))
    if res.ladder is not None:
        out["tempering"] = {"ladder": res.ladder[j].tolist(),
                            "swap_rate": [None if r != r else r for r in res.swap_rate[j].tolist()],  # NaN: none
                            "round_trips": res.round_trips[j].tolist()}
    return out


def _reports(result: Any, energy: str) -> list[dict]:
    from .sampler.diagnostics_report import per_input_reports

    return per_input_reports(result, energy)


def resolve_tokenizer(data_dir: str | os.PathLike, spm: str | os.PathLike | None,
                      tokenizer: str | None) -> TextProcessor:
    """The text processing of a model: ``--spm FILE``, ``--tokenizer none``, or ``DATA/spm.model`` if present."""
    if spm is not None and tokenizer == "none":
        raise ValueError("--spm and --tokenizer none exclude each other")
    if tokenizer == "none":
        return TextProcessor.none()
    if spm is None:
        candidate = Path(data_dir) / "spm.model"
        if not candidate.is_file():
            raise ValueError(f"--model: give --spm SPM_MODEL or --tokenizer none (no spm.model in {data_dir})")
        spm = candidate
    return TextProcessor("spm", spm)


def load_translator(checkpoint: str | os.PathLike, data_dir: str | os.PathLike, spm: str | os.PathLike | None = None,
                    tokenizer: str | None = None, device: str | torch.device | None = None) -> Translator:
    """Load any ``cmlm_transformer`` checkpoint with its ``dict.{src,tgt}.txt`` folder as a :class:`Translator`."""
    check_input(checkpoint, "--model", f"--model: checkpoint not found: {checkpoint}")
    if not os.path.isdir(data_dir):
        raise FileNotFoundError(f"--data: dictionary folder not found: {data_dir}")
    processor = resolve_tokenizer(data_dir, spm, tokenizer)
    from .models.fairseq_cmlm import load_fairseq_cmlm

    # The CMLM gets the tokenizer too: mask_predict(tr.cmlm, [str]) and mhfast.sample(tr.cmlm, source=[str]) map
    # string sources through it (without it, SentencePiece was skipped and most words became <unk>).
    cmlm = load_fairseq_cmlm(checkpoint, data_dir, device=device, tokenizer=processor.encode)
    return Translator(cmlm, processor)


def bundle_missing() -> list[str]:
    """Files of the bundled model that are not there (empty when it is complete)."""
    return [name for name in BUNDLE_FILES if not (BUNDLE_DIR / name).is_file()]


def check_sources(sources: Any) -> None:
    """``sources`` of :meth:`Translator.translate` is a sequence of str: a TypeError naming it otherwise. A bare
    str had been read as one sentence per character (nine hypotheses for "Ein Hund."), and a None in the list
    failed with ``'NoneType' object has no attribute 'strip'``.

    Example:
        >>> check_sources("Ein Hund.")
        Traceback (most recent call last):
        ...
        TypeError: sources: expected a list of sentences, got a str (one sentence: pass [sentence])
    """
    if isinstance(sources, (str, bytes)):
        raise TypeError(f"sources: expected a list of sentences, got a {type(sources).__name__} (one sentence: pass "
                        "[sentence])")
    for i, s in enumerate(sources):
        if not isinstance(s, str):
            raise TypeError(f"sources[{i}]: expected a str, got {type(s).__name__}")


def bundled_test_file(path: str, option: str) -> str:
    """``path`` itself, or for ``"bundled"`` the bundled test_2016_flickr source (``option`` ``"--input"`` or
    ``"--src"``) or reference file; a missing bundled file is a FileNotFoundError naming ``option``."""
    if path != "bundled":
        return path
    bundled = BUNDLED_TEST_SOURCE if option in ("--input", "--src") else BUNDLED_TEST_REFERENCE
    if not bundled.is_file():
        raise FileNotFoundError(f"{option} bundled: {bundled} is not there (bundled model not installed)")
    return str(bundled)


def load_bundled_model(device: str | torch.device | None = None) -> Translator:
    """The bundled Multi30k De->En CMLM with its SentencePiece model (fp16 weights, run in fp32)."""
    missing = bundle_missing()
    if missing:
        raise FileNotFoundError(f"the bundled De->En model is incomplete ({', '.join(missing)} missing in "
                                f"{BUNDLE_DIR}); pass --model CHECKPOINT --data DICT_DIR instead")
    return load_translator(BUNDLE_DIR / "model.pt", BUNDLE_DIR, BUNDLE_DIR / "spm.model", device=device)
