"""Uploads: a person's loaded file stored in the workspace as `upload/<name>`, and removed.

`workspace/datasets/<name>/items.jsonl` holds the normalised items, `meta.json` where
they came from (the original file, the mapping, the kind, the rows rejected) and, when a
studio session saved it, `owner.json` its opaque tag (data/owners.py), written together so
that no reader sees half an upload. The catalog lists and loads them
(`calm_core.data.entries`, `calm_core.data.catalog`); the Data page saves and deletes them.
"""

from __future__ import annotations

import dataclasses
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
)
from calm_core.data.mapping import ColumnMapping
from calm_core.data.owners import owner_files
from calm_core.data.schema import DataError, LoadReport
from calm_core.io import write_folder_atomically

META_FORMAT = 1  # bump when meta.json changes shape
MAX_REJECTED_KEPT = 1000  # rejected rows listed in meta.json; the count is always exact


def save_upload(
    name: str,
    report: LoadReport,
    original_filename: str,
    mapping: ColumnMapping | str | None = None,
    overwrite: bool = False,
    owner: str | None = None,
) -> DatasetEntry:
    """Store a loaded report as `upload/<name>`: items.jsonl + meta.json (+ owner.json with
    `owner`, the saving session's tag), written atomically.

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
    meta = _upload_meta(clean, report, original_filename, mapping)
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
