"""The column mapping: which source column feeds which item field, and reading a raw
record through it.

`ColumnMapping` is stage 2 of every loader (`calm_core.data.loaders`): it renames a
file's columns into the normalised record the schema validators expect. It is also what
a person edits (`calm eval --mapping`, the Data page's widgets: `mapping_form`) and what
an upload records in its meta.json. The cell readers below (`lookup`, `choices_value`,
`split_list`, `has_column`) are how the loaders and the guess (`calm_core.data.guess`)
read a record's mapped columns, one way for both.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from calm_core.data.row_types import Record
from calm_core.data.schema import ANSWER_FORMS, UNLABELLED_MC, DataError, is_blank

_MAPPING_KEYS = ("question", "choices", "answer", "id", "subject", "answers", "answer_form", "labels")
_OPTIONAL_KEYS = ("id", "subject", "labels")  # `key=` (empty) means "no such column"


@dataclass(frozen=True)
class ColumnMapping:
    """Which source column feeds which item field.

    `choices` is either one column holding a list (in CSV: a JSON list string or an
    "a|b|c" string) or a tuple of several columns, one per choice (("A", "B", "C", "D");
    trailing empty cells are dropped so 3- and 5-option rows can share a file).
    A dotted name reaches into a nested record (HF ARC keeps its texts in `choices.text`).
    `id` and `subject` are optional: when the data lacks the default column it is
    simply not used; a column named explicitly must exist. `answer_form` says how the
    answer cell names the correct option (`schema.ANSWER_FORMS`); "label" looks it up
    in the `labels` column (ARC: `answer_form=label, labels=choices.label`).
    The Data page's widgets read and write these fields; `to_text` is the same mapping
    as one line for `calm eval --mapping`.
    """

    question: str = "question"
    choices: tuple[str, ...] | str = "choices"
    answer: str = "answer"  # read as `answer_form` says
    id: str | None = "id"
    subject: str | None = "subject"
    answers: str = "answers"  # open QA: the list of accepted aliases
    answer_form: str = "auto"  # auto | index0 | index1 | letter | text | label (schema.ANSWER_FORMS)
    labels: str | None = None  # answer_form=label: the column holding the option labels

    def __post_init__(self) -> None:
        choices = self.choices
        if isinstance(choices, (list, tuple)):
            choices = tuple(str(c).strip() for c in choices)
            # One column in a tuple means the same as that column given as a string.
            object.__setattr__(self, "choices", choices[0] if len(choices) == 1 else choices)
        for key in ("question", "answer", "answers"):
            _check_column_name(key, getattr(self, key))
        if not self.choice_columns:
            raise DataError("Expected `choices` to name one list column or at least 2 option columns, but got none")
        for column in self.choice_columns:
            _check_column_name("choices", column)
        if len(set(self.choice_columns)) != len(self.choice_columns):
            raise DataError(f"Expected distinct choice columns, but got {self.choices!r}")
        if not isinstance(self.answer_form, str) or self.answer_form not in ANSWER_FORMS:
            raise DataError(
                f"Expected `answer_form` to be one of {', '.join(ANSWER_FORMS)}, but got {self.answer_form!r}"
            )
        if self.labels is not None:
            _check_column_name("labels", self.labels)
        if self.answer_form == "label" and not self.labels:
            raise DataError(
                "Expected `labels` to name the column of option labels with answer_form=label, but got none"
            )

    @property
    def choice_columns(self) -> tuple[str, ...]:
        return self.choices if isinstance(self.choices, tuple) else (self.choices,)

    @classmethod
    def parse(cls, text: str) -> "ColumnMapping":
        """Build a mapping from "question=q, choices=A|B|C|D, answer=label" (CLI / studio form).

        `choices` with "|" names several columns; `id=` (empty) switches the id column off.
        Unnamed keys keep their defaults. Raises DataError (a ValueError) naming the bad part.
        """
        values: dict[str, Any] = {}
        for part in (p.strip() for p in text.split(",")):
            if not part:
                continue
            key, sep, value = (s.strip() for s in part.partition("="))
            if not sep:
                raise DataError(f"Expected `key=column` pairs separated by commas, but got {part!r}")
            if key not in _MAPPING_KEYS:
                raise DataError(f"Expected mapping keys among {', '.join(_MAPPING_KEYS)}, but got {key!r}")
            if key in values:
                raise DataError(f"Expected each mapping key once, but got {key!r} twice")
            values[key] = _parse_mapping_value(key, value)
        return cls(**values)

    def to_text(self) -> str:
        """The inverse of `parse`: "question=q, choices=A|B, answer=label" plus every other
        key whose value is not the default (what a person would type for `--mapping`)."""
        default = ColumnMapping()
        parts = []
        for key in _MAPPING_KEYS:
            value = getattr(self, key)
            if key in ("question", "choices", "answer") or value != getattr(default, key):
                parts.append(f"{key}={'|'.join(value) if isinstance(value, tuple) else (value or '')}")
        return ", ".join(parts)

    def text_round_trips(self) -> bool:
        """False when a column name holds `,` `=` or `|`: `to_text` cannot spell it."""
        try:
            return ColumnMapping.parse(self.to_text()) == self
        except DataError:
            return False

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["choices"] = list(self.choices) if isinstance(self.choices, tuple) else self.choices
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ColumnMapping":
        return cls(**{k: v for k, v in data.items() if k in _MAPPING_KEYS})

    def required_columns(self, kind: str) -> list[str]:
        """Columns that must exist for `kind`, plus any optional column named explicitly."""
        if kind == UNLABELLED_MC:  # questions and options only: `calm eval --thermometer` on a file without answers
            required = [self.question, *self.choice_columns]
        elif kind == "mc":
            required = [self.question, *self.choice_columns, self.answer]
            if self.answer_form == "label" and self.labels:
                required.append(self.labels)
        else:
            required = [self.question, self.answers]
        for key in ("id", "subject"):
            value = getattr(self, key)
            if value is not None and value != key:
                required.append(value)
        return required


def _check_column_name(key: str, value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        raise DataError(f"Expected `{key}` to name a column, but got {value!r}")


def _parse_mapping_value(key: str, value: str) -> Any:
    if key in _OPTIONAL_KEYS and value.lower() in ("", "none", "-"):
        return None
    if key == "answer_form":
        return value.lower()  # checked against ANSWER_FORMS by the mapping itself
    if not value:
        raise DataError(f"Expected a column name after `{key}=`, but got nothing")
    if key == "choices" and "|" in value:
        return tuple(v.strip() for v in value.split("|"))
    return value


# ----------------------------------------------------------------------------- reading a record through a mapping


def lookup(record: Record, column: str) -> Any:
    """record[column], or a walk through nested dicts for a dotted name ("choices.text")."""
    if column in record:
        return record[column]
    value: Any = record
    for part in column.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def has_column(columns: list[str], column: str) -> bool:
    """Whether `columns` hold `column`, or the record a dotted name reaches into."""
    return column in columns or column.split(".")[0] in columns


def split_list(value: Any) -> Any:
    """A list from a cell: JSON list text '["a", "b"]' or 'a|b' (CSV); others pass through."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith("["):
        try:
            parsed = json.loads(text)
        except (ValueError, RecursionError):  # not JSON after all: read it as "a|b"
            parsed = None
        if isinstance(parsed, list):
            return parsed
    return [part.strip() for part in text.split("|")]


def choices_value(record: Record, mapping: ColumnMapping) -> Any:
    """The record's options under `mapping`: its list column, or its option columns in order."""
    if isinstance(mapping.choices, str):
        return split_list(lookup(record, mapping.choices))
    values = [lookup(record, column) for column in mapping.choices]
    # Trailing blanks mean "this row has fewer options", not "an empty option".
    while values and is_blank(values[-1]):
        values.pop()
    return values


def normalise(record: Record, mapping: ColumnMapping, kind: str) -> Record:
    """The record the schema validators expect, built from the mapped columns."""
    out = {
        "question": lookup(record, mapping.question),
        "id": lookup(record, mapping.id) if mapping.id else None,
        "subject": lookup(record, mapping.subject) if mapping.subject else None,
    }
    if kind == UNLABELLED_MC:
        out["choices"] = choices_value(record, mapping)
    elif kind == "mc":
        out["choices"] = choices_value(record, mapping)
        out["answer"] = lookup(record, mapping.answer)
        if mapping.labels:
            out["labels"] = split_list(lookup(record, mapping.labels))
    else:
        out["answers"] = split_list(lookup(record, mapping.answers))
    return out


def normalise_rows(records: list[Record], mapping: ColumnMapping, kind: str) -> list[Record]:
    """`normalise` over a chunk of rows (loaders run each stage over a chunk at once)."""
    return [normalise(record, mapping, kind) for record in records]


# ----------------------------------------------------------------------------- the dataset's kind

KINDS = ("mc", "open", "auto", UNLABELLED_MC)


class MissingColumns(DataError):
    """A mapped column the file does not have; `columns` names them (`calm eval` tells a
    file without its answer column from one it cannot read) and `found` the columns the
    file has (`calm eval` looks for a mapping saved with an upload that reads them)."""

    def __init__(self, columns: list[str], message: str, found: list[str] | None = None) -> None:
        super().__init__(message)
        self.columns = list(columns)
        self.found = list(found or [])


def resolve_kind(columns: list[str], where: str, kind: str, mapping: ColumnMapping) -> str:
    """The one place a dataset's kind is decided: `kind` itself ("mc", "open",
    UNLABELLED_MC), or with "auto" the columns `mapping` finds in `columns`; a mapped
    column the file lacks is MissingColumns (`where` names the file)."""
    if kind not in KINDS:
        raise DataError(f"Expected `kind` to be one of {', '.join(KINDS)}, but got {kind!r}")
    if not columns:
        # No row could be parsed at all: the no-valid-rows error explains why.
        return "mc" if kind == "auto" else kind
    if kind == "auto":
        kind = _detect_kind(columns, where, mapping)
    missing = [c for c in mapping.required_columns(kind) if not has_column(columns, c)]
    if missing:
        raise MissingColumns(
            missing,
            f"Expected column(s) {', '.join(missing)} in {where} for {kind} items, but the "
            f"columns are: {', '.join(columns)}. Map each field to one of these columns. "
            f"Mapping used: {mapping.to_text()}",
            columns,
        )
    return kind


def _detect_kind(columns: list[str], where: str, mapping: ColumnMapping) -> str:
    if all(has_column(columns, c) for c in mapping.choice_columns):
        return "mc"
    if has_column(columns, mapping.answers):
        return "open"
    raise MissingColumns(
        [c for c in mapping.choice_columns if not has_column(columns, c)],
        f"Expected multiple-choice columns ({'|'.join(mapping.choice_columns)}) or open-answer column "
        f"({mapping.answers}) in {where}, but the columns are: {', '.join(columns)}. "
        f"Choose the option columns in order (choices=opt1|opt2|... or one list column) or the column "
        f"of accepted answers. Mapping used: {mapping.to_text()}",
        columns,
    )
