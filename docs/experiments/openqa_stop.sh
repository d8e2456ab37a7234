#!/usr/bin/env bash
# docs/results.md, section 5b: the calibrated stop on open answers (issue 21, part 6), on
# the embedded model with 2 CPU cores. Train on built-in capitals_open (greedy accuracy
# 0.51, the open set the model answers best), S_V its validation split (the stop scores
# the Brier of its semantic confidence, 4 sampled answers, string grouping), evaluate on
# every built-in open set and 30 TriviaQA questions. Generation is the cost here
# (about 1 s per question per answer on 2 busy cores), so the sets are cut to 30
# questions and the dense start evaluates every 4 steps.
#   bash docs/experiments/openqa_stop.sh
#   .venv/bin/calm compare --name-prefix ostop- --wide --metrics acc,sem_acc,ece_10,auroc,confidence \
#       --json docs/results/openqa_stop.json      # the table
set -euo pipefail
cd "$(dirname "$0")/../.."
COMMON=(--preset quick --task openqa --steps 40
        --train-data builtin/capitals_open/train --heldout-data builtin/capitals_open/validation
        --eval-data builtin/capitals_open/test builtin/animal_classes_open/test builtin/chemical_symbols_open/test
                    builtin/units_open/test "triviaqa/unfiltered_dev_sub3000[2800:2830]"
        --eval-limit 30 --set eval_dense_every=4 --set eval_every=20
        --set 'generation={"n_samples": 4, "max_new_tokens": 12, "grouping": "string"}')
.venv/bin/calm train "${COMMON[@]}" --method calm ${CALM_ARGS:-} --name ostop-calm --detach
.venv/bin/calm train "${COMMON[@]}" --method sft --set eval_baselines=false --name ostop-sft --detach
