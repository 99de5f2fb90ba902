#!/usr/bin/env bash
# The main job of the README: install + build, then translate the first 5 German sentences of Multi30k
# test_2016_flickr into English with the bundled CMLM by Metropolis-Hastings: raw energy with an annealed
# target temperature (the paper's mode-seeking setting, section 8), 5 chains. Prints, per sentence, the
# source (S-), the reference (T-), the best sample's tokens (H-) and text (D-) and the energies (E-), then
# sacreBLEU and chrF of the 5 translations with their signatures.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=$(bash scripts/install.sh | tail -n 1)  # the project's environment: .venv/ by default (see install.sh)
"$PY" -m mhfast translate --input bundled --ref bundled --limit 5 --format fairseq \
    --energy raw --chains 5 --epochs 12 --burn-in 2 --anneal 0.08 --seed 0 --quiet "$@" 2>&1
