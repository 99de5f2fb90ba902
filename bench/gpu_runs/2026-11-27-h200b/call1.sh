#!/usr/bin/env bash
# Fourth GPU lease (2026-11-27), one call: the tests no GPU has run (the tempering exactness and mode-crossing
# tests on cuda, the delayed-acceptance tests on cuda, the fairseq capture test's 1e-4 form), then delayed
# acceptance and parallel tempering timed on the device (wall seconds, ESS per second), each step capped.
set -u
G=/tmp/gc; mkdir -p $G
T0=$SECONDS
stamp() { echo "[$1 done at $((SECONDS-T0)) s, rc=$2]"; }
timeout 230 bash scripts/gpu_check.sh $G --only tests > $G/gpu_check.out 2>&1
stamp gpu_check $? >> $G/gpu_check.out
cp $G/summary.md $OUT/summary.md 2>/dev/null; tail -1 $G/gpu_check.out >> $OUT/summary.md
grep -E "failed|passed|FAILED|Error|assert|slowest|^[0-9.]+s " $G/tests.log | tail -60 > $OUT/tests_tail.txt 2>&1
python -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl > $G/pip.log 2>&1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
(timeout 85 python bench/bench_delayed.py --case cmlm-translate --device cuda --seeds 0 1 --settings mh delayed-i2 delayed-w1; stamp delayed_translate $?) > $OUT/delayed_translate.txt 2>&1
(timeout 140 python bench/tempering_device.py --device cuda --sweeps 600 --seeds 0 1 --json $G/tempering.json; stamp tempering $?) > $OUT/tempering.txt 2>&1
(timeout 55 python bench/bench_delayed.py --case cmlm-fixed --device cuda --epochs 40 --seeds 0 --settings mh delayed-i2; stamp delayed_fixed $?) > $OUT/delayed_fixed.txt 2>&1
tar czf $OUT/gc.tgz -C /tmp gc
echo "all done at $((SECONDS-T0)) s" >> $OUT/summary.md
