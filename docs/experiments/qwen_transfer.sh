#!/usr/bin/env bash
# docs/results.md, section 11: the paper's setting on an aligned model that answers letters.
# Qwen2.5-Coder-1.5B-Instruct (CALM_QWEN=1 bash scripts/setup.sh), letter answers under the chat
# template with alpha over the whole vocabulary (`--scoring auto` decides it on S_V and records
# why), trained on one built-in domain chosen on S_V alone (docs/experiments/qwen_domain_choice.py),
# S_V from the same domain, every run with the calibrated stop; evaluated on the domain's test
# split, the other built-in sets and five real sets. Base, TS, vector scaling and ATS come with
# every run (fitted on S_V).
#   TRAIN=units bash docs/experiments/qwen_transfer.sh                  # SEEDS="0 1 2", LABELS below
#   .venv/bin/python scripts/results_table.py --name-prefix qwen-units- \
#       --json docs/results/qwen_transfer_units.json
# LABELS: calm (the vocabulary-wide head, the paper's), calm-adaptive (a temperature per question),
# calm-options (alpha restricted to the K option letters: the ablation of the vocabulary-wide alpha),
# calm-small-lr (a tenth of the default step sizes of alpha and theta: the step-size row),
# calm-scalar (one shift and temperature for every token: CALM's scalar head),
# calm-sv-split (S_V = 60 items carved from the domain's training split, training on the other
# 64: a larger S_V, and enough items for ATS), calm-sv-ood (S_V = 40 items of ARC-Easy's dev
# split: an S_V from another domain), calm-plain (letter answers without the chat template,
# `--scoring letter`: the plain format; give it the plain format's domain, TRAIN=arithmetic),
# calm-paper-hp (the paper's T = 10 inner steps and batch 16, 10 steps at most: its LoRA, r64
# on every linear layer under QLoRA, is a GPU's; here LoRA stays r8 on the top 4 layers).
# STEP=small gives any label those step sizes (its runs are named <label>-small-lr-s<seed>).
set -euo pipefail
cd "$(dirname "$0")/../.."
SEEDS=${SEEDS:-"0 1 2"}
LABELS=${LABELS:-"calm calm-adaptive"}
TRAIN=${TRAIN:?name the training domain chosen on S_V: TRAIN=<domain>}
MODEL=${MODEL:-qwen2.5-coder-1.5b}
EVAL_LIMIT=${EVAL_LIMIT:-40}
REAL=(arc/easy_test arc/challenge_test truthfulqa_mc/mc1_validation commonsenseqa/dev openbookqa/test)
BUILTIN=(capitals chemical_symbols atomic_numbers units animal_classes)
COMMON=(--preset quick --train-limit 160 --heldout-limit 100 --eval-limit "$EVAL_LIMIT"
        --set frozen_prefix_store=true)
evals=("builtin/$TRAIN/test")
for other in "${BUILTIN[@]}"; do [ "$other" = "$TRAIN" ] || evals+=("builtin/$other/test"); done
run() {  # label seed
    local label=$1 seed=$2 extra=() train=("builtin/$TRAIN/train") heldout=("builtin/$TRAIN/validation")
    case "$label" in
        calm) ;;
        calm-adaptive) extra=(--scope adaptive) ;;
        calm-options) extra=(--scope options) ;;
        calm-scalar) extra=(--scope scalar) ;;
        calm-small-lr) extra=(--set lr_alpha=0.05 --set lr_theta=0.01) ;;  # a tenth of both step sizes
        calm-sv-split) train=("builtin/$TRAIN/train[0:64]") heldout=("builtin/$TRAIN/train[64:]") ;;
        calm-sv-ood) heldout=(arc/easy_dev) extra=(--heldout-limit 40) ;;
        calm-plain) extra=(--scoring letter) ;;  # chat_template stays false
        calm-paper-hp) extra=(--inner-steps 10 --batch-size 16 --steps 10) ;;
    esac
    if [ "${STEP:-default}" = small ] && [ "$label" != calm-small-lr ]; then
        extra+=(--set lr_alpha=0.05 --set lr_theta=0.01)
        label="$label-small-lr"
    fi
    .venv/bin/calm train --model "$MODEL" "${COMMON[@]}" --method calm "${extra[@]}" --seed "$seed" \
        --train-data "${train[@]}" --heldout-data "${heldout[@]}" \
        --eval-data "${evals[@]}" "${REAL[@]}" --name "qwen-$TRAIN-$label-s$seed"
}
for seed in $SEEDS; do
    for label in $LABELS; do  # one failed run is reported, the others still run
        run "$label" "$seed" || echo "qwen_transfer: run $label s$seed failed" >&2
    done
done
