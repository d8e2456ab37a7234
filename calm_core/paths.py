"""Where things live on disk: model cache, shared data, the studio workspace.

Every location can be overridden by an environment variable so that tests, CI and
users with unusual set-ups never have to edit code:

- CALM_CACHE_DIR      converted models (default: $XDG_CACHE_HOME/calm-studio or ~/.cache/calm-studio)
- CALM_DATA_DIR       real datasets, one folder per dataset, one JSONL per split
                      (default: ../shared/data next to the project, when it exists)
- CALM_WORKSPACE      uploaded datasets and runs (default: ./workspace)
"""

from __future__ import annotations

import os
import re
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent

_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def cache_dir() -> Path:
    env = os.environ.get("CALM_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "calm-studio"


def data_dir() -> Path | None:
    """The folder of real datasets, or None when there is none."""
    env = os.environ.get("CALM_DATA_DIR")
    if env:
        return Path(env).expanduser()
    default = PROJECT_ROOT.parent / "shared" / "data"
    return default if default.is_dir() else None


def workspace_dir() -> Path:
    env = os.environ.get("CALM_WORKSPACE")
    return Path(env).expanduser() if env else PROJECT_ROOT / "workspace"


def safe_name(name: str, max_len: int = 80) -> str:
    """A file-system-safe version of a user-given name (no separators, no `..`).

    Raises ValueError when nothing usable is left, so the caller can tell the user.
    """
    cleaned = _SAFE_NAME.sub("_", name.strip()).strip("._")[:max_len]
    if not cleaned:
        raise ValueError(f"Expected a name with letters or digits, but got {name!r}")
    return cleaned


def inside(root: Path, candidate: Path) -> bool:
    """True when `candidate` resolves to a path under `root` (guards against escapes)."""
    try:
        candidate.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True
