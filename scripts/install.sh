#!/usr/bin/env bash
# Installs everything mhfast, its tests and its main job need on a fresh machine, then builds
# the compiled core in place. Idempotent: a second run only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
pip_install() { "$PY" -m pip install -q --disable-pip-version-check "$@"; }

# torch first, pinned: this version is a CPU wheel on local disk here; an unpinned `torch`
# (asked for directly or by another package) would pull a multi-GB CUDA build.
pip_install "torch==2.13.0"
pip_install numpy scipy pytest hypothesis expecttest ninja tqdm \
  "transformers>=4.40" "antiberty==0.1.3" "sacrebleu>=2.3" sacremoses sentencepiece

# The compiled core, built against the installed torch (no isolated build env).
pip_install --no-build-isolation -e .
