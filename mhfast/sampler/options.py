"""The sampler's options, declared once: type, default, range, help and the paper section of each.

Everything else is generated from :data:`SPEC`:

* :class:`SamplerConfig`, the frozen dataclass that carries validated options from the API or the
  command line to the driver (:func:`config_from_kwargs`, :func:`config_from_args`);
* the argument checks of :func:`mhfast.sample` (``ValueError``/``TypeError`` naming the argument) and
  of the CLI (the same message naming the flag, exit status 2);
* the sampler flags of ``mhfast sample`` and ``mhfast translate`` (:func:`add_arguments`), so both
  commands offer the same flags with the same names, defaults and messages;
* the options table of ``docs/options.md`` (:func:`markdown_table`; a test keeps the file equal).

Adding an option = one :class:`Option` entry here (then read it from the config where it acts).

Example:
    >>> cfg = config_from_kwargs({"chains": 3, "energy": "local"})
    >>> cfg.chains, cfg.energy, cfg.epochs
    (3, 'local', 33)
    >>> config_from_kwargs({"top_p": 1.5})
    Traceback (most recent call last):
    ...
    ValueError: mhfast.sample: top_p must be in (0, 1], got 1.5
"""
from __future__ import annotations

import argparse
import contextlib
import contextvars
import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch

from ..energy_terms import check_extra_energy
from ..runtime.precision import NAMES as DTYPE_NAMES
from ..runtime.precision import parse as parse_dtype
from .kernels import KERNELS
from .ladder import check_tempering
from .scalars import MAX_SIZE, as_int, as_real
from .schedules import target_temperature

#: where the chains start (option start=): defined here, with the other choices of the spec, and explained in
#: mhfast.sampler.starts, which draws them
STARTS = ("greedy", "sampled", "random")
INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1
#: The most epochs a run may ask for: the epoch counter reaches the ops and the schedules' integer arithmetic
#: (block sizes interpolated over the epochs), which must not overflow int64; 2**31 - 1 epochs of even a
#: millisecond each are 25 days.
MAX_EPOCHS = 2 ** 31 - 1
FLOAT32_MAX = float(torch.finfo(torch.float32).max)


class OptionError(ValueError):
    """A value outside an option's range; the message does not yet name the option."""


#: True inside :func:`flag_names` (a command-line command runs): the sampler's own errors then name options
#: by their flags (--chains), as config_from_args does, instead of their API names (chains).
_FLAG_NAMES: contextvars.ContextVar[bool] = contextvars.ContextVar("mhfast_flag_names", default=False)


@contextlib.contextmanager
def flag_names() -> Iterator[None]:
    """Inside, :func:`display_name` gives CLI flags (``mhfast.cli`` runs every command in it)."""
    token = _FLAG_NAMES.set(True)
    try:
        yield
    finally:
        _FLAG_NAMES.reset(token)


def display_name(name: str) -> str:
    """How an error names option ``name``: its CLI flag inside :func:`flag_names`, else the API argument.

    Example:
        >>> display_name("chains")
        'chains'
        >>> with flag_names():
        ...     display_name("chains")
        '--chains'
    """
    return OPTIONS[name].flag if _FLAG_NAMES.get() and OPTIONS[name].cli else name


def shown(name: str, value: Any) -> str:
    """Option ``name`` set to ``value`` as an error shows it: ``--memo 4`` inside :func:`flag_names`, else
    ``memo=4``.

    Example:
        >>> shown("sampler", "gibbs")
        "sampler='gibbs'"
        >>> with flag_names():
        ...     shown("sampler", "gibbs")
        '--sampler gibbs'
    """
    if _FLAG_NAMES.get() and OPTIONS[name].cli:
        return f"{OPTIONS[name].flag} {value}"
    return f"{name}={value!r}"


def terms_name() -> str:
    """How an error names the extra energy terms: ``extra_energy`` (the API's argument), or in a command the flags
    that make them (the commands turn them into extra_energy terms)."""
    return "the energy terms (--hamming, --classifier)" if _FLAG_NAMES.get() else "extra_energy"


# ---------------------------------------------------------------------------- value checks
def _described(text: str) -> Callable[[Callable], Callable]:
    """Attach the human-readable range (``check.values``) that the docs table shows."""
    def wrap(check: Callable) -> Callable:
        check.values = text
        return check
    return wrap


def _int(low: int, high: int | None = None) -> Callable[[Any], Any]:
    span = f">= {low}" if high is None else f"in [{low}, {high}]"

    @_described("64-bit signed int" if (low, high) == (INT64_MIN, INT64_MAX) else f"int {span}")
    def check(v: Any) -> Any:
        n = as_int(v)
        if n is None or n < low or (high is not None and n > high):
            raise OptionError(f"must be an int {span}, got {v!r}")
        return n
    return check


def _optional_int(low: int, high: int | None = None) -> Callable[[Any], Any]:
    inner = _int(low, high)

    @_described(f"int {f'>= {low}' if high is None else f'in [{low}, {high}]'}, or None (chosen from the model and "
                "device)")
    def check(v: Any) -> Any:
        return None if v is None else inner(v)
    return check


def _float(low: float, *, strict: bool, high: float | None = None) -> Callable[[Any], Any]:
    span = f"in {'(' if strict else '['}{low:g}, {high:g}]" if high is not None else \
        f"a finite number {'>' if strict else '>='} {low:g}"

    @_described(span.replace("a finite number", "finite,"))
    def check(v: Any) -> Any:
        x = as_real(v)
        ok = x is not None and math.isfinite(x)
        ok = ok and (x > low if strict else x >= low) and (high is None or x <= high)
        if not ok:
            raise OptionError(f"must be {span}, got {v!r}")
        return v if type(v) in (int, float) else x  # numpy's numbers (np.float64 too) stored as Python's
    return check


def _choice(choices: Sequence[str]) -> Callable[[Any], Any]:
    @_described(", ".join(f"`{c}`" for c in choices))
    def check(v: Any) -> Any:
        if v not in choices:
            raise OptionError(f"must be one of {', '.join(map(repr, choices))}, got {v!r}")
        return v
    return check


@_described("int >= 1, one per epoch, or a callable")
def _block_schedule(v: Any) -> Any:
    """None, an int >= 1, one int >= 1 per epoch (list/tuple; length checked against epochs), or a callable."""
    if v is None or callable(v):
        return v
    if as_int(v) is not None:
        return _int(1, MAX_SIZE)(v)
    if isinstance(v, (list, tuple)) and v:
        sizes = [as_int(b) for b in v]
        for b, n in zip(v, sizes):
            if n is None or not 1 <= n <= MAX_SIZE:
                raise OptionError(f"entries must be ints in [1, {MAX_SIZE}], got {b!r}")
        return sizes
    raise OptionError(f"must be None, an int, a list of ints or a callable, got {v!r}")


@_described("`cpu`, `cuda`, `cuda:N`")
def check_device(v: Any) -> Any:
    """The ``device`` option's check (the scorers' ``--device`` uses it too): None (the model's device), or a device
    that exists and mhfast was built for; else an :class:`OptionError` (the caller names the option).

    Example:
        >>> check_device("cpu"), check_device(None)
        ('cpu', None)
    """
    if v is None:
        return None
    try:
        dev = torch.device(v)
    except (RuntimeError, TypeError, ValueError):
        raise OptionError(f"is not a device: {v!r} (use cpu, cuda or cuda:N)") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise OptionError(f"is {v!r} but no CUDA device is available")
        from .._C_loader import built_with_cuda

        if not built_with_cuda():  # the ops would fail at their first call, deep inside a step
            raise OptionError(f"is {v!r} but mhfast was built without CUDA kernels (rebuild on a machine with "
                              "nvcc, without MHFAST_FORCE_CPU)")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise OptionError(f"is {v!r} but only {torch.cuda.device_count()} CUDA device(s) exist")
    elif dev.type != "cpu":
        raise OptionError(f"must be a cpu or cuda device, got {v!r}")
    elif dev.index not in (None, 0):  # torch accepts cpu:N and puts everything on the one CPU device
        raise OptionError(f"is {v!r} but there is one CPU device (use cpu)")
    return v


def _as_option_error(check: Callable[[Any], Any], v: Any) -> Any:
    try:
        return check(v)
    except ValueError as e:
        raise OptionError(str(e)) from None


def _optional_float(low: float, *, strict: bool) -> Callable[[Any], Any]:
    """None (off) or a finite number above (``strict``) or at least ``low``."""
    inner = _float(low, strict=strict)

    @_described(f"None (off), or {inner.values}")
    def check(v: Any) -> Any:
        return None if v is None else float(inner(v))
    return check


@_described("`True`, `False`")
def _bool(v: Any) -> Any:
    if not isinstance(v, bool):
        raise OptionError(f"must be True or False, got {v!r}")
    return v


@_described("finite, within float32's range")
def _weight(v: Any) -> Any:
    """A term's weight: the terms are weighted into a float32 energy, so a weight beyond float32 (1e39) was caught
    only at the first proposal, as the terms' overflow."""
    x = as_real(v)
    if x is None or not math.isfinite(x) or abs(x) > FLOAT32_MAX:
        raise OptionError(f"must be a finite number within float32's range (|w| <= {FLOAT32_MAX:.6g}), got {v!r}")
    return v if type(v) in (int, float) else x


@_described("a path (or None)")
def _path(v: Any) -> Any:
    if v is not None and (not isinstance(v, str) or not v):
        raise OptionError(f"must be a path, got {v!r}")
    return v


@_described("a label index or name")
def _label(v: Any) -> Any:
    if not isinstance(v, str) or not v:
        raise OptionError(f"must be a label index or name, got {v!r}")
    return v


AUTO_UNIFORM_MIX = 0.01  #: what uniform_mix="auto" gives an MH sampler whose nucleus is cut (top_p < 1)


@_described("`auto`, or a number in [0, 1)")
def _uniform_mix(v: Any) -> Any:
    """``"auto"`` or a number in [0, 1) (1 would leave nothing of the MLM proposal)."""
    if v == "auto":
        return v
    x = as_real(v)
    if x is None or not 0 <= x < 1:  # NaN fails too
        raise OptionError(f"must be 'auto' or a number in [0, 1), got {v!r}")
    return x


@_described("None (off), an int K >= 2 (a ladder tuned in burn-in), or K >= 2 increasing temperatures "
           "from target_temperature (fixed)")
def _tempering(v: Any) -> Any:
    """None, K rungs, or the temperatures of a fixed ladder (:func:`mhfast.sampler.ladder.check_tempering`)."""
    return _as_option_error(check_tempering, v)


#: The smallest per-token uniform share the sampler's fp32 uniforms realize to ~12% (8 of their 2^23 levels).
FINEST_SHARE = 2.0 ** -20


def resolved_uniform_mix(cfg: Any, vocab_size: int = 0) -> float:
    """The uniform_mix the proposal uses: ``auto`` -> 0 when the nucleus is the whole support
    (``top_p == 1``: every proposable token already has q > 0) or the sampler has no Hastings
    correction (Gibbs), else :data:`AUTO_UNIFORM_MIX`, raised to ``vocab_size * FINEST_SHARE`` for large
    vocabularies (0.029 at V = 30522) so that each token's share is one the fp32 uniforms can draw.

    Example:
        >>> resolved_uniform_mix(config_from_kwargs({"top_p": 0.9})), resolved_uniform_mix(config_from_kwargs({}))
        (0.01, 0.0)
        >>> round(resolved_uniform_mix(config_from_kwargs({"top_p": 0.9}), vocab_size=30522), 4)
        0.0291
    """
    if cfg.uniform_mix != "auto":
        return float(cfg.uniform_mix)
    if cfg.top_p < 1 and KERNELS[cfg.sampler].capabilities.hastings:
        return max(AUTO_UNIFORM_MIX, vocab_size * FINEST_SHARE)
    return 0.0


AUTO_MEMO = 8  #: the proposal memo's entries per chain under memo="auto", where it can act
#: The most entries per chain (each costs 3 T numbers in the input's table). On AntiBERTy from a real antibody the
#: default 8 already gets 43 of the 47 and 86 of the 92 rejected repeats an unbounded table gets (bench/RESULTS.md).
MAX_MEMO = 64


@_described(f"`auto`, or an int in [0, {MAX_MEMO}]")
def _memo(v: Any) -> Any:
    """``"auto"`` or an int in [0, MAX_MEMO] (entries per chain; 0 = off)."""
    if v == "auto":
        return v
    n = as_int(v)
    if n is None or not 0 <= n <= MAX_MEMO:
        raise OptionError(f"must be 'auto' or an int in [0, {MAX_MEMO}], got {v!r}")
    return n


def resolved_memo(cfg: Any, extra_terms: bool = False, delayed: bool = False) -> int:
    """The proposal memo's entries per chain: ``auto`` -> :data:`AUTO_MEMO` where the memo can act (the kernel's
    :meth:`~mhfast.sampler.kernels.base.Capabilities.memo_acts`, with ``extra_terms``: whether the run has extra
    energy terms; ``delayed``: delayed acceptance acts in this run, which evaluates the extra terms of every
    tested X', so the memo may act with them), else 0; an int as given (the checks have refused it where the memo
    cannot act).

    Example:
        >>> resolved_memo(config_from_kwargs({})), resolved_memo(config_from_kwargs({"sampler": "gibbs"}))
        (8, 0)
    """
    if cfg.memo != "auto":
        return int(cfg.memo)
    return AUTO_MEMO if KERNELS[cfg.sampler].capabilities.memo_acts(cfg.capture, extra_terms, delayed) else 0


#: What delayed="auto" runs in a sampler that ranks windows by influence (single-site mh). Chosen by measurement
#: (bench/RESULTS.md, "More seeds, with confidence intervals, and what auto runs"): over paired seeds influence:2
#: forwarded 1.15x [1.05, 1.26] fewer rows per accepted change than window:2 on AntiBERTy infilling (12 seeds) and
#: tied on the annealed CMLM main job (1.02x [0.99, 1.06], 8 seeds); influence:3 pays more rows in stage 1 for no
#: better screen, and a window of 1 loses most of the ESS on AntiBERTy infilling. cascade:1 forwards 1.10-1.28x
#: fewer rows per accepted change than influence:2 on the annealed CMLM cases, but per row budget finds no better
#: energies ("Best energy per row budget", 2026-11-29), and at beta = 1/tau (infilling) it is window:1.
AUTO_DELAYED = "influence:2"
#: What delayed="auto" runs in the other delayed-acceptance samplers (block-mh: its windows are distance windows).
AUTO_WINDOW = 2
#: delayed="auto" stays off for an input whose energy rows per proposal (T_e - 1) are at most 2 K + this: the rows
#: the second stage could save are then too few to pay for the first stage's extra host sync and op calls.
AUTO_MIN_SAVED = 4
MAX_WINDOW = 1 << 20
#: What delayed_min_temperature="auto" gives delayed="auto" in an annealed run: delayed acceptance in the epochs whose
#: target temperature is at least this, plain MH's step in the colder ones. A fixed target gets 0, every epoch: there
#: influence:2 forwards 2.07x [1.85, 2.31] fewer rows per accepted change at 0.2 and 1.01x at 0.1 (the CMLM;
#: bench/RESULTS.md "At a fixed cold target"). Chosen by measurement (bench/RESULTS.md,
#: "Delayed acceptance only while warm", 2026-11-29): on the annealed main job (16 seeds) influence:2 switched off
#: below 0.25 (its last two epochs) needs 1.40x [1.11, 1.92] fewer rows than plain MH's own curve for the same best
#: energy, against 1.31x [open, 1.80] for influence:2 in every epoch, and ends 0.39 [0.12, 0.66] nats lower than
#: it for 1.20x its rows, more than influence:2 gains from 1.42x the rows on a stretched schedule (0.28). A cold
#: chain's remaining moves trade a local cost for a gain elsewhere, which every factorised first stage takes
#: with a probability that vanishes as 1 / temperature grows (docs/delayed.md, "Only while warm").
AUTO_DELAYED_MIN_TEMPERATURE = 0.25


@_described("`None`, `auto`, `window:K`, `influence:K`, `early:K` or `cascade:K` (K an int in [0, 1048576]), or "
            "(API only) a callable surrogate")
def _delayed(v: Any) -> Any:
    """None, ``"auto"``, ``"window:K"`` (delayed acceptance with the K nearest positions on each side),
    ``"influence:K"`` (as many positions, those whose terms changed most in burn-in: :mod:`.moves.influence`),
    ``"early:K"`` (exact early rejection: as many rows first, ranked by the terms of X'; :mod:`.moves.delayed`),
    ``"cascade:K"`` (three stages: the proposal's own term, then ``window:K``'s rows, then the rest) or a
    user's surrogate ``E~(tokens, pos)`` (:mod:`mhfast.sampler.moves.user_surrogate`; only the API can pass one)."""
    if v is None or v == "auto" or (callable(v) and not isinstance(v, str)):
        return v
    for kind in ("window:", "influence:", "early:", "cascade:"):
        if isinstance(v, str) and v.startswith(kind):
            k = v[len(kind):]
            if k.isascii() and k.isdigit() and int(k) <= MAX_WINDOW:  # ('²'.isdigit(), yet int('²') fails)
                return f"{kind}{int(k)}"
    raise OptionError(f"must be None, 'auto', 'window:K', 'influence:K', 'early:K' or 'cascade:K' with K an int in "
                      f"[0, {MAX_WINDOW}], or (API only) a callable surrogate(tokens, pos), got {v!r}")



def post_burn_in_draws(epochs: int, burn_in: int, trace_every: int = 1) -> int:
    """The traced sweeps after burn-in (sweep e is traced when (e + 1) % trace_every == 0): the draws per chain
    the diagnostics read.

    Example:
        >>> post_burn_in_draws(10, 4), post_burn_in_draws(10, 4, 3), post_burn_in_draws(4, 4)
        (6, 2, 0)
    """
    return epochs // trace_every - burn_in // trace_every


def resolved_delayed(cfg: Any, num_energy: int, device: "str | torch.device" = "cpu") -> Any:
    """Option ``delayed`` as the kernel runs it, for a run on ``device`` whose input has ``num_energy`` energy
    positions (the kernel is built with the longest input's choice): None (off), ``"window:K"``, ``"influence:K"``
    or the user's callable. ``auto`` -> :data:`AUTO_DELAYED` in a sampler that ranks windows by influence,
    ``window:``:data:`AUTO_WINDOW` in the others, each where ``num_energy - 1 > 2 K + AUTO_MIN_SAVED`` (else off:
    too few rows left to save; the kernel applies the same rule to each input, :func:`auto_fewest_energy`, so an
    input's chains do not depend on what else is in the batch), and off on a CUDA device: there a step's small
    forwards are bound by kernel launches, not rows, so the rows the second stage saves
    save no time while the first stage adds its launches (bench/CUDA_NOTES.md, fourth run: on an H200 the main job
    took 1.8x the wall time with ``influence:2``, with 2x fewer rows).

    Example:
        >>> resolved_delayed(config_from_kwargs({"delayed": "window:3"}), 32)
        'window:3'
        >>> resolved_delayed(config_from_kwargs({"delayed": "auto"}), 32), resolved_delayed(config_from_kwargs({}), 32)
        ('influence:2', None)
        >>> resolved_delayed(config_from_kwargs({"delayed": "auto", "sampler": "block-mh"}), 32)
        'window:2'
        >>> auto = config_from_kwargs({"delayed": "auto"})
        >>> resolved_delayed(auto, 10), resolved_delayed(auto, 9)  # 9 rows per proposal, or 8: too few to save
        ('influence:2', None)
        >>> resolved_delayed(auto, 32, "cuda:0"), resolved_delayed(config_from_kwargs({"delayed": "window:2"}), 32, "cuda")
        (None, 'window:2')
    """
    if cfg.delayed != "auto":
        return cfg.delayed
    if torch.device(device).type == "cuda":
        return None
    chosen = AUTO_DELAYED if KERNELS[cfg.sampler].capabilities.influence else f"window:{AUTO_WINDOW}"
    return chosen if num_energy >= auto_fewest_energy(chosen) else None


def auto_fewest_energy(chosen: str) -> int:
    """The fewest energy positions of an input on which ``delayed="auto"``'s choice ``chosen`` (``"influence:K"`` /
    ``"window:K"``) acts: ``T_e - 1 > 2 K + AUTO_MIN_SAVED`` rows per proposal. The kernel tests each input against
    it (the other inputs of a run take plain MH's step), so that an input's chains are those it gets alone.

    Example:
        >>> auto_fewest_energy("influence:2")
        10
    """
    return 2 * int(chosen.split(":")[1]) + AUTO_MIN_SAVED + 2


@_described("`auto`, or a finite number >= 0")
def _delayed_min_temperature(v: Any) -> Any:
    """``"auto"`` or a finite temperature >= 0 (0: delayed acceptance in every epoch)."""
    if v == "auto":
        return v
    x = as_real(v)
    if x is None or not math.isfinite(x) or x < 0:
        raise OptionError(f"must be 'auto' or a finite number >= 0, got {v!r}")
    return x


def resolved_delayed_min_temperature(cfg: Any) -> float:
    """The target temperature below which an epoch runs plain MH's step instead of delayed acceptance's: ``auto``
    -> :data:`AUTO_DELAYED_MIN_TEMPERATURE` for ``delayed="auto"`` in an annealed run, else 0 (every epoch: a
    setting named by hand, as the option asks, and a fixed target, where delayed acceptance pays at every
    temperature measured, 0.1 included).

    Example:
        >>> [resolved_delayed_min_temperature(config_from_kwargs(kw)) for kw in
        ...  ({"delayed": "auto", "anneal": 0.08}, {"delayed": "auto", "target_temperature": 0.2},
        ...   {"delayed": "influence:2", "anneal": 0.08},
        ...   {"delayed": "window:1", "delayed_min_temperature": 0.5, "anneal": 0.1, "epochs": 12})]
        [0.25, 0.0, 0.0, 0.5]
    """
    if cfg.delayed_min_temperature != "auto":
        return float(cfg.delayed_min_temperature)
    return AUTO_DELAYED_MIN_TEMPERATURE if cfg.delayed == "auto" and cfg.anneal > 0 else 0.0


# ---------------------------------------------------------------------------- CLI parsers
def _parse_auto_or(convert: Callable[[str], Any], what: str) -> Callable[[str], Any]:
    """A CLI parser of an option that takes 'auto' or a value: 'auto' -> 'auto', else ``convert(text)``.

    Example:
        >>> _parse_auto_or(float, "a number")("0.05"), _parse_auto_or(int, "an int")("auto")
        (0.05, 'auto')
    """
    def parse(text: str) -> Any:
        if text == "auto":
            return text
        try:
            return convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected 'auto' or {what}, got {text!r}") from None
    return parse


def _parse_tempering(text: str) -> Any:
    """'4' -> 4 (rungs), '1,2,4,8' -> [1.0, 2.0, 4.0, 8.0] (temperatures), 'none' -> None.

    Example:
        >>> _parse_tempering("4"), _parse_tempering("1,2.5"), _parse_tempering("none")
        (4, [1.0, 2.5], None)
    """
    if text.strip().lower() == "none":
        return None
    try:
        return int(text) if "," not in text else [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of rungs or comma-separated temperatures, got "
                                         f"{text!r}") from None


def _parse_block_schedule(text: str) -> Any:
    """'4' -> 4, '4,3,2,1' -> [4, 3, 2, 1] (one per epoch)."""
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an int or comma-separated ints, got {text!r}") from None
    return values[0] if len(values) == 1 else values


@dataclass(frozen=True)
class Option:
    """One sampler option. ``check`` validates (and may normalize) a value; ``cli`` = a flag of both commands."""

    name: str
    default: Any
    check: Callable[[Any], Any]
    help: str
    section: str
    type: str  #: how the docs and the CLI show it: int, float, choice, schedule, mix, str, flag
    choices: tuple[str, ...] = ()
    cli: bool = True
    metavar: str | None = None
    api: bool = True  #: False: a CLI-only flag (the API takes the object it builds, e.g. extra_energy terms)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def parser(self) -> Callable[[str], Any]:
        return {"int": int, "float": float, "schedule": _parse_block_schedule,
                "mix": _parse_auto_or(float, "a number"), "memo": _parse_auto_or(int, "an int"),
                "ladder": _parse_tempering}.get(self.type, str)


SAMPLERS = tuple(KERNELS)
ENERGIES = ("raw", "local")
ORDERS = ("random", "left-to-right")
FORWARDS = ("fast", "full")
CAPTURES = ("none", "static", "cuda-graph")

SPEC: tuple[Option, ...] = (
    Option("energy", "raw", _choice(ENERGIES), "target energy: raw = -sum of raw logits, local = -sum of masked "
           "log-probabilities (pseudo-log-likelihood)", "2.1, 2.2", "choice", ENERGIES),
    Option("sampler", "mh", _choice(SAMPLERS), "mh: single-site MH; gibbs: degenerate Gibbs (always accepts); "
           "block-mh: block proposals, exact MH ratio; block-gibbs: block proposals, always accepted",
           "3, 4.1, 6, 7.3", "choice", SAMPLERS),
    Option("chains", 5, _int(1, MAX_SIZE), "Markov chains per input", "5", "int"),
    Option("epochs", 33, _int(1, MAX_EPOCHS), "sweeps over the free positions", "5", "int"),
    Option("burn_in", 7, _int(0), "epochs before best-sample tracking and recording start (<= epochs)", "5", "int"),
    Option("order", "random", _choice(ORDERS), "position order of each sweep: a fresh random permutation per "
           "chain and epoch, or left to right", "4", "choice", ORDERS),
    Option("proposal_temperature", 1.0, _float(0.0, strict=True), "temperature of the MLM proposal", "7.1",
           "float"),
    Option("top_p", 1.0, _float(0.0, strict=True, high=1.0), "nucleus of the MLM proposal (1 = whole vocabulary)",
           "7.2", "float"),
    Option("uniform_mix", "auto", _uniform_mix, "share eps of the proposal drawn uniformly from the proposable "
           "tokens: q = (1 - eps) q_nucleus + eps / n, exact in the MH ratio. With top_p < 1 the nucleus "
           "alone can make the chain reducible (tokens outside every nucleus are never reached) and MH then "
           f"misses the target; eps > 0 makes every proposable token reachable. auto: {AUTO_UNIFORM_MIX} (or "
           "V * 2^-20 for vocabularies above ~10k, so each token's share is one fp32 uniforms can draw) when "
           "top_p < 1 (costs about eps extra rejected proposals; an escape from a nucleus-closed class needs "
           "~n / eps proposals), 0 when top_p = 1 (already full support) and for gibbs/block-gibbs, which have "
           "no Hastings correction and reject eps > 0; 0 = the pure nucleus proposal", "7.2", "mix",
           metavar="EPS|auto"),
    Option("block_schedule", None, _block_schedule, "block size of block-mh/block-gibbs (an error with the "
           "single-site samplers): an int, one int per epoch, or (API) a callable epoch -> size; default: linear "
           "shrink from n//4 to 1. A size above an input's free positions n gives that input blocks of n (the whole "
           "input at once), with a warning", "App. D", "schedule",
           metavar="N[,N...]"),
    Option("target_temperature", 1.0, _float(0.0, strict=True), "temperature tau of the target exp(-E/tau) (mh, "
           "block-mh: gibbs and block-gibbs accept every proposal and reject the acceptance options)", "8",
           "float"),
    Option("anneal", 0.0, _float(0.0, strict=False), "target temperature decrease per epoch (mh, block-mh)", "8",
           "float"),
    Option("min_target_temperature", 0.05, _float(0.0, strict=True), "floor of the annealed target temperature "
           "(needs anneal > 0: a fixed target temperature is used as given)", "8", "float"),
    Option("tempering", None, _tempering, "parallel tempering (replica exchange): K replicas of every chain on a "
           "ladder of temperatures from target_temperature up, stepped in the same batch, swapping states between "
           "neighbouring rungs after every sweep (non-reversible even/odd scheme, exact acceptance; swaps cost no "
           "model rows); only the target's replicas are samples. K: a geometric ladder tuned during burn-in (equal "
           "swap rejection between neighbours; hot end raised while the hottest replica does not mix), fixed after "
           "it; a list of temperatures (CLI: 1,2,4,8): used as given. Costs K times the rows per sweep; for chains "
           "stuck in separate modes. mh and block-mh, anneal 0; with capture (sampler mh) the rungs ride in the "
           "captured step (mhfast.sampler.tempering)", "-",
           "ladder", metavar="K|T1,T2,..."),
    Option("force_accept_epochs", 0, _int(0), "accept every proposal in the first N epochs (N <= epochs; mh, "
           "block-mh); forced epochs past burn_in are kept as samples of a target they do not sample: N <= burn_in "
           "to sample it (until_rhat / min_ess require that)", "App. F", "int"),
    Option("seed", 0, _int(INT64_MIN, INT64_MAX), "seed of the counter-based random numbers (mhfast.sample: or "
           "generator=, not both)", "-", "int"),
    Option("device", None, check_device, "where the chains live: cpu, cuda, cuda:N (default: the model's device)",
           "-", "str", metavar="DEVICE"),
    Option("backend", "compiled", _choice(("compiled", "reference")), "compiled ops (mhfast.ops) or their "
           "pure-PyTorch references (same chains)", "-", "choice", ("compiled", "reference")),
    Option("max_tokens_per_batch", None, _optional_int(1, MAX_SIZE), "masked rows are forwarded in sub-batches of "
           "at most max_tokens_per_batch // T rows; default on CPU: hidden states of twice one core's L2 cache "
           "(tokens = 2 L2 / (d x bytes per value) for a model of width d: 2048 at d=512 in fp32 with 2 MiB of L2, "
           "1024 with 1 MiB; 4x L2 for a bf16/fp16 forward on AMX), the fastest sub-batches bench/bench_forward.py "
           "measured on two CPUs; else (GPUs, models of unknown width) 65536", "-", "int"),
    Option("forward", "fast", _choice(FORWARDS), "fast: skip model work whose output is never read (the last "
           "encoder layer only at the masked positions, where that is the layer's own computation: BERT-family "
           "HuggingFace models and AntiBERTy; for fairseq CMLMs also the encoder-attention keys/values once per "
           "source; other models run as they are); full: the model's whole forward, "
           "for checking (same chains up to float rounding)", "-", "choice", FORWARDS),
    Option("dtype", None, _described("`float32`, `bfloat16`, `float16` (or a torch dtype)")(
        lambda v: _as_option_error(parse_dtype, v)), "precision of the model's forward (autocast; energies in "
        "fp32): MH is then exact for the model as evaluated in that precision; warns where the hardware has no "
        "fast path", "-", "choice", tuple(DTYPE_NAMES)),
    Option("capture", "none", _choice(CAPTURES), "static shapes for sampler mh: none = forward only the rows of "
           "chains whose proposal changed them (one host sync per step); static = forward every moving chain's "
           "rows and keep the unchanged chains' results (the same chains, more rows, no host sync); cuda-graph = "
           "the static step captured as a CUDA graph and replayed (CUDA only; for launch-bound runs: small "
           "models, few chains; re-captured every epoch when annealing)", "-", "choice", CAPTURES),
    Option("memo", "auto", _memo, "remember the energy terms of the proposals the chains of an input evaluated "
           "(N entries per chain, in one table per input keyed by the whole sequence X', least recently used out): a "
           "chain that proposes a sequence already evaluated, by itself or by another chain of the same input, "
           "earlier or in the same step, meets the MH test without forwarding its T-1 rows (the same numbers, so the "
           "same chains; mhfast.sampler.memo); where the entries' model rows fit in 256 MiB they are "
           "kept too, so that a chain accepting a remembered sequence forwards nothing. Pays where chains sit "
           "near a mode or share a start. Acts in "
           "single-site mh with capture none and no extra energy terms (with them too under delayed acceptance); "
           "auto = 8 there and off elsewhere; 0 = off. "
           "Its bookkeeping is two op calls per step", "-", "memo", metavar="N"),
    Option("delayed", None, _delayed, "delayed-acceptance MH (Christen & Fox 2005; docs/delayed.md): each "
           "proposal first meets a cheap MH test against a surrogate energy, the exact terms of the K positions "
           "nearest the proposed one on each side (their rows of X'; the rest taken as unchanged), and only the "
           "survivors forward their other rows for a second test that corrects to the exact target (the same "
           "target, a lower acceptance, fewer rows per proposal). window:K = that window; influence:K = as many "
           "positions, those whose terms changed most when the proposed one changed (ranked per input and position "
           "in burn-in, then frozen; sampler mh; docs/delayed.md); early:K = exact early rejection (energy local, "
           "sampler mh): the first 2K rows of X' (ranked by the terms of X'), then 8K, bound E(X') from below (the "
           "other terms taken as 0) and meet exact MH's test with its own uniform, so only proposals exact MH "
           "rejects stop early and the chains are plain MH's, bit for bit, with fewer rows; cascade:K = three "
           "stages (sampler mh): the proposal's own term alone (no rows), then window:K's rows for its survivors, "
           "then the rest, each stage tested against the previous one's energy; "
           "auto = influence:2 (block-mh: window:2) where an "
           "input has more than 2*2+4 energy rows per proposal and the chains are not on a CUDA device (there the "
           "saved rows save no time: measured 1.8x slower on an H200), else off; None = off; API only: a callable "
           "surrogate(tokens, pos) -> E~ of each row at its proposed position (mhfast.surrogates.model_energy: a "
           "smaller model's energy; stage 1 then forwards no rows; sampler mh). Samplers mh and block-mh "
           "(there the window is the positions within K of any position of the block), capture none; the memo "
           "composes with it (a remembered X' needs no rows in either stage)", "-", "str", metavar="SURROGATE"),
    Option("delayed_min_temperature", "auto", _delayed_min_temperature, "delayed acceptance acts in the epochs "
           "whose target temperature is at least this; a colder epoch runs plain MH's step (each epoch's kernel "
           "keeps that epoch's target either way; with tempering the target rung's temperature decides for all "
           "rungs). For annealed runs: near the cold end the moves a chain can still make trade a local cost for "
           f"a gain elsewhere, and a first stage passes them ever more rarely. auto = "
           f"{AUTO_DELAYED_MIN_TEMPERATURE} with delayed=auto and anneal > 0 (measured on the annealed main job: 1.40x "
           "fewer rows than plain MH for the same best energy, against 1.31x in every epoch), else 0 (every epoch; "
           "at a fixed target it pays at 0.2 and 0.1 too)", "-",
           "mix", metavar="TAU|auto"),
    Option("compile", False, _bool, "torch.compile the model's repeated blocks (its layers, each on its own, "
           "dynamic shapes; mhfast.models.compiled_blocks) for the run; the compile time is reported "
           "(SampleResult.compile_seconds, seconds). Can pay where the layers' elementwise work and Python are a "
           "sizeable part of a row; on CPU it did not (AntiBERTy, T=32: 0.97-1.03x per row in the sampler on an AMD "
           "EPYC, 0.93-1.01x for the layers on an Intel Xeon), nor on an H200 (the layers: 0.76-1.10x per row, "
           "fp32 and bf16). Chains: the model as "
           "compiled (same target up to float rounding)", "-", "flag"),
    Option("start", "greedy", _choice(STARTS), "where the chains start (mhfast.sampler.starts): greedy = every "
           "chain at the greedy warm start (Algorithm 1; no dispersion, so R-hat cannot see chains stuck in one "
           "mode); sampled = each chain draws the masked free positions from the warm start's conditionals (at the "
           "proposal temperature): dispersed around what the model finds plausible (an input with no mask to draw "
           "is an error); random = every free position a uniformly random proposable token (over-dispersed, for "
           "the strictest R-hat; needs burn-in). The API also "
           "takes init=Long[B, chains, T], one start per chain", "5", "choice", STARTS),
    Option("trace_every", 1, _int(1), "record the traces (E_raw, E_local, each extra term, random projections of "
           "the sequence; per chain) after every N-th sweep; the diagnostics use the post-burn-in ones "
           "(mhfast.sampler.traces)", "-", "int", metavar="N"),
    Option("until_rhat", None, _optional_float(1.0, strict=True), "stop an input once every traced summary that "
           "varies has rank-normalized split R-hat below this (ArviZ's threshold: 1.01), checked after every traced "
           "post-burn-in sweep (past 256 draws per chain, after every D/128-th); epochs is the cap. A converged input "
           "leaves the batch, the others go on with the same chains (mhfast.sampler.adaptive, which says what this "
           "does and does not guarantee). Needs chains >= 2, a fixed target (anneal 0) and arviz-stats "
           "(mhfast[diagnostics])", "-", "float", metavar="RHAT"),
    Option("min_ess", None, _optional_float(0.0, strict=False), "with or without until_rhat: an input is "
           "converged only once every traced summary also has bulk and tail ESS of at least this (ArviZ "
           "recommends 100 per chain)", "-", "float", metavar="ESS"),
    Option("length_beam", 1, _int(1, MAX_SIZE), "length candidates per source (needs source=: conditional models)",
           "5", "int", cli=False),
    Option("record", "final", _choice(("final", "epoch")), "'epoch' also returns the end-of-epoch states after "
           "burn-in", "-", "choice", ("final", "epoch"), cli=False),
    Option("replicas", False, _bool, "with tempering: also return the auxiliary replicas, every rung's final "
           "states (SampleResult.replica_tokens) and each replica's target energy after every epoch "
           "(replica_energy); rung k's chains sample exp(-E / T_k), so one run gives samples at every temperature "
           "of the ladder (after burn-in, when the ladder is fixed)", "-", "flag", cli=False),
    Option("extra_energy", None, _described("a callable, or a list of callables, (callable, weight) pairs and an "
           "AllowedTokens")(lambda v: _as_option_error(check_extra_energy, v)),
           "energy terms added to the MLM energy (product of experts; see mhfast.energy_terms): the target is "
           "exp(-(E + sum_k w_k f_k) / tau); MH and block MH only", "-", "terms", cli=False),
    Option("hamming", 0.0, _float(0.0, strict=False, high=FLOAT32_MAX), "weight of a Hamming-distance energy term "
           "to a reference sequence per input (--hamming-reference; mhfast sample: default the --init sequences)",
           "-", "float", api=False, metavar="WEIGHT"),
    Option("hamming_reference", None, _path, "file with one reference per input line for --hamming (text for the "
           "model's tokenizer; translate: target sentences); a reference must have its sequence's length, special "
           "tokens included (for translate the predicted target length)", "-", "str", api=False, metavar="FILE"),
    Option("classifier", None, _path, "local HuggingFace *ForSequenceClassification directory: adds "
           "-log p(label | X) as an energy term (controlled generation)", "-", "str", api=False, metavar="DIR"),
    Option("classifier_label", "1", _label, "the classifier's label to steer toward (index or name; needs "
           "--classifier)", "-", "str", api=False, metavar="LABEL"),
    Option("classifier_weight", 1.0, _weight, "weight of the classifier term (needs --classifier)", "-",
           "float", api=False, metavar="WEIGHT"),
    Option("select", "energy_per_token", _choice(("energy_per_token", "energy")), "how the best length "
           "candidate of a source is chosen (needs source= and length_beam > 1)", "5", "choice",
           ("energy_per_token", "energy"), cli=False),
)
OPTIONS: Mapping[str, Option] = {o.name: o for o in SPEC}

SamplerConfig = dataclasses.make_dataclass(
    "SamplerConfig", [(o.name, Any, dataclasses.field(default=o.default)) for o in SPEC if o.api], frozen=True,
    namespace={"__doc__": "Validated sampler options (fields: see mhfast.sampler.options.SPEC). Build it with "
               "config_from_kwargs or config_from_args; it is immutable.",
               "__module__": __name__})


def _cross_checks(values: dict, name_of: Callable[[str], str]) -> None:
    """Checks that relate two options (the message starts with the first)."""
    if values["epochs"] < values["burn_in"]:
        raise OptionError(f"{name_of('epochs')} ({values['epochs']}) must be >= {name_of('burn_in')} "
                          f"({values['burn_in']})")
    if values["force_accept_epochs"] > values["epochs"]:  # the epochs past the run's end would be silently dropped
        raise OptionError(f"{name_of('force_accept_epochs')} ({values['force_accept_epochs']}) must be <= "
                          f"{name_of('epochs')} ({values['epochs']})")
    if values["anneal"] > 0 and values["min_target_temperature"] > values["target_temperature"]:
        raise OptionError(f"{name_of('min_target_temperature')} ({values['min_target_temperature']}) must be <= "
                          f"{name_of('target_temperature')} ({values['target_temperature']}) when annealing")
    lowest = values["target_temperature"] if values["anneal"] == 0 else values["min_target_temperature"]
    if 1.0 / lowest > FLOAT32_MAX:  # beta = 1 / tau is a float32 in the accept op
        raise OptionError(f"{name_of('target_temperature' if values['anneal'] == 0 else 'min_target_temperature')} "
                          f"({lowest}) is too small: 1 / temperature must fit in float32 (>= {1 / FLOAT32_MAX:.3g})")
    for name in ("proposal_temperature", "target_temperature", "min_target_temperature"):
        # the ops take temperatures (and 1 / temperature) as float32: beyond its range they become inf / 0
        if name != "min_target_temperature" or values["anneal"] > 0:
            if not 1.0 / FLOAT32_MAX <= values[name] <= FLOAT32_MAX:
                raise OptionError(f"{name_of(name)} ({values[name]}) must be in [{1 / FLOAT32_MAX:.3g}, "
                                  f"{FLOAT32_MAX:.3g}]: it and 1 / it must fit in float32")
    every, epochs, burn_in = values["trace_every"], values["epochs"], values["burn_in"]
    if every > 1 and post_burn_in_draws(epochs, burn_in, every) == 0:
        # no sweep after burn-in would be traced: every diagnostic NaN and until_rhat / min_ess never met, silently
        raise OptionError(f"{name_of('trace_every')} ({every}) traces no sweep after {name_of('burn_in')} ({burn_in}) "
                          f"within {name_of('epochs')} ({epochs}): the diagnostics would have nothing to read")
    caps = KERNELS[values["sampler"]].capabilities
    if values["uniform_mix"] not in ("auto", 0.0) and not caps.hastings:
        raise OptionError(f"{name_of('uniform_mix')} ({values['uniform_mix']}) must be 0 or 'auto' with "
                          f"{name_of('sampler')} {values['sampler']}: it always accepts (no Hastings correction), "
                          "so a uniform share would change what it samples (use mh or block-mh)")
    if values["capture"] != "none" and not caps.capture:
        raise OptionError(f"{name_of('capture')} {values['capture']} needs {name_of('sampler')} "
                          f"{_kernels_that('capture')} (the static step is single-site MH's), got {values['sampler']}")
    if values["capture"] == "cuda-graph" and values["backend"] != "compiled":
        raise OptionError(f"{name_of('capture')} cuda-graph needs {name_of('backend')} compiled (the reference "
                          "ops check values on the host, which a captured graph cannot do)")
    if values["memo"] not in ("auto", 0) and not caps.memo_acts(values["capture"], extra_terms=False):
        raise OptionError(f"{name_of('memo')} {values['memo']} needs {name_of('sampler')} {_kernels_that('memo')} and "
                          f"{name_of('capture')} none (the memo serves the dynamic single-site step), got "
                          f"{values['sampler']} and {values['capture']}")
    if values["compile"] and values["capture"] == "cuda-graph":
        raise OptionError(f"{name_of('compile')} cannot be combined with {name_of('capture')} cuda-graph yet (a "
                          "compile inside a graph capture is not supported here; capture already removes the "
                          "launch overhead that compiling would)")
    _diagnostics_checks(values, name_of)
    _tempering_checks(values, name_of)
    schedule = values["block_schedule"]
    if isinstance(schedule, list) and len(schedule) != values["epochs"]:
        raise OptionError(f"{name_of('block_schedule')} has {len(schedule)} entries, expected one per epoch "
                          f"({values['epochs']})")
    if values["delayed"] is not None:
        _delayed_checks(values, name_of)
    elif _is_set(values, "delayed_min_temperature"):
        raise OptionError(f"{name_of('delayed_min_temperature')} ({values['delayed_min_temperature']}) has no effect "
                          f"without {name_of('delayed')}: it says in which epochs delayed acceptance acts")
    _no_effect_checks(values, name_of)


def _delayed_checks(values: Mapping[str, Any], name_of: Callable[[str], str]) -> None:
    """delayed acts in the dynamic step of a kernel that declares it (single-site and block MH, capture none);
    the memo composes with it (it supplies numbers to both stages, never the kernel: docs/delayed.md)."""
    shown = f"{name_of('delayed')} {values['delayed']}"
    if not KERNELS[values["sampler"]].capabilities.delayed:
        raise OptionError(f"{shown} has no effect with {name_of('sampler')} {values['sampler']}: only "
                          f"{_kernels_that('delayed')} have a delayed-acceptance step")
    if values["capture"] != "none":
        raise OptionError(f"{shown} needs {name_of('capture')} none (the static step forwards every row), got "
                          f"{values['capture']}")
    if callable(values["delayed"]) and not KERNELS[values["sampler"]].capabilities.user_surrogate:
        raise OptionError(f"{name_of('delayed')} as a callable surrogate needs {name_of('sampler')} "
                          f"{_kernels_that('user_surrogate')} (its E~(tokens, pos) is of one proposed position), "
                          f"got {values['sampler']}")
    if isinstance(values["delayed"], str) and values["delayed"].startswith(("influence:", "early:", "cascade:")) \
            and not KERNELS[values["sampler"]].capabilities.influence:
        raise OptionError(f"{shown} needs {name_of('sampler')} {_kernels_that('influence')} (its stages are built "
                          f"per proposed position), got {values['sampler']}")
    if isinstance(values["delayed"], str) and values["delayed"].startswith("early:") and values["energy"] != "local":
        raise OptionError(f"{shown} needs {name_of('energy')} local (its bound takes the terms it has not forwarded "
                          f"as 0, and a local term -log p is >= 0; a raw term -logit has no bound), got "
                          f"{values['energy']}")
    _delayed_min_temperature_checks(values, name_of)


def _delayed_min_temperature_checks(values: Mapping[str, Any], name_of: Callable[[str], str]) -> None:
    """A bound set by hand must split the epochs: above every epoch's target temperature delayed acceptance never
    acts, at or below every one it acts in all (the bound then changes nothing; 0 says so on purpose)."""
    bound = values["delayed_min_temperature"]
    if bound == "auto" or bound == 0:
        return
    temperature = tuple(float(values[k]) for k in ("target_temperature", "anneal", "min_target_temperature"))
    hottest, coldest = target_temperature(*temperature, 0), target_temperature(*temperature, values["epochs"] - 1)
    name = name_of("delayed_min_temperature")
    if bound > hottest:
        raise OptionError(f"{name} ({bound:g}) is above every epoch's target temperature (the hottest: {hottest:g}), "
                          f"so {name_of('delayed')} {values['delayed']} would never act")
    if bound <= coldest:
        raise OptionError(f"{name} ({bound:g}) has no effect: every epoch's target temperature is at least it (the "
                          f"coldest: {coldest:g}); it splits an annealed run's epochs")


#: What an always-accepting sampler (gibbs, block-gibbs) ignores: all of these act on the MH acceptance test.
ACCEPTANCE_OPTIONS = ("target_temperature", "anneal", "min_target_temperature", "force_accept_epochs")


def _is_set(values: Mapping[str, Any], name: str) -> bool:
    """Whether option ``name`` is set away from its default (its default changes nothing: never a conflict)."""
    return values[name] != OPTIONS[name].default


def _shown(value: Any) -> str:
    """An option value as messages show it (a callable schedule by kind, not by its repr)."""
    return "a callable" if callable(value) else str(value)


def _kernels_that(capability: str, value: bool = True, join: str = " or ") -> str:
    """The samplers whose kernels declare ``capability`` (as ``value``), for messages: e.g. ``mh or block-mh``."""
    return join.join(n for n, k in KERNELS.items() if getattr(k.capabilities, capability) == value)


def _no_effect_checks(values: Mapping[str, Any], name_of: Callable[[str], str]) -> None:
    """An option set to a value that another option makes ineffective is an error naming both: silently
    ignoring what the caller asked for would hide a mistake (e.g. a block size for single-site MH)."""
    sampler = values["sampler"]
    caps = KERNELS[sampler].capabilities
    if _is_set(values, "block_schedule") and not caps.blocks:
        raise OptionError(f"{name_of('block_schedule')} ({_shown(values['block_schedule'])}) has no effect with "
                          f"{name_of('sampler')} {sampler}: only {_kernels_that('blocks', join=' and ')} propose "
                          "blocks")
    for name in ACCEPTANCE_OPTIONS:
        if caps.always_accepts and _is_set(values, name):
            raise OptionError(f"{name_of(name)} ({values[name]}) has no effect with {name_of('sampler')} "
                              f"{sampler}: it accepts every proposal, so no acceptance test uses it (use "
                              f"{_kernels_that('always_accepts', False)})")
    if _is_set(values, "min_target_temperature") and values["anneal"] == 0:
        raise OptionError(f"{name_of('min_target_temperature')} ({values['min_target_temperature']}) has no effect "
                          f"without {name_of('anneal')} > 0: it is the floor of the annealed temperature (a fixed "
                          f"{name_of('target_temperature')} is used as given)")
    for name in ("classifier_label", "classifier_weight"):  # CLI-only flags of the --classifier term
        if _is_set(values, name) and values["classifier"] is None:
            raise OptionError(f"{name_of(name)} ({values[name]}) has no effect without {name_of('classifier')} DIR")
    for name in TERM_FLAGS:
        if _is_set(values, name):
            _term_flag_checks(values, name, name_of)


#: The CLI flags that add an energy term. Each reaches mhfast.sample as an ``extra_energy`` term, so it meets that
#: option's rules (:func:`terms_conflict`), checked here as well, where the message can name the flag.
TERM_FLAGS = ("hamming", "classifier")


def terms_conflict(sampler: str, capture: str, memo: Any, delayed_acts: bool, name_of: Callable[[str], str],
                   scored: bool = True) -> tuple[str, str] | None:
    """Why energy terms cannot run with these options: ``(the option at fault, the reason)``, or None where they
    can. The one statement of those rules: the check of a command's term flags (:func:`_term_flag_checks`, at
    parse time, naming flags) and ``mhfast.sample``'s check of ``extra_energy`` (``api._check_problem``, once the
    inputs are known) both word their errors from it.

    An energy term needs a kernel with an MH test (an always-accepting one never looks at an energy), the dynamic
    step (the static one does not recompute terms) and, with an explicit memo size, a memo that acts with terms
    (:meth:`mhfast.sampler.kernels.base.Capabilities.memo_acts`: it keeps the MLM's terms only, so it needs delayed
    acceptance to act). ``scored=False`` is a term that scores nothing (an ``AllowedTokens`` mask alone): only the
    first rule applies to it. ``name_of`` names options in the reason (a flag in a command).

    Example:
        >>> terms_conflict("gibbs", "none", "auto", False, str)[0]
        'sampler'
        >>> terms_conflict("mh", "static", "auto", False, str)
        ('capture', 'the static step does not recompute energy terms (use capture none)')
        >>> terms_conflict("mh", "none", 4, True, str) is None
        True
    """
    caps = KERNELS[sampler].capabilities
    if not caps.extra_energy:
        return "sampler", (f"it accepts every proposal, so no acceptance test sees an energy term (use "
                           f"{_kernels_that('extra_energy')})")
    if not scored:
        return None
    if capture != "none":
        return "capture", f"the static step does not recompute energy terms (use {name_of('capture')} none)"
    if memo not in ("auto", 0) and not caps.memo_acts(capture, extra_terms=True, delayed=delayed_acts):
        return "memo", (f"the memo keeps the MLM's energy terms only, so with an energy term it needs "
                        f"{name_of('delayed')} to act (or use {name_of('memo')} 0)")
    return None


def _term_flag_checks(values: Mapping[str, Any], name: str, name_of: Callable[[str], str]) -> None:
    """A command's energy-term flag ``name`` meets :func:`terms_conflict`'s rules; the error names the flags."""
    conflict = terms_conflict(values["sampler"], values["capture"], values["memo"], values["delayed"] is not None,
                              name_of)
    if conflict is None:
        return
    at, reason = conflict
    flag, other = name_of(name), f"{name_of(at)} {values[at]}"
    if at == "sampler":
        raise OptionError(f"{flag} has no effect with {other}: {reason}")
    raise OptionError(f"{flag} cannot be combined with {other}: {reason}" if at == "capture" else
                      f"{other} cannot be combined with {flag}: {reason}")


def _tempering_checks(values: dict, name_of: Callable[[str], str]) -> None:
    """tempering: a kernel with an MH test (the rungs differ only in it), a fixed target (annealing moves the target
    itself: the ladder would have to move with it), the dynamic step, and a ladder that starts at the target."""
    ladder = values["tempering"]
    if ladder is None:
        if values["replicas"]:
            raise OptionError(f"{name_of('replicas')} (True) has no effect without {name_of('tempering')}: there "
                              "are no auxiliary replicas to return")
        return
    name = name_of("tempering")
    if KERNELS[values["sampler"]].capabilities.always_accepts:
        raise OptionError(f"{name} has no effect with {name_of('sampler')} {values['sampler']}: it accepts every "
                          "proposal, so every rung would run the same chain (use mh or block-mh)")
    if values["anneal"] > 0:
        raise OptionError(f"{name} cannot be combined with {name_of('anneal')} > 0: the replicas sample fixed "
                          "tempered targets around a fixed target temperature (anneal the target or temper it)")
    if isinstance(ladder, list):
        if ladder[0] != float(values["target_temperature"]):
            raise OptionError(f"{name} ({ladder}) must start at {name_of('target_temperature')} "
                              f"({values['target_temperature']}): rung 0 is the target, whose chains are the samples")
        if not all(1.0 / FLOAT32_MAX <= t <= FLOAT32_MAX for t in ladder):
            raise OptionError(f"{name} ({ladder}): every temperature and 1 / it must fit in float32")


def _diagnostics_checks(values: dict, name_of: Callable[[str], str]) -> None:
    """until_rhat / min_ess: R-hat needs two chains, a target that stays the same, epochs that sample it, and
    arviz-stats."""
    asked = [name for name in ("until_rhat", "min_ess") if values[name] is not None]
    if not asked:
        return
    first = name_of(asked[0])
    if values["chains"] < 2:
        raise OptionError(f"{first} needs {name_of('chains')} >= 2 (R-hat compares chains), got {values['chains']}")
    if values["anneal"] > 0:
        raise OptionError(f"{first} needs a fixed target ({name_of('anneal')} 0): with annealing the target changes "
                          "every epoch, so there is nothing to converge to")
    if values["force_accept_epochs"] > values["burn_in"]:
        raise OptionError(f"{first} needs {name_of('force_accept_epochs')} ({values['force_accept_epochs']}) <= "
                          f"{name_of('burn_in')} ({values['burn_in']}): forced epochs do not sample the target")
    from .diagnostics import MIN_DRAWS

    draws = post_burn_in_draws(values["epochs"], values["burn_in"], values["trace_every"])
    # (it could never be met: R-hat and ESS are NaN below that, and NaN never passes; burn_in > epochs: its own error)
    if 0 <= values["burn_in"] <= values["epochs"] and draws < MIN_DRAWS:
        raise OptionError(f"{first} needs at least {MIN_DRAWS} traced sweeps after {name_of('burn_in')} "
                          f"({values['burn_in']}) within {name_of('epochs')} ({values['epochs']}), got {draws}")
    from .diagnostics import check_available

    try:
        check_available(first)
    except ValueError as e:
        raise OptionError(str(e)) from None


def _validated(values: Mapping[str, Any], name_of: Callable[[str], str], prefix: str) -> Any:
    out = {}
    for opt in SPEC:
        try:
            out[opt.name] = opt.check(values.get(opt.name, opt.default))
        except OptionError as e:
            raise ValueError(f"{prefix}{name_of(opt.name)} {e}") from None
    try:
        _cross_checks(out, name_of)
    except OptionError as e:
        raise ValueError(f"{prefix}{e}") from None
    return SamplerConfig(**{o.name: out[o.name] for o in SPEC if o.api})


def config_from_kwargs(kwargs: Mapping[str, Any], where: str = "mhfast.sample") -> Any:
    """A :class:`SamplerConfig` from keyword arguments; errors read ``"<where>: <name> ..."``.

    Unknown names raise ``TypeError`` like an unexpected keyword argument would.
    """
    unknown = sorted(set(kwargs) - {o.name for o in SPEC if o.api})
    if unknown:
        raise TypeError(f"{where}() got an unexpected keyword argument {unknown[0]!r}")
    return _validated(kwargs, lambda name: name, f"{where}: ")


def config_from_args(args: argparse.Namespace, **overrides: Any) -> Any:
    """A :class:`SamplerConfig` from parsed CLI flags (API-only options at their defaults unless
    ``overrides`` gives them); errors name the flag (``--top-p must be in (0, 1], got 1.5``)."""
    values = {o.name: getattr(args, o.name) for o in SPEC if o.cli}
    values.update(overrides)
    return _validated(values, lambda name: OPTIONS[name].flag if OPTIONS[name].cli else name, "")


def as_kwargs(cfg: Any, cli_only: bool = False) -> dict:
    """The config as keyword arguments of :func:`mhfast.sample` (``cli_only``: the CLI flags' options)."""
    return {o.name: getattr(cfg, o.name) for o in SPEC if o.api and (o.cli or not cli_only)}


def add_arguments(parser: argparse.ArgumentParser | Any, extra_choices: Mapping[str, Sequence[str]] = (),
                  help_suffix: Mapping[str, str] = (), hidden: Sequence[str] = (),
                  help_text: Mapping[str, str] = ()) -> None:
    """Add every CLI sampler option to ``parser`` (an argparse parser or argument group).

    ``extra_choices`` lets a command accept more values of a choice option (``mhfast sample
    --energy both``), explained by ``help_suffix``; names, defaults and messages stay the spec's. The options
    ``hidden`` names are parsed but left out of ``--help`` (a command that refuses them, naming why);
    ``help_text`` replaces an option's help where the command gives it another meaning.
    """
    extra, suffix, text = dict(extra_choices), dict(help_suffix), dict(help_text)
    for opt in SPEC:
        if not opt.cli:
            continue
        section = f" (paper {opt.section})" if opt.section != "-" else ""
        kw: dict = dict(default=opt.default, help=f"{text.get(opt.name, opt.help)}{suffix.get(opt.name, '')}"
                        f"{section}" if opt.name not in hidden else argparse.SUPPRESS)
        if opt.type == "flag":  # a switch: --compile (absent: the default, False)
            kw["action"] = "store_true"
        elif opt.type == "choice":
            kw["choices"] = tuple(opt.choices) + tuple(extra.get(opt.name, ()))
        else:
            kw["type"] = opt.parser()
            kw["metavar"] = opt.metavar or opt.type.upper()
        parser.add_argument(opt.flag, dest=opt.name, **kw)


def docstring(indent: int = 8) -> str:
    """One line per option (name, default, meaning, paper section), for :func:`mhfast.sample`'s docstring."""
    pad = " " * indent
    lines = []
    for opt in (o for o in SPEC if o.api):
        section = f" (paper {opt.section})" if opt.section != "-" else ""
        lines.append(f"{pad}{opt.name}={opt.default!r}: {opt.help}{section}; {opt.check.values}.")
    return "\n".join(lines)


def markdown_table() -> str:
    """The options table of docs/options.md (API name, CLI flag, default, range/choices, section, help)."""
    rows = ["| API argument | CLI flag | default | values | paper | meaning |", "|---|---|---|---|---|---|"]
    for o in SPEC:
        flag = f"`{o.flag}`" if o.cli else "(API only)"
        name = f"`{o.name}`" if o.api else "(CLI only)"
        rows.append(f"| {name} | {flag} | `{o.default!r}` | {o.check.values} | {o.section} | {o.help} |")
    return "\n".join(rows) + "\n"



def options_page() -> str:
    """The whole of docs/options.md."""
    return ("# Sampler options\n\nGenerated from `mhfast/sampler/options.py` (the one place they are declared) by\n"
            "`python3 -c \"import mhfast.sampler.options as o; print(o.options_page(), end='')\" > docs/options.md`.\n"
            "The same options are keyword arguments of `mhfast.sample()` and flags of `mhfast sample` and\n"
            "`mhfast translate` (options marked *API only* have no flag). Paper sections refer to Goyal, Dyer &\n"
            "Berg-Kirkpatrick (ICLR 2022).\n\n" + markdown_table())
