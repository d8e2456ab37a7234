"""Item schemas for the two kinds of question answering the studio handles.

Every loader, built-in generator and scorer speaks these two types, so validation
happens once, at the boundary (see `validate_mc_record` / `validate_open_record`).
Errors are data (`RowError`), not exceptions: a bad row is reported and skipped, it
never takes a whole dataset (or the studio) down with it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

MIN_CHOICES = 2
# How an answer cell names the correct option (`answer_form=` in a column mapping).
ANSWER_FORMS = {
    "auto": "decided per cell: a number is a 0-based index, one letter a position (A = first), else the option's text",
    "index0": "a 0-based index (0 = first option)",
    "index1": "a 1-based number (1 = first option)",
    "letter": "a letter (A = first option)",
    "text": "the text of the correct option",
    "label": "one of the option labels in another column (ARC, CommonsenseQA, OpenBookQA: choices.label)",
}
UNLABELLED = -1  # MCItem.answer of a question read without answers (kind UNLABELLED_MC): no gold
UNLABELLED_MC = "mc-unlabelled"  # the loaders' kind for multiple choice without answers: asked for, never detected
REJECTED_SHOWN = 5  # reasons quoted in a message or a note
# Rejected rows a load keeps with their reasons; the rest are counted (`LoadReport.reject`).
# A file of one valid row and ten million bad ones made ten million RowErrors (3.4 GB);
# nobody reads past the first thousand reasons, and the count stays exact.
REJECTED_KEPT = 1000
_INDEX = re.compile(r"-?[0-9]{1,9}")  # an answer index in text; ASCII digits only ("²" is no index)


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
FINGERPRINT_HEX = 16  # hex digits of SHA-256 kept: 64 bits, ample to tell two versions of a set apart


def items_fingerprint(items: Any) -> str:
    """`sha256:<16 hex>` of the items themselves (every field, in order), so a result can
    say which data it was measured on: the same questions give the same fingerprint
    whatever file format or path they came from, and one changed answer gives another.

    >>> items_fingerprint([MCItem("1", "2 + 2?", ("3", "4"), 1)])[:7]
    'sha256:'
    """
    digest = hashlib.sha256()
    for item in items:
        record = dataclasses.asdict(item)
        digest.update(json.dumps(record, ensure_ascii=False, sort_keys=True).encode("utf-8") + b"\n")
    return f"sha256:{digest.hexdigest()[:FINGERPRINT_HEX]}"


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
    items: list[Any] = field(default_factory=list)  # MCItem or OpenItem, as `kind` says
    rejected: list[RowError] = field(default_factory=list)
    # Rejected rows counted but not listed: an upload's meta.json keeps only the first
    # 1000 reasons, and its exact count must survive reloading.
    unlisted_rejected: int = 0
    # What to do about the rejected rows as a whole, said once above them (a file that is
    # not UTF-8: its likely encoding and how to read it in it, data/encoding.py).
    note: str = ""

    def reject(self, error: RowError) -> None:
        """Record a rejected row: its reason while fewer than `REJECTED_KEPT` are listed,
        else only its count, so a file of bad rows costs no object per row."""
        if len(self.rejected) < REJECTED_KEPT:
            self.rejected.append(error)
        else:
            self.unlisted_rejected += 1

    @property
    def n_rejected(self) -> int:
        return len(self.rejected) + self.unlisted_rejected

    @property
    def n_rows(self) -> int:
        """Rows read: kept plus rejected (a `limit` stops reading early)."""
        return len(self.items) + self.n_rejected

    def summary(self) -> str:
        return f"{self.name}: {len(self.items)} kept, {self.n_rejected} rejected of {self.n_rows} rows"

    def rejection_lines(self, shown: int = REJECTED_SHOWN) -> list[str]:
        """A headline and the first `shown` reasons (file, row, field, why); [] when none.

        One wording for the CLI's stderr note and the studio, so a person sees the same
        sentence wherever a dataset with bad rows is used.
        """
        if not self.n_rejected:
            return []
        lines = [f"{self.n_rejected} of {self.n_rows} rows read from {self.name} were rejected"]
        lines += [self.note] if self.note else []
        lines += [str(e) for e in self.rejected[:shown]]
        more = self.n_rejected - min(shown, len(self.rejected))
        if more > 0:
            lines.append(f"... and {more} more")
        return lines

    def rejected_record(self, shown: int) -> dict[str, Any]:
        """JSON-ready counts and the first `shown` reasons (the count is always exact)."""
        return {
            "n_items": len(self.items),
            "n_rows": self.n_rows,
            "n_rejected": self.n_rejected,
            "rejected": [dataclasses.asdict(e) for e in self.rejected[:shown]],
        }


class DataError(ValueError):
    """A dataset that cannot be used at all (missing file, no valid rows, bad mapping)."""


def _as_text(value: Any) -> str | None:
    """Stripped text of a scalar cell; None for a missing, empty or unusable value.

    Lists and dicts are not text (their repr would become a question silently), and a
    string holding lone surrogates (undecodable bytes) could never be saved as UTF-8.
    """
    if value is None or isinstance(value, (dict, list, tuple, set, bytes)):
        return None
    if isinstance(value, float) and value != value:  # NaN from pandas
        return None
    try:
        text = value.strip() if isinstance(value, str) else str(value).strip()
    except ValueError:  # an int past Python's 4300-digit str() limit
        return None
    if not text or not is_utf8(text):
        return None
    return text


def is_blank(value: Any) -> bool:
    """A cell that means "nothing here": None, NaN (pandas) or whitespace-only text."""
    if isinstance(value, float):
        return value != value
    return value is None or (isinstance(value, str) and not value.strip())


def is_utf8(text: str) -> bool:
    """False for text holding lone surrogates: bytes that were not UTF-8 when decoded."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def describe(value: Any) -> str:
    """A short, safe rendering of a bad value for a message: never a 5000-character cell."""
    if isinstance(value, str):
        if not is_utf8(value):
            return "text with undecodable bytes"
        return repr(value) if len(value) <= 40 else repr(value[:40]) + "..."
    if isinstance(value, (dict, list, tuple, set, bytes)):
        return f"a {type(value).__name__}"
    try:
        text = repr(value)
    except ValueError:  # an int past Python's 4300-digit repr() limit
        return "a number too long to show"
    return text if len(text) <= 40 else text[:40] + "..."


def _optional_text(record: dict[str, Any], key: str) -> tuple[str | None, str | None]:
    """(text or None, problem or None) for `id` / `subject`: blank is fine, a list is not."""
    value = record.get(key)
    text = _as_text(value)
    if text is None and not is_blank(value):
        return None, f"Expected a string or a number, but got {describe(value)}"
    return text, None


def validate_mc_record(
    record: dict[str, Any], source: str, row: int, answer_form: str = "auto", labelled: bool = True
) -> tuple[MCItem | None, RowError | None]:
    """Turn a normalised record {id?, question, choices, answer, labels?, subject?} into an MCItem.

    `answer` is read as `answer_form` says (`ANSWER_FORMS`; "auto": an int index, a
    digit string, a letter (A, B, ...) or the text of one choice; "label": one of
    `labels`); an index out of range is rejected (the harness only warns; we refuse,
    since a wrong gold silently corrupts every metric). `labelled=False` (only the
    unlabelled loading of `calm eval --thermometer`) reads no answer: the item's answer
    is UNLABELLED, and everything else is checked as for a labelled row.
    """

    def err(field_name: str, message: str) -> tuple[None, RowError]:
        return None, RowError(source, row, field_name, message)

    question = _as_text(record.get("question"))
    if question is None:
        return err("question", f"Expected a non-empty string, but got {describe(record.get('question'))}")
    choices, problem = _read_choices(record.get("choices"))
    if problem:
        return err("choices", problem)
    if not labelled:
        return _unlabelled_item(record, source, row, question, choices)
    labels = record.get("labels")
    if answer_form == "label" and not isinstance(labels, (list, tuple)):
        return err("labels", f"Expected a list of option labels, but got {describe(labels)}")
    answer, problem = resolve_answer(record.get("answer"), choices, answer_form, labels)
    if problem:
        return err("answer", problem)
    choices, answer, problem = _without_repeats(choices, answer)
    if problem:
        return err("choices", problem)
    item_id, id_problem = _optional_text(record, "id")
    subject, subject_problem = _optional_text(record, "subject")
    if id_problem or subject_problem:
        return err("id" if id_problem else "subject", id_problem or subject_problem)  # type: ignore[arg-type]
    item = MCItem(item_id or f"{source}-{row}", question, tuple(choices), answer, subject)
    return item, None


def _read_choices(raw: Any) -> tuple[list[str], str | None]:
    """A record's choices as texts, or why they are not: a list of at least MIN_CHOICES
    non-empty strings (numbers are read as text)."""
    if not isinstance(raw, (list, tuple)):
        return [], f"Expected a list of at least {MIN_CHOICES} strings, but got {describe(raw)}"
    if len(raw) < MIN_CHOICES:
        return [], f"Expected at least {MIN_CHOICES} choices, but got {len(raw)}"
    choices = [_as_text(c) for c in raw]
    if None in choices:
        bad = choices.index(None)
        return [], f"Expected every choice to be a non-empty string, but choice {bad + 1} is {describe(raw[bad])}"
    return choices, None  # type: ignore[return-value]


def _without_repeats(choices: list[str], answer: int) -> tuple[list[str], int, str | None]:
    """The choices with a repeated distractor dropped (CommonsenseQA has a few), the gold
    re-pointed: the question stays answerable. A repeated gold, or fewer than MIN_CHOICES
    distinct choices left, is a problem."""
    gold_text = choices[answer]
    if choices.count(gold_text) > 1:
        return (
            choices,
            answer,
            (f"Expected the correct choice {gold_text!r} once, but it appears {choices.count(gold_text)} times"),
        )
    distinct = list(dict.fromkeys(choices))
    if len(distinct) < MIN_CHOICES:
        return choices, answer, f"Expected at least {MIN_CHOICES} distinct choices, but got {len(distinct)}"
    return distinct, distinct.index(gold_text), None


def validate_records(
    records: list[dict[str, Any]], rows: list[int], source: str, kind: str, answer_form: str = "auto"
) -> list[tuple[Item | None, RowError | None]]:
    """The normalised records of one chunk (row numbers `rows`) validated as `kind` ("mc",
    UNLABELLED_MC or "open"), in order: (item, None) or (None, RowError) each."""
    if kind == "open":
        return [validate_open_record(record, source, row) for record, row in zip(records, rows, strict=True)]
    labelled = kind != UNLABELLED_MC
    return [
        validate_mc_record(record, source, row, answer_form, labelled=labelled)
        for record, row in zip(records, rows, strict=True)
    ]


def _unlabelled_item(
    record: dict[str, Any], source: str, row: int, question: str, choices: list[str]
) -> tuple[MCItem | None, RowError | None]:
    """The MCItem of a row read without answers: repeated options dropped (none is the
    gold to keep), answer UNLABELLED."""
    choices = list(dict.fromkeys(choices))
    if len(choices) < MIN_CHOICES:
        return None, RowError(
            source, row, "choices", f"Expected at least {MIN_CHOICES} distinct choices, but got {len(choices)}"
        )
    item_id, id_problem = _optional_text(record, "id")
    subject, subject_problem = _optional_text(record, "subject")
    if id_problem or subject_problem:
        return None, RowError(source, row, "id" if id_problem else "subject", id_problem or subject_problem)  # type: ignore[arg-type]
    return MCItem(item_id or f"{source}-{row}", question, tuple(choices), UNLABELLED, subject), None


def resolve_answer(
    value: Any, choices: list[str], form: str = "auto", labels: list[Any] | tuple[Any, ...] | None = None
) -> tuple[int, str | None]:
    """Map an answer cell to a 0-based index into `choices`, read as `form` (`ANSWER_FORMS`).

    "auto" keeps the documented order: an int or a digit string is a 0-based index, a
    single ASCII letter is a position (A = 0), anything else must equal a choice text.
    So numeric choices ("12") need their answer given as an index, or `form="text"`.
    "label" finds the answer among `labels` (ARC's "1".."4" labels are not 0-based indices).
    """
    if isinstance(value, bool) or value is None:
        return -1, f"Expected {_answer_wanted(form, choices)}, but got {describe(value)}"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if form == "auto":
        return _resolve_auto(value, choices)
    if form not in _FORM_READERS:
        raise ValueError(f"Expected `form` to be one of {', '.join(ANSWER_FORMS)}, but got {form!r}")
    text = _as_text(value)
    index = None if text is None else _FORM_READERS[form](value, text, choices, labels or ())
    if index is not None:
        return index, None
    if form == "label" and text is not None:
        shown = ", ".join(t for t in (_as_text(label) for label in labels or ()) if t) or "none"
        return -1, f"Expected one of the option labels ({shown[:60]}), but got {describe(value)}"
    return -1, f"Expected {_answer_wanted(form, choices)}, but got {describe(value)}"


def _by_index(base: int) -> Callable[[Any, str, list[str], Sequence[Any]], int | None]:
    """The reader of a `base`-based option number (index0: 0, index1: 1)."""

    def read(value: Any, text: str, choices: list[str], labels: Sequence[Any]) -> int | None:
        number = value if isinstance(value, int) else int(text) if _INDEX.fullmatch(text) else None
        return number - base if number is not None and base <= number < len(choices) + base else None

    return read


def _by_letter(value: Any, text: str, choices: list[str], labels: Sequence[Any]) -> int | None:
    index = ord(text.upper()) - ord("A") if len(text) == 1 and text.isascii() and text.isalpha() else -1
    return index if 0 <= index < len(choices) else None


def _by_text(value: Any, text: str, choices: list[str], labels: Sequence[Any]) -> int | None:
    return choices.index(text) if text in choices else None


def _by_label(value: Any, text: str, choices: list[str], labels: Sequence[Any]) -> int | None:
    texts = [_as_text(label) for label in labels]
    return texts.index(text) if text in texts and texts.index(text) < len(choices) else None


# answer_form -> its reader: (cell, cell as text, choices, labels) -> 0-based index, or None
_FORM_READERS: dict[str, Callable[[Any, str, list[str], Sequence[Any]], int | None]] = {
    "index0": _by_index(0),
    "index1": _by_index(1),
    "letter": _by_letter,
    "text": _by_text,
    "label": _by_label,
}


def _answer_wanted(form: str, choices: list[str]) -> str:
    k = len(choices)
    last_letter = chr(ord("A") + min(k, 26) - 1)
    return {
        "index0": f"a 0-based index in 0..{k - 1}",
        "index1": f"a 1-based number in 1..{k}",
        "letter": f"a letter in A..{last_letter}",
        "text": "the text of one of the options",
        "label": "one of the option labels",
    }.get(form, f"an index 0..{k - 1}, a letter A..{last_letter} or one of the choice texts")


def _resolve_auto(value: Any, choices: list[str]) -> tuple[int, str | None]:
    k = len(choices)
    if isinstance(value, int):
        if 0 <= value < k:
            return value, None
        return -1, f"Expected an index in 0..{k - 1}, but got {value}"
    text = _as_text(value)
    if text is None:
        return -1, f"Expected {_answer_wanted('auto', choices)}, but got {describe(value)}"
    if _INDEX.fullmatch(text):
        return _resolve_auto(int(text), choices)
    if len(text) == 1 and text.isascii() and text.isalpha():  # "ß".upper() is "SS": ASCII only
        index = ord(text.upper()) - ord("A")
        if 0 <= index < k:
            return index, None
        return -1, f"Expected a letter in A..{chr(ord('A') + min(k, 26) - 1)}, but got {text!r}"
    if text in choices:
        return choices.index(text), None
    return -1, f"Expected {_answer_wanted('auto', choices)}, but got {describe(text)}"


def validate_open_record(record: dict[str, Any], source: str, row: int) -> tuple[OpenItem | None, RowError | None]:
    """Turn a record {id?, question, answers (list or a single string)} into an OpenItem."""

    def err(field_name: str, message: str) -> tuple[None, RowError]:
        return None, RowError(source, row, field_name, message)

    question = _as_text(record.get("question"))
    if question is None:
        return err("question", f"Expected a non-empty string, but got {describe(record.get('question'))}")
    raw = record.get("answers")
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, (list, tuple)):
        return err("answers", f"Expected a list of answer strings, but got {describe(raw)}")
    answers = tuple(a for a in (_as_text(x) for x in raw) if a is not None)
    if not answers:
        return err("answers", "Expected at least one non-empty answer, but got none")
    item_id, id_problem = _optional_text(record, "id")
    subject, subject_problem = _optional_text(record, "subject")
    if id_problem or subject_problem:
        return err("id" if id_problem else "subject", id_problem or subject_problem)  # type: ignore[arg-type]
    return OpenItem(item_id or f"{source}-{row}", question, answers, subject), None
