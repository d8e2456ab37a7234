"""The names of a run directory's files and folders, and where per-item predictions go.

One place for the layout that RunDir, the job queue, the listing and the evaluations
share (the tree itself: calm_core.runs.rundir's docstring), so none of them spells a file
name of its own. Below `rundir` and `checkpoint_dirs`, which both write into it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from calm_core.io import atomic_write
from calm_core.paths import safe_name

CONFIG, METRICS, CANCEL, COMPLETE, LOCK = "config.json", "metrics.jsonl", "CANCEL", "COMPLETE", ".lock"
SELECTED = "selected"  # the calibrated stop's step: adapter and head (training/selection.py)
RESULTS, JOB_FILE, STDOUT = "results.json", "job.json", "stdout.log"
# Evaluations added after training (results/added.py): their own file and predictions
# folder, so nothing can mistake them for the final evaluation's rows or overwrite those.
ADDED_RESULTS, ADDED = "added_results.json", "added"
# S_V's per-item option probabilities of each variant, as the recommendation saw them (post-hoc
# calibrators out of fold), and the selective-answering choice made on them (results/selective.py).
HELDOUT, SELECTIVE = "heldout", "selective.json"


def predictions_path(root: str | Path, variant: str, dataset: str) -> Path:
    """`<root>/eval/<variant>/<dataset>.parquet`, with `/` in dataset names made safe."""
    return Path(root) / "eval" / safe_name(variant) / f"{safe_name(dataset.replace('/', '__'))}.parquet"


def write_predictions(root: str | Path, variant: str, dataset: str, frame: Any) -> Path:
    """Write a per-item predictions DataFrame atomically (calm_core.io); returns its path."""
    path = predictions_path(root, variant, dataset)
    atomic_write(path, lambda handle: frame.to_parquet(handle, index=False))
    return path


def heldout_path(root: str | Path, variant: str) -> Path:
    """`<root>/heldout/<variant>.parquet`: one variant's S_V probabilities."""
    return Path(root) / HELDOUT / f"{safe_name(variant)}.parquet"


def write_heldout(
    root: str | Path, variant: str, probs: Any, gold: Any, n_choices: Any, fit: str, items: Any = None
) -> Path:
    """Write one variant's S_V probabilities (N, K) as per-item rows (probs cut to the item's
    n_choices, gold, prediction, confidence) and how they were fitted (`fit`: e.g. out of fold),
    atomically; returns the path. With the S_V `items` (in the same order), each row keeps its
    item's id and subject too: what a threshold per subject is fitted on (calibration/by_group.py)."""
    import pandas as pd

    p = np.asarray(probs, dtype=np.float64)
    frame = pd.DataFrame(
        {
            "probs": [row[: int(k)].tolist() for row, k in zip(p, n_choices, strict=True)],
            "gold": np.asarray(gold, dtype=np.int64),
            "prediction": p.argmax(axis=1),
            "confidence": p.max(axis=1),
            "fit": fit,
        }
    )
    if items is not None:
        frame["id"] = [item.id for item in items]
        frame["subject"] = [item.subject for item in items]
    path = heldout_path(root, variant)
    atomic_write(path, lambda handle: frame.to_parquet(handle, index=False))
    return path


def write_heldout_variants(
    root: str | Path | None,
    gold: Any,
    n_choices: Any,
    probs: dict[str, Any],
    posthoc: dict[str, Any],
    how: str,
    trained: str,
    items: Any = None,
) -> None:
    """Every variant's S_V probabilities as a run's recommendation saw them (`probs`: base,
    the trained model, the thermometer; `posthoc`: the calibrators, fitted as `how` says),
    each with how far it depends on S_V's labels, and the S_V `items`' ids and subjects;
    nothing when `root` is None."""
    if root is None:
        return
    for name, p in {**probs, **posthoc}.items():
        fit = how if name in posthoc else "step selected on S_V" if name == trained else "no S_V label"
        write_heldout(root, name, p, gold, n_choices, fit, items)
