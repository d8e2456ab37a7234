"""Crash-safe file writes and cross-process locks: the one place they exist.

Every file the project writes for another process to read (run directories, uploads,
splits, cached hidden states, reports) is written to a hidden temporary name beside its
target and renamed over it, so a reader sees the old file or the new one, never half.
Temporary files and staging directories get the mode `open` / `mkdir` would give under
the umask (mkstemp / mkdtemp would make them 0600 / 0700).
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import shutil
import tempfile
import threading
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Callable, Iterator


def _umask() -> int:
    """The process umask, read without changing it (Linux), else by the set-and-restore dance."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def default_mode(directory: bool = False) -> int:
    """The mode `open` / `mkdir` would give under the umask: mkstemp / mkdtemp use 0600 /
    0700 whatever the umask, so what they create is set to this before it is renamed."""
    return (0o777 if directory else 0o666) & ~_umask()


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], object]) -> None:
    """Call `write(handle)` on a temporary file beside `path`, then rename it to `path`.
    On any error the temporary file is removed and `path` is untouched. The data is
    fsynced before the rename and the folder after it: without the first, a power loss
    can leave `path` renamed but empty (the rename reaches the disk before the data);
    a killed process alone never could."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, default_mode())
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_folder(path.parent)


def _fsync_folder(folder: Path) -> None:
    """Make a rename in `folder` durable (POSIX); a file system that cannot is left as it is."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write(path, lambda handle: handle.write(text.encode("utf-8")))


def atomic_write_json(path: str | Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, default=str) + "\n")


def staging_directory(parent: Path, prefix: str, suffix: str = "") -> Path:
    """A new hidden directory under `parent` to fill and then rename into place whole
    (a run, a checkpoint, an upload): readers never see it half-written."""
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=prefix, suffix=suffix, dir=parent))
    os.chmod(staging, default_mode(directory=True))
    return staging


def write_folder_atomically(folder: Path, items: dict[str, list[Any]], records: dict[str, dict[str, Any]]) -> None:
    """Write item files (JSONL, one item a line) and JSON records into a hidden staging
    folder, then rename it to `folder`: readers never see half an upload or half a split."""
    staging = staging_directory(folder.parent, prefix=f".tmp-{folder.name}-")
    try:
        for filename, rows in items.items():
            with (staging / filename).open("w", encoding="utf-8") as handle:
                for item in rows:
                    handle.write(json.dumps(dataclasses.asdict(item), ensure_ascii=False) + "\n")
        for filename, record in records.items():
            (staging / filename).write_text(json.dumps(record, indent=2, ensure_ascii=False), encoding="utf-8")
        trash = folder.parent / f".old-{folder.name}-{uuid.uuid4().hex[:8]}"
        if folder.exists():
            folder.rename(trash)
        staging.rename(folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(trash, ignore_errors=True)


_held_locks = threading.local()


@contextmanager
def file_lock(path: str | Path) -> Iterator[None]:
    """Exclusive `fcntl.flock` on `path` (created if missing), across processes and threads.

    Re-entrant within one thread, so a function holding the lock may call another that
    takes it. Closing the descriptor releases the lock, also when the process dies.
    """
    key = os.path.abspath(path)
    held = getattr(_held_locks, "paths", None)
    if held is None:
        held = _held_locks.paths = set()
    if key in held:
        yield
        return
    os.makedirs(os.path.dirname(key), exist_ok=True)
    fd = os.open(key, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        held.add(key)
        try:
            yield
        finally:
            held.discard(key)
    finally:
        os.close(fd)
