"""The studio's default run end to end, with the calibrated stop and without, side by side.

    .venv/bin/python bench/quick_run.py [--repeats 2] [--json bench/results/quick_run.json]
    .venv/bin/python bench/quick_run.py --repeats 1 --smoke   # 2 steps, 8 items per set: the script runs
    .venv/bin/python bench/quick_run.py --repeats 1 --smoke --model tiny   # the same on a random tiny Llama

Each variant is one `calm train` process (model load, frozen-layer fill, steps,
evaluations and the final evaluation all included), trained on built-in chemical symbols
with units and animal classes out of domain, as the Train page's default run. `stop`: the
defaults (dense early S_V evaluations, the calibrated stop, lr_theta 0.1). `no stop`:
`--select last --eval-dense-until 0 --lr-theta 1.0`, i.e. all 40 steps with the earlier
step size (steps 0 and 1 are still evaluated). The variants alternate, so both see the
same machine conditions; the table gives each run's wall time, peak RSS (the child's
ru_maxrss) and the step it ended at. `--model` trains another model (default: the
embedded one); `tiny` is tests/conftest.py's random tiny Llama, for a smoke run whose
figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ["--train-data", "builtin/chemical_symbols/train", "--heldout-data", "builtin/chemical_symbols/validation",
        "--eval-data", "builtin/chemical_symbols/test", "builtin/units/test", "builtin/animal_classes/test"]
VARIANTS = {"stop": [], "no stop": ["--select", "last", "--eval-dense-until", "0", "--lr-theta", "1.0"]}


def run_once(extra: list[str], workspace: Path, model: str) -> dict:
    """One `calm train` child of `model`: wall seconds, peak RSS (MB) and the step it finished at."""
    command = [str(ROOT / ".venv" / "bin" / "calm"), "train", "--preset", "quick", "--method", "calm", "--model", model,
               *DATA, *extra]
    env = {**os.environ, "CALM_WORKSPACE": str(workspace)}
    started = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"calm train failed: {done.stderr[-2000:]}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KB on Linux; max over children so far
    step = re.search(r"finished at step (\d+)", done.stdout)
    return {"seconds": round(seconds, 1), "peak_rss_mb": round(max(peak, before) / 1024), "steps": int(step.group(1))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--smoke", action="store_true", help="each run tiny (bench/streaming.SMOKE_RUN): checks the script, times nothing"
    )
    parser.add_argument("--model", default="embedded", help="embedded, a model directory, or tiny (a smoke run)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from bench.streaming import SMOKE_RUN, model_or_tiny

    flags = [(f"--{key.replace('_', '-')}", str(n)) for key, n in SMOKE_RUN.items()]  # steps=2 -> --steps 2
    smoke = [part for flag in flags for part in flag] if args.smoke else []
    rows = []
    with tempfile.TemporaryDirectory(prefix="calm-quick-run-") as scratch:
        model = model_or_tiny(args.model, Path(scratch))
        order = list(VARIANTS)
        for repeat in range(args.repeats):
            for name in order if repeat % 2 == 0 else order[::-1]:  # alternate which goes first
                rows.append({"variant": name, "repeat": repeat,
                             **run_once(VARIANTS[name] + smoke, Path(scratch) / name, model)})
                print(rows[-1], flush=True)
    print("\n| variant | runs | wall s (each) | ended at step | peak RSS MB (max so far) |\n|---|---|---|---|---|")
    for name in VARIANTS:
        mine = [r for r in rows if r["variant"] == name]
        print(f"| {name} | {len(mine)} | {', '.join(str(r['seconds']) for r in mine)} | "
              f"{', '.join(str(r['steps']) for r in mine)} | {max(r['peak_rss_mb'] for r in mine)} |")
    if args.json:
        record = {"rows": rows, "model": args.model, "command_data": DATA, "variants": VARIANTS}
        args.json.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
