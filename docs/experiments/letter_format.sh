#!/usr/bin/env bash
# docs/results.md, section 6: does letter-format training lift the embedded model's letter
# accuracy above chance, and then what does the paper's exact setting do (letter scoring,
# the per-vocabulary head at the answer letter)? Built-in sets, foreground, one at a time.
#   bash docs/experiments/letter_format.sh
#   calm compare --name-prefix letter- > docs/results/letter_format.txt
set -euo pipefail
cd "$(dirname "$0")/../.."
COMMON=(--preset quick --scoring letter --train-data builtin/capitals/train --heldout-data builtin/capitals/validation
        --eval-data builtin/capitals/test builtin/chemical_symbols/test builtin/animal_classes/test
        --steps 150 --eval-limit 200 --set eval_every=50 --set checkpoint_every=0)
.venv/bin/calm train "${COMMON[@]}" --method sft --name letter-sft
.venv/bin/calm train "${COMMON[@]}" --method sft --lr-theta 1e-3 --steps 300 --set eval_every=100 --name letter-sft-lr1e-3
.venv/bin/calm train "${COMMON[@]}" --method calm --scope vocab --name letter-calm-vocab-tr
