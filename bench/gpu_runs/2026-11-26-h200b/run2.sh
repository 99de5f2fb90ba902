#!/usr/bin/env bash
# Second GPU call of 2026-11-26: the new propose walk (tests, sanitizers, A/B against the old kernel, ncu),
# the cuDNN-attention fix (CMLM profile fp32 vs bf16), then ops_floor if time is left.
# As run: this folder's prof_*.py lay in gpu_extra/, and gpu_extra/old_propose_kernel.cu was
# csrc/cuda/propose_kernel.cu at 1fa10df (git show 1fa10df:csrc/cuda/propose_kernel.cu).
set -u
G=/tmp/gc; mkdir -p $G
T0=$SECONDS
MHFAST_SANITIZER_TIMEOUT=90 timeout 300 bash scripts/gpu_check.sh $G --only tests,sanitizer > $G/gpu_check.out 2>&1
echo "gpu_check rc=$? at $((SECONDS-T0)) s" >> $G/gpu_check.out
cp $G/summary.md $OUT/summary.md
grep -E "failed|passed|FAILED|Error" $G/tests.log | tail -30 > $OUT/tests_tail.txt 2>&1
ARCH=${TORCH_CUDA_ARCH_LIST:-9.0a}
rm -rf /tmp/old && mkdir /tmp/old && tar cf - --exclude=./.whl --exclude=./build --exclude=./.git . | tar xf - -C /tmp/old
cp gpu_extra/old_propose_kernel.cu /tmp/old/csrc/cuda/propose_kernel.cu
rm -f /tmp/old/mhfast/_C*.so
(cd /tmp/old && TORCH_CUDA_ARCH_LIST=$ARCH MAX_JOBS=16 timeout 150 python setup.py build_ext --inplace > /tmp/gc/old_build.log 2>&1; echo "old build rc=$? at $((SECONDS-T0)) s" >> /tmp/gc/old_build.log)
tail -2 $G/old_build.log > $OUT/ab.txt
for i in 1 2; do
  PYTHONPATH=$PWD timeout 90 python bench/propose_ab.py --label new --json $G/ab.jsonl
  PYTHONPATH=/tmp/old timeout 90 python /tmp/old/bench/propose_ab.py --label old --json $G/ab.jsonl
done > $G/ab.log 2>&1
python bench/propose_ab.py --render $G/ab.jsonl --ratio old new >> $OUT/ab.txt 2>&1
echo "ab done at $((SECONDS-T0)) s" >> $OUT/ab.txt
export PYTHONPATH=$PWD
(timeout 60 ncu --target-processes all -k regex:propose_kernel --launch-skip 2 --launch-count 4 --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis python gpu_extra/prof_propose.py; echo "ncu rc=$? at $((SECONDS-T0)) s") > $OUT/ncu_propose.txt 2>&1
python -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl > /dev/null 2>&1
(PYTHONPATH=$PWD:/tmp/site timeout 80 python gpu_extra/prof_cmlm.py; echo "cmlm rc=$? at $((SECONDS-T0)) s") > $OUT/cmlm_prof.txt 2>&1
tar czf $OUT/gc.tgz -C /tmp gc
(timeout 115 python bench/ops_floor.py --out $G/of > $G/of.log 2>&1; echo "ops_floor rc=$? at $((SECONDS-T0)) s" >> $G/of.log)
cp $G/of/ops_floor.md $OUT/ops_floor.md 2>/dev/null; tail -1 $G/of.log >> $OUT/ab.txt
tar czf $OUT/gc.tgz -C /tmp gc
ls -la $OUT
