"""An append-only disk arena of arrays: one data file, one index, one memory map.

Why: the frozen-prefix cache (`frozen_prefix.HiddenStateStore`) holds one (L, d) array
per token sequence. In memory that is tens of GB at 100k sequences, and one file per
sequence, read by mapping it, runs into Linux's limit on mappings per process
(vm.max_map_count, 65530 by default). Here every array of one cache goes into a single
data file that is mapped once (re-mapped when it has grown), so memory stays bounded
whatever the number of arrays: the index (about a hundred bytes per array) plus at most
`ArenaConfig.resident_bytes` of mapped pages, which are handed back to the page cache
when reached.

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
from typing import NamedTuple

import numpy as np

from calm_core.io import file_lock

_DATA_MAGIC = b"CALM-ARENA-DATA1"
_INDEX_MAGIC = b"CALM-ARENA-INDX1"
_HEADER = 64  # bytes before the first record / the first array, so both stay aligned
_ALIGN = 64  # every array starts on a 64-byte boundary of the data file
# digest, offset, key length, dtype (numpy's dtype.str), ndim, shape (4 dims), CRC of the rest
_RECORD = struct.Struct("<16sQI8sB3x4I")
_RECORD_SIZE = 64
_MAX_DIMS = 4


@dataclass(frozen=True)
class ArenaConfig:
    """How an arena trades speed for durability and memory."""

    fsync: bool = False  # fsync data before its record and the record after: survives power loss, not only a killed process
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
    body = _RECORD.pack(digest, entry.offset, entry.key_size, entry.dtype.encode(), len(entry.shape), *shape)
    return (body + struct.pack("<I", zlib.crc32(body))).ljust(_RECORD_SIZE, b"\0")


def _unpack(record: bytes) -> tuple[bytes, _Entry] | None:
    """(digest, entry) of a record, or None when its CRC does not match (a damaged record)."""
    body = record[:_RECORD.size]
    (crc,) = struct.unpack_from("<I", record, _RECORD.size)
    if zlib.crc32(body) != crc:
        return None
    digest, offset, key_size, dtype, ndim, *shape = _RECORD.unpack(body)
    if ndim > _MAX_DIMS:
        return None
    return digest, _Entry(offset, key_size, dtype.rstrip(b"\0").decode(), tuple(shape[:ndim]))


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

    def __init__(self, path: Path, config: ArenaConfig = ArenaConfig()) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.config = config
        self._lock = self.path / "lock"
        self._data = os.open(self.path / "data.arena", os.O_RDWR | os.O_CREAT, 0o666)
        self._index = os.open(self.path / "index.arena", os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o666)
        self._entries: dict[bytes, tuple[_Entry, ...]] = {}  # digest -> entries (more than one on a collision)
        self._count = 0
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
        array = np.frombuffer(self._mapped(start + _nbytes(entry)), dtype=entry.dtype,
                              count=int(np.prod(entry.shape, dtype=np.int64)), offset=start)
        out = array.reshape(entry.shape).copy()
        del array
        self._read(_nbytes(entry))
        return out

    def put(self, key: bytes, array: np.ndarray) -> bool:
        """Append `array` under `key`; False (and nothing written) when the key is
        already there, from this process or another."""
        array = np.asarray(array, order="C")  # (not ascontiguousarray: it makes a 0-d array 1-d)
        if array.dtype.hasobject or len(array.dtype.str) > 8 or array.ndim > _MAX_DIMS:
            raise ValueError(f"Expected a plain numeric array of at most {_MAX_DIMS} dims, but got "
                             f"{array.dtype} {array.shape}")
        with file_lock(self._lock):
            self._refresh()
            if self._find(key) is not None:
                return False
            self._cut_torn_record()
            offset = _aligned(os.fstat(self._data).st_size)  # past any torn append's bytes
            _write_all(self._data, [key, array.reshape(-1).view(np.uint8)], offset)
            if self.config.fsync:
                os.fsync(self._data)
            entry = _Entry(offset, len(key), array.dtype.str, tuple(array.shape))
            os.write(self._index, _pack(_digest(key), entry))  # O_APPEND: one write, at the end
            if self.config.fsync:
                os.fsync(self._index)
            self._index_pos += _RECORD_SIZE
            self._add(_digest(key), entry)
        return True

    def close(self) -> None:
        if getattr(self, "_map", None) is not None:
            self._map.close()
        self._map = None
        for fd in (getattr(self, "_data", -1), getattr(self, "_index", -1)):
            if fd >= 0:
                os.close(fd)
        self._data = self._index = -1

    def __enter__(self) -> Arena:
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
                raise ValueError(f"{self.path} holds files that are not a CALM arena (or another version of one)")

    def _refresh(self) -> None:
        """Read the index records other writers appended since the last look. Only whole
        records; the data file's size is read after them, so a record naming bytes
        past it was not written by the protocol (lost in a power cut) and is ignored."""
        size = os.fstat(self._index).st_size
        end = _HEADER + (size - _HEADER) // _RECORD_SIZE * _RECORD_SIZE
        if end <= self._index_pos:
            return
        raw = os.pread(self._index, end - self._index_pos, self._index_pos)
        data_size = os.fstat(self._data).st_size
        for at in range(0, len(raw), _RECORD_SIZE):
            parsed = _unpack(raw[at:at + _RECORD_SIZE])
            if parsed is None or parsed[1].offset + parsed[1].key_size + _nbytes(parsed[1]) > data_size:
                self.ignored += 1
                continue
            self._add(*parsed)
        self._index_pos = end

    def _add(self, digest: bytes, entry: _Entry) -> None:
        self._entries[digest] = self._entries.get(digest, ()) + (entry,)
        self._count += 1

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
            for entry in self._entries.get(digest, ()):
                stored = self._mapped(entry.offset + entry.key_size)[entry.offset:entry.offset + entry.key_size]
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
