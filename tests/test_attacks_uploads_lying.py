"""The attacker's suite, a Parquet file whose footer understates its pages (issue 47's last
row), over the wire: the Data page's real uploader, as a browser gives it
(tests/test_attacks_uploads.py).

The file: its question column one 960 KiB text used by 1,024 rows, stored with
DELTA_BYTE_ARRAY (each value repeats the one before it: 1,163 bytes with zstd), and its
column chunk's `total_uncompressed_size` rewritten in the footer from 983,570 to 8,192.
The budgets size a batch from the footer (`parquet_sizes.batch_rows`: a DELTA value may
reach its chunk's size, now 8 KiB, so 1,024 rows fit), so Arrow decoded the whole batch,
960 MiB, before the budget refused the file at row 69: the server grew by over 960 MB.

The server now decodes no uploaded Parquet page: a worker process does, under
`CALM_UPLOAD_WORKER_MIB` (calm_core/data/worker.py). The test samples the server and the
processes it starts every 10 ms: the server's growth plus the worker's anonymous memory
(what the limit holds; its shared libraries are pages the server maps too) must stay
under the limit, and the page must refuse the file in one line that names it. The studio
runs at 512 MiB, in the setting's bounds, so the lie's 960 MiB is well past it.
"""

from __future__ import annotations

import io
import struct
import time

import pytest

from tests.attack_client import StudioSession, put_upload, settled_rss
from tests.test_attacks import _start, _stop
from tests.test_attacks_uploads import UPLOADER, Peak

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

LIMIT_MIB = 512
WIDTH = 960 * 2**10  # under the 1 MiB cell limit, so only the file's total refuses it
ROWS = 1024
TOLD = 8192  # the chunk's decoded size the footer claims: its varint is as long as the truth's


def _varint(value: int) -> bytes:
    """Thrift compact protocol's i64: zigzag, then 7 bits a byte."""
    value, out = (value << 1) ^ (value >> 63), bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))


def lying_parquet(told: int | None = TOLD) -> bytes:
    """The multiple-choice file above, its question chunk's footer size replaced by `told`
    (None: the file as Arrow wrote it, its footer true)."""
    question = pa.chunked_array([pa.array(["a" * WIDTH] * 64)] * (ROWS // 64))
    table = pa.table({"question": question, "A": ["x"] * ROWS, "B": ["y"] * ROWS, "answer": [0] * ROWS})
    out = io.BytesIO()
    encodings = {"column_encoding": {"question": "DELTA_BYTE_ARRAY"}, "use_dictionary": False}
    pq.write_table(table, out, compression="zstd", data_page_version="2.0", **encodings)
    data = out.getvalue()
    if told is None:
        return data
    truth = pq.ParquetFile(io.BytesIO(data)).metadata.row_group(0).column(0).total_uncompressed_size
    length = struct.unpack("<I", data[-8:-4])[0]
    footer = data[-8 - length : -8]
    assert footer.count(_varint(truth)) == 1 and len(_varint(told)) == len(_varint(truth))
    return data[: -8 - length] + footer.replace(_varint(truth), _varint(told)) + data[-8:]


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    extra = {"CALM_UPLOAD_WORKER_MIB": str(LIMIT_MIB)}
    server, port, log, _ = _start(tmp_path_factory.mktemp("lying"), shared=False, extra_env=extra)
    yield server, port
    _stop(server, log)


def upload(studio, name: str, data: bytes) -> tuple[list, Peak, int, float]:
    """`data` given to the Data page as `name`: what it showed, the memory sampled, the
    server's settled RSS before, and the seconds the page's run took."""
    server, port = studio
    with StudioSession(port, timeout_s=300) as session:
        session.rerun("data")
        files = {UPLOADER: put_upload(port, session.session_id, name, data)}
        before = settled_rss(server.pid)
        with Peak(server.pid) as peak:
            started = time.monotonic()
            elements = session.rerun("data", files=files)
            seconds = time.monotonic() - started
    return elements, peak, before, seconds


def test_a_footer_that_understates_a_page_costs_at_most_the_limit(studio) -> None:
    data = lying_parquet()
    assert len(data) < 2000
    elements, peak, before, seconds = upload(studio, "lying.parquet", data)
    errors = [e.text for e in elements if e.is_error]
    grown = peak.peak - before
    print(
        f"lying.parquet ({len(data):,} bytes): server {before / 2**20:.0f} MB, server + workers' anonymous memory "
        f"+{grown / 2**20:.0f} MB at its peak (the worker alone {peak.worker / 2**20:.0f} MB, "
        f"{len(peak.children)} process(es)), {seconds:.1f} s; shown: {errors}"
    )
    assert grown < LIMIT_MIB * 2**20, f"the server and its workers grew by {grown / 2**20:.0f} MB"
    assert len(errors) == 1 and "\n" not in errors[0], errors
    assert errors[0].startswith(f"Expected lying.parquet to decode within {LIMIT_MIB:,} MiB (CALM_UPLOAD_WORKER_MIB)")


def test_the_same_file_with_a_true_footer_is_refused_by_the_budget(studio) -> None:
    """Told the truth, the budgets size the worker's batches for it and refuse it at row 69:
    the budget's own message comes back through the worker."""
    elements, peak, before, seconds = upload(studio, "honest.parquet", lying_parquet(told=None))
    errors = [e.text for e in elements if e.is_error]
    print(f"honest.parquet: +{(peak.peak - before) / 2**20:.0f} MB, {seconds:.1f} s; shown: {errors}")
    assert errors and errors[0].startswith("Expected honest.parquet to decode to at most 64 MiB"), errors
    assert peak.peak - before < LIMIT_MIB * 2**20
