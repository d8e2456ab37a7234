"""What produced a result: package versions, git commit, machine, the model's fingerprint.
Saved with every result."""

from __future__ import annotations

import hashlib
import json
import platform
import struct
import subprocess
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from calm_core.io import atomic_write_json
from calm_core.paths import PROJECT_ROOT, cache_dir

_PACKAGES = ("calm-studio", "torch", "transformers", "peft", "numpy", "bitsandbytes")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth")
HEADER_BYTES = 1 << 16  # of a weight file that is not safetensors: its format's header and first bytes
_MAX_SAFETENSORS_HEADER = 100 << 20  # a larger length field is a damaged file, not a header to read


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_commit() -> str | None:
    """The project's commit (with '+dirty' when the tree has changes), or None outside git."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+dirty" if dirty else "")


def environment_record() -> dict[str, Any]:
    return {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "versions": package_versions(),
        "git": git_commit(),
        "python": platform.python_version(),
        "machine": f"{platform.system()} {platform.machine()}",
    }


def model_fingerprint(path: str | Path) -> str | None:
    """`sha256:<16 hex>` naming a model's files by their content, without naming where they
    are, so an export or a report can tell two base models apart and say nothing of this
    machine. Hashed: config.json and, per weight file (sorted by name), its name, size,
    header (a safetensors file's JSON header, else its first HEADER_BYTES) and content:
    the Hub's blob name where the file is a link into a Hub cache (the blob is named by
    its content's sha256), else a sha256 of the whole file, read in chunks once and kept
    per (file, size, modification time) in the cache folder, so a second load costs
    milliseconds. Shapes alone are not enough: two fine-tunes of one model share every
    header. `path` is a model directory or one weight file (a .gguf); None when it is
    neither (a hub id, a folder that is gone)."""
    path = Path(path).expanduser()
    try:
        if path.is_file():
            files = [path]
        elif path.is_dir():
            files = sorted(p for p in path.iterdir() if p.name == "config.json" or p.suffix in WEIGHT_SUFFIXES)
        else:
            return None
        digest = hashlib.sha256()
        for file in files:
            digest.update(f"{file.name}\0{file.stat().st_size}\0".encode())
            digest.update(_file_header(file))
            if file.name != "config.json":
                digest.update(content_digest(file).encode())
    except (OSError, ValueError):
        return None
    return "sha256:" + digest.hexdigest()[:16]


CHUNK_BYTES = 8 << 20
_DIGESTS_FILE = "file-digests.json"
_SEEN: dict[str, str] = {}  # this process's digests: a page asking again reads no file


def content_digest(file: Path) -> str:
    """The sha256 of a file's bytes: the Hub cache's blob name when `file` links to one
    (`.../blobs/<sha256>`), else computed once and remembered by path, size and mtime."""
    target = file.resolve()
    if target.parent.name == "blobs" and len(target.name) == 64 and all(c in "0123456789abcdef" for c in target.name):
        return target.name
    stat = target.stat()
    key = f"{target}|{stat.st_size}|{stat.st_mtime_ns}"
    if key in _SEEN:
        return _SEEN[key]
    known = _known_digests()
    if key in known:
        _SEEN[key] = known[key]
        return known[key]
    digest = hashlib.sha256()
    with target.open("rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
    known[key] = _SEEN[key] = digest.hexdigest()
    _remember_digests(known)
    return known[key]


def _known_digests() -> dict[str, str]:
    try:
        data = json.loads((cache_dir() / _DIGESTS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return (
        {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)} if isinstance(data, dict) else {}
    )


def _remember_digests(known: dict[str, str]) -> None:
    """Keep the newest 1,000 entries; a cache folder that cannot be written only costs a re-read."""
    try:
        atomic_write_json(cache_dir() / _DIGESTS_FILE, dict(list(known.items())[-1000:]))
    except OSError:
        pass


def _file_header(file: Path) -> bytes:
    """What model_fingerprint hashes of one file: all of config.json, a safetensors header,
    else the first HEADER_BYTES."""
    with file.open("rb") as handle:
        if file.name == "config.json":
            return handle.read()
        if file.suffix == ".safetensors":
            head = handle.read(8)
            length = struct.unpack("<Q", head)[0] if len(head) == 8 else 0
            if 0 < length <= _MAX_SAFETENSORS_HEADER:
                return handle.read(length)
            handle.seek(0)
        return handle.read(HEADER_BYTES)
