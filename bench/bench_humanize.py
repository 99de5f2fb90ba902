"""Humanization by MH (mhfast.humanize) against BioPhi's Sapiens argmax (re-implemented), on real mouse parents.

Parents and their humanized drugs: the Hu-mAb 25 pairs (Marks, Hummer, Chin & Deane, "Humanization of antibodies
using a machine learning approach on large-scale repertoire data", Bioinformatics 2021), as distributed with the
BioPhi publication (github.com/Merck/BioPhi-2021-publication, data/tasks/humab_25_pairs/pairs/parental.fa and
experimental.fa): the mouse antibody each therapeutic was humanized from, and the humanized variable region of the
approved drug. CDRs: Kabat, located by the sequence rules of A. C. R. Martin ("How to identify the CDRs by looking
at a sequence", bioinf.org.uk; :func:`kabat_cdrs`), and compared with the humanized sequence (where it kept them).

Per parent, with the Sapiens model of its chain: the parent and its humanized sequence (experimental.fa) scored; BioPhi's method (every framework
residue set to the model's most probable residue reading the unmasked sequence, CDRs grafted back; 1 iteration,
BioPhi's default, and 3); mhfast.humanize (MH over the framework, energy E_local + hamming * mutations at target
temperature --tau, at most --max-mutations mutations, --chains chains, --epochs epochs with --burn-in): its
lowest-energy variant and its --top variants. Energies are Sapiens' E_local (minus the pseudo-log-likelihood,
lower = more human to the model) and the sampled energy E_local + hamming * mutations, the same for every row.

    python3 bench/bench_humanize.py                       # writes the bench_humanize section of RESULTS.md
    python3 bench/bench_humanize.py --parents "Herceptin VL" --chains 2 --epochs 2 --no-write   # a quick look
"""
from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results_md  # noqa: E402

import mhfast  # noqa: E402
from mhfast.humanize import diversity, humanize, mutations, sapiens_argmax  # noqa: E402
from mhfast.models.sapiens import load_sapiens  # noqa: E402

START, END = "<!-- bench_humanize:start -->", "<!-- bench_humanize:end -->"
SOURCE = "Hu-mAb 25 pairs (Marks et al., Bioinformatics 2021), via github.com/Merck/BioPhi-2021-publication"
#: name -> (chain, mouse parent, humanized drug), from parental.fa and experimental.fa of the source above.
PAIRS = {
    "Herceptin VH": ("H", "QVQLQQSGPELVKPGASLKLSCTASGFNIKDTYIHWVKQRPEQGLEWIGRIYPTNGYTRYDPKFQDKATITADTSSNTAYLQVSRLTSE"
                          "DTAVYYCSRWGGDGFYAMDYWGQGASVTVSS",
                     "EVQLVESGGGLVQPGGSLRLSCAASGFNIKDTYIHWVRQAPGKGLEWVARIYPTNGYTRYADSVKGRFTISADTSKNTAYLQMNSLRAE"
                     "DTAVYYCSRWGGDGFYAMDYWGQGTLVTVSS"),
    "Herceptin VL": ("L", "DIVMTQSHKFMSTSVGDRVSITCKASQDVNTAVAWYQQKPGHSPKLLIYSASFRYTGVPDRFTGNRSGTDFTFTISSVQAEDLAVYYCQQ"
                          "HYTTPPTFGGGTKVEIK",
                     "DIQMTQSPSSLSASVGDRVTITCRASQDVNTAVAWYQQKPGKAPKLLIYSASFLESGVPSRFSGSRSGTDFTLTISSLQPEDFATYYCQQ"
                     "HYTTPTTFGQGTKVEIK"),
    "Bevacizumab VH": ("H", "EIQLVQSGPELKQPGETVRISCKASGYTFTNYGMNWVKQAPGKGLKWMGWINTYTGEPTYAADFKRRFTFSLETSASTAYLQISNLKN"
                            "DDTATYFCAKYPHYYGSSHWYFDVWGAGTTVTVSS",
                       "EVQLVESGGGLVQPGGSLRLSCAASGYTFTNYGMNWVRQAPGKGLEWVGWINTYTGEPTYAADFKRRFTFSLDTSKSTAYLQMNSLRAE"
                       "DTAVYYCAKYPHYYGSSHWYFDVWGQGTLVTVSS"),
    "Tocilizumab VL": ("L", "DIQMTQTTSSLSASLGDRVTISCRASQDISSYLNWYQQKPDGTIKLLIYYTSRLHSGVPSRFSGSGSGTDYSLTINNLEQEDIATYF"
                            "CQQGNTLPYTFGGGTKLEIN",
                       "DIQMTQSPSSLSASVGDRVTITCRASQDISSYLNWYQQKPGKAPKLLIYYTSRLHSGVPSRFSGSGSGTDFTFTISSLQPEDIATYY"
                       "CQQGNTLPYTFGQGTKVEIK"),
}


def _find(pattern: str, seq: str, lo: int, hi: int) -> int:
    """The first index in [lo, hi] where ``pattern`` (a regex) matches ``seq``; ValueError if none."""
    for i in range(max(lo, 0), min(hi, len(seq)) + 1):
        if re.match(pattern, seq[i:]):
            return i
    raise ValueError(f"no {pattern!r} between residues {lo} and {hi}: not a variable region the rules recognize")


def kabat_cdrs(seq: str, chain: str) -> list[tuple[int, int]]:
    """Kabat CDR spans (0-based, END exclusive) by Martin's sequence rules. Heavy: H1 starts 9 after the first
    Cys (~22) and ends before the Trp of W-[VIA] (5-7 residues); H2 starts 14 after H1's end and ends before
    [KR]-[LIVFTA]-[TSIA] (16-19 residues); H3 starts 32 after H2's end, 3 after a Cys, ends before W-G-x-G.
    Light: L1 starts after the first Cys (~23), ends before the Trp of W-[YLF]-[QL] (10-17); L2 starts 15
    after L1's end, 7 residues; L3 starts 32 after L2's end, after a Cys, ends before F-G-x-G.

    >>> kabat_cdrs(PAIRS["Herceptin VH"][1], "H")
    [(30, 35), (49, 66), (98, 109)]
    """
    if chain == "H":
        c = _find("C", seq, 19, 25)
        h1 = c + 9
        h1_end = _find("W[VIA]", seq, h1 + 5, h1 + 7)
        h2 = h1_end + 14
        h2_end = _find("[KR][LIVFTA][TSIA]", seq, h2 + 16, h2 + 19)
        h3 = h2_end + 32
        if seq[h3 - 3] != "C":
            raise ValueError(f"no Cys 3 before CDR-H3 (residue {h3})")
        return [(h1, h1_end), (h2, h2_end), (h3, _find("WG.G", seq, h3 + 3, h3 + 26))]
    c = _find("C", seq, 20, 25)
    l1 = c + 1
    l1_end = _find("W[YLF][QL]", seq, l1 + 10, l1 + 17)
    l2 = l1_end + 15
    l3 = l2 + 7 + 32
    if seq[l3 - 1] != "C":
        raise ValueError(f"no Cys before CDR-L3 (residue {l3})")
    return [(l1, l1_end), (l2, l2 + 7), (l3, _find("FG.G", seq, l3 + 7, l3 + 11))]


def row(method: str, v, parent: str, seconds: float, **extra) -> dict:
    """One table row of a variant (a mhfast.humanize.Variant)."""
    return {"method": method, "e_local": v.e_local, "energy": v.energy, "mutations": len(v.mutations),
            "sequence": v.sequence, "mutation_list": list(v.mutations), "seconds": seconds, **extra}


def one_parent(name: str, args: argparse.Namespace) -> dict:
    """Every method on one parent: rows and the MH run's variants."""
    chain, parent, drug = PAIRS[name]
    cdrs = kabat_cdrs(parent, chain)
    same = [parent[a:b] == drug[a:b] for a, b in cdrs] if len(parent) == len(drug) else []
    lm = load_sapiens(chain)
    e = mhfast.energy(lm, [lm.encode(parent), lm.encode(drug)], energy="local").e_local.tolist()
    drug_muts = mutations(parent, drug) if len(parent) == len(drug) else []
    rows = [{"method": "parent (mouse)", "e_local": e[0], "energy": e[0], "mutations": 0, "sequence": parent,
             "mutation_list": [], "seconds": 0.0},
            {"method": "humanized (experimental.fa)", "e_local": e[1], "energy": e[1] + args.hamming * len(drug_muts),
             "mutations": len(drug_muts), "sequence": drug, "mutation_list": drug_muts, "seconds": 0.0}]
    for iterations in (1, 3):
        t0 = time.perf_counter()
        b = sapiens_argmax(lm, parent, cdrs, iterations=iterations, hamming=args.hamming)
        rows.append(row(f"BioPhi Sapiens argmax, {iterations} iteration{'s' * (iterations > 1)}", b.variants[0],
                        parent, time.perf_counter() - t0))
    t0 = time.perf_counter()
    h = humanize(lm, parent, cdrs, hamming=args.hamming, max_mutations=args.max_mutations, top=args.top,
                 chains=args.chains, epochs=args.epochs, burn_in=args.burn_in, seed=args.seed,
                 target_temperature=args.tau)
    seconds = time.perf_counter() - t0
    v = h.variants
    rows.append(row("mhfast.humanize (MH), lowest energy", v[0], parent, seconds))
    rows.append({"method": f"mhfast.humanize (MH), top {len(v)} (mean)", "e_local": sum(x.e_local for x in v) / len(v),
                 "energy": sum(x.energy for x in v) / len(v), "mutations": sum(len(x.mutations) for x in v) / len(v),
                 "sequence": None, "mutation_list": [], "seconds": seconds, "diversity": diversity(v),
                 "distinct": len(v), "acceptance": h.acceptance_rate})
    print(name, cdrs, "CDRs equal the humanized:", same, flush=True)
    for r in rows:
        print(f"  {r['method']}: E_local {r['e_local']:.2f} energy {r['energy']:.2f} mutations {r['mutations']}",
              flush=True)
    return {"name": name, "chain": chain, "cdrs": cdrs, "cdrs_equal_drug": same, "rows": rows,
            "variants": [row("variant", x, parent, 0.0, seen=x.seen) for x in v]}


def report(results: list[dict], args: argparse.Namespace, minutes: float) -> str:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = ["## Humanization: MH vs BioPhi's Sapiens argmax (bench/bench_humanize.py)", "",
             f"Run {now}, {minutes:.0f} min, 1 torch thread. Machine: {results_md.machine_description()}.", "",
             f"Parents and their humanized sequences (experimental.fa): {SOURCE}. Kabat CDRs (Martin's sequence rules) kept fixed; every other residue "
             f"free. Energy of every row: Sapiens E_local + {args.hamming:g} x mutations from the parent (E_local = "
             "minus the pseudo-log-likelihood: lower is more human to the model). BioPhi argmax: our "
             "re-implementation of BioPhi's Sapiens humanization (framework residues set to the model's argmax of "
             "the unmasked sequence, CDRs grafted back). mhfast.humanize: MH, "
             f"{args.chains} chains x {args.epochs} epochs (burn-in {args.burn_in}) over the framework, target "
             f"temperature {args.tau:g}, at most {args.max_mutations} mutations, seed {args.seed}; the "
             f"distinct post-burn-in states, lowest energy first (top {args.top}). Diversity = mean pairwise Hamming "
             "distance between the top variants.", "",
             "| parent | method | E_local | E_local + w x mutations | mutations | distinct variants | diversity "
             "| seconds |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for res in results:
        for r in res["rows"]:
            lines.append(f"| {res['name']} | {r['method']} | {r['e_local']:.2f} | {r['energy']:.2f} | "
                         f"{r['mutations']:g} | {r.get('distinct', 1)} | {r.get('diversity', 0.0):.1f} | "
                         f"{r['seconds']:.0f} |")
    lines += ["", "CDR spans (0-based, END exclusive) and whether the humanized sequence kept them: " + "; ".join(
        f"{r['name']} {r['cdrs']} {'all equal' if all(r['cdrs_equal_drug']) else r['cdrs_equal_drug']}"
        for r in results), "", "The MH variants of each parent (energy, mutations):", ""]
    for res in results:
        lines.append(f"- {res['name']}: " + "; ".join(f"{v['energy']:.2f} ({v['mutations']}: "
                                                      f"{' '.join(v['mutation_list'])})" for v in res["variants"][:5]))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--parents", nargs="+", default=["Herceptin VH", "Herceptin VL", "Bevacizumab VH"],
                   choices=list(PAIRS))
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--burn-in", type=int, default=1)
    p.add_argument("--tau", type=float, default=0.5, help="target temperature of the MH runs")
    p.add_argument("--hamming", type=float, default=1.0, help="energy per mutation from the parent")
    p.add_argument("--max-mutations", type=int, default=20)
    p.add_argument("--top", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None, help="also save the raw results here")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    results = [one_parent(name, args) for name in args.parents]
    text = report(results, args, (time.perf_counter() - t0) / 60)
    print(text)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))
    if not args.no_write:
        results_md.write_section(START, END, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
