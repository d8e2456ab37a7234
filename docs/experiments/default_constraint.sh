#!/usr/bin/env bash
# docs/results.md section 4c: which lower-level constraint `calm` should use by default.
# The studio's default run (quick preset, the calibrated stop) trained on built-in capitals,
# S_V its validation split, evaluated on its test split and the other above-chance sets,
# 3 seeds, under --constraint theta (the paper's) and --constraint joint (docs/bilevel.md).
#   bash docs/experiments/default_constraint.sh        # 6 queued jobs, about 1-2 minutes each
#   .venv/bin/python scripts/results_table.py --name-prefix dflt-capitals- \
#       --json docs/results/default_constraint.json > docs/results/default_constraint.md
set -euo pipefail
cd "$(dirname "$0")/../.."
for seed in 0 1 2; do
    for constraint in theta joint; do
        .venv/bin/calm train --preset quick --method calm --constraint "$constraint" --seed "$seed" \
            --train-data builtin/capitals/train --heldout-data builtin/capitals/validation \
            --eval-data builtin/capitals/test builtin/chemical_symbols/test builtin/units/test builtin/animal_classes/test \
            --name "dflt-capitals-$constraint-s$seed" --detach
    done
done
