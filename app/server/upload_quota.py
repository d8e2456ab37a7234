"""What one session and one browser may hold in uploaded files: an ASGI layer on the
upload route, behind the front door (app/main.py mounts it after app/server/front.py).

Streamlit keeps every uploaded file whole in the server's memory (its
`MemoryUploadedFileManager`), by session and file id, until the session is dropped,
which happens lazily, minutes after its tab closed. A session may PUT any number of
files to fresh ids without a rerun, so repeated PUTs of 400 MB grew the server by 400 MB
each and the 15th took it past 6 GB. So, on every `PUT /_stcore/upload_file/<session>/<file>`,
before Streamlit reads a byte of the body:

- the body must declare its length (411 otherwise), and the PUT is counted at that length
  while it is read (a body longer than it declared is cut off);
- **a session holds one file**: the studio has one uploader (the Data page's), so a new
  file replaces the session's others, which are freed first; a second PUT of the same
  session still in flight is refused (413);
- **a browser holds `BROWSER_FILES` files' worth** (`server.maxUploadSize` each) over all its
  sessions: a signed-in browser by its device id, otherwise its address (a local studio's
  one user); past it the PUT is refused (413) with the reason;
- **the server holds `SERVER_FILES` files' worth** over every browser (413 past it);
- **a session that has ended holds nothing**: when a WebSocket ends, the files of every
  session no longer connected are freed (a tab that reconnects after a dropped network
  uploads its file again).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from app.server.door_keys import grant_in

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

UPLOAD_PATH = re.compile(r"^(?:/.*)?/_stcore/upload_file/(?P<session>[^/]+)/(?P<file>[^/]+)$")
BROWSER_FILES = 2  # files of the largest size one browser may hold over its tabs (two tabs uploading at once)
# Files of the largest size the whole server may hold: signing in again gives a new
# browser, so the browsers' budget alone does not bound the server. 8 x 512 MB is what
# .streamlit/config.toml sizes the machine for; rightful uploads are rarely near 512 MB.
SERVER_FILES = 8
MULTIPART_BYTES = 64 * 1024  # the form's framing around the file (Streamlit allows for it too)


@dataclass
class Ledger:
    """Which browser each session belongs to, and the bytes of PUTs still being read."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    browser_of: dict[str, str] = field(default_factory=dict)  # session id -> browser key
    in_flight: dict[str, int] = field(default_factory=dict)  # session id -> bytes being received


LEDGER = Ledger()


def _manager() -> Any:
    """Streamlit's uploaded-file manager of this server, or None before the runtime exists."""
    from streamlit import runtime

    return runtime.get_instance().uploaded_file_mgr if runtime.exists() else None


def _held(manager: Any, session: str) -> dict[str, int]:
    """File id -> bytes of the files `session` holds in `manager`."""
    storage = getattr(manager, "file_storage", {}).get(session, {})
    return {file_id: len(record.data) for file_id, record in list(storage.items())}


def max_file_bytes() -> int:
    """The largest upload Streamlit takes (`server.maxUploadSize`, MB), with its framing."""
    import streamlit as st

    return int(st.get_option("server.maxUploadSize")) * 2**20 + MULTIPART_BYTES


def _sessions_of(browser: str) -> Iterator[str]:
    return (session for session, owner in list(LEDGER.browser_of.items()) if owner == browser)


def admit(manager: Any, session: str, browser: str, size: int, file_id: str) -> str | None:
    """Reserve `size` bytes for this PUT, freeing the session's other files first; the
    refusal's reason instead when the session or the browser would hold too much."""
    limit = max_file_bytes()
    with LEDGER.lock:
        if session in LEDGER.in_flight:
            return "This session is already uploading a file: wait for it, then upload the next."
        for other in _held(manager, session):
            if other != file_id:
                manager.remove_file(session, other)  # the one uploader's file, replaced
        LEDGER.browser_of[session] = browser
        refusal = _over_budget(manager, session, browser, size, limit)
        if refusal is None:
            LEDGER.in_flight[session] = size
    return refusal


def _holding(manager: Any, sessions: Iterable[str]) -> int:
    """Bytes `sessions` hold in the manager and in PUTs still being read."""
    return sum(sum(_held(manager, s).values()) + LEDGER.in_flight.get(s, 0) for s in sessions)


def _over_budget(manager: Any, session: str, browser: str, size: int, limit: int) -> str | None:
    """Why `size` more bytes for `session` would pass its browser's or the server's budget (None: they fit)."""
    held = _holding(manager, (s for s in _sessions_of(browser) if s != session))
    if held + size > BROWSER_FILES * limit:
        return (
            f"This browser already holds {held / 2**20:.0f} MB of uploads in other tabs (at most "
            f"{BROWSER_FILES * limit / 2**20:.0f} MB): close a tab or remove its file, then upload again."
        )
    everyone = set(getattr(manager, "file_storage", {})) | set(LEDGER.in_flight)
    held = _holding(manager, everyone - {session})
    if held + size > SERVER_FILES * limit:
        return (
            f"This studio holds {held / 2**20:.0f} MB of uploads from all its users (at most "
            f"{SERVER_FILES * limit / 2**20:.0f} MB): try again once others have saved theirs."
        )
    return None


def release(session: str) -> None:
    """The PUT is over: its bytes are in the manager now (or nowhere)."""
    with LEDGER.lock:
        LEDGER.in_flight.pop(session, None)


def free_ended_sessions() -> None:
    """Free the files of every session that is no longer connected, and forget it."""
    from streamlit import runtime

    manager = _manager()
    if manager is None:
        return
    instance = runtime.get_instance()
    with LEDGER.lock:
        sessions = set(getattr(manager, "file_storage", {})) | set(LEDGER.browser_of)
        for session in sessions:
            if not instance.is_active_session(session) and session not in LEDGER.in_flight:
                manager.remove_session_files(session)
                LEDGER.browser_of.pop(session, None)


class UploadQuota:
    """ASGI middleware: the budgets above on the upload route; every other request passes."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            try:
                await self.app(scope, receive, send)
            finally:
                free_ended_sessions()
            return
        found = UPLOAD_PATH.match(scope.get("path", "")) if scope["type"] == "http" else None
        if found is None or scope.get("method") != "PUT":
            await self.app(scope, receive, send)
            return
        await self._put(scope, receive, send, found["session"], found["file"])

    async def _put(self, scope: Scope, receive: Receive, send: Send, session: str, file_id: str) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        declared = headers.get("content-length", "")
        manager = _manager()
        if not declared.isdigit() or manager is None:
            await _refuse(send, 411, "An upload must declare its length (Content-Length).")
            return
        size = int(declared)
        if size > max_file_bytes():
            await _refuse(send, 413, f"The file is larger than this studio takes ({max_file_bytes() // 2**20} MB).")
            return
        browser = _browser(scope, headers)
        refusal = admit(manager, session, browser, size, file_id)
        if refusal is not None:
            await _refuse(send, 413, refusal)
            return
        try:
            await self.app(scope, _at_most(receive, size), send)
        finally:
            release(session)


def _browser(scope: Scope, headers: dict[str, str]) -> str:
    """Who holds the files: a signed-in browser's device id, else the connecting address."""
    grant = grant_in(headers.get("cookie"))
    if grant is not None and grant.device:
        return f"device:{grant.device}"
    return f"address:{(scope.get('client') or ('', 0))[0]}"


def _at_most(receive: Receive, size: int) -> Receive:
    """`receive` that stops the body once it passes the `size` it declared."""
    received = 0

    async def bounded() -> dict[str, Any]:
        nonlocal received
        message = await receive()
        received += len(message.get("body", b""))
        if received > size:
            return {"type": "http.disconnect"}
        return message

    return bounded


async def _refuse(send: Send, status: int, text: str) -> None:
    body = text.encode("utf-8")
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
