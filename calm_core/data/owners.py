"""Who saved an upload or a split, so a shared studio can let only them delete or replace it.

`owner.json` beside the data holds the opaque tag of the studio session that saved it
(`access.rules.session_tag`: a hash, never a session token or an address), written in
the same atomic folder write as the data (`io.write_folder_atomically`), so no reader sees
the data without its owner. Saves from the command line, and those made before owners
were recorded, have no owner.json: their owner is None, which a shared studio treats as
the admin's (`access.rules.may_delete`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from calm_core.data.entries import SPLIT_PREFIX, UPLOAD_PREFIX, split_folder, upload_folder

OWNER_FILE = "owner.json"


def owner_files(owner: str | None) -> dict[str, dict[str, Any]]:
    """The records to write beside the data: {OWNER_FILE: {"owner": tag}}, none without a tag."""
    return {OWNER_FILE: {"owner": owner}} if owner else {}


def read_owner(folder: Path) -> str | None:
    """The tag in `folder`/owner.json; None when there is none or it cannot be read (a
    damaged record must not make a dataset anyone's to delete)."""
    try:
        owner = json.loads((folder / OWNER_FILE).read_text(encoding="utf-8")).get("owner")
    except (OSError, ValueError, AttributeError):
        return None
    return owner if isinstance(owner, str) and owner else None


def dataset_owner(name: str) -> str | None:
    """The owner of `upload/<name>` or `split/<name>` (a split's part names its split);
    None for any other name (built-in and shared sets belong to no session)."""
    if name.startswith(UPLOAD_PREFIX):
        return read_owner(upload_folder(name)[1])
    if name.startswith(SPLIT_PREFIX):
        return read_owner(split_folder(name[len(SPLIT_PREFIX) :].split("/")[0])[1])
    return None
