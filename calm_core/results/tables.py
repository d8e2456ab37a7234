"""A finished run's results as tables show them: its rows across runs (`compare_rows`),
which columns and variants a table starts with, the rows added after training, the
trade-off plot's reference points and each post-hoc calibrator's line. Shared by
`calm compare`, the Monitor, Compare and the report, so every figure is computed here."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from calm_core.calibration.metrics.columns import table_columns, task_table
from calm_core.calibration.posthoc import calibrators
from calm_core.calibration.thermometer import KIND as THERMOMETER
from calm_core.results.verdict import short_name
from calm_core.runs.portable import public_dataset_name
from calm_core.runs.records import RunResults
from calm_core.runs.rundir import RunDir


def result_columns(rows: list[dict[str, Any]]) -> tuple[str, ...]:
    """The table columns for these rows (metrics.columns): open-QA ones when every row
    is an open-QA row, else the multiple-choice runs' table."""
    return table_columns(task_table(rows))


def shared_variants() -> tuple[str, ...]:
    """`base`, every post-hoc calibrator's variant and the thermometer's: the same model
    and fit for runs over the same base model and S_V (the thermometer: the same base
    model), so Compare shows them once, and never takes one for a trained model."""
    return ("base", *calibrators(), THERMOMETER)


def default_variants(variants: list[str], recommended: Iterable[str] = ()) -> list[str]:
    """The variants Compare shows first: base, the first post-hoc calibrator present, a
    variant the run recommends (`recommended`, as named in `variants`) and the first
    trained model (not a *_theta_only ablation), so the trained model and the advice are on
    the page from the start however many calibrators precede them; the first three otherwise."""
    shared = shared_variants()
    posthoc = [v for v in variants if v in shared and v != "base"]
    trained = [v for v in variants if v not in shared and "_theta_only" not in v]
    advised = [v for v in variants if v in set(recommended)]
    picks = [v for v in variants if v == "base"] + posthoc[:1] + advised + trained[:1]
    return list(dict.fromkeys(picks)) if trained else list(variants[:3])


ADDED_MARK = " (added)"  # after the set's name in every table: a row measured after training


DEFAULT_COLUMNS = ("n", "acc", "sem_acc", "ece", "auroc", "aurc", "confidence")  # the table that fits at 1280 px


def default_columns(available: list[str]) -> list[str]:
    """The metric columns Compare shows first (the others are a click, the CSV and the
    wide table away): accuracy, ECE, AUROC, AURC and mean confidence, in the table's order."""
    return [c for c in available if c in DEFAULT_COLUMNS] or list(available[:6])


def compare_rows(runs: list[RunDir]) -> list[dict[str, Any]]:
    """Result rows of several finished runs: their final evaluations, then the sets added
    after training (`calm eval --run`, results/added.py), whose dataset reads
    `<set> (added)` so they are never taken for the run's own rows. `base` / post-hoc
    (`ts`) rows shared by runs appear once (the first run's); a trained variant whose name
    an earlier run already used (two `calm` runs with different scopes) is labelled
    `<variant>@<run name or id>`. A set read from a file is shown by the file's name, never
    its path on this machine (`portable.public_dataset_name`), unless two files share one.
    Each row keeps `variant_raw` and `dataset_raw` (the names in its run's files) and `run`."""
    rows: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    shown: dict[str, str] = {}  # the base name a table shows -> the dataset showing it
    shared = shared_variants()

    for run in runs:
        if not run.has_results():
            raise ValueError(f"Expected results.json in run {run.run_id} (a finished run), but found none")
        label = _name(run)
        for row in [*run.results().rows, *run.added_results()]:
            variant = row["variant"]
            dataset = _shown_name(row["dataset"], shown) + (ADDED_MARK if row.get("added_after_training") else "")
            if (dataset, variant) in seen:
                if variant in shared:
                    continue
                variant = f"{variant}@{label}"
            seen.add((dataset, variant))
            rows.append(
                {
                    **row,
                    "dataset": dataset,
                    "dataset_raw": row["dataset"],
                    "variant": variant,
                    "variant_raw": row["variant"],
                    "run": run.run_id,
                }
            )
    return rows


def _shown_name(raw: str, shown: dict[str, str]) -> str:
    """The name a table shows for the dataset `raw`: a file's base name, or `raw` itself
    when another dataset of the same listing already shows that base name."""
    public = public_dataset_name(raw)
    if shown.setdefault(public, raw) != raw:
        return raw
    return public


def added_lines(rows: list[dict[str, Any]]) -> list[str]:
    """One line per set added after training among `compare_rows` rows: what it measured
    and when ("arc/easy_test (added): 200 items, sha256:..., step 40, added 2026-12-01T...,
    run R"), so a table's added rows can be traced to their data."""
    lines: dict[tuple[str, str], str] = {}
    for row in rows:
        if row.get("added_after_training"):
            lines.setdefault(
                (row["dataset"], row["run"]),
                (
                    f"{row['dataset']}: {row.get('n_items')} items, {row.get('fingerprint')}, step {row.get('step')}, "
                    f"added {row.get('added_at')}, run {row['run']}"
                ),
            )
    return list(lines.values())


def _status_name(run: RunDir) -> str | None:
    status = run.status_or_none()
    return status.name if status is not None else None


def _name(run: RunDir) -> str:
    """The run's name for labels: status.json's, else the id (a damaged status must not
    hide results that are intact)."""
    return _status_name(run) or run.run_id


def reference_points(run: RunDir) -> dict[str, dict[str, tuple[float, float]]]:
    """{evaluation set: {"base" | "ts" | other post-hoc: (ece, acc)}} from a finished run's
    results.json (the trade-off plot's reference markers); {} before the final evaluation."""
    if not run.has_results():
        return {}
    out: dict[str, dict[str, tuple[float, float]]] = {}
    shared = shared_variants()
    for row in run.results().rows:
        if row["variant"] in shared:
            out.setdefault(row["dataset"], {})[row["variant"]] = (float(row["ece"]), float(row["acc"]))
    return out


def posthoc_lines(results: RunResults, notes_only: bool = False) -> list[str]:
    """One line per post-hoc calibrator in a run's results.json (its entry under the
    calibrator's name): what was fitted and on which set ("Temperature scaling (ts):
    T = 1.234, fitted on S."), or the note saying why its variant is missing. With
    `notes_only`, only the notes (the Monitor says why a row is missing)."""
    lines = []
    for name, cls in calibrators().items():
        record = results.calibrator(name)
        if record is None:
            continue
        if record.note is not None:
            lines.append(record.note)
            continue
        try:
            fitted = cls.from_json(record.to_json())
        except (TypeError, ValueError):  # another version's record: nothing to say rather than a wrong line
            continue
        if not notes_only:
            short = short_name(name)  # "Adaptive temperature scaling (ATS)", never "(ats)"
            lines.append(f"{cls.label} ({short}): {fitted.describe('.4g')}, fitted on {record.get('fit_on')}.")
    return lines
