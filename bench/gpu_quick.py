"""The GPU path in one short script: `quick` CALM on the embedded model with QLoRA (NF4,
bf16 compute) on CUDA; prints seconds per step and peak GPU memory, and JSON.

    .venv/bin/python bench/gpu_quick.py [--steps 40] [--json bench/results/gpu_quick.json]
    .venv/bin/python bench/gpu_quick.py --device cpu --steps 2 --no-4bit    # smoke test of the script itself

Made for a lent accelerator (the `device` tool): one run, well under 10 minutes. The
figures belong in docs/performance.md with the date and the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    import torch

    from calm_core.models import ModelSpec, load_model
    from calm_core.train_config import TrainConfig
    from calm_core.trainer import train

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--no-4bit", action="store_true")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "gpu_quick.json")
    args = parser.parse_args()
    four_bit = not args.no_4bit
    cfg = TrainConfig.preset("quick", method="calm", steps=args.steps, load_in_4bit=four_bit, device=args.device,
                             eval_every=0, checkpoint_every=0, eval_limit=50)
    start = time.perf_counter()
    lm = load_model(ModelSpec(name="embedded", device=args.device, load_in_4bit=four_bit))
    load_s = time.perf_counter() - start
    times: list[float] = []
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    train(cfg, lm=lm, progress=lambda step, total, record: times.append(record["train/step_time"]))
    wall = time.perf_counter() - start
    row = {"device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
           "four_bit": four_bit, "dtype": lm.info.get("dtype"), "steps": args.steps, "load_s": load_s,
           "median_step_s": statistics.median(times[1:] or times), "wall_s_with_eval": wall,
           "peak_gpu_mb": torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None,
           "torch": torch.__version__}
    print(json.dumps(row, indent=2))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(row, indent=2))


if __name__ == "__main__":
    main()
