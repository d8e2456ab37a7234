"""The studio is private by default: started with the README's command, it listens on the
loopback interface only (.streamlit/config.toml sets server.address), so no other
machine can open it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LOOPBACK_V4 = "0100007F"  # 127.0.0.1 as /proc/net/tcp writes it (little-endian hex)
LOOPBACK_V6 = "00000000000000000000000001000000"  # ::1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening_addresses(port: int) -> set[str]:
    """Local addresses (hex, as the kernel lists them) of every TCP socket listening on `port`."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            address, hex_port = fields[1].split(":")
            if int(hex_port, 16) == port and fields[3] == "0A":  # 0A: LISTEN
                found.add(address)
    return found


def wait_until_healthy(port: int, server: subprocess.Popen, log_path: Path, timeout_s: float = 300) -> None:
    """Until the studio on `port` answers its health check (the script first checks the
    virtualenv: pip, about a minute); fails with the log's tail if it dies or never does."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2).read() == b"ok":
                return
        except OSError:
            assert server.poll() is None, log_path.read_text()[-2000:]
            time.sleep(1)
    pytest.fail(f"the studio did not come up: {log_path.read_text()[-2000:]}")


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="reads the kernel's socket table (Linux)")
def test_the_readme_command_listens_on_loopback_only(tmp_path: Path) -> None:
    port = _free_port()
    env = {**os.environ, "CALM_WORKSPACE": str(tmp_path / "workspace")}
    log = open(tmp_path / "studio.log", "w")
    server = subprocess.Popen(["bash", "scripts/studio.sh", "--server.port", str(port)], cwd=ROOT, env=env,
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until_healthy(port, server, tmp_path / "studio.log")
        addresses = listening_addresses(port)
        assert addresses and addresses <= {LOOPBACK_V4, LOOPBACK_V6}, addresses  # never 0.0.0.0 or ::
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
        log.close()
