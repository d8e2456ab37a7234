"""`calm export RUN DIR --push-to-hub REPO [--public]`: the export folder uploaded to a
Hugging Face model repo, private unless asked otherwise.

    url = push_folder(Path("my-export"), "me/calm-capitals")        # private
    url = push_folder(folder, "me/calm-capitals", private=False)     # public

huggingface_hub does the work (`HfApi.create_repo`, `upload_folder`, against HF_ENDPOINT,
by default the Hub); the token is the usual one (HF_TOKEN, else `hf auth login`'s). A repo
that exists already is reused as it is: its visibility is not changed. The folder's
README.md is already a model card (model_card.py, merged_card.py), so the Hub shows its
metadata, base model and results as they are.
"""

from __future__ import annotations

import json
from pathlib import Path

from calm_core.export.hub_id import HUB_ID


def push_folder(folder: Path, repo: str, private: bool = True, token: str | None = None) -> str:
    """Create `repo` (a model repo, private by default; an existing one is kept) and upload
    `folder` to it in one commit; returns the repo's URL. Refused before any request when
    the repo id is malformed or no token is found."""
    from huggingface_hub import HfApi, get_token

    if not HUB_ID.match(repo):
        raise ValueError(f"Expected `--push-to-hub` to be a Hub repo id like `me/my-model`, but got {repo!r}")
    token = token or get_token()
    if not token:
        raise ValueError("Expected a Hugging Face token to push with (HF_TOKEN, or `hf auth login`), but found none")
    api = HfApi(token=token)
    url = api.create_repo(repo, private=private, exist_ok=True, repo_type="model")
    api.upload_folder(repo_id=url.repo_id, folder_path=str(folder), commit_message=_commit_message(folder))
    return str(url)


def _commit_message(folder: Path) -> str:
    """`CALM Studio export: <run> step <n> (<variant>[, merged])`, from calm_export.json."""
    try:
        record = json.loads((Path(folder) / "calm_export.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "CALM Studio export"
    merged = ", merged" if record.get("merged") else ""
    return f"CALM Studio export: {record.get('run_id')} step {record.get('step')} ({record.get('variant')}{merged})"
