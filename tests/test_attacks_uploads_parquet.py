"""The attacker's suite, Parquet shapes the last round missed (issue 47), over the wire:
the Data page's real uploader, as a browser gives it (tests/test_attacks_uploads.py).

- a fixed-width binary (FIXED_LEN_BYTE_ARRAY) column, dictionary-encoded: one 1 MiB value
  used by 1,024 rows. Two such columns in 452 bytes took the server from 294 to 2,239 MB;
  eight, past 6 GB. The width is declared in the footer, so the file is refused from it;
- text stored with DELTA_BYTE_ARRAY, as Parquet v2 writers store it: a legitimate 2-row
  file was refused ("Not yet implemented: DecodeArrow of DictAccumulator"). It must read;
  and the same encoding made a bomb (each value repeats the one before it: 1 KB on disk,
  2 GiB decoded) must be refused within the budget.

Each refusal: one line, within 2 s, the server within 200 MB of where it was.
"""

from __future__ import annotations

import io

import pytest

from tests.test_attacks_uploads import assert_refused_quickly, assert_within_budget, studio, upload_through_the_page  # noqa: F401

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

TEXT = ("question", "A", "B")
DELTA = {
    "column_encoding": dict.fromkeys(TEXT, "DELTA_BYTE_ARRAY"),
    "use_dictionary": False,
    "data_page_version": "2.0",
}


def fixed_width_bomb(columns: int, width: int = 2**20, rows: int = 1024) -> bytes:
    """Issue 47's probe: `columns` fixed-width binary columns, each one `width`-byte value
    used by every row (dictionary-encoded, zstd, no Arrow schema: 452 bytes for two)."""
    index = pa.array([0] * rows, pa.int32())
    value = pa.DictionaryArray.from_arrays(index, pa.array([b"a" * width], pa.binary(width)))
    table = pa.table({name: value for name in ["question", "A", "B", "C", "D", "E", "F", "G"][:columns]})
    out = io.BytesIO()
    pq.write_table(table, out, compression="zstd", store_schema=False)
    return out.getvalue()


def delta_quiz(rows: list[tuple[str, str, str]], compression: str = "none") -> bytes:
    """A multiple-choice file whose text columns use DELTA_BYTE_ARRAY, as pyarrow writes it."""
    table = pa.table(
        {
            "question": [q for q, _, _ in rows],
            "A": [a for _, a, _ in rows],
            "B": [b for _, _, b in rows],
            "answer": [0] * len(rows),
        }
    )
    out = io.BytesIO()
    pq.write_table(table, out, compression=compression, **DELTA)
    return out.getvalue()


def delta_bomb(rows: int = 4096, width: int = 2**19) -> bytes:
    """DELTA_BYTE_ARRAY's shape of a bomb: every value repeats the one before it whole."""
    question = pa.chunked_array([pa.array(["a" * width] * 64)] * (rows // 64))
    table = pa.table({"question": question, "A": ["x"] * rows, "B": ["y"] * rows, "answer": [0] * rows})
    out = io.BytesIO()
    pq.write_table(table, out, compression="zstd", **DELTA)
    return out.getvalue()


def _refused_in_one_line(seen: dict, start: str) -> None:
    assert len(seen["errors"]) == 1 and "\n" not in seen["errors"][0], seen["errors"]
    assert seen["errors"][0].startswith(start), seen["errors"]
    assert_within_budget(seen)
    assert_refused_quickly(seen)


@pytest.mark.parametrize("columns", [2, 8])
def test_fixed_width_columns_are_refused_from_the_footer(studio, columns: int) -> None:  # noqa: F811
    data = fixed_width_bomb(columns)
    assert len(data) < 2000
    seen = upload_through_the_page(studio, f"fixed{columns}.parquet", data)
    _refused_in_one_line(seen, f"Expected fixed{columns}.parquet to decode to at most 64 MiB")


def test_a_delta_encoded_parquet_file_reads(studio) -> None:  # noqa: F811
    data = delta_quiz([("What is 2 + 2?", "4", "5"), ("What is 3 + 3?", "6", "7")])
    seen = upload_through_the_page(studio, "delta.parquet", data)
    assert seen["errors"] == []
    assert any("Columns found" in text for text in seen["texts"]), seen["texts"]


def test_a_delta_encoded_bomb_is_refused_within_the_budget(studio) -> None:  # noqa: F811
    data = delta_bomb()
    assert len(data) < 4000
    seen = upload_through_the_page(studio, "delta-bomb.parquet", data)
    _refused_in_one_line(seen, "Expected delta-bomb.parquet to decode to at most 64 MiB")
