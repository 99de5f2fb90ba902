#!/usr/bin/env bash
# The main job of the README: install + build, then sample antibody heavy-chain fragments from the
# real pretrained AntiBERTy MLM with Metropolis-Hastings under both energies (raw-MH, then local-MH),
# printing the samples, their energies, and the acceptance and novel-transition rates.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
python3 -m mhfast sample --model antiberty --energy both --length 16 --chains 4 --epochs 8 --burn-in 2 --seed 0 "$@"
