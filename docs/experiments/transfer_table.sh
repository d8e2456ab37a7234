#!/usr/bin/env bash
# docs/results.md, section 4 (issue 21's transfer table): train on a set the embedded model
# knows (built-in chemical symbols, 0.457; ARC-Easy, 0.49), S_V from the same domain, and
# evaluate in domain and on every other above-chance set (capitals 0.857, units 0.533,
# animal classes 0.526, chemical symbols, ARC-Easy). Every trained method uses the
# calibrated stop (the default); base, TS and vector scaling come with every run.
# Quick preset, 60 steps at most, three seeds. Runs are queued as background jobs and
# run one at a time (2 CPU cores: about 3 to 10 minutes each).
#   bash docs/experiments/transfer_table.sh          # queue the runs
#   calm runs                                        # watch them
#   .venv/bin/python scripts/results_table.py --name-prefix xfer-chemical_symbols- --json docs/results/transfer_chemical_symbols.json
#   .venv/bin/python scripts/results_table.py --name-prefix xfer-arc_easy- --json docs/results/transfer_arc_easy.json
set -euo pipefail
cd "$(dirname "$0")/../.."
SEEDS=${SEEDS:-"0 1 2"}
METHODS=${METHODS:-"calm calm-joint iterate sft"}
TRAINS=${TRAINS:-"chemical_symbols arc_easy"}
BUILTIN=(chemical_symbols capitals units animal_classes)
COMMON=(--preset quick --steps 60 --train-limit 1000 --heldout-limit 100 --eval-limit 200
        --set frozen_prefix_store=true)
sets_for() {  # train-name -> "train heldout eval..."
    local train=$1 evals=()
    if [ "$train" = arc_easy ]; then
        echo "arc/easy_train arc/easy_dev arc/easy_test ${BUILTIN[*]/#/builtin/}" | sed 's#\(builtin/[a-z_]*\)#\1/test#g'
        return
    fi
    evals=("builtin/$train/test")
    for other in "${BUILTIN[@]}"; do [ "$other" = "$train" ] || evals+=("builtin/$other/test"); done
    echo "builtin/$train/train builtin/$train/validation ${evals[*]} arc/easy_test"
}
queue() {  # train-name method-label seed
    local train=$1 label=$2 seed=$3 method=$2 extra=()
    if [ "$label" = "calm-joint" ]; then method=calm; extra=(--constraint joint); fi
    read -r -a sets <<< "$(sets_for "$train")"
    .venv/bin/calm train "${COMMON[@]}" --method "$method" "${extra[@]}" --seed "$seed" \
        --train-data "${sets[0]}" --heldout-data "${sets[1]}" --eval-data "${sets[@]:2}" \
        --name "xfer-$train-$label-s$seed" --detach
}
for seed in $SEEDS; do
    for train in $TRAINS; do
        for label in $METHODS; do queue "$train" "$label" "$seed"; done
    done
done
