"""Calibration by subject on a finished run: ECE (with its 90% interval), accuracy and count
per subject of an evaluation set, for each variant, and a selective threshold per subject
chosen on S_V (Mondrian: calibration/by_group.py).

    table = subject_table({"base": (run, row), "calm": (run, row)})   # Compare's section
    choice = choose_by_group(run, SelectiveRequest("calm"), by="subject")  # `calm selective --by subject`

Subjects are the items' `subject` field: the column the data mapping feeds it (`subject` by
default; the Data page's "Group: subject or any column", or `--mapping subject=COLUMN`, names
any other: a region, a source).
An evaluation set's subjects are read from its predictions when they carry them, else from
the set itself, loaded again by name and matched by item id. S_V's come from the run's
heldout/ files, which keep each item's subject (runs/layout.write_heldout); a run written
before they did is refused with the way out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from calm_core.calibration.by_group import (
    NO_GROUP,
    GroupRow,
    GroupThreshold,
    group_labels,
    group_metrics,
    group_order,
    mondrian_thresholds,
)
from calm_core.calibration.selective_answerer import top_label
from calm_core.data.catalog import load_dataset
from calm_core.results.selective import SelectiveRequest, heldout_probs, threshold_text
from calm_core.results.verdict import variant_label
from calm_core.runs.layout import heldout_path, predictions_path
from calm_core.runs.rundir import RunDir

GROUP_KEYS = ("subject",)  # what `--by` can name: the item field a group is read from
Source = tuple[RunDir, dict[str, Any]]  # a variant's run and its compare_rows row (results/tables.py)
Scores = tuple[np.ndarray, np.ndarray]  # (confidence (n,), correct (n,)) of one variant on one group's items


@dataclass(frozen=True)
class SubjectTable:
    """Per-subject rows of the variants read on the same items, why a variant is left out,
    and each subject's (confidence, correct) per variant: its reliability diagram's input."""

    rows: list[GroupRow]
    notes: list[str]
    curves: dict[str, dict[str, Scores]] = field(default_factory=dict)  # subject -> variant -> scores

    @property
    def has_subjects(self) -> bool:
        """At least two groups: one subject (a built-in set's) would repeat the set's own row."""
        return len({row.group for row in self.rows}) >= 2

    def largest(self) -> list[str]:
        """The subjects, most items first (by name among equals): the ones whose diagrams
        say most are drawn first, since a diagram of a few items is mostly noise."""
        sizes = {row.group: row.n for row in self.rows}
        return sorted(sizes, key=lambda group: (-sizes[group], group))

    def size(self, group: str) -> int:
        """How many items `group` holds (0 for a group the table does not have)."""
        return next((row.n for row in self.rows if row.group == group), 0)


@dataclass(frozen=True)
class GroupChoice:
    """A variant's threshold per group on S_V (`calm selective --by`)."""

    variant: str
    by: str
    fits: list[GroupThreshold]

    @property
    def too_small(self) -> list[GroupThreshold]:
        return [fit for fit in self.fits if fit.too_small]


def prediction_file(run: RunDir, row: dict[str, Any]) -> Path:
    """The predictions file of one compare_rows row (added/ for a set added after training)."""
    added = bool(row.get("added_after_training"))
    return predictions_path(run.added_dir if added else run.path, row["variant_raw"], row["dataset_raw"])


def _frame(run: RunDir, row: dict[str, Any]) -> Any:
    return run.read_predictions(prediction_file(run, row))


def _probs(frame: Any) -> np.ndarray:
    """Ragged per-item probability lists -> (N, K), zero where an item has fewer options."""
    rows = list(frame["probs"])
    out = np.zeros((len(rows), max(len(r) for r in rows)))
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def dataset_subjects(dataset: str) -> dict[str, str | None]:
    """Item id -> subject of a nameable set, loaded again (empty when it cannot be loaded:
    a file since moved, a hub set offline); the subject column is the default mapping's."""
    try:
        items = load_dataset(dataset).items
    except Exception:  # any reason the set cannot be read again (moved, offline, a loader's own error): no subjects
        return {}
    return {str(item.id): item.subject for item in items}


def frame_subjects(frame: Any, dataset: str) -> list[str | None]:
    """Each predicted item's subject: the frame's own column, else its set's by item id."""
    if "subject" in frame:
        return list(frame["subject"])
    if "id" not in frame:
        return [None] * len(frame)
    known = dataset_subjects(dataset)
    return [known.get(str(item_id)) for item_id in frame["id"]]


def _same_items(frame: Any, first: Any) -> bool:
    """Whether two variants' predictions are of the same items, in the same order."""
    if len(frame) != len(first):
        return False
    return "id" not in frame or "id" not in first or list(frame["id"]) == list(first["id"])


def subject_table(sources: dict[str, Source], n_bins: int = 15) -> SubjectTable:
    """ECE with its interval, accuracy and count per subject, for each variant in `sources`
    (shown name -> its run and row) on one evaluation set. Variants are compared on the same
    items: one whose item ids differ from the first's, or without option probabilities, is
    left out with a note."""
    frames: dict[str, Any] = {}
    notes: list[str] = []
    for name, (run, row) in sources.items():
        if not prediction_file(run, row).is_file():
            notes.append(f"{name}: no predictions on this set")
            continue
        frame = _frame(run, row)
        if "probs" not in frame:
            notes.append(f"{name}: its predictions hold no option probabilities")
        elif frames and not _same_items(frame, next(iter(frames.values()))):
            notes.append(f"{name}: evaluated on other items of this set")
        else:
            frames[name] = frame
    if not frames:
        return SubjectTable([], notes)
    first_name, first = next(iter(frames.items()))
    subjects = frame_subjects(first, sources[first_name][1]["dataset_raw"])
    if len(set(group_labels(subjects))) < 2:
        return SubjectTable([], notes)
    probs = {name: _probs(frame) for name, frame in frames.items()}
    gold = first["gold"].to_numpy(dtype=np.int64)
    return SubjectTable(group_metrics(probs, gold, subjects, n_bins), notes, group_curves(probs, gold, subjects))


def group_curves(
    probs: dict[str, np.ndarray], gold: np.ndarray, subjects: list[str | None]
) -> dict[str, dict[str, Scores]]:
    """Each group's (top-label confidence, correct) per variant: the diagram of a subject
    reads its own items alone, as its ECE in the table does. probs: variant -> (N, K)."""
    labels = group_labels(subjects)
    out: dict[str, dict[str, Scores]] = {}
    for group in group_order(labels):
        mask = labels == group  # (N,)
        out[group] = {name: top_label(p[mask], gold[mask]) for name, p in probs.items()}
    return out


def table_rows(table: SubjectTable) -> list[dict[str, str]]:
    """The table's rows as text cells: subject, variant, items, accuracy, ECE [90% interval]."""
    return [
        {
            "subject": row.group,
            "variant": variant_label(row.variant),
            "items": str(row.n),
            "accuracy": f"{row.acc:.3f}",
            "ECE [90% interval]": f"{row.ece:.3f} [{row.ece_low:.3f}, {row.ece_high:.3f}]",
        }
        for row in table.rows
    ]


def heldout_groups(run: RunDir, variant: str, by: str) -> list[str | None]:
    """Each S_V item's group (`by`: a GROUP_KEYS field) from the run's heldout/ file."""
    if by not in GROUP_KEYS:
        raise ValueError(f"Expected `by` to be one of {', '.join(GROUP_KEYS)}, but got {by!r}")
    frame = run.read_predictions(heldout_path(run.path, variant))
    if by not in frame:
        raise ValueError(
            f"Expected each S_V item's {by} in run {run.run_id}'s heldout/{variant}.parquet, but it has none: "
            "runs finished before thresholds by group keep no subjects; a new run of the same settings does"
        )
    return list(frame[by])


def choose_by_group(run: RunDir, request: SelectiveRequest, by: str = "subject") -> GroupChoice:
    """The request's variant: its rule fitted on each group's S_V items alone."""
    probs, gold, _ = heldout_probs(run, request.variant)
    confidence, correct = top_label(probs, gold)
    groups = heldout_groups(run, request.variant, by)
    return GroupChoice(request.variant, by, mondrian_thresholds(request.answerer(), confidence, correct, groups))


def group_line(fit: GroupThreshold) -> str:
    """One group's threshold on S_V, or that it is too small and how many items it needs."""
    if fit.threshold is None:
        return f"{fit.group}: too small, {fit.n} held-out items of the {fit.needed} it needs"
    t = fit.threshold
    answered = f"answers {t.heldout_answered} of {t.n_heldout} held-out items ({t.heldout_errors} wrong)"
    return f"{fit.group}: threshold {threshold_text(t)}, {answered}"


def summary_line(choice: GroupChoice) -> str:
    """Whether every group got its own threshold; else which are too small, never merged."""
    small = choice.too_small
    if [fit.group for fit in choice.fits] == [NO_GROUP]:
        return (
            f"S_V's items carry no {choice.by}: its one group is the threshold for all. Map a column to "
            f"{choice.by} (the Data page's Group, or --mapping subject=COLUMN: any column) and train again."
        )
    if not small:
        return f"Every {choice.by} has its own threshold ({len(choice.fits)} groups)."
    names = ", ".join(f"{fit.group} ({fit.n} of {fit.needed})" for fit in small)
    return (
        f"{len(small)} of {len(choice.fits)} groups by {choice.by} are too small for a threshold of their own: "
        f"{names}. Hold out more of their items, ask for a larger target, or use one threshold for all "
        "(without --by); they are not merged, since a merged group's guarantee holds for neither."
    )
