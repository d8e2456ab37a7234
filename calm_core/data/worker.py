"""An uploaded Parquet file, decoded in a short-lived worker process under a memory limit.

The read budgets (`sources.Budget`) size each Parquet batch from what the file's footer
declares, because Arrow decodes a whole batch before a row of it can be counted. A
hand-made file whose footer understates its pages slips past them: a batch sized from the
lie is decoded whole before the budget can refuse a row of it (docs/security.md has the
file and what it cost). So the server decodes no uploaded Parquet page itself:

1. it checks what is cheap first, in the server: the footer (`files.open_parquet`,
   `parquet_batches.check_parquet`), so a file that declares too much is refused at once;
2. it runs `python -m calm_core.data.worker` on the staged file. The worker limits its
   own writable memory (RLIMIT_DATA, `WorkerLimits.memory_mib`) before it imports Arrow,
   with one thread and the system allocator (Arrow's own allocator reserves memory it
   never touches, which the limit would count), reads the file through the same budgets
   (`sources.counted_batches`) and writes what it read as a new Parquet file beside it:
   plain encoding, no compression,
   a row group per `limits.MAX_BATCH_BYTES` of rows, written by Arrow, so its metadata
   states the true sizes and the copy is never smaller than its text (the server's own
   budgets, run again on it, refuse nothing the worker read). Its answer is a JSON file
   beside the copy: `{"ok": true}` or the refusal's message; nothing is unpickled;
3. a worker that runs out of memory, dies, or runs past `WORKER_SECONDS` is a refusal
   that names the limit. The server then reads the copy with its usual readers.

CSV and JSON need no worker: a byte of them decodes to a bounded number of bytes
(`sources.json_cost`), counted from the bytes themselves, which cannot lie.

    python -m calm_core.data.worker IN OUT WHERE LIMIT_BYTES ROWS   # what the server runs
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from calm_core.data.files import open_parquet
from calm_core.data.limits import MAX_COLUMNS
from calm_core.data.parquet_batches import check_parquet, pieces
from calm_core.data.schema import DataError
from calm_core.data.sources import Budget, counted_batches
from calm_core.settings import SettingSpec, bound_error, check_settings, declared_settings, setting

LIMIT_ENV = "CALM_UPLOAD_WORKER_MIB"
# Costs a rightful user a file whose decoding takes longer (the budgets bound a file to
# what decodes in seconds); past it the worker is stopped and the file refused.
WORKER_SECONDS = 120
# What the worker's environment keeps of the server's: no password, token or key reaches it.
KEPT_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "HOME")
# One thread, Arrow on glibc's allocator, and every block of 128 KiB or more mapped apart and
# returned when freed (glibc's moving threshold would keep them in the heap, still counted).
WORKER_MEMORY_ENV = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "ARROW_DEFAULT_MEMORY_POOL": "system",
    "MALLOC_MMAP_THRESHOLD_": str(128 * 2**10),
}


@dataclass(frozen=True)
class WorkerLimits:
    """What decoding one uploaded Parquet file may cost the server."""

    memory_mib: int = setting(
        1024,
        "writable memory of the process that decodes an uploaded Parquet file, in MiB (RLIMIT_DATA): "
        "a file that needs more is refused; the worker itself takes about 80 MiB",
        min=256,
        max=65536,
    )

    def __post_init__(self) -> None:
        check_settings(self)


def worker_limits(env: Mapping[str, str] = os.environ) -> WorkerLimits:
    """The limits from `CALM_UPLOAD_WORKER_MIB` (default `WorkerLimits()`), refused with the
    setting's own message, naming the variable, when it is not a whole number in bounds."""
    text = env.get(LIMIT_ENV, "").strip()
    if not text:
        return WorkerLimits()
    value: Any = int(text) if text.isdigit() else text
    message = bound_error(limit_spec(), value)
    if message:
        raise ValueError(f"{LIMIT_ENV}: {message}")
    return WorkerLimits(memory_mib=value)


def limit_spec() -> SettingSpec:
    """The declaration of the memory limit (docs/settings.md lists it)."""
    return next(iter(declared_settings(WorkerLimits)))


# ----------------------------------------------------------------------------- the server's side


def decode_parquet(path: Path, where: str, rows: int = 0, limits: WorkerLimits | None = None) -> Path:
    """The honest copy of the Parquet file at `path`, decoded in a worker (the module
    docstring says why): its first `rows` rows (0: all). Raises DataError, naming `where`,
    when the footer alone refuses it, when the worker's budgets do, or when it needs more
    than the memory limit or time."""
    check_parquet(open_parquet(path, where, MAX_COLUMNS), Budget(path, where))  # cheap refusals stay cheap
    limits = limits or worker_limits()
    out = path.with_name(f"{path.stem}-decoded.parquet")
    command = [sys.executable, "-m", "calm_core.data.worker", str(path), str(out), where]
    command += [str(limits.memory_mib * 2**20), str(rows)]
    try:
        done = subprocess.run(
            command, env=worker_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, timeout=WORKER_SECONDS, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise DataError(
            f"Expected {where} to be read within {WORKER_SECONDS} s, but decoding it took longer: save it as JSON lines"
        ) from None
    _check_answer(_answer(out), done, where, limits)
    return out


def worker_env() -> dict[str, str]:
    """The worker's environment: the server's locale and paths, this package importable,
    `WORKER_MEMORY_ENV`; nothing else (no credential)."""
    kept = {name: os.environ[name] for name in KEPT_ENV if name in os.environ}
    return {**kept, **WORKER_MEMORY_ENV, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}


def _answer(out: Path) -> dict[str, Any]:
    """What the worker wrote beside its copy, or {} when it wrote nothing (it died)."""
    answer = out.with_suffix(".json")
    try:
        value = json.loads(answer.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _check_answer(answer: dict[str, Any], done: Any, where: str, limits: WorkerLimits) -> None:
    """Nothing when the worker read the file; otherwise the DataError that says why not."""
    if answer.get("ok") is True:
        return
    if isinstance(answer.get("error"), str):
        raise DataError(answer["error"])
    stderr = done.stderr.decode("utf-8", "replace").strip()
    if answer.get("memory") or done.returncode < 0 or "MemoryError" in stderr:
        raise DataError(
            f"Expected {where} to decode within {limits.memory_mib:,} MiB ({LIMIT_ENV}), but decoding it needs "
            "more: its metadata understates what its pages hold. Save it as JSON lines"
        )
    last = stderr.splitlines()[-1] if stderr else f"exit status {done.returncode}"
    raise DataError(f"Expected {where} to be read, but the process that decodes it failed: {last}")


# ----------------------------------------------------------------------------- the worker's side


def limit_memory(limit: int) -> None:
    """Hold this process's writable memory (heap and anonymous maps) to `limit` bytes;
    Linux enforces it, macOS does not (there only the time limit holds)."""
    import resource

    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


def copy_parquet(path: Path, out: Path, where: str, rows: int) -> None:
    """Read `path` through the budgets and write its first `rows` rows (0: all) to `out`
    as an honest Parquet file (the module docstring). MemoryError when the limit is met."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = open_parquet(path, where, MAX_COLUMNS)
    budget, written = Budget(path, where), 0
    check_parquet(parquet, budget)
    options = {"use_dictionary": False, "compression": "none", "write_statistics": False}
    with pq.ParquetWriter(out, parquet.schema_arrow, **options) as writer:
        try:
            for batch, sizes in counted_batches(parquet, budget):
                for piece in pieces(batch, sizes):
                    piece = piece.slice(0, rows - written) if rows else piece
                    writer.write_batch(piece)  # a row group of its own
                    written += piece.num_rows
                    if rows and written >= rows:
                        return
        except MemoryError:
            raise
        except pa.ArrowException as exc:  # as `sources.parquet_rows` says it
            raise DataError(
                f"Expected readable data in {where}, but reading after row {written} failed: {exc}"
            ) from None


def main(argv: list[str]) -> int:
    """The worker: limit its memory, then copy the file; its answer is a JSON file."""
    source, out, where, limit, rows = argv[1], Path(argv[2]), argv[3], int(argv[4]), int(argv[5])
    limit_memory(limit)
    answer: dict[str, Any]
    try:
        copy_parquet(Path(source), out, where, rows)
        answer = {"ok": True}
    except DataError as exc:
        answer = {"error": str(exc)}
    except MemoryError:
        answer = {"memory": True}
    out.with_suffix(".json").write_text(json.dumps(answer), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
