"""Seconds per training step on the embedded model (and Gemma 3 270M beside it where its
extra is installed, `--models`): sft and calm (T = 3 and 10 inner
steps from theta, T = 2 from a persistent theta~), with and without frozen-prefix
caching, side by side; for calm also the median inner drop (L - L~) / L, which says how
far the inner solve got (bilevel.py).

    .venv/bin/python bench/train_step.py [--steps 8] [--batch-size 4] [--lora-layers 4] [--json bench/results/train_step.json]
    .venv/bin/python bench/train_step.py --models tiny --configs sft --steps 1 --lora-layers 1   # the script runs

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
`% peak`: the share of this machine's fp32 matmul peak (bench/flops.py, measured in the
same process right after the configuration) that the step reaches, its FLOPs counted over
one real step of the loop (the step after the warm-up, which is left out of the timing).
`--models tiny` (tests/conftest.py's random tiny Llama, two layers: `--lora-layers 1` leaves
it a frozen layer to cache) is a smoke run: the same loop, counter and peak on random
weights, whose figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CONFIGS = [
    ("sft", 1, "theta"),
    ("calm", 3, "theta"),
    ("calm", 10, "theta"),
    ("calm", 2, "persistent"),
]  # (method, T, inner start)
MODES = ("uncached", "cached")


def config_name(method: str, inner_steps: int, start: str) -> str:
    """A configuration's name for --configs: sft, calm-T3, calm-T10, calm-T2-persistent."""
    if method == "sft":
        return "sft"
    return f"calm-T{inner_steps}" + ("" if start == "theta" else f"-{start}")


def time_config(
    model: str, method: str, inner_steps: int, start: str, mode: str, args: argparse.Namespace, source: str = ""
) -> dict:
    """One configuration's row; `source` is where `model` loads from (default: its name)."""
    from flops import StepCounter, matmul_peak_gflops, peak_fraction

    from calm_core.scoring.models import load_model
    from calm_core.training.config import TrainConfig
    from calm_core.training.loop import train

    cfg = TrainConfig(
        method=method,
        bilevel={"inner_steps": inner_steps, "inner_start": start},
        steps=args.steps + 2,
        batch_size=args.batch_size,
        model=source or model,
        heldout_batch_size=args.batch_size,
        scoring=args.scoring,
        train_data=args.train_data,
        heldout_data=args.heldout_data,
        eval_data=(),
        eval_every=0,
        eval_dense_until=0,
        select="last",
        checkpoint_every=0,
        train_limit=args.batch_size * (args.steps + 2),
        heldout_limit=64,
        frozen_prefix=mode == "cached",
        lora={"r": 8, "alpha": 16, "layers": args.lora_layers},
    )
    times: list[float] = []
    drops: list[float] = []
    counter = StepCounter()

    def tick(step: int, total: int, record: dict) -> None:
        # step 1 is the warm-up; step 2 runs under the FLOP counter (slower: not timed);
        # step_time is the method's own step, no logging or eval
        if step == 1:
            counter.start()
        elif step == 2:
            counter.stop()
        else:
            times.append(record["train/step_time"])
            if "bome/inner_drop_frac" in record:
                drops.append(record["bome/inner_drop_frac"])

    lm = load_model(source or model)
    result = train(cfg, lm=lm, progress=tick)
    counter.stop()  # a run shorter than two steps
    step = statistics.median(times)
    peak = matmul_peak_gflops()
    fill = result.prefill["seconds"] / result.prefill["items"] if result.prefill else None
    return {
        "model": model,
        "vocab": int(lm.model.config.get_text_config().vocab_size),
        "gflop_per_step": counter.flops / 1e9 if counter.flops else None,
        "matmul_peak_gflops": peak,
        "peak_fraction": peak_fraction(counter.flops, step, peak),
        "method": method,
        "inner_steps": inner_steps,
        "inner_start": start,
        "mode": mode,
        "inner_drop_frac": statistics.median(drops) if drops else None,
        "batch_size": args.batch_size,
        "scoring": args.scoring,
        "lora_layers": args.lora_layers,
        "seconds_per_step": step,
        "steps_timed": len(times),
        "fill_seconds_per_item": fill,
        "first_epoch_seconds_per_step": step + args.batch_size * fill if fill else step,
    }


def main() -> None:
    from scoring import default_models

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models",
        nargs="+",
        default=default_models(),
        help="default: embedded, and gemma3-270m where installed; tiny: a smoke run",
    )
    parser.add_argument(
        "--configs",
        nargs="+",
        default=[config_name(*c) for c in CONFIGS],
        choices=[config_name(*c) for c in CONFIGS],
        help="configurations to time (sft is needed for the x sft columns)",
    )
    parser.add_argument("--steps", type=int, default=8, help="timed steps (the loop runs two more: warm-up, counted)")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--scoring", default="cloze")
    parser.add_argument("--lora-layers", type=int, default=4)
    parser.add_argument("--train-data", default="arc/easy_train")
    parser.add_argument("--heldout-data", default="arc/easy_dev")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "train_step.json")
    args = parser.parse_args()
    from bench.streaming import model_or_tiny

    with tempfile.TemporaryDirectory(prefix="calm-train-step-") as scratch:
        rows = [
            time_config(model, method, t, start, mode, args, model_or_tiny(model, Path(scratch)))
            for model in args.models
            for mode in MODES
            for method, t, start in CONFIGS
            if config_name(method, t, start) in args.configs
        ]
    by_key = {(r["model"], r["method"], r["inner_steps"], r["inner_start"], r["mode"]): r for r in rows}
    print(
        f"{'model':12} {'method':8} {'T':>2} {'start':>10} {'mode':>8} {'s/step':>7} {'x sft':>6} {'x uncached':>10} "
        f"{'fill s/item':>11} {'1st epoch':>9} {'x sft':>6} {'inner drop':>10} {'GFLOP':>7} {'% peak':>6}"
    )
    for row in rows:
        sft = by_key[(row["model"], "sft", 1, "theta", row["mode"])]
        uncached = by_key[(row["model"], row["method"], row["inner_steps"], row["inner_start"], "uncached")]
        row["ratio_to_sft"] = row["seconds_per_step"] / sft["seconds_per_step"]
        row["first_epoch_ratio_to_sft"] = row["first_epoch_seconds_per_step"] / sft["first_epoch_seconds_per_step"]
        row["speedup_from_cache"] = uncached["seconds_per_step"] / row["seconds_per_step"]
        fill = f"{row['fill_seconds_per_item']:11.3f}" if row["fill_seconds_per_item"] else f"{'-':>11}"
        drop = f"{row['inner_drop_frac']:10.3f}" if row["inner_drop_frac"] is not None else f"{'-':>10}"
        flop = f"{row['gflop_per_step']:7.1f}" if row["gflop_per_step"] else f"{'-':>7}"
        share = f"{100 * row['peak_fraction']:6.1f}" if row["peak_fraction"] else f"{'-':>6}"
        print(
            f"{row['model']:12} {row['method']:8} {row['inner_steps']:>2} {row['inner_start']:>10} {row['mode']:>8} "
            f"{row['seconds_per_step']:7.2f} {row['ratio_to_sft']:6.2f} {row['speedup_from_cache']:10.2f} {fill} "
            f"{row['first_epoch_seconds_per_step']:9.2f} {row['first_epoch_ratio_to_sft']:6.2f} {drop} {flop} {share}"
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"rows": rows, "args": {k: str(v) for k, v in vars(args).items()}}, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
