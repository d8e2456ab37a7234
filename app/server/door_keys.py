"""Who has signed in to the front door (app/server/front.py), and whether a password try counts.

One signing key and one guess limiter per server process, shared by the door and the in-app
gate (app/server/gate.py): the sign-in cookie (calm_core/access/tokens.py), the form cookie of a
browser that fetched the sign-in page, the device cookie of a browser that signed in before,
and the limits on password tries per address, per browser and per server
(calm_core/access/guesses.py).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from calm_core.access.guesses import GuessLimiter
from calm_core.access.rules import check_password
from calm_core.access.tokens import (
    COOKIE_NAME,
    DEVICE_COOKIE,
    FORM_COOKIE,
    DeviceSigner,
    Grant,
    Signer,
    cookie_name,
)
from calm_core.paths import workspace_dir

SIGNER = Signer.fresh()
LIMITER = GuessLimiter()
_LIMITER_LOCK = threading.Lock()
_DEVICES: list[DeviceSigner] = []


def devices() -> DeviceSigner:
    """The device cookie's signer, its key under the workspace (read once per process)."""
    if not _DEVICES:
        _DEVICES.append(DeviceSigner.at(workspace_dir()))
    return _DEVICES[0]


def signed_in(token: str | None) -> bool:
    """Whether a cookie value is a valid sign-in of this server (the in-app gate asks)."""
    return SIGNER.valid(token, time.time())


def grant_in(cookie_header: str | None) -> Grant | None:
    """The first valid sign-in among every sign-in cookie a `Cookie` header carries: a bogus
    cookie of the same name set before the real one does not hide it."""
    now = time.time()
    for value in cookie_values(cookie_header or "", COOKIE_NAME):
        grant = SIGNER.grant(value, now)
        if grant is not None:
            return grant
    return None


def form_id(cookie_header: str | None) -> str | None:
    """The id of a form cookie this server issued (a browser that fetched the sign-in form)."""
    now = time.time()
    for value in cookie_values(cookie_header or "", FORM_COOKIE):
        found = SIGNER.form(value, now)
        if found is not None:
            return found
    return None


def known_device(cookie_header: str | None) -> str | None:
    """The id of a device cookie this server issued (a browser that has signed in before)."""
    now = time.time()
    for value in cookie_values(cookie_header or "", DEVICE_COOKIE):
        device = devices().device(value, now)
        if device is not None:
            return device
    return None


@dataclass(frozen=True)
class Try:
    """One password try: whether it was checked at all, whether it was right, and how long
    the next try from the same address must wait."""

    checked: bool
    right: bool
    wait_s: float


def try_password(
    address: str, typed: str, expected: str | None, device: str | None = None, form: str | None = None
) -> Try:
    """A try arriving before its address (or known browser) or the server may try again is
    not checked at all, so parallel guesses gain nothing. A known browser's tries count
    against that browser alone; the first try of a browser new to the studio (`form`: its
    form cookie's id) against the newcomers' allowance, not the flood's (guesses.GuessLimiter)."""
    key, known = (f"device:{device}", True) if device else (address, False)
    with _LIMITER_LOCK:
        now = time.monotonic()
        if form and not device and LIMITER.newcomer_wait(f"form:{form}", address, now) == 0.0:
            right = check_password(typed, expected)
            LIMITER.record_newcomer(f"form:{form}", address, right, now)
            return Try(checked=True, right=right, wait_s=0.0 if right else LIMITER.wait_before(address, now))
        wait = LIMITER.wait_before(key, now, known_device=known)
        if wait > 0:
            return Try(checked=False, right=False, wait_s=wait)
        right = check_password(typed, expected)
        LIMITER.record(key, right, now, known_device=known)
        return Try(checked=True, right=right, wait_s=0.0 if right else LIMITER.wait_before(key, now, known))


def cookie_values(cookie_header: str, base_name: str) -> list[str]:
    """Every value the header carries for `base_name` or its `__Host-` form, in order."""
    names = (base_name, cookie_name(base_name, secure=True))
    found = []
    for part in cookie_header.split(";"):
        name, _, value = part.strip().partition("=")
        if name in names:
            found.append(value)
    return found
