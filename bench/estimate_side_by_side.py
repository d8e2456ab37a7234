"""The time estimate's figures for fixed configurations, loads and histories, as JSON: run it
against two checkouts and diff the output to show that a change to the estimate's code
changes none of its figures (so bench/estimate_accuracy.py's table would not change either).

    PYTHONPATH=/path/to/old .venv/bin/python bench/estimate_side_by_side.py > old.json
    PYTHONPATH=$PWD .venv/bin/python bench/estimate_side_by_side.py > new.json
    diff old.json new.json && echo same

No run is trained: the histories are finished runs written as a job leaves them
(config.json with the launch's estimate record, status.json with its timings), with
wall times drawn from a fixed seed. Each estimate is made as the Train page makes one
(`estimate_for`), on the machine loads listed here rather than this machine's.
"""

from __future__ import annotations

import json
import os
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ itself: its sibling's data
from estimate_accuracy import CHEM, DATA, UNITS  # noqa: E402  the same runs as the accuracy bench

LOADS = {"idle": (0.1, 2, 0.0), "busy": (1.5, 2, 1.0), "loaded": (3.0, 2, 3.0), "lagging": (5.5, 2, 0.2)}
CONFIGS: dict[str, dict[str, Any]] = {  # bench/estimate_accuracy.py's, the studio's default run and others
    "calm 8 steps, stop": {"model": "embedded", **DATA, "method": "calm", "steps": 8, "eval_data": (CHEM,)},
    "sft 12 steps, 2 sets": {"model": "embedded", **DATA, "method": "sft", "steps": 12, "eval_data": (CHEM, UNITS),
                             "select": "last"},
    "calm 6 steps, 2 sets": {"model": "embedded", **DATA, "method": "calm", "steps": 6, "eval_data": (CHEM, UNITS),
                             "select": "last"},
    "default run": {"method": "calm"},
    "default, no stop": {"method": "calm", "select": "last", "eval_dense_until": 0, "lr_theta": 1.0},
    "letter scoring": {"method": "calm", "scoring": "letter"},
    "open answers": {"method": "calm", "task": "openqa", "train_data": "builtin/capitals_open/train",
                     "heldout_data": "builtin/capitals_open/validation", "eval_data": ("builtin/capitals_open/test",)},
    "unknown model": {"method": "sft", "model": "/nowhere/model"},
}


def _timings(rng: random.Random, scale: float) -> dict[str, Any]:
    sizes = {"heldout": 24, "evals": 48, "probe": 32, "fill": 80, "final_variants": 3, "step_work": 16.0}
    evaluations = [{"step": i, "kind": "full" if i % 2 == 0 else "heldout", "items": 56 + 48 * (i % 2 == 0),
                    "seconds": round(scale * (0.3 + 0.02 * (56 + 48 * (i % 2 == 0))), 3)} for i in range(5)]
    return {"load_average": rng.choice([0.2, 1.0, 2.5]), "cpus": 2, "sizes": sizes, "load_s": round(3.5 * scale, 3),
            "fill_s": round(4.8 * scale, 3), "steps": 8, "steps_s": round(8 * 0.7 * scale, 3), "evaluations": evaluations,
            "final_s": round(6.0 * scale, 3), "total_s": round(25.0 * scale, 3)}


def write_history(root: Path, runs: int, seed: int = 0) -> None:
    """`runs` finished runs of the listed configurations, newest last."""
    from calm_core.io import atomic_write_json
    from calm_core.runs.rundir import RunDir
    from calm_core.training.config import TrainConfig

    rng = random.Random(seed)
    names = list(CONFIGS)
    for i in range(runs):
        cfg = TrainConfig.preset("quick", **CONFIGS[names[i % 4]])
        busy = rng.random() < 0.4
        figure = rng.uniform(20.0, 30.0)
        ratio = figure * rng.lognormvariate(0.0, 0.3)
        record = {"version": 1, "figure_s": figure, "likely_s": figure, "low_s": figure * 0.6, "high_s": figure * 1.7,
                  "load_average": 1.5 if busy else 0.2, "cpus": 2, "running": 1.0 if busy else 0.0, "threads": 1,
                  "busy": busy, "rates": "defaults" if i < 2 else "learned", "spread_runs": i}
        run = RunDir.create(root, f"past-{i}", {"train": cfg.to_dict(), "method": cfg.method, "estimate": record})
        atomic_write_json(run.path / "results.json", {"results": []})
        created = 1000.0 + 100 * i
        run.write_status("finished", created=created, started=created + 1.0, ended=created + 1.0 + ratio,
                         timings=_timings(rng, rng.uniform(0.8, 1.4)), threads={"threads": 1})


def figures(estimate: Any) -> dict[str, Any]:
    from calm_core.estimate import text

    return {
        "likely": round(estimate.likely, 6), "low": round(estimate.low, 6), "high": round(estimate.high, 6),
        "early": round(estimate.early, 6), "source": estimate.source,
        "parts": [[p.name, round(p.seconds, 6), p.detail] for p in estimate.parts],
        "words": [text.range_sentence(estimate), text.basis_sentence(estimate), text.early_sentence(estimate),
                  text.parts_note(estimate)],
    }


def main() -> None:
    from calm_core.estimate.machine_load import MachineLoad
    from calm_core.estimate.predict import estimate_for
    from calm_core.training.config import TrainConfig

    rows = []
    with tempfile.TemporaryDirectory(prefix="calm-side-") as scratch:
        os.environ["CALM_WORKSPACE"] = scratch
        for history in (0, 3, 12):
            root = Path(scratch) / f"runs-{history}"
            write_history(root, history)
            for label, overrides in CONFIGS.items():
                cfg = TrainConfig.preset("quick", **overrides)
                for load, (average, cpus, running) in LOADS.items():
                    estimate = estimate_for(cfg, root, MachineLoad(average, cpus, running))
                    rows.append({"history": history, "config": label, "load": load, **figures(estimate)})
    json.dump(rows, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
