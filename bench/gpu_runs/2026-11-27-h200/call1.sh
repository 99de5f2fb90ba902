#!/usr/bin/env bash
# Third GPU lease (2026-11-27), one call: the propose kernel as reviewed (5efa698, never run on a GPU) under the
# CUDA tests and the three sanitizers, then the steps no lease has reached yet, each trimmed to fit and capped:
# Sapiens on the GPU (sapiens_check: logits equal the CPU's, fast == full chains), the CMLM fast decoder against
# fairseq's on the device, torch.compile against eager, and mhfast vs the mixmatch loop on Sapiens (small grid).
set -u
G=/tmp/gc; mkdir -p $G
T0=$SECONDS
stamp() { echo "[$1 done at $((SECONDS-T0)) s, rc=$2]"; }
MHFAST_SANITIZER_TIMEOUT=75 timeout 240 bash scripts/gpu_check.sh $G --only tests,sanitizer > $G/gpu_check.out 2>&1
stamp gpu_check $? >> $G/gpu_check.out
cp $G/summary.md $OUT/summary.md 2>/dev/null; tail -1 $G/gpu_check.out >> $OUT/summary.md
grep -E "failed|passed|FAILED|Error|Fatal" $G/tests.log | tail -40 > $OUT/tests_tail.txt 2>&1
python -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl > $G/pip.log 2>&1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
(timeout 95 python bench/sapiens_check.py --device cuda; stamp sapiens_check $?) > $OUT/sapiens.txt 2>&1
(timeout 75 python bench/bench_decoder.py --device cuda --no-write --sentences 4 --epochs 3 --repeats 2 --budgets; stamp decoder $?) > $OUT/decoder.txt 2>&1
(timeout 95 python bench/bench_forward.py --compile-only --device cuda --model antiberty-random --no-write --repeats 3; stamp compile $?) > $OUT/compile.txt 2>&1
(timeout 60 python bench/bench_mixmatch.py --device cuda --model sapiens-h --starts random parent --lengths 64 120 --chains 1 16 --dtypes float32 --repeats 2 --json $G/mm.json --no-write; stamp mixmatch_sapiens $?; python bench/bench_mixmatch.py --render $G/mm.json --starts random parent --no-write) > $OUT/mixmatch_sapiens.txt 2>&1
tar czf $OUT/gc.tgz -C /tmp gc
ls -la $OUT
echo "all done at $((SECONDS-T0)) s"
