"""Issue 38's AntiBERTy case at T=32, second stage again, with the model's forward in bfloat16: on this CPU (an Intel
Xeon with AMX) a bf16 row costs ~0.3 of an fp32 one (bench/RESULTS.md, "The cost of a forwarded row"; measured here
3.9 against 14.3 ms per row, tempered), so the ~12 CPU hours the fp32 second stage
(../2026-11-30-antiberty-t32-two-stage) said a verdict needs shrink to a few.

The same case (AntiBERTy, 32 free residues, energy local, target temperature 1, 4 chains) and the same starts: the
final states of that folder's stage 1 (plain MH's fp32 descent from random residues, seed 0, 120 sweeps). The target
is now the model as evaluated in bfloat16 (option ``dtype``; autocast), for both samplers alike. Both ran at once, one
core each, seed 1 (rung 0 and plain MH share their random numbers); tempering=6 tuned in burn-in 16 (twice the fp32
run's), plain MH as long in CPU seconds:

    S=../2026-11-30-antiberty-t32-two-stage/stage1_plain_seed0.pt
    python3 bench/tempering_long.py --model antiberty --length 32 --temperature 1 --rungs 6 --seed 1 --epochs 80 \\
        --burn-in 16 --at 24 32 40 48 56 64 72 --echo 1 --init $S --dtype bfloat16 --save tempered_bf16_seed1.pt \\
        --out tempered_bf16_seed1.json
    python3 bench/tempering_long.py --model antiberty --length 32 --temperature 1 --plain --seed 1 --epochs 950 \\
        --burn-in 16 --echo 10 --init $S --dtype bfloat16 --save plain_bf16_seed1.pt --out plain_bf16_seed1.json
    python3 bench/tempering_long.py --model antiberty --length 32 --temperature 1 --plain --seed 2 --epochs 500 \\
        --burn-in 1 --echo 10 --init plain_bf16_seed1.pt --dtype bfloat16 --save plain_bf16_seed1b.pt
    python3 bench/tempering_long.py --model antiberty --length 32 --temperature 1 --plain --seed 3 --epochs 400 \\
        --burn-in 1 --echo 10 --init plain_bf16_seed1b.pt --dtype bfloat16 --save plain_bf16_seed1c.pt
    python3 .../compare.py tempered_bf16_seed1.pt plain_bf16_seed1.pt+plain_bf16_seed1b.pt+plain_bf16_seed1c.pt \\
        24 32 40 48 56 64 72 80 > compare_seed1.md

bench/tempering_long.py's compare_saved: plain MH cut at equal rows and at equal CPU seconds at each tempered budget.
Plain MH's sweeps got cheaper as its chains settled (the memo), so its 950 sweeps ended short of the tempered run's
CPU seconds; two more plain runs went on from the final states of the one before (``--init``, seeds 2 and 3: a new
call, so a new seed's random numbers and an empty memo, the same kernel), and the three are joined into one chain
per chain (``a.pt+b.pt+c.pt``: tempering_long.load_saved on a list; traces, rows and CPU seconds continued).

Seed 2 (tempered 14:32-16:49 UTC, sampler of 96dd736; plain MH 15:28-16:57, later commits that change neither
run's chains): the same commands with ``--seed 2``, the tempered run 64 sweeps
(``--at 24 32 40 48 56``), plain MH 350 sweeps (``--seed 2``) and one continuation of 200 (``--seed 3``), shorter than
seed 1's for the session's time (a first plain run of 1,600 sweeps was stopped at 360 and not kept); most of it ran
beside a fresh-clone test run, so its CPU seconds are inflated alike for both samplers:

    python3 .../compare.py --seed=2 tempered_bf16_seed2.pt plain_bf16_seed2.pt+plain_bf16_seed2b.pt \
        24 32 40 48 56 64 > compare_seed2.md
"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # bench/
import tempering_long as tl  # noqa: E402


if __name__ == "__main__":
    seed = int(sys.argv.pop(1).removeprefix("--seed=")) if sys.argv[1].startswith("--seed=") else 1  # (the label)
    print("\n".join(tl.compare_saved(sys.argv[1], sys.argv[2].split("+"), [int(x) for x in sys.argv[3:]], seed=seed)))
