"""Tests for calm_core.data.loaders: every file format, the mapping, and every DataError.

Each test writes its own small file under tmp_path, so nothing depends on shared data,
and runs under both loaders (eager lists and streamed LazyItems: `loader_mode`).
Run: pytest tests/test_loaders.py -q
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from calm_core.data.hf import load_hf
from calm_core.data.loaders import load_file
from calm_core.data.mapping import ColumnMapping
from calm_core.data.readers import detect_format, load_records
from calm_core.data.schema import DataError, MCItem, OpenItem, RowError

@pytest.fixture(autouse=True, params=["eager", "stream"])
def loader_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test here runs twice: with the eager loader, and with every file and HF
    dataset streamed (`stream.LazyItems`), which must give the same items and errors."""
    if request.param == "stream":
        monkeypatch.setattr("calm_core.data.loaders.STREAM_FROM_BYTES", 0)
        monkeypatch.setattr("calm_core.data.hf.STREAM_FROM_BYTES", 0)
    return request.param


MC_ROWS = [
    {"id": "q1", "question": "2 + 2?", "choices": ["3", "4", "5"], "answer": 1},
    {"id": "q2", "question": "Capital of France?", "choices": ["Paris", "Rome"], "answer": 0, "subject": "geo"},
    {"id": "q3", "question": "Colour of the sky?", "choices": ["red", "blue", "green", "grey"], "answer": "B"},
]


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def write_text(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# ----------------------------------------------------------------------------- JSONL


def test_jsonl_loads_mc_items(tmp_path: Path) -> None:
    report = load_file(write_jsonl(tmp_path / "mc.jsonl", MC_ROWS))
    assert report.kind == "mc" and report.name == "mc.jsonl"
    assert report.items[0] == MCItem("q1", "2 + 2?", ("3", "4", "5"), 1)
    assert report.items[1].subject == "geo"
    assert report.items[2].answer == 1  # letter "B"
    assert report.rejected == []


def test_jsonl_bad_line_becomes_row_error(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "bad.jsonl", [MC_ROWS[0], "{not json", MC_ROWS[1], "[1, 2]"])
    report = load_file(path)
    assert [i.id for i in report.items] == ["q1", "q2"]
    assert [(e.row, e.field) for e in report.rejected] == [(2, ""), (4, "")]
    assert "valid JSON" in report.rejected[0].message
    assert "JSON object" in report.rejected[1].message and str(report.rejected[1]).startswith("bad.jsonl, row 4")


def test_jsonl_row_numbers_are_line_numbers_across_blank_lines(tmp_path: Path) -> None:
    bad = {"question": "no choices", "answer": 0, "choices": ["only one"]}
    path = write_jsonl(tmp_path / "gaps.jsonl", [MC_ROWS[0], "", "   ", bad])
    report = load_file(path)
    assert report.rejected[0].row == 4 and report.rejected[0].field == "choices"


def test_jsonl_undecodable_line_is_a_row_error(tmp_path: Path) -> None:
    path = tmp_path / "latin.jsonl"
    path.write_bytes(json.dumps(MC_ROWS[0]).encode() + b"\n" + b'{"question": "caf\xe9"}\n')
    report = load_file(path)
    assert len(report.items) == 1 and "UTF-8" in report.rejected[0].message


def test_json_array_file(tmp_path: Path) -> None:
    path = write_text(tmp_path / "arr.json", json.dumps(MC_ROWS))
    assert [i.id for i in load_file(path).items] == ["q1", "q2", "q3"]


def test_dotted_columns_reach_into_nested_records(tmp_path: Path) -> None:
    row = {"id": "n1", "question": "Pick b", "choices": {"text": ["a", "b"], "label": ["A", "B"]}, "answerKey": "B"}
    path = write_jsonl(tmp_path / "hf_arc.jsonl", [row])
    report = load_file(path, mapping="choices=choices.text, answer=answerKey")
    assert report.items[0].choices == ("a", "b") and report.items[0].answer == 1


def test_duplicate_ids_are_rejected(tmp_path: Path) -> None:
    report = load_file(write_jsonl(tmp_path / "dup.jsonl", [MC_ROWS[0], MC_ROWS[0]]))
    assert len(report.items) == 1
    assert report.rejected[0].row == 2 and report.rejected[0].field == "id" and "row 1" in report.rejected[0].message


def test_missing_ids_are_made_from_file_and_row(tmp_path: Path) -> None:
    rows = [{k: v for k, v in r.items() if k != "id"} for r in MC_ROWS[:2]]
    report = load_file(write_jsonl(tmp_path / "noid.jsonl", rows))
    assert [i.id for i in report.items] == ["noid.jsonl-1", "noid.jsonl-2"]


def test_load_records_yields_dicts_and_row_errors(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "r.jsonl", [MC_ROWS[0], "oops"])
    rows = list(load_records(path))
    assert rows[0] == (1, MC_ROWS[0])
    assert rows[1][0] == 2 and isinstance(rows[1][1], RowError)


# ----------------------------------------------------------------------------- CSV


def test_csv_pipe_separated_choices_and_letter_answers(tmp_path: Path) -> None:
    path = write_text(tmp_path / "pipe.csv", "id,question,choices,answer\na,Pick y,x|y|z,B\nb,Pick z,x | y | z,c\n")
    report = load_file(path)
    assert report.items[0] == MCItem("a", "Pick y", ("x", "y", "z"), 1)
    assert report.items[1].answer == 2  # lower-case letter


def test_csv_json_list_choices_and_index_answers(tmp_path: Path) -> None:
    path = write_text(tmp_path / "jl.csv", 'question,choices,answer\nPick 2,"[""1|one"", ""2""]",1\n')
    item = load_file(path).items[0]
    assert item.choices == ("1|one", "2") and item.answer == 1


def test_csv_several_choice_columns_text_answers_and_ragged_rows(tmp_path: Path) -> None:
    text = (
        "qid,q,A,B,C,D,E,label\n"
        "1,Largest planet?,Mars,Jupiter,Venus,Earth,,Jupiter\n"  # text answer; empty E dropped
        "2,Smallest?,Mercury,Pluto,Ceres,,,A\n"  # letter answer; 3 options
        "3,Five?,a,b,c,d,e,4\n"  # digit answer
    )
    mapping = ColumnMapping.parse("question=q, choices=A|B|C|D|E, answer=label, id=qid")
    report = load_file(write_text(tmp_path / "cols.csv", text), mapping=mapping)
    assert [i.n_choices for i in report.items] == [4, 3, 5]
    assert [i.answer for i in report.items] == [1, 0, 4]
    assert [i.id for i in report.items] == ["1", "2", "3"]


def test_csv_blank_choice_in_the_middle_is_rejected(tmp_path: Path) -> None:
    text = "q,A,B,C,label\nPick c,a,,c,C\n"
    with pytest.raises(DataError) as info:
        load_file(write_text(tmp_path / "hole.csv", text), mapping="question=q, choices=A|B|C, answer=label")
    assert "hole.csv, row 1, field `A|B|C`" in str(info.value)


def test_csv_open_answers(tmp_path: Path) -> None:
    path = write_text(tmp_path / "open.csv", "id,question,answers\nt1,Capital of Italy?,Rome|Roma\nt2,Two?,2\n")
    report = load_file(path)
    assert report.kind == "open"
    assert report.items == [OpenItem("t1", "Capital of Italy?", ("Rome", "Roma")), OpenItem("t2", "Two?", ("2",))]


def test_csv_keeps_na_like_text(tmp_path: Path) -> None:
    # pandas would turn "NA" / "None" into NaN; a choice text must stay a text.
    report = load_file(write_text(tmp_path / "na.csv", "question,choices,answer\nPick NA,NA|None,NA\n"))
    assert report.items[0].choices == ("NA", "None") and report.items[0].answer == 0


def test_csv_bom_and_spaced_header(tmp_path: Path) -> None:
    path = tmp_path / "excel.csv"
    path.write_bytes("\ufeffquestion, choices ,answer\nPick b,a|b,1\n".encode("utf-8"))
    assert load_file(path).items[0].answer == 1


def test_csv_row_with_extra_fields_is_a_row_error(tmp_path: Path) -> None:
    path = write_text(tmp_path / "extra.csv", "question,choices,answer\nok,a|b,0\nbad,a|b,0,surplus\n")
    report = load_file(path)
    assert len(report.items) == 1
    assert report.rejected[0].row == 2 and "Expected 3 fields" in report.rejected[0].message


def test_row_error_names_file_row_and_mapped_field(tmp_path: Path) -> None:
    text = "q,A,B,label\nfine,x,y,A\nbad,x,y,Z\n,x,y,A\n"
    report = load_file(write_text(tmp_path / "quiz.csv", text), mapping="question=q, choices=A|B, answer=label")
    assert [str(e).split(":")[0] for e in report.rejected] == [
        "quiz.csv, row 2, field `label`",
        "quiz.csv, row 3, field `q`",
    ]


# ----------------------------------------------------------------------------- Parquet


def test_parquet_with_list_columns(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.table({
        "question": ["2 + 2?", "Sky?"],
        "options": [["3", "4"], ["blue", "red", "green"]],
        "gold": [1, 0],
        "subject": ["maths", None],
    })
    pq.write_table(table, tmp_path / "mc.parquet")
    report = load_file(tmp_path / "mc.parquet", mapping="choices=options, answer=gold")
    assert report.items[0] == MCItem("mc.parquet-1", "2 + 2?", ("3", "4"), 1, "maths")
    assert report.items[1].choices == ("blue", "red", "green") and report.items[1].subject is None


def test_parquet_open_answers_from_pandas(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"id": ["o1", "o2"], "question": ["Q1?", "Q2?"], "answers": [["a", "A"], ["b"]]})
    frame.to_parquet(tmp_path / "open.parquet")
    report = load_file(tmp_path / "open.parquet")
    assert report.kind == "open" and report.items[0].answers == ("a", "A")


def test_parquet_without_rows_is_empty(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table({"question": pa.array([], pa.string())}), tmp_path / "none.parquet")
    with pytest.raises(DataError, match="none"):
        load_file(tmp_path / "none.parquet")


def test_not_a_parquet_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="Expected a Parquet file"):
        load_file(write_text(tmp_path / "fake.parquet", "question,choices\n"))


# ----------------------------------------------------------------------------- whole-file errors


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="does not exist"):
        load_file(tmp_path / "nope.jsonl")


@pytest.mark.parametrize(
    "name, text, pattern",
    [
        ("empty.jsonl", "", "the file is empty"),
        ("blank.jsonl", "\n\n  \n", "only blank lines"),
        ("empty.csv", "", "the file is empty"),
        ("blank.csv", "\n\n", "header row"),
        ("header.csv", "question,choices,answer\n", "it has none"),
    ],
)
def test_empty_files(tmp_path: Path, name: str, text: str, pattern: str) -> None:
    with pytest.raises(DataError, match=pattern):
        load_file(write_text(tmp_path / name, text))


def test_missing_column_lists_existing_columns_and_mapping(tmp_path: Path) -> None:
    path = write_text(tmp_path / "cols.csv", "prompt,options,gold\nhi,a|b,0\n")
    with pytest.raises(DataError) as info:
        load_file(path, kind="mc", mapping="choices=options")
    message = str(info.value)
    assert "question" in message and "answer" in message  # the missing ones
    assert "prompt, options, gold" in message  # what exists
    assert "choices=options" in message  # the mapping used


def test_auto_kind_without_usable_columns(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="Expected multiple-choice columns .* or open-answer column"):
        load_file(write_text(tmp_path / "x.csv", "a,b\n1,2\n"))


def test_explicit_kind_overrides_detection(tmp_path: Path) -> None:
    path = write_text(tmp_path / "open.csv", "question,answers\nQ?,a\n")
    with pytest.raises(DataError, match="choices"):
        load_file(path, kind="mc")
    with pytest.raises(DataError, match="kind"):
        load_file(path, kind="essay")


def test_explicitly_mapped_id_column_must_exist(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "mc.jsonl", MC_ROWS)
    with pytest.raises(DataError, match="qid"):
        load_file(path, mapping="id=qid")


def test_zero_valid_rows_shows_first_errors(tmp_path: Path) -> None:
    rows = [{"question": f"q{i}", "choices": ["a", "b"], "answer": 7} for i in range(8)]
    with pytest.raises(DataError) as info:
        load_file(write_jsonl(tmp_path / "allbad.jsonl", rows))
    message = str(info.value)
    assert "all 8 were rejected" in message
    assert "allbad.jsonl, row 1, field `answer`" in message and "and 3 more" in message


def test_unknown_extension_needs_fmt(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "data.txt", MC_ROWS)
    with pytest.raises(DataError, match="fmt"):
        load_file(path)
    assert len(load_file(path, fmt="jsonl").items) == 3
    assert detect_format("x.PARQUET") == "parquet"


# ----------------------------------------------------------------------------- limit


def test_limit_takes_first_valid_items_in_file_order(tmp_path: Path) -> None:
    bad = {"question": "broken", "choices": ["a"], "answer": 0}
    rows = [bad, MC_ROWS[0], bad, MC_ROWS[1], MC_ROWS[2]]
    report = load_file(write_jsonl(tmp_path / "lim.jsonl", rows), limit=2)
    assert [i.id for i in report.items] == ["q1", "q2"]
    assert [e.row for e in report.rejected] == [1, 3]  # rows after the limit are not read


@pytest.mark.parametrize("limit", [0, -1, 1.5, True])
def test_bad_limit(tmp_path: Path, limit: object) -> None:
    with pytest.raises(DataError, match="limit"):
        load_file(write_jsonl(tmp_path / "mc.jsonl", MC_ROWS), limit=limit)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- ColumnMapping


def test_mapping_parse_and_back() -> None:
    mapping = ColumnMapping.parse("question=q, choices=A|B|C|D, answer=label, id=")
    assert mapping.question == "q" and mapping.choices == ("A", "B", "C", "D") and mapping.id is None
    assert mapping.answers == "answers" and mapping.subject == "subject"  # defaults kept
    assert ColumnMapping.parse(mapping.to_text()) == mapping
    assert ColumnMapping.from_dict(json.loads(json.dumps(mapping.to_dict()))) == mapping


def test_mapping_single_column_tuple_means_list_column() -> None:
    assert ColumnMapping(choices=("opts",)).choices == "opts"
    assert ColumnMapping.parse("").choices == "choices"


@pytest.mark.parametrize(
    "text, pattern",
    [
        ("qestion=q", "question, choices, answer, id, subject, answers"),
        ("question", "key=column"),
        ("question=a, question=b", "once"),
        ("answer=", "column name"),
        ("choices=A|A", "distinct"),
    ],
)
def test_mapping_parse_errors(text: str, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        ColumnMapping.parse(text)


# ----------------------------------------------------------------------------- HF datasets


def test_hf_save_to_disk_round_trip(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    rows = {k: [r.get(k) for r in MC_ROWS] for k in ("id", "question", "choices", "answer")}
    rows["answer"] = [1, 0, 1]
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "single"))
    report = load_hf(tmp_path / "single")
    assert [i.id for i in report.items] == ["q1", "q2", "q3"] and report.items[0].choices == ("3", "4", "5")
    assert str(tmp_path / "single") in report.name


def test_hf_dataset_dict_needs_a_known_split(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    part = datasets.Dataset.from_dict({"question": ["Q?", "R?"], "answers": [["a"], ["b", "B"]]})
    datasets.DatasetDict({"train": part, "test": part.select([1])}).save_to_disk(str(tmp_path / "dd"))
    report = load_hf(tmp_path / "dd", split="test", limit=5)
    assert report.kind == "open" and report.items[0].answers == ("b", "B")
    with pytest.raises(DataError, match="train, test|test, train"):
        load_hf(tmp_path / "dd")


def test_hf_hub_offline_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("datasets")
    import calm_core.data.hf as hf

    monkeypatch.setattr(hf, "_hub_reachable", lambda datasets: False)
    with pytest.raises(DataError, match="save_to_disk") as info:
        load_hf("someone/some_dataset", split="test")
    assert "Traceback" not in str(info.value) and info.value.__cause__ is None


def test_hf_bad_names(tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    with pytest.raises(DataError, match="neither"):
        load_hf("./no/such/folder")
    (tmp_path / "plain").mkdir()
    with pytest.raises(DataError, match="save_to_disk"):
        load_hf(tmp_path / "plain")


def test_hf_without_datasets_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` raise ImportError
    with pytest.raises(DataError, match=r"calm-studio\[hf\]"):
        load_hf("anything")


def test_peek_columns_names_the_first_readable_record(tmp_path) -> None:
    from calm_core.data.readers import peek_columns

    path = tmp_path / "d.jsonl"
    path.write_text('not json\n{"q": "x", "opts": ["a", "b"], "label": 0}\n')
    assert peek_columns(path) == ["q", "opts", "label"]
    csv = tmp_path / "d.csv"
    csv.write_text("question,A,B,answer\nWhat?,x,y,A\n")
    assert peek_columns(csv) == ["question", "A", "B", "answer"]


def test_guess_mapping_reads_common_column_names() -> None:
    from calm_core.data.guess import guess_kind, guess_mapping
    from calm_core.data.mapping import ColumnMapping

    assert guess_mapping(["q", "A", "B", "C", "label"]) == "question=q, choices=A|B|C, answer=label"
    assert guess_mapping(["Question", "options", "answerKey"]) == "question=Question, choices=options, answer=answerKey"
    # `answers=answers` is the default, so the compact string leaves it out; the kind says open.
    assert guess_mapping(["question", "answers"]) == "question=question, choices=choices, answer=answer"
    assert guess_kind(["question", "answers"], ColumnMapping.parse(guess_mapping(["question", "answers"]))) == "open"
    assert guess_mapping(["x", "y"]) == "question=question, choices=choices, answer=answer"  # the defaults to edit
    ColumnMapping.parse(guess_mapping(["q", "a", "b", "label"]))  # always parseable


# ----------------------------------------------------------------------------- what fuzzing found (tests/test_fuzz_data.py)


@pytest.mark.parametrize("answer", ["²", "ß", "ﬀ", "--1", "0" * 5000, " ", ["A"], {"a": 1}])
def test_odd_answers_are_row_errors_not_crashes(tmp_path: Path, answer: object) -> None:
    """"²".isdigit() and "ß".upper() == "SS" once raised ValueError / TypeError mid-load."""
    rows = [MC_ROWS[0], {"id": "odd", "question": "Q?", "choices": ["a", "b"], "answer": answer}]
    report = load_file(write_jsonl(tmp_path / "odd.jsonl", rows))
    assert [i.id for i in report.items] == ["q1"]
    error = report.rejected[0]
    assert (error.row, error.field) == (2, "answer") and error.message.startswith("Expected an index 0..1, a letter A..B")
    assert len(str(error)) < 200  # a 5000-digit cell is not quoted whole


@pytest.mark.parametrize("field, value", [("question", "caf\udce9"), ("choices", ["a", "b\udc80"]), ("id", "\ud800")])
def test_text_with_lone_surrogates_is_rejected(tmp_path: Path, field: str, value: object) -> None:
    """JSON may escape a lone surrogate; kept, it made save_upload fail with UnicodeEncodeError."""
    row = {**MC_ROWS[1], field: value}
    report = load_file(write_jsonl(tmp_path / "sur.jsonl", [MC_ROWS[0], row]))  # json.dumps escapes it
    assert [i.id for i in report.items] == ["q1"]
    assert report.rejected[0].field == field and "undecodable bytes" in report.rejected[0].message


@pytest.mark.parametrize("value", [["a", "b"], {"x": 1}])
def test_a_list_or_dict_is_not_question_text(tmp_path: Path, value: object) -> None:
    report = load_file(write_jsonl(tmp_path / "nested.jsonl", [MC_ROWS[0], {**MC_ROWS[1], "question": value}]))
    assert len(report.items) == 1
    assert report.rejected[0].field == "question"
    assert report.rejected[0].message == f"Expected a non-empty string, but got a {type(value).__name__}"


def test_one_choice_row_says_how_many_choices(tmp_path: Path) -> None:
    report = load_file(write_jsonl(tmp_path / "one.jsonl", [MC_ROWS[0], {**MC_ROWS[1], "choices": ["Paris"]}]))
    assert str(report.rejected[0]) == "one.jsonl, row 2, field `choices`: Expected at least 2 choices, but got 1"


def test_deep_json_and_huge_numbers_are_row_errors(tmp_path: Path) -> None:
    """json.loads raises RecursionError and a plain ValueError (4300-digit limit) here."""
    path = tmp_path / "deep.jsonl"
    path.write_bytes(json.dumps(MC_ROWS[0]).encode() + b"\n" + b"[" * 5000 + b"\n"
                     + b'{"question": "q", "choices": ["a", "b"], "answer": 1' + b"0" * 5000 + b"}\n")
    report = load_file(path)
    assert len(report.items) == 1
    assert [(e.row, e.message) for e in report.rejected] == [
        (2, "Expected valid JSON, but got a number or nesting too large to read"),
        (3, "Expected valid JSON, but got a number or nesting too large to read")]


def test_deeply_nested_list_text_in_a_csv_cell_is_read_as_text(tmp_path: Path) -> None:
    path = write_text(tmp_path / "deep.csv", f"question,choices,answer\nQ?,{'[' * 5000},0\nR?,a|b,1\n")
    report = load_file(path)
    assert [i.question for i in report.items] == ["R?"]
    assert report.rejected[0].row == 1 and report.rejected[0].field == "choices"


def test_csv_undecodable_row_is_a_row_error_not_the_whole_file(tmp_path: Path) -> None:
    path = tmp_path / "latin.csv"
    path.write_bytes(b"question,choices,answer\nQ1?,a|b,0\nCaf\xe9?,a|b,1\nQ3?,c|d,1\n")
    report = load_file(path)
    assert [i.question for i in report.items] == ["Q1?", "Q3?"]
    assert str(report.rejected[0]) == "latin.csv, row 2, field `question`: Expected UTF-8 text, but got undecodable bytes"


def test_csv_undecodable_header_is_one_clear_data_error(tmp_path: Path) -> None:
    path = tmp_path / "header.csv"
    path.write_bytes(b"qu\xe9stion,choices,answer\nQ?,a|b,0\n")
    with pytest.raises(DataError) as info:
        load_file(path)
    first, way_out = str(info.value).splitlines()
    assert first == f"Expected a UTF-8 header row in {path}, but it holds undecodable bytes (save it as UTF-8)"
    assert way_out.startswith("The file is not UTF-8 text") and "--encoding" in way_out  # data/encoding.py


def test_csv_repeated_column_names_are_refused(tmp_path: Path) -> None:
    """dict(zip(header, cells)) kept the last `q` and dropped the first without a word."""
    path = write_text(tmp_path / "twice.csv", "q,q,choices,answer,,\nA?,B?,a|b,0,,\n")
    with pytest.raises(DataError, match=r"Expected distinct column names in .*twice\.csv, but q is at columns 1 and 2: rename all but one"):
        load_file(path, mapping="question=q")


def test_mapping_errors_are_data_errors() -> None:
    """The project's own error class, so every caller's `except DataError` sees them."""
    for text in ("qestion=q", "question", "choices=A|A", "choices=A|"):
        with pytest.raises(DataError):
            ColumnMapping.parse(text)


def test_parquet_damaged_data_pages_give_rows_or_a_data_error(tmp_path: Path) -> None:
    """Every one-byte damage in the first data pages (footer intact): a report or one
    DataError. A bad dictionary index once escaped as pyarrow's ArrowInvalid mid-read."""
    pd = pytest.importorskip("pandas")
    path = tmp_path / "broken.parquet"
    pd.DataFrame({"question": [f"Q{i}?" for i in range(50)], "choices": [["a", "b"]] * 50,
                  "answer": [0] * 50}).to_parquet(path)
    clean = path.read_bytes()
    outcomes = set()
    for position in range(4, 64):
        for value in (0x00, 0x7F, 0xFF):
            path.write_bytes(clean[:position] + bytes([value]) + clean[position + 1:])
            try:
                report = load_file(path)
            except DataError as exc:
                assert "broken.parquet" in str(exc) and "ArrowInvalid" not in str(exc)
                outcomes.add("refused")
            else:
                assert len(report.items) + report.n_rejected == 50
                outcomes.add("loaded")
    assert outcomes == {"refused", "loaded"}  # the damage reached both outcomes


# ----------------------------------------------------------------------------- uploads: format and names


def test_upload_format_comes_from_the_original_name_even_when_not_ascii(tmp_path: Path) -> None:
    """The Data page once took the suffix of safe_name("日本.csv") == "csv": none, so JSONL."""
    from calm_core.data.readers import stage_upload

    data = "q,A,B,label\n2 + 2?,4,5,A\n首都は?,東京,大阪,A\n".encode()
    path = stage_upload("日本.csv", data, tmp_path)
    assert path.suffix == ".csv"
    report = load_file(path, mapping="question=q, choices=A|B, answer=label", name="日本.csv", source="日本.csv")
    assert [i.question for i in report.items] == ["2 + 2?", "首都は?"] and report.items[1].choices == ("東京", "大阪")


@pytest.mark.parametrize("name, head, suffix", [
    ("日本.csv", b'{"question": 1}', ".csv"),  # the name wins over the content
    ("データ.JSONL", b"q,A", ".jsonl"),
    ("データ", b'\xef\xbb\xbf  {"question": "Q?"}', ".jsonl"),
    ("données", b"PAR1\x15\x04", ".parquet"),
    ("数据.txt", b'[{"question": "Q?"}]', ".json"),
    ("表", "問題,A,B\n".encode(), ".csv"),
    ("", b"", ".csv"),
])
def test_upload_suffix_sniffs_content_when_the_name_has_no_known_suffix(name: str, head: bytes, suffix: str) -> None:
    from calm_core.data.readers import upload_suffix

    assert upload_suffix(name, head) == suffix


def test_source_names_the_upload_not_its_temporary_copy(tmp_path: Path) -> None:
    path = write_text(tmp_path / "upload.csv", "q,A,B,label\nQ?,a,b,A\nR?,a,b,Z\n")
    report = load_file(path, mapping="question=q, choices=A|B, answer=label", source="日本.csv")
    assert str(report.rejected[0]).startswith("日本.csv, row 2, field `label`: Expected a letter in A..B")
    with pytest.raises(DataError) as info:
        load_file(path, mapping="question=nope", source="日本.csv")
    assert "日本.csv" in str(info.value) and str(tmp_path) not in str(info.value)
    empty = write_text(tmp_path / "empty.csv", "")
    with pytest.raises(DataError, match="^Expected data rows in 日本.csv, but the file is empty$"):
        load_file(empty, source="日本.csv")


# ----------------------------------------------------------------------------- answer forms (issue 14)


@pytest.mark.parametrize("form, answers, gold", [
    ("index0", ["0", "3", 2], [0, 3, 2]),
    ("index1", ["1", "4", 3.0], [0, 3, 2]),
    ("letter", ["a", "D", "C"], [0, 3, 2]),
    ("text", ["10", "40", "30"], [0, 3, 2]),  # numeric options: "auto" would read "10" as an index
])
def test_answer_forms(form: str, answers: list, gold: list, tmp_path: Path) -> None:
    rows = [{"question": f"Q{i}?", "choices": ["10", "20", "30", "40"], "answer": a} for i, a in enumerate(answers)]
    report = load_file(write_jsonl(tmp_path / "f.jsonl", rows), mapping=f"answer_form={form}")
    assert [it.answer for it in report.items] == gold and not report.rejected


@pytest.mark.parametrize("form, answer, message", [
    ("index0", "4", "Expected a 0-based index in 0..3, but got '4'"),
    ("index1", 0, "Expected a 1-based number in 1..4, but got 0"),
    ("index1", "B", "Expected a 1-based number in 1..4, but got 'B'"),
    ("letter", "1", "Expected a letter in A..D, but got '1'"),
    ("text", "50", "Expected the text of one of the options, but got '50'"),
    ("index1", None, "Expected a 1-based number in 1..4, but got None"),
])
def test_answer_form_errors_name_the_form(form: str, answer: object, message: str, tmp_path: Path) -> None:
    good = {"index0": 1, "index1": 1, "letter": "A", "text": "20"}[form]
    rows = [{"question": "Q?", "choices": ["10", "20", "30", "40"], "answer": answer},
            {"question": "R?", "choices": ["10", "20", "30", "40"], "answer": good}]
    report = load_file(write_jsonl(tmp_path / "f.jsonl", rows), mapping=f"answer_form={form}", kind="mc")
    assert [(e.row, e.field, e.message) for e in report.rejected] == [(1, "answer", message)]


def test_label_form_reads_arc_numeric_labels(tmp_path: Path) -> None:
    """ARC has rows labelled 1..4: "auto" would take answerKey "3" as the 0-based index 3."""
    rows = [{"question": "Q?", "choices": {"text": ["a", "b", "c", "d"], "label": ["1", "2", "3", "4"]}, "answerKey": "3"},
            {"question": "R?", "choices": {"text": ["a", "b"], "label": ["A", "B"]}, "answerKey": "B"},
            {"question": "S?", "choices": {"text": ["a", "b"], "label": ["A", "B"]}, "answerKey": "Z"},
            {"question": "T?", "choices": {"text": ["a", "b"]}, "answerKey": "A"}]
    path = write_jsonl(tmp_path / "arc.jsonl", rows)
    report = load_file(path, mapping="choices=choices.text, answer=answerKey, answer_form=label, labels=choices.label")
    assert [it.answer for it in report.items] == [2, 1]
    assert [(e.row, e.field) for e in report.rejected] == [(3, "answerKey"), (4, "choices.label")]
    assert "Expected one of the option labels (A, B), but got 'Z'" in report.rejected[0].message
    assert load_file(path, mapping="choices=choices.text, answer=answerKey").items[0].answer == 3  # the old trap


def test_mapping_answer_form_and_labels_keys() -> None:
    mapping = ColumnMapping.parse("choices=choices.text, answer=answerKey, answer_form=LABEL, labels=choices.label")
    assert mapping.answer_form == "label" and mapping.labels == "choices.label"
    assert ColumnMapping.parse(mapping.to_text()) == mapping and mapping.text_round_trips()
    assert ColumnMapping.from_dict(json.loads(json.dumps(mapping.to_dict()))) == mapping
    assert mapping.required_columns("mc")[-1] == "choices.label"
    with pytest.raises(DataError, match="Expected `answer_form` to be one of auto, index0, index1, letter, text, label"):
        ColumnMapping.parse("answer_form=base1")
    with pytest.raises(DataError, match="Expected `labels` to name the column of option labels"):
        ColumnMapping.parse("answer_form=label")
    with pytest.raises(DataError, match="at least 2 option columns"):
        ColumnMapping(choices=())
    assert ColumnMapping().to_text() == "question=question, choices=choices, answer=answer"  # only what differs
    assert not ColumnMapping(question="a,b").text_round_trips()


def test_whole_file_errors_say_what_to_change(tmp_path: Path) -> None:
    """The issue's message named a temporary path and no fix: the source name and the fix now."""
    path = write_text(tmp_path / "upload.csv", "prompt,opt1,opt2,label\nQ?,a,b,1\n")
    with pytest.raises(DataError) as info:
        load_file(path, mapping="question=prompt", source="my quiz.csv")
    message = str(info.value)
    assert "in my quiz.csv" in message and str(tmp_path) not in message
    assert "Choose the option columns in order (choices=opt1|opt2|..." in message
