#!/usr/bin/env bash
# docs/results.md, section 9 (issue 29's transfer table with input-adaptive variants): train
# on chemical symbols and on ARC-Easy, S_V from the same domain, every run with the
# calibrated stop; evaluate on the above-chance sets (the first is in domain) and on the
# three below-chance real sets. Base, TS, vector scaling and ATS come with every run (fitted
# on S_V); the CALM variants are the scalar head (the default under cloze), the adaptive head
# (a temperature per question), and each under the joint constraint.
#   bash docs/experiments/adaptive_transfer.sh             # SEEDS="0 1 2" by default, one run at a time
#   .venv/bin/python scripts/results_table.py --name-prefix adapt-chemical_symbols- \
#       --below-chance openbookqa/test commonsenseqa/dev truthfulqa_mc/mc1_validation \
#       --json docs/results/adaptive_transfer_chemical_symbols.json
#   (the same with adapt-arc_easy- and adaptive_transfer_arc_easy.json)
# Another model: MODEL=gemma3-270m names its runs adapt-gemma3-270m-<train>-<label>-s<seed>
# (the Gemma 3 block: MODEL=gemma3-270m TRAINS=chemical_symbols LABELS="calm calm-adaptive").
set -euo pipefail
cd "$(dirname "$0")/../.."
SEEDS=${SEEDS:-"0 1 2"}
LABELS=${LABELS:-"calm calm-adaptive calm-joint calm-adaptive-joint"}
TRAINS=${TRAINS:-"chemical_symbols arc_easy"}
MODEL=${MODEL:-embedded}
PREFIX=adapt-; [ "$MODEL" = embedded ] || PREFIX="adapt-$MODEL-"
BELOW=(openbookqa/test commonsenseqa/dev truthfulqa_mc/mc1_validation)
COMMON=(--preset quick --steps 60 --train-limit 1000 --heldout-limit 100 --eval-limit 100
        --set frozen_prefix_store=true)
sets_for() {  # train-name -> "train heldout in-domain-test other-tests..."
    local train=$1 builtin=(chemical_symbols capitals units animal_classes) evals=()
    if [ "$train" = arc_easy ]; then
        echo "arc/easy_train arc/easy_dev arc/easy_test ${builtin[*]/%//test}" | sed 's#\([a-z_]*\)/test#builtin/\1/test#g; s#builtin/arc/easy_test#arc/easy_test#'
        return
    fi
    evals=("builtin/$train/test")
    for other in "${builtin[@]}"; do [ "$other" = "$train" ] || evals+=("builtin/$other/test"); done
    echo "builtin/$train/train builtin/$train/validation ${evals[*]} arc/easy_test"
}
run() {  # train-name label seed
    local train=$1 label=$2 seed=$3 extra=()
    case "$label" in
        calm) ;;
        calm-adaptive) extra=(--scope adaptive) ;;
        calm-joint) extra=(--constraint joint) ;;
        calm-adaptive-joint) extra=(--scope adaptive --constraint joint) ;;
    esac
    read -r -a sets <<< "$(sets_for "$train")"
    .venv/bin/calm train --model "$MODEL" "${COMMON[@]}" --method calm "${extra[@]}" --seed "$seed" \
        --train-data "${sets[0]}" --heldout-data "${sets[1]}" --eval-data "${sets[@]:2}" "${BELOW[@]}" \
        --name "$PREFIX$train-$label-s$seed"
}
for seed in $SEEDS; do
    for train in $TRAINS; do
        for label in $LABELS; do  # one failed run is reported, the others still run
            run "$train" "$label" "$seed" || echo "adaptive_transfer: run $train $label s$seed failed" >&2
        done
    done
done
