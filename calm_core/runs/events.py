"""TensorBoard event files beside metrics.jsonl: `<run>/tensorboard/`, so that
`tensorboard --logdir <workspace>/runs` opens every run (curves and hyperparameters).

    log = EventLog.open(run.path, purge_step=None)   # None where tensorboard is not installed
    log.add(record)                                   # each metrics.jsonl record, as it is appended
    log.close(hparams_of(config), final_scalars(results))

metrics.jsonl stays the record a run is judged by; the event files are a view of it, so
`convert_run` can always rebuild them (`calm runs --tensorboard RUN`). One tag per
quantity, and only quantities become scalars: a vector (alpha per option) becomes its
`_mean`, `_min` and `_max`, the names the head's own summary logs (so `alpha/tau_mean` is
written once, never beside an `alpha/tau/mean`); the settings are the hparams, and the
final rows' counts (`n`, the bin count, chance, truncated items) one text table
(`final/counts`), not curves. `tensorboard` is an
optional extra, imported only here and only when a log is opened. The same three calls
(`open`, `add`, `close`) are the hook another tracker (trackio, MLflow) would implement.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

TENSORBOARD = "tensorboard"  # the folder in a run directory
FINAL = "final"  # tag section of the final evaluation's rows: final/<variant>/<dataset>/<metric>
FLUSH_SECS = 10  # a running run's curves reach TensorBoard within this many seconds
# The final metrics the hparams table shows as columns (every final/* scalar is written all the
# same): a column per metric of every variant and set would bury the settings.
HPARAMS_METRICS = ("acc", "ece", "nll", "auroc")
# Keys of a results row that count or describe the set rather than measure the variant:
# the `final/counts` text table shows them, once per row; they are no curves.
COUNT_KEYS = ("n", "ece_bins", "chance", "truncated")
COUNTS_TAG = f"{FINAL}/counts"
VECTOR_STATS = ("mean", "min", "max")  # a vector's summary: `<tag>_mean`, `<tag>_min`, `<tag>_max`


def tensorboard_available() -> tuple[bool, str]:
    """(whether event files can be written here, why): the `tensorboard` package is an
    optional extra (`pip install calm-studio[tensorboard]`), so its absence is no error."""
    try:
        import tensorboard  # noqa: F401
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except ImportError as error:
        return False, f"the tensorboard package is not installed ({error}); pip install 'calm-studio[tensorboard]'"
    return True, "the tensorboard package is installed"


def tensorboard_choice(enabled: bool) -> dict[str, Any]:
    """status.json `choices.tensorboard`: whether this run writes event files, and why."""
    if not enabled:
        return {"written": False, "reason": "off (tensorboard = false)"}
    available, why = tensorboard_available()
    return {"written": available, "reason": why}


def _number(value: Any) -> float | None:
    """A finite-or-not float for a real number; None for bools, text, None and the rest."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def record_scalars(record: Mapping[str, Any]) -> dict[str, float]:
    """The scalars of one metrics record, one tag per quantity: every `section/name`
    number as it is, `elapsed` as `time/elapsed_s`, and every list of numbers as
    `<tag>_mean`, `_min`, `_max` (a vector per option would be one curve per option
    otherwise) unless the record already carries that summary itself (the head logs
    `alpha/tau_mean` beside the vector `alpha/tau`). `step` is the axis, not a scalar."""
    scalars: dict[str, float] = {}
    for key, value in record.items():
        number = _number(value)
        if key != "step" and number is not None:
            scalars["time/elapsed_s" if key == "elapsed" else key] = number
    for key, value in record.items():
        if isinstance(value, (list, tuple)):
            for stat, number in _vector_summary(value).items():
                scalars.setdefault(f"{key}_{stat}", number)
    return scalars


def _vector_summary(values: Sequence[Any]) -> dict[str, float]:
    """{"mean", "min", "max"} of the numbers in `values`; {} when there are none."""
    numbers = [n for n in (_number(v) for v in values) if n is not None]
    if not numbers:
        return {}
    return dict(zip(VECTOR_STATS, (sum(numbers) / len(numbers), min(numbers), max(numbers)), strict=True))


def hparams_of(config: Mapping[str, Any], prefix: str = "") -> dict[str, float | int | str | bool]:
    """A resolved config flattened for the hparams plugin, which takes only numbers, text
    and bools: nested sections as `lora.r`, lists as JSON text, None left out (a column
    that is a number in one run and text in another cannot be filtered)."""
    flat: dict[str, float | int | str | bool] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(hparams_of(value, prefix=f"{name}."))
        elif isinstance(value, (bool, int, float, str)):
            flat[name] = value
        elif isinstance(value, (list, tuple)):
            flat[name] = json.dumps(value, default=str)
    return flat


def final_scalars(rows: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """results.json rows as `final/<variant>/<dataset>/<metric>` numbers: the metrics the
    hparams table shows beside each run's settings (the COUNT_KEYS go to `final_counts`)."""
    scalars: dict[str, float] = {}
    for row in rows:
        variant, dataset = row.get("variant"), row.get("dataset")
        if not isinstance(variant, str) or not isinstance(dataset, str):
            continue
        for key, value in row.items():
            number = _number(value)
            if key not in COUNT_KEYS and number is not None and math.isfinite(number):
                scalars[f"{FINAL}/{variant}/{dataset}/{key}"] = number
    return scalars


def final_counts(rows: Iterable[Mapping[str, Any]]) -> str:
    """The counts of the results rows as one Markdown table (variant, dataset, then the
    COUNT_KEYS a row has); "" when no row has any."""
    named = [r for r in rows if isinstance(r.get("variant"), str) and isinstance(r.get("dataset"), str)]
    keys = [k for k in COUNT_KEYS if any(_number(r.get(k)) is not None for r in named)]
    if not keys:
        return ""
    header = ["variant", "dataset", *keys]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in named:
        cells = [str(row["variant"]), str(row["dataset"]), *(_count_cell(row.get(k)) for k in keys)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _count_cell(value: Any) -> str:
    number = _number(value)
    if number is None:
        return ""
    return str(int(number)) if number.is_integer() else f"{number:.4g}"


class EventLog:
    """One run's event-file writer (torch's SummaryWriter into `<run>/tensorboard/`)."""

    def __init__(self, writer: Any) -> None:
        self._writer = writer
        self.last_step = 0

    @classmethod
    def open(cls, run_path: Path, purge_step: int | None = None) -> EventLog | None:
        """The run's log, or None where tensorboard is not installed. `purge_step`: a resumed
        run's first new step; TensorBoard then hides the earlier process's events from that
        step on, as metrics.jsonl was cut back to the checkpoint (RunDir.truncate_metrics_after)."""
        if not tensorboard_available()[0]:
            return None
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(Path(run_path) / TENSORBOARD), purge_step=purge_step, flush_secs=FLUSH_SECS)
        return cls(writer)

    def add(self, record: Mapping[str, Any], walltime: float | None = None) -> None:
        """One metrics record's scalars at its step (`walltime`: when it was written, for a conversion)."""
        step = int(record.get("step", self.last_step))
        for tag, value in record_scalars(record).items():
            self._writer.add_scalar(tag, value, global_step=step, walltime=walltime)
        self.last_step = max(self.last_step, step)

    def close(
        self,
        hparams: Mapping[str, float | int | str | bool] | None = None,
        final: Mapping[str, float] | None = None,
        walltime: float | None = None,
        counts: str = "",
    ) -> None:
        """Write the final metrics at the last step, the final rows' `counts` as text (from
        `final_counts`) and the hyperparameters (the hparams plugin's experiment, session
        start and end, in this same folder so that the table reads this run's scalars),
        then flush and close."""
        for tag, value in (final or {}).items():
            self._writer.add_scalar(tag, value, global_step=self.last_step, walltime=walltime)
        if counts:
            self._writer.add_text(COUNTS_TAG, counts, global_step=self.last_step, walltime=walltime)
        if hparams:
            shown = [tag for tag in sorted(final or {}) if tag.rsplit("/", 1)[-1] in HPARAMS_METRICS]
            self._write_hparams(dict(hparams), shown or sorted(final or {}))
        self._writer.close()

    def _write_hparams(self, hparams: dict[str, float | int | str | bool], metric_tags: list[str]) -> None:
        """torch's `add_hparams` opens a sub-folder per call (a second run in the table);
        its summary function, written to this writer, keeps one run per run directory."""
        from torch.utils.tensorboard.summary import hparams as hparams_summary

        tags = metric_tags or ["train/lower_loss"]  # the plugin needs a metric to show a row
        experiment, start, end = hparams_summary(hparams, {tag: 0.0 for tag in tags})
        file_writer = self._writer.file_writer
        for summary in (experiment, start, end):
            file_writer.add_summary(summary, global_step=self.last_step)


def convert_run(
    run_path: Path,
    records: list[dict[str, Any]],
    config: Mapping[str, Any],
    rows: Sequence[Mapping[str, Any]],
    created: float | None = None,
) -> Path:
    """Rebuild `<run>/tensorboard/` from a run's metrics records, resolved config and
    results.json rows (an older run, or one written without tensorboard installed). The old
    event files go first: they are a view of metrics.jsonl, which stays. Where tensorboard
    is not installed, a ValueError in the house style (`calm` prints it as one line)."""
    available, why = tensorboard_available()
    if not available:
        raise ValueError(f"Expected the tensorboard package to write event files, but {why}")
    folder = Path(run_path) / TENSORBOARD
    shutil.rmtree(folder, ignore_errors=True)
    log = EventLog.open(Path(run_path))
    assert log is not None
    for record in records:
        elapsed = _number(record.get("elapsed"))
        log.add(record, walltime=created + elapsed if created is not None and elapsed is not None else None)
    log.close(hparams_of(config), final_scalars(rows), counts=final_counts(rows))
    return folder
