"""A run's stored per-item predictions (eval/<variant>/<dataset>.parquet) as the
reliability diagrams and selective answering read them."""

from __future__ import annotations

from typing import Any

import numpy as np

from calm_core.runs.layout import predictions_path
from calm_core.runs.rundir import RunDir


def row_predictions(run: RunDir, row: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """`predictions` of one `compare_rows` row: its names in the run's files, and added/
    for a set added after training."""
    return predictions(run, row["variant_raw"], row["dataset_raw"], added=bool(row.get("added_after_training")))


def row_open_answers(run: RunDir, row: dict[str, Any]) -> Any:
    """`open_answers` of one `compare_rows` row (see `row_predictions`)."""
    return open_answers(run, row["variant_raw"], row["dataset_raw"], added=bool(row.get("added_after_training")))


def predictions(run: RunDir, variant: str, dataset: str, added: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(confidence, correct) per item of one variant on one set, from the run's Parquet
    (`variant` as the run itself named it: a row's `variant_raw`; `added`: a set added
    after training, whose predictions live under added/)."""
    path = predictions_path(run.added_dir if added else run.path, variant, dataset)
    if not path.is_file():
        raise ValueError(f"Expected predictions of `{variant}` on {dataset} in run {run.run_id}, but found none")
    frame = run.read_predictions(path)
    confidence = frame["confidence"].to_numpy(dtype=np.float64)
    if "correct" in frame:  # open-QA runs (generative.judge): the Sem1 pair, judged when written
        return confidence, frame["correct"].to_numpy(dtype=np.float64)
    correct = (frame["prediction"].to_numpy() == frame["gold"].to_numpy()).astype(np.float64)
    return confidence, correct


def open_answers(run: RunDir, variant: str, dataset: str, added: bool = False) -> Any:
    """The per-item open-QA frame (greedy, samples, clusters, confidences) of one variant
    on one set, or None when the run is a multiple-choice one."""
    path = predictions_path(run.added_dir if added else run.path, variant, dataset)
    if not path.is_file():
        raise ValueError(f"Expected predictions of `{variant}` on {dataset} in run {run.run_id}, but found none")
    frame = run.read_predictions(path)
    return frame if "samples" in frame else None
