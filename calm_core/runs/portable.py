"""What an export or a report may say about the machine that made it: names and a
fingerprint, never a local path.

    portable = Portable.of(run)
    portable.model_name, portable.fingerprint      # "tiny-llama", "sha256:00303cce0aac2bc3"
    portable.text(html), portable.data(record)     # every local path of the run replaced

Exports are made to be pushed to the Hub or mailed, reports to be shared; a path in them
names a home directory, a workspace's layout or a data file's place. So:

- the base model is named by its hub id where one is known (`hub_id.portable_base_model`),
  else by `public_model_name` (a directory's or file's base name), with its fingerprint
  (provenance.model_fingerprint, as the run's load recorded it in status.json);
- a dataset named by a file path (`calm train --train-data ~/quiz.csv`) becomes its base
  name (`public_dataset_name`); catalog names (builtin/, upload/, split/, hf:) stay;
- whatever is written passes through `text` or `data` last: each local path the run knows
  of (its model's, its data files', its own directory) becomes that name, and the
  machine's folders become placeholders: the workspace `$CALM_WORKSPACE`, the data folder
  `$CALM_DATA_DIR`, the model cache `$CALM_CACHE_DIR`, the project `$CALM_STUDIO`, the home
  directory `~`. JSON is redacted value by value (json.dumps would escape a non-ASCII
  path out of reach of a text search), HTML with its escaped spellings too.

The run's own config.json and status.json keep their paths: a resume reloads the model
from them.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from calm_core.data.readers import FORMATS
from calm_core.paths import PROJECT_ROOT, cache_dir, data_dir, workspace_dir
from calm_core.provenance import model_fingerprint
from calm_core.runs.records import ResultRow, RunConfig
from calm_core.runs.rundir import RunDir

DATA_KEYS = ("train_data", "heldout_data", "eval_data")  # config.json's `train` keys that name datasets
# A match must end where a path component does: not before a letter, digit, `-` or a `.`
# that goes on (`/home/me.old`), but before a sentence's full stop (`... in /home/me.`).
_GOES_ON = r"(?![\w-]|\.[\w.-])"


def looks_local(text: str) -> bool:
    """Whether `text` names a place on this machine: absolute, `~` or explicitly relative."""
    return text.startswith(("/", "~", "./", "../"))


def public_model_name(model: str) -> str:
    """A run's `model` setting as an export may name it: `embedded` and hub ids as they are,
    a local directory or file by its base name."""
    name = model.strip()
    return (Path(name).name or name) if looks_local(name) else name


def public_dataset_name(name: str) -> str:
    """A dataset name as an export may show it: catalog names as they are; a file or folder
    path by its base name, a trailing slice (`[0:100]`) kept."""
    base, bracket, rest = name.strip().partition("[")
    if looks_local(base) or Path(base).suffix.lower() in FORMATS:
        return Path(base).name + bracket + rest
    return name


def portable_config(config: RunConfig) -> dict[str, Any]:
    """A copy of a run's config.json with the model and the datasets by their public names
    (the export's calm_config.json, the report's config.json)."""
    out = copy.deepcopy(config.to_json())

    train = out.get("train")
    if isinstance(train, dict):
        if isinstance(train.get("model"), str):
            train["model"] = public_model_name(train["model"])
        for key in DATA_KEYS:
            value = train.get(key)
            if isinstance(value, str):
                train[key] = public_dataset_name(value)
            elif isinstance(value, list):
                train[key] = [public_dataset_name(v) if isinstance(v, str) else v for v in value]
    for record in (out.get("splits") or {}).values():
        if isinstance(record, dict) and isinstance(record.get("source"), str):
            record["source"] = public_dataset_name(record["source"])
    return out


@dataclass(frozen=True)
class Portable:
    """One run's public names and the replacements of its local paths."""

    model_name: str
    fingerprint: str | None
    replacements: tuple[tuple[str, str], ...]  # (local path, public text), longest first

    @classmethod
    def of(cls, run: RunDir) -> Portable:
        """The run's model name and fingerprint, and every local path it knows of."""
        train = run.config.train
        status = run.status_or_none()
        loaded: Mapping[str, Any] = (status.model if status is not None else None) or {}
        model = str(train.get("model") or "embedded")
        pairs = _model_paths(model, loaded) + _dataset_paths(run, train) + [(str(run.path), run.run_id)]
        pairs += _machine_folders()
        return cls(public_model_name(model), _fingerprint(model, loaded), _replacements(pairs))

    def text(self, text: str) -> str:
        """`text` with each local path replaced, also where it appears HTML-escaped."""
        if not self.replacements:
            return text
        table = dict(self.replacements)
        pattern = "|".join(re.escape(local) for local, _ in self.replacements)
        return re.sub(f"(?<![\\w./-])(?:{pattern}){_GOES_ON}", lambda m: table[m.group(0)], text)

    def data(self, value: Any) -> Any:
        """A JSON-like value with `text` applied to every string in it (keys included)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.data(k): self.data(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.data(v) for v in value]
        return value


def _fingerprint(model: str, loaded: Mapping[str, Any]) -> str | None:
    """The fingerprint the run's load recorded, else one of the model's files if they are
    still here (a run from before fingerprints were recorded); None for a hub id."""
    if loaded.get("fingerprint"):
        return str(loaded["fingerprint"])
    for candidate in (model if model != "embedded" else None, loaded.get("source")):
        found = model_fingerprint(candidate) if isinstance(candidate, str) and candidate else None
        if found:
            return found
    return None


def _model_paths(model: str, loaded: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The model's local spellings (as set, as loaded) -> its base name."""
    spec = loaded.get("spec") or {}
    names = (model, loaded.get("name"), loaded.get("source"), spec.get("name"))
    return [(name, Path(name).name) for name in names if isinstance(name, str) and looks_local(name)]


def _dataset_paths(run: RunDir, train: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Datasets named by a path (training, held-out, evaluation, split sources, sets added
    after training) -> their base names."""
    names: list[Any] = [train.get("train_data"), train.get("heldout_data"), *(train.get("eval_data") or [])]
    names += [record.get("source") for record in run.config.splits.values() if isinstance(record, dict)]
    names += [row.dataset for row in _result_rows(run)]
    return [(n, public_dataset_name(n)) for n in names if isinstance(n, str) and looks_local(n)]


def _result_rows(run: RunDir) -> list[ResultRow]:
    """results.json's rows and those added after training; [] for a file that is missing or
    damaged (the export and the report say so where they read it)."""
    rows: list[ResultRow] = []
    reads: tuple[Callable[[], Sequence[ResultRow]], ...] = (lambda: run.results().rows, run.added_results)
    for read in reads:
        try:
            rows += read()
        except (OSError, ValueError):  # RunFileError is a ValueError
            continue
    return rows


def _machine_folders() -> list[tuple[str, str]]:
    """This machine's folders -> placeholders, the innermost winning by length."""
    folders = [
        (workspace_dir(), "$CALM_WORKSPACE"),
        (data_dir(), "$CALM_DATA_DIR"),
        (cache_dir(), "$CALM_CACHE_DIR"),
        (PROJECT_ROOT, "$CALM_STUDIO"),
        (Path.home(), "~"),
    ]
    return [(str(folder), mark) for folder, mark in folders if folder is not None]


def _replacements(pairs: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """Each local path in its spellings (as given, `~` expanded, symlinks resolved, HTML-
    escaped), longest first so the innermost path wins; the root is never replaced (a home
    directory of `/` would otherwise match every path)."""
    table: dict[str, str] = {}
    for local, public in pairs:
        if not local.strip():  # "" would resolve to the current directory
            continue
        for spelling in _spellings(local):
            if len(Path(spelling).parts) > 1 and spelling not in table:
                table[spelling] = public
                table.setdefault(escape(spelling), escape(public))
    return tuple(sorted(table.items(), key=lambda pair: -len(pair[0])))


def _spellings(local: str) -> set[str]:
    """`local` as written, with `~` expanded, and resolved (symlinks, `..`)."""
    path = Path(local.strip()).expanduser()
    out = {local.strip().rstrip("/"), str(path)}
    try:
        out.add(str(path.resolve()))
    except (OSError, RuntimeError):
        pass
    return {s for s in out if s}
