"""The studio's front door: an ASGI layer in front of everything Streamlit serves.

`app/main.py` mounts it with `st.App(..., middleware=[front_door()])`, so it sees every
HTTP request and every WebSocket handshake before Streamlit does:

1. **Host check, both modes** (calm_core/access/hosts.py): a request whose `Host` is
   not a known name is refused with 403. This stops DNS rebinding of the local studio.
2. **`/_stcore/metrics` is never served** (it tells anyone how many sessions are open).
3. **Shared mode: nothing but the sign-in page before the password.** The password is
   checked here, on a plain HTML form, under limits per client address and per server
   (calm_core/access/guesses.py); a right one sets a signed HttpOnly cookie
   (calm_core/access/tokens.py). Without that cookie a page request is sent to the
   sign-in form, the WebSocket handshake is refused, and every other route (uploads,
   static files, Streamlit's own endpoints) answers 401 without reading the request
   body. So an upload, a `clear_cache` message or a page render needs the password
   first. `/_stcore/health` stays open: it only says "ok", and proxies and the tests
   poll it.
4. **Origin check, both modes** (hosts.origin_permitted): a WebSocket handshake and every
   state-changing request must come from the studio's own origin (scheme, host, port) or
   a name given with `--host`, so a page on another port of the same host cannot drive it.
5. **Who is asking** (calm_core/access/clients.py): the limits count a try against the
   connecting peer, or behind a proxy named in CALM_TRUSTED_PROXIES the address it vouches
   for; against a browser that signed in before (its device cookie), its own counter only.
   With trusted proxies every request must carry the proxy's secret (CALM_PROXY_SECRET), so
   a local process on the studio's own port cannot pass for the proxy.
6. **Sign-out revokes** the token server-side and closes that token's open WebSockets. It is a
   POST, so the Origin check of point 4 applies: a GET (an `<img>` on another port of the same
   host, which SameSite does not stop) only shows the sign-out button.

The pages and answers the door sends itself are in app/server/door_pages.py; the sign-in, form and
device cookies and the limits on password tries, in app/server/door_keys.py.

Why a layer and not app code: the in-app gate (app/server/gate.py) runs inside a script run,
after Streamlit has already accepted the WebSocket and every endpoint beside it
(docs/security.md).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable
from urllib.parse import parse_qs, quote

from app.server.door_keys import (
    SIGNER,
    cookie_values,
    devices,
    form_id,
    grant_in,
    known_device,
    try_password,
)
from app.server.door_pages import (
    SIGNIN,
    SIGNOUT,
    page,
    redirect,
    refuse,
    set_cookie,
    signin_page,
    signout_page,
)
from calm_core.access.clients import (
    PROXY_SECRET_HEADER,
    Network,
    client_key,
    from_the_proxy,
    is_trusted_proxy,
    proxy_refusal,
)
from calm_core.access.hosts import HostRule, origin_permitted
from calm_core.access.rules import Access
from calm_core.access.tokens import COOKIE_NAME, DEVICE_COOKIE, DEVICE_DAYS, FORM_COOKIE, FORM_HOURS

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

OPEN_PATHS = ("/_stcore/health",)
NEVER_SERVED = ("/_stcore/metrics",)
MAX_FORM_BYTES = 4096
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")  # every other method changes state: its Origin is checked
REVOKED_CLOSE_CODE = 4001  # the WebSocket close code after a sign-out (the browser shows "disconnected")

_OPEN_SOCKETS: dict[str, set[asyncio.Event]] = {}  # token nonce -> one event per open WebSocket
_state = {"door": False}


def door_is_open() -> bool:
    """Whether this process serves through the front door (app/main.py), not a bare script."""
    return _state["door"]


@dataclass(frozen=True)
class DoorRules:
    """What the door enforces, fixed when the server starts."""

    access: Access
    hosts: HostRule
    base: str = ""  # server.baseUrlPath, "" or "/prefix"
    proxies: tuple[Network, ...] = ()  # CALM_TRUSTED_PROXIES: whose X-Forwarded-* headers are read
    given_names: tuple[str, ...] = ()  # --host / CALM_STUDIO_HOSTS: origins allowed on any port
    proxy_secret: str | None = field(default=None, repr=False)  # CALM_PROXY_SECRET: what the proxy sends

    def proxy_refusal(self) -> str | None:
        """Why this studio serves nothing behind its proxies (clients.proxy_refusal), else None."""
        return proxy_refusal(self.proxies, self.proxy_secret)


class FrontDoor:
    """ASGI middleware; `rules` is a callable so the mode is read once Streamlit's
    config is loaded (the first request), not at import."""

    def __init__(self, app: Callable[..., Awaitable[None]], rules: Callable[[], DoorRules]) -> None:
        self.app = app
        self._rules_factory = rules
        self._rules: DoorRules | None = None
        _state["door"] = True

    @property
    def rules(self) -> DoorRules:
        if self._rules is None:
            self._rules = self._rules_factory()
        return self._rules

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        rules, headers = self.rules, _headers(scope)
        path = _local_path(scope.get("path", "/"), rules.base)
        if await self._refused_past_the_proxy(scope, send, path):
            return
        scope = _without_header(scope, PROXY_SECRET_HEADER)  # the secret goes no further than the door
        if not rules.hosts.permits(headers.get("host")):
            await refuse(scope, send, 403, "This studio does not answer to that host name.")
        elif path in NEVER_SERVED:
            await refuse(scope, send, 404, "Not found.")
        elif _changes_state(scope) and not self._same_origin(scope, headers):
            await refuse(scope, send, 403, "Refused: this request comes from another web page (Origin).")
        elif not rules.access.shared or path in OPEN_PATHS:
            await self.app(scope, receive, send)
        elif rules.access.refuses_to_serve:
            await refuse(scope, send, 503, rules.access.refusal or "This studio serves nothing.")
        elif path == SIGNIN and scope["type"] == "http":
            await self._signin(scope, receive, send, headers)
        elif path == SIGNOUT and scope["type"] == "http":
            await self._signout(scope, send, headers)
        else:
            await self._signed_in_only(scope, receive, send, headers, path)

    async def _signed_in_only(
        self, scope: Scope, receive: Receive, send: Send, headers: dict[str, str], path: str
    ) -> None:
        base = self.rules.base
        grant = grant_in(headers.get("cookie"))
        if grant is not None and scope["type"] == "websocket":
            await _serve_watched(self.app, scope, receive, send, grant.nonce)
        elif grant is not None:
            await self.app(scope, receive, send)
        elif scope["type"] == "http" and scope.get("method") in ("GET", "HEAD") and _is_page(path):
            await redirect(send, f"{base}{SIGNIN}?next={quote(base + path, safe='/')}")
        else:
            await refuse(scope, send, 401, "Sign in first.")

    async def _refused_past_the_proxy(self, scope: Scope, send: Send, path: str) -> bool:
        """Refuse (and say True) a request that came past the trusted proxy: 403 without its
        secret, 503 when the studio has none to compare with. Health checks stay open."""
        if not self.rules.proxies or path in OPEN_PATHS or self._via_proxy(scope):
            return False
        why = self.rules.proxy_refusal()
        await refuse(scope, send, 503 if why else 403, why or "This studio answers only through its proxy.")
        return True

    def _via_proxy(self, scope: Scope) -> bool:
        """Whether the request carries the proxy's secret (required when proxies are trusted:
        a local process reaching the studio's port directly would otherwise pass for the proxy)."""
        if self.rules.proxy_refusal():
            return False
        sent = [v.decode("latin-1") for k, v in scope.get("headers", []) if k.lower() == PROXY_SECRET_HEADER.encode()]
        return from_the_proxy(sent, self.rules.proxy_secret)

    def _scheme(self, scope: Scope, headers: dict[str, str]) -> str:
        """http or https as the browser sees it: a trusted proxy's X-Forwarded-Proto, else the connection's."""
        forwarded = headers.get("x-forwarded-proto", "").strip().lower()
        peer = (scope.get("client") or ("", 0))[0]
        if forwarded in ("http", "https") and is_trusted_proxy(peer, self.rules.proxies):
            return forwarded
        return "https" if scope.get("scheme") in ("https", "wss") else "http"

    def _same_origin(self, scope: Scope, headers: dict[str, str]) -> bool:
        scheme, origin = self._scheme(scope, headers), headers.get("origin")
        return origin_permitted(origin, scheme, headers.get("host"), self.rules.given_names)

    def _client(self, scope: Scope) -> str:
        peer = (scope.get("client") or ("", 0))[0]
        forwarded = [v.decode("latin-1") for k, v in scope.get("headers", []) if k.lower() == b"x-forwarded-for"]
        return client_key(peer, forwarded, self.rules.proxies)

    async def _signout(self, scope: Scope, send: Send, headers: dict[str, str]) -> None:
        """On a POST (its Origin checked, as every state change's), revoke every valid sign-in this
        browser sent and close that sign-in's open WebSockets. A GET only shows the button: an
        `<img>` on another port of the same host sends one, cookie and all (SameSite ignores ports)."""
        if scope.get("method") != "POST":
            await page(send, 200, signout_page(self.rules.base))
            return
        now = time.time()
        for value in cookie_values(headers.get("cookie", ""), COOKIE_NAME):
            grant = SIGNER.revoke(value, now)
            if grant is not None:
                for event in _OPEN_SOCKETS.get(grant.nonce, set()):
                    event.set()
        secure, base = self._scheme(scope, headers) == "https", self.rules.base
        await redirect(send, base + SIGNIN, cookies=[set_cookie(COOKIE_NAME, "", secure, base, max_age=0)])

    def _form_cookie(self, scope: Scope, headers: dict[str, str]) -> list[str]:
        """A new form cookie for a browser without a valid one (none for one that has it)."""
        if form_id(headers.get("cookie")) is not None:
            return []
        secure = self._scheme(scope, headers) == "https"
        value = SIGNER.issue_form(time.time())
        return [set_cookie(FORM_COOKIE, value, secure, self.rules.base, max_age=int(FORM_HOURS * 3600))]

    async def _signin(self, scope: Scope, receive: Receive, send: Send, headers: dict[str, str]) -> None:
        base = self.rules.base
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        if scope.get("method") != "POST":
            await page(
                send,
                200,
                signin_page(base, _safe_next(query.get("next", [""])[0], base)),
                cookies=self._form_cookie(scope, headers),
            )
            return
        form = await _read_form(receive, headers)
        if form is None:
            await page(send, 413, signin_page(base, base + "/", "That form was too large."))
            return
        target = _safe_next(form.get("next", [""])[0], base)
        device, newcomer = known_device(headers.get("cookie")), form_id(headers.get("cookie"))
        typed, expected = form.get("password", [""])[0], self.rules.access.password
        attempt = try_password(self._client(scope), typed, expected, device, newcomer)
        if attempt.right:
            now, secure = time.time(), self._scheme(scope, headers) == "https"
            device_cookie = devices().issue(now, device)
            signin = set_cookie(COOKIE_NAME, SIGNER.issue(now, device_cookie.split(".", 1)[0]), secure, base)
            remember = set_cookie(DEVICE_COOKIE, device_cookie, secure, base, max_age=int(DEVICE_DAYS * 86400))
            await redirect(send, target, cookies=[signin, remember])
            return
        wait = attempt.wait_s
        if attempt.checked:  # 401: checked and wrong
            message = "Wrong password." + (f" The next try is possible in {wait:.0f} s." if wait > 0 else "")
        else:  # 429: too early, not checked
            message = f"Too many wrong passwords: the next try is possible in {wait:.0f} s."
        await page(send, 401 if attempt.checked else 429, signin_page(base, target, message), retry_after=wait)


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


def _without_header(scope: Scope, name: str) -> Scope:
    """`scope` less every header called `name` (lower case): what Streamlit and the pages see."""
    key = name.encode("latin-1")
    headers = scope.get("headers", [])
    if not any(k.lower() == key for k, _ in headers):
        return scope
    return {**scope, "headers": [(k, v) for k, v in headers if k.lower() != key]}


def _changes_state(scope: Scope) -> bool:
    """A WebSocket (the whole session runs over it) or a request other than GET/HEAD/OPTIONS."""
    return scope["type"] == "websocket" or scope.get("method", "GET") not in SAFE_METHODS


async def _serve_watched(
    app: Callable[..., Awaitable[None]], scope: Scope, receive: Receive, send: Send, nonce: str
) -> None:
    """Serve a signed-in WebSocket until it ends or its sign-in is revoked: then it is
    closed (REVOKED_CLOSE_CODE) and the app is told the client left."""
    revoked = asyncio.Event()
    _OPEN_SOCKETS.setdefault(nonce, set()).add(revoked)
    closed = False

    async def watched_receive() -> dict[str, Any]:
        nonlocal closed
        message = asyncio.ensure_future(receive())
        stop = asyncio.ensure_future(revoked.wait())
        done, _ = await asyncio.wait({message, stop}, return_when=asyncio.FIRST_COMPLETED)
        if message in done:
            stop.cancel()
            return message.result()
        message.cancel()
        if not closed:
            closed = True
            await send({"type": "websocket.close", "code": REVOKED_CLOSE_CODE})
        return {"type": "websocket.disconnect", "code": REVOKED_CLOSE_CODE}

    async def watched_send(message: dict[str, Any]) -> None:
        if not closed:
            await send(message)

    try:
        await app(scope, watched_receive, watched_send)
    finally:
        sockets = _OPEN_SOCKETS.get(nonce, set())
        sockets.discard(revoked)
        if not sockets:
            _OPEN_SOCKETS.pop(nonce, None)


def _local_path(path: str, base: str) -> str:
    if base and (path == base or path.startswith(base + "/")):
        return path[len(base) :] or "/"
    return path


def _is_page(path: str) -> bool:
    """A navigation a person makes (the studio's pages), not one of Streamlit's routes."""
    return not path.startswith(("/_stcore", "/static", "/component", "/media", "/app/static", "/_calm"))


def _safe_next(target: str, base: str) -> str:
    """Where to go after signing in: a path on this server only (no open redirect)."""
    if not target.startswith("/") or target.startswith("//") or "\\" in target or any(ord(c) < 32 for c in target):
        return base + "/"
    return target


async def _read_form(receive: Receive, headers: dict[str, str]) -> dict[str, list[str]] | None:
    """The posted form, or None when it is larger than MAX_FORM_BYTES (not read further)."""
    if int(headers.get("content-length", "0") or 0) > MAX_FORM_BYTES:
        return None
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if len(body) > MAX_FORM_BYTES:
            return None
        if not message.get("more_body"):
            break
    return parse_qs(body.decode("utf-8", "replace"))
