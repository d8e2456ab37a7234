"""Reading a run directory for display: curves, alpha over time, ETA, results, predictions.

Pure functions over what the trainer wrote (metrics.jsonl, status.json, results.json,
eval/<variant>/<dataset>.parquet), shared by `calm compare` and the studio's Monitor
and Compare pages, so every number a page shows is computed (and tested) here.

    steps, values = series(run.read_metrics(), "train/lower_loss")
    steps, taus = alpha_vectors(run.read_metrics(), "tau")     # (S,), (S, K)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from calm_core.calibration.metrics.columns import table_columns, task_table
from calm_core.calibration.posthoc import calibrators
from calm_core.calibration.thermometer import KIND as THERMOMETER
from calm_core.glossary import define, lookup
from calm_core.results.verdict import ABBREVIATIONS
from calm_core.runs.layout import predictions_path
from calm_core.runs.records import RunResults
from calm_core.runs.rundir import RunDir

EVAL_PREFIX = "eval/"


def series(records: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one logged scalar, skipping steps that did not log it."""
    pairs = [(r["step"], float(r[key])) for r in records if isinstance(r.get(key), (int, float))]
    return [s for s, _ in pairs], [v for _, v in pairs]


def eval_sets(records: list[dict[str, Any]]) -> list[str]:
    """Names of the sets evaluated during training (`heldout` is S_V), in logged order."""
    names: dict[str, None] = {}
    for record in records:
        for key in record:
            if key.startswith(EVAL_PREFIX):
                names[key[len(EVAL_PREFIX) :].rsplit("/", 1)[0]] = None
    return list(names)


def alpha_vectors(records: list[dict[str, Any]], name: str = "tau") -> tuple[list[int], np.ndarray]:
    """Steps and the logged alpha vector (`alpha/tau` or `alpha/l`) at each: (S,), (S, K).
    Empty when the run logs no vector (vocab scope logs summary statistics only)."""
    rows = [(r["step"], r[f"alpha/{name}"]) for r in records if isinstance(r.get(f"alpha/{name}"), list)]
    if not rows:
        return [], np.zeros((0, 0))
    return [s for s, _ in rows], np.array([v for _, v in rows], dtype=np.float64)


# The BOME diagnostics a page, the report or `calm runs` shows, in the order shown. What each
# means is its glossary entry (calm_core/glossary.py), in plain words, as on the Monitor.
BOME_KEYS: tuple[str, ...] = ("q", "lambda", "inner_drop_frac", "coupling_ratio", "cos_fq", "descent_ratio")
BOME_MEANINGS: dict[str, str] = {key: define(key) for key in BOME_KEYS}


def bome_name(key: str) -> str:
    """A diagnostic's name as the glossary heads it ("coupling ratio" for `coupling_ratio`)."""
    term = lookup(key)
    return term.name if term is not None else key


def bome_summary(records: list[dict[str, Any]], eta: float | None, last: int = 10) -> dict[str, Any]:
    """Means of the BOME diagnostics over the last `last` logged steps, and whether the
    run's coupling was inert throughout (bilevel_health.coupling_inert); {} without a BOME log."""
    from calm_core.training.bilevel_health import coupling_inert

    steps = [r for r in records if "bome/q" in r]
    if not steps:
        return {}
    tail = steps[-last:]
    out: dict[str, Any] = {}
    for key in BOME_KEYS:
        values = [float(r[f"bome/{key}"]) for r in tail if isinstance(r.get(f"bome/{key}"), (int, float))]
        if values:
            out[key] = sum(values) / len(values)
    out["inert"] = eta is not None and coupling_inert(steps, eta)
    out["steps"] = len(steps)
    return out


def bome_line(summary: dict[str, Any]) -> str:
    """`calm runs`' BOME column: the flag, or the inner drop, lambda and the coupling ratio."""
    if not summary:
        return ""
    if summary.get("inert"):
        return "BOME coupling INERT (inner drop ~ 0, lambda ~ eta)"
    parts = [
        f"{name} {summary[key]:.3g}"
        for key, name in (("inner_drop_frac", "drop"), ("lambda", "lambda"), ("coupling_ratio", "ratio"))
        if key in summary
    ]
    return "bome: " + ", ".join(parts)


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
    rows, seen, shared, shown = [], set(), shared_variants(), {}

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
    from calm_core.runs.portable import public_dataset_name

    public = public_dataset_name(raw)
    if shown.setdefault(public, raw) != raw:
        return raw
    return public


def added_lines(rows: list[dict[str, Any]]) -> list[str]:
    """One line per set added after training among `compare_rows` rows: what it measured
    and when ("arc/easy_test (added): 200 items, sha256:..., step 40, added 2026-12-01T...,
    run R"), so a table's added rows can be traced to their data."""
    lines = {}
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
        if not isinstance(record, dict):
            continue
        if "note" in record:
            lines.append(str(record["note"]))
            continue
        try:
            fitted = cls.from_json(record)
        except (TypeError, ValueError):  # another version's record: nothing to say rather than a wrong line
            continue
        if not notes_only:
            short = ABBREVIATIONS.get(name, name)  # "Adaptive temperature scaling (ATS)", never "(ats)"
            lines.append(f"{cls.label} ({short}): {fitted.describe('.4g')}, fitted on {record.get('fit_on')}.")
    return lines


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


def head_scope(train: dict[str, Any]) -> str:
    """The head scope a run really has: `head_scope` as config.json records it, else (runs
    made before it was recorded) the config's resolution of `auto` and a method's forced
    scope; what the config says when it comes from another version and no longer validates."""
    from calm_core.training.config import TrainConfig

    if train.get("head_scope"):
        return str(train["head_scope"])
    try:
        return TrainConfig.from_dict(train).effective_scope
    except (TypeError, ValueError):
        return str(train.get("scope"))


def uniform_entropy(run: RunDir) -> float | None:
    """The entropy of a uniform forecast over S_V's options, mean ln K over its items: the
    ceiling the Monitor's entropy curve approaches as tau grows (docs/bilevel.md). None for
    an open-answer run (its entropy is per token) or when S_V cannot be read."""
    from calm_core.data.catalog import load_dataset

    train = run.config.train
    if task_of(run) != "mcqa" or not train.get("heldout_data"):
        return None
    try:
        items = load_dataset(str(train["heldout_data"])).items
    except Exception:  # a moved or damaged file: the curve is drawn without its ceiling
        return None
    sizes = np.array([len(item.choices) for item in items if len(item.choices) > 1], dtype=np.float64)  # (N,)
    return float(np.log(sizes).mean()) if len(sizes) else None


def task_of(run: RunDir) -> str:
    """`mcqa` or `openqa`, from the run's config (runs before open QA are mcqa)."""
    return task_in(run.config.train)


def task_in(train: Mapping[str, Any]) -> str:
    """`task_of` on a config.json `train` record already read (the Monitor reads it once a poll)."""
    return train.get("task", "mcqa")
