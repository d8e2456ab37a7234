"""A GGUF file's layout, read in well under a second, and a copy without its vocabulary.

    layout = read_layout(path)                 # byte spans of every metadata entry
    layout.values["general.architecture"]     # 'gemma3' (scalars and strings only)
    layout.array_lengths["tokenizer.ggml.tokens"]  # 262144
    write_without(path, out, VOCABULARY_KEYS, {"gemma3.vocab_size": 262144})

Why: the `gguf` package's GGUFReader makes one numpy memmap view per element of every
metadata array, several per string. A Gemma 3 GGUF holds 262,144 tokens, their scores
and their types, so one GGUFReader builds about 4 million views (~27 s on 2 cores), and
transformers builds one for every `from_pretrained` on a GGUF that is not in its fast
table: the config (twice), the weights and the tokenizer's config, ~2 minutes in all.
The weights and the config never read the vocabulary, so `scoring.gguf_convert` hands
transformers a copy of the file without it (metadata of a few kB; the tensor bytes
copied as they are) and builds the tokenizer once from the original.

The spans are found by walking the entries with `struct` over a memory map: a string
array is walked by its lengths (one small read per entry, ~0.1 s for 262k), a numeric
array is skipped in one step. Nothing is decoded that is not asked for.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32  # GGUF's default when `general.alignment` is absent
STRING, ARRAY = 8, 9
# the scalar value types: struct format, for reading and writing
SCALAR_FORMATS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
UINT32 = 4
# what a tokenizer reads and a model's weights and config do not (vocab_size aside)
VOCABULARY_KEYS = frozenset(
    {"tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type", "tokenizer.ggml.merges"}
)


@dataclass
class GGUFLayout:
    """Where each part of a GGUF file lies (byte offsets), and its small values."""

    version: int
    tensor_count: int
    spans: dict[str, tuple[int, int]] = field(default_factory=dict)  # key -> (start, end) of the whole entry
    values: dict[str, Any] = field(default_factory=dict)  # scalar and string values
    array_lengths: dict[str, int] = field(default_factory=dict)  # array key -> element count
    metadata_end: int = 0  # the tensor table starts here
    tensors_end: int = 0  # the tensor table ends here
    data_start: int = 0  # tensor data (offsets in the table count from here)

    @property
    def alignment(self) -> int:
        return int(self.values.get("general.alignment", DEFAULT_ALIGNMENT))


def read_layout(path: Path) -> GGUFLayout:
    """The layout of the GGUF at `path`; ValueError for a file that is not one."""
    blob = np.memmap(path, mode="r", dtype=np.uint8).data  # its buffer, which struct reads
    if bytes(blob[:4]) != MAGIC:
        raise ValueError(f"{path} does not start with the GGUF magic bytes")
    version, tensor_count, kv_count = struct.unpack_from("<IQQ", blob, 4)
    layout = GGUFLayout(version=version, tensor_count=tensor_count)
    pos = 24
    for _ in range(kv_count):
        start = pos
        key, pos = _string(blob, pos)
        (value_type,) = struct.unpack_from("<I", blob, pos)
        pos = _read_value(blob, pos + 4, value_type, key, layout)
        layout.spans[key] = (start, pos)
    layout.metadata_end = pos
    for _ in range(tensor_count):
        _, pos = _string(blob, pos)
        (dims,) = struct.unpack_from("<I", blob, pos)
        pos += 4 + 8 * dims + 4 + 8  # dimensions, ggml type, offset
    layout.tensors_end = pos
    layout.data_start = _aligned(pos, layout.alignment)
    return layout


def _string(blob: memoryview, pos: int) -> tuple[str, int]:
    (length,) = struct.unpack_from("<Q", blob, pos)
    return bytes(blob[pos + 8 : pos + 8 + length]).decode("utf-8"), pos + 8 + length


def _read_value(blob: memoryview, pos: int, value_type: int, key: str, layout: GGUFLayout) -> int:
    """Record one value's scalar or length in `layout`; the offset just past it."""
    if value_type in SCALAR_FORMATS:
        fmt = SCALAR_FORMATS[value_type]
        (layout.values[key],) = struct.unpack_from(fmt, blob, pos)
        return pos + struct.calcsize(fmt)
    if value_type == STRING:
        layout.values[key], pos = _string(blob, pos)
        return pos
    if value_type != ARRAY:
        raise ValueError(f"GGUF value type {value_type} of {key!r} is not one this reader knows")
    element_type, count = struct.unpack_from("<IQ", blob, pos)
    count = int(count)
    pos += 12
    layout.array_lengths[key] = count
    if element_type in SCALAR_FORMATS:
        return pos + count * struct.calcsize(SCALAR_FORMATS[element_type])
    if element_type != STRING:
        raise ValueError(f"GGUF array of type {element_type} in {key!r} is not one this reader knows")
    for _ in range(count):  # variable lengths: nothing to do but walk them
        (length,) = struct.unpack_from("<Q", blob, pos)
        pos += 8 + length
    return pos


def _aligned(pos: int, alignment: int) -> int:
    return pos + (-pos % alignment)


def _uint32_entry(key: str, value: int) -> bytes:
    raw = key.encode("utf-8")
    return struct.pack("<Q", len(raw)) + raw + struct.pack("<I", UINT32) + struct.pack("<I", value)


def write_without(path: Path, out: Path, drop: frozenset[str], add: dict[str, int] | None = None) -> GGUFLayout:
    """Copy the GGUF at `path` to `out` without the metadata entries `drop` and with the
    uint32 entries `add`; the tensor table and data are copied byte for byte (the table's
    offsets count from the data's start, so only the padding before it changes)."""
    layout = read_layout(path)
    add = {k: v for k, v in (add or {}).items() if k not in layout.spans}
    kept = [key for key in layout.spans if key not in drop]
    blob = np.memmap(path, mode="r", dtype=np.uint8)
    with open(out, "wb") as handle:
        handle.write(MAGIC + struct.pack("<IQQ", layout.version, layout.tensor_count, len(kept) + len(add)))
        for key in kept:
            start, end = layout.spans[key]
            handle.write(blob[start:end].tobytes())
        for key, value in add.items():
            handle.write(_uint32_entry(key, value))
        handle.write(blob[layout.metadata_end : layout.tensors_end].tobytes())
        handle.write(b"\0" * (-handle.tell() % layout.alignment))
        _copy(blob, layout.data_start, handle)
    return layout


def _copy(blob: np.ndarray, start: int, handle: Any, chunk: int = 64 << 20) -> None:
    """The bytes of `blob` from `start` to its end, in chunks (the data may be gigabytes)."""
    for offset in range(start, len(blob), chunk):
        handle.write(blob[offset : offset + chunk].tobytes())
