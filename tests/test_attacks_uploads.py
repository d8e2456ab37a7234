"""The attacker's suite, uploads (issue 38, items 1 and 2): the running studio's Data page
given a bomb through its real uploader, as a browser gives it (tests/attack_client.py: the
file PUT to the session's upload URL, then the rerun that carries the uploader's state).

- a 1.3 KB Parquet file of one 2 MiB value used by 1,024 rows (it took the server from
  399 MB to 2,564 MB);
- a 0.44 MB CSV of 50,000 columns (its header check took 30 s of the server's CPU).

Each must leave the server's memory within 200 MB of where it was and show a one-line
refusal within 2 s. The figures are the ones docs/security.md ("Upload budgets") quotes.
"""

from __future__ import annotations

import io
import threading
import time

import pytest

from tests.attack_client import StudioSession, anon_bytes, children_of, put_upload, rss_bytes, settled_rss
from tests.test_attacks import _start, _stop

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

UPLOADER = "data_upload"  # the Data page's file uploader (app/pages/data/data.py)
RSS_BUDGET = 200 * 2**20
SECONDS = 2.0  # what a refused file may add to the page's run, beyond the page drawn without it


def assert_refused_quickly(seen: dict) -> None:
    """The file adds under SECONDS to the page's run. Measured beside the same page drawn
    without the file in the same session, so a busy machine (CI, other tests) slows both
    sides instead of failing the bound; a bomb that were decoded would add far more."""
    added = seen["seconds"] - seen["plain_seconds"]
    shown = f"{seen['seconds']:.2f} s against {seen['plain_seconds']:.2f} s without it"
    assert added < SECONDS, f"the file added {added:.2f} s ({shown})"


def parquet_bomb() -> bytes:
    """Issue 38's file: the question column one 2 MiB value, dictionary-encoded, zstd."""
    rows = 1024
    question = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), pa.array(["a" * 2**21]))
    table = pa.table({"question": question, "A": ["x"] * rows, "B": ["y"] * rows, "answer": [0] * rows})
    out = io.BytesIO()
    pq.write_table(table, out, compression="zstd")
    return out.getvalue()


def wide_csv(columns: int = 50_000) -> bytes:
    header = ",".join(f"c{i}" for i in range(columns))
    return (header + "\n" + ",".join("1" for _ in range(columns)) + "\n").encode()


class Peak:
    """The highest resident memory of a process plus the anonymous memory of the processes
    it started (the upload worker: what its limit holds; its shared libraries are pages the
    server maps too) while the block runs, sampled every 10 ms; `worker` the highest child
    alone, `children` every child seen."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self.worker, self.children = pid, rss_bytes(pid), 0, set()
        self.server = self.peak  # the server process alone
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.wait(0.01):
            self._take()

    def _take(self) -> None:
        kids = children_of(self.pid)
        self.children.update(kids)
        held = [anon_bytes(kid) for kid in kids]
        own = rss_bytes(self.pid)
        self.worker = max([self.worker, *held])
        self.server = max(self.server, own)
        self.peak = max(self.peak, own + sum(held))

    def __enter__(self) -> Peak:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()
        self._take()


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    server, port, log, log_path = _start(tmp_path_factory.mktemp("uploads"), shared=False)
    yield server, port, log_path
    _stop(server, log)


def upload_through_the_page(studio, name: str, data: bytes) -> dict:
    """Upload `data` as `name` on the Data page: what the page showed, how long its run took,
    and the server's memory before and at its peak."""
    server, port, _ = studio
    with StudioSession(port) as session:
        started = time.monotonic()
        session.rerun("data")  # the page as a browser first draws it: the uploader is there
        plain_s = time.monotonic() - started
        assert session.widget(UPLOADER).kind == "file_uploader"
        files = {UPLOADER: put_upload(port, session.session_id, name, data)}
        before = settled_rss(server.pid)  # after the background import of PyTorch, and the PUT
        with Peak(server.pid) as peak:
            started = time.monotonic()
            elements = session.rerun("data", files=files)
            seconds = time.monotonic() - started
        after = rss_bytes(server.pid)
    errors = [e.text for e in elements if e.is_error]
    print(
        f"{name} ({len(data):,} bytes): RSS {before / 2**20:.0f} -> peak {peak.peak / 2**20:.0f} MB "
        f"(a worker at most {peak.worker / 2**20:.0f} MB of it) "
        f"(after {after / 2**20:.0f} MB), page {seconds:.2f} s (without the file {plain_s:.2f} s); shown: {errors}"
    )
    texts = [e.text for e in elements]
    return {
        "errors": errors,
        "texts": texts,
        "seconds": seconds,
        "plain_seconds": plain_s,
        "grown": peak.peak - before,
        "server_grown": peak.server - before,
        "worker": peak.worker,
    }


def assert_within_budget(seen: dict) -> None:
    """The upload's cost to the machine: the server within RSS_BUDGET of where it was, and
    the decoding worker (where there was one) within its own declared limit
    (calm_core/data/worker.py, CALM_UPLOAD_WORKER_MIB); docs/security.md states both."""
    from calm_core.data.worker import worker_limits

    assert seen["server_grown"] < RSS_BUDGET, f"the server grew by {seen['server_grown'] / 2**20:.0f} MB"
    limit = worker_limits().memory_mib * 2**20
    assert seen["worker"] <= limit, f"the worker held {seen['worker'] / 2**20:.0f} MB, over its {limit / 2**20:.0f}"


def test_the_parquet_bomb_is_refused_in_one_line_without_the_memory(studio) -> None:
    data = parquet_bomb()
    assert len(data) < 2000
    seen = upload_through_the_page(studio, "bomb.parquet", data)
    assert len(seen["errors"]) == 1 and "\n" not in seen["errors"][0], seen["errors"]
    assert seen["errors"][0].startswith("Expected cells of at most 1 MiB in bomb.parquet, but row 1's question")
    assert_within_budget(seen)
    assert_refused_quickly(seen)


def test_a_50000_column_csv_is_refused_in_one_line_at_once(studio) -> None:
    data = wide_csv()
    assert len(data) < 2**20
    seen = upload_through_the_page(studio, "wide.csv", data)
    assert seen["errors"] == ["Expected at most 10,000 columns in wide.csv, but it has 50,000: keep only the "
                              "columns the dataset uses (question, options, answer, id, subject)"]  # fmt: skip
    assert_within_budget(seen)
    assert_refused_quickly(seen)


def test_a_good_upload_still_reads(studio) -> None:
    """The same path with an ordinary file: the page shows its columns and no error."""
    data = b"question,A,B,answer\nWhat is 2 + 2?,4,5,A\nWhat is 3 + 3?,6,7,A\n"
    seen = upload_through_the_page(studio, "quiz.csv", data)
    assert seen["errors"] == []
    assert any("Columns found" in text for text in seen["texts"]), seen["texts"]
