"""The attacker's suite (issue 31): the running studio probed with raw HTTP and WebSocket
requests (tests/attack_client.py), in its local and its shared mode.

What an attacker on the network, or a web page doing DNS rebinding, tried and must not get:
- a WebSocket (and any page) under a foreign Host name, in both modes;
- Streamlit's endpoints before the password: an upload PUT with a self-made XSRF pair, a
  `clear_cache` message, `/_stcore/metrics`;
- fast password guessing across fresh connections.
The figures these tests measure are the ones docs/security.md quotes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from calm_core.access.guesses import GuessLimiter, fastest_guesses, guesses_within
from tests.attack_client import request, rss_bytes, send_back_message, settled_rss, sign_in, upload, ws_handshake
from tests.test_private import _free_port, wait_until_healthy

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "tiger lily 4 ever"
FOREIGN = "evil.example"
DOOR_SIGN_IN_FIRST = b"Sign in first."


def _start(tmp_path: Path, shared: bool, password: str = PASSWORD, extra_env: dict[str, str] | None = None):
    """`streamlit run app/main.py` on a free port (the README's server, no setup step),
    as its own process so its memory can be read; `extra_env` is added to its environment."""
    port = _free_port()
    env = {**os.environ, "CALM_WORKSPACE": str(tmp_path / "workspace")}
    env.pop("CALM_STUDIO_PASSWORD", None)
    if shared:
        env.update(CALM_STUDIO_SHARED="1", CALM_STUDIO_PASSWORD=password)
    env.update(extra_env or {})
    log_path = tmp_path / f"studio-{port}.log"
    log = open(log_path, "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "app" / "main.py"), "--server.port", str(port)],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    wait_until_healthy(port, server, log_path, timeout_s=120)
    return server, port, log, log_path


def _stop(server: subprocess.Popen, log) -> None:
    os.killpg(server.pid, signal.SIGTERM)
    server.wait(timeout=30)
    log.close()


@pytest.fixture(scope="module")
def local_studio(tmp_path_factory):
    server, port, log, log_path = _start(tmp_path_factory.mktemp("local"), shared=False)
    yield server, port, log_path
    _stop(server, log)


@pytest.fixture(scope="module")
def shared_studio(tmp_path_factory):
    server, port, log, log_path = _start(tmp_path_factory.mktemp("shared"), shared=True)
    yield server, port, log_path
    _stop(server, log)


def test_local_studio_refuses_a_foreign_host_and_answers_its_own(local_studio) -> None:
    _, port, _ = local_studio
    assert ws_handshake(port) == 101  # the client works: the studio's own name is answered
    assert ws_handshake(port, host=f"localhost:{port}") == 101
    assert ws_handshake(port, host=f"{FOREIGN}:{port}") == 403  # a rebound name
    assert ws_handshake(port, host=f"{FOREIGN}:{port}", origin=f"http://{FOREIGN}:{port}") == 403
    assert request(port, "GET", "/", host=f"{FOREIGN}:{port}")[0] == 403
    assert request(port, "GET", "/_stcore/host-config", host=f"{FOREIGN}:{port}")[0] == 403
    assert request(port, "GET", "/", host=f"10.0.0.5:{port}")[0] == 403  # local mode: loopback addresses only
    assert request(port, "GET", "/")[0] == 200


def test_metrics_are_never_served(local_studio, shared_studio) -> None:
    for _, port, _ in (local_studio, shared_studio):
        assert request(port, "GET", "/_stcore/metrics")[0] == 404


def test_shared_studio_refuses_a_foreign_host_even_signed_in(shared_studio) -> None:
    _, port, _ = shared_studio
    status, cookie = sign_in(port, PASSWORD)
    assert status == 303 and cookie
    assert ws_handshake(port, cookie=cookie) == 101
    assert ws_handshake(port, host=f"{FOREIGN}:{port}", cookie=cookie) == 403
    assert request(port, "GET", "/", host=f"{FOREIGN}:{port}", headers={"Cookie": cookie})[0] == 403


def test_nothing_before_the_password_reaches_streamlit(shared_studio) -> None:
    """An upload PUT with a self-made XSRF pair and a clear_cache message, without signing
    in: both refused before Streamlit, so the server's memory does not grow (the probe saw
    98 -> 401 MB after 3 x 100 MB uploads) and no cache is flushed."""
    server, port, _ = shared_studio
    assert ws_handshake(port) == 403
    assert send_back_message(port, clear_cache=True) == 403  # the stream never opens: nothing is sent
    assert request(port, "GET", "/_stcore/host-config")[0] == 401
    page = request(port, "GET", "/train")
    assert page[0] == 303 and page[1]["location"].startswith("/_calm/signin")

    before = settled_rss(server.pid)  # after the background import of PyTorch, not during it
    statuses = [upload(port, 50 * 2**20)[0] for _ in range(3)]
    time.sleep(0.5)
    grown = rss_bytes(server.pid) - before
    assert statuses == [401, 401, 401]
    assert grown < 20 * 2**20, f"server memory grew by {grown / 2**20:.1f} MB after refused uploads"

    _, cookie = sign_in(port, PASSWORD)  # signed in, the same PUT passes the door: Streamlit answers it
    status, body = upload(port, 1024, cookie=cookie)
    assert body not in (DOOR_SIGN_IN_FIRST, b"") and status != 401, (status, body)


def test_sixty_wrong_passwords_take_the_documented_time(tmp_path: Path) -> None:
    """60 wrong passwords from fresh connections, as fast as they go: the server checks no
    more of them than its limits allow in the time taken, refuses the rest unchecked
    (429 with Retry-After), and by the limits 60 guesses from one address take hours.
    A fresh server, so the other tests' tries do not count."""
    server, port, log, log_path = _start(tmp_path, shared=True)
    try:
        started = time.monotonic()
        answers = [sign_in(port, f"guess {i}")[0] for i in range(60)]
        elapsed = time.monotonic() - started
        checked = answers.count(401)
        assert set(answers) <= {401, 429}, answers
        assert checked <= guesses_within(GuessLimiter(), 1, elapsed + 1.0), (checked, elapsed)
        assert answers.count(429) >= 60 - guesses_within(GuessLimiter(), 1, elapsed + 1.0)
        status, headers, _ = request(port, "POST", "/_calm/signin", body=b"password=guess")
        assert status == 429 and int(headers["retry-after"]) >= 1
        # while the address is held back, even the right password waits (the documented cost)
        assert sign_in(port, PASSWORD)[0] == 429
    finally:
        _stop(server, log)
    assert PASSWORD not in log_path.read_text()
    assert fastest_guesses(GuessLimiter(), 1, 60) >= 3600  # docs/security.md: over an hour from one address
    assert fastest_guesses(GuessLimiter(), 1000, 60) >= 1800  # the server's bucket: 30 min from any number


def test_a_short_password_serves_nothing(tmp_path: Path) -> None:
    server, port, log, _ = _start(tmp_path, shared=True, password="a")
    try:
        status, _, body = request(port, "GET", "/")
        assert status == 503 and b"shorter than 12 characters" in body
        assert sign_in(port, "a")[0] == 503  # not even the sign-in form
        assert ws_handshake(port) == 403
    finally:
        _stop(server, log)
