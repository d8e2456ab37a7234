"""The reverse-proxy recipe of docs/security.md ("Transport"), run as written: nginx with
docs/proxy/nginx-studio.conf (placeholders filled in) terminates HTTPS with a self-signed
certificate and asks a basic-auth password, in front of a shared studio on 127.0.0.1.
Probed over TLS with the raw client (tests/attack_client.py):

- without the proxy's password, nginx answers 401 to everything, the sign-in form included;
- with it, the studio still asks its own password (303 to /_calm/signin), and signing in
  sets a cookie that carries `Secure` (the proxy says X-Forwarded-Proto: https);
- with both, the WebSocket handshake passes the proxy (101) and an upload larger than
  nginx's default 1 MB body limit reaches Streamlit;
- a foreign Host through the proxy is refused by the studio (403);
- a local process that talks to the studio's own port, past nginx, is refused (403): the
  studio requires the secret header the recipe adds (CALM_PROXY_SECRET);
- the address the studio's guessing limits count is the real peer's: wrong passwords
  sent through the proxy under invented X-Forwarded-For addresses share one allowance.

Skipped without nginx or openssl, unless CALM_REQUIRE_BROWSER=1 (set by .ci/run, which
installs nginx), where it fails.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

import pytest

from calm_core.access.guesses import FREE_TRIES
from tests.attack_client import Tls, request, ws_handshake
from tests.test_attacks import PASSWORD, _start, _stop
from tests.test_private import _free_port

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "docs" / "proxy" / "nginx-studio.conf"
NAME = "studio.test"
BASIC_USER, BASIC_PASSWORD = "reader", "second door 42"
FOREIGN = "evil.example"
PROXY_SECRET = "0123456789abcdef-recipe-test-secret"

# What a site file needs around it to run on its own: nginx's main context, with every
# path it writes under the test's folder, in the foreground, as one process (so it reads
# the test's files with the test's rights).
NGINX_MAIN = """daemon off;
master_process off;
pid {run}/nginx.pid;
error_log {run}/error.log;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {run}/body;
    proxy_temp_path {run}/proxy;
    fastcgi_temp_path {run}/fastcgi;
    uwsgi_temp_path {run}/uwsgi;
    scgi_temp_path {run}/scgi;
    include {site};
}}
"""


def _require(tool: str) -> str:
    """The tool's path; skips without it, fails without it where CI requires it."""
    found = shutil.which(tool, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))
    if found:
        return found
    if os.environ.get("CALM_REQUIRE_BROWSER") == "1":
        pytest.fail(f"the proxy recipe test needs {tool} (CALM_REQUIRE_BROWSER=1)")
    pytest.skip(f"the proxy recipe test needs {tool}: apt-get install {tool}")


def fill_recipe(values: dict[str, str]) -> str:
    """docs/proxy/nginx-studio.conf with its {{PLACEHOLDERS}} replaced; every one must be given."""
    text = RECIPE.read_text()
    for name, value in values.items():
        text = text.replace("{{" + name + "}}", value)
    assert "{{" not in text, f"a placeholder of {RECIPE.name} was not filled in"
    return text


@dataclass(frozen=True)
class Proxy:
    port: int
    tls: Tls
    basic: dict[str, str]  # the Authorization header nginx asks for
    studio_port: int  # the studio's own port, behind nginx


def _certificate(openssl: str, folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={NAME}", "-days", "1"]
        + ["-addext", f"subjectAltName=DNS:{NAME}", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    return cert, key


def _htpasswd(openssl: str, folder: Path) -> Path:
    """One basic-auth user, hashed as docs/proxy/nginx-studio.conf says (`openssl passwd -6`)."""
    hashed = subprocess.run(
        [openssl, "passwd", "-6", "-stdin"], input=BASIC_PASSWORD, text=True, check=True, capture_output=True
    ).stdout.strip()
    path = folder / "htpasswd"
    path.write_text(f"{BASIC_USER}:{hashed}\n")
    return path


def _wait_for_port(port: int, process: subprocess.Popen, log: Path, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, f"nginx exited: {log.read_text() if log.exists() else ''}"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    pytest.fail(f"nginx did not listen on {port}: {log.read_text() if log.exists() else ''}")


@pytest.fixture(scope="module")
def proxy(tmp_path_factory) -> Iterator[Proxy]:
    nginx, openssl = _require("nginx"), _require("openssl")
    folder = tmp_path_factory.mktemp("proxy")
    cert, key = _certificate(openssl, folder)
    htpasswd = _htpasswd(openssl, folder)
    server, studio_port, log, _ = _start(
        folder, shared=True, extra_env={"CALM_STUDIO_HOSTS": NAME, "CALM_TRUSTED_PROXIES": "127.0.0.1", "CALM_PROXY_SECRET": PROXY_SECRET},
    )
    proxy_port = _free_port()
    site = folder / "nginx-studio.conf"
    site.write_text(
        fill_recipe(
            {
                "NAME": NAME,
                "HTTPS_PORT": str(proxy_port),
                "CERT": str(cert),
                "KEY": str(key),
                "HTPASSWD": str(htpasswd),
                "STUDIO_PORT": str(studio_port),
                "PROXY_SECRET": PROXY_SECRET,
            }
        )
    )
    run = folder / "nginx"
    run.mkdir()
    main = folder / "nginx.conf"
    main.write_text(NGINX_MAIN.format(run=run, site=site))
    nginx_log = run / "error.log"
    process = subprocess.Popen(
        [nginx, "-p", str(run), "-e", str(nginx_log), "-c", str(main)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        _wait_for_port(proxy_port, process, nginx_log)
        credentials = base64.b64encode(f"{BASIC_USER}:{BASIC_PASSWORD}".encode()).decode()
        tls = Tls(ssl.create_default_context(cafile=str(cert)), NAME)
        yield Proxy(proxy_port, tls, {"Authorization": f"Basic {credentials}"}, studio_port)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
        _stop(server, log)


def _get(proxy: Proxy, path: str, headers: dict[str, str] | None = None, host: str = NAME):
    return request(proxy.port, "GET", path, host=host, headers=headers, tls=proxy.tls)


def _sign_in(proxy: Proxy, headers: dict[str, str]) -> tuple[int, dict[str, str]]:
    status, answer, _ = request(
        proxy.port,
        "POST",
        "/_calm/signin",
        host=NAME,
        headers={"Content-Type": "application/x-www-form-urlencoded", **headers},
        body=urlencode({"password": PASSWORD, "next": "/"}).encode(),
        tls=proxy.tls,
    )
    return status, answer


@pytest.fixture(scope="module")
def cookie(proxy: Proxy) -> str:
    """The studio's sign-in through the proxy (once: every try counts against the limits)."""
    status, answer = _sign_in(proxy, proxy.basic)
    assert status == 303, status
    attributes = [part.strip() for part in answer["set-cookie"].split(";")]
    assert "Secure" in attributes and "HttpOnly" in attributes, answer["set-cookie"]
    return attributes[0]


def test_without_the_proxys_password_nginx_answers_401(proxy: Proxy) -> None:
    status, headers, _ = _get(proxy, "/")
    assert status == 401 and headers["www-authenticate"].startswith("Basic")
    wrong = base64.b64encode(f"{BASIC_USER}:{PASSWORD}".encode()).decode()
    assert _get(proxy, "/", headers={"Authorization": f"Basic {wrong}"})[0] == 401
    assert _get(proxy, "/_stcore/health")[0] == 401  # the studio's one open route too
    assert _sign_in(proxy, {})[0] == 401  # the studio's form is never reached: no guess is counted
    assert ws_handshake(proxy.port, host=NAME, origin=f"https://{NAME}", tls=proxy.tls) == 401


def test_with_the_proxys_password_the_studio_asks_its_own(proxy: Proxy) -> None:
    status, headers, _ = _get(proxy, "/train", headers=proxy.basic)
    assert status == 303 and headers["location"] == "/_calm/signin?next=/train"
    status, _, body = _get(proxy, "/_calm/signin", headers=proxy.basic)
    assert status == 200 and b'name="password"' in body
    assert ws_handshake(proxy.port, host=NAME, origin=f"https://{NAME}", headers=proxy.basic, tls=proxy.tls) == 403


def test_with_both_passwords_the_studio_and_its_websocket_pass(proxy: Proxy, cookie: str) -> None:
    both = {**proxy.basic, "Cookie": cookie}
    assert _get(proxy, "/", headers=both)[0] == 200
    assert _get(proxy, "/", headers={"Cookie": cookie})[0] == 401  # the studio's cookie alone: not past nginx
    assert ws_handshake(proxy.port, host=NAME, origin=f"https://{NAME}", headers=both, tls=proxy.tls) == 101


def test_an_upload_over_nginxs_default_limit_reaches_streamlit(proxy: Proxy, cookie: str) -> None:
    """nginx refuses bodies over 1 MB unless told otherwise (413); the recipe allows the studio's 512 MB."""
    status, _, body = request(
        proxy.port,
        "PUT",
        "/_stcore/upload_file/probe-session/probe-file",
        host=NAME,
        headers={**proxy.basic, "Cookie": cookie, "Content-Type": "application/octet-stream"},
        body=b"a" * (2 * 2**20),
        tls=proxy.tls,
    )
    assert status not in (401, 413), (status, body[:200])


def test_a_foreign_host_through_the_proxy_is_refused_by_the_studio(proxy: Proxy, cookie: str) -> None:
    both = {**proxy.basic, "Cookie": cookie}
    status, _, body = _get(proxy, "/", headers=both, host=FOREIGN)
    assert status == 403 and b"does not answer to that host name" in body
    assert ws_handshake(proxy.port, host=FOREIGN, origin=f"https://{FOREIGN}", headers=both, tls=proxy.tls) == 403


def test_a_local_process_on_the_studios_own_port_is_refused(proxy: Proxy) -> None:
    """The studio trusts 127.0.0.1, the proxy's address, and so did every local process that
    skipped nginx: no basic auth, and any X-Forwarded-For believed. Now it needs the secret
    header only nginx sends."""
    direct = {"X-Forwarded-For": "198.51.100.9", "Content-Type": "application/x-www-form-urlencoded"}
    form = urlencode({"password": "a guess", "next": "/"}).encode()
    assert request(proxy.studio_port, "POST", "/_calm/signin", host=NAME, headers=direct, body=form)[0] == 403
    assert request(proxy.studio_port, "GET", "/_calm/signin", host=NAME)[0] == 403
    assert ws_handshake(proxy.studio_port, host=NAME, origin=f"https://{NAME}") == 403
    forged = {**direct, "X-Calm-Proxy-Secret": "not the secret"}
    assert request(proxy.studio_port, "POST", "/_calm/signin", host=NAME, headers=forged, body=form)[0] == 403


def test_the_forwarded_address_is_the_real_peers(proxy: Proxy, cookie: str) -> None:
    """The studio trusts the proxy (CALM_TRUSTED_PROXIES=127.0.0.1) and so reads
    X-Forwarded-For: the recipe must put the connecting peer there, not pass on the
    client's own claim. Seven wrong tries under seven invented addresses: after the free
    tries, the address they all really share is held back (429). Last in the file: its
    tries count against this address for the rest of the module."""
    answers = []
    for i in range(FREE_TRIES + 2):
        status, _, _ = request(
            proxy.port,
            "POST",
            "/_calm/signin",
            host=NAME,
            headers={**proxy.basic, "Content-Type": "application/x-www-form-urlencoded",
                     "X-Forwarded-For": f"198.51.100.{i}"},
            body=urlencode({"password": f"guess {i}", "next": "/"}).encode(),
            tls=proxy.tls,
        )
        answers.append(status)
    assert answers[:FREE_TRIES] == [401] * FREE_TRIES and answers[-1] == 429, answers
