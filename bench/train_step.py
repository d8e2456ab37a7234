"""Seconds per training step on the embedded model: sft and calm (T = 3 and 10 inner
steps from theta, T = 2 from a persistent theta~), with and without frozen-prefix
caching, side by side; for calm also the median inner drop (L - L~) / L, which says how
far the inner solve got (bilevel.py).

    .venv/bin/python bench/train_step.py [--steps 8] [--batch-size 4] [--lora-layers 4] [--json bench/results/train_step.json]

Each configuration trains in the same process on the same batches (one warm-up step,
then `--steps` timed steps; the median of the method's own step time, which excludes
logging and evaluation), so the ratios are measured under the same machine conditions.
LoRA as in the `quick` preset (r 8 on the attention projections of the top
`--lora-layers` layers). `uncached`: every forward runs all the layers. `cached`: the
trainer fills the frozen-prefix cache before the first step (the drawn training items
and 64 S_V items; `fill s/item` is that fill's seconds per item), so every step runs the
top layers and the LM head only. A first epoch, where every training question is new,
costs a step plus the fill of its questions: `1st epoch` = s/step + batch x fill s/item
(S_V is filled once per run, not per step). `x sft` is the ratio to sft in the same mode
and column; `x uncached` the speed-up of the step over the uncached mode.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CONFIGS = [("sft", 1, "theta"), ("calm", 3, "theta"), ("calm", 10, "theta"), ("calm", 2, "persistent")]  # (method, T, inner start)
MODES = ("uncached", "cached")


def time_config(method: str, inner_steps: int, start: str, mode: str, args: argparse.Namespace) -> dict:
    from calm_core.scoring.models import load_model
    from calm_core.training.config import TrainConfig
    from calm_core.training.loop import train

    cfg = TrainConfig(method=method, bilevel={"inner_steps": inner_steps, "inner_start": start}, steps=args.steps + 1,
                      batch_size=args.batch_size,
                      heldout_batch_size=args.batch_size, scoring=args.scoring, train_data=args.train_data,
                      heldout_data=args.heldout_data, eval_data=(), eval_every=0, eval_dense_until=0, select="last",
                      checkpoint_every=0,
                      train_limit=args.batch_size * (args.steps + 1), heldout_limit=64,
                      frozen_prefix=mode == "cached", lora={"r": 8, "alpha": 16, "layers": args.lora_layers})
    times: list[float] = []
    drops: list[float] = []

    def tick(step: int, total: int, record: dict) -> None:
        if step > 1:  # step 1 is the warm-up; step_time is the method's own step, no logging or eval
            times.append(record["train/step_time"])
            if "bome/inner_drop_frac" in record:
                drops.append(record["bome/inner_drop_frac"])

    result = train(cfg, lm=load_model("embedded"), progress=tick)
    step = statistics.median(times)
    fill = result.prefill["seconds"] / result.prefill["items"] if result.prefill else None
    return {"method": method, "inner_steps": inner_steps, "inner_start": start, "mode": mode,
            "inner_drop_frac": statistics.median(drops) if drops else None, "batch_size": args.batch_size,
            "scoring": args.scoring, "lora_layers": args.lora_layers, "seconds_per_step": step,
            "steps_timed": len(times), "fill_seconds_per_item": fill,
            "first_epoch_seconds_per_step": step + args.batch_size * fill if fill else step}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--scoring", default="cloze")
    parser.add_argument("--lora-layers", type=int, default=4)
    parser.add_argument("--train-data", default="arc/easy_train")
    parser.add_argument("--heldout-data", default="arc/easy_dev")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "train_step.json")
    args = parser.parse_args()
    rows = [time_config(method, t, start, mode, args) for mode in MODES for method, t, start in CONFIGS]
    by_key = {(r["method"], r["inner_steps"], r["inner_start"], r["mode"]): r for r in rows}
    print(f"{'method':8} {'T':>2} {'start':>10} {'mode':>8} {'s/step':>7} {'x sft':>6} {'x uncached':>10} "
          f"{'fill s/item':>11} {'1st epoch':>9} {'x sft':>6} {'inner drop':>10}")
    for row in rows:
        sft = by_key[("sft", 1, "theta", row["mode"])]
        uncached = by_key[(row["method"], row["inner_steps"], row["inner_start"], "uncached")]
        row["ratio_to_sft"] = row["seconds_per_step"] / sft["seconds_per_step"]
        row["first_epoch_ratio_to_sft"] = row["first_epoch_seconds_per_step"] / sft["first_epoch_seconds_per_step"]
        row["speedup_from_cache"] = uncached["seconds_per_step"] / row["seconds_per_step"]
        fill = f"{row['fill_seconds_per_item']:11.3f}" if row["fill_seconds_per_item"] else f"{'-':>11}"
        drop = f"{row['inner_drop_frac']:10.3f}" if row["inner_drop_frac"] is not None else f"{'-':>10}"
        print(f"{row['method']:8} {row['inner_steps']:>2} {row['inner_start']:>10} {row['mode']:>8} "
              f"{row['seconds_per_step']:7.2f} {row['ratio_to_sft']:6.2f} {row['speedup_from_cache']:10.2f} {fill} "
              f"{row['first_epoch_seconds_per_step']:9.2f} {row['first_epoch_ratio_to_sft']:6.2f} {drop}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"rows": rows, "args": {k: str(v) for k, v in vars(args).items()}}, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
