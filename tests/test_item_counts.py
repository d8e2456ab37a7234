"""Item counts without loading (calm_core/data/counts.py): for every kind of name the
count equals what `load_dataset` returns for a clean set, and no row is parsed to get it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calm_core.data.builtin import builtin_names
from calm_core.data.catalog import load_dataset
from calm_core.data.counts import item_count
from calm_core.data.schema import DataError
from calm_core.data.split import split_dataset
from calm_core.data.uploads import save_upload
from tests.module_trace import walk

LOADING = ("calm_core.data.loaders", "calm_core.data.readers", "calm_core.data.sources",
           "calm_core.data.parquet_batches", "calm_core.data.stream")


def _quiz_rows(n: int) -> list[dict]:
    return [{"question": f"What is {i} + 1?", "choices": [str(i + k) for k in (1, 2, 3, 4)], "answer": 0}
            for i in range(n)]


def _files(folder: Path, n: int) -> list[Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = _quiz_rows(n)
    jsonl = folder / "quiz.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n")  # a trailing blank line
    csv = folder / "quiz.csv"
    csv.write_text("question,A,B,C,D,answer\n" + "".join(
        f"{r['question']},{','.join(r['choices'])},0\n" for r in rows))
    parquet = folder / "quiz.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    return [jsonl, csv, parquet]


@pytest.mark.parametrize("name", builtin_names()[::5])
@pytest.mark.parametrize("limit", [None, 7])
def test_a_builtin_set_is_counted_by_its_generator(name: str, limit: int | None) -> None:
    assert item_count(name, limit) == len(load_dataset(name, limit=limit).items)


def test_files_uploads_and_splits_count_what_loading_returns(tmp_path: Path) -> None:
    for path in _files(tmp_path, 30):
        mapping = "choices=A|B|C|D" if path.suffix == ".csv" else None
        for suffix, limit in [("", None), ("", 12), ("[5:20]", None), ("[25:]", 4)]:
            name = f"{path}{suffix}"
            loaded = load_dataset(name, limit=limit, mapping=mapping)
            assert item_count(name, limit) == len(loaded.items), (name, limit)
    report = load_dataset(str(tmp_path / "quiz.jsonl"))
    save_upload("counted", report, "quiz.jsonl")
    assert item_count("upload/counted") == 30
    split_dataset("upload/counted", sizes=(0.6, 0.2, 0.2), seed=0, out="cq")
    for part in ("train", "heldout", "test"):
        assert item_count(f"split/cq/{part}") == len(load_dataset(f"split/cq/{part}").items)


def test_no_row_is_parsed_to_count(tmp_path: Path) -> None:
    names = [str(p) for p in _files(tmp_path, 30)] + ["builtin/capitals/train"]
    _, record = walk(lambda: [item_count(name) for name in names])
    assert not record.rooms & set(LOADING), record.rooms


def test_a_size_only_loading_knows_is_none_unless_bounded(tmp_path: Path) -> None:
    array = tmp_path / "quiz.json"
    array.write_text(json.dumps(_quiz_rows(5)))
    assert item_count(str(array)) is None and item_count(str(array), limit=3) == 3
    assert item_count(f"{array}[2:6]") == 4
    assert item_count("hf:someone/quiz:test") is None
    with pytest.raises(DataError, match="Expected a dataset name"):
        item_count("upload/not-there")
