#!/usr/bin/env bash
# The issue-3 experiment: CALM against base, TS and the ablations on the embedded model
# (2 CPU cores). Train on ARC-Easy, S_V = ARC-Easy dev (TS is fitted there too),
# evaluate in domain (ARC-Easy test) and out of domain (ARC-Challenge test,
# CommonsenseQA dev, OpenBookQA test). Eight runs queued as background jobs, one at a
# time; the frozen layers' states go to the disk store so the runs share them.
#   bash docs/experiments/arc_easy_calm.sh            # queue the runs (89 min in all here, machine shared)
#   calm runs                                          # watch them
#   calm compare --name-prefix arc- --wide --json docs/results/arc_easy_calm.json   # the table (docs/results.md, section 4)
set -euo pipefail
cd "$(dirname "$0")/../.."
COMMON=(--preset quick --train-data arc/easy_train --heldout-data arc/easy_dev
        --eval-data arc/easy_test arc/challenge_test commonsenseqa/dev openbookqa/test
        --train-limit 1000 --heldout-limit 100 --eval-limit 200 --steps 150 --lr-theta 5e-4 --lr-alpha 5e-2
        --set eval_every=50 --set checkpoint_every=50 --set frozen_prefix_store=true)
.venv/bin/calm train "${COMMON[@]}" --method calm --scope options --name "arc-calm-options" --detach
.venv/bin/calm train "${COMMON[@]}" --method calm --scope vocab --name "arc-calm-vocab" --detach
for method in sft scalar regularization iterate label_smoothing cft; do
    .venv/bin/calm train "${COMMON[@]}" --method "$method" --name "arc-$method" --detach
done
