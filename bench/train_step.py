"""Seconds per training step on the embedded model: sft and calm (T = 1, 3) side by side.

    .venv/bin/python bench/train_step.py [--steps 3] [--batch-size 4] [--scoring cloze] [--json bench/results/train_step.json]

Each configuration trains in the same process on the same batches (one warm-up step,
then `--steps` timed steps; the median of the method's own step time, which excludes
logging and evaluation), so the ratio calm / sft is measured under the same machine
conditions. Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CONFIGS = [("sft", 1), ("calm", 1), ("calm", 3)]  # (method, inner steps T)


def time_config(method: str, inner_steps: int, args: argparse.Namespace) -> dict:
    from calm_core.models import load_model
    from calm_core.train_config import TrainConfig
    from calm_core.trainer import train

    cfg = TrainConfig(method=method, inner_steps=inner_steps, steps=args.steps + 1, batch_size=args.batch_size,
                      heldout_batch_size=args.batch_size, scoring=args.scoring, train_data=args.train_data,
                      heldout_data=args.heldout_data, eval_data=(), eval_every=0, checkpoint_every=0,
                      train_limit=64, heldout_limit=64)
    times: list[float] = []

    def tick(step: int, total: int, record: dict) -> None:
        if step > 1:  # step 1 is the warm-up; step_time is the method's own step, no logging or eval
            times.append(record["train/step_time"])

    train(cfg, lm=load_model("embedded"), progress=tick)
    return {"method": method, "inner_steps": inner_steps, "batch_size": args.batch_size, "scoring": args.scoring,
            "seconds_per_step": statistics.median(times), "steps_timed": len(times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--scoring", default="cloze")
    parser.add_argument("--train-data", default="arc/easy_train")
    parser.add_argument("--heldout-data", default="arc/easy_dev")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "train_step.json")
    args = parser.parse_args()
    rows = [time_config(method, t, args) for method, t in CONFIGS]
    sft = rows[0]["seconds_per_step"]
    print(f"{'method':8} {'T':>2} {'s/step':>8} {'x sft':>6}")
    for row in rows:
        row["ratio_to_sft"] = row["seconds_per_step"] / sft
        print(f"{row['method']:8} {row['inner_steps']:>2} {row['seconds_per_step']:8.2f} {row['ratio_to_sft']:6.2f}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"rows": rows, "args": {k: str(v) for k, v in vars(args).items()}}, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
