"""What a data file may cost (issue 38, items 1 and 2): every limit of calm_core/data/limits.py,
for every format, read whole and streamed. Each refusal is one line naming the limit.

The over-the-wire tests (the running studio, its Data page's uploader) are
tests/test_attacks_uploads.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from calm_core.data import limits, parquet_batches, parquet_sizes
from calm_core.data.loaders import load_file
from calm_core.data.readers import load_records, peek_records
from calm_core.data.schema import DataError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

MAPPING = "choices=A|B"
# The limits as docs/security.md ("Upload budgets") states them; limits.py declares them.
COLUMNS, CELL, ROW_BYTES, JSON_ARRAY = 10_000, 2**20, 8 * 2**20, 64 * 2**20
BIG = "a" * (CELL + 1)  # one cell past the limit
ROW = {"question": "Q?", "A": "x", "B": "y", "answer": 0}


def _refused(path: Path, match: str, mapping: str = MAPPING) -> None:
    """Refused in one line matching `match`: read whole, streamed, and by the Data page's peek."""
    for stream in (False, True):
        with pytest.raises(DataError, match=match) as info:
            load_file(path, mapping=mapping, stream=stream)
        assert "\n" not in str(info.value), str(info.value)
    with pytest.raises(DataError, match=match):
        peek_records(path, rows=20)


def _csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    import csv

    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _parquet(path: Path, table, **options) -> Path:
    pq.write_table(table, path, compression="zstd", **options)
    return path


def bomb(path: Path, value_bytes: int = 2**21, rows: int = 1024) -> Path:
    """Issue 38's Parquet bomb: one long value, dictionary-encoded, used by every row."""
    question = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), pa.array(["a" * value_bytes]))
    table = pa.table({"question": question, "A": ["x"] * rows, "B": ["y"] * rows, "answer": [0] * rows})
    return _parquet(path, table)


# ----------------------------------------------------------------------------- columns


def test_a_csv_wider_than_the_column_cap_is_refused_in_one_line(tmp_path: Path) -> None:
    header = ["question", "A", "B", "answer"] + [f"c{i}" for i in range(COLUMNS)]
    path = _csv(tmp_path / "wide.csv", header, [["Q?", "x", "y", "0"] + [""] * COLUMNS])
    _refused(path, r"^Expected at most 10,000 columns in .*wide\.csv, but it has 10,004: keep only the columns")


def test_a_50000_column_header_is_checked_in_linear_time(tmp_path: Path) -> None:
    """named.count(h) for each h took 30 s on 50,000 columns; now a dict of positions."""
    header = [f"c{i}" for i in range(50_000)]
    path = _csv(tmp_path / "wide.csv", header, [["1"] * 50_000])
    started = time.monotonic()
    with pytest.raises(DataError, match="Expected at most 10,000 columns"):
        load_file(path)
    assert time.monotonic() - started < 2
    started = time.monotonic()
    with pytest.raises(DataError, match=r"c0 is at columns 1, 2001, 4001, 6001 and 8001, c1 at columns 2, "):
        load_file(_csv(tmp_path / "twice.csv", header[:2_000] * 5, []))
    assert time.monotonic() - started < 2


def test_repeated_csv_names_are_named_with_their_positions(tmp_path: Path) -> None:
    path = _csv(tmp_path / "twice.csv", ["question", "B", "A", "x", "B", "answer", "A", "A"], [])
    with pytest.raises(DataError) as info:
        load_file(path)
    assert str(info.value) == (
        f"Expected distinct column names in {path}, but B is at columns 2 and 5, A at columns 3, 7 and 8: rename all "
        "but one of each (say column 5 to B_2) and map the one that holds what you mean"
    )


def test_jsonl_and_json_keys_past_the_column_cap_are_refused(tmp_path: Path) -> None:
    wide = [{**ROW, **{f"k{n}_{i}": 1 for i in range(COLUMNS // 2)}} for n in range(3)]
    _refused(_jsonl(tmp_path / "wide.jsonl", wide), r"^Expected at most 10,000 columns in .*wide\.jsonl")
    path = tmp_path / "wide.json"
    path.write_text(json.dumps(wide))
    with pytest.raises(DataError, match=r"^Expected at most 10,000 columns in .*wide\.json, but it has 10,00"):
        load_file(path, mapping=MAPPING)


def test_a_parquet_file_wider_than_the_column_cap_is_refused(tmp_path: Path) -> None:
    columns = {**{k: [v] for k, v in ROW.items()}, **{f"c{i}": [0] for i in range(COLUMNS)}}
    path = _parquet(tmp_path / "wide.parquet", pa.table(columns))
    _refused(path, r"^Expected at most 10,000 columns in .*wide\.parquet, but it has 10,004")


# ----------------------------------------------------------------------------- cells


def test_a_cell_past_the_limit_is_refused_in_every_format(tmp_path: Path) -> None:
    rows = [dict(ROW), {**ROW, "question": BIG}]
    cell = r"^Expected cells of at most 1 MiB in .*, but row 2's question holds 1,048,577 bytes: shorten it"
    _refused(_csv(tmp_path / "long.csv", list(ROW), [[str(v) for v in r.values()] for r in rows]), cell)
    _refused(_jsonl(tmp_path / "long.jsonl", rows), cell)
    _refused(_parquet(tmp_path / "plain.parquet", pa.Table.from_pylist(rows), use_dictionary=False), cell)
    _refused(_parquet(tmp_path / "dict.parquet", pa.Table.from_pylist(rows)), cell)
    path = tmp_path / "long.json"
    path.write_text(json.dumps(rows))
    with pytest.raises(DataError, match=cell):
        load_file(path, mapping=MAPPING)


def test_a_list_cell_counts_all_its_strings(tmp_path: Path) -> None:
    """A list column (the options) is one cell: a repeated dictionary value inside it too."""
    half = "b" * (CELL // 2 + 1)
    rows = [{"question": "Q?", "choices": [half, half], "answer": 0}]
    match = r"row 1's choices holds 1,048,578 bytes"
    _refused(_jsonl(tmp_path / "list.jsonl", rows), match, mapping="choices=choices")
    _refused(_parquet(tmp_path / "list.parquet", pa.Table.from_pylist(rows)), match, mapping="choices=choices")


def test_the_parquet_bomb_is_refused_before_it_expands(tmp_path: Path) -> None:
    """Issue 38: 1,024 rows of one 2 MiB value took 2.1 GB. Counted from the dictionary, the
    first row is refused before any row is made: the read stays far below one expansion."""
    import resource

    path = bomb(tmp_path / "bomb.parquet")
    assert path.stat().st_size < 2000
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    _refused(path, r"^Expected cells of at most 1 MiB in .*bomb\.parquet, but row 1's question holds 2,097,152")
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    assert grown < 100 * 2**20, f"peak memory grew by {grown / 2**20:.0f} MiB"


def test_the_bomb_written_without_arrow_schema_is_refused_too(tmp_path: Path) -> None:
    """A file from another writer has no Arrow schema saying "dictionary": the reader asks
    for dictionaries itself (`files.open_parquet`), so Arrow never expands the value."""
    path = bomb(tmp_path / "bomb.parquet")
    plain = tmp_path / "bare.parquet"
    table = pq.read_table(path)
    pq.write_table(table, plain, compression="zstd", store_schema=False)
    assert not pq.ParquetFile(plain).schema_arrow.field("question").type.equals(table.schema.field("question").type)
    _refused(plain, r"row 1's question holds 2,097,152")


# ----------------------------------------------------------------------------- rows


def test_a_row_past_the_limit_is_refused_in_every_format(tmp_path: Path) -> None:
    cells = ROW_BYTES // CELL + 1  # each cell within its limit, the row not
    wide = {"question": "Q?", "answer": 0, **{f"c{i}": "a" * CELL for i in range(cells)}}
    header = list(wide) + ["A", "B"]
    rows = [dict(ROW), {**wide, "A": "x", "B": "y"}]
    match = r"^Expected rows of at most 8 MiB in .*, but row 2 holds more: shorten its cells or split the row"
    _refused(_csv(tmp_path / "wide.csv", header, [[str(r.get(h, "")) for h in header] for r in rows]), match)
    _refused(_jsonl(tmp_path / "wide.jsonl", rows), match)
    _refused(_parquet(tmp_path / "wide.parquet", pa.Table.from_pylist([{**r, **wide} for r in rows][1:] * 2)),
             r"row 1 holds more")  # fmt: skip


def test_a_line_past_the_row_limit_is_never_held_whole(tmp_path: Path) -> None:
    """A 40 MB line without a newline: refused after reading MAX_ROW_BYTES of it."""
    for name in ("long.jsonl", "long.csv"):
        path = tmp_path / name
        path.write_bytes(b"question,A,B,answer\n" * name.endswith(".csv") + b"x" * (40 * 2**20))
        match = r"^Expected rows of at most 8 MiB in .*, but row 1 holds more"
        _refused(path, match)


# ----------------------------------------------------------------------------- files


def test_a_parquet_file_past_its_expansion_is_refused(tmp_path: Path) -> None:
    """Cells and rows within their limits, but 100 rows of one 1 MiB value: 100 MiB from
    a file of a few KB, past max(64 MiB, 64 x its size)."""
    path = bomb(tmp_path / "wide.parquet", value_bytes=CELL, rows=100)
    _refused(path, r"^Expected .*wide\.parquet to decode to at most 64 MiB \(64 times its size, or 64 MiB\), "
                   r"but it decodes to more by row 6[45]: save it as JSON lines")  # fmt: skip


def test_a_parquet_file_whose_metadata_declares_too_much_is_refused_unread(tmp_path: Path) -> None:
    """Plain-encoded and zstd-compressed, 80 x 1 MiB is a few KB: the metadata says 80 MiB."""
    table = pa.table({"question": ["a" * 2**20] * 80, "A": ["x"] * 80, "B": ["y"] * 80, "answer": [0] * 80})
    path = _parquet(tmp_path / "plain.parquet", table, use_dictionary=False)
    assert path.stat().st_size < 64 * 1024
    _refused(path, r"^Expected .*plain\.parquet to decode to at most 64 MiB .*, but its metadata declares 8")


def test_a_json_array_past_its_limit_is_refused(tmp_path: Path) -> None:
    """Parsed whole, so bounded by what Python would hold: 1,000,000 empty objects are 3 MB
    of text and about 100 MB of dicts (`sources.json_cost`); a file past it is not read."""
    path = tmp_path / "empty.json"
    path.write_text("[" + ",".join(["{}"] * 1_000_000) + "]")
    match = r"^Expected a JSON array that decodes to at most 64 MiB in .*empty\.json, but it decodes to 99,"
    with pytest.raises(DataError, match=match + r".*: save it as JSON lines \(one object a line\)"):
        load_file(path, mapping=MAPPING)
    with pytest.raises(DataError, match=match):
        list(load_records(path))
    big = tmp_path / "big.json"
    big.write_text(json.dumps([ROW] * (JSON_ARRAY // len(json.dumps(ROW)) + 10)))
    with pytest.raises(DataError, match=r"^Expected a JSON array that decodes to at most 64 MiB in .*big\.json"):
        load_file(big, mapping=MAPPING)


def test_json_lines_are_counted_as_python_holds_them(tmp_path: Path) -> None:
    """A 30 MiB file of nested empty lists held 720 MB read whole: each line costs 20 times
    its text, so a line is refused past the row limit, and a file is streamed past 32 MiB."""
    from calm_core.data.readers import decodes_past
    from calm_core.data.stream import STREAM_FROM_BYTES

    line = b'{"question": [' + b",".join([b"[]"] * (ROW_BYTES // 40)) + b"]}\n"  # 0.6 MiB of text
    path = tmp_path / "lists.jsonl"
    path.write_bytes(line * 3)
    _refused(path, r"^Expected rows of at most 8 MiB in .*lists\.jsonl, but row 1 holds more")
    rows = _jsonl(tmp_path / "rows.jsonl", [{**ROW, "question": f"{i}?", "id": str(i)} for i in range(20_000)])
    assert path.stat().st_size < STREAM_FROM_BYTES and rows.stat().st_size < STREAM_FROM_BYTES
    assert not decodes_past(rows, "jsonl", STREAM_FROM_BYTES)
    assert decodes_past(rows, "jsonl", 2 * rows.stat().st_size)


def test_the_limits_are_the_documented_ones() -> None:
    """Each declared once, in limits.py. The file budget only Parquet can reach (CSV and
    JSON lines decode a byte to at most a byte), so it lets every text row in."""
    declared = (limits.MAX_COLUMNS, limits.MAX_CELL_BYTES, limits.MAX_ROW_BYTES, limits.MAX_JSON_ARRAY_BYTES)
    assert declared == (COLUMNS, CELL, ROW_BYTES, JSON_ARRAY)
    budgets = (limits.MAX_EXPANSION, limits.EXPANSION_FREE_BYTES, limits.MAX_BATCH_BYTES)
    assert budgets == (64, 64 * 2**20, 64 * 2**20)
    assert limits.EXPANSION_FREE_BYTES >= ROW_BYTES


# ----------------------------------------------------------------------------- batches


def test_a_parquet_batch_is_made_into_rows_a_budget_at_a_time(tmp_path: Path, monkeypatch) -> None:
    """MAX_BATCH_BYTES refuses nothing: a batch past it is made into Python rows in slices."""
    sizes = np.array([10, 10, 30, 5, 5, 5, 50], np.int64)
    batch = pa.record_batch({"n": list(range(len(sizes)))})
    monkeypatch.setattr(parquet_batches, "MAX_BATCH_BYTES", 25)
    pieces = [piece.column(0).to_pylist() for piece in parquet_batches.pieces(batch, sizes)]
    assert pieces == [[0, 1], [2], [3, 4, 5], [6]]
    monkeypatch.setattr(parquet_batches, "MAX_BATCH_BYTES", 100_000)  # batches of 1,024 rows (the footer's sizing), sliced
    rows = [{**ROW, "question": f"Q{i}?" * 100} for i in range(3000)]
    path = _parquet(tmp_path / "many.parquet", pa.Table.from_pylist(rows))
    assert [r for _, r in load_records(path)] == rows


def test_cell_bytes_counts_every_arrow_shape() -> None:
    dictionary = pa.DictionaryArray.from_arrays(pa.array([0, None, 1, 0], pa.int32()), pa.array(["abc", "de"]))
    assert parquet_sizes.cell_bytes(dictionary).tolist() == [3, 0, 2, 3]
    assert parquet_sizes.cell_bytes(pa.array([["ab", "c"], None, []])).tolist() == [3, 0, 0]
    assert parquet_sizes.cell_bytes(pa.array([{"x": "ab", "y": 1}, {"x": None, "y": 2}])).tolist() == [10, 8]
    assert parquet_sizes.cell_bytes(pa.array([[("k", "vv")]], pa.map_(pa.string(), pa.string()))).tolist() == [3]
    assert parquet_sizes.cell_bytes(pa.array([1, 2], pa.int64()).slice(1)).tolist() == [8]


def test_a_small_parquet_file_that_decodes_large_is_streamed(tmp_path: Path) -> None:
    """Within every budget, 40 rows of one value just under 1 MiB: 40 MiB from a file of
    2 KB. Read whole it would be held (a 32 MB file, 64 times over, would be 2 GiB);
    `load_file` streams it as it streams a large file: the same items, read on demand."""
    from calm_core.data.stream import STREAM_FROM_BYTES, LazyItems

    path = bomb(tmp_path / "long.parquet", value_bytes=CELL - 100, rows=40)
    assert path.stat().st_size < 4096
    report = load_file(path, mapping=MAPPING)
    assert isinstance(report.items, LazyItems) and len(report.items) == 40
    assert report.items[39].question == "a" * (CELL - 100)
    small = bomb(tmp_path / "short.parquet", value_bytes=100, rows=40)
    assert isinstance(load_file(small, mapping=MAPPING).items, list)
    assert STREAM_FROM_BYTES < 40 * (CELL - 100)


# ----------------------------------------------------------------------------- issue 47's shapes


def fixed_width(path: Path, width: int, rows: int = 1024) -> Path:
    """A fixed-width binary column, dictionary-encoded: one `width`-byte value used by every row."""
    value = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), pa.array([b"a" * width], pa.binary(width)))
    table = pa.table({"question": value, "A": ["x"] * rows, "B": ["y"] * rows, "answer": [0] * rows})
    return _parquet(path, table, store_schema=False)


def test_a_fixed_width_column_counts_its_declared_width(tmp_path: Path) -> None:
    """1,024 values of 64 KiB are 64 MiB decoded from a file of a few hundred bytes: the
    footer's declared size counts the width, so it is refused before a page is read; a
    width past a cell is refused by the cell limit."""
    _refused(fixed_width(tmp_path / "wide.parquet", 2**16 + 64), "but its metadata declares")
    _refused(fixed_width(tmp_path / "wider.parquet", CELL + 1, rows=2), "Expected cells of at most 1 MiB")


def test_a_batch_holds_the_rows_its_footer_says_fit_the_budget(tmp_path: Path) -> None:
    """Rows of a 100 KiB fixed-width value: 64 MiB / 100 KiB rows a batch, not 1,024."""
    from calm_core.data.parquet_sizes import batch_rows, dictionary_text

    parquet = pq.ParquetFile(fixed_width(tmp_path / "fixed.parquet", 100 * 1024, rows=2048))
    meta, schema = parquet.metadata, parquet.schema
    rows = batch_rows(meta, schema, 0, set(dictionary_text(meta, schema)), limits.MAX_BATCH_BYTES, 1024)
    assert rows == limits.MAX_BATCH_BYTES // (100 * 1024 + 8 + 3 * 8)


def test_delta_encoded_text_reads_whole_and_streamed(tmp_path: Path) -> None:
    """Parquet v2's DELTA_BYTE_ARRAY text (Arrow cannot read it as a dictionary) reads as plain text."""
    rows = [{"question": f"What is {i} + {i}?", "A": str(2 * i), "B": "-1", "answer": 0} for i in range(50)]
    encodings = dict.fromkeys(["question", "A", "B"], "DELTA_BYTE_ARRAY")
    path = tmp_path / "delta.parquet"
    pq.write_table(
        pa.Table.from_pylist(rows), path, use_dictionary=False, column_encoding=encodings, data_page_version="2.0"
    )
    whole, streamed = (load_file(path, mapping=MAPPING, stream=stream) for stream in (False, True))
    assert [item.question for item in whole.items] == [row["question"] for row in rows]
    assert list(streamed.items) == whole.items


def test_rejected_rows_past_the_kept_ones_are_counted(tmp_path: Path) -> None:
    """One valid row, then 5,000 bad ones: 1,000 reasons kept, the count exact, whole and streamed."""
    from calm_core.data.schema import REJECTED_KEPT

    path = tmp_path / "junk.csv"
    path.write_text("question,A,B,answer\nQ?,x,y,0\n" + "x\n" * 5000, encoding="utf-8")
    for stream in (False, True):
        report = load_file(path, mapping=MAPPING, stream=stream)
        assert len(report.items) == 1 and report.n_rejected == 5000
        assert len(report.rejected) == REJECTED_KEPT and report.rejected[-1].row == REJECTED_KEPT + 1
