"""Property-based fuzzing of the data layer: arbitrary rows, raw bytes and mapping strings.

Whatever a person hands the studio, loading ends one of two ways: a LoadReport in which
every row read is either an item or a rejected row naming file, row and field (nothing
silently dropped), or one DataError a person can act on. Any other exception is a bug.

    pytest tests/test_fuzz_data.py -q              # default suite: a few hundred examples each
    pytest tests/test_fuzz_data.py -q -m slow      # the long variants: 2000 each (minutes)

Each property runs twice, the same check with more examples: `fast` in the default
suite and `long` under the `slow` marker.
"""

from __future__ import annotations

import csv
import io
import json
import re
import tempfile
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calm_core.data.catalog import load_dataset
from calm_core.data.guess import guess_mapping
from calm_core.data.loaders import load_file
from calm_core.data.mapping import ColumnMapping
from calm_core.data.readers import FORMATS, peek_columns, upload_suffix
from calm_core.data.uploads import save_upload
from calm_core.data.schema import (
    DataError,
    LoadReport,
    MCItem,
    OpenItem,
    RowError,
    validate_mc_record,
    validate_open_record,
)

BUDGETS = [pytest.param(200, id="fast"), pytest.param(2000, id="long", marks=pytest.mark.slow)]  # examples per property
KINDS = ("auto", "mc", "open")
CLASS_NAME = re.compile(r"\b[A-Z][A-Za-z]*(Error|Exception)\b")  # a Python class name shown to a user


def fuzz(budget: int, strategy: st.SearchStrategy, check: Callable[[Any], None]) -> None:
    """Run `check` on `budget` examples of `strategy` (one test body for both budgets)."""
    run = settings(max_examples=budget, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                                HealthCheck.function_scoped_fixture])
    run(given(strategy)(check))()


# ----------------------------------------------------------------------------- strategies

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=8)
letters = st.sampled_from(["A", "b", "C", "z", "ß", "ﬀ", "²", "--1", "1", "01", "-0", " 2 ", "0" * 5000])
texts = st.text(max_size=10) | st.sampled_from(["", " ", "\udc80", "a\ud800b", "Paris", "x|y", "[1, 2]"])

fields = {
    "id": st.sampled_from(["a", "b", "a ", ""]) | st.integers(0, 3) | json_values,  # duplicates are likely
    "question": texts | json_values,
    "choices": st.lists(texts, max_size=6) | texts | json_values,
    "answer": st.integers(-2, 7) | letters | texts | st.floats() | json_values,
    "subject": texts | json_values,
    "answers": st.lists(texts, max_size=4) | texts | json_values,
}
rows = st.builds(lambda extra, known: {**extra, **known},
                 st.dictionaries(st.text(max_size=6), json_values, max_size=3),
                 st.fixed_dictionaries({}, optional=fields))
jsonl_lines = st.lists(rows | json_values, min_size=1, max_size=8)
# Rows that are mostly valid, so that saving and reloading has items to compare.
mc_rows = st.fixed_dictionaries({"question": texts, "choices": st.lists(texts, min_size=2, max_size=5),
                                 "answer": st.integers(0, 4) | letters}, optional={"id": fields["id"], "subject": texts})
open_rows = st.fixed_dictionaries({"question": texts, "answers": st.lists(texts, min_size=1, max_size=3) | texts},
                                  optional={"id": fields["id"], "subject": texts})
usable_files = (st.lists(mc_rows, min_size=1, max_size=6) | st.lists(open_rows, min_size=1, max_size=6)).flatmap(
    lambda good: st.lists(rows | json_values, max_size=2).map(lambda bad: good + bad))

csv_cells = (st.text(alphabet=st.sampled_from(list('ab1A|,"\n\r []') + ["é", "\x00", "Q"]), max_size=6)
             | st.sampled_from(["[" * 3000, "1" * 5000, "[1, 2", '["a", "b"]', "ß", "²"]))
csv_tables = st.lists(st.lists(csv_cells, min_size=1, max_size=5), min_size=1, max_size=6)
mapping_keys = st.sampled_from(["question", "choices", "answer", "id", "subject", "answers", "q", ""])
mapping_values = st.text(alphabet=st.sampled_from(list("abAB|=., -é")), max_size=8) | st.sampled_from(["none", "-", ""])
mapping_parts = st.tuples(mapping_keys, st.sampled_from(["=", "", "=="]), mapping_values).map("".join)
mapping_texts = st.lists(mapping_parts, max_size=5).map(", ".join) | st.text(max_size=20)


# Lines that have crashed JSON readers: deep nesting, a 5000-digit number, a BOM.
nasty_lines = st.sampled_from([b"[" * 3000, b'{"question": "q", "answer": 1' + b"0" * 5000 + b"}",
                               b'{"question": "q", "choices": "' + b"[" * 3000 + b'", "answer": 0}',
                               b"\xef\xbb\xbf{}", b"\x80\x81", b"{\"question\": \"\\udc80\"}"])


def jsonl_bytes(lines: list[Any]) -> bytes:
    return "".join(json.dumps(line) + "\n" for line in lines).encode("utf-8")


def csv_bytes(table: list[list[str]]) -> bytes:
    buffer = io.StringIO()
    csv.writer(buffer).writerows(table)
    return buffer.getvalue().encode("utf-8")


# ----------------------------------------------------------------------------- reference row counts


def jsonl_row_count(data: bytes) -> int:
    """Rows as JSONL defines them: non-blank lines (`bytes.strip` blanks, as the loader)."""
    return sum(1 for line in data.split(b"\n") if line.strip())


def csv_row_count(data: bytes) -> int:
    """Rows as CSV defines them: records after the header that have a non-blank cell."""
    text = data.decode("utf-8-sig", errors="surrogateescape")
    records = list(csv.reader(io.StringIO(text, newline="")))
    return sum(1 for cells in records[1:] if any(cell.strip() for cell in cells))


# ----------------------------------------------------------------------------- checks


def check_report(report: LoadReport, n_rows: int) -> None:
    """Every row is an item or a rejected row, each rejected row names where and why."""
    assert len(report.items) + report.n_rejected == n_rows
    assert len({e.row for e in report.rejected}) == len(report.rejected)  # one verdict per row
    for error in report.rejected:
        assert isinstance(error, RowError) and error.row >= 1 and error.message
        assert str(error).startswith(f"{error.source}, row {error.row}")
    for item in report.items:
        check_item(item)
    assert len({item.id for item in report.items}) == len(report.items)


def check_item(item: MCItem | OpenItem) -> None:
    """A kept item holds usable text: non-empty, UTF-8 encodable, a gold inside the choices."""
    texts_ = [item.id, item.question, *(item.choices if isinstance(item, MCItem) else item.answers)]
    for text in texts_:
        assert isinstance(text, str) and text.strip() == text and text
        text.encode("utf-8")  # a lone surrogate would fail here, or later when an upload is saved
    if isinstance(item, MCItem):
        assert 0 <= item.answer < len(item.choices) >= 2
        assert len(set(item.choices)) == len(item.choices)


def check_data_error(exc: DataError, *echoed: str) -> None:
    """A refusal says something, and names no Python exception class of ours: the input it
    quotes back (`echoed`, e.g. a mapping text the fuzzer spelled 'AError') is left out of
    that search."""
    assert str(exc).strip()
    said = str(exc)
    for text in echoed:
        said = said.replace(repr(text), "").replace(text, "")
    assert not CLASS_NAME.search(said), str(exc)


def load_or_refuse(path: Path, n_rows: int, **kwargs: Any) -> LoadReport | None:
    """load_file(path) checked against `n_rows`; None when it refused with a DataError."""
    try:
        report = load_file(path, **kwargs)
    except DataError as exc:
        check_data_error(exc)
        return None
    check_report(report, n_rows)
    return report


def check_file(data: bytes, suffix: str, n_rows: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"fuzz{suffix}"
        path.write_bytes(data)
        for kind in KINDS:
            load_or_refuse(path, n_rows, kind=kind)
        try:
            assert all(isinstance(c, str) for c in peek_columns(path))
        except DataError as exc:
            check_data_error(exc)


# ----------------------------------------------------------------------------- properties


@pytest.mark.parametrize("budget", BUDGETS)
def test_validators_give_an_item_or_a_row_error(budget: int) -> None:
    def check(record: dict) -> None:
        for validate in (validate_mc_record, validate_open_record):
            item, error = validate(record, "fuzz.jsonl", 3)
            assert (item is None) != (error is None)
            if item is not None:
                check_item(item)
            else:
                assert error.row == 3 and error.source == "fuzz.jsonl" and error.message

    fuzz(budget, rows, check)


@pytest.mark.parametrize("budget", BUDGETS)
def test_jsonl_rows_are_items_or_rejected_rows(budget: int) -> None:
    def check(lines: list[Any]) -> None:
        data = jsonl_bytes(lines)
        check_file(data, ".jsonl", jsonl_row_count(data))

    fuzz(budget, jsonl_lines | usable_files, check)


@pytest.mark.parametrize("budget", BUDGETS)
def test_arbitrary_bytes_as_jsonl(budget: int) -> None:
    lines = st.lists(jsonl_lines.map(jsonl_bytes) | nasty_lines.map(lambda line: line + b"\n"), max_size=4)
    garbage = st.binary(max_size=200) | lines.map(b"".join) | jsonl_lines.map(jsonl_bytes).flatmap(
        lambda data: st.binary(max_size=4).map(lambda noise: data[: len(data) // 2] + noise + data[len(data) // 2:]))

    def check(data: bytes) -> None:
        check_file(data, ".jsonl", jsonl_row_count(data))

    fuzz(budget, garbage, check)


@pytest.mark.parametrize("budget", BUDGETS)
def test_arbitrary_bytes_as_a_json_array(budget: int) -> None:
    arrays = st.lists(rows | json_values, max_size=6).map(lambda values: json.dumps(values).encode())
    garbage = arrays | st.binary(max_size=100).map(lambda data: b"[" + data) | nasty_lines

    def check(data: bytes) -> None:
        try:
            values = json.loads(data.decode("utf-8-sig"))
        except (ValueError, RecursionError):
            values = None
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "fuzz.json"
            path.write_bytes(data)
            if isinstance(values, list) and data.removeprefix(b"\xef\xbb\xbf").lstrip().startswith(b"["):
                for kind in KINDS:
                    load_or_refuse(path, len(values), kind=kind)
            else:  # not one array: read as JSON lines, or refused as a whole
                check_file(data, ".json", jsonl_row_count(data))

    fuzz(budget, garbage, check)


@pytest.mark.parametrize("budget", BUDGETS)
def test_arbitrary_bytes_as_csv(budget: int) -> None:
    tables = csv_tables.map(csv_bytes)
    garbage = st.binary(max_size=200) | tables | tables.flatmap(
        lambda data: st.binary(max_size=4).map(lambda noise: data[: len(data) // 2] + noise + data[len(data) // 2:]))

    def check(data: bytes) -> None:
        check_file(data, ".csv", csv_row_count(data))

    fuzz(budget, garbage, check)


@pytest.mark.parametrize("budget", BUDGETS)
def test_csv_tables_with_letter_columns(budget: int) -> None:
    """Realistic CSV: a question, one column per option, a label; any cell may be odd."""
    header = ["q", "A", "B", "C", "label"]
    table = st.lists(st.lists(csv_cells | st.sampled_from(["A", "B", "0", "2", "x"]), min_size=5, max_size=5),
                     min_size=1, max_size=6).map(lambda body: [header] + body)

    def check(body: list[list[str]]) -> None:
        data = csv_bytes(body)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "quiz.csv"
            path.write_bytes(data)
            load_or_refuse(path, csv_row_count(data), mapping="question=q, choices=A|B|C, answer=label")

    fuzz(budget, table, check)


@pytest.mark.parametrize("budget", BUDGETS)
def test_mapping_strings_parse_or_raise_data_error(budget: int) -> None:
    quiz = csv_bytes([["q", "A", "B", "label", "aliases"], ["2 + 2?", "3", "4", "B", "four|4"],
                      ["Sky?", "blue", "red", "A", "blue"], ["", "x", "y", "A", ""]])

    def check(text: str) -> None:
        try:
            mapping = ColumnMapping.parse(text)
        except DataError as exc:
            check_data_error(exc, text)
            return
        assert ColumnMapping.parse(mapping.to_text()) == mapping
        assert ColumnMapping.from_dict(mapping.to_dict()) == mapping
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "quiz.csv"
            path.write_bytes(quiz)
            for kind in KINDS:
                load_or_refuse(path, 3, kind=kind, mapping=mapping)

    fuzz(budget, mapping_texts, check)


@pytest.mark.parametrize("budget", BUDGETS)
def test_guessed_mapping_always_parses(budget: int) -> None:
    """The Data page pre-fills the mapping form with `guess_mapping(columns)`: any header."""
    columns = st.lists(st.text(max_size=8) | st.sampled_from(["A", "b", "question", "label", "answers"]), max_size=6)

    def check(names: list[str]) -> None:
        try:
            ColumnMapping.parse(guess_mapping(names))
        except DataError as exc:
            check_data_error(exc)

    fuzz(budget, columns, check)


@pytest.mark.parametrize("budget", BUDGETS)
def test_upload_suffix_is_always_a_readable_format(budget: int) -> None:
    names = st.text(max_size=12) | st.sampled_from(["日本.csv", "データ", "x.JSONL", "a.parquet", "b.txt", ".csv"])

    def check(example: tuple[str, bytes]) -> None:
        assert upload_suffix(*example) in FORMATS

    fuzz(budget, st.tuples(names, st.binary(max_size=16)), check)


@pytest.mark.parametrize("budget", [pytest.param(50, id="fast"), pytest.param(500, id="long", marks=pytest.mark.slow)])
def test_saved_upload_reads_back_as_the_same_items(budget: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever survives validation survives save_upload -> load_dataset unchanged."""
    def check(lines: list[Any]) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            monkeypatch.setenv("CALM_WORKSPACE", tmp)
            path = Path(tmp) / "in.jsonl"
            path.write_bytes(jsonl_bytes(lines))
            try:
                report = load_file(path)
            except DataError:  # no valid row at all: nothing to save
                return
            save_upload("fuzz", report, "in.jsonl")
            again = load_dataset("upload/fuzz")
            assert again.items == report.items and again.kind == report.kind
            assert again.n_rejected == report.n_rejected

    fuzz(budget, usable_files, check)
