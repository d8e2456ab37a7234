"""The mapping guess (issue 14, item 1): each common layout loads every row, with no syntax typed.

For each layout a tiny file is written; `guess_column_mapping` sees its column names and
first records (as the Data page does), and the guessed mapping must load every row with
the right gold option. Then the Data page's widget values (`form_values`) and back
(`mapping_from_form`) must give the same mapping, and the widgets' errors say what to set.

    .venv/bin/python -m pytest tests/test_mapping_guess.py -q
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from calm_core.data.guess import column_paths, guess_column_mapping, guess_kind, guess_mapping
from calm_core.data.loaders import load_file
from calm_core.data.mapping import ColumnMapping
from calm_core.data.mapping_form import form_values, mapping_from_form
from calm_core.data.readers import peek_records
from calm_core.data.schema import DataError

QUIZ = [  # question, options, index of the correct option
    ("What is 2 + 2?", ["3", "4", "5", "6"], 1),
    ("Capital of Peru?", ["Quito", "Lima", "Cusco", "Bogota"], 1),
    ("The red planet?", ["Venus", "Earth", "Mars", "Jupiter"], 2),
    ("Largest ocean?", ["Atlantic", "Indian", "Arctic", "Pacific"], 3),
    ("Frozen water?", ["Ice", "Steam", "Fog", "Dew"], 0),
]
LETTERS = "ABCDE"


def _csv(rows: list[dict]) -> str:
    return pd.DataFrame(rows).to_csv(index=False)


def _jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def _enumerated(prefix: str, tags: str, answer: callable) -> list[dict]:  # type: ignore[valid-type]
    return [{"prompt": q, **{f"{prefix}{t}": o for t, o in zip(tags, opts)}, "label": answer(a, opts)}
            for q, opts, a in QUIZ]


LAYOUTS = {
    # the issue's file: prompt, opt1..opt4, label (1-based)
    "opt1-4, 1-based label": ("quiz.csv", _csv(_enumerated("opt", "1234", lambda a, _: a + 1)),
                              "question=prompt, choices=opt1|opt2|opt3|opt4, answer=label, answer_form=index1"),
    "opt1-4, 0-based label": ("quiz.csv", _csv(_enumerated("opt", "1234", lambda a, _: a)),
                              "question=prompt, choices=opt1|opt2|opt3|opt4, answer=label, answer_form=index0"),
    "A-D, letter answer": ("quiz.csv", _csv([{"question": q, **dict(zip("ABCD", o)), "answer": LETTERS[a]}
                                             for q, o, a in QUIZ]),
                           "question=question, choices=A|B|C|D, answer=answer, answer_form=letter"),
    "option_a-d, text in `correct`": ("quiz.csv", _csv([{"question": q, **{f"option_{t}": x for t, x in zip("abcd", o)},
                                                         "correct": o[a]} for q, o, a in QUIZ]),
                                      "question=question, choices=option_a|option_b|option_c|option_d, answer=correct, "
                                      "answer_form=text"),
    "choices list, answerKey": ("quiz.jsonl", _jsonl([{"question": q, "choices": o, "answerKey": LETTERS[a]}
                                                      for q, o, a in QUIZ]),
                                "question=question, choices=choices, answer=answerKey, answer_form=letter"),
    "choices as a|b|c text, label": ("quiz.csv", _csv([{"q": q, "choices": "|".join(o), "label": a}
                                                       for q, o, a in QUIZ]),
                                     "question=q, choices=choices, answer=label, answer_form=index0"),
    "HF MMLU": ("mmlu.jsonl", _jsonl([{"question": q, "subject": "misc", "choices": o, "answer": a}
                                      for q, o, a in QUIZ]),
                "question=question, choices=choices, answer=answer, answer_form=index0"),
    "HF ARC (one row with numeric labels)": (
        "arc.jsonl",
        _jsonl([{"id": f"arc-{i}", "question": q,
                 "choices": {"text": o, "label": list("1234" if i == 2 else "ABCD")},
                 "answerKey": ("1234" if i == 2 else "ABCD")[a]} for i, (q, o, a) in enumerate(QUIZ)]),
        "question=question, choices=choices.text, answer=answerKey, answer_form=label, labels=choices.label"),
    "CommonsenseQA": (
        "csqa.jsonl",
        _jsonl([{"id": f"cs-{i}", "question": q, "question_concept": "thing",
                 "choices": {"label": list("ABCDE"), "text": [*o, "none of these"]}, "answerKey": LETTERS[a]}
                for i, (q, o, a) in enumerate(QUIZ)]),
        "question=question, choices=choices.text, answer=answerKey, answer_form=label, labels=choices.label"),
    "OpenBookQA": (
        "obqa.jsonl",
        _jsonl([{"id": f"ob-{i}", "question_stem": q, "choices": {"text": o, "label": list("ABCD")},
                 "answerKey": LETTERS[a]} for i, (q, o, a) in enumerate(QUIZ)]),
        "question=question_stem, choices=choices.text, answer=answerKey, answer_form=label, labels=choices.label"),
    "MedMCQA opa-opd, 1-based cop": ("med.csv", _csv([{"question": q, **{f"op{t}": x for t, x in zip("abcd", o)},
                                                        "cop": a + 1} for q, o, a in QUIZ]),
                                     "question=question, choices=opa|opb|opc|opd, answer=cop, answer_form=index1"),
    "PIQA goal, sol1-2": ("piqa.jsonl", _jsonl([{"goal": q, "sol1": o[a], "sol2": o[(a + 1) % 4], "label": 0}
                                                for q, o, a in QUIZ]),
                          "question=goal, choices=sol1|sol2, answer=label, answer_form=index0"),
    "HellaSwag ctx, ending0-3": ("hs.jsonl", _jsonl([{"ctx": q, **{f"ending{i}": x for i, x in enumerate(o)},
                                                      "label": str(a)} for q, o, a in QUIZ]),
                                 "question=ctx, choices=ending0|ending1|ending2|ending3, answer=label, "
                                 "answer_form=index0"),
}


def _write_layout(layout: str, tmp_path: Path) -> Path:
    """LAYOUTS[layout] written to a file of its own name."""
    filename, text, _ = LAYOUTS[layout]
    path = tmp_path / filename
    path.write_text(text, encoding="utf-8")
    return path


def _guess(path: Path) -> tuple[ColumnMapping, list[str]]:
    records = peek_records(path)
    columns = list(dict.fromkeys(k for r in records for k in r))
    return guess_column_mapping(columns, records), column_paths(columns, records)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_the_guess_loads_every_row_of_each_layout(layout: str, tmp_path: Path) -> None:
    path = _write_layout(layout, tmp_path)
    mapping, paths = _guess(path)
    assert mapping.to_text() == LAYOUTS[layout][2]
    assert guess_kind(paths, mapping) == "mc"
    report = load_file(path, kind="mc", mapping=mapping)
    assert report.n_rejected == 0 and len(report.items) == len(QUIZ)
    for item, (question, options, answer) in zip(report.items, QUIZ):
        assert item.question == question
        gold = options[answer]
        assert item.choices[item.answer] == gold, (layout, item)


def test_the_issue_file_needs_no_typed_mapping(tmp_path: Path) -> None:
    """Issue 14: `prompt, opt1..opt4, label` was guessed as `choices=choices` and Validate
    failed with a DataError naming a temporary path. Now the guess is the mapping to use,
    and its string form (`calm eval --mapping`) loads the same items."""
    path = tmp_path / "upload.csv"
    path.write_text(LAYOUTS["opt1-4, 1-based label"][1])
    records = peek_records(path)
    text = guess_mapping(list(records[0]), records)
    assert load_file(path, mapping=text).items == load_file(path, mapping=_guess(path)[0]).items


@pytest.mark.parametrize("rows, expected_kind, answers", [
    ([{"question": "Q?", "answers": ["x", "ex"]}], "open", "answers"),
    ([{"question": "Q?", "answer": "x"}], "open", "answer"),
    ([{"q": "Q?", "aliases": "x|ex"}], "open", "aliases"),
])
def test_open_answer_layouts(rows: list[dict], expected_kind: str, answers: str, tmp_path: Path) -> None:
    path = tmp_path / "open.jsonl"
    path.write_text(_jsonl(rows))
    mapping, paths = _guess(path)
    assert mapping.answers == answers and guess_kind(paths, mapping) == expected_kind
    report = load_file(path, kind=expected_kind, mapping=mapping)
    assert report.items[0].answers[0] == "x"


def test_answer_form_guess_stays_auto_when_the_sample_does_not_say() -> None:
    """Numbers 1..3 of 4 options, no 0 and no 4: 0- or 1-based cannot be told apart."""
    records = [{"q": "Q?", "A": "a", "B": "b", "C": "c", "D": "d", "label": n} for n in (1, 2, 3)]
    assert guess_column_mapping(["q", "A", "B", "C", "D", "label"], records).answer_form == "auto"
    numeric = [{"q": "Q?", "choices": ["10", "20", "30"], "answer": "20"}, {"q": "R?", "choices": ["5", "7"], "answer": "7"}]
    assert guess_column_mapping(["q", "choices", "answer"], numeric).answer_form == "text"  # 20 is no index of 3


@pytest.mark.parametrize("columns", [[], ["", " "], ["A", "A "], ["a,b", "c=d", "x|y"], ["A", "a"], ["1", "2"]])
def test_the_guess_never_raises(columns: list[str]) -> None:
    mapping = guess_column_mapping(columns, [dict.fromkeys(columns, "x")])
    assert isinstance(mapping, ColumnMapping)


def test_column_paths_name_nested_keys() -> None:
    records = [{"id": 1, "choices": {"text": ["a"], "label": ["A"]}, "meta": None}]
    assert column_paths(["id", "choices", "meta"], records) == ["id", "choices", "choices.text", "choices.label", "meta"]


# ----------------------------------------------------------------------------- the Data page's widgets


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_widget_values_round_trip_to_the_same_mapping(layout: str, tmp_path: Path) -> None:
    mapping, paths = _guess(_write_layout(layout, tmp_path))
    assert mapping_from_form(form_values(mapping, paths), paths) == mapping


def test_widget_values_for_what_the_file_lacks_are_unset() -> None:
    values = form_values(ColumnMapping(), ["prompt", "x", "y"])
    assert values["question"] is None and values["list"] is None and values["answer"] is None
    assert values["id"] is None and values["layout"] == "list"


def test_widgets_build_the_mapping_a_person_chose(tmp_path: Path) -> None:
    """Option columns in the order picked (not the file's), a 1-based answer, no id column."""
    path = tmp_path / "quiz.csv"
    path.write_text("id,stem,w,x,y,z,key\nq1,Pick y,w1,x1,y1,z1,3\nq2,Pick z,w2,x2,y2,z2,4\n")
    values = {"kind": "mc", "question": "stem", "layout": "columns", "options": ["w", "x", "y", "z"],
              "answer": "key", "answer_form": "index1", "id": None, "subject": None}
    columns = ["id", "stem", "w", "x", "y", "z", "key"]
    mapping = mapping_from_form(values, columns)
    assert mapping.to_text() == "question=stem, choices=w|x|y|z, answer=key, id=, answer_form=index1"
    items = load_file(path, mapping=mapping).items
    assert [it.choices[it.answer] for it in items] == ["y1", "z2"]
    assert items[0].id == "quiz.csv-1"  # the id column is off: ids from file and row
    reordered = mapping_from_form({**values, "options": ["z", "y", "x", "w"]}, columns)
    assert [it.choices[it.answer] for it in load_file(path, mapping=reordered).items] == ["x1", "w2"]


@pytest.mark.parametrize("values, message", [
    ({"kind": "mc", "question": None}, "Expected a question column, but none is chosen"),
    ({"kind": "mc", "question": "q", "layout": "columns", "options": ["A"]}, "at least 2 option columns"),
    ({"kind": "mc", "question": "q", "layout": "list", "list": None}, "column holding the list of options"),
    ({"kind": "mc", "question": "q", "layout": "list", "list": "c", "answer": None}, "an answer column"),
    ({"kind": "mc", "question": "q", "layout": "list", "list": "c", "answer": "a", "answer_form": "label"},
     "the column of option labels"),
    ({"kind": "open", "question": "q", "answers": None}, "the column of accepted answers"),
])
def test_widget_errors_say_which_widget_to_set(values: dict, message: str) -> None:
    with pytest.raises(DataError, match=message):
        mapping_from_form(values, ["q", "A", "c", "a"])
