"""Deleting and replacing uploads and splits under a shared studio's owner rule.

    refusal = delete_refusal_for("upload/quiz", access, session)   # None, or the page's one line
    delete_dataset("upload/quiz", access, session)                 # access.Refused when not allowed

Like cancelling a run: in a local studio anyone may; in a shared one only the session that
saved the dataset (its tag in owner.json, data/owners.py) or the admin (CALM_STUDIO_ADMIN=1).
Saving under an existing name with "replace" deletes what was there, so it follows the
same rule (`check_may_replace`). The Data page disables its buttons with these reasons;
these functions enforce them whatever the page shows.
"""

from __future__ import annotations

from calm_core.access.rules import Access, Refused, delete_refusal
from calm_core.data.entries import SPLIT_PREFIX, UPLOAD_PREFIX, split_folder, upload_folder
from calm_core.data.owners import dataset_owner
from calm_core.data.split import delete_split
from calm_core.data.uploads import delete_upload


def delete_refusal_for(name: str, access: Access, session: str | None) -> str | None:
    """Why `session` may not delete `upload/<name>` or `split/<name>` (None: it may); a
    local studio reads no owner file."""
    if not access.shared:
        return None
    return delete_refusal(access, session, dataset_owner(name))


def delete_dataset(name: str, access: Access, session: str | None) -> None:
    """Delete `upload/<name>` or the whole split `split/<name>`; Refused when `session`
    may not (`delete_refusal_for`)."""
    refusal = delete_refusal_for(name, access, session)
    if refusal:
        raise Refused(refusal)
    if name.startswith(SPLIT_PREFIX):
        delete_split(name[len(SPLIT_PREFIX) :])
    else:
        delete_upload(name.removeprefix(UPLOAD_PREFIX))


def check_may_replace(name: str, access: Access, session: str | None) -> None:
    """Refused when saving as `upload/<name>` or `split/<name>` would replace a dataset that
    `session` may not delete; a name not yet taken is free. Call before a save with
    `overwrite` (the name is cleaned as the save cleans it)."""
    folder = split_folder(name[len(SPLIT_PREFIX) :])[1] if name.startswith(SPLIT_PREFIX) else upload_folder(name)[1]
    if folder.exists():
        refusal = delete_refusal_for(name, access, session)
        if refusal:
            raise Refused(refusal)
