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

A mapping can also be guessed from the column names and first rows of a file
(`guess_column_mapping`: `opt1..opt4`, `A..D`, ARC's `choices.text` + `answerKey`, ...);
the Data page's widgets start from the guess (`form_values` <-> `mapping_from_form`).

Nothing here unpickles data or runs remote code: Parquet and Arrow are read as columns
and HF datasets are never given `trust_remote_code`.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

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
    peek_records,
    stage_upload,
    upload_suffix,
)
from calm_core.data.schema import (
    ANSWER_FORMS,
    REJECTED_SHOWN,
    DataError,
    LoadReport,
    RowError,
    is_blank,
    validate_mc_record,
    validate_open_record,
)
from calm_core.data.sources import JsonlSource, RowSource, open_source
from calm_core.data.stream import STREAM_FROM_BYTES, Index, build_index

KINDS = ("mc", "open", "auto")
MAX_ERRORS_SHOWN = REJECTED_SHOWN  # row errors quoted in a DataError message; the report keeps all of them

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
        if kind == "mc":
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


# ----------------------------------------------------------------------------- guessing a mapping

GUESS_ROWS = 20  # sample records the guess reads (answer form, nested choices)
_QUESTION_NAMES = (
    "question",
    "question_stem",
    "q",
    "prompt",
    "query",
    "stem",
    "input",
    "goal",
    "ctx",
    "text",
    "sentence",
)
_CHOICE_NAMES = ("choices", "options", "candidates", "endings", "choice", "option")
_ANSWER_NAMES = (
    "answer",
    "answerkey",
    "answer_key",
    "label",
    "correct",
    "correct_answer",
    "correct_option",
    "answer_idx",
    "answer_index",
    "gold",
    "target",
    "key",
    "cop",
)
_ALIAS_NAMES = ("answers", "aliases", "accepted", "answer.aliases")
_ID_NAMES = ("id", "qid", "question_id", "uid", "item_id")
_SUBJECT_NAMES = ("subject", "category", "topic", "domain")
# One column per option: a stem below plus 1, 2, ... (or 0, 1, ...) or a, b, ...: A..D, opt1..opt4, option_a..
_OPTION_STEMS = (
    "",
    "opt",
    "option",
    "choice",
    "ans",
    "answer",
    "ending",
    "sol",
    "op",
    "alt",
    "alternative",
    "candidate",
)
_ENUMERATED = re.compile(r"(?P<stem>.*?)[ _-]?(?P<tag>[0-9]{1,2}|[A-Za-z])")


def column_paths(columns: list[str], records: Iterable[Record] = ()) -> list[str]:
    """The columns, each followed by its nested keys as dotted names where the sample
    records hold a dict there (`choices` -> `choices.text`, `choices.label`)."""
    nested: dict[str, dict[str, None]] = {c: {} for c in columns}
    for record in records:
        for column in columns:
            value = record.get(column) if isinstance(record, dict) else None
            if isinstance(value, dict):
                nested[column].update((f"{column}.{key}", None) for key in value if isinstance(key, str))
    return [path for column in columns for path in (column, *nested[column])]


def guess_column_mapping(columns: list[str], records: Iterable[Record] = ()) -> ColumnMapping:
    """A starting mapping from a file's column names and a few of its records.

    Handles the common layouts: one column per option (`A..D`, `opt1..opt4`,
    `option_a..`, `ending0..`), a `choices` list, HF ARC / CommonsenseQA / OpenBookQA
    (`choices.text` + `choices.label` with `answerKey`), HF MMLU (`question, subject,
    choices, answer`), and open answers (`answers`, `aliases`). The answer form
    (0- or 1-based index, letter, text) is read off the sample records. Never raises:
    names it cannot use leave the defaults, for the person to change.
    """
    records = [r for r in records if isinstance(r, dict)][:GUESS_ROWS]
    paths = column_paths(list(columns), records)
    options = _option_columns(list(columns))
    taken = set(options)

    def pick(names: tuple[str, ...]) -> str | None:
        lower = {c.lower(): c for c in reversed(paths) if c not in taken}
        found = next((lower[n] for n in names if n in lower), None)
        taken.add(found)
        return found

    question = pick(_QUESTION_NAMES) or "question"
    choices: tuple[str, ...] | str | None = options if len(options) >= 2 else pick(_CHOICE_NAMES)
    labels = None
    if isinstance(choices, str) and f"{choices}.text" in paths:  # HF ARC, CommonsenseQA, OpenBookQA
        labels = f"{choices}.label" if f"{choices}.label" in paths else None
        choices = f"{choices}.text"
    answer = pick(_ANSWER_NAMES)
    answers = pick(_ALIAS_NAMES) or (answer if answer and not choices else None)  # `question, answer`: open QA
    try:
        mapping = ColumnMapping(
            question=question,
            choices=choices or "choices",
            answer=answer or "answer",
            id=pick(_ID_NAMES) or "id",
            subject=pick(_SUBJECT_NAMES) or "subject",
            answers=answers or "answers",
            answer_form="label" if labels else "auto",
            labels=labels,
        )
        return dataclasses.replace(mapping, answer_form=_guess_answer_form(mapping, records))
    except DataError:  # a column name the mapping cannot hold (blank, repeated): start from the defaults
        return ColumnMapping()


def guess_mapping(columns: list[str], records: Iterable[Record] = ()) -> str:
    """`guess_column_mapping` as the `ColumnMapping.parse` string (`calm eval --mapping`)."""
    return guess_column_mapping(columns, records).to_text()


def guess_kind(columns: list[str], mapping: ColumnMapping) -> str:
    """ "mc" when the mapping's option column(s) exist, "open" when only its answers column does."""
    if all(_has_column(columns, c) for c in mapping.choice_columns):
        return "mc"
    return "open" if _has_column(columns, mapping.answers) else "mc"


def form_values(mapping: ColumnMapping, columns: list[str]) -> dict[str, Any]:
    """The Data page's widget values for `mapping` over a file's `columns` (dotted paths
    included): a column the file lacks becomes None (an unset widget), never an error."""

    def have(column: str | None) -> str | None:
        return column if column in columns else None

    return {
        "kind": guess_kind(columns, mapping),
        "question": have(mapping.question),
        "layout": "columns" if isinstance(mapping.choices, tuple) else "list",
        "options": [c for c in mapping.choice_columns if c in columns] if isinstance(mapping.choices, tuple) else [],
        "list": have(mapping.choices) if isinstance(mapping.choices, str) else None,
        "answer": have(mapping.answer),
        "answer_form": mapping.answer_form,
        "labels": have(mapping.labels),
        "answers": have(mapping.answers),
        "id": have(mapping.id),
        "subject": have(mapping.subject),
    }


def mapping_from_form(values: dict[str, Any], columns: list[str]) -> ColumnMapping:
    """The Data page's widget values (`form_values` keys) -> a ColumnMapping. DataError
    names the widget to set. An optional column left unset stays off, even when the
    file has a column of the default name."""

    def need(key: str, what: str) -> str:
        if not values.get(key):
            raise DataError(f"Expected {what}, but none is chosen")
        return values[key]

    fields: dict[str, Any] = {"question": need("question", "a question column")}
    if values.get("kind", "mc") == "mc":
        if values.get("layout") == "list":
            fields["choices"] = need("list", "the column holding the list of options")
        elif len(values.get("options") or ()) < 2:
            raise DataError(
                "Expected at least 2 option columns (in order: the first is A), or one list column, "
                f"but got {len(values.get('options') or ())}"
            )
        else:
            fields["choices"] = tuple(values["options"])
        fields["answer"] = need("answer", "an answer column")
        fields["answer_form"] = values.get("answer_form") or "auto"
        if fields["answer_form"] == "label":
            fields["labels"] = need("labels", "the column of option labels")
    else:
        fields["answers"] = need("answers", "the column of accepted answers")
    for key in ("id", "subject"):  # unset: off, unless the default name is no column anyway
        fields[key] = values.get(key) or (None if key in columns else key)
    return ColumnMapping(**fields)


def _option_columns(columns: list[str]) -> tuple[str, ...]:
    """The longest run of enumerated option columns (`opt1, opt2, ...`, `A, B, ...`), or ()."""
    groups: dict[tuple[str, bool], dict[int, str]] = {}
    for column in columns:
        match = _ENUMERATED.fullmatch(column)
        if match is None or column != column.strip() or match["stem"].lower() not in _OPTION_STEMS:
            continue
        tag = match["tag"]
        position = int(tag) if tag.isdigit() else ord(tag.lower()) - ord("a")
        groups.setdefault((match["stem"].lower(), tag.isdigit()), {}).setdefault(position, column)
    best: list[str] = []
    for (_, digits), members in groups.items():
        start = min(members)
        if start not in ((0, 1) if digits else (0,)):
            continue
        run = [members[start]]
        while start + len(run) in members:
            run.append(members[start + len(run)])
        if len(run) >= 2 and len(run) > len(best):
            best = run
    return tuple(best)


def _guess_answer_form(mapping: ColumnMapping, records: list[Record]) -> str:
    """The answer form the sample rows agree on; "auto" when they do not say."""
    if mapping.answer_form == "label":
        return "label"
    cells = []
    for record in records:
        answer, options = _lookup(record, mapping.answer), _choices_value(record, mapping)
        if isinstance(answer, float) and answer.is_integer():
            answer = int(answer)
        if not is_blank(answer) and isinstance(answer, (str, int)) and isinstance(options, list) and len(options) > 1:
            cells.append((str(answer).strip(), [str(o).strip() for o in options]))
    if not cells:
        return "auto"
    if all(a.isascii() and a.isdigit() for a, _ in cells):
        numbers = [(int(a), len(options)) for a, options in cells]
        if all(a in options for a, options in cells) and any(n >= k for n, k in numbers):
            return "text"  # numeric options ("12", "15") named by their text
        zero, top = any(n == 0 for n, _ in numbers), any(n == k for n, k in numbers)
        # A 0 means 0-based and a K means 1-based; both or neither: the sample cannot tell.
        return "index0" if zero and not top else "index1" if top and not zero else "auto"
    if all(len(a) == 1 and a.isascii() and a.isalpha() for a, _ in cells):
        return "letter"
    return "text" if all(a in options for a, options in cells) else "auto"


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
        if mapping.labels:
            out["labels"] = _split_list(_lookup(record, mapping.labels))
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
            f"columns are: {', '.join(table.columns)}. Map each field to one of these columns. "
            f"Mapping used: {mapping.to_text()}"
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
        f"Choose the option columns in order (choices=opt1|opt2|... or one list column) or the column "
        f"of accepted answers. Mapping used: {mapping.to_text()}"
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
            item, error = None, _duplicate_id(table.source, mapping, item.id, first_row_of[item.id], number)
        if item is None:
            report.rejected.append(error)
            continue
        first_row_of[item.id] = number
        report.items.append(item)
        if limit is not None and len(report.items) >= limit:
            break
    _check_not_empty(report, table)
    return report


def _duplicate_id(source: str, mapping: ColumnMapping, item_id: str, first_row: int, number: int) -> RowError:
    """Why row `number` is rejected: its id repeats row `first_row`'s (per-item results would merge)."""
    message = f"Expected a unique id, but {item_id!r} already appeared in row {first_row}"
    return RowError(source, number, mapping.id or "id", message)


def _stream_report(rows: RowSource, kind: str, mapping: ColumnMapping, limit: int | None, name: str) -> LoadReport:
    """`_build_report` for a row source read on demand: the same kind, items and rejected
    rows (decided in one validating pass, `stream.build_index`), the items kept as LazyItems."""
    check_limit(limit)
    place = Table(rows.source, rows.where, rows.columns or [], ())
    if rows.columns is None:
        kind, index = _index_headerless(rows, kind, mapping, limit)  # type: ignore[arg-type]
    else:
        kind = _resolve_kind(place, kind, mapping)
        index = _index(rows, kind, mapping, limit)
    report = LoadReport(name=name, kind=kind, items=index.items, rejected=index.rejected)  # type: ignore[arg-type]
    _check_not_empty(report, place)
    return report


def _index(rows: RowSource, kind: str, mapping: ColumnMapping, limit: int | None) -> Index:
    convert = functools.partial(_row_to_item, source=rows.source, mapping=mapping, kind=kind)
    return build_index(rows, convert, functools.partial(_duplicate_id, rows.source, mapping), limit)


def _index_headerless(rows: JsonlSource, kind: str, mapping: ColumnMapping, limit: int | None) -> tuple[str, Index]:
    """JSONL has no header: its columns (the union of every record's keys) are known only
    after reading every row, and they decide the kind. So the one pass validates under
    the kind the first records settle, and runs again only when all the columns decide
    otherwise (a file whose early rows lack the option columns)."""
    first: dict[str, None] = {}
    for _, _, record in itertools.islice(rows.scan(), GUESS_ROWS):
        first.update(dict.fromkeys(record) if isinstance(record, dict) else {})
    _resolve_kind(Table(rows.source, rows.where, [], ()), kind, mapping)  # an unknown `kind` fails first
    guess = _settled_kind(list(first), kind, mapping) or ("mc" if kind == "auto" else kind)
    index = _index(rows, guess, mapping, limit)
    if index.complete and not index.rejected and not index.items:
        raise DataError(f"Expected data rows in {rows.where}, but the file has only blank lines")
    if not index.complete and _settled_kind(list(rows.seen_columns), kind, mapping) is None:
        rows.read_columns()  # stopped at `limit`: the rest of the file's keys may still decide
    final = _resolve_kind(Table(rows.source, rows.where, list(rows.seen_columns), ()), kind, mapping)
    return final, index if final == guess else _index(rows, final, mapping, limit)


def _settled_kind(columns: list[str], kind: str, mapping: ColumnMapping) -> str | None:
    """The kind `columns` resolve to when more columns could not change it; None when they
    cannot tell yet: no columns, a missing column, or "open" only for lack of option columns."""
    if not columns:
        return None
    try:
        resolved = _resolve_kind(Table("", "", columns, ()), kind, mapping)
    except DataError:
        return None
    return None if kind == "auto" and resolved == "open" else resolved


def _row_to_item(
    raw: Record | RowError, number: int, source: str, mapping: ColumnMapping, kind: str
) -> tuple[Any, Any]:
    """(item, None) for a valid row, (None, RowError naming the source column) otherwise."""
    if isinstance(raw, RowError):
        return None, raw
    record = _normalise(raw, mapping, kind)
    if kind == "mc":
        item, error = validate_mc_record(record, source, number, mapping.answer_form)
    else:
        item, error = validate_open_record(record, source, number)
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
    stream: bool | None = None,
) -> LoadReport:
    """Load a JSONL / CSV / Parquet file into a LoadReport of MCItems or OpenItems.

    kind: "mc", "open" or "auto" (multiple choice when the choice column(s) exist,
    else open when the answers column exists). `limit` keeps the first N valid items
    in file order. `source` is how messages name the file (default: its own name for
    rejected rows, its path for whole-file errors); the Data page passes the uploaded
    file's name so that no temporary path shows. Raises DataError when the file cannot
    be used at all.

    `stream`: True keeps the items as `stream.LazyItems` (an index of the valid rows,
    each parsed again when used: memory does not grow with the file), False reads them
    into a list; None (the default) streams files of `STREAM_FROM_BYTES` or more. Both
    give the same items and the same rejected rows. A `.json` file holding one array is
    always read whole.
    """
    path = Path(path).expanduser()
    mapping = ColumnMapping.parse(mapping) if isinstance(mapping, str) else mapping
    fmt = detect_format(path, fmt)
    if stream or (stream is None and path.is_file() and path.stat().st_size >= STREAM_FROM_BYTES):
        rows = open_source(path, fmt, source)
        if rows is not None:
            return _stream_report(rows, kind, mapping, limit, name or path.name)
    table = open_table(path, fmt, source)
    return _build_report(table, kind, mapping, limit, name or path.name)
