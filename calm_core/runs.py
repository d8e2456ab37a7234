"""Run-directory files, written in exactly one way (see shared/design.md, "Run directory").

Everything a job writes goes through these functions: JSON files are replaced
atomically (temp file + rename) so a reader polling the directory never sees half a
file; per-item evaluation outputs go to `eval/<variant>/<dataset>.parquet`.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from calm_core.paths import safe_name


def atomic_write_text(path: str | Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: str | Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, default=str) + "\n")


def predictions_path(root: str | Path, variant: str, dataset: str) -> Path:
    """`<root>/eval/<variant>/<dataset>.parquet`, with `/` in dataset names made safe."""
    return Path(root) / "eval" / safe_name(variant) / f"{safe_name(dataset.replace('/', '__'))}.parquet"


def write_predictions(root: str | Path, variant: str, dataset: str, frame: Any) -> Path:
    """Write a per-item predictions DataFrame atomically; returns its path."""
    path = predictions_path(root, variant, dataset)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    frame.to_parquet(tmp, index=False)
    os.replace(tmp, path)
    return path
