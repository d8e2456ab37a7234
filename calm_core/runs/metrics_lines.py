"""metrics.jsonl read back: the one rule for which lines count, and the incremental tail.

RunDir appends the lines (one `write` call each); this module reads them, whole
(`parse_metrics_lines`, for `RunDir.read_metrics`) or as they grow (`MetricsTail`, for
pages that poll a running run).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def parse_metrics_lines(data: bytes) -> list[dict[str, Any]]:
    """The records of the complete lines of metrics.jsonl bytes: the one reading rule.

    Whatever follows the last newline is unfinished (a line being written, or cut by a
    crash) and left out; a line that is not a JSON object with an int `step` (a fragment
    that `append_metrics` sealed after a crash, or a damaged line) is skipped."""
    records = []
    for line in data.split(b"\n")[:-1]:
        if line.strip():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and isinstance(record.get("step"), int):
                records.append(record)
    return records


class MetricsTail:
    """metrics.jsonl read incrementally: each `read()` parses only the bytes appended since
    the last complete line it saw, and returns what `RunDir.read_metrics()` would.

    Why: the Monitor polls every few seconds in every open session, and rereading a long
    run's whole file each time grows with the run. A file that shrank or was replaced (a
    resume cuts it back to a checkpoint with an atomic rewrite) is read again in full;
    replacement is told by the file's identity (device, inode), its size, and the last
    complete bytes still standing where they were (an inode number can be reused)."""

    CHECK_BYTES = 256  # how much of what was read last is compared on each read

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._reset(None)

    def _reset(self, identity: tuple[int, int] | None) -> None:
        self.records: list[dict[str, Any]] = []
        self.identity, self.offset, self.seen_tail = identity, 0, b""

    def _unchanged(self, fd: int, stat: os.stat_result) -> bool:
        """Whether the file is the one read so far, grown or not."""
        if (stat.st_dev, stat.st_ino) != self.identity or stat.st_size < self.offset:
            return False
        return os.pread(fd, len(self.seen_tail), self.offset - len(self.seen_tail)) == self.seen_tail

    def read(self) -> list[dict[str, Any]]:
        """Every complete record so far (a new list; the records themselves are shared)."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            self._reset(None)
            return []
        try:
            stat = os.fstat(fd)
            if not self._unchanged(fd, stat):
                self._reset((stat.st_dev, stat.st_ino))
            data = os.pread(fd, max(0, stat.st_size - self.offset), self.offset)
        finally:
            os.close(fd)
        end = data.rfind(b"\n") + 1  # 0: no complete line yet; the rest waits for its newline
        if end:
            self.records.extend(parse_metrics_lines(data[:end]))
            self.offset += end
            self.seen_tail = (self.seen_tail + data[max(0, end - self.CHECK_BYTES) : end])[-self.CHECK_BYTES :]
        return list(self.records)
