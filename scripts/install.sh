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
pip_install numpy scipy pytest pytest-timeout hypothesis expecttest ninja tqdm \
  "transformers>=4.40" "antiberty==0.1.3" "sacrebleu>=2.3" sacremoses sentencepiece matplotlib

# fairseq (optional; the CMLM adapter and its tests): only the fairseq-fixed fork builds on Python
# 3.11. It compiles Cython extensions against the installed torch/numpy (~4.5 min on 2 cores), so
# it is skipped when already importable; it pulls a torchaudio that does not match torch: removed.
if ! "$PY" -c "import fairseq" >/dev/null 2>&1; then
  pip_install cython
  env -u CUDA_HOME "$PY" -m pip install -q --disable-pip-version-check --no-cache-dir --no-build-isolation \
    "fairseq-fixed==0.12.3.1"
  "$PY" -m pip uninstall -y -q torchaudio || true
fi

# The compiled core: the same path as a user's `pip install .` (pyproject.toml's in-tree backend
# compiles against the torch installed above and never fetches one), as an editable install so
# that the tests and scripts import this checkout (mhfast/_C*.so is built in place).
pip_install -e .
