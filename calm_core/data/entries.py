"""The catalog's entries: which datasets exist, and what each name points to.

One `DatasetEntry` per nameable set: the built-in demo sets, the shared sets under
`data_dir()`, a person's uploads and the parts of saved splits (`list_datasets`, for
the pages' pickers and `calm datasets`), and the entry for any name that
`catalog.load_dataset` accepts except `hf:` (`find_dataset`: also a file path or a
`save_to_disk` folder). It also holds the names' prefixes, where the workspace keeps
uploads and splits (a name never leaves it: `upload_folder`, `split_folder`), and the
"did you mean" message for a name that is none of these. Loading a name is
`calm_core.data.catalog`; writing an upload, `calm_core.data.uploads`.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable

from calm_core.data.readers import FORMATS
from calm_core.data.schema import DataError, LoadReport, validate_mc_record, validate_open_record
from calm_core.paths import data_dir, inside, malformed_path, safe_name, workspace_dir

BUILTIN_PREFIX = "builtin/"
UPLOAD_PREFIX = "upload/"
SPLIT_PREFIX = "split/"
SPLIT_PARTS = ("train", "heldout", "test")  # S_T, S_V and an evaluation set
SPLIT_RECORD = "split.json"
HF_PREFIX = "hf:"
ITEMS_FILE = "items.jsonl"
META_FILE = "meta.json"
KIND_PEEK_ROWS = 20  # rows read to find the first valid one when detecting a shared set's kind


@dataclass
class DatasetEntry:
    """One nameable dataset. `n_items` counts rows (not validated) for shared sets."""

    name: str
    kind: str  # "mc", "open", or "unknown" (a file not opened yet)
    source: str  # "builtin" | "shared" | "upload" | "split" | "file"
    path: Path | None
    n_items: int | None
    description: str


# ----------------------------------------------------------------------------- listing


def list_datasets(kind: str | None = None) -> list[DatasetEntry]:
    """Built-in, shared, uploaded and split datasets, in that order; `kind` keeps "mc" or "open" only."""
    entries = _builtin_entries() + _shared_entries() + _upload_entries() + _split_entries()
    return [e for e in entries if kind is None or e.kind == kind]


def uploads_dir() -> Path:
    return workspace_dir() / "datasets"


def splits_dir() -> Path:
    return workspace_dir() / "splits"


def _builtin_module() -> ModuleType | None:
    """calm_core.data.builtin (builtin_names, load_builtin, DOMAINS), or None when absent."""
    try:
        return importlib.import_module("calm_core.data.builtin")  # lazy: generation is optional
    except ModuleNotFoundError as exc:
        if exc.name == "calm_core.data.builtin":
            return None
        raise


_builtin_info: dict[tuple[Callable[..., LoadReport], str], tuple[str, int]] = {}


def _builtin_entries() -> list[DatasetEntry]:
    module = _builtin_module()
    if module is None:
        return []
    domains: dict[str, str] = getattr(module, "DOMAINS", {})  # domain -> one-line description
    entries = []
    for name in module.builtin_names():
        # Kind and size are only known by generating the set; remember them per process.
        key = (module.load_builtin, name)
        if key not in _builtin_info:
            report = load_builtin_set(name, seed=0)
            _builtin_info[key] = (report.kind, len(report.items))
        kind, count = _builtin_info[key]
        domain = name.split("/")[1] if name.count("/") >= 2 else name
        base = domain.removesuffix("_open")
        description = f"built-in demo set: {domains.get(base, base)}" + (" Open answers." if base != domain else "")
        entries.append(DatasetEntry(name, kind, "builtin", None, count, description))
    return entries


def _shared_entries() -> list[DatasetEntry]:
    root = data_dir()
    if root is None or not root.is_dir():
        return []
    entries = []
    for path in sorted(root.glob("*/*.jsonl")):
        if path.parent.name.startswith("."):
            continue
        name = f"{path.parent.name}/{path.stem}"
        entries.append(_shared_entry_for(name, path))
    return entries


def count_rows(path: Path) -> int:
    """Non-blank lines: cheap, and equal to the item count for a clean file."""
    with path.open("rb") as handle:
        return sum(1 for line in handle if line.strip())


def _peek_kind(path: Path) -> str:
    """The kind of the first valid row: MCQA has choices, open QA has answers."""
    with path.open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            if number > KIND_PEEK_ROWS:
                break
            try:
                record = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            if not isinstance(record, dict):
                continue
            if validate_mc_record(record, path.name, number)[0] is not None:
                return "mc"
            if validate_open_record(record, path.name, number)[0] is not None:
                return "open"
    return "unknown"


def _folder_title(folder: Path) -> str:
    """The first heading of the folder's SOURCE.md ("arc: ARC ..., grade-school science MCQA")."""
    source = folder / "SOURCE.md"
    if source.is_file():
        for line in source.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.strip():
                return line.lstrip("# ").strip()
    return f"shared dataset {folder.name}"


def _upload_entries() -> list[DatasetEntry]:
    root = uploads_dir()
    if not root.is_dir():
        return []
    entries = []
    for folder in sorted(root.iterdir()):
        # Dot folders are half-written saves; a folder without meta.json is not an upload.
        if folder.is_dir() and not folder.name.startswith(".") and (folder / META_FILE).is_file():
            entries.append(upload_entry(folder))
    return entries


def upload_entry(folder: Path) -> DatasetEntry:
    """The entry of the upload saved in `folder`, described from its meta.json."""
    name = UPLOAD_PREFIX + folder.name
    try:
        meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return DatasetEntry(name, "unknown", "upload", folder, None, f"unreadable {META_FILE}: {exc}")
    description = f"uploaded from {meta.get('original_filename')} ({meta.get('n_rejected', 0)} rows rejected)"
    return DatasetEntry(name, meta.get("kind", "unknown"), "upload", folder, meta.get("n_items"), description)


def _split_entries() -> list[DatasetEntry]:
    root = splits_dir()
    if not root.is_dir():
        return []
    return [
        entry
        for folder in sorted(root.iterdir())
        if folder.is_dir() and not folder.name.startswith(".") and (folder / SPLIT_RECORD).is_file()
        for entry in _split_part_entries(folder)
    ]


def _split_part_entries(folder: Path) -> list[DatasetEntry]:
    """One entry per part of the split saved in `folder`, described from its split.json."""
    names = [f"{SPLIT_PREFIX}{folder.name}/{part}" for part in SPLIT_PARTS]
    paths = [folder / f"{part}.jsonl" for part in SPLIT_PARTS]
    try:
        record = json.loads((folder / SPLIT_RECORD).read_text(encoding="utf-8"))
        sizes, how = record["sizes"], f"seed {record['seed']}"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        reason = f"unreadable {SPLIT_RECORD}: {exc}"
        return [DatasetEntry(n, "unknown", "split", p, None, reason) for n, p in zip(names, paths, strict=True)]
    how += ", stratified by answer position" if record.get("stratify") else ""
    return [
        DatasetEntry(
            name,
            record.get("kind", "unknown"),
            "split",
            path,
            sizes.get(part),
            f"{part} part of {record.get('source')} ({how})",
        )
        for name, path, part in zip(names, paths, SPLIT_PARTS, strict=True)
    ]


# ----------------------------------------------------------------------------- resolving a name


def find_dataset(name: str) -> DatasetEntry:
    """The catalog entry for any name `load_dataset` accepts (except `hf:`); DataError if unknown."""
    name = name.strip()
    if name.startswith(BUILTIN_PREFIX):
        entry = next((e for e in _builtin_entries() if e.name == name), None)
    elif name.startswith(UPLOAD_PREFIX):
        folder = upload_folder(name)[1]
        entry = upload_entry(folder) if (folder / META_FILE).is_file() else None
    elif name.startswith(SPLIT_PREFIX):
        split_name = name[len(SPLIT_PREFIX) :].rpartition("/")[0]
        split_dir = split_folder(split_name)[1] if split_name else None
        parts = _split_part_entries(split_dir) if split_dir and (split_dir / SPLIT_RECORD).is_file() else []
        entry = next((e for e in parts if e.name == name), None)
    else:
        entry = _file_entry(name) or _shared_entry(name) or _folder_entry(name)
    if entry is None:
        raise DataError(unknown_name_message(name))
    return entry


def load_builtin_set(name: str, seed: int, limit: int | None = None) -> LoadReport:
    """The built-in set `builtin/<domain>/<split>` generated with `seed`, its first `limit`
    items, under its full name (listing counts it, `catalog.load_dataset` returns it)."""
    module = _builtin_module()
    parts = name.split("/", 2)
    if module is None or len(parts) != 3:
        raise DataError(unknown_name_message(name))
    report: LoadReport = module.load_builtin(parts[1], parts[2], seed=seed)
    return dataclasses.replace(report, name=name, items=list(report.items[:limit]))


def _file_entry(name: str) -> DatasetEntry | None:
    path = Path(name).expanduser()
    if path.suffix.lower() not in FORMATS:
        return None
    # A missing file still resolves here, so the loader can say "does not exist" plainly.
    return DatasetEntry(name, "unknown", "file", path, None, f"file {path}")


def _shared_entry(name: str) -> DatasetEntry | None:
    root = data_dir()
    parts = name.split("/")
    if root is None or len(parts) != 2 or not all(parts):
        return None
    path = root / parts[0] / f"{parts[1]}.jsonl"
    if not path.is_file() or not inside(root, path):
        return None
    return _shared_entry_for(name, path)


def _shared_entry_for(name: str, path: Path) -> DatasetEntry:
    return DatasetEntry(name, _peek_kind(path), "shared", path, count_rows(path), _folder_title(path.parent))


def _folder_entry(name: str) -> DatasetEntry | None:
    """A folder written by `datasets.save_to_disk`, named by its path."""
    path = Path(name).expanduser()
    is_hf = path.is_dir() and ((path / "dataset_info.json").is_file() or (path / "dataset_dict.json").is_file())
    return DatasetEntry(name, "unknown", "file", path, None, f"HF dataset folder {path}") if is_hf else None


def _known_names() -> list[str]:
    """Every listed name, without generating built-in sets (for "did you mean")."""
    module = _builtin_module()
    builtin = list(module.builtin_names()) if module else []
    return builtin + [e.name for e in _shared_entries() + _upload_entries() + _split_entries()]


def unknown_name_message(name: str) -> str:
    """Why `name` names no dataset: its close matches and every place that was looked in."""
    close = difflib.get_close_matches(name, _known_names(), n=5, cutoff=0.5)
    hint = f" Close matches: {', '.join(close)}." if close else ""
    root = data_dir()
    looked = [
        "built-in sets" if _builtin_module() else "built-in sets (calm_core.data.builtin is not available)",
        f"shared data in {root}" if root else "shared data (none: set CALM_DATA_DIR)",
        f"uploads in {uploads_dir()}",
        f"splits in {splits_dir()} (split/<name>/{'|'.join(SPLIT_PARTS)})",
    ]
    return (
        f"Expected a dataset name, but got {name!r}.{hint} Looked in: {'; '.join(looked)}. "
        "Also accepted: a .jsonl/.csv/.parquet path or hf:<name>[:<split>]."
    )


# ----------------------------------------------------------------------------- workspace folders


def upload_folder(name: str) -> tuple[str, Path]:
    """(clean name, folder) for an upload name; refuses anything that could leave the workspace."""
    return _workspace_folder(name, UPLOAD_PREFIX, uploads_dir(), "upload")


def split_folder(name: str) -> tuple[str, Path]:
    """(clean name, folder) for a split's name (`quiz` or `split/quiz`), inside the workspace."""
    return _workspace_folder(name, SPLIT_PREFIX, splits_dir(), "split")


def _workspace_folder(name: str, prefix: str, root: Path, what: str) -> tuple[str, Path]:
    bare = name.strip()
    bare = bare[len(prefix) :] if bare.startswith(prefix) else bare
    reason = malformed_path(bare)  # a NUL byte, a control character, an overlong name: one line
    if reason:
        raise DataError(f"Expected a plain {what} name, but {reason}")
    if "/" in bare or "\\" in bare or Path(bare).is_absolute():
        raise DataError(f"Expected a plain {what} name without path separators, but got {name!r}")
    try:
        clean = safe_name(bare)
    except ValueError as exc:
        raise DataError(str(exc)) from None
    folder = root / clean
    if not inside(root, folder):  # belt and braces: safe_name should already ensure this
        raise DataError(f"Expected a {what} name inside {root}, but got {name!r}")
    return clean, folder
