#!/usr/bin/env bash
# Call 2 (a fresh machine): call 1's three benchmarks failed at their first sample (their models were loaded on the
# CPU while the chains asked for cuda); the benchmarks now load the models on the device. Build, then the three.
# (Call 2 as first run failed again: no arviz-stats on the GPU machine, and its wheels with scipy's do not fit the
# 64 MiB that travels. So tempering_device saves its runs' traces (--traces) and the ESS/R-hat are computed here
# afterwards (--from-traces); bench_delayed reports ESS as nan there, its rows, changes and wall seconds stand.)
set -u
T0=$SECONDS
stamp() { echo "[$1 done at $((SECONDS-T0)) s, rc=$2]"; }
export TORCH_CUDA_ARCH_LIST=$(python -c 'import torch; m, n = torch.cuda.get_device_capability(0); print(f"{m}.{n}")')
MAX_JOBS=16 python setup.py build_ext --inplace > /tmp/build.log 2>&1; stamp build $? > $OUT/summary.md
python -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl > /tmp/pip.log 2>&1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
(timeout 100 python bench/bench_delayed.py --case cmlm-translate --device cuda --seeds 0 1 --settings mh delayed-i2 delayed-w1; stamp delayed_translate $?) > $OUT/delayed_translate.txt 2>&1
(timeout 190 python bench/tempering_device.py --device cuda --sweeps 600 --seeds 0 1 --traces $OUT/tempering.pt; stamp tempering $?) > $OUT/tempering.txt 2>&1
(timeout 60 python bench/bench_delayed.py --case cmlm-fixed --device cuda --epochs 40 --seeds 0 --settings mh delayed-i2; stamp delayed_fixed $?) > $OUT/delayed_fixed.txt 2>&1
echo "all done at $((SECONDS-T0)) s" >> $OUT/summary.md
