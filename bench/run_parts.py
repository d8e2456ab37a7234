"""Where the default run's time goes, part by part: the time estimate's default rates.

    .venv/bin/python bench/run_parts.py --model embedded --json bench/results/run_parts_embedded.json
    .venv/bin/python bench/run_parts.py --model tiny               # the random tiny Llama of tests/conftest.py
    .venv/bin/python bench/run_parts.py --model tiny --smoke       # 2 steps, 8 items per set: the script runs
    .venv/bin/python bench/run_parts.py --from-run RUN_DIR --json OUT   # a finished run's record again

One in-process `train` of the Train page's default run (quick preset, calm, chemical
symbols with units and animal classes out of domain) on `--model`; prints and writes its
status.json `timings` (training/timings.py) and the idle-machine rates the estimate
learns from it (estimate/rates.py `rates_from`: each part divided by the fair-share
load factor it started under). Those rates are the estimate's DEFAULTS. `--smoke` cuts the
run to bench/streaming.py's SMOKE_RUN (as bench/quick_run.py's does): every part still
runs, its figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.streaming import SMOKE_RUN, tiny_model  # noqa: E402  (tiny_model: the tests' tiny random Llama, saved once)

DATA = dict(train_data="builtin/chemical_symbols/train", heldout_data="builtin/chemical_symbols/validation",
            eval_data=("builtin/chemical_symbols/test", "builtin/units/test", "builtin/animal_classes/test"))


def train_once(model: str, runs: Path, smoke: bool = False) -> Path:
    """The default run of `model` (cut to SMOKE_RUN if `smoke`) in a new run directory under `runs`."""
    from calm_core.runs.rundir import RunDir
    from calm_core.training.config import TrainConfig
    from calm_core.training.loop import train

    cfg = TrainConfig.preset("quick", method="calm", model=model, **DATA, **(SMOKE_RUN if smoke else {}))
    run = RunDir.create(runs, f"parts-{int(time.time())}", {"train": cfg.to_dict()})
    train(cfg, run=run)
    return run.path


def report(run_dir: Path) -> dict:
    from calm_core.estimate.rates import rates_from, read_past_run
    from calm_core.runs.rundir import RunDir

    run = RunDir(run_dir)
    past = read_past_run(run)  # the record the estimate learns from: rates_from reads these
    if past is None or past.timings is None:
        raise SystemExit(f"run {run_dir} has no timings to report")
    rates = rates_from([past], "bench/run_parts.py")
    return {
        "model": run.config.train.model,
        "timings": past.timings.to_dict(),
        "idle_rates": asdict(rates) if rates is not None else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded", help="embedded, a model directory, or tiny")
    parser.add_argument("--from-run", type=Path, help="report a finished run's record instead of training")
    parser.add_argument("--smoke", action="store_true", help="the run cut to SMOKE_RUN: checks the script, times nothing")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="calm-run-parts-") as scratch:
        if args.from_run is not None:
            result = report(args.from_run)
        else:
            model = str(tiny_model(Path(scratch))) if args.model == "tiny" else args.model  # bench/streaming.py's
            result = report(train_once(model, Path(scratch) / "runs", args.smoke))
            result["model"] = args.model
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
