#!/usr/bin/env bash
# docs/results.md section 5c: section 5's TriviaQA setting re-run with the faithful BOME
# step (the quick preset's plain step, lr_theta 0.1, lr_alpha 0.5) and the calibrated stop,
# on the embedded model with 2 CPU cores. CALM only (its run carries base and ts); cut to
# 60 evaluation questions per set and 60 S_V questions so that it fits about an hour here.
#   bash docs/experiments/openqa_triviaqa_stop.sh
#   .venv/bin/calm compare --name-prefix oqs- --wide --metrics acc,sem_acc,ece_10,sem2_ece_10,auroc,confidence \
#       --ood-mean --json docs/results/openqa_triviaqa_stop.json
set -euo pipefail
cd "$(dirname "$0")/../.."
.venv/bin/calm train --preset quick --task openqa --method calm --scope vocab --steps 150 \
    --train-data "triviaqa/unfiltered_dev_sub3000[0:2000]" --heldout-data "triviaqa/unfiltered_dev_sub3000[2000:2100]" \
    --eval-data "triviaqa/unfiltered_dev_sub3000[2800:2950]" triviaqa/selfrag_test_sub1000 popqa/longtail_test \
    --heldout-limit 60 --eval-limit 60 --set eval_every=50 --set checkpoint_every=50 --set eval_batch_size=16 \
    --set 'generation={"n_samples": 8, "max_new_tokens": 16, "grouping": "embedding"}' --name oqs-calm --detach
