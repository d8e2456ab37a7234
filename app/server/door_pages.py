"""What the front door (app/server/front.py) answers itself: the sign-in and sign-out pages,
its redirects and refusals, and the cookies it sets.

Every page is plain HTML, nothing of Streamlit's, every text in it escaped; every answer
carries `Cache-Control: no-store` and `X-Frame-Options: DENY`.
"""

from __future__ import annotations

import html
from typing import Any, Awaitable, Callable

from starlette.responses import Response

from calm_core.access.tokens import cookie_name

Scope = dict[str, Any]
Send = Callable[[dict[str, Any]], Awaitable[None]]

SIGNIN = "/_calm/signin"
SIGNOUT = "/_calm/signout"


def set_cookie(base_name: str, value: str, secure: bool, base: str, max_age: int | None = None) -> str:
    """A Set-Cookie value, built by starlette: HttpOnly, SameSite=Strict; over HTTPS Secure
    and `__Host-`-named (so Path=/: the browser refuses a `__Host-` cookie with any other path)."""
    response = Response()
    response.set_cookie(
        cookie_name(base_name, secure),
        value,
        max_age=max_age,
        path="/" if secure else (base or "/"),
        secure=secure,
        httponly=True,
        samesite="strict",
    )
    return next(v.decode("latin-1") for k, v in response.raw_headers if k == b"set-cookie")


async def refuse(scope: Scope, send: Send, status: int, text: str) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008})  # before accept: the server answers 403
        return
    await respond(send, status, text.encode("utf-8"), "text/plain; charset=utf-8")


async def redirect(send: Send, location: str, cookies: list[str] | None = None) -> None:
    extra = [(b"location", location.encode("latin-1", "replace"))]
    extra += [(b"set-cookie", cookie.encode("latin-1")) for cookie in cookies or []]
    await respond(send, 303, b"", "text/plain", extra)


async def page(send: Send, status: int, body: str, retry_after: float = 0.0, cookies: list[str] | None = None) -> None:
    extra = [(b"retry-after", str(int(retry_after) + 1).encode())] if retry_after > 0 else []
    extra += [(b"set-cookie", cookie.encode("latin-1")) for cookie in cookies or []]
    await respond(send, status, body.encode("utf-8"), "text/html; charset=utf-8", extra)


async def respond(
    send: Send, status: int, body: bytes, content_type: str, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    headers = [
        (b"content-type", content_type.encode()),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
        (b"x-frame-options", b"DENY"),
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def signout_page(base: str) -> str:
    """What a GET of the sign-out address shows: a button that POSTs (sign-out changes state,
    so it takes the Origin check every state change takes)."""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>CALM Studio: sign out</title></head>
<body style="font-family:sans-serif;max-width:26rem;margin:5rem auto"><h1>CALM Studio</h1>
<form method="post" action="{html.escape(base + SIGNOUT)}"><button type="submit">Sign out</button></form>
</body></html>"""


def signin_page(base: str, target: str, message: str = "") -> str:
    """The sign-in page: plain HTML, nothing of Streamlit's, every text escaped."""
    note = f'<p class="error" role="alert">{html.escape(message)}</p>' if message else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>CALM Studio: sign in</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{{font-family:sans-serif;color:#1f2a44;max-width:26rem;margin:5rem auto;padding:0 1rem}}
input{{font-size:1rem;padding:.5rem;width:100%;box-sizing:border-box;margin:.4rem 0 1rem}}
button{{font-size:1rem;padding:.5rem 1.2rem;background:#d64541;color:#fff;border:0;border-radius:.3rem}}
.error{{color:#b3261e}} .note{{color:#5b6478;font-size:.9rem}}</style></head>
<body><h1>CALM Studio</h1>{note}
<form method="post" action="{html.escape(base + SIGNIN)}">
<label for="password">Password</label>
<input id="password" name="password" type="password" autocomplete="current-password" autofocus required>
<input type="hidden" name="next" value="{html.escape(target)}">
<button type="submit">Sign in</button></form>
<p class="note">This studio is shared: ask whoever started it for the password. Wrong tries slow down
further tries from your address and from everyone.</p></body></html>"""
