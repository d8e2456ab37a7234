#!/usr/bin/env bash
# Preliminary CALM vs baselines on the embedded model (2 CPU cores): train on ARC-Easy,
# S_V = ARC-Easy dev, evaluate in domain (ARC-Easy test) and out of domain
# (CommonsenseQA dev). Four runs queued as background jobs (one at a time).
# Untuned: 40 steps, LoRA on the top 4 layers; see docs/results.md for how to read it.
set -euo pipefail
cd "$(dirname "$0")/../.."
COMMON=(--preset quick --train-data arc/easy_train --heldout-data arc/easy_dev
        --eval-data arc/easy_test commonsenseqa/dev --train-limit 400 --heldout-limit 100 --eval-limit 100
        --steps 40 --lr-theta 5e-4 --lr-alpha 5e-2 --set eval_every=0 --set checkpoint_every=20)
for method in calm sft scalar regularization; do
    .venv/bin/calm train "${COMMON[@]}" --method "$method" --name "prelim-$method" --detach
done
