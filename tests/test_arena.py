"""The disk arena behind the frozen-prefix cache: what goes in comes out, across reopens,
torn appends, digest collisions and two processes appending at once."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import numpy as np
import pytest

import calm_core.scoring.arena as arena_module
from calm_core.scoring.arena import Arena, ArenaConfig


def key_of(i: int) -> bytes:
    """Token ids as the frozen-prefix cache encodes them (int64), of varying length."""
    return np.arange(i, i + 3 + i % 5, dtype=np.int64).tobytes()


def array_of(i: int, dtype: str = "<f4") -> np.ndarray:
    return np.random.default_rng(i).standard_normal((5 + i % 7, 6)).astype(dtype)


def fill(arena: Arena, keys: range) -> None:
    for i in keys:
        assert arena.put(key_of(i), array_of(i))


def assert_holds(arena: Arena, keys: range) -> None:
    for i in keys:
        got = arena.get(key_of(i))
        assert got is not None, f"key {i} missing"
        np.testing.assert_array_equal(got, array_of(i))


@pytest.mark.parametrize("config", [ArenaConfig(), ArenaConfig(fsync=True, resident_bytes=1)])
def test_round_trip_keeps_values_dtypes_and_shapes(tmp_path: Path, config: ArenaConfig) -> None:
    """resident_bytes=1 lets the mapped pages go after every read: the reads stay right."""
    arrays = {b"f32": array_of(1), b"f16": array_of(2, "<f2"), b"i64": np.arange(24, dtype=np.int64).reshape(2, 3, 4),
              b"scalar": np.array(3.5), b"empty, last": np.zeros((0, 6), dtype=np.float32)}  # ends at the file's end
    with Arena(tmp_path, config) as arena:
        for key, value in arrays.items():
            assert arena.put(key, value)
        for key, value in arrays.items():
            got = arena.get(key)
            assert got is not None and got.dtype == value.dtype and got.shape == value.shape
            np.testing.assert_array_equal(got, value)
            assert got.flags.writeable  # a copy, not a view of the map
        assert arena.get(b"absent") is None and b"absent" not in arena and b"f32" in arena
        assert len(arena) == len(arrays)


def test_reopen_and_a_reader_sees_later_appends(tmp_path: Path) -> None:
    with Arena(tmp_path) as writer:
        fill(writer, range(50))
        with Arena(tmp_path) as reader:
            assert len(reader) == 50
            assert_holds(reader, range(50))
            fill(writer, range(50, 120))  # the data file grows past the reader's map
            assert_holds(reader, range(50, 120))
            assert len(reader) == 120
    with Arena(tmp_path) as again:
        assert_holds(again, range(120))
        assert again.ignored == 0


def test_same_key_twice_keeps_the_first(tmp_path: Path) -> None:
    with Arena(tmp_path) as first, Arena(tmp_path) as second:
        assert first.put(b"k", array_of(1))
        assert not second.put(b"k", array_of(2))  # another writer's record counts
        assert not first.put(b"k", array_of(3))
        np.testing.assert_array_equal(second.get(b"k"), array_of(1))
        assert len(first) == len(second) == 1
    assert (tmp_path / "index.arena").stat().st_size == arena_module._HEADER + arena_module._RECORD_SIZE


def test_a_digest_collision_serves_each_key_its_own_array(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arena_module, "_digest", lambda key: b"\x00" * 16)  # every key collides
    with Arena(tmp_path) as arena:
        fill(arena, range(5))
        assert_holds(arena, range(5))
        assert arena.get(key_of(99)) is None
    with Arena(tmp_path) as again:
        assert len(again) == 5
        assert_holds(again, range(5))


def test_a_torn_index_record_is_not_read_and_the_next_writer_cuts_it(tmp_path: Path) -> None:
    with Arena(tmp_path) as arena:
        fill(arena, range(10))
    index = tmp_path / "index.arena"
    whole = index.read_bytes()
    with index.open("ab") as handle:  # a writer killed half way through its record
        handle.write(whole[-arena_module._RECORD_SIZE:][:30])
    with Arena(tmp_path) as arena:
        assert len(arena) == 10 and arena.ignored == 0
        assert_holds(arena, range(10))
        fill(arena, range(10, 12))
    assert index.stat().st_size == len(whole) + 2 * arena_module._RECORD_SIZE  # the torn half was cut
    with Arena(tmp_path) as arena:
        assert len(arena) == 12 and arena.ignored == 0
        assert_holds(arena, range(12))


def test_a_torn_data_append_is_never_read(tmp_path: Path) -> None:
    with Arena(tmp_path) as arena:
        fill(arena, range(10))
    with (tmp_path / "data.arena").open("ab") as handle:  # killed after its data, before its record
        handle.write(key_of(10) + b"\x7f" * 37)
    with Arena(tmp_path) as arena:
        assert len(arena) == 10 and key_of(10) not in arena
        fill(arena, range(10, 15))  # appended past the torn bytes
    with Arena(tmp_path) as arena:
        assert_holds(arena, range(15))


def test_records_past_the_data_or_damaged_are_ignored(tmp_path: Path) -> None:
    """A power cut without fsync can keep a record and lose its data; a damaged record
    fails its CRC. Either is skipped, and the rest is served."""
    with Arena(tmp_path) as arena:
        fill(arena, range(10))
    data, index = tmp_path / "data.arena", tmp_path / "index.arena"
    os.truncate(data, data.stat().st_size - 8)  # the last array's tail is gone
    raw = bytearray(index.read_bytes())
    raw[arena_module._HEADER + 3 * arena_module._RECORD_SIZE + 20] ^= 0xFF  # record 3 damaged
    index.write_bytes(bytes(raw))
    with Arena(tmp_path) as arena:
        assert arena.ignored == 2 and len(arena) == 8
        assert arena.get(key_of(9)) is None and arena.get(key_of(3)) is None
        assert_holds(arena, range(3))
        assert_holds(arena, range(4, 9))


def test_files_of_something_else_are_refused(tmp_path: Path) -> None:
    (tmp_path / "data.arena").write_bytes(b"not an arena".ljust(100, b"."))
    (tmp_path / "index.arena").write_bytes(b"nor this".ljust(100, b"."))
    with pytest.raises(ValueError, match="Expected a CALM arena"):
        Arena(tmp_path)


def _append(path: str, start: int, stop: int, barrier: multiprocessing.synchronize.Barrier) -> None:
    """One writer process: wait for the other, then put keys start..stop-1."""
    arena = Arena(Path(path))
    barrier.wait()
    for i in range(start, stop):
        arena.put(key_of(i), array_of(i))
    arena.close()


def test_two_processes_appending_at_once_lose_nothing_and_duplicate_nothing(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    writers = [ctx.Process(target=_append, args=(str(tmp_path), start, start + 300, barrier)) for start in (0, 150)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(timeout=120)
        assert writer.exitcode == 0
    with Arena(tmp_path) as arena:
        assert len(arena) == 450 and arena.ignored == 0
        assert_holds(arena, range(450))
    # keys 150..299 went in once, by whichever writer came first
    assert (tmp_path / "index.arena").stat().st_size == arena_module._HEADER + 450 * arena_module._RECORD_SIZE
