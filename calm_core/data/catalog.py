"""Dataset catalog: every dataset the studio and the CLI can name, plus uploads.

Names, in the order they are resolved:

- `builtin/<domain>/<split>`  demo sets generated from fact tables (`calm_core.data.builtin`)
- `upload/<name>`             a person's upload: `workspace/datasets/<name>/items.jsonl` holds
                              the normalised items, `meta.json` where they came from
- `split/<name>/<part>`       train / heldout / test parts of any dataset (`calm_core.data.split`):
                              `workspace/splits/<name>/<part>.jsonl`, and `split.json` records the
                              source, seed, sizes and the item ids of each part
- a file path (.jsonl / .json / .csv / .parquet), or a `save_to_disk` folder
- `<folder>/<split>`          real datasets under `data_dir()` (CALM_DATA_DIR): `<folder>/<split>.jsonl`
- `hf:<name>[:<config>]:<split>` or `hf:<name>` a Hugging Face dataset (see `loaders.load_hf`)

Any name may end with a slice, `name[a:b]` (Python semantics, non-negative bounds),
to use part of a set: e.g. `triviaqa/unfiltered_dev_sub3000[0:2000]` to train and
`[2000:2200]` as the held-out set. The slice applies before `limit`.

Built-in, shared, uploaded and split sets are listed by `list_datasets`; files and hub
datasets are loaded on demand. Uploads are plain files, so they survive a restart and
read back as identical items.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import json
import re
import shutil
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from calm_core.data.hf import load_hf
from calm_core.data.loaders import check_limit, load_file
from calm_core.data.mapping import ColumnMapping
from calm_core.data.readers import FORMATS
from calm_core.data.schema import DataError, LoadReport, RowError, validate_mc_record, validate_open_record
from calm_core.io import staging_directory
from calm_core.paths import data_dir, inside, safe_name, workspace_dir

BUILTIN_PREFIX = "builtin/"
UPLOAD_PREFIX = "upload/"
SPLIT_PREFIX = "split/"
SPLIT_PARTS = ("train", "heldout", "test")  # S_T, S_V and an evaluation set
SPLIT_RECORD = "split.json"
HF_PREFIX = "hf:"
ITEMS_FILE = "items.jsonl"
META_FILE = "meta.json"
META_FORMAT = 1  # bump when meta.json changes shape
MAX_REJECTED_KEPT = 1000  # rejected rows listed in meta.json; the count is always exact
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
            report = _load_builtin(name, seed=0)
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


def _count_rows(path: Path) -> int:
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
            entries.append(_upload_entry(folder))
    return entries


def _upload_entry(folder: Path) -> DatasetEntry:
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


# ----------------------------------------------------------------------------- resolving + loading


def find_dataset(name: str) -> DatasetEntry:
    """The catalog entry for any name `load_dataset` accepts (except `hf:`); DataError if unknown."""
    name = name.strip()
    if name.startswith(BUILTIN_PREFIX):
        entry = next((e for e in _builtin_entries() if e.name == name), None)
    elif name.startswith(UPLOAD_PREFIX):
        folder = _upload_folder(name)[1]
        entry = _upload_entry(folder) if (folder / META_FILE).is_file() else None
    elif name.startswith(SPLIT_PREFIX):
        split_name = name[len(SPLIT_PREFIX) :].rpartition("/")[0]
        folder = split_folder(split_name)[1] if split_name else None
        parts = _split_part_entries(folder) if folder and (folder / SPLIT_RECORD).is_file() else []
        entry = next((e for e in parts if e.name == name), None)
    else:
        entry = _file_entry(name) or _shared_entry(name) or _folder_entry(name)
    if entry is None:
        raise DataError(_unknown_name_message(name))
    return entry


def load_dataset(
    name: str,
    limit: int | None = None,
    seed: int = 0,
    mapping: ColumnMapping | str | None = None,
    kind: str = "auto",
) -> LoadReport:
    """Load any nameable dataset (see the module docstring) into a LoadReport.

    `seed` only matters for built-in sets (they are generated); `limit` keeps the first
    N valid items in file order; `mapping` renames columns (shared sets and uploads use
    the default names already, but e.g. "subject=prop" still applies to them).
    """
    name = name.strip()
    check_limit(limit)
    base, part = split_slice(name)
    if part is not None:
        report = load_dataset(base, seed=seed, mapping=mapping, kind=kind)
        return dataclasses.replace(report, name=name, items=report.items[part][:limit])  # LazyItems: a view
    mapping = mapping or ColumnMapping()
    if name.startswith(HF_PREFIX):
        return _load_hf_name(name, mapping, kind, limit)
    entry = find_dataset(name)
    if entry.source == "builtin":
        return _load_builtin(entry.name, seed, limit)
    if entry.path is not None and entry.path.is_dir() and entry.source == "file":
        return load_hf(entry.path, mapping=mapping, kind=kind, limit=limit, name=entry.name)
    path = entry.path / ITEMS_FILE if entry.source == "upload" else entry.path
    kind = entry.kind if kind == "auto" and entry.kind in ("mc", "open") else kind
    report = load_file(path, kind=kind, mapping=mapping, limit=limit, name=entry.name)  # type: ignore[arg-type]
    return _with_upload_rejects(report, entry.path) if entry.source == "upload" else report  # type: ignore[arg-type]


def _with_upload_rejects(report: LoadReport, folder: Path) -> LoadReport:
    """An upload's report with the rows rejected when it was uploaded (from meta.json):
    items.jsonl holds only the kept rows, and a person training on the upload should
    still see that some of their file was left out, and why."""
    try:
        meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
        listed = [RowError(**e) for e in meta.get("rejected", [])]
        count = int(meta.get("n_rejected", len(listed)))
    except (OSError, ValueError, TypeError):  # an unreadable meta.json must not hide the items
        return report
    return dataclasses.replace(
        report,
        rejected=listed + report.rejected,
        unlisted_rejected=report.unlisted_rejected + max(count - len(listed), 0),
    )


_SLICE = re.compile(r"^(?P<base>.+)\[(?P<start>\d*):(?P<stop>\d*)\]$")


def split_slice(name: str) -> tuple[str, slice | None]:
    """(`name` without a trailing `[a:b]`, the slice or None). Bounds are optional ints >= 0."""
    match = _SLICE.match(name)
    if match is None:
        if name.endswith("]") and "[" in name:
            raise DataError(f"Expected a slice like `{name.split('[')[0]}[0:100]` at the end of {name!r}")
        return name, None
    start, stop = (int(v) if v else None for v in (match["start"], match["stop"]))
    if start is not None and stop is not None and stop <= start:
        raise DataError(f"Expected a non-empty slice in {name!r} (stop > start)")
    return match["base"], slice(start, stop)


def _load_builtin(name: str, seed: int, limit: int | None = None) -> LoadReport:
    module = _builtin_module()
    parts = name.split("/", 2)
    if module is None or len(parts) != 3:
        raise DataError(_unknown_name_message(name))
    report = module.load_builtin(parts[1], parts[2], seed=seed)
    return dataclasses.replace(report, name=name, items=list(report.items[:limit]))


def _load_hf_name(name: str, mapping: ColumnMapping, kind: str, limit: int | None) -> LoadReport:
    """`hf:<name>`, `hf:<name>:<split>` or `hf:<name>:<config>:<split>`; a local folder may hold ':'."""
    rest = name[len(HF_PREFIX) :]
    if Path(rest).expanduser().is_dir():
        return load_hf(rest, mapping=mapping, kind=kind, limit=limit, name=name)
    parts = rest.split(":")
    if len(parts) > 3 or not all(parts):
        raise DataError(f"Expected hf:<name>, hf:<name>:<split> or hf:<name>:<config>:<split>, but got {name!r}")
    config = parts[1] if len(parts) == 3 else None
    split = parts[-1] if len(parts) > 1 else None
    return load_hf(parts[0], split=split, mapping=mapping, kind=kind, limit=limit, name=name, config=config)


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
    return DatasetEntry(name, _peek_kind(path), "shared", path, _count_rows(path), _folder_title(path.parent))


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


def _unknown_name_message(name: str) -> str:
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


# ----------------------------------------------------------------------------- uploads


def save_upload(
    name: str,
    report: LoadReport,
    original_filename: str,
    mapping: ColumnMapping | str | None = None,
    overwrite: bool = False,
) -> DatasetEntry:
    """Store a loaded report as `upload/<name>`: items.jsonl + meta.json, written atomically.

    The name is cleaned with `safe_name` (spaces become "_"); one that contains a path
    separator or is absolute is refused. An existing upload is kept unless `overwrite`.
    """
    clean, folder = _upload_folder(name)
    if not report.items:
        raise DataError(f"Expected at least one valid item to save as upload/{clean}, but the report has none")
    if folder.exists() and not overwrite:
        message = f"Expected a new upload name, but upload/{clean} already exists (pass overwrite=True to replace it)"
        raise DataError(message)
    if isinstance(mapping, str):
        mapping = ColumnMapping.parse(mapping)
    meta = _upload_meta(clean, report, original_filename, mapping)
    write_folder_atomically(folder, {ITEMS_FILE: report.items}, {META_FILE: meta})
    return _upload_entry(folder)


def delete_upload(name: str) -> None:
    """Remove `upload/<name>`; DataError when there is no such upload."""
    clean, folder = _upload_folder(name)
    if not (folder / META_FILE).is_file():
        raise DataError(_unknown_name_message(UPLOAD_PREFIX + clean))
    shutil.rmtree(folder)


def _upload_folder(name: str) -> tuple[str, Path]:
    """(clean name, folder) for an upload name; refuses anything that could leave the workspace."""
    return _workspace_folder(name, UPLOAD_PREFIX, uploads_dir(), "upload")


def split_folder(name: str) -> tuple[str, Path]:
    """(clean name, folder) for a split's name (`quiz` or `split/quiz`), inside the workspace."""
    return _workspace_folder(name, SPLIT_PREFIX, splits_dir(), "split")


def _workspace_folder(name: str, prefix: str, root: Path, what: str) -> tuple[str, Path]:
    bare = name.strip()
    bare = bare[len(prefix) :] if bare.startswith(prefix) else bare
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


def _upload_meta(
    clean: str, report: LoadReport, original_filename: str, mapping: ColumnMapping | None
) -> dict[str, Any]:
    return {
        "format": META_FORMAT,
        "name": UPLOAD_PREFIX + clean,
        "original_filename": original_filename,
        "loaded_as": report.name,
        "mapping": mapping.to_dict() if mapping else None,
        "kind": report.kind,
        "n_items": len(report.items),
        "n_rejected": report.n_rejected,
        "rejected": [dataclasses.asdict(e) for e in report.rejected[:MAX_REJECTED_KEPT]],
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def write_folder_atomically(folder: Path, items: dict[str, list], records: dict[str, dict[str, Any]]) -> None:
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
