"""``mhfast humanize``: humanized variants of an antibody variable region, CDRs kept, framework resampled by MH.

The parent's framework (every residue outside the --cdr spans) is sampled under the Sapiens model of its chain
(--chain H or L; --model names another residue-level MLM) with a Hamming term to the parent (--hamming, per
mutation) and at most --max-mutations mutations (mhfast.humanize). Prints the parent's energy, then the distinct
variants of the chains after burn-in, lowest energy first (--top): rank, energy (E + hamming x mutations),
E_local, E_raw, number of mutations, sequence, mutations (Q1E = parent residue, 1-based position, new residue).
--method biophi runs the re-implementation of BioPhi's Sapiens humanization instead (framework residues set to
the model's argmax of the unmasked sequence, --iterations times).

Examples:
    $ python3 -m mhfast humanize --chain L --cdr 23:34 --cdr 49:56 --cdr 88:97 --max-mutations 15 \\
          --parent DIVMTQSHKFMSTSVGDRVSITCKASQDVNTAVAWYQQKPGHSPKLLIYSASFRYTGVPDRFTGNRSGTDFTFTISSVQAEDLAVYYCQQHYTTPPTFGGGTKVEIK
    $ python3 -m mhfast humanize --chain L --cdr 23:34 --cdr 49:56 --cdr 88:97 --method biophi --parent ...
"""
from __future__ import annotations

import argparse
import time
from typing import Any

from ..files import stdout_print
from ..sampler import options
from . import _diagnostics
from .sample import _span

NAME = "humanize"
HELP = "humanize an antibody variable region: framework resampled by MH under Sapiens, CDRs kept"
DESCRIPTION = " ".join(__doc__.split("\n\n")[1].split())
#: Defaults of this command that differ from the sampler's: several variants in a few minutes on a CPU, the
#: pseudo-log-likelihood (Sapiens' measure of humanness) as the energy, one nat per mutation.
DEFAULTS = dict(chains=8, epochs=6, burn_in=2, energy="local", hamming=1.0)


#: The sampler's flags humanize refuses (:func:`_check` says why), so its --help leaves them out
REFUSED = ("hamming_reference", "classifier", "classifier_label", "classifier_weight")


def add_arguments(p: argparse.ArgumentParser) -> None:
    h = p.add_argument_group("humanization")
    h.add_argument("--parent", required=True, metavar="SEQ", help="the parent variable region, one-letter residues")
    h.add_argument("--cdr", type=_span, action="append", required=True, metavar="START:END",
                   help="a CDR span to keep (0-based residues, END exclusive; repeatable); the rest is framework")
    h.add_argument("--chain", default=None, choices=("H", "L"),
                   help="heavy or light chain: the Sapiens model used (default H; not with --model)")
    h.add_argument("--model", default=None, help="another residue-level masked LM instead of Sapiens (e.g. antiberty)")
    h.add_argument("--method", default="mh", choices=("mh", "biophi"), help="mh: MH sampling (mhfast.humanize); "
                   "biophi: the re-implemented BioPhi Sapiens argmax (one variant)")
    h.add_argument("--max-mutations", type=int, default=None, metavar="N", help="at most N mutations (mh)")
    h.add_argument("--top", type=int, default=10, metavar="K", help="print the K lowest-energy variants (mh)")
    h.add_argument("--iterations", type=int, default=1, metavar="N", help="argmax rounds (biophi; BioPhi's default 1)")
    options.add_arguments(p.add_argument_group("MH sampler (mhfast.sample; --hamming: weight per mutation from the "
                                               "parent)"), hidden=REFUSED,
                          help_text={"hamming": "weight of the energy term that counts the mutations from the parent "
                                                "(the nats one mutation costs)"})
    p.set_defaults(**DEFAULTS)
    p.add_argument("--quiet", "-q", action="store_true", help="print only the variants")


def _check(args: argparse.Namespace) -> Any:
    if args.chain is not None and args.model is not None:  # (--model sapiens-h --chain L ran the heavy model)
        raise ValueError(f"--chain {args.chain} has no effect with --model (it picks the Sapiens model; --model names "
                         "the model itself)")
    if args.hamming_reference is not None or args.classifier is not None:
        raise ValueError("--hamming-reference/--classifier: humanize's Hamming reference is the parent, and it takes "
                         "no classifier")
    from ..humanize import MAX_ITERATIONS_OR_CAP as most

    if args.max_mutations is not None and not 0 <= args.max_mutations <= most:
        raise ValueError(f"--max-mutations must be an int in [0, {most}], got {args.max_mutations}")
    if args.top < 1 or not 1 <= args.iterations <= most:
        raise ValueError(f"--top must be >= 1 and --iterations in [1, {most}], got {args.top} and {args.iterations}")
    _check_method(args)
    return options.config_from_args(args)


#: The flags --method biophi reads besides --parent, --cdr, --chain, --model and --iterations: where the model runs,
#: the energy it reports and the Hamming weight in that energy. The others are MH's alone.
BIOPHI_OPTIONS = ("device", "energy", "hamming")
#: MH's own flags of this command (their defaults here)
MH_ONLY = {"max_mutations": ("--max-mutations", None), "top": ("--top", 10)}


def _check_method(args: argparse.Namespace) -> None:
    """A flag that the chosen --method ignores is an error naming both (not a run that silently drops it), and MH's
    humanization needs a sampler with an MH test: its target always holds the Hamming term to the parent and the
    mutation cap (mhfast.humanize), which an always-accepting sampler or the static step cannot honour."""
    if args.method == "biophi":
        flags = [(opt.flag, opt.name, DEFAULTS.get(opt.name, opt.default)) for opt in options.SPEC
                 if opt.cli and opt.name not in BIOPHI_OPTIONS]
        for flag, name, default in flags + [(f, n, d) for n, (f, d) in MH_ONLY.items()]:
            if getattr(args, name) != default:
                raise ValueError(f"{flag} has no effect with --method biophi (it is an MH option; use --method mh)")
        return
    if args.iterations != 1:
        raise ValueError(f"--iterations ({args.iterations}) has no effect with --method mh (it is the BioPhi argmax's "
                         "rounds; use --method biophi, or --epochs for MH)")
    if options.KERNELS[args.sampler].capabilities.always_accepts:
        raise ValueError(f"--sampler {args.sampler} cannot humanize: it accepts every proposal, and humanize's target "
                         "holds the Hamming term to the parent and the mutation cap, which need an MH test (use mh or "
                         "block-mh)")
    _diagnostics.check_trace_every(args)
    if args.start == "sampled":  # (it had failed inside the sampler, advising masks the parent cannot have)
        raise ValueError("--start sampled cannot humanize: it draws a chain's masked residues, and the parent has "
                         "none (use --start greedy, the parent itself, or random)")
    if args.capture != "none":
        raise ValueError(f"--capture {args.capture} cannot humanize: the static step does not evaluate the Hamming "
                         "term to the parent (use --capture none)")


def run(args: argparse.Namespace) -> int:
    from ..humanize import humanize, sapiens_argmax
    from ..models.base import residue_letters
    from ..models.loading import load_masked_lm

    cfg = _check(args)
    t0 = time.perf_counter()
    lm = load_masked_lm(args.model or f"sapiens-{(args.chain or 'H').lower()}", **({"device": args.device}
                                                                          if args.device else {}))
    parent = residue_letters(args.parent)
    if args.method == "biophi":
        h = sapiens_argmax(lm, parent, args.cdr, iterations=args.iterations, hamming=args.hamming,
                           energy=cfg.energy)
    else:
        kwargs = {k: v for k, v in options.as_kwargs(cfg, cli_only=True).items() if k != "energy"}
        h = humanize(lm, parent, args.cdr, hamming=args.hamming, max_mutations=args.max_mutations, top=args.top,
                     energy=cfg.energy, **kwargs)
    if not args.quiet:
        acceptance = f", acceptance {h.acceptance_rate:.3f}" if args.method == "mh" else ""
        stdout_print(f"# parent E_local={h.parent_e_local:.3f} E_raw={h.parent_e_raw:.3f}; {len(h.framework)} "
                     f"framework residues free; {args.method}{acceptance}; {time.perf_counter() - t0:.0f} s")
        stdout_print("# rank\tenergy\tE_local\tE_raw\tmutations\tsequence\tmutation list")
    for k, v in enumerate(h.variants, 1):
        stdout_print(f"{k}\t{v.energy:.3f}\t{v.e_local:.3f}\t{v.e_raw:.3f}\t{len(v.mutations)}\t{v.sequence}\t"
                     f"{' '.join(v.mutations) or '-'}")
    return 0
