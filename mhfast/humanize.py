"""Antibody humanization: framework residues resampled by MH under a human-antibody MLM, CDRs kept.

:func:`humanize` starts from a parent variable region (e.g. a mouse antibody), frees every residue outside the
CDR spans the user gives, and samples ``exp(-(E(X) + w * Hamming(X, parent)) / tau)`` with Metropolis-Hastings
(:func:`mhfast.sample`): ``E`` is the model's energy (by default ``E_local``, minus the pseudo-log-likelihood:
how human the whole sequence looks to Sapiens), the Hamming term keeps variants near the parent (fewer
mutations, less risk to binding), and ``max_mutations`` caps the distance (a proposal beyond it has energy +1e4
per extra mutation, so at any target temperature below ~250 its acceptance probability is below the smallest
uniform the sampler draws and no chain crosses it; at hotter targets a chain can, and such states are left out of
the variants, so the cap holds for what is returned at any temperature). The chains' states after burn-in (every
epoch's, up to where ``until_rhat`` / ``min_ess`` stopped the run) are pooled into distinct variants, each with
its energies and its mutations from the parent, lowest energy first. The parent is read without whitespace and
in upper case (as the command does).

:func:`sapiens_argmax` is a re-implementation (written here from the BioPhi paper's description, Prihoda et al.,
mAbs 2022) of BioPhi's Sapiens humanization: the model reads the whole sequence unmasked, every framework
position takes the residue it predicts most probable, CDRs are grafted back from the parent; repeated
``iterations`` times. It is deterministic: one variant per parent.

Positions are 0-based over the residues (as ``mhfast sample --free``); mutations are written ``Q1E`` (parent
residue, 1-based sequential position, new residue), not in an antibody numbering scheme.

Example (the mouse 4D5 heavy chain, trastuzumab's parent, Kabat CDRs; a few minutes on one CPU core):
    >>> from mhfast.models.sapiens import load_sapiens                                  # doctest: +SKIP
    >>> parent = ("QVQLQQSGPELVKPGASLKLSCTASGFNIKDTYIHWVKQRPEQGLEWIGRIYPTNGYTRYDPKFQDKATITADTSSNTAYLQVSRLTSE"
    ...           "DTAVYYCSRWGGDGFYAMDYWGQGASVTVSS")                  # (bench/bench_humanize.py) doctest: +SKIP
    >>> h = humanize(load_sapiens("H"), parent, [(30, 35), (49, 66), (98, 109)], max_mutations=15,
    ...              chains=8, epochs=4, burn_in=2, seed=0)                              # doctest: +SKIP
    >>> [(v.energy, v.mutations) for v in h.variants[:2]]                               # doctest: +SKIP
    >>> mutations("QVQLQQ", "EVQLVQ")
    ['Q1E', 'Q5V']
"""
from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Sequence

import torch

from .energy_terms import AllowedTokens, Hamming
from .models.base import AMINO_ACIDS, never_proposed, position_limit, residue_letters
from .sampler.scalars import as_int, as_real

#: The largest ``max_mutations`` and ``iterations`` taken: an antibody chain has ~130 residues, so a larger cap caps
#: nothing and more argmax rounds change nothing (a value past int64 overflowed, one past this ran for hours)
MAX_ITERATIONS_OR_CAP = 10_000
#: Energy added per mutation beyond ``max_mutations``: exp(-1e4) is 0 in float64, so such proposals are never accepted.
CAP_PENALTY = 1e4


@dataclasses.dataclass(frozen=True)
class Variant:
    """One humanized sequence.

    Attributes:
        sequence: the residues.
        energy: the sampled target's energy, ``E + hamming * len(mutations)`` (``E`` = ``e_local`` or ``e_raw``
            as the run's ``energy``).
        e_local, e_raw: the model's energies of the sequence (``-e_local`` is its pseudo-log-likelihood).
        mutations: ``["Q1E", ...]`` from the parent.
        seen: how many chain states after burn-in were this sequence (0 for the argmax baseline).
    """

    sequence: str
    energy: float
    e_local: float
    e_raw: float
    mutations: tuple[str, ...]
    seen: int = 0


@dataclasses.dataclass(frozen=True)
class Humanization:
    """The variants of one parent, lowest energy first, and the parent's own energies."""

    parent: str
    framework: tuple[int, ...]  #: the 0-based residue positions that were free
    parent_e_local: float
    parent_e_raw: float
    variants: tuple[Variant, ...]
    acceptance_rate: float = float("nan")


def mutations(parent: str, variant: str) -> list[str]:
    """The substitutions from ``parent`` to ``variant`` (equal lengths): ``["Q1E", ...]``, 1-based positions.

    >>> mutations("EVQL", "EVKL")
    ['Q3K']
    """
    if len(parent) != len(variant):
        raise ValueError(f"variant: {len(variant)} residues, the parent has {len(parent)}")
    return [f"{a}{i + 1}{b}" for i, (a, b) in enumerate(zip(parent, variant)) if a != b]


def framework_positions(length: int, cdrs: Sequence[tuple[int, int]]) -> list[int]:
    """The residue positions outside the CDR spans (0-based, END exclusive); a ValueError naming a bad span.

    >>> framework_positions(10, [(2, 4), (6, 8)])
    [0, 1, 4, 5, 8, 9]
    """
    if hasattr(cdrs, "tolist") and not isinstance(cdrs, torch.Tensor):  # a numpy array of spans (numbering tools)
        cdrs = cdrs.tolist()
    if isinstance(cdrs, (str, bytes)) or not isinstance(cdrs, Sequence):
        raise ValueError(f"cdrs: expected a list of (START, END) spans, got {cdrs!r}")
    inside = set()
    for span in cdrs:
        ends = [as_int(x) for x in span] if isinstance(span, Sequence) and not isinstance(span, (str, bytes)) else []
        if len(ends) != 2 or None in ends:  # (numpy's ints count: as_int, as the sampler's options take them)
            raise ValueError(f"cdrs: each span must be a pair of ints (START, END), got {span!r}")
        start, end = ends
        if not 0 <= start < end <= length:
            raise ValueError(f"cdrs: span {start}:{end} is not within the {length} residues (0 <= START < END)")
        inside.update(range(start, end))
    return [i for i in range(length) if i not in inside]


class MutationCap:
    """A cap on the Hamming distance to a reference, as an energy term: ``CAP_PENALTY`` per mutation beyond
    ``cap`` (0 within it). At target temperatures below ~250, MH never accepts a move past the cap (``exp(-1e4 /
    tau)`` is below the smallest uniform drawn); :func:`humanize` also drops any state past it from its variants.

    >>> MutationCap(torch.tensor([[0, 1, 2]]), cap=1)(torch.tensor([[0, 1, 2], [0, 2, 0]]), torch.tensor([0, 0]))
    tensor([    0., 10000.])
    """

    name = "mutation_cap"

    def __init__(self, reference: torch.Tensor, cap: int, pad_id: int = 0):
        if as_int(cap) is None or not 0 <= as_int(cap) <= MAX_ITERATIONS_OR_CAP:
            raise ValueError(f"max_mutations: expected an int in [0, {MAX_ITERATIONS_OR_CAP}], got {cap!r}")
        self.distance, self.cap = Hamming(reference, pad_id=pad_id), as_int(cap)

    def __call__(self, tokens: torch.Tensor, input_index: torch.Tensor) -> torch.Tensor:
        return CAP_PENALTY * (self.distance(tokens, input_index) - self.cap).clamp(min=0)


def _normalized(parent: Any) -> str:
    """The parent's residues without whitespace, in upper case (a lower-case parent made every residue a
    "mutation": the model's encode upper-cases, the mutation list compared the raw string); ASCII letters only
    (:func:`mhfast.models.base.residue_letters`)."""
    if not isinstance(parent, str):
        raise TypeError(f"parent: expected a string of one-letter residues, got {type(parent).__name__}")
    residues = residue_letters(parent)
    if not residues:  # (named the cdrs before: "span 23:34 is not within the 0 residues")
        raise ValueError("parent: no residues (an empty or blank sequence)")
    return residues


def _parent_and_free(model: Any, parent: str, cdrs: Sequence[tuple[int, int]]) -> tuple[torch.Tensor, torch.Tensor,
                                                                                        list[int]]:
    """The parent's row (Long[1, T], <s>/[CLS] + residues + </s>/[SEP]), its free mask and the framework."""
    try:
        ids = model.encode(parent)[None]
    except ValueError as e:  # the model names its argument "text": here it is the parent
        raise ValueError(f"parent: {str(e).removeprefix('text: ')}") from None
    residues = ids.shape[1] - 2
    if residues != len(parent):
        raise ValueError(f"parent: expected one token per residue ({len(parent)}), the model made {residues}")
    limit = position_limit(model)
    if limit is not None and ids.shape[1] > limit:  # (the sampler named its init, which humanize has not)
        raise ValueError(f"parent: {len(parent)} residues, more than the model's {limit - 2} (its {limit} positions "
                         "hold two special tokens)")
    if bool((ids == model.mask_id).any()):  # (before the decode check: a mask comes back as '_', not as 'X')
        raise ValueError("parent: a masked residue ('_', '*' or 'X'); give the whole parent sequence")
    back = _residues(model, ids[0])
    if back != parent:  # the variants are read back by decode: a model that does not give one letter per residue
        raise ValueError(f"model: its decode of the parent's tokens gives {back[:30]!r}..., not the parent: humanize "
                         "needs a residue-level model whose encode takes one-letter residues and whose decode gives "
                         "them back (sapiens-h, sapiens-l, antiberty)")
    framework = framework_positions(len(parent), cdrs)
    if not framework:
        raise ValueError(f"cdrs: the spans cover all {len(parent)} residues of the parent: no framework residue to "
                         "humanize")
    free = torch.zeros_like(ids, dtype=torch.bool)
    free[0, [p + 1 for p in framework]] = True
    return ids, free, framework


def residue_ids(model: Any) -> torch.Tensor:
    """Bool[V]: the model's ordinary tokens that are one of the 20 standard amino acids. Sapiens' and AntiBERTy's
    ordinary tokens are exactly these; ESM's vocabulary also has X, B, U, Z, O, '.' and '-', which a humanized
    framework must not take (a tiny ESM had put them in every variant)."""
    allowed = torch.zeros(int(model.vocab_size), dtype=torch.bool)
    ids = model.encode(AMINO_ACIDS).flatten()
    allowed[ids[(ids >= 0) & (ids < allowed.numel())]] = True
    return allowed & ~never_proposed(model)


def _framework_residues(model: Any, ids: torch.Tensor, free: torch.Tensor) -> Any:
    """An :class:`~mhfast.energy_terms.AllowedTokens` that keeps the free (framework) positions of ``ids``
    (Long[1, T]) to the amino acids (:func:`residue_ids`) and the parent's own residue there, or None where the
    model proposes nothing else anyway (Sapiens, AntiBERTy: their chains stay as they were)."""
    residues = residue_ids(model)
    if not bool((~never_proposed(model) & ~residues).any()):
        return None
    mask = torch.ones(ids.shape[1], residues.numel(), dtype=torch.bool)
    at = free[0].nonzero().flatten()
    mask[at] = residues
    mask[at, ids[0, at]] = True  # the start is allowed (a rare residue of the parent, e.g. U, stays possible)
    return AllowedTokens(mask)


def _residues(model: Any, row: torch.Tensor) -> str:
    """The one-letter residues of a row by the model's ``decode``, whitespace dropped (a tokenizer that joins its
    tokens with spaces, as ESM's, had made every variant twice the parent's length, found only after the run)."""
    return "".join(model.decode(row).split())


def _scored(model: Any, parent: str, seqs: list[str], seen: list[int], hamming: float, energy: str
            ) -> list[Variant]:
    """Variants of ``seqs`` with their energies (one batched mhfast.energy call), lowest target energy first."""
    from .scoring import energy as energies

    e = energies(model, [model.encode(s) for s in seqs])
    out = []
    for k, s in enumerate(seqs):
        muts = tuple(mutations(parent, s))
        own = float(e.e_local[k] if energy == "local" else e.e_raw[k])
        out.append(Variant(s, own + hamming * len(muts), float(e.e_local[k]), float(e.e_raw[k]), muts, seen[k]))
    return sorted(out, key=lambda v: (v.energy, v.sequence))


def _check_weights(hamming: Any, energy: Any) -> None:
    """``hamming`` a finite number >= 0 (a negative weight rewards mutations, the opposite of humanizing; --hamming
    refuses it too) and ``energy`` "local" or "raw" (anything else was scored as raw), or a ValueError naming it."""
    if as_real(hamming) is None or not 0 <= as_real(hamming) < float("inf"):
        raise ValueError(f"hamming: expected a finite number >= 0, got {hamming!r}")
    if energy not in ("local", "raw"):
        raise ValueError(f"energy: expected 'local' or 'raw', got {energy!r}")


def humanize(model: Any, parent: str, cdrs: Sequence[tuple[int, int]], *, hamming: float = 1.0,
             max_mutations: int | None = None, top: int = 10, energy: str = "local", **options: Any) -> Humanization:
    """Humanized variants of ``parent`` by MH over its framework (everything outside ``cdrs``).

    Args:
        model: a residue-level masked LM with ``encode``/``decode`` (``load_sapiens("H")``, AntiBERTy).
        parent: the parent variable region, one-letter residues.
        cdrs: the CDR spans to keep, 0-based residue positions ``(START, END)``, END exclusive.
        hamming: weight of the Hamming distance to the parent in the energy (per mutation).
        max_mutations: at most this many mutations (None: no cap).
        top: how many distinct variants to return (lowest energy first).
        energy: ``"local"`` (default) or ``"raw"``: the model energy sampled.
        options: :func:`mhfast.sample` options (``chains``, ``epochs``, ``burn_in``, ``seed``,
            ``target_temperature``, ``anneal``, ...); ``record`` and ``extra_energy`` are set here.

    Example:
        >>> from mhfast.models.sapiens import load_sapiens
        >>> h = humanize(load_sapiens("H"), parent, [(30, 35), (49, 66), (98, 109)], max_mutations=12)  # doctest: +SKIP
        >>> h.variants[0].mutations                                                     # doctest: +SKIP
        ('Q1E', 'Q5V', ...)
    """
    import mhfast

    if as_int(top) is None or as_int(top) < 1:
        raise ValueError(f"top: expected an int >= 1, got {top!r}")
    top = as_int(top)
    _check_weights(hamming, energy)
    parent = _normalized(parent)
    ids, free, framework = _parent_and_free(model, parent, cdrs)
    terms: list = [(Hamming(ids, pad_id=model.pad_id), float(hamming))]
    cap = MutationCap(ids, max_mutations, pad_id=model.pad_id) if max_mutations is not None else None
    if cap is not None:
        terms.append((cap, 1.0))
    allowed = _framework_residues(model, ids, free)
    if allowed is not None:
        terms.append(allowed)
    try:
        r = mhfast.sample(model, init=ids, free_positions=free, energy=energy, extra_energy=terms, record="epoch",
                          **options)
    except ValueError as e:  # the sampler's init is the parent's row here (its memory check named "init")
        if str(e).startswith("mhfast.sample: init x "):
            raise ValueError(f"mhfast.humanize: parent x {str(e).removeprefix('mhfast.sample: init x ')}") from None
        raise
    # history holds the epochs after burn-in already; an input that until_rhat / min_ess stopped repeats its last
    # state after epochs_run: those copies are not samples
    ran = int(r.epochs_run[0]) if r.epochs_run is not None else len(r.acceptance_rate)
    states = r.history[:ran - r.burn_in, 0]
    if states.shape[0] == 0:  # epochs == burn_in: no state after burn-in, the final ones stand in
        states = r.tokens
    states = states.reshape(-1, ids.shape[1])
    if cap is not None:  # past the cap only at very hot targets (see MutationCap): never a variant
        states = states[cap(states, torch.zeros(states.shape[0], dtype=torch.long)) == 0]
    counts: dict[str, int] = {}
    for row in states:
        seq = _residues(model, row)
        counts[seq] = counts.get(seq, 0) + 1
    if not counts:  # a warning, not an error: the run's acceptance and the parent's energies still stand
        # the chains start at the parent (it has no masked residue to fill) unless start="random": then only a
        # target far too hot keeps them past the cap
        why = ("start='random' put the chains far from the parent and the epochs run did not bring them back within "
               "the cap: start from the parent (the default), or run more epochs"
               if options.get("start") == "random" else
               "the target temperature is far too hot for the cap: see MutationCap")
        warnings.warn(f"humanize: every state after burn-in was past max_mutations ({max_mutations}): no variant "
                      f"({why})", stacklevel=2)
    seqs = list(counts)
    variants = _scored(model, parent, seqs, [counts[s] for s in seqs], float(hamming), energy)[:top] if seqs else []
    p = _scored(model, parent, [parent], [0], 0.0, energy)[0]
    post = r.acceptance_rate[r.burn_in:ran] if ran > r.burn_in else r.acceptance_rate[:ran]
    return Humanization(parent, tuple(framework), p.e_local, p.e_raw, tuple(variants), float(post.mean()))


@torch.no_grad()
def sapiens_argmax(model: Any, parent: str, cdrs: Sequence[tuple[int, int]], iterations: int = 1,
                   hamming: float = 1.0, energy: str = "local") -> Humanization:
    """BioPhi's Sapiens humanization, re-implemented: ``iterations`` times, every framework residue becomes the
    residue the model predicts most probable at its position reading the whole, unmasked sequence
    (``model.position_logits``, what ``sapiens.predict_scores`` computes); CDRs stay the parent's. The one
    variant is scored like :func:`humanize`'s (``hamming`` only enters its reported energy).

    Example:
        >>> h = sapiens_argmax(load_sapiens("H"), parent, [(30, 35), (49, 66), (98, 109)])  # doctest: +SKIP
    """
    if as_int(iterations) is None or not 1 <= as_int(iterations) <= MAX_ITERATIONS_OR_CAP:
        raise ValueError(f"iterations: expected an int in [1, {MAX_ITERATIONS_OR_CAP}], got {iterations!r}")
    iterations = as_int(iterations)
    _check_weights(hamming, energy)
    parent = _normalized(parent)
    if not callable(getattr(model, "position_logits", None)):
        raise TypeError("model: needs position_logits (every position's prediction, nothing masked): a fairseq "
                        "masked LM such as load_sapiens()")
    ids, free, framework = _parent_and_free(model, parent, cdrs)
    residues = residue_ids(model)  # (Sapiens' ordinary tokens: the 20 amino acids)
    x = ids.clone()
    for _ in range(iterations):
        logits = model.position_logits(x).float().cpu()[0].masked_fill(~residues, float("-inf"))
        x = torch.where(free, logits.argmax(-1)[None], ids)  # CDRs (and <s>, </s>) from the parent
    variant = _scored(model, parent, [_residues(model, x[0])], [0], float(hamming), energy)[0]
    p = _scored(model, parent, [parent], [0], 0.0, energy)[0]
    return Humanization(parent, tuple(framework), p.e_local, p.e_raw, (variant,))


def diversity(variants: Sequence[Variant]) -> float:
    """Mean pairwise Hamming distance between the variants' sequences (0 for fewer than two).

    >>> diversity([Variant("AAA", 0, 0, 0, ()), Variant("ABA", 0, 0, 0, ()), Variant("BBA", 0, 0, 0, ())])
    1.3333333333333333
    """
    seqs = [v.sequence for v in variants]
    pairs = [(a, b) for i, a in enumerate(seqs) for b in seqs[i + 1:]]
    return sum(sum(x != y for x, y in zip(a, b)) for a, b in pairs) / len(pairs) if pairs else 0.0
