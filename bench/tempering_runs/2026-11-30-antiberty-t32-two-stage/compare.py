"""Issue 38's AntiBERTy case at T=32 in two stages: plain MH descends from the random start, then tempering and more
plain MH go on from the states where it ended (``init=result.tokens``, one start per chain), compared at equal model
rows and at equal CPU seconds: the advice the T=32 random-start comparison (../2026-11-29-antiberty-t32-random) gave
without measuring it.

AntiBERTy, 32 free residues, energy local, target temperature 1, 4 chains each from its own uniformly random residues
(bench_tempering.dispersed_case). Stage 1 is 2026-11-29's plain MH run again (seed 0, 120 sweeps), now also saving its
final states; stage 2 runs both samplers at once, one core each (an Intel Xeon with AVX-512 and AMX, one torch thread),
on seed 1 (the same random numbers for rung 0 and plain MH: their chains are the same until a swap first reaches rung
0):

    python3 bench/tempering_long.py --model antiberty --length 32 --temperature 1 --plain --seed 0 --epochs 120 \\
        --burn-in 8 --echo 2 --save stage1_plain_seed0.pt --out stage1_plain_seed0.json           # ~50 CPU min
    python3 bench/tempering_long.py --model antiberty --length 32 --temperature 1 --rungs 6 --seed 1 --epochs 14 \\
        --burn-in 8 --at 11 12 13 --echo 1 --init stage1_plain_seed0.pt --save tempered_seed1.pt \\
        --out tempered_seed1.json                                                                  # ~60 CPU min
    python3 bench/tempering_long.py --model antiberty --length 32 --temperature 1 --plain --seed 1 --epochs 160 \\
        --burn-in 8 --echo 4 --init stage1_plain_seed0.pt --save plain_seed1.pt --out plain_seed1.json
    python3 .../compare.py stage1_plain_seed0.pt tempered_seed1.pt plain_seed1.pt 11 12 13 14 > compare_seed1.md

The first line checks that stage 1 repeats 2026-11-29's run (its saved traces and rows); the rest is
bench/tempering_long.py's compare_saved (its doc: where plain MH is cut at equal rows and at equal CPU seconds).
"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # bench/
import tempering_long as tl  # noqa: E402


def main(stage1: str, tempered: str, plain: str, budgets: list[int]) -> None:
    (r1, s1), (r0, s0) = tl.load_saved(stage1), tl.load_saved(HERE.parent / "2026-11-29-antiberty-t32-random" /
                                                               "plain_seed0.pt")
    same_rows = s1["rows_cum"] == s0["rows_cum"]
    gap = float((r1.traces - r0.traces).abs().max())
    k = r1.trace_names.index("e_local")
    final = r1.traces[0][:, -1, k].double().round(decimals=2).tolist()
    print(f"stage 1 against 2026-11-29's plain MH run: rows per sweep {'the same' if same_rows else 'DIFFER'}, "
          f"traces at most {gap:.2g} apart; {len(s1['rows_cum'])} sweeps, {s1['rows_cum'][-1]} rows, "
          f"{s1['cpu']:.0f} CPU s; E_local of the final states {final} (stage 2 starts there)")
    print("\n".join(tl.compare_saved(tempered, plain, budgets, seed=1)))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], [int(x) for x in sys.argv[4:]])
