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
import tempfile
import unicodedata
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent

_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
WRITABLE_KINDS = ("file", "directory")
MAX_PATH_CHARS = 4096  # Linux's PATH_MAX: a longer typed path names nothing that can be opened


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


def malformed_path(text: str) -> str | None:
    """Why a typed path or name can never name a file (None: it may): a NUL byte (Python's
    os calls raise ValueError on it, which a page would show as a traceback), another
    control character (a newline or an escape never belongs in a path and garbles pages and
    logs) or more than MAX_PATH_CHARS characters. The callers turn the reason into one line."""
    if "\x00" in text:
        return "it holds a NUL byte"
    if len(text) > MAX_PATH_CHARS:
        return f"it is {len(text)} characters long, more than the {MAX_PATH_CHARS} a path may have"
    control = next((c for c in text if unicodedata.category(c) == "Cc"), None)
    if control is not None:
        return f"it holds a control character (U+{ord(control):04X})"
    return None


def inside(root: Path, candidate: Path) -> bool:
    """True when `candidate` resolves to a path under `root` (guards against escapes)."""
    try:
        candidate.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True


def ensure_writable(path: Path, kind: str) -> Path:
    """Check that an output can be written before the long work that produces it.

    `kind` is "file" (`--json out.json`: its folder is created) or "directory"
    (`--save-preds DIR`: created). A result that cannot be saved should fail in a
    second, not after an hour of scoring. Returns the path with `~` expanded; raises
    ValueError with one line naming the path otherwise.
    """
    if kind not in WRITABLE_KINDS:
        raise ValueError(f"Expected `kind` to be one of {', '.join(WRITABLE_KINDS)}, but got {kind!r}")
    path = Path(path).expanduser()
    if kind == "file" and path.is_dir():
        raise ValueError(f"Expected a file to write at {path}, but it is a directory")
    if kind == "directory" and path.exists() and not path.is_dir():
        raise ValueError(f"Expected a directory to write into at {path}, but it is a file")
    folder = path if kind == "directory" else path.parent
    _make_folder(folder, path)
    _probe_folder(folder, path)
    if kind == "file" and path.exists() and not os.access(path, os.W_OK):
        raise ValueError(f"Expected a writable file at {path}, but it is read-only")
    return path


def _make_folder(folder: Path, target: Path) -> None:
    """Create `folder` (and parents), naming the first ancestor that is a file if any."""
    blocker = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise ValueError(f"Expected a folder at {blocker} to write {target} into, but it is a file")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(
            f"Expected to create the folder {folder} for {target}, but could not: {exc.strerror or exc}"
        ) from None


def _probe_folder(folder: Path, target: Path) -> None:
    """Write and drop a scratch file: permission bits alone miss read-only mounts."""
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".calm-write-check-"):
            pass
    except OSError as exc:
        raise ValueError(
            f"Expected a writable folder for {target}, but {folder} cannot be written: {exc.strerror or exc}"
        ) from None
