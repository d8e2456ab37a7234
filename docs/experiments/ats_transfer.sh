#!/usr/bin/env bash
# ATS beside TS and base on the embedded model (docs/results.md, section 6): calibrators
# fitted on one domain's held-out split, evaluated on the built-in and real sets.
#   bash docs/experiments/ats_transfer.sh            # both fit domains, ~100 items a set
set -euo pipefail
cd "$(dirname "$0")/../.."
SETS=(builtin/chemical_symbols/test builtin/capitals/test builtin/units/test builtin/animal_classes/test
      arc/easy_test openbookqa/test commonsenseqa/dev truthfulqa_mc/mc1_validation)
LIMIT="${LIMIT:-100}"
.venv/bin/calm eval --model embedded --data "${SETS[@]}" --limit "$LIMIT" --quiet \
    --fit-ts-on builtin/chemical_symbols/validation --json docs/results/ats_fit_chemical_symbols.json
.venv/bin/calm eval --model embedded --data "${SETS[@]}" --limit "$LIMIT" --quiet \
    --fit-ts-on arc/easy_dev --fit-limit 100 --json docs/results/ats_fit_arc_easy.json
