"""Issue 38's AntiBERTy case from a random start at T=32: a tempered run against plain MH on the same chains, both
saved by bench/tempering_long.py (``--save``), compared at equal model rows and at equal CPU seconds.

AntiBERTy, 32 free residues, energy local, target temperature 1, 4 chains each from its own uniformly random residues
(bench_tempering.dispersed_case). Both runs at once, one core each (AMD EPYC, one torch thread):

    python3 bench/tempering_long.py --model antiberty --length 32 --temperature 1 --rungs 4 --seed 0 --epochs 20 \\
        --burn-in 8 --at 12 16 --echo 1 --save tempered_seed0.pt --out tempered_seed0.json   # ~80 CPU min
    python3 bench/tempering_long.py --model antiberty --length 32 --temperature 1 --plain --seed 0 --epochs 120 \\
        --burn-in 8 --echo 2 --save plain_seed0.pt --out plain_seed0.json                    # ~60 CPU min
    python3 .../compare.py tempered_seed0.pt plain_seed0.pt 12 16 20 > compare_seed0.md

(run 2026-11-29 21:19-22:40 UTC, commit e00af4f, AMD EPYC; the saved runs are kept here, a few kB each; the logs
are the two runs' output).

The comparison is bench/tempering_long.py's compare_saved (its doc: where plain MH is cut at equal rows and at
equal CPU seconds).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/
import tempering_long as tl  # noqa: E402


if __name__ == "__main__":
    print("\n".join(tl.compare_saved(sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3:]])))
