"""The worker that decodes an uploaded Parquet file (calm_core/data/worker.py), in one
process: a rightful file reads the same through its copy, a lying one is refused within
the limit, the footer's cheap refusals come first, and the limit is a declared setting.
Over the wire: tests/test_attacks_uploads_lying.py."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from calm_core.data import worker
from calm_core.data.loaders import load_file
from calm_core.data.readers import load_records
from calm_core.data.schema import DataError
from calm_core.data.worker import LIMIT_ENV, WorkerLimits, decode_parquet, worker_env, worker_limits

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def _rich_table(rows: int = 300) -> object:
    """The shapes a rightful file holds: text, a list of options, numbers, nulls, a date."""
    return pa.table(
        {
            "question": [f"What is {i} + 1?" for i in range(rows)],
            "choices": [[str(i + 1), str(i), "\u00e9t\u00e9"] for i in range(rows)],
            "answer": [0] * rows,
            "subject": [None if i % 7 else "maths" for i in range(rows)],
            "weight": [i / 3 for i in range(rows)],
            "day": pa.array([i for i in range(rows)], pa.date32()),
        }
    )


@pytest.mark.parametrize("encoding", ["plain", "delta"])
def test_a_rightful_parquet_reads_the_same_through_the_worker(tmp_path: Path, encoding: str) -> None:
    path = tmp_path / "upload.parquet"
    options = {"column_encoding": {"question": "DELTA_BYTE_ARRAY"}, "use_dictionary": False}
    pq.write_table(_rich_table(), path, row_group_size=128, **(options if encoding == "delta" else {}))
    copy = decode_parquet(path, "quiz.parquet")
    assert list(load_records(copy, source="quiz.parquet")) == list(load_records(path, source="quiz.parquet"))
    report = load_file(copy, mapping="question=question,choices=choices,answer=answer", source="quiz.parquet")
    assert len(report.items) == 300 and report.n_rejected == 0


def test_a_peek_decodes_only_the_rows_it_asks_for(tmp_path: Path) -> None:
    path = tmp_path / "upload.parquet"
    pq.write_table(_rich_table(), path, row_group_size=128)
    assert pq.ParquetFile(decode_parquet(path, "quiz.parquet", rows=20)).metadata.num_rows == 20


def test_a_footer_that_understates_a_page_is_refused_within_the_limit(tmp_path: Path, monkeypatch) -> None:
    from tests.test_attacks_uploads_lying import lying_parquet

    path = tmp_path / "upload.parquet"
    path.write_bytes(lying_parquet())
    peaks = _measure_workers(monkeypatch)
    with pytest.raises(DataError, match=r"^Expected lying.parquet to decode within 256 MiB \(CALM_UPLOAD_WORKER_MIB\)"):
        decode_parquet(path, "lying.parquet", limits=WorkerLimits(memory_mib=256))
    assert len(peaks) == 1 and peaks[0] < 256 * 2**20, f"the worker reached {peaks[0] / 2**20:.0f} MB"


def _measure_workers(monkeypatch) -> list[int]:
    """Each worker's peak resident memory (VmHWM, read every 5 ms while it runs; its
    rusage would count the parent it was forked from)."""
    peaks: list[int] = []
    real = subprocess.Popen

    def run(command, *, timeout, check, **options):
        with real(command, **options) as process:
            peak = 0
            while process.poll() is None:
                peak = max(peak, _high_water(process.pid))
                time.sleep(0.005)
            stderr = process.stderr.read()
        peaks.append(peak)
        return subprocess.CompletedProcess(command, process.returncode, None, stderr)

    monkeypatch.setattr(subprocess, "run", run)
    return peaks


def _high_water(pid: int) -> int:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return 0
    return next((int(line.split()[1]) * 1024 for line in lines if line.startswith("VmHWM:")), 0)


def test_the_footer_refuses_before_a_worker_starts(tmp_path: Path, monkeypatch) -> None:
    from tests.test_attacks_uploads_parquet import fixed_width_bomb

    path = tmp_path / "upload.parquet"
    path.write_bytes(fixed_width_bomb(2))
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("a worker started"))
    with pytest.raises(DataError, match="^Expected fixed.parquet to decode to at most 64 MiB"):
        decode_parquet(path, "fixed.parquet")


def test_a_worker_past_its_time_is_refused(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "upload.parquet"
    pq.write_table(_rich_table(), path)
    monkeypatch.setattr(worker, "WORKER_SECONDS", 0.01)
    with pytest.raises(DataError, match=r"^Expected quiz.parquet to be read within 0.01 s"):
        decode_parquet(path, "quiz.parquet")


def test_the_limit_is_a_declared_setting_read_from_its_variable() -> None:
    assert worker_limits({}) == WorkerLimits() and WorkerLimits().memory_mib == 1024
    assert worker_limits({LIMIT_ENV: "512"}).memory_mib == 512
    for wrong in ("100", "70000", "lots", "-5"):
        with pytest.raises(
            ValueError, match=f"^{LIMIT_ENV}: Expected `memory_mib` to be an integer between 256 and 65536"
        ):
            worker_limits({LIMIT_ENV: wrong})
    with pytest.raises(ValueError, match="memory_mib"):
        WorkerLimits(memory_mib=64)


def test_the_worker_gets_no_credential(monkeypatch) -> None:
    monkeypatch.setenv("CALM_STUDIO_PASSWORD", "secret")
    monkeypatch.setenv("HF_TOKEN", "hf_x")
    env = worker_env()
    assert "CALM_STUDIO_PASSWORD" not in env and "HF_TOKEN" not in env
    assert env["ARROW_DEFAULT_MEMORY_POOL"] == "system" and env["OMP_NUM_THREADS"] == "1"
