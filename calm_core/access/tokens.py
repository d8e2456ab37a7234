"""The shared studio's two cookies: a sign-in that sign-out revokes, and a browser it remembers.

    signer = Signer.fresh()                        # a random key per server process
    token = signer.issue(now, device="d1f3...")    # "<nonce>.<device>.<issued>.<mac>" (itsdangerous)
    signer.grant(token, now)                       # Grant(issued, nonce, device), or None
    signer.revoke(token, now)                      # sign-out: the same token is refused from now on

    devices = DeviceSigner.at(workspace_dir())     # a key kept on disk (0600)
    cookie = devices.issue(now)                    # "<device id>.<issued>.<mac>", valid DEVICE_DAYS
    devices.device(cookie, now)                    # the id, or None

Both are signed and dated by itsdangerous's TimestampSigner (HMAC-SHA1 over a key
derived per purpose, constant-time checks), each with its own salt, so a device cookie
can never pass for a sign-in.

Why a token and not the password: the browser keeps the token in an HttpOnly cookie, so
the password is typed once, never stored, and every request (page, WebSocket, upload)
proves the sign-in cheaply. Its key lives only in the server's memory: restarting the
studio signs everyone out, and nothing on disk can be stolen to forge a sign-in.

Why sign-out keeps a list: a signed token is valid until it expires, so a sign-out that
only deletes the cookie leaves a copy (read by another service on the host, say) working
for the rest of its 12 hours. Revoked nonces are kept until their token would have
expired anyway, and at most MAX_REVOKED of them (a sign-out needs a valid sign-in, so
only a signed-in user can add one).

Why a device cookie: a browser that has signed in before gets a long-lived cookie with a
random id, as GitHub and Google do. Its password tries are counted against that browser
only (access/guesses.py), so no attacker can lock the rightful user out by failing
under their address or emptying the server's bucket. It grants nothing by itself: it is
not a sign-in, and forging one would only move a guesser's tries onto a counter of
their own. Its key is kept on disk so the browser stays known across restarts of the
studio; the sign-in token carries the device id, which the run quota counts per browser.
"""

from __future__ import annotations

import math
import os
import secrets
import threading
from dataclasses import dataclass, field
from pathlib import Path

from itsdangerous import BadSignature, TimestampSigner
from itsdangerous.encoding import base64_decode

TOKEN_HOURS = 12.0
DEVICE_DAYS = 180.0
COOKIE_NAME = "calm_studio_signin"
DEVICE_COOKIE = "calm_studio_device"
FORM_COOKIE = "calm_studio_form"  # issued with the sign-in form: a browser new to the studio, as one
FORM_HOURS = 1.0
SECURE_PREFIX = "__Host-"  # a Secure cookie bound to this host and path /: no subdomain can set it
MAX_REVOKED = 100_000
MAX_TOKEN_CHARS = 200
DEVICE_KEY_FILE = ".studio-device-key"
SIGNIN_SALT, DEVICE_SALT, FORM_SALT = "calm-studio-signin", "calm-studio-device", "calm-studio-form"


def cookie_name(base: str, secure: bool) -> str:
    """`__Host-<base>` over HTTPS (the browser then refuses it from any other host or path), else `<base>`."""
    return SECURE_PREFIX + base if secure else base


def _signer(key: bytes, salt: str, now: float) -> TimestampSigner:
    """itsdangerous's signer for `salt`, whose clock reads `now` (the caller's clock, so the
    limits can be tested on a clock of their own)."""

    class _At(TimestampSigner):
        def get_timestamp(self) -> int:
            return int(now)

    return _At(key, salt=salt, sep=".")


def _unsigned(key: bytes, salt: str, token: str | None, now: float, lifetime_s: float) -> list[str] | None:
    """The dotted fields of a token this key signed for `salt` less than `lifetime_s` ago, else None."""
    if not token or len(token) > MAX_TOKEN_CHARS:
        return None
    try:
        # whole seconds: age < lifetime; ages are integers, so flooring the bound keeps its meaning
        value = _signer(key, salt, now).unsign(token, max_age=math.floor(lifetime_s - 1))
    except BadSignature:  # a wrong MAC, a damaged token, an expired or future one
        return None
    return value.decode("ascii", "replace").split(".")


@dataclass(frozen=True)
class Grant:
    """What a valid sign-in token says: when it was issued, its nonce, and the browser's device id."""

    issued: int
    nonce: str
    device: str


@dataclass
class Signer:
    key: bytes = field(repr=False)
    lifetime_s: float = TOKEN_HOURS * 3600.0
    _revoked: dict[str, float] = field(default_factory=dict, repr=False)  # nonce -> when it expires anyway
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def fresh(cls) -> Signer:
        return cls(key=secrets.token_bytes(32))

    def issue(self, now: float, device: str = "") -> str:
        return _signer(self.key, SIGNIN_SALT, now).sign(f"{secrets.token_hex(16)}.{device}").decode("ascii")

    def grant(self, token: str | None, now: float) -> Grant | None:
        """The token's grant when this key issued it less than its lifetime ago and it was not revoked."""
        fields = _unsigned(self.key, SIGNIN_SALT, token, now, self.lifetime_s)
        if fields is None or len(fields) != 2:
            return None
        nonce, device = fields
        with self._lock:
            if nonce in self._revoked:
                return None
        issued = int.from_bytes(base64_decode(token.rsplit(".", 2)[1]), "big") if token else 0
        return Grant(issued, nonce, device)

    def valid(self, token: str | None, now: float) -> bool:
        return self.grant(token, now) is not None

    def issue_form(self, now: float) -> str:
        """The form cookie: a random id, signed, so a browser that has never signed in is told
        apart from a flood of bare POSTs (guesses.GuessLimiter.newcomer_wait)."""
        return _signer(self.key, FORM_SALT, now).sign(secrets.token_hex(16)).decode("ascii")

    def form(self, token: str | None, now: float) -> str | None:
        """The id of a form cookie this key issued less than FORM_HOURS ago, else None."""
        fields = _unsigned(self.key, FORM_SALT, token, now, FORM_HOURS * 3600.0)
        return fields[0] if fields is not None and len(fields) == 1 and fields[0].isalnum() else None

    def revoke(self, token: str | None, now: float) -> Grant | None:
        """Refuse this token from now on; returns its grant (None: it was not valid anyway)."""
        grant = self.grant(token, now)
        if grant is None:
            return None
        with self._lock:
            self._revoked = {n: t for n, t in self._revoked.items() if t > now}
            if len(self._revoked) >= MAX_REVOKED:  # only signed-in users add entries: drop the soonest to expire
                for nonce in sorted(self._revoked, key=self._revoked.__getitem__)[: len(self._revoked) // 10]:
                    del self._revoked[nonce]
            self._revoked[grant.nonce] = grant.issued + self.lifetime_s
        return grant


@dataclass(frozen=True)
class DeviceSigner:
    key: bytes = field(repr=False)
    lifetime_s: float = DEVICE_DAYS * 86400.0

    @classmethod
    def at(cls, folder: Path) -> DeviceSigner:
        """The signer whose key is kept in `folder` (created 0600 on first use), or an
        in-memory one when the folder cannot be written (devices are then forgotten on restart)."""
        path = folder / DEVICE_KEY_FILE
        try:
            key = path.read_bytes()
            if len(key) == 32:
                return cls(key=key)
        except OSError:
            pass
        key = secrets.token_bytes(32)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(key)
        except OSError:
            pass
        return cls(key=key)

    def issue(self, now: float, device: str | None = None) -> str:
        return _signer(self.key, DEVICE_SALT, now).sign(device or secrets.token_hex(16)).decode("ascii")

    def device(self, cookie: str | None, now: float) -> str | None:
        """The device id of a cookie this key issued less than its lifetime ago, else None."""
        fields = _unsigned(self.key, DEVICE_SALT, cookie, now, self.lifetime_s)
        if fields is None or len(fields) != 1 or not fields[0].isalnum():
            return None
        return fields[0]
