"""Tests for calm_core.data.stream: LazyItems give the eager loader's items and rejected
rows, read any row on demand, and hold an index whose size is fixed per row.

(tests/test_loaders.py runs every loader test under both loaders as well.)
Run: pytest tests/test_stream.py -q
"""

from __future__ import annotations

import json
import pickle
import random
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from calm_core.data import stream
from calm_core.data.hf import load_hf
from calm_core.data.loaders import load_file
from calm_core.data.mapping import ColumnMapping
from calm_core.data.schema import DataError, MCItem
from calm_core.data.stream import INDEX_BYTES_PER_ROW, LazyItems


def mc_row(n: int, **changes) -> dict:
    row = {"id": f"q{n}", "question": f"Question {n}, café?", "choices": [f"a{n}", f"b{n}", f"c{n}"][: 2 + n % 2],
           "answer": n % 2, "subject": "s" if n % 3 else None}
    return {**row, **changes}


def messy_lines() -> list[str]:
    """Valid rows among every kind of rejection the loaders know, plus repeated ids."""
    lines = [json.dumps(mc_row(n)) for n in range(40)]
    lines[3] = "{not json"
    lines[5] = ""  # blank: skipped, still counted as a line
    lines[8] = "[1, 2]"
    lines[11] = json.dumps(mc_row(11, choices=["only"]))
    lines[14] = json.dumps(mc_row(14, answer=7))
    lines[17] = json.dumps(mc_row(2))  # repeats q2
    lines[20] = json.dumps(mc_row(2))  # and again
    lines[23] = json.dumps(mc_row(23, id=None))  # no id: made from the file and row
    lines[26] = json.dumps(mc_row(26, question=["a list"]))
    return lines


def write_lines(path: Path, lines: list[str], end: str = "\n") -> Path:
    path.write_bytes(("\n".join(lines) + end).encode("utf-8"))
    return path


def both(path: Path, **kwargs):
    """(eager report, streamed report) of one file."""
    eager, lazy = load_file(path, stream=False, **kwargs), load_file(path, stream=True, **kwargs)
    assert isinstance(eager.items, list) and isinstance(lazy.items, LazyItems)
    return eager, lazy


def assert_same(eager, lazy) -> None:
    assert lazy.kind == eager.kind
    assert list(lazy.items) == eager.items
    assert lazy.rejected == eager.rejected
    assert (lazy.n_rows, lazy.summary()) == (eager.n_rows, eager.summary())
    assert lazy.rejection_lines() == eager.rejection_lines()


# ----------------------------------------------------------------------------- lazy == eager


def test_jsonl_items_and_rejections_match_the_eager_loader(tmp_path: Path) -> None:
    eager, lazy = both(write_lines(tmp_path / "messy.jsonl", messy_lines()))
    assert_same(eager, lazy)
    reasons = {e.row: e for e in lazy.rejected}
    assert set(reasons) == {4, 9, 12, 15, 18, 21, 27}
    assert reasons[18].field == "id" and "row 3" in reasons[18].message and "row 3" in reasons[21].message
    assert "messy.jsonl-24" in [i.id for i in lazy.items]


@pytest.mark.parametrize("limit", [1, 3, 4, 16, 17, 30, 33, 100])
def test_limit_stops_where_the_eager_loader_stops(tmp_path: Path, limit: int) -> None:
    assert_same(*both(write_lines(tmp_path / "messy.jsonl", messy_lines()), limit=limit))


def test_many_repeated_ids_under_a_limit(tmp_path: Path) -> None:
    lines = [json.dumps(mc_row(n % 7)) for n in range(200)] + [json.dumps(mc_row(n)) for n in range(7, 30)]
    for limit in (5, 7, 8, 20):
        assert_same(*both(write_lines(tmp_path / "dups.jsonl", lines), limit=limit))


def test_parquet_matches_across_row_groups(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [mc_row(n) for n in range(50)] + [mc_row(3)] + [mc_row(60, choices=["one"])]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "mc.parquet", row_group_size=7)
    eager, lazy = both(tmp_path / "mc.parquet")
    assert_same(eager, lazy)
    assert lazy.items.source.parquet.metadata.num_row_groups == 8
    order = list(range(len(eager.items)))
    random.Random(0).shuffle(order)
    assert lazy.items.take(order) == [eager.items[i] for i in order]  # every group, out of order


def test_csv_matches_with_quoted_newlines_bom_and_bad_rows(tmp_path: Path) -> None:
    text = ("\ufeffid,q,A,B,C,label\n"
            'r1,"Two\nlines?",x,y,,B\n'
            "r2,Too,many,fields,here,A,extra\n"
            "\n"
            'r3,"Quote ""inside""",p,q,r,C\r\n'
            "r4,One option,x,,,A\n"
            "r1,Again,x,y,z,A\n")
    path = tmp_path / "quiz.csv"
    path.write_bytes(text.encode("utf-8") + b"r5,caf\xe9,x,y,z,A\n" + b"r6,Last,x,y,z,C")
    mapping = ColumnMapping.parse("question=q, choices=A|B|C, answer=label")
    eager, lazy = both(path, mapping=mapping)
    assert_same(eager, lazy)
    assert [i.id for i in lazy.items] == ["r1", "r3", "r6"] and lazy.items[0].question == "Two\nlines?"
    assert lazy.items[1].question == 'Quote "inside"'


@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"])
def test_csv_streams_under_every_line_end(tmp_path: Path, end: str) -> None:
    """A CSV saved with old-Mac line ends (a lone \\r) once failed to stream: the key was a
    text handle's `tell()` cookie, not a byte offset. Every line end, with a quoted cell
    that spans lines, now streams to the eager loader's items."""
    rows = ["id,q,A,B,label", 'r1,"Two' + end + 'lines?",x,y,B', "r2,Short,x,A", "r3,Third,p,q,A"]
    path = tmp_path / "quiz.csv"
    path.write_bytes((end.join(rows) + end).encode("utf-8"))
    eager, lazy = both(path, mapping=ColumnMapping.parse("question=q, choices=A|B, answer=label"))
    assert_same(eager, lazy)
    assert [i.id for i in lazy.items] == ["r1", "r3"] and lazy.items[0].question == f"Two{end}lines?"


def test_kind_decided_by_columns_that_appear_late(tmp_path: Path) -> None:
    lines = [json.dumps({"id": f"o{n}", "question": "Q?", "answers": ["x"]}) for n in range(30)]
    lines.append(json.dumps(mc_row(1)))  # the choices column appears on row 31: the file is "mc"
    eager, lazy = both(write_lines(tmp_path / "late.jsonl", lines))
    assert eager.kind == "mc" and len(eager.items) == 1
    assert_same(eager, lazy)
    assert_same(*both(write_lines(tmp_path / "late.jsonl", lines), limit=1))


def test_missing_column_error_matches(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "noid.jsonl", [json.dumps(mc_row(n)) for n in range(3)])
    errors = []
    for flag in (False, True):
        with pytest.raises(DataError) as info:
            load_file(path, mapping="id=qid", stream=flag)
        errors.append(str(info.value))
    assert errors[0] == errors[1] and "qid" in errors[0]


@pytest.mark.parametrize("lines", [["", "  "], ["{bad", "[]"]])
def test_files_without_a_valid_row_fail_the_same(tmp_path: Path, lines: list[str]) -> None:
    path = write_lines(tmp_path / "none.jsonl", lines)
    errors = []
    for flag in (False, True):
        with pytest.raises(DataError) as info:
            load_file(path, stream=flag)
        errors.append(str(info.value))
    assert errors[0] == errors[1]


def test_torn_last_line_is_rejected_and_a_last_line_without_newline_is_read(tmp_path: Path) -> None:
    lines = [json.dumps(mc_row(n)) for n in range(5)]
    torn = write_lines(tmp_path / "torn.jsonl", lines + [json.dumps(mc_row(5))[:25]], end="")
    eager, lazy = both(torn)
    assert_same(eager, lazy)
    assert lazy.rejected[0].row == 6 and "valid JSON" in lazy.rejected[0].message
    whole = write_lines(tmp_path / "whole.jsonl", lines, end="")  # no newline at the end, nothing torn
    eager, lazy = both(whole)
    assert_same(eager, lazy)
    assert lazy.items[-1] == MCItem("q4", "Question 4, café?", ("a4", "b4"), 0, "s")


def test_hf_dataset_streams_the_same(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    rows = [mc_row(n) for n in range(20)] + [mc_row(4), mc_row(30, answer=9)]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "set"))
    eager, lazy = load_hf(tmp_path / "set", stream=False), load_hf(tmp_path / "set", stream=True)
    assert isinstance(lazy.items, LazyItems)
    assert_same(eager, lazy)
    assert lazy.items[-3:] == eager.items[-3:]


# ----------------------------------------------------------------------------- the sequence


def test_random_access_slices_and_negative_indices(tmp_path: Path) -> None:
    eager, lazy = both(write_lines(tmp_path / "messy.jsonl", messy_lines()))
    items, expected = lazy.items, eager.items
    for i in random.Random(1).sample(range(len(expected)), 10):
        assert items[i] == expected[i]
    assert items[-1] == expected[-1] and items[-len(expected)] == expected[0]
    with pytest.raises(IndexError):
        items[len(expected)]
    view = items[3:20:2]
    assert isinstance(view, LazyItems) and list(view) == expected[3:20:2]
    assert list(items[::-1]) == expected[::-1] and list(items[5:2]) == []
    assert [len(chunk) for chunk in items.chunks(8)] == [8, 8, 8, len(expected) - 24]
    assert items.max_choices == max(i.n_choices for i in expected) == 3


def test_pickles_and_reads_after_unpickling(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.Table.from_pylist([mc_row(n) for n in range(20)]), tmp_path / "p.parquet", row_group_size=6)
    for path in (write_lines(tmp_path / "j.jsonl", messy_lines()), tmp_path / "p.parquet"):
        items = load_file(path, stream=True).items
        items[0]  # a cached row group is not pickled
        assert pickle.loads(pickle.dumps(items)) == items


def test_a_changed_file_is_refused_not_misread(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "changing.jsonl", [json.dumps(mc_row(n)) for n in range(10)])
    items = load_file(path, stream=True).items
    assert items[9].id == "q9"
    write_lines(path, [json.dumps(mc_row(n + 100)) for n in range(10)])
    with pytest.raises(DataError, match="changed"):
        items[9]


def test_items_stay_readable_after_the_file_name_is_removed(tmp_path: Path) -> None:
    """The studio indexes an upload in a temporary folder and removes it before the items
    are previewed and saved: the open file keeps serving them."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [mc_row(n) for n in range(30)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "gone.parquet", row_group_size=8)
    (tmp_path / "gone.csv").write_text("id,question,choices,answer\n" + "".join(f"c{n},Q {n}?,x|y,B\n" for n in range(30)))
    for path in (write_lines(tmp_path / "gone.jsonl", [json.dumps(r) for r in rows]), tmp_path / "gone.csv",
                 tmp_path / "gone.parquet"):
        eager, lazy = both(path)
        path.unlink()
        assert list(lazy.items) == eager.items and lazy.items[-1] == eager.items[-1]


def test_default_streams_large_files_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_lines(tmp_path / "some.jsonl", [json.dumps(mc_row(n)) for n in range(10)])
    assert isinstance(load_file(path).items, list)  # far below STREAM_FROM_BYTES
    monkeypatch.setattr("calm_core.data.loaders.STREAM_FROM_BYTES", path.stat().st_size)
    assert isinstance(load_file(path).items, LazyItems)


def test_catalog_slices_stay_lazy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from calm_core.data.catalog import load_dataset

    path = write_lines(tmp_path / "sliced.jsonl", messy_lines())
    monkeypatch.setattr("calm_core.data.loaders.STREAM_FROM_BYTES", 0)
    report = load_dataset(f"{path}[4:20]", limit=5)
    assert isinstance(report.items, LazyItems)
    assert list(report.items) == load_file(path, stream=False).items[4:20][:5]


# ----------------------------------------------------------------------------- memory


def test_index_holds_fixed_width_numbers_only(tmp_path: Path) -> None:
    items = load_file(write_lines(tmp_path / "messy.jsonl", messy_lines()), stream=True).items
    arrays = {name: value for name, value in vars(items).items() if isinstance(value, np.ndarray)}
    assert set(arrays) == {"numbers", "keys", "widths"}
    assert all(not a.dtype.hasobject for a in arrays.values())
    assert items.index_nbytes == INDEX_BYTES_PER_ROW * len(items) == sum(a.nbytes for a in arrays.values())
    assert set(vars(items)) - set(arrays) == {"source", "convert"}
    assert not any(isinstance(value, list) for value in vars(items.source).values())  # no per-row Python objects


def allocated_peak(path: Path, streamed: bool) -> int:
    """Bytes allocated at the peak of loading `path` (tracemalloc counts numpy's buffers too)."""
    tracemalloc.start()
    try:
        report = load_file(path, stream=streamed)
        assert len(report.items) > 0
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_peak_memory_per_extra_row_is_the_index_not_the_items(tmp_path: Path) -> None:
    """Doubling the rows adds a few dozen bytes a row to the streamed load's peak (index,
    id hashes, their sort) and the items' full size to the eager one's: counted bytes,
    not time, so the check does not depend on the machine's load."""
    small, large = 4000, 8000
    paths = {n: write_lines(tmp_path / f"rows{n}.jsonl", [json.dumps(mc_row(i)) for i in range(n)])
             for n in (small, large)}
    per_row = {flag: (allocated_peak(paths[large], flag) - allocated_peak(paths[small], flag)) / (large - small)
               for flag in (False, True)}
    assert per_row[True] < 8 * INDEX_BYTES_PER_ROW
    assert per_row[False] > 10 * per_row[True]  # the check can fail: eager keeps every item


def test_helpers_treat_lists_and_lazy_items_alike(tmp_path: Path) -> None:
    eager, lazy = both(write_lines(tmp_path / "messy.jsonl", messy_lines()))
    assert stream.max_choices(lazy.items) == stream.max_choices(eager.items) == 3
    assert list(stream.subset(lazy.items, [4, 0, 2])) == stream.subset(eager.items, [4, 0, 2])
    assert [list(c) for c in stream.chunks(lazy.items, 10)] == [list(c) for c in stream.chunks(eager.items, 10)]


def test_an_unknown_format_is_refused_by_both_openers(tmp_path: Path) -> None:
    """A format missing from `readers.FILE_FORMATS` is refused by the whole read and the
    streaming read alike, never read as JSONL once a file is large enough to stream."""
    from calm_core.data import readers
    from calm_core.data.schema import DataError

    path = tmp_path / "rows.xml"
    path.write_text('{"question": "q", "choices": ["a", "b"], "answer": 0}\n')
    for opener in (readers.open_table, readers.open_source):
        with pytest.raises(DataError, match=r"Expected a file format among \['csv', 'jsonl', 'parquet'\], but got 'xml'"):
            opener(path, "xml")
