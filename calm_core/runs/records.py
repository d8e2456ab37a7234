"""A run's three JSON files as typed records: `RunStatus` (status.json), `RunConfig`
(config.json) and `RunResults` (results.json, rows as `ResultRow`).

    status = RunStatus.from_json(json_object, path, advice)   # RunFileError when damaged
    status.state, status.step, status.total_steps, status.selection
    status.to_json()                                          # what the writer stores

Each record has one `from_json`, which refuses a damaged file the way `runs/damage.py`
does (the file, the key that is wrong, what to do), so readers use attributes and never
guess at a key's presence or type. `RunDir` (runs/rundir.py) is the only code that reads
or writes the files; everything above runs/ goes through these attributes.

What is typed is what readers use, nested records included (the recommendation and its
evidence: runs/recommendation.py; status.json's `choices`: runs/choices_record.py;
config.json's `environment`: `RunEnvironment`; status.json's `model`: `ModelInfo`; each
post-hoc calibrator's entry: `CalibratorFit`). Parts passed on whole to the module that
owns them stay JSON mappings (the timings, training/timings.py; the estimate,
estimate/; the splits, the threads, the scoring, the generation settings); keys a record
does not type are kept in `extra` and written back.
`config.json`'s `train` is TrainConfig's (training/config.py, a layer above): here it is
`TrainRecord` (runs/train_record.py), the facts readers use typed over the whole mapping
that `TrainConfig.from_dict` reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from calm_core.runs.choices_record import RunChoices
from calm_core.runs.lifecycle import RunState
from calm_core.runs.naming import config_label
from calm_core.runs.recommendation import Recommendation
from calm_core.runs.record_fields import DataMapping, checked_value, damaged, decode, encode
from calm_core.runs.selection_record import SelectionSummary
from calm_core.runs.train_record import TrainRecord

JsonObject = Mapping[str, Any]
_NO_ADVICE = "it was written by hand or by another program"  # the writer's own checks


@dataclass(frozen=True)
class FinalProgress:
    """status.json's `final`: the final evaluation's stage (None: its set-and-variant
    passes) and the count of its `unit` done and in all, which the Monitor shows."""

    done: int = 0
    total: int = 0
    stage: str | None = None
    unit: str | None = None
    extra: JsonObject = field(default_factory=dict)  # keys a newer writer added: kept on rewrite


@dataclass(frozen=True)
class ModelInfo(DataMapping):
    """status.json's `model`: what the job loaded (scoring/models.py's `LoadedModel.info`).
    The facts the report and the export read are typed; it stays a read-only mapping of
    everything recorded, whose local spellings runs/portable.py replaces."""

    data: JsonObject = field(default_factory=dict)

    @classmethod
    def from_json(
        cls, data: Any, path: str | Path = "status.json", advice: str = _NO_ADVICE, where: str = "model"
    ) -> ModelInfo:
        """The record of a `model` object; RunFileError names a typed key that is not text."""
        data = checked_value(data, Mapping[str, Any], where, path, advice)
        for key in ("name", "kind", "source", "device", "dtype", "fingerprint"):
            if data.get(key) is not None:
                checked_value(data[key], str, f"{where}.{key}", path, advice)
        return cls(dict(data))

    def _text(self, key: str) -> str | None:
        value = self.data.get(key)
        return value if isinstance(value, str) else None

    @property
    def kind(self) -> str | None:
        """How it was found: "embedded", "named", "local", "hub", ..."""
        return self._text("kind")

    @property
    def device(self) -> str | None:
        return self._text("device")

    @property
    def dtype(self) -> str | None:
        """The dtype its body was loaded in (an export records it)."""
        return self._text("dtype")

    @property
    def fingerprint(self) -> str | None:
        """Its files' hash (provenance.model_fingerprint); None for a hub model not on disk."""
        return self._text("fingerprint")


@dataclass(frozen=True)
class RunStatus:
    """status.json: the state the run last wrote and what the job recorded as it went."""

    state: str  # queued | running | stopping | finished | failed | cancelled (runs/state.py)
    run_id: str | None = None
    name: str | None = None
    method: str | None = None
    step: int = 0  # the last step taken
    total_steps: int | None = None
    pid: int | None = None  # with `host` and `pid_start`: which process runs it (runs/process.py)
    host: str | None = None
    pid_start: str | None = None
    created: float | None = None  # unix seconds, as every stamp below
    queued_at: float | None = None
    started: float | None = None
    heartbeat: float | None = None
    updated: float | None = None
    ended: float | None = None
    phase: str | None = None  # what a long blocking call is doing ("evaluating", ...)
    error: str | None = None
    traceback: str | None = None
    resumed_from: str | None = None  # the checkpoint directory a resume continued from
    fresh_start: bool = False
    threads: JsonObject | None = None  # {"threads": n, "why": ...}
    choices: RunChoices = field(default_factory=RunChoices)  # what the loop chose (runs/choices_record.py)
    model: ModelInfo | None = None  # the loaded model's info (scoring/models.py)
    selection: SelectionSummary | None = None  # the calibrated stop (runs/selection_record.py)
    timings: JsonObject | None = None  # training/timings.py's PhaseTimes
    final: FinalProgress | None = None  # the final evaluation's progress
    items_cut_to_context: Mapping[str, int] = field(default_factory=dict)  # set -> items cut from the left

    extra: JsonObject = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Any, path: str | Path = "status.json", advice: str = _NO_ADVICE) -> RunStatus:
        """The record of a status.json object; RunFileError names the file and the wrong key."""
        return decode(cls, data, path, advice)

    def to_json(self) -> dict[str, Any]:
        return encode(self)

    @property
    def queued(self) -> bool:
        """Still waiting for a job slot. Anyone's `schedule` (another session's, an exiting
        job's) may start the run at any time, so a caller asks this rather than trusting what
        its own schedule started."""
        return self.state == RunState.QUEUED

    @property
    def model_dtype(self) -> str | None:
        """The dtype the run loaded its model in (an export records it)."""
        return self.model.dtype if self.model is not None else None

    @property
    def thread_count(self) -> int | None:
        """The torch threads the job ran with, when it recorded them."""
        threads = (self.threads or {}).get("threads")
        return threads if isinstance(threads, int) and not isinstance(threads, bool) else None


@dataclass(frozen=True)
class RunEnvironment:
    """config.json's `environment` (provenance.py `environment_record`): where and with
    what the run was launched, which the report and the export's provenance show."""

    created: str | None = None  # ISO 8601, UTC
    versions: Mapping[str, str | None] | None = None  # package -> version (None: not installed)
    git: str | None = None  # the project's commit, "+dirty" with local changes
    python: str | None = None
    machine: str | None = None  # "Linux x86_64"
    extra: JsonObject = field(default_factory=dict)


@dataclass(frozen=True)
class RunConfig:
    """config.json: the resolved training config (`train`) and what was recorded beside it."""

    train: TrainRecord = field(default_factory=TrainRecord)  # TrainConfig.to_dict(), typed; empty: trains nothing

    name: str | None = None
    method: str | None = None
    seed: int | None = None
    scoring: JsonObject | None = None  # {"rule", "chat_template"}
    splits: JsonObject = field(default_factory=dict)
    environment: RunEnvironment | None = None  # versions, git, python, machine (provenance.py)
    launched_by: str | None = None  # the studio session's opaque tag; None from the CLI
    launched_from: str | None = None  # the signed-in browser's opaque tag (shared studio)
    estimate: JsonObject | None = None  # the launch's time estimate (estimate/arithmetic.py `Estimate.to_record`)
    extra: JsonObject = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Any, path: str | Path = "config.json", advice: str = _NO_ADVICE) -> RunConfig:
        """The record of a config.json object; RunFileError names the file and the wrong key."""
        return decode(cls, data, path, advice)

    def to_json(self) -> dict[str, Any]:
        return encode(self)

    def label(self, key: str) -> str | None:
        """`key` ("name", "method", "train_data") at the top or one section down."""
        return config_label(self.to_json(), key)

    @property
    def train_method(self) -> str:
        """The training method's name ("" for a run that trains nothing)."""
        return self.label("method") or ""


@dataclass(frozen=True)
class ResultRow(DataMapping):
    """One row of results.json: a variant on an evaluation set, and its metrics.

    The metrics are the columns of `calibration/metrics/columns.py` (which every table
    derives from), so the row is a read-only mapping of them; what every reader needs
    to pick a row is typed."""

    dataset: str
    variant: str
    data: JsonObject  # the whole row, `dataset` and `variant` included (not `values`: a Mapping method)

    @classmethod
    def from_json(
        cls, data: Any, path: str | Path = "results.json", advice: str = _NO_ADVICE, where: str = ""
    ) -> ResultRow:
        """A row; RunFileError when it does not name its `dataset` and `variant` (`where`:
        its key in the file, unused: a row's damage is named as a row's)."""
        if not isinstance(data, Mapping):
            raise damaged(path, f"a result row is a JSON {type(data).__name__} where an object belongs", advice)
        dataset, variant = data.get("dataset"), data.get("variant")
        if not isinstance(dataset, str) or not isinstance(variant, str):
            raise damaged(path, "a result row has no `dataset` / `variant`", advice)
        return cls(dataset, variant, dict(data))

    @property
    def scoring(self) -> str | None:
        rule = self.data.get("scoring")
        return rule if isinstance(rule, str) else None


@dataclass(frozen=True)
class CalibratorFit(DataMapping):
    """One post-hoc calibrator's entry in results.json (scoring/evaluate.py's
    `baseline_records`): its fitted parameters and what it was fitted on, or a `note`
    saying why it is missing. The parameters are the calibrator's own business
    (calibration/posthoc/ reads them whole, from `to_json()`); what readers read by name
    is typed here."""

    data: JsonObject

    @classmethod
    def from_json(
        cls, data: Any, path: str | Path = "results.json", advice: str = _NO_ADVICE, where: str = "ts"
    ) -> CalibratorFit:
        """The record of a calibrator's entry; RunFileError names a typed key of the wrong type."""
        data = checked_value(data, Mapping[str, Any], where, path, advice)
        for key, hint in (("note", str), ("fit_on", str), ("calibrate_on", str), ("temperature", float)):
            if data.get(key) is not None:
                checked_value(data[key], hint, f"{where}.{key}", path, advice)
        return cls(dict(data))

    def _text(self, key: str) -> str | None:
        value = self.data.get(key)
        return value if isinstance(value, str) else None

    @property
    def note(self) -> str | None:
        """Why the calibrator is missing (e.g. S_V too small); None for a fit."""
        return self._text("note")

    @property
    def fit_on(self) -> str | None:
        """The set(s) it was fitted on, by name ("S_V", or S_T + S_V with calibrate_on = all)."""
        return self._text("fit_on")

    @property
    def calibrate_on(self) -> str | None:
        return self._text("calibrate_on")

    @property
    def temperature(self) -> float | None:
        """Temperature scaling's one parameter (None for the other calibrators)."""
        value = self.data.get("temperature")
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


_RESULT_KEYS = {"rows": "results"}


@dataclass(frozen=True)
class RunResults:
    """results.json: the final evaluation's rows and what it decided.

    `calibrators` holds each post-hoc calibrator's record by name (`ts`: its parameters
    and `fit_on`, or `{"note": why it is missing}`) as a `CalibratorFit`; the final
    evaluation hands the JSON mappings scoring/evaluate.py made, which it only writes."""

    rows: tuple[ResultRow, ...]
    selection: SelectionSummary | None = None  # the calibrated stop's choice (runs/selection_record.py)
    recommendation: Recommendation | None = None  # the variant chosen on S_V (runs/recommendation.py)
    task: str | None = None  # "openqa" for generated answers; None: option scores
    generation: JsonObject | None = None  # the sampling settings of an open-QA run
    calibrators: Mapping[str, CalibratorFit] = field(default_factory=dict)
    extra: JsonObject = field(default_factory=dict)

    def __post_init__(self) -> None:
        """The writer's JSON mappings as `CalibratorFit`s, so every RunResults reads alike."""
        fits = {
            name: fit if isinstance(fit, CalibratorFit) else CalibratorFit.from_json(fit, where=name)
            for name, fit in self.calibrators.items()
        }
        object.__setattr__(self, "calibrators", fits)

    @classmethod
    def from_json(cls, data: Any, path: str | Path = "results.json", advice: str = _NO_ADVICE) -> RunResults:
        """The record of a results.json object; RunFileError names the file and what is wrong."""
        record = decode(cls, data, path, advice, _RESULT_KEYS)
        rest = dict(record.extra)
        calibrators = {
            name: CalibratorFit.from_json(rest.pop(name), path, advice, where=name)
            for name in list(rest)
            if isinstance(rest[name], dict)
        }
        return cls(
            record.rows, record.selection, record.recommendation, record.task, record.generation, calibrators, rest
        )

    def to_json(self) -> dict[str, Any]:
        out = encode(self, _RESULT_KEYS)
        out.update(out.pop("calibrators", {}))
        return out

    def calibrator(self, name: str) -> CalibratorFit | None:
        """The record of post-hoc calibrator `name` (`ts`, `vs`, ...), None when absent."""
        return self.calibrators[name] if name in self.calibrators else None

    @property
    def missing_notes(self) -> dict[str, str]:
        """calibrator -> why it is missing (e.g. S_V too small for TS)."""
        return {name: entry.note for name, entry in self.calibrators.items() if entry.note is not None}

    @property
    def recommended(self) -> str | None:
        """The recommended variant's name, None when nothing was recommended."""
        variant = self.recommendation.variant if self.recommendation else None
        return variant or None
