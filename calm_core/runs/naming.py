"""What a run is called and where runs live: the runs root, run ids, and a config's labels.

Ids are made here (sortable by creation) and checked here (one safe path component), so
an id from a URL or a form can never escape the runs root.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

from calm_core.paths import safe_name, workspace_dir


def runs_root(root: str | Path | None = None) -> Path:
    return Path(root) if root is not None else workspace_dir() / "runs"


def new_run_id(name_hint: str | None = None, now: float | None = None) -> str:
    """`20261130-051200-<hint>-<4 hex>`: UTC time first so ids sort by creation.

    The hint goes through `safe_name` (ValueError when nothing usable is left). Four hex
    digits make clashes rare, not impossible: `RunDir.new` retries on a clash.
    """
    parts = [time.strftime("%Y%m%d-%H%M%S", time.gmtime(now))]
    if name_hint is not None and name_hint.strip():
        parts.append(safe_name(name_hint, max_len=40))
    parts.append(secrets.token_hex(2))
    return "-".join(parts)


def check_run_id(run_id: str) -> str:
    """Return `run_id` when it is a single safe path component, else raise ValueError."""
    try:
        ok = isinstance(run_id, str) and safe_name(run_id) == run_id
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"Expected a path-safe run id (letters, digits, '.', '_', '-'), but got {run_id!r}")
    return run_id


def config_label(config: dict[str, Any], key: str) -> str | None:
    """`config[key]`, or the first `config[section][key]` one level down."""
    if isinstance(config.get(key), str):
        return config[key]
    for section in config.values():
        if isinstance(section, dict) and isinstance(section.get(key), str):
            return section[key]
    return None
