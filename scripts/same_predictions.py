"""Compare two outputs of scripts/same_predictions.sh: every number must be equal.

    .venv/bin/python scripts/same_predictions.py BEFORE AFTER

Compares `calm eval`'s JSON rows, its per-item predictions, and the CALM run's
metrics.jsonl (without wall times), results.json and per-variant predictions. Prints each
difference and exits 1 when there is one."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

# Wall-clock fields and the commit that ran (provenance): they differ between any two runs.
VARYING = {"elapsed", "seconds", "created", "started", "finished", "updated", "timings", "wall_s", "step_time", "git"}


def _strip(value):
    """The value without the VARYING fields."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k.rsplit("/", 1)[-1] not in VARYING}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _run_dir(root: Path) -> Path:
    runs = sorted((root / "workspace" / "runs").glob("*-repro-*"))
    if len(runs) != 1:
        raise SystemExit(f"Expected one repro run under {root}, but found {len(runs)}")
    return runs[0]


def _json_lines(path: Path) -> list:
    return [_strip(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def _frames(root: Path) -> dict[str, pd.DataFrame]:
    return {str(p.relative_to(root)): pd.read_parquet(p) for p in sorted(root.rglob("*.parquet"))}


def differences(before: Path, after: Path) -> list[str]:
    """Every place where the two outputs differ, one line each."""
    found = []
    pairs = {
        "eval.json": (
            _strip(json.loads((before / "eval.json").read_text())),
            _strip(json.loads((after / "eval.json").read_text())),
        ),
    }
    run_b, run_a = _run_dir(before), _run_dir(after)
    pairs["metrics.jsonl"] = (_json_lines(run_b / "metrics.jsonl"), _json_lines(run_a / "metrics.jsonl"))
    pairs["results.json"] = (
        _strip(json.loads((run_b / "results.json").read_text())),
        _strip(json.loads((run_a / "results.json").read_text())),
    )
    for name, (b, a) in pairs.items():
        if b != a:
            found.append(f"{name} differs")
    for label, (root_b, root_a) in {
        "eval": (before / "eval_preds", after / "eval_preds"),
        "run": (run_b / "eval", run_a / "eval"),
    }.items():
        frames_b, frames_a = _frames(root_b), _frames(root_a)
        if set(frames_b) != set(frames_a):
            found.append(f"{label}: prediction files differ: {sorted(set(frames_b) ^ set(frames_a))}")
        for key in sorted(set(frames_b) & set(frames_a)):
            if not frames_b[key].equals(frames_a[key]):
                found.append(f"{label}: {key} differs")
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__)
        return 2
    found = differences(Path(argv[0]), Path(argv[1]))
    for line in found:
        print(line)
    print("identical" if not found else f"{len(found)} differences")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
