"""Item schemas for the two kinds of question answering the studio handles.

Every loader, built-in generator and scorer speaks these two types, so validation
happens once, at the boundary (see `validate_mc_record` / `validate_open_record`).
Errors are data (`RowError`), not exceptions: a bad row is reported and skipped, it
never takes a whole dataset (or the studio) down with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

MIN_CHOICES = 2


@dataclass(frozen=True)
class MCItem:
    """One multiple-choice question. `answer` indexes `choices` (0-based)."""

    id: str
    question: str
    choices: tuple[str, ...]
    answer: int
    subject: str | None = None

    @property
    def n_choices(self) -> int:
        return len(self.choices)


@dataclass(frozen=True)
class OpenItem:
    """One open-answer question with its accepted answer aliases."""

    id: str
    question: str
    answers: tuple[str, ...]
    subject: str | None = None


Item = Union[MCItem, OpenItem]


@dataclass(frozen=True)
class RowError:
    """Why one row was rejected: where it came from and what was expected."""

    source: str  # file name or dataset name
    row: int  # 1-based line (JSONL) or data row (CSV / Parquet) number
    field: str  # the offending field, or "" for the row as a whole
    message: str

    def __str__(self) -> str:
        where = f"{self.source}, row {self.row}"
        if self.field:
            where += f", field `{self.field}`"
        return f"{where}: {self.message}"


@dataclass
class LoadReport:
    """Items kept and rows rejected while loading one dataset."""

    name: str
    kind: str  # "mc" or "open"
    items: list = field(default_factory=list)
    rejected: list[RowError] = field(default_factory=list)

    @property
    def n_rows(self) -> int:
        return len(self.items) + len(self.rejected)

    def summary(self) -> str:
        return f"{self.name}: {len(self.items)} kept, {len(self.rejected)} rejected of {self.n_rows} rows"


class DataError(ValueError):
    """A dataset that cannot be used at all (missing file, no valid rows, bad mapping)."""


def _as_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, float) and value != value:  # NaN from pandas
        return None
    text = str(value).strip()
    return text or None


def validate_mc_record(
    record: dict[str, Any], source: str, row: int
) -> tuple[MCItem | None, RowError | None]:
    """Turn a normalised record {id?, question, choices, answer, subject?} into an MCItem.

    `answer` may be an int index, a digit string, a letter (A, B, ...) or the text of
    one choice; an index out of range is rejected (the harness only warns; we refuse,
    since a wrong gold silently corrupts every metric).
    """

    def err(field_name: str, message: str) -> tuple[None, RowError]:
        return None, RowError(source, row, field_name, message)

    question = _as_text(record.get("question"))
    if question is None:
        return err("question", "expected a non-empty string")
    raw_choices = record.get("choices")
    if not isinstance(raw_choices, (list, tuple)):
        return err("choices", f"expected a list of at least {MIN_CHOICES} strings, got {type(raw_choices).__name__}")
    choices = [_as_text(c) for c in raw_choices]
    if any(c is None for c in choices):
        return err("choices", "expected every choice to be a non-empty string")
    answer, problem = resolve_answer(record.get("answer"), choices)  # type: ignore[arg-type]
    if problem:
        return err("answer", problem)
    gold_text = choices[answer]
    if choices.count(gold_text) > 1:
        return err("choices", f"expected the correct choice {gold_text!r} once, but it appears {choices.count(gold_text)} times")
    # A repeated distractor (CommonsenseQA has a few) is dropped, not the whole item:
    # the question stays answerable and the gold index is re-pointed.
    choices = list(dict.fromkeys(choices))
    answer = choices.index(gold_text)
    if len(choices) < MIN_CHOICES:
        return err("choices", f"expected at least {MIN_CHOICES} distinct choices, got {len(choices)}")
    item_id = _as_text(record.get("id")) or f"{source}-{row}"
    subject = _as_text(record.get("subject"))
    return MCItem(item_id, question, tuple(choices), answer, subject), None  # type: ignore[arg-type]


def resolve_answer(value: Any, choices: list[str]) -> tuple[int, str | None]:
    """Map an answer given as index, digit string, letter or choice text to an index.

    Order matters and is documented: an int or a digit string is a 0-based index, a
    single ASCII letter is a position (A = 0), anything else must equal a choice text.
    So numeric choices ("12") need their answer given as an index, not as the text.
    """
    k = len(choices)
    if isinstance(value, bool) or value is None:
        return -1, f"expected an index 0..{k - 1}, a letter or a choice text, got {value!r}"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int):
        if 0 <= value < k:
            return value, None
        return -1, f"expected an index in 0..{k - 1}, got {value}"
    text = str(value).strip()
    if text.lstrip("-").isdigit():
        return resolve_answer(int(text), choices)
    if len(text) == 1 and "A" <= text.upper() <= "Z":
        index = ord(text.upper()) - ord("A")
        if 0 <= index < k:
            return index, None
        return -1, f"expected a letter in A..{chr(ord('A') + k - 1)}, got {text!r}"
    if text in choices:
        return choices.index(text), None
    return -1, f"expected an index, a letter or one of the choice texts, got {text!r}"


def validate_open_record(
    record: dict[str, Any], source: str, row: int
) -> tuple[OpenItem | None, RowError | None]:
    """Turn a record {id?, question, answers (list or a single string)} into an OpenItem."""
    question = _as_text(record.get("question"))
    if question is None:
        return None, RowError(source, row, "question", "expected a non-empty string")
    raw = record.get("answers")
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, (list, tuple)):
        return None, RowError(source, row, "answers", "expected a list of answer strings")
    answers = tuple(a for a in (_as_text(x) for x in raw) if a is not None)
    if not answers:
        return None, RowError(source, row, "answers", "expected at least one non-empty answer")
    item_id = _as_text(record.get("id")) or f"{source}-{row}"
    return OpenItem(item_id, question, answers, _as_text(record.get("subject"))), None
