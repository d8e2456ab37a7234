"""A raw HTTP and WebSocket client that speaks to the studio the way an attacker would:
its own Host and Origin headers, self-made XSRF cookies, no browser, a fresh connection
per request (so no per-connection state helps the server).

    status = ws_handshake(port, host="evil.example:8501")         # 101, or the refusal's status
    status, headers, body = request(port, "POST", "/_calm/signin", body=b"password=x")
    send_back_message(port, clear_cache=True, cookie=...)          # a clear_cache over the WebSocket

Through an HTTPS proxy, pass `tls=Tls(ssl.create_default_context(cafile=cert), "studio.test")`
(the connection still goes to 127.0.0.1) and the proxy's `Authorization` in `headers`.

Used by tests/test_attacks.py and tests/test_proxy_recipe.py.
"""

from __future__ import annotations

import base64
import os
import socket
import ssl
import struct
from dataclasses import dataclass

TIMEOUT_S = 20.0


@dataclass(frozen=True)
class Tls:
    """Speak TLS: the context that verifies the server, and the name it must prove (SNI)."""

    context: ssl.SSLContext
    server_name: str


def _connect(port: int, tls: Tls | None = None) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S)
    sock.settimeout(TIMEOUT_S)
    return tls.context.wrap_socket(sock, server_hostname=tls.server_name) if tls else sock


def _read_head(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1]) if lines and lines[0].startswith("HTTP/") else 0
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        key = name.strip().lower()
        headers[key] = headers[key] + "\n" + value.strip() if key in headers else value.strip()
    return status, headers, rest


def request(
    port: int,
    method: str,
    path: str,
    *,
    host: str | None = None,
    headers: dict[str, str] | None = None,
    body: bytes = b"",
    tls: Tls | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One request on a fresh connection: (status, headers, body). The body is read up to
    its Content-Length; a server that answers before reading a large upload is fine."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host or f'127.0.0.1:{port}'}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    if body or method in ("POST", "PUT"):
        lines.append(f"Content-Length: {len(body)}")
    with _connect(port, tls) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        try:
            sock.sendall(body)
        except OSError:  # the server answered and closed before taking the whole body
            pass
        status, answer, rest = _read_head(sock)
        length = int(answer.get("content-length", "0") or 0)
        while len(rest) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            rest += chunk
    return status, answer, rest


def sign_in(port: int, password: str) -> tuple[int, str | None]:
    """POST the sign-in form: (status, the cookie to send afterwards or None)."""
    from urllib.parse import urlencode

    status, headers, _ = request(
        port,
        "POST",
        "/_calm/signin",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        body=urlencode({"password": password, "next": "/"}).encode(),
    )
    cookie = headers.get("set-cookie", "").split(";", 1)[0] or None
    return status, cookie


def _handshake_lines(
    port: int, host: str | None, origin: str | None, cookie: str | None, headers: dict[str, str] | None = None
) -> str:
    key = base64.b64encode(os.urandom(16)).decode()
    host = host or f"127.0.0.1:{port}"
    lines = [
        "GET /_stcore/stream HTTP/1.1",
        f"Host: {host}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
        "Sec-WebSocket-Protocol: streamlit",
        f"Origin: {origin or f'http://{host}'}",
    ]
    if cookie:
        lines.append(f"Cookie: {cookie}")
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return "\r\n".join(lines) + "\r\n\r\n"


def ws_handshake(
    port: int,
    host: str | None = None,
    origin: str | None = None,
    cookie: str | None = None,
    *,
    headers: dict[str, str] | None = None,
    tls: Tls | None = None,
) -> int:
    """The status of a WebSocket handshake to Streamlit's stream (101: accepted)."""
    with _connect(port, tls) as sock:
        sock.sendall(_handshake_lines(port, host, origin, cookie, headers).encode("latin-1"))
        status, _, _ = _read_head(sock)
    return status


def _frame(payload: bytes) -> bytes:
    """One masked binary frame (a client must mask, RFC 6455)."""
    mask = os.urandom(4)
    size = len(payload)
    if size < 126:
        head = struct.pack("!BB", 0x82, 0x80 | size)
    elif size < 65536:
        head = struct.pack("!BBH", 0x82, 0x80 | 126, size)
    else:
        head = struct.pack("!BBQ", 0x82, 0x80 | 127, size)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def send_back_message(port: int, *, clear_cache: bool = True, host: str | None = None, cookie: str | None = None) -> int:
    """Open the stream and send Streamlit's `clear_cache` BackMsg, as the probe of issue 31
    did: returns the handshake's status (the message is sent only after a 101)."""
    from streamlit.proto.BackMsg_pb2 import BackMsg

    message = BackMsg()
    message.clear_cache = clear_cache
    with _connect(port) as sock:
        sock.sendall(_handshake_lines(port, host, None, cookie).encode("latin-1"))
        status, _, _ = _read_head(sock)
        if status == 101:
            sock.sendall(_frame(message.SerializeToString()))
    return status


def upload(port: int, size: int, cookie: str | None = None) -> tuple[int, bytes]:
    """PUT `size` bytes to Streamlit's upload route with a self-made XSRF cookie/header pair:
    (status, body of the answer)."""
    token = "calm-probe"
    boundary = "calmprobeboundary"
    payload = (
        f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x.csv\"\r\n"
        f"Content-Type: text/csv\r\n\r\n"
    ).encode() + b"a" * size + f"\r\n--{boundary}--\r\n".encode()
    cookies = f"_streamlit_xsrf={token}" + (f"; {cookie}" if cookie else "")
    status, _, answer = request(
        port,
        "PUT",
        "/_stcore/upload_file/probe-session/probe-file",
        headers={"Cookie": cookies, "X-Xsrftoken": token, "Content-Type": f"multipart/form-data; boundary={boundary}"},
        body=payload,
    )
    return status, answer


def rss_bytes(pid: int) -> int:
    """The resident memory of a process (Linux /proc)."""
    for line in open(f"/proc/{pid}/status", encoding="ascii"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")
