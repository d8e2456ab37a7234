"""Guessing a column mapping from a file's column names and first records.

A starting point for a person, never a decision: the Data page's widgets start from
`guess_column_mapping` (through `mapping_form.form_values`) and offer the dotted names
of `column_paths`; `guess_mapping` spells the guess as a `--mapping` line. It knows the
common layouts (`opt1..opt4`, `A..D`, a `choices` list, ARC's `choices.text` +
`answerKey`, MMLU, open answers) and reads the answer form off the sample rows; it
never raises.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Iterable

from calm_core.data.mapping import ColumnMapping, choices_value, has_column, lookup
from calm_core.data.row_types import Record
from calm_core.data.schema import DataError, is_blank

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
    taken: set[str | None] = set(options)  # None too, once a pick found nothing: harmless

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
    if all(has_column(columns, c) for c in mapping.choice_columns):
        return "mc"
    return "open" if has_column(columns, mapping.answers) else "mc"


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
        answer, options = lookup(record, mapping.answer), choices_value(record, mapping)
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
