#!/usr/bin/env bash
# Installs everything mhfast, its tests and its main job need, then builds the compiled core in place.
#
# Where: a virtual environment of its own, .venv/ in the checkout (MHFAST_VENV=DIR names another folder), made
# from the python3 on PATH (PYTHON=... names another interpreter). Nothing outside that folder is installed,
# upgraded or downgraded. MHFAST_VENV=none installs into the interpreter itself instead, with the same pins:
# for a machine or container that is yours to change.
# What: the versions in scripts/constraints.txt, the set the whole suite last passed with on a fresh machine
# (pinned so that a newer transformers or numpy cannot break a newcomer's first run; bump them there and rerun
# the suite). torch is the CPU build 2.13.0: on this project's machines a local wheel, where an unpinned torch
# would pull a multi-GB CUDA build.
# Idempotent: a second run installs nothing new and only rebuilds what changed (seconds).
# Prints the environment's python as its last line (scripts/main.sh and test.sh read it).
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${PYTHON:-python3}
VENV=${MHFAST_VENV:-.venv}
# The pins below have no wheels for Python 3.10 (numpy 2.4, scipy 1.17, pandas 3.1): say so in one line, not pip's
# "No matching distribution" after minutes of other installs.
if ! command -v "$BASE" >/dev/null; then
  echo "scripts/install.sh: no Python '$BASE' (PYTHON=... names the interpreter, Python >= 3.11)" >&2
  exit 2
fi
if ! "$BASE" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "scripts/install.sh: needs Python >= 3.11, and $BASE is $("$BASE" -V 2>&1 | head -1) (the pins in" \
    "scripts/constraints.txt have no wheels for older ones); PYTHON=python3.11 names another interpreter" >&2
  exit 2
fi
if [ "$VENV" = none ]; then
  PY=$(command -v "$BASE")
else
  if [ ! -x "$VENV/bin/python" ]; then
    "$BASE" -m venv "$VENV" >&2
  fi
  PY=$VENV/bin/python
fi
pip_install() { "$PY" -m pip install -q --disable-pip-version-check -c scripts/constraints.txt "$@" >&2; }

# torch first, alone: the version pinned in constraints.txt is a CPU wheel on local disk here.
pip_install torch
pip_install numpy scipy pytest pytest-timeout hypothesis expecttest ninja setuptools tqdm \
  transformers antiberty sacrebleu sacremoses sentencepiece matplotlib arviz-stats arviz-base xarray xarray-einstats

# fairseq (optional; the CMLM adapter and its tests): only the fairseq-fixed fork builds on Python
# 3.11. It compiles Cython extensions against the installed torch/numpy (~4.5 min on 2 cores), so
# it is skipped when already importable; it pulls a torchaudio that does not match torch: removed.
if ! "$PY" -c "import fairseq" >/dev/null 2>&1; then
  pip_install cython setuptools wheel
  env -u CUDA_HOME "$PY" -m pip install -q --disable-pip-version-check --no-cache-dir --no-build-isolation \
    -c scripts/constraints.txt fairseq-fixed >&2
  "$PY" -m pip uninstall -y -q torchaudio >&2 || true
fi

# Sapiens (the BioPhi antibody MLMs, mhfast.models.sapiens): its metadata pins torch<2.5, which pip would satisfy
# by replacing torch, so it goes in without its dependencies; pandas (its import needs it) and fairseq (above)
# are what it uses.
if ! "$PY" -c "import importlib.util as u; assert u.find_spec('sapiens')" >/dev/null 2>&1; then
  pip_install pandas
  pip_install --no-deps sapiens
fi

# The compiled core: the same path as a user's `pip install .` (pyproject.toml's in-tree backend
# compiles against the torch installed above and never fetches one), as an editable install so
# that the tests and scripts import this checkout (mhfast/_C*.so is built in place). Without build isolation: the
# build's setuptools and ninja are the pinned ones installed above (pip applies no constraints to an isolated build
# environment, which took PyPI's newest on every run, and needed PyPI even for a rerun that builds nothing);
# tests/install/test_pip_install.py builds the isolated way, a user's.
pip_install --no-build-isolation -e .
echo "$PY"
