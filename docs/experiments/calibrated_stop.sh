#!/usr/bin/env bash
# docs/bilevel.md, "The calibrated stop": which step sizes let the calibrated stop land
# well, on the embedded model (2 CPU cores). Quick preset, 60 steps at most (the stop
# ends a run earlier once S_V's NLL has not improved for 4 evaluations), trained on a
# built-in set the model knows (chemical symbols 0.457, capitals 0.857), S_V its
# validation split, evaluated on its test split and the other above-chance sets.
# Four step-size pairs of the plain BOME step: lr_theta in {1.0, 0.1} x lr_alpha in {0.5, 0.1}.
#   bash docs/experiments/calibrated_stop.sh          # runs them one after the other (~5 min each)
#   .venv/bin/python scripts/results_table.py --name-prefix stop-chemical_symbols-   # the tables and verdicts
#   .venv/bin/python scripts/results_table.py --name-prefix stop-capitals-
set -euo pipefail
cd "$(dirname "$0")/../.."
SETS=(chemical_symbols capitals units animal_classes)
for train in ${TRAIN:-chemical_symbols capitals}; do
    evals=("builtin/$train/test")
    for other in "${SETS[@]}"; do [ "$other" = "$train" ] || evals+=("builtin/$other/test"); done
    for pair in "1.0 0.5" "0.1 0.5" "0.1 0.1" "1.0 0.1"; do
        read -r theta alpha <<< "$pair"
        .venv/bin/calm train --preset quick --method calm --steps 60 --lr-theta "$theta" --lr-alpha "$alpha" \
            --train-data "builtin/$train/train" --heldout-data "builtin/$train/validation" --eval-data "${evals[@]}" \
            --set frozen_prefix_store=true --name "stop-$train-t$theta-a$alpha"
    done
done
