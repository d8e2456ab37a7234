"""A training job's torch threads on a machine it shares: seconds per step with 1 thread
and with every core, alone and beside one busy process, side by side in one run.

    .venv/bin/python bench/threads.py [--steps 6] [--json bench/results/threads.json]
    .venv/bin/python bench/threads.py --steps 1 --model tiny   # the script runs; its figures mean nothing

Why: torch runs each operator across its intra-op threads and waits for all of them. When
another process holds a core (a second job, the studio's browsers, a test run), the thread
on that core is descheduled and every operator waits for it, so a job with as many threads
as cores slows far more than its fair share (docs/performance.md: 11x to 61x where a fair
share says 2x). One thread never waits for another.

Each configuration is one `train` of the embedded model in this process: calm, T = 3, the
quick preset's LoRA (r 8 on the top 4 layers) with the frozen prefix cached, cloze scoring
on ARC-Easy, no evaluation; the median of the method's own step time over `--steps` steps
after one warm-up step. `busy` runs a one-core busy loop (`python -c "while True: pass"`,
another process wanting one core) for the configuration's whole length. `--model tiny`
(tests/conftest.py's random tiny Llama) is a smoke run of the same four configurations.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CONDITIONS = ("alone", "busy")


@contextmanager
def one_busy_core(active: bool) -> Iterator[None]:
    """A process that wants one core for as long as the block runs (nothing if not `active`)."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if active else None
    try:
        yield
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()


def seconds_per_step(threads: int, steps: int, model: str) -> float:
    """The median step time of `model` (a name or folder load_model takes) with `threads` threads."""
    import torch

    from calm_core.scoring.models import load_model
    from calm_core.training.config import TrainConfig
    from calm_core.training.loop import train

    torch.set_num_threads(threads)
    cfg = TrainConfig(method="calm", bilevel={"inner_steps": 3}, steps=steps + 1, batch_size=4, heldout_batch_size=4,
                      scoring="cloze", train_data="arc/easy_train", heldout_data="arc/easy_dev", eval_data=(),
                      eval_every=0, eval_dense_until=0, select="last", checkpoint_every=0, model=model,
                      train_limit=4 * (steps + 1), heldout_limit=16, lora={"r": 8, "alpha": 16, "layers": 4})
    times: list[float] = []

    def tick(step: int, total: int, record: dict) -> None:
        if step > 1:  # step 1 warms up
            times.append(record["train/step_time"])

    train(cfg, lm=load_model(model), progress=tick)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--model", default="embedded", help="embedded, a model directory, or tiny (a smoke run)")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "threads.json")
    args = parser.parse_args()
    from bench.streaming import model_or_tiny

    cores = os.cpu_count() or 1
    rows = []
    with tempfile.TemporaryDirectory(prefix="calm-threads-") as scratch:
        model = model_or_tiny(args.model, Path(scratch))
        for condition in CONDITIONS:
            for threads in sorted({1, cores}):
                with one_busy_core(condition == "busy"):
                    rows.append({"condition": condition, "threads": threads,
                                 "seconds_per_step": round(seconds_per_step(threads, args.steps, model), 3)})
                print(rows[-1], flush=True)
    print("\n| condition | threads | s/step | vs 1 thread |\n|---|---|---|---|")
    for r in rows:
        one = next(x for x in rows if x["condition"] == r["condition"] and x["threads"] == 1)["seconds_per_step"]
        print(f"| {r['condition']} | {r['threads']} | {r['seconds_per_step']} | {r['seconds_per_step'] / one:.2f}x |")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"command": " ".join(["bench/threads.py", *sys.argv[1:]]), "cores": cores,
                                     "model": args.model,
                                     "load_average_at_start": os.getloadavg(), "rows": rows}, indent=2) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
