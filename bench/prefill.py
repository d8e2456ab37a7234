"""Seconds per item to fill the frozen-prefix cache: lazily, batch by batch as training
draws them, against `FrozenPrefixModel.prefill` in length order at several batch sizes.

    .venv/bin/python bench/prefill.py [--items 192] [--json bench/results/prefill.json]

Every configuration fills a fresh cache for the same ARC-Easy training items (the
sequences `option_logits` reads under cloze scoring) on the embedded model with LoRA on
the top 4 layers, so the bottom 26 layers run once per sequence in each; the rows run
one after another in one process. `lazy` takes the items in the trainer's shuffled
order, `--train-batch` items per fill, as a first epoch does; `prefill N` sorts them by
length and fills N items at a time. The last column checks that the states agree: the largest difference from
the lazy fill's, relative to the largest state of that sequence.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def fill_lazily(runner, per_item: list, order: list[int], per_batch: int) -> None:
    from calm_core.scoring.forward import left_pad_batch

    for start in range(0, len(order), per_batch):
        seqs = [seq for i in order[start:start + per_batch] for seq in per_item[i]]
        batch = left_pad_batch(seqs, 0, next(runner.parameters()).device)
        runner._fill(batch["input_ids"], batch["attention_mask"], batch["position_ids"], [tuple(s) for s in seqs])


def main() -> None:
    import numpy as np
    import torch

    from calm_core.scoring.adapters import LoraSettings, attach_lora
    from calm_core.scoring.evaluate import load_items
    from calm_core.scoring.frozen_prefix import FrozenPrefixModel, frozen_prefix_split
    from calm_core.scoring.models import load_model
    from calm_core.training.objectives import forward_sequences
    from calm_core.scoring.prompts import ScoringConfig
    from calm_core.training.batches import batch_indices

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="arc/easy_train")
    parser.add_argument("--items", type=int, default=192)
    parser.add_argument("--train-batch", type=int, default=4)
    parser.add_argument("--prefill-batches", default="4,16,32")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "prefill.json")
    args = parser.parse_args()

    lm = load_model("embedded")
    model, _ = attach_lora(lm.model, LoraSettings(r=8, alpha=16, layers=4))
    split = frozen_prefix_split(model, 4)
    items = load_items(args.data, "mc", args.items, 0)
    per_item = forward_sequences(lm.tokenizer, items, ScoringConfig(rule="cloze"))
    order = [i for step in range(len(items) // args.train_batch)
             for i in batch_indices(len(items), args.train_batch, step, 0)]
    FrozenPrefixModel(model, split).prefill(per_item[:8])  # warm-up: first calls allocate
    rows, states = [], {}
    configs = [("lazy", args.train_batch)] + [("prefill", int(b)) for b in args.prefill_batches.split(",")]
    with torch.no_grad():
        for mode, per_batch in configs:
            runner = FrozenPrefixModel(model, split)
            start = time.perf_counter()
            if mode == "lazy":
                fill_lazily(runner, per_item, order, per_batch)
            else:
                runner.prefill(per_item, items_per_batch=per_batch)
            seconds = time.perf_counter() - start
            states[(mode, per_batch)] = runner._cache
            rows.append({"mode": mode, "items_per_batch": per_batch, "items": len(items),
                         "sequences": runner.computed, "seconds": seconds, "seconds_per_item": seconds / len(items)})
    reference = states[configs[0]]
    lazy = rows[0]["seconds_per_item"]
    print(f"{'mode':8} {'items/batch':>11} {'s/item':>7} {'x lazy':>7} {'max rel. diff':>13}")
    for row, key in zip(rows, configs):
        diff = max(float((states[key][k] - v).abs().max() / v.abs().max()) for k, v in reference.items())
        row["speedup_over_lazy"] = lazy / row["seconds_per_item"]
        row["max_rel_state_diff"] = diff
        print(f"{row['mode']:8} {row['items_per_batch']:>11} {row['seconds_per_item']:7.4f} "
              f"{row['speedup_over_lazy']:7.2f} {diff:13.1e}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"rows": rows, "args": {k: str(v) for k, v in vars(args).items()},
                                     "torch_threads": torch.get_num_threads(), "numpy": np.__version__}, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
