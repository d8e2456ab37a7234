"""An append-only disk arena of arrays: one data file, one index, one memory map.

Why: the frozen-prefix cache (`frozen_prefix.HiddenStateStore`) holds one (L, d) array
per token sequence. In memory that is tens of GB at 100k sequences, and one file per
sequence, read by mapping it, runs into Linux's limit on mappings per process
(vm.max_map_count, 65530 by default). Here every array of one cache goes into a single
data file that is mapped once (re-mapped when it has grown), and what a process holds
is the index (a 64-byte record and a dict entry per array, against the array's own
L x d x 4 bytes) plus at most `ArenaConfig.resident_bytes` of mapped pages, which are
handed back to the page cache when reached: bounded whatever the data's size.

Files under the arena's directory:

    data.arena   a header, then each array's key bytes and data bytes, 64-byte aligned
    index.arena  a header, then one fixed-size record per array: key digest, offset,
                 key length, dtype, shape, and a CRC of the record
    lock         the writers' lock (`calm_core.io.file_lock`)

Crash safety (a writer killed at any instant, or two runs appending at once): a writer
takes the lock, writes the key and data past the end of the data file, then appends the
index record. A record therefore only ever names bytes that were written before it, and
a reader trusts nothing but records: bytes of a torn data append are never named; a
torn record (the index's length not a whole number of records) is not read, and the
next writer cuts it off before appending; a record whose CRC fails or which points past
the data file's end (possible only if the machine lost power before the data reached the
disk, without `fsync`) is ignored. Readers take no lock. Each record's key is stored
beside its data and compared on every read, so a digest collision cannot serve another
key's array.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Self

import numpy as np

from calm_core.io import file_lock

_DATA_MAGIC = b"CALM-ARENA-DATA1"
_INDEX_MAGIC = b"CALM-ARENA-INDX1"
_HEADER = 64  # bytes before the first record / the first array, so both stay aligned
_ALIGN = 64  # every array starts on a 64-byte boundary of the data file
_MAX_DIMS = 4
_RECORD_SIZE = 64
# One index record: the key's digest, where its bytes start in the data file, its length,
# the array's dtype (numpy's dtype.str) and shape (unused dims 0), then a CRC of all that.
_FIELDS = struct.Struct("<16sQI8sB3x4I")
_RECORD = np.dtype(
    {
        "names": ["digest", "offset", "key_size", "dtype", "ndim", "shape", "crc"],
        "formats": ["V16", "<u8", "<u4", "S8", "u1", ("<u4", (_MAX_DIMS,)), "<u4"],
        "offsets": [0, 16, 24, 28, 36, 40, _FIELDS.size],
        "itemsize": _RECORD_SIZE,
    }
)


@dataclass(frozen=True)
class ArenaConfig:
    """How an arena trades speed for durability and memory."""

    fsync: bool = (
        False  # fsync data before its record and the record after: survives power loss, not only a killed process
    )
    resident_bytes: int = 64 << 20  # bytes a reader reads through the map before it lets the mapped pages go


class _Entry(NamedTuple):
    offset: int  # of the key bytes; the array follows them
    key_size: int
    dtype: str
    shape: tuple[int, ...]


def _digest(key: bytes) -> bytes:
    return hashlib.blake2b(key, digest_size=16).digest()


def _aligned(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


def _pack(digest: bytes, entry: _Entry) -> bytes:
    """One index record: the fields, then the CRC of the fields, padded to _RECORD_SIZE."""
    shape = entry.shape + (0,) * (_MAX_DIMS - len(entry.shape))
    body = _FIELDS.pack(digest, entry.offset, entry.key_size, entry.dtype.encode(), len(entry.shape), *shape)
    return (body + struct.pack("<I", zlib.crc32(body))).ljust(_RECORD_SIZE, b"\0")


def _valid(raw: bytes, records: np.ndarray, data_size: int) -> np.ndarray:
    """Which records to trust: CRC right, dtype and shape readable, bytes inside the data file."""
    view = memoryview(raw)
    crc = np.fromiter(
        (zlib.crc32(view[at : at + _FIELDS.size]) for at in range(0, len(raw), _RECORD_SIZE)),
        dtype=np.uint32,
        count=len(records),
    )
    dtypes, which = np.unique(records["dtype"], return_inverse=True)
    itemsize = np.array([_itemsize(d) for d in dtypes], dtype=np.int64)[which.reshape(-1)]
    used = np.arange(_MAX_DIMS) < records["ndim"][:, None]
    count = np.where(used, records["shape"], 1).astype(np.int64).prod(axis=1)
    end = records["offset"].astype(np.int64) + records["key_size"] + count * itemsize
    valid: np.ndarray = (crc == records["crc"]) & (records["ndim"] <= _MAX_DIMS) & (itemsize > 0) & (end <= data_size)
    return valid


def _itemsize(dtype: bytes) -> int:
    """A stored dtype's item size; 0 for one numpy cannot read (a damaged record)."""
    try:
        found = np.dtype(dtype.decode())
    except (TypeError, ValueError, UnicodeDecodeError):
        return 0
    return 0 if found.hasobject else found.itemsize


def _nbytes(entry: _Entry) -> int:
    return int(np.prod(entry.shape, dtype=np.int64)) * np.dtype(entry.dtype).itemsize


def _write_all(fd: int, parts: list[memoryview | bytes], offset: int) -> None:
    """pwritev until every byte is written (a regular file may take fewer in one call)."""
    views = [memoryview(p).cast("B") for p in parts]
    while views:
        done = os.pwritev(fd, views, offset)
        offset += done
        while views and done >= len(views[0]):
            done -= len(views[0])
            views.pop(0)
        if views:
            views[0] = views[0][done:]


class Arena:
    """Arrays by key (bytes) in one append-only data file; readable by many processes,
    appendable by many under a file lock. An array, once put, never changes: a second
    `put` of the same key keeps the first."""

    def __init__(self, path: Path, config: ArenaConfig | None = None) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.config = config or ArenaConfig()
        self._lock = self.path / "lock"
        self._data = os.open(self.path / "data.arena", os.O_RDWR | os.O_CREAT, 0o666)
        self._index = os.open(self.path / "index.arena", os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o666)
        # The index in memory: its valid records in a table, and digest -> row; rows of
        # further keys with the same digest, were there ever any, in _collided.
        self._table = np.empty(0, dtype=_RECORD)
        self._count = 0
        self._rows: dict[bytes, int] = {}
        self._collided: dict[bytes, list[int]] = {}
        self._index_pos = _HEADER  # bytes of the index read so far
        self.ignored = 0  # records skipped as damaged or pointing past the data (see the module's docstring)
        self._map: mmap.mmap | None = None
        self._resident = 0  # bytes read through the map since its pages were last let go
        self._init_headers()
        self._refresh()

    # -- the mapping interface -------------------------------------------------------
    def __len__(self) -> int:
        self._refresh()
        return self._count

    def __contains__(self, key: bytes) -> bool:
        return self._find(key) is not None

    def get(self, key: bytes) -> np.ndarray | None:
        """A copy of the array stored under `key`, or None. A copy, so that a later
        re-map or the release of mapped pages never touches what the caller holds."""
        entry = self._find(key)
        if entry is None:
            return None
        start = entry.offset + entry.key_size
        array = np.frombuffer(
            self._mapped(start + _nbytes(entry)),
            dtype=entry.dtype,
            count=int(np.prod(entry.shape, dtype=np.int64)),
            offset=start,
        )
        out = array.reshape(entry.shape).copy()
        del array
        self._read(_nbytes(entry))
        return out

    def put(self, key: bytes, array: np.ndarray) -> bool:
        """Append `array` under `key`; False (and nothing written) when the key is
        already there, from this process or another."""
        array = np.asarray(array, order="C")  # (not ascontiguousarray: it makes a 0-d array 1-d)
        if array.dtype.hasobject or len(array.dtype.str) > 8 or array.ndim > _MAX_DIMS:
            raise ValueError(
                f"Expected a plain numeric array of at most {_MAX_DIMS} dims, but got {array.dtype} {array.shape}"
            )
        with file_lock(self._lock):
            self._refresh()
            if self._find(key) is not None:
                return False
            self._cut_torn_record()
            offset = _aligned(os.fstat(self._data).st_size)  # past any torn append's bytes
            _write_all(self._data, [key, array.reshape(-1).view(np.uint8).data], offset)
            if self.config.fsync:
                os.fsync(self._data)
            record = _pack(_digest(key), _Entry(offset, len(key), array.dtype.str, tuple(array.shape)))
            os.write(self._index, record)  # O_APPEND: one write, at the end
            if self.config.fsync:
                os.fsync(self._index)
            self._index_pos += _RECORD_SIZE
            self._add(np.frombuffer(record, dtype=_RECORD))
        return True

    def close(self) -> None:
        mapped = getattr(self, "_map", None)  # None after a close, absent when __init__ failed early
        if mapped is not None:
            mapped.close()
        self._map = None
        for fd in (getattr(self, "_data", -1), getattr(self, "_index", -1)):
            if fd >= 0:
                os.close(fd)
        self._data = self._index = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    # -- the index -------------------------------------------------------------------
    def _init_headers(self) -> None:
        """Write the headers of new files; refuse files that are not an arena's. A header
        cut short (a writer killed while creating the arena) is written again."""
        pairs = ((self._data, _DATA_MAGIC), (self._index, _INDEX_MAGIC))
        if all(os.fstat(fd).st_size >= _HEADER for fd, _ in pairs):
            self._check_headers(pairs)
            return
        with file_lock(self._lock):
            for fd, magic in pairs:
                if os.fstat(fd).st_size < _HEADER:
                    os.ftruncate(fd, 0)
                    os.pwrite(fd, magic.ljust(_HEADER, b"\0"), 0)  # (O_APPEND: at the end, which is 0)
                    os.fsync(fd)
            self._check_headers(pairs)

    def _check_headers(self, pairs: tuple[tuple[int, bytes], ...]) -> None:
        for fd, magic in pairs:
            if os.pread(fd, len(magic), 0) != magic:
                raise ValueError(
                    f"Expected a CALM arena in {self.path}, but it holds other files (or another version of one)"
                )

    def _refresh(self) -> None:
        """Read the index records other writers appended since the last look. Only whole
        records; the data file's size is read after them, so a record naming bytes
        past it was not written by the protocol (lost in a power cut) and is ignored."""
        size = os.fstat(self._index).st_size
        end = _HEADER + (size - _HEADER) // _RECORD_SIZE * _RECORD_SIZE
        if end <= self._index_pos:
            return
        raw = os.pread(self._index, end - self._index_pos, self._index_pos)
        records = np.frombuffer(raw, dtype=_RECORD)
        valid = _valid(raw, records, os.fstat(self._data).st_size)
        self.ignored += int((~valid).sum())
        self._add(records[valid])
        self._index_pos = end

    def _add(self, records: np.ndarray) -> None:
        """Append valid records to the table (grown by doubling) and index their digests."""
        first = self._count
        if first + len(records) > len(self._table):
            grown = np.empty(max(2 * len(self._table), first + len(records), 1024), dtype=_RECORD)
            grown[:first] = self._table[:first]
            self._table = grown
        self._table[first : first + len(records)] = records
        self._count += len(records)
        digests = records["digest"].tobytes()
        for i in range(len(records)):
            digest = digests[16 * i : 16 * i + 16]
            if digest in self._rows:
                self._collided.setdefault(digest, []).append(first + i)
            else:
                self._rows[digest] = first + i

    def _entry(self, row: int) -> _Entry:
        record = self._table[row]
        shape = tuple(int(n) for n in record["shape"][: int(record["ndim"])])
        return _Entry(int(record["offset"]), int(record["key_size"]), record["dtype"].decode(), shape)

    def _cut_torn_record(self) -> None:
        """Under the lock: drop a partial record a killed writer left at the index's end,
        so the next record starts on a record boundary."""
        size = os.fstat(self._index).st_size
        whole = _HEADER + (size - _HEADER) // _RECORD_SIZE * _RECORD_SIZE
        if size != whole:
            os.ftruncate(self._index, whole)

    def _find(self, key: bytes) -> _Entry | None:
        """The entry stored under `key` (its key bytes compared, not only its digest),
        looking at other writers' new records before saying no."""
        digest = _digest(key)
        for attempt in range(2):
            rows = [self._rows[digest], *self._collided.get(digest, ())] if digest in self._rows else []
            for entry in map(self._entry, rows):
                stored = self._mapped(entry.offset + entry.key_size)[entry.offset : entry.offset + entry.key_size]
                self._read(entry.key_size)
                if stored == key:
                    return entry
            if attempt == 0:
                self._refresh()
        return None

    # -- the map ---------------------------------------------------------------------
    def _mapped(self, end: int) -> mmap.mmap:
        """The data file mapped at least up to byte `end` (re-mapped when it has grown)."""
        if self._map is None or len(self._map) < end:
            size = os.fstat(self._data).st_size
            if self._map is not None:
                self._map.close()
            self._map = mmap.mmap(self._data, size, access=mmap.ACCESS_READ)
            self._resident = 0
        return self._map

    def _read(self, nbytes: int) -> None:
        """Count bytes read through the map; past `resident_bytes`, let the mapped pages go
        (they stay in the page cache, but no longer count in this process's memory)."""
        self._resident += nbytes
        if self._resident >= self.config.resident_bytes and self._map is not None:
            self._map.madvise(mmap.MADV_DONTNEED)
            self._resident = 0
