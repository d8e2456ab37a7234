"""A raw HTTP and WebSocket client that speaks to the studio the way an attacker would:
its own Host and Origin headers, self-made XSRF cookies, no browser, a fresh connection
per request (so no per-connection state helps the server).

    status = ws_handshake(port, host="evil.example:8501")         # 101, or the refusal's status
    status, headers, body = request(port, "POST", "/_calm/signin", body=b"password=x")
    send_back_message(port, clear_cache=True, cookie=...)          # a clear_cache over the WebSocket

    with StudioSession(port, cookie) as session:                   # a session, with forged widget states
        session.rerun("monitor")                                    # draws the page: session.elements
        session.rerun("monitor", click=["monitor_resume"])          # a click the browser would not send

Through an HTTPS proxy, pass `tls=Tls(ssl.create_default_context(cafile=cert), "studio.test")`
(the connection still goes to 127.0.0.1) and the proxy's `Authorization` in `headers`.

Used by tests/test_attacks.py, tests/test_attacks_forged.py and tests/test_proxy_recipe.py.
"""

from __future__ import annotations

import base64
import os
import socket
import ssl
import struct
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TIMEOUT_S = 20.0


@dataclass(frozen=True)
class Tls:
    """Speak TLS: the context that verifies the server, and the name it must prove (SNI)."""

    context: ssl.SSLContext
    server_name: str


def _connect(port: int, tls: Tls | None = None, timeout_s: float = TIMEOUT_S) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
    sock.settimeout(timeout_s)
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
    timeout_s: float = TIMEOUT_S,
) -> tuple[int, dict[str, str], bytes]:
    """One request on a fresh connection: (status, headers, body). The body is read up to
    its Content-Length; a server that answers before reading a large upload is fine.
    `timeout_s` bounds each send and receive on the socket."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host or f'127.0.0.1:{port}'}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    if body or method in ("POST", "PUT"):
        lines.append(f"Content-Length: {len(body)}")
    with _connect(port, tls, timeout_s) as sock:
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


def sign_in_as(port: int, password: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str]]:
    """POST the sign-in form with extra headers (a Cookie, an X-Forwarded-For): (status,
    {cookie name: value} of every Set-Cookie)."""
    from urllib.parse import urlencode

    status, answer, _ = request(
        port,
        "POST",
        "/_calm/signin",
        headers={"Content-Type": "application/x-www-form-urlencoded", **(headers or {})},
        body=urlencode({"password": password, "next": "/"}).encode(),
    )
    cookies = {}
    for line in answer.get("set-cookie", "").split("\n"):
        name, _, value = line.split(";", 1)[0].partition("=")
        if name:
            cookies[name.strip()] = value
    return status, cookies


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


BINARY, CLOSE, PING, PONG = 0x2, 0x8, 0x9, 0xA


def _frame(payload: bytes, opcode: int = BINARY) -> bytes:
    """One masked frame, binary unless told (a client must mask, RFC 6455)."""
    mask = os.urandom(4)
    size = len(payload)
    if size < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | size)
    elif size < 65536:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, size)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, size)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def send_back_message(
    port: int, *, clear_cache: bool = True, host: str | None = None, cookie: str | None = None
) -> int:
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


@dataclass(frozen=True)
class Element:
    """One element a script run drew: its kind (`button`, `alert`, `exception`, ...) and
    that kind's message (streamlit/proto/Element.proto)."""

    kind: str
    proto: Any

    @property
    def key(self) -> str | None:
        """The user key of a keyed widget: Streamlit 1.67 builds a keyed widget's id as
        `$$ID-<hash>-<key>` (elements/lib/utils.py compute_and_register_element_id)."""
        widget_id = getattr(self.proto, "id", "")
        parts = widget_id.split("-", 2) if isinstance(widget_id, str) else []
        return parts[2] if len(parts) == 3 and parts[0] == "$$ID" and parts[2] != "None" else None

    @property
    def text(self) -> str:
        """What it says: an alert's or a markdown's body, an exception's message."""
        return str(getattr(self.proto, "body", "") or getattr(self.proto, "message", ""))

    @property
    def is_error(self) -> bool:
        return self.kind == "alert" and self.proto.format == self.proto.ERROR


class StudioSession:
    """One Streamlit session over the raw WebSocket, as a browser holds it, but the widget
    states it sends are the caller's: a click on a disabled button, any typed text. Each
    `rerun` sends a `rerun_script` BackMsg and reads ForwardMsgs until the run finishes
    (a run that ends in `st.rerun()` is followed to the next): `elements` is what the page
    drew, `session_id` the id the server reported (calm_core's `session_tag` hashes it)."""

    def __init__(
        self, port: int, cookie: str | None = None, timeout_s: float = 180.0, headers: dict[str, str] | None = None
    ) -> None:
        self._sock = _connect(port)
        self._sock.settimeout(timeout_s)
        self._sock.sendall(_handshake_lines(port, None, None, cookie, headers).encode("latin-1"))
        status, _, self._buffer = _read_head(self._sock)
        if status != 101:
            self._sock.close()
            raise ConnectionError(f"the WebSocket handshake got {status}")
        self.session_id = ""
        self.elements: list[Element] = []
        self._page, self._page_hash = "", ""
        self._ids: dict[str, str] = {}  # user key -> widget id, as drawn
        self._typed: dict[str, str] = {}  # string values sent, kept as a browser keeps them
        self._chosen: dict[str, list[str]] = {}  # a multiselect's options, kept the same way

    def __enter__(self) -> StudioSession:
        return self

    def __exit__(self, *_: object) -> None:
        try:
            self._sock.sendall(_frame(struct.pack("!H", 1000), CLOSE))
        except OSError:
            pass
        self._sock.close()

    def widget(self, key: str) -> Element:
        """The widget drawn with user key `key` in the last run."""
        return next(e for e in self.elements if e.key == key)

    def rerun(
        self,
        page: str,
        *,
        click: Iterable[str] = (),
        typed: dict[str, str] | None = None,
        files: dict[str, Any] | None = None,
        chosen: dict[str, list[str]] | None = None,
    ) -> list[Element]:
        """Run `page` (its URL path: "monitor") with a trigger for each key in `click` and the
        string values in `typed` (a text input's text, a radio's option), by the ids the last
        run drew (a key must have been drawn); `files`: a file uploader's state (a
        `FileUploaderState`, as `put_upload` gives) by its key, sent with this run only;
        `chosen`: a multiselect's chosen options by its key."""
        from streamlit.proto.BackMsg_pb2 import BackMsg

        self._typed.update(typed or {})
        self._chosen.update(chosen or {})
        message = BackMsg()
        state = message.rerun_script
        state.query_string, state.page_name = "", page
        state.page_script_hash = self._page_hash if page == self._page else ""
        for key, value in self._typed.items():
            state.widget_states.widgets.add(id=self._ids[key], string_value=value)
        for key, options in self._chosen.items():
            state.widget_states.widgets.add(id=self._ids[key]).string_array_value.data.extend(options)
        for key in click:
            state.widget_states.widgets.add(id=self._ids[key], trigger_value=True)
        for key, files_state in (files or {}).items():
            state.widget_states.widgets.add(id=self._ids[key], file_uploader_state_value=files_state)
        self._sock.sendall(_frame(message.SerializeToString()))
        self._page = page
        self.elements = self._until_finished()
        self._ids.update({e.key: e.proto.id for e in self.elements if e.key})
        return self.elements

    def _until_finished(self) -> list[Element]:
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        elements: list[Element] = []
        while True:
            message = ForwardMsg.FromString(self._message())
            kind = message.WhichOneof("type")
            if kind == "new_session":  # a script run starts: the page is drawn afresh
                self.session_id = message.new_session.initialize.session_id or self.session_id
                elements = []
            elif kind == "navigation":  # st.navigation chose the page: a browser sends its hash back
                self._page_hash = message.navigation.page_script_hash
            elif kind == "page_not_found":
                raise LookupError(f"no page {message.page_not_found.page_name!r}")
            elif kind == "delta":
                delta = message.delta
                drawn = [delta.new_element] if delta.HasField("new_element") else []
                drawn += delta.new_transient.elements if delta.HasField("new_transient") else []
                elements += [Element(str(e.WhichOneof("type")), getattr(e, str(e.WhichOneof("type")))) for e in drawn]
            elif kind == "script_finished" and message.script_finished != ForwardMsg.FINISHED_EARLY_FOR_RERUN:
                return elements

    def _message(self) -> bytes:
        """The next data message, its fragments joined; pings answered, a close raised."""
        data = b""
        while True:
            final, opcode, payload = self._frame()
            if opcode == PING:
                self._sock.sendall(_frame(payload, PONG))
            elif opcode == CLOSE:
                raise ConnectionError(f"the server closed the stream: {payload[:2].hex()}")
            elif opcode != PONG:  # text, binary or a continuation
                data += payload
                if final:
                    return data

    def _frame(self) -> tuple[bool, int, bytes]:
        """(final?, opcode, payload) of one server frame (unmasked, RFC 6455; unmasked if masked)."""
        head = self._take(2)
        size = head[1] & 0x7F
        if size == 126:
            size = struct.unpack("!H", self._take(2))[0]
        elif size == 127:
            size = struct.unpack("!Q", self._take(8))[0]
        mask = self._take(4) if head[1] & 0x80 else b""
        payload = self._take(size)
        if mask:
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        return bool(head[0] & 0x80), head[0] & 0x0F, payload

    def _take(self, size: int) -> bytes:
        while len(self._buffer) < size:
            chunk = self._sock.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            self._buffer += chunk
        taken, self._buffer = self._buffer[:size], self._buffer[size:]
        return taken


def upload(port: int, size: int, cookie: str | None = None) -> tuple[int, bytes]:
    """PUT `size` bytes to Streamlit's upload route with a self-made XSRF cookie/header pair:
    (status, body of the answer)."""
    token = "calm-probe"
    boundary = "calmprobeboundary"
    payload = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="x.csv"\r\n'
            f"Content-Type: text/csv\r\n\r\n"
        ).encode()
        + b"a" * size
        + f"\r\n--{boundary}--\r\n".encode()
    )
    cookies = f"_streamlit_xsrf={token}" + (f"; {cookie}" if cookie else "")
    status, _, answer = request(
        port,
        "PUT",
        "/_stcore/upload_file/probe-session/probe-file",
        headers={"Cookie": cookies, "X-Xsrftoken": token, "Content-Type": f"multipart/form-data; boundary={boundary}"},
        body=payload,
    )
    return status, answer


def put_upload(
    port: int,
    session_id: str,
    name: str,
    data: bytes,
    cookie: str | None = None,
    headers: dict[str, str] | None = None,
    timeout_s: float = TIMEOUT_S,
) -> Any:
    """Upload `data` as a browser's file uploader does (issue 38): PUT it to this session's
    upload URL with an XSRF cookie/header pair, and return the `FileUploaderState` the
    browser then sends with its rerun (`StudioSession.rerun(files=...)`). `headers` are
    added to the PUT (a trusted proxy's X-Forwarded-For and secret); `timeout_s` bounds its
    socket's waits (a large file on a busy machine)."""
    import uuid

    from streamlit.proto.Common_pb2 import FileUploaderState, FileURLs, UploadedFileInfo

    file_id = str(uuid.uuid4())
    url = f"/_stcore/upload_file/{session_id}/{file_id}"
    status, answer = put_file(port, url, name, data, cookie, headers, timeout_s)
    if status not in (200, 204):
        raise ConnectionError(f"the upload PUT got {status}: {answer[:200]!r}")
    info = UploadedFileInfo(name=name, size=len(data), file_id=file_id)
    info.file_urls.CopyFrom(FileURLs(file_id=file_id, upload_url=url, delete_url=url))
    return FileUploaderState(uploaded_file_info=[info])


def put_file(
    port: int,
    url: str,
    name: str,
    data: bytes,
    cookie: str | None = None,
    headers: dict[str, str] | None = None,
    timeout_s: float = TIMEOUT_S,
) -> tuple[int, bytes]:
    """PUT `data` as the file `name` to an upload URL, as a browser's uploader does (a
    multipart form, an XSRF cookie/header pair, and any extra `headers`): (status, body of
    the answer). `timeout_s` bounds each wait on the socket."""
    import uuid

    token, boundary = uuid.uuid4().hex, "calmprobeboundary"  # a V1 (hex) XSRF token
    payload = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    cookies = f"_streamlit_xsrf={token}" + (f"; {cookie}" if cookie else "")
    sent = {"Cookie": cookies, "X-Xsrftoken": token, "Content-Type": f"multipart/form-data; boundary={boundary}"}
    status, _, answer = request(
        port, "PUT", url, headers={**(headers or {}), **sent}, body=payload, timeout_s=timeout_s
    )
    return status, answer


def settled_rss(pid: int, timeout_s: float = 180.0, step_s: float = 1.0, still: int = 3) -> int:
    """The resident memory once it has stopped growing (`still` samples in a row within
    1 MB): a fresh studio imports PyTorch in the background (app/server/warmup.py), and that
    growth is not what an upload test measures."""
    deadline, last, calm = time.monotonic() + timeout_s, rss_bytes(pid), 0
    while time.monotonic() < deadline and calm < still:
        time.sleep(step_s)
        now = rss_bytes(pid)
        calm = calm + 1 if abs(now - last) < 2**20 else 0
        last = now
    return last


def rss_bytes(pid: int) -> int:
    """The resident memory of a process (Linux /proc)."""
    for line in open(f"/proc/{pid}/status", encoding="ascii"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def children_of(pid: int) -> list[int]:
    """The processes `pid` started, from any of its threads (a page's script thread starts
    the upload worker, calm_core/data/worker.py)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def anon_bytes(pid: int) -> int:
    """A process's anonymous resident memory (what RLIMIT_DATA holds), 0 once it is gone."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return 0
    return next((int(line.split()[1]) * 1024 for line in lines if line.startswith("RssAnon:")), 0)
