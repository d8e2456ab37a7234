"""The names of a run directory's files and folders, and where per-item predictions go.

One place for the layout that RunDir, the job queue, the listing and the evaluations
share (the tree itself: calm_core.runs.rundir's docstring), so none of them spells a file
name of its own. Below `rundir` and `checkpoint_dirs`, which both write into it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from calm_core.io import atomic_write
from calm_core.paths import safe_name

CONFIG, METRICS, CANCEL, COMPLETE, LOCK = "config.json", "metrics.jsonl", "CANCEL", "COMPLETE", ".lock"
SELECTED = "selected"  # the calibrated stop's step: adapter and head (training/selection.py)
RESULTS, JOB_FILE, STDOUT = "results.json", "job.json", "stdout.log"
# Evaluations added after training (workspace/added.py): their own file and predictions
# folder, so nothing can mistake them for the final evaluation's rows or overwrite those.
ADDED_RESULTS, ADDED = "added_results.json", "added"


def predictions_path(root: str | Path, variant: str, dataset: str) -> Path:
    """`<root>/eval/<variant>/<dataset>.parquet`, with `/` in dataset names made safe."""
    return Path(root) / "eval" / safe_name(variant) / f"{safe_name(dataset.replace('/', '__'))}.parquet"


def write_predictions(root: str | Path, variant: str, dataset: str, frame: Any) -> Path:
    """Write a per-item predictions DataFrame atomically (calm_core.io); returns its path."""
    path = predictions_path(root, variant, dataset)
    atomic_write(path, lambda handle: frame.to_parquet(handle, index=False))
    return path
