"""Loaders: JSONL, CSV and Parquet files -> validated items (HF datasets: `calm_core.data.hf`).

Every loader runs the same three stages, each exactly once:

1. read raw rows (`calm_core.data.readers`): one dict per row, or a `RowError` for a
   row that cannot even be parsed (bad JSON, undecodable bytes, a CSV row with extra fields);
2. rename columns (`ColumnMapping`) into the normalised record the schema expects;
3. validate (`validate_mc_record` / `validate_open_record`); bad rows stay data.

Whole-file problems (missing, unreadable or empty file, a mapped column that does not
exist, no valid row at all) raise one `DataError` whose message a person can act on.

    report = load_file("quiz.csv", mapping=ColumnMapping.parse("question=q, choices=A|B|C|D, answer=label"))
    print(report.summary())

Nothing here unpickles data or runs remote code: Parquet and Arrow are read as columns
and HF datasets are never given `trust_remote_code`.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from calm_core.data.schema import (
    REJECTED_SHOWN,
    DataError,
    LoadReport,
    RowError,
    is_blank,
    validate_mc_record,
    validate_open_record,
)
from calm_core.data.readers import (  # noqa: F401  (re-exported: loaders is the public entry point)
    FORMATS,
    Record,
    Row,
    Table,
    detect_format,
    guarded,
    load_records,
    open_table,
    peek_columns,
    stage_upload,
    upload_suffix,
)

KINDS = ("mc", "open", "auto")
MAX_ERRORS_SHOWN = REJECTED_SHOWN  # row errors quoted in a DataError message; the report keeps all of them

_MAPPING_KEYS = ("question", "choices", "answer", "id", "subject", "answers")


@dataclass(frozen=True)
class ColumnMapping:
    """Which source column feeds which item field.

    `choices` is either one column holding a list (in CSV: a JSON list string or an
    "a|b|c" string) or a tuple of several columns, one per choice (("A", "B", "C", "D");
    trailing empty cells are dropped so 3- and 5-option rows can share a file).
    A dotted name reaches into a nested record (HF ARC keeps its texts in `choices.text`).
    `id` and `subject` are optional: when the data lacks the default column it is
    simply not used; a column named explicitly must exist.
    """

    question: str = "question"
    choices: tuple[str, ...] | str = "choices"
    answer: str = "answer"  # index, digit string, letter or choice text
    id: str | None = "id"
    subject: str | None = "subject"
    answers: str = "answers"  # open QA: the list of accepted aliases

    def __post_init__(self) -> None:
        choices = self.choices
        if isinstance(choices, (list, tuple)):
            choices = tuple(str(c).strip() for c in choices)
            # One column in a tuple means the same as that column given as a string.
            object.__setattr__(self, "choices", choices[0] if len(choices) == 1 else choices)
        for key in ("question", "answer", "answers"):
            _check_column_name(key, getattr(self, key))
        for column in self.choice_columns:
            _check_column_name("choices", column)
        if len(set(self.choice_columns)) != len(self.choice_columns):
            raise DataError(f"Expected distinct choice columns, but got {self.choices!r}")

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
        """The inverse of `parse`: "question=q, choices=A|B, answer=label, ..."."""
        parts = []
        for key in _MAPPING_KEYS:
            value = getattr(self, key)
            parts.append(f"{key}={'|'.join(value) if isinstance(value, tuple) else (value or '')}")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["choices"] = list(self.choices) if isinstance(self.choices, tuple) else self.choices
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ColumnMapping":
        return cls(**{k: v for k, v in data.items() if k in _MAPPING_KEYS})

    def required_columns(self, kind: str) -> list[str]:
        """Columns that must exist for `kind`, plus any optional column named explicitly."""
        if kind == "mc":
            required = [self.question, *self.choice_columns, self.answer]
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
    if key in ("id", "subject") and value.lower() in ("", "none", "-"):
        return None
    if not value:
        raise DataError(f"Expected a column name after `{key}=`, but got nothing")
    if key == "choices" and "|" in value:
        return tuple(v.strip() for v in value.split("|"))
    return value


_QUESTION_NAMES = ("question", "q", "prompt", "query", "stem", "input")
_CHOICE_NAMES = ("choices", "options", "candidates")
_ANSWER_NAMES = ("answer", "label", "answerkey", "answer_key", "gold", "target", "correct")
_ALIAS_NAMES = ("answers", "aliases", "accepted")
_LETTER_COLUMNS = ("A", "B", "C", "D", "E", "F")


def guess_mapping(columns: list[str]) -> str:
    """A starting column mapping (ColumnMapping.parse form) from a file's column names:
    common names for the question, a choices list or one column per letter A, B, ...,
    and the answer or the accepted answers. The user edits what it gets wrong."""
    lower = {c.lower(): c for c in columns}

    def first(names: tuple[str, ...], default: str) -> str:
        return next((lower[n] for n in names if n in lower), default)

    letters = [c for c in _LETTER_COLUMNS if c in columns or c.lower() in lower]
    choices = "|".join(c if c in columns else lower[c.lower()] for c in letters) if len(letters) >= 2 else first(
        _CHOICE_NAMES, "choices")
    parts = [f"question={first(_QUESTION_NAMES, 'question')}", f"choices={choices}",
             f"answer={first(_ANSWER_NAMES, 'answer')}"]
    aliases = first(_ALIAS_NAMES, "")
    if aliases:
        parts.append(f"answers={aliases}")
    return ", ".join(parts)





# ----------------------------------------------------------------------------- mapping + validation


def _lookup(record: Record, column: str) -> Any:
    """record[column], or a walk through nested dicts for a dotted name ("choices.text")."""
    if column in record:
        return record[column]
    value: Any = record
    for part in column.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _has_column(columns: list[str], column: str) -> bool:
    return column in columns or column.split(".")[0] in columns


def _split_list(value: Any) -> Any:
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


def _choices_value(record: Record, mapping: ColumnMapping) -> Any:
    if isinstance(mapping.choices, str):
        return _split_list(_lookup(record, mapping.choices))
    values = [_lookup(record, column) for column in mapping.choices]
    # Trailing blanks mean "this row has fewer options", not "an empty option".
    while values and is_blank(values[-1]):
        values.pop()
    return values


def _normalise(record: Record, mapping: ColumnMapping, kind: str) -> Record:
    """The record the schema validators expect, built from the mapped columns."""
    out = {
        "question": _lookup(record, mapping.question),
        "id": _lookup(record, mapping.id) if mapping.id else None,
        "subject": _lookup(record, mapping.subject) if mapping.subject else None,
    }
    if kind == "mc":
        out["choices"] = _choices_value(record, mapping)
        out["answer"] = _lookup(record, mapping.answer)
    else:
        out["answers"] = _split_list(_lookup(record, mapping.answers))
    return out


def _source_column(field_name: str, mapping: ColumnMapping) -> str:
    """Name the column the user knows (`q`) rather than the schema field (`question`)."""
    if field_name == "choices":
        return "|".join(mapping.choice_columns)
    return getattr(mapping, field_name, None) or field_name


def _resolve_kind(table: Table, kind: str, mapping: ColumnMapping) -> str:
    if kind not in KINDS:
        raise DataError(f"Expected `kind` to be one of {', '.join(KINDS)}, but got {kind!r}")
    if not table.columns:
        # No row could be parsed at all: the no-valid-rows error explains why.
        return "mc" if kind == "auto" else kind
    if kind == "auto":
        kind = _detect_kind(table, mapping)
    missing = [c for c in mapping.required_columns(kind) if not _has_column(table.columns, c)]
    if missing:
        raise DataError(
            f"Expected column(s) {', '.join(missing)} in {table.where} for {kind} items, but the "
            f"columns are: {', '.join(table.columns)}. Mapping used: {mapping.to_text()}"
        )
    return kind


def _detect_kind(table: Table, mapping: ColumnMapping) -> str:
    if all(_has_column(table.columns, c) for c in mapping.choice_columns):
        return "mc"
    if _has_column(table.columns, mapping.answers):
        return "open"
    raise DataError(
        f"Expected multiple-choice columns ({'|'.join(mapping.choice_columns)}) or open-answer column "
        f"({mapping.answers}) in {table.where}, but the columns are: {', '.join(table.columns)}. "
        f"Mapping used: {mapping.to_text()}"
    )


def _build_report(table: Table, kind: str, mapping: ColumnMapping, limit: int | None, name: str) -> LoadReport:
    """Validate rows in file order until `limit` valid items; keep every rejected row."""
    check_limit(limit)
    kind = _resolve_kind(table, kind, mapping)
    report = LoadReport(name=name, kind=kind)
    first_row_of: dict[str, int] = {}  # id -> row: duplicate ids would merge per-item results
    for number, raw in guarded(table):
        item, error = _row_to_item(raw, number, table.source, mapping, kind)
        if item is not None and item.id in first_row_of:
            message = f"Expected a unique id, but {item.id!r} already appeared in row {first_row_of[item.id]}"
            item, error = None, RowError(table.source, number, mapping.id or "id", message)
        if item is None:
            report.rejected.append(error)
            continue
        first_row_of[item.id] = number
        report.items.append(item)
        if limit is not None and len(report.items) >= limit:
            break
    _check_not_empty(report, table)
    return report


def _row_to_item(
    raw: Record | RowError, number: int, source: str, mapping: ColumnMapping, kind: str
) -> tuple[Any, Any]:
    """(item, None) for a valid row, (None, RowError naming the source column) otherwise."""
    if isinstance(raw, RowError):
        return None, raw
    validate = validate_mc_record if kind == "mc" else validate_open_record
    item, error = validate(_normalise(raw, mapping, kind), source, number)
    if error is not None and error.field:
        error = dataclasses.replace(error, field=_source_column(error.field, mapping))
    return item, error





def check_limit(limit: int | None) -> None:
    """DataError unless `limit` is None or a positive int (shared by every loader)."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise DataError(f"Expected `limit` to be a positive int or None, but got {limit!r}")


def _check_not_empty(report: LoadReport, table: Table) -> None:
    if report.n_rows == 0:
        raise DataError(f"Expected data rows in {table.where}, but it has none")
    if not report.items:
        shown = "\n  ".join(str(e) for e in report.rejected[:MAX_ERRORS_SHOWN])
        more = len(report.rejected) - MAX_ERRORS_SHOWN
        tail = f"\n  ... and {more} more" if more > 0 else ""
        raise DataError(
            f"Expected at least one valid row in {table.where}, but all "
            f"{len(report.rejected)} were rejected:\n  {shown}{tail}"
        )


# ----------------------------------------------------------------------------- public loaders


def load_file(
    path: str | Path,
    kind: str = "auto",
    mapping: ColumnMapping | str = ColumnMapping(),
    limit: int | None = None,
    name: str | None = None,
    fmt: str | None = None,
    source: str | None = None,
) -> LoadReport:
    """Load a JSONL / CSV / Parquet file into a LoadReport of MCItems or OpenItems.

    kind: "mc", "open" or "auto" (multiple choice when the choice column(s) exist,
    else open when the answers column exists). `limit` keeps the first N valid items
    in file order. `source` is how messages name the file (default: its own name for
    rejected rows, its path for whole-file errors); the Data page passes the uploaded
    file's name so that no temporary path shows. Raises DataError when the file cannot
    be used at all.
    """
    path = Path(path).expanduser()
    mapping = ColumnMapping.parse(mapping) if isinstance(mapping, str) else mapping
    table = open_table(path, detect_format(path, fmt), source)
    return _build_report(table, kind, mapping, limit, name or path.name)
