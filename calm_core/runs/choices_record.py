"""status.json's `choices` as a typed record: what the training loop decided when it
started, each with its reason (LoRA's targets, the fast paths, the scoring rule, the
precision, TensorBoard, the rows its data rejected).

    choices = run.status.choices                 # RunChoices (runs/records.py)
    choices.lora.targets, choices.fast_paths["hidden_path"].on, choices.scoring.rule
    choices.rejected_rows["heldout"].n_rejected, choices.tensorboard.written

training/run_context.py (`build_context`) and training/loop.py (`train`) write the mapping;
the Monitor, the report and the fast-path rows (results/fast_path_view.py) read these
attributes. `from_json` is the runs' one decoder (record_fields.decode), so a damaged entry
is refused by its dotted key ("`choices.lora.targets` is a str where a list belongs"). Runs
written before a choice was recorded read it as its default (None, or an empty mapping);
every record keeps the keys it does not type in `extra`, so a rewrite of status.json loses
none of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from calm_core.runs.record_fields import decode, encode

JsonObject = Mapping[str, Any]
_ADVICE = "it was written by hand or by another program"


@dataclass(frozen=True)
class LoraChoice:
    """The adapter the run attached (scoring/adapters.py `attach_lora`'s record): the
    settings as asked, and `targets`, what `target_modules` resolved to on this model."""

    targets: tuple[str, ...] = field(default_factory=tuple)
    extra: JsonObject = field(default_factory=dict)  # the LoRA settings, trainable_parameters, ...


@dataclass(frozen=True)
class PathChoice:
    """One fast path for the run's model (scoring/path_checks.py `PathCheck`): used or
    not, why, and the relative gap its probe measured."""

    on: bool
    reason: str = ""
    gap: float | None = None
    extra: JsonObject = field(default_factory=dict)  # share_top, ...

    @classmethod
    def from_json(cls, data: Any, path: str | Path, advice: str = _ADVICE, where: str = "fast_paths") -> PathChoice:
        """A check as the run or the machine's probe cache recorded it; RunFileError names `where`."""
        return decode(cls, data, path, advice, where=where)

    def to_json(self) -> dict[str, Any]:
        return encode(self)


@dataclass(frozen=True)
class UsedChoice:
    """A part the run used or not, and why (the frozen-prefix runner, FSDP)."""

    used: bool = False
    reason: str = ""
    extra: JsonObject = field(default_factory=dict)  # split_layer, gap, layers, ...


@dataclass(frozen=True)
class RuleChoice:
    """The scoring rule and chat template the run settled on, and why
    (training/scoring_choice.py `ScoringChoice`, with its figures in `extra`)."""

    rule: str
    chat_template: bool = False
    reason: str = ""
    extra: JsonObject = field(default_factory=dict)  # measured_on, accuracy, chance, ...


@dataclass(frozen=True)
class PrecisionRecord:
    """The dtype of the model's body and why (scoring/precision.py `PrecisionChoice`)."""

    dtype: str
    reason: str = ""
    extra: JsonObject = field(default_factory=dict)  # the probe against fp32


@dataclass(frozen=True)
class TensorboardChoice:
    """Whether the run writes TensorBoard event files, and why (runs/events.py)."""

    written: bool = False
    reason: str = ""
    extra: JsonObject = field(default_factory=dict)


@dataclass(frozen=True)
class RejectedRows:
    """The rows one set's loader rejected (data/schema.py `rejected_record`): the exact
    counts and the first reasons, each row's as a JSON object."""

    n_rows: int
    n_rejected: int
    n_items: int | None = None  # the items kept
    rejected: tuple[JsonObject, ...] = field(default_factory=tuple)
    extra: JsonObject = field(default_factory=dict)


@dataclass(frozen=True)
class RunChoices:
    """status.json's `choices` (see the module docstring)."""

    lora: LoraChoice | None = None
    fast_paths: Mapping[str, PathChoice] = field(default_factory=dict)  # path -> its check
    frozen_prefix: UsedChoice | None = None  # the runner below LoRA (training/run_context.py)
    scoring: RuleChoice | None = None
    precision: PrecisionRecord | None = None
    tensorboard: TensorboardChoice | None = None
    fsdp: UsedChoice | None = None
    rejected_rows: Mapping[str, RejectedRows] = field(default_factory=dict)  # set -> its rejected rows
    dropped_training_questions: Mapping[str, int] = field(default_factory=dict)  # set -> items dropped
    world_size: int | None = None
    autocast: str | None = None
    quantization: JsonObject | None = None  # {"four_bit", "reason"}: read by no page
    adaptive_head: JsonObject | None = None  # the fitted projection: read back by no page
    extra: JsonObject = field(default_factory=dict)

    @classmethod
    def from_json(
        cls, data: Any, path: str | Path = "status.json", advice: str = _ADVICE, where: str = "choices"
    ) -> RunChoices:
        """The record of a `choices` object; RunFileError names the file and the wrong key."""
        return decode(cls, data, path, advice, where=where)

    def to_json(self) -> dict[str, Any]:
        return encode(self)
