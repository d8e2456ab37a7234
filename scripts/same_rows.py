"""What the file readers make of a fixed set of files, written so two commits can be diffed.

    .venv/bin/python scripts/same_rows.py OUT.json      # at each commit, then: cmp before.json after.json

The files are built here, the same at every commit: ARC-Easy's test split from the shared
data (`CALM_DATA_DIR`) as JSON lines, a JSON array, CSV (LF, CRLF and CR line ends, with
a BOM) and Parquet, each with damaged rows mixed in (bad JSON, undecodable bytes, a short
CSV row, a missing answer, a repeated id). Every file is loaded eagerly and streaming,
whole and with a limit (and once without a mapping, which is refused), and every item and rejected row is written out, as are
`load_records` and `peek_records` (the Data page's reads). A restructure of the readers
must leave OUT byte for byte the same.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from calm_core.data.loaders import load_file
from calm_core.data.readers import load_records, peek_records

MAPPING = "choices=A|B|C|D"  # the option columns of `_flat`'s rows
ROWS = 400  # ARC-Easy test rows used: enough to cross the loaders' chunk of rows


def _arc_rows() -> list[dict[str, Any]]:
    root = Path(os.environ.get("CALM_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"))
    lines = (root / "arc" / "easy_test.jsonl").read_text(encoding="utf-8").splitlines()[:ROWS]
    return [_flat(json.loads(line)) for line in lines]


def _flat(row: dict[str, Any]) -> dict[str, Any]:
    """question, A-D and answer columns, as a practitioner's spreadsheet has them."""
    texts = row["choices"]["text"] if isinstance(row.get("choices"), dict) else row["choices"]
    flat = {"id": row.get("id"), "question": row["question"]}
    flat.update({letter: (texts[i] if i < len(texts) else "") for i, letter in enumerate("ABCD")})
    answer = row.get("answerKey", row.get("answer"))
    flat["answer"] = "ABCD"[answer] if isinstance(answer, int) else str(answer)
    return flat


def _damaged(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = [dict(r) for r in rows]
    rows[3]["answer"] = ""  # no answer
    rows[7]["id"] = rows[5]["id"]  # a repeated id
    rows[300]["answer"] = "Z"  # an answer that is no option
    return rows


def _write_files(folder: Path, rows: list[dict[str, Any]]) -> dict[str, Path]:
    files = {}
    lines = [json.dumps(r).encode() for r in rows]
    lines[10] = b'{"question": "broken'  # bad JSON
    lines[20] = b'{"question": "\xff\xfe", "A": "a", "B": "b", "answer": "A"}'  # not UTF-8
    files["jsonl"] = folder / "arc.jsonl"
    files["jsonl"].write_bytes(b"\n".join(lines[:50]) + b"\n\n" + b"\n".join(lines[50:]) + b"\n")
    files["json_array"] = folder / "arc.json"
    files["json_array"].write_text(json.dumps(rows[:100] + [["not", "an", "object"]] + rows[100:]), encoding="utf-8")
    for name, end in (("csv_lf", "\n"), ("csv_crlf", "\r\n"), ("csv_cr", "\r")):
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=list(rows[0]), lineterminator=end)
        writer.writeheader()
        writer.writerows(rows)
        data = text.getvalue().encode("utf-8")
        short = f"only,three,fields{end}".encode()
        cut = data.index(end.encode(), len(data) // 2) + len(end)
        files[name] = folder / f"arc_{name}.csv"
        files[name].write_bytes(
            b"\xef\xbb\xbf" + data[:cut] + short + b"caf\xe9,x,y,z,w,v,A" + end.encode() + data[cut:]
        )
    import pyarrow as pa
    import pyarrow.parquet as pq

    files["parquet"] = folder / "arc.parquet"
    pq.write_table(pa.Table.from_pylist(rows), files["parquet"], row_group_size=64)
    return files


def _item(item: Any) -> Any:
    return dataclasses.asdict(item) if dataclasses.is_dataclass(item) else repr(item)


def _report(path: Path, **options: Any) -> dict[str, Any]:
    try:
        report = load_file(path, **options)
    except Exception as exc:  # the refusal is part of what must stay the same
        return {"error": f"{type(exc).__name__}: {exc}".replace(str(path.parent), "DIR")}
    return {
        "kind": report.kind,
        "items": [_item(item) for item in report.items],
        "rejected": [dataclasses.asdict(error) for error in report.rejected],
        "summary": report.summary(),
    }


def _raw(value: Any) -> Any:
    return value if isinstance(value, dict) else dataclasses.asdict(value)


def main(out: str) -> None:
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        files = _write_files(Path(tmp), _damaged(_arc_rows()))
        for name, path in files.items():
            result[name] = {
                f"stream={stream} limit={limit}": _report(path, stream=stream, limit=limit, mapping=MAPPING)
                for stream in (False, True)
                for limit in (None, 7, 260)
            }
            result[name]["unmapped"] = _report(path)
            result[name]["load_records"] = [[n, _raw(r)] for n, r in load_records(path)]
            result[name]["peek_records"] = peek_records(path, rows=12)
    Path(out).write_text(json.dumps(result, indent=1, sort_keys=True, default=repr), encoding="utf-8")
    print(f"wrote {out}: {len(files)} files, each read 7 ways")


if __name__ == "__main__":
    main(sys.argv[1])
