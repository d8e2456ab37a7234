"""The sign-in token of a shared studio: a signed, expiring cookie value.

    signer = Signer.fresh()                  # a random key per server process
    token = signer.issue(now)                # "<issued>.<nonce>.<mac>"
    signer.valid(token, now)                 # True for TOKEN_HOURS, then False

Why a token and not the password: the browser keeps the token in an HttpOnly cookie, so
the password is typed once, never stored, and every request (page, WebSocket, upload)
proves the sign-in cheaply. The key lives only in the server's memory: restarting the
studio signs everyone out, and nothing on disk can be stolen to forge a token.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass, field

TOKEN_HOURS = 12.0
COOKIE_NAME = "calm_studio_signin"


@dataclass(frozen=True)
class Signer:
    key: bytes = field(repr=False)
    lifetime_s: float = TOKEN_HOURS * 3600.0

    @classmethod
    def fresh(cls) -> Signer:
        return cls(key=secrets.token_bytes(32))

    def issue(self, now: float) -> str:
        body = f"{int(now)}.{secrets.token_hex(16)}"
        return f"{body}.{self._mac(body)}"

    def valid(self, token: str | None, now: float) -> bool:
        """Whether `token` was issued by this key, less than its lifetime ago (constant-time MAC check)."""
        if not token or len(token) > 200 or token.count(".") != 2:
            return False
        body, mac = token.rsplit(".", 1)
        if not hmac.compare_digest(mac.encode("ascii", "replace"), self._mac(body).encode("ascii")):
            return False
        issued = body.split(".", 1)[0]
        return issued.isdigit() and 0 <= now - int(issued) < self.lifetime_s

    def _mac(self, body: str) -> str:
        return hmac.new(self.key, body.encode("utf-8"), hashlib.sha256).hexdigest()
