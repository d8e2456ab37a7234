#!/usr/bin/env bash
# docs/results.md, section 4: CALM (faithful BOME) against base, TS and the ablations on
# the embedded model (2 CPU cores). Train on ARC-Easy; S_V = ARC-Easy dev (TS is fitted
# there too, in domain, and carried to the other sets); evaluate in domain (ARC-Easy
# test) and out of domain (ARC-Challenge test, CommonsenseQA dev, OpenBookQA test,
# TruthfulQA MC1, built-in capitals). Cloze scoring, so the head is the scalar one
# (the only scope that cannot re-rank options: docs/bilevel.md). Runs are queued as
# background jobs, one at a time; the frozen layers' states go to the disk store so the
# runs share them.
#   SEEDS="0 1 2" bash docs/experiments/arc_easy_calm.sh     # queue the runs
#   calm runs                                                 # watch them
#   .venv/bin/python scripts/results_table.py --name-prefix arc- --json docs/results/arc_easy_calm.json   # the tables
set -euo pipefail
cd "$(dirname "$0")/../.."
SEEDS=${SEEDS:-"0 1 2"}
METHODS=${METHODS:-"calm sft"}                                            # over every seed
ONCE=${ONCE:-"calm-joint iterate regularization label_smoothing cft"}     # seed 0 only
COMMON=(--preset quick --train-data arc/easy_train --heldout-data arc/easy_dev
        --eval-data arc/easy_test arc/challenge_test commonsenseqa/dev openbookqa/test truthfulqa_mc/mc1_validation
                    builtin/capitals/test
        --train-limit 1000 --heldout-limit 100 --eval-limit 200 --steps 150
        --set eval_every=0 --set checkpoint_every=50 --set frozen_prefix_store=true)
queue() {  # method-label seed
    local label=$1 seed=$2 extra=()
    local method=$label
    if [ "$label" = "calm-joint" ]; then method=calm; extra=(--constraint joint); fi
    .venv/bin/calm train "${COMMON[@]}" --method "$method" "${extra[@]}" --seed "$seed" --name "arc-$label-s$seed" --detach
}
for seed in $SEEDS; do
    for label in $METHODS; do queue "$label" "$seed"; done
done
for label in $ONCE; do queue "$label" 0; done
