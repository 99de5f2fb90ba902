#!/usr/bin/env bash
# Fifth GPU lease, one call (900 s of device time, starts included: no second start fits). What no GPU has run yet:
# parallel tempering with its steps captured as CUDA graphs (issue 38), exact early rejection (issue 34). In order of
# what matters most, each piece with its own time limit, everything written to $OUT as it comes:
#   1. build; the wheels (fairseq, sapiens) into a private folder
#   2. tests -k cuda: tempering (its cuda-graph exactness test included), early rejection, the static/captured step
#   3. tempering_device.py --capture cuda-graph, 600 sweeps, seeds 0 1 2 (the fourth run's eager runs' seeds)
#   4. the same, eager, seed 0, 300 sweeps: the per-sweep baseline on this machine
#   5. tempering_device.py --capture cuda-graph, seed 0, as many sweeps as the time left allows (from step 3's
#      speed): does tempering reach R-hat 1.01 within a GPU budget, and where does plain MH stand at the same sweeps
#   6. bench_delayed.py --case cmlm-table5-local --device cuda: plain MH against early:2 (wall s, rows)
set -u
T0=$SECONDS
LIMIT=${LIMIT:-560}
stamp() { echo "[$1 done at $((SECONDS-T0)) s, rc=$2]"; }
left() { echo $((LIMIT - (SECONDS - T0))); }
export TORCH_CUDA_ARCH_LIST=$(python -c 'import torch; m, n = torch.cuda.get_device_capability(0); print(f"{m}.{n}")')
MAX_JOBS=16 python setup.py build_ext --inplace > /tmp/build.log 2>&1; stamp build $? > $OUT/summary.md
tail -3 /tmp/build.log >> $OUT/summary.md
python -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl > /tmp/pip.log 2>&1
stamp wheels $? >> $OUT/summary.md
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
XDIST=$(python -c 'import xdist' 2>/dev/null && echo '-n 8')
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >> $OUT/summary.md 2>&1
(timeout 130 python -m pytest -q -p no:cacheprovider --durations=10 $XDIST tests/sampler/test_tempering.py \
  tests/sampler/test_early_rejection.py tests/sampler/test_static_step.py -k cuda; stamp tests $?) > $OUT/tests.txt 2>&1
tail -1 $OUT/tests.txt >> $OUT/summary.md
(timeout 130 python bench/tempering_device.py --device cuda --capture cuda-graph --sweeps 600 --seeds 0 1 2 \
  --traces $OUT/graphs600.pt; stamp graphs600 $?) >> $OUT/bench.txt 2>&1
tail -1 $OUT/bench.txt >> $OUT/summary.md
(timeout 75 python bench/tempering_device.py --device cuda --sweeps 300 --seeds 0 --traces $OUT/eager300.pt; \
  stamp eager300 $?) >> $OUT/bench.txt 2>&1
tail -1 $OUT/bench.txt >> $OUT/summary.md
# Step 5's sweeps: what fits in the time left less step 6's 80 s, at step 3's seconds per sweep (plain + tempered,
# seed 0) and 1.3x for the warm-up and the diagnostics.
BUDGET=$(( $(left) - 80 ))
SWEEPS=$(python - "$OUT/bench.txt" "$BUDGET" <<'PY'
import re, sys
txt = open(sys.argv[1]).read()
walls = [float(w) for w in re.findall(r"# seed 0 tempering \S+: ([0-9.]+) s", txt)][:2]  # step 3 came first
per = sum(walls) / 600 if len(walls) == 2 else 0.2
print(max(600, min(19200, int(int(sys.argv[2]) / (1.3 * per) // 600 * 600))))
PY
)
echo "long run: $SWEEPS sweeps in a budget of $BUDGET s" >> $OUT/summary.md
(timeout $((BUDGET > 60 ? BUDGET : 60)) python bench/tempering_device.py --device cuda --capture cuda-graph \
  --sweeps $SWEEPS --seeds 0 --traces $OUT/graphs_long.pt; stamp graphs_long $?) >> $OUT/bench.txt 2>&1
tail -1 $OUT/bench.txt >> $OUT/summary.md
(timeout $(( $(left) > 30 ? $(left) : 30 )) python bench/bench_delayed.py --case cmlm-table5-local --device cuda \
  --epochs 16 --seeds 0 1 --settings mh early-2; stamp early $?) >> $OUT/bench.txt 2>&1
tail -1 $OUT/bench.txt >> $OUT/summary.md
echo "all done at $((SECONDS-T0)) s" >> $OUT/summary.md
