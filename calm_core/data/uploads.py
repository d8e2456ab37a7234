"""Uploads: a person's loaded file stored in the workspace as `upload/<name>`, and removed.

`workspace/datasets/<name>/items.jsonl` holds the normalised items, `meta.json` where
they came from (the original file, the mapping, the text encoding it was read in, the
kind, the rows rejected) and, when a studio session saved it, `owner.json` its opaque tag
(data/owners.py), written together so that no reader sees half an upload. The catalog
lists and loads them (`calm_core.data.entries`, `calm_core.data.catalog`); the Data page
saves and deletes them. `saved_mappings` finds the mappings saved with uploads that read a
file's columns: `calm eval --data FILE` reuses one for a file with the same columns (the
questions a person kept out of the upload, say).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from datetime import datetime, timezone
from typing import Any

from calm_core.data.entries import (
    ITEMS_FILE,
    META_FILE,
    UPLOAD_PREFIX,
    DatasetEntry,
    unknown_name_message,
    upload_entry,
    upload_folder,
    uploads_dir,
)
from calm_core.data.mapping import ColumnMapping, has_column
from calm_core.data.owners import owner_files
from calm_core.data.schema import REJECTED_KEPT, DataError, LoadReport
from calm_core.io import write_folder_atomically

META_FORMAT = 1  # bump when meta.json changes shape
MAX_REJECTED_KEPT = REJECTED_KEPT  # rejected rows listed in meta.json; the count is always exact


def save_upload(
    name: str,
    report: LoadReport,
    original_filename: str,
    mapping: ColumnMapping | str | None = None,
    overwrite: bool = False,
    owner: str | None = None,
    encoding: str | None = None,
) -> DatasetEntry:
    """Store a loaded report as `upload/<name>`: items.jsonl + meta.json (+ owner.json with
    `owner`, the saving session's tag), written atomically. `encoding`: the text encoding
    the file was read in (None: UTF-8), recorded so `calm eval` can be told it again.

    The name is cleaned with `safe_name` (spaces become "_"); one that contains a path
    separator or is absolute is refused. An existing upload is kept unless `overwrite`.
    """
    clean, folder = upload_folder(name)
    if not report.items:
        raise DataError(f"Expected at least one valid item to save as upload/{clean}, but the report has none")
    if folder.exists() and not overwrite:
        message = f"Expected a new upload name, but upload/{clean} already exists (pass overwrite=True to replace it)"
        raise DataError(message)
    if isinstance(mapping, str):
        mapping = ColumnMapping.parse(mapping)
    meta = {**_upload_meta(clean, report, original_filename, mapping), "encoding": encoding}
    write_folder_atomically(folder, {ITEMS_FILE: report.items}, {META_FILE: meta, **owner_files(owner)})
    return upload_entry(folder)


def delete_upload(name: str) -> None:
    """Remove `upload/<name>`; DataError when there is no such upload."""
    clean, folder = upload_folder(name)
    if not (folder / META_FILE).is_file():
        raise DataError(unknown_name_message(UPLOAD_PREFIX + clean))
    shutil.rmtree(folder)


def _upload_meta(
    clean: str, report: LoadReport, original_filename: str, mapping: ColumnMapping | None
) -> dict[str, Any]:
    return {
        "format": META_FORMAT,
        "name": UPLOAD_PREFIX + clean,
        "original_filename": original_filename,
        "loaded_as": report.name,
        "mapping": mapping.to_dict() if mapping else None,
        "kind": report.kind,
        "n_items": len(report.items),
        "n_rejected": report.n_rejected,
        "rejected": [dataclasses.asdict(e) for e in report.rejected[:MAX_REJECTED_KEPT]],
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def saved_mappings(columns: list[str], kind: str = "mc") -> list[tuple[str, ColumnMapping]]:
    """(upload name, its saved mapping) for every upload of `kind` whose mapping reads a
    file with `columns`, newest first: each column the mapping names is among them. An
    upload saved without a mapping, or whose meta.json cannot be read, is left out."""
    root = uploads_dir()
    found = []
    for meta_path in root.glob(f"*/{META_FILE}") if root.is_dir() else ():
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            mapping = ColumnMapping.from_dict(meta["mapping"]) if meta.get("mapping") else None
        except (OSError, ValueError, TypeError, KeyError):
            continue
        if mapping is None or meta.get("kind") != kind or meta_path.parent.name.startswith("."):
            continue
        if all(has_column(columns, column) for column in mapping.required_columns(kind)):
            found.append((str(meta.get("created", "")), UPLOAD_PREFIX + meta_path.parent.name, mapping))
    return [(name, mapping) for _, name, mapping in sorted(found, key=lambda f: f[0], reverse=True)]
