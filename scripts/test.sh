#!/usr/bin/env bash
# The test command of the README: install, build, then run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
python3 -m pytest -q tests "$@"
