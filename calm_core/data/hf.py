"""Hugging Face datasets -> validated items, through the same stages as the file loaders.

    report = load_hf("some/folder_from_save_to_disk", split="test", mapping="question=q, answer=label")
    report = load_hf("allenai/ai2_arc", config="ARC-Easy", split="test")   # connected machines

`datasets` is an optional extra, imported only here and only when used. A hub id that
cannot be reached fails at once with a DataError saying how to bring the data over;
`trust_remote_code` is never passed.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path
from typing import Any, Iterator, Sequence
from urllib.parse import urlparse

import numpy as np

from calm_core.data.loaders import _build_report, _stream_report
from calm_core.data.mapping import ColumnMapping
from calm_core.data.row_types import KeyedRow, Row
from calm_core.data.schema import DataError, LoadReport
from calm_core.data.sources import Table, unkeyed
from calm_core.data.stream import STREAM_FROM_BYTES

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")


class HFSource:
    """A Hugging Face `datasets.Dataset` (memory-mapped Arrow); the key is the row index."""

    def __init__(self, dataset: Any, label: str) -> None:
        self.dataset, self.source, self.where = dataset, label, label
        self.columns: list[str] | None = list(dataset.column_names)

    def scan(self) -> Iterator[KeyedRow]:
        for index, record in enumerate(self.dataset):
            yield index + 1, index, record

    def rows(self) -> Iterator[Row]:
        return unkeyed(self.scan())

    def table(self) -> Table:
        return Table(self.source, self.where, self.columns or [], self.rows())

    def read(self, keys: Sequence[int] | np.ndarray) -> list[Any]:
        return [self.dataset[int(key)] for key in keys]


def load_hf(
    name_or_path: str | Path,
    split: str | None = None,
    mapping: ColumnMapping | str = ColumnMapping(),  # noqa: B008 - a frozen dataclass: one shared default is safe
    kind: str = "auto",
    limit: int | None = None,
    name: str | None = None,
    config: str | None = None,
    stream: bool | None = None,
) -> LoadReport:
    """Load a Hugging Face dataset: a folder written by `save_to_disk`, or a hub id.

    `split` may be omitted when the dataset has exactly one; `config` is the hub
    configuration ("ARC-Easy" for allenai/ai2_arc). A hub id needs a network connection;
    offline it fails with a DataError that says how to bring the data over.
    `stream` as in `load_file` (None: LazyItems when the Arrow data is `STREAM_FROM_BYTES`
    or more); a dataset is memory-mapped Arrow already, so a row is read by its index.
    """
    datasets = _import_datasets()
    label = f"hf:{name_or_path}" + (f":{split}" if split else "")
    dataset = _pick_split(datasets, _open_hf(datasets, str(name_or_path), config, split), split, label)
    if dataset.num_rows == 0:
        raise DataError(f"Expected data rows in {label}, but the dataset is empty")
    mapping = ColumnMapping.parse(mapping) if isinstance(mapping, str) else mapping
    if stream or (stream is None and dataset.data.nbytes >= STREAM_FROM_BYTES):
        return _stream_report(HFSource(dataset, label), kind, mapping, limit, name or label)
    return _build_report(HFSource(dataset, label).table(), kind, mapping, limit, name or label)


def _import_datasets() -> Any:
    try:
        import datasets
    except ImportError:
        raise DataError(
            "Expected the optional `datasets` package for HF datasets, but it is not installed: "
            "pip install 'calm-studio[hf]'"
        ) from None
    return datasets


def _open_hf(datasets: Any, name_or_path: str, config: str | None, split: str | None) -> Any:
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        try:
            return datasets.load_from_disk(str(path))
        except Exception as exc:  # datasets raises many types here; the user needs one message
            message = f"Expected a folder written by `save_to_disk` at {path}, but could not load it: {exc}"
            raise DataError(message) from None
    if not _HUB_ID.match(name_or_path) or name_or_path.startswith((".", "~")):
        raise DataError(f"Expected a dataset folder or a hub id like `owner/name`, but {name_or_path!r} is neither")
    return _load_from_hub(datasets, name_or_path, config, split)


def _hub_reachable(datasets: Any) -> bool:
    """False when the hub's host does not even resolve: fail now, not after ~25 s of retries."""
    if datasets.config.HF_HUB_OFFLINE:
        return True  # offline mode reads the local HF cache without touching the network
    from huggingface_hub import constants

    host = urlparse(constants.ENDPOINT).hostname or "huggingface.co"
    try:
        socket.getaddrinfo(host, 443)
    except OSError:
        return False
    return True


def _load_from_hub(datasets: Any, hub_id: str, config: str | None, split: str | None) -> Any:
    if not _hub_reachable(datasets):
        raise DataError(_hub_advice(hub_id, "the hub cannot be reached from this machine"))
    try:
        return datasets.load_dataset(hub_id, config, split=split)  # never trust_remote_code
    except Exception as exc:  # offline, unknown id, gated repo...: all end the same way for the user
        reason = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        raise DataError(_hub_advice(hub_id, reason)) from None


def _hub_advice(hub_id: str, reason: str) -> str:
    return (
        f"Expected to fetch {hub_id!r} from the Hugging Face hub, but could not ({reason}). "
        f"On a connected machine run `datasets.load_dataset({hub_id!r}).save_to_disk('some/folder')`, "
        "copy the folder here and pass its path instead (or set HF_HUB_OFFLINE=1 when it is "
        "already in the local HF cache)."
    )


def _pick_split(datasets: Any, loaded: Any, split: str | None, label: str) -> Any:
    if not isinstance(loaded, datasets.DatasetDict):
        return loaded
    splits = list(loaded.keys())
    if split is None and len(splits) == 1:
        split = splits[0]
    if split not in loaded:
        raise DataError(f"Expected a split among {', '.join(splits)} for {label}, but got {split!r}")
    return loaded[split]
