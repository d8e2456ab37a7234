"""A damaged run file, said in one line: `RunFileError` and the checked JSON reader.

Every reader of a run's JSON files (RunDir, the job queue) goes through `read_json_object`,
so a file that is empty, cut short or of the wrong shape is reported the same way
everywhere: the file, what is wrong with it, and what to do (docs/reliability.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class RunFileError(ValueError):
    """A run-directory file that cannot be read as what it must be. The message names
    the file and what to do, in one line: every command and page shows it as it is."""


def read_json_object(path: str | Path, advice: str, key_types: dict[str, type] | None = None) -> dict[str, Any]:
    """A JSON object from `path`; a file that is empty, cut short, not UTF-8, not an object,
    or lacks one of `key_types` (key -> type) raises RunFileError naming it and `advice`.
    A missing file raises FileNotFoundError as usual (callers decide what absence means)."""
    path = Path(path)
    raw = path.read_bytes()
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        problem = "not UTF-8 text"
    except json.JSONDecodeError as error:  # a ValueError with the position: what the message names
        problem = "empty" if not raw.strip() else f"not valid JSON: {error.msg} at line {error.lineno}"
    else:
        if not isinstance(data, dict):
            problem = f"a JSON {type(data).__name__} where an object belongs"
        else:
            expected = key_types or {}
            wrong = [key for key, kind in expected.items() if not isinstance(data.get(key), kind)]
            if not wrong:
                return data
            problem = f"`{wrong[0]}` is missing or not a {expected[wrong[0]].__name__}"
    raise RunFileError(f"{path} is damaged ({problem}); {advice}")
