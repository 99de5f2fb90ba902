#!/usr/bin/env bash
# The test command of the README: install + build into the project's environment (scripts/install.sh: .venv/
# by default), then run the whole suite with that environment's python first on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=$(bash scripts/install.sh | tail -n 1)
export PATH="$(cd "$(dirname "$PY")" && pwd):$PATH"  # its python3, pip and torchrun for the tests' subprocesses
"$PY" -m pytest -q tests "$@"
