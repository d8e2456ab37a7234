#!/usr/bin/env bash
# A restructure must not change what the project computes. This runs one short repro and
# writes everything it predicts into OUT: a `calm eval` on the embedded model (base and TS,
# every item's probabilities) and a short CALM run with the calibrated stop (metrics, every
# variant's predictions, results.json). Run it at two commits, then compare:
#   git worktree add /tmp/before <commit>; ln -s "$PWD/.venv" /tmp/before/.venv
#   (cd /tmp/before && bash scripts/same_predictions.sh /tmp/repro-before)   # with the old scripts/ copy if absent
#   bash scripts/same_predictions.sh /tmp/repro-after
#   .venv/bin/python scripts/same_predictions.py /tmp/repro-before /tmp/repro-after
set -euo pipefail
OUT=$(realpath -m "${1:?usage: same_predictions.sh OUT_DIR}")
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
export CALM_WORKSPACE="$OUT/workspace" PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
.venv/bin/calm eval --model embedded --data builtin/chemical_symbols/test builtin/units/test --limit 30 \
    --fit-ts-on builtin/chemical_symbols/validation --json "$OUT/eval.json" --save-preds "$OUT/eval_preds" --quiet
.venv/bin/calm train --preset quick --method calm --steps 8 --seed 0 \
    --train-data builtin/capitals/train --heldout-data builtin/capitals/validation \
    --eval-data builtin/capitals/test builtin/units/test --eval-limit 30 --name repro --threads 1 > "$OUT/train.log" 2>&1
