"""The front door's rules, without a server: Host names (calm_core/access/hosts.py),
guessing limits (guesses.py), sign-in tokens (tokens.py), the short-password refusal
(access.py) and the ASGI layer itself (app/server/front.py) over a stand-in app.
The running server is probed in tests/test_attacks.py."""

from __future__ import annotations

import asyncio
from urllib.parse import urlencode

import pytest

from app.server import door_keys, front
from calm_core.access import rules as access
from calm_core.access.guesses import GuessLimiter, fastest_guesses, guesses_within
from calm_core.access.hosts import allowed_hosts, host_name
from calm_core.access.tokens import COOKIE_NAME, Signer

PASSWORD = "tiger lily 4 ever"


@pytest.mark.parametrize(
    ("header", "name"),
    [("127.0.0.1:8501", "127.0.0.1"), ("[::1]:8501", "::1"), ("Example.ORG.:80", "example.org"), ("", ""),
     ("localhost", "localhost"), ("[::1", "")],
)
def test_host_name_drops_port_brackets_case_and_final_dot(header: str, name: str) -> None:
    assert host_name(header) == name


def test_local_mode_answers_loopback_names_only() -> None:
    rule = allowed_hosts({}, shared=False)
    for ok in ("127.0.0.1:8501", "localhost:8501", "[::1]:8501", "127.8.9.1", "app.localhost"):
        assert rule.permits(ok), ok
    for bad in ("evil.example:8501", "10.0.0.5:8501", "localhost.evil.example", "", None, "evillocalhost"):
        assert not rule.permits(bad), bad


def test_shared_mode_adds_ip_literals_and_the_given_names() -> None:
    rule = allowed_hosts({"CALM_STUDIO_HOSTS": "studio.example.org, *.lab.example"}, shared=True)
    for ok in ("10.0.0.5:8501", "[2001:db8::1]:8501", "studio.example.org", "gpu1.lab.example:443"):
        assert rule.permits(ok), ok
    for bad in ("evil.example", "lab.example.evil", "example.org"):
        assert not rule.permits(bad), bad


def test_the_limiter_gives_free_tries_then_doubles_then_locks_out() -> None:
    limiter = GuessLimiter(server_burst=10_000)
    for i in range(5):
        assert limiter.wait_before("a", float(i)) == 0.0
        limiter.record("a", ok=False, now=float(i))
    assert limiter.wait_before("a", 4.0) == pytest.approx(1.0)
    assert limiter.wait_before("b", 4.0) == 0.0  # another address is not held back by "a"
    limiter.record("a", ok=False, now=5.0)
    assert limiter.wait_before("a", 5.0) == pytest.approx(2.0)
    now = 5.0
    while len(limiter._addresses["a"].failures) < limiter.lockout_after:
        now += limiter.wait_before("a", now)
        limiter.record("a", ok=False, now=now)
    assert limiter.wait_before("a", now) == pytest.approx(limiter.window_s, abs=now + 1)  # locked out for the window
    limiter.record("a", ok=True, now=now)
    assert limiter.wait_before("a", now) == 0.0  # a right password clears the address


def test_the_server_bucket_holds_many_addresses_to_its_rate() -> None:
    limiter = GuessLimiter()
    allowed = guesses_within(limiter, addresses=500, seconds=3600.0)
    assert allowed == limiter.server_burst + int(limiter.server_per_hour)
    assert fastest_guesses(GuessLimiter(), 1, 60) > fastest_guesses(GuessLimiter(), 50, 60) >= 1800


def test_a_token_is_valid_for_its_lifetime_only_and_only_with_its_key() -> None:
    signer, other = Signer.fresh(), Signer.fresh()
    token = signer.issue(1000.0)
    assert signer.valid(token, 1000.0) and signer.valid(token, 1000.0 + signer.lifetime_s - 1)
    assert not signer.valid(token, 1000.0 + signer.lifetime_s)
    assert not other.valid(token, 1000.0)
    nonce, device, issued, mac = token.split(".")
    later = signer.issue(1999.0).split(".")[2]
    assert not signer.valid(f"{nonce}.{device}.{later}.{mac}", 1999.0)  # a forged issue time
    assert not signer.valid(token, 999.0)  # issued in the future
    for junk in (None, "", "a.b", "x" * 500, "1.2.3.4", "1.2.3.4.5"):
        assert not signer.valid(junk, 1000.0)


def test_a_short_password_is_refused_unless_the_classroom_override_is_set() -> None:
    short = access.access_from({"CALM_STUDIO_SHARED": "1", "CALM_STUDIO_PASSWORD": "a"}, "0.0.0.0")
    assert short.refuses_to_serve and "shorter than 12" in (short.refusal or "")
    classroom = access.access_from(
        {"CALM_STUDIO_SHARED": "1", "CALM_STUDIO_PASSWORD": "a", access.SHORT_PASSWORD_ENV: "1"}, "0.0.0.0"
    )
    assert not classroom.refuses_to_serve
    assert access.access_from({"CALM_STUDIO_PASSWORD": "a"}, "127.0.0.1").refusal is None  # local: no gate at all


# The ASGI layer over a stand-in app that records what reached it.


class _Inner:
    def __init__(self) -> None:
        self.reached: list[str] = []

    async def __call__(self, scope, receive, send) -> None:
        self.reached.append(scope["path"])
        if scope["type"] == "websocket":
            await send({"type": "websocket.accept"})
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"inner"})


def _door(shared: bool, password: str | None = PASSWORD) -> tuple[front.FrontDoor, _Inner]:
    inner = _Inner()
    rules = front.DoorRules(
        access=access.Access(shared=shared, password=password), hosts=allowed_hosts({}, shared=shared)
    )
    return front.FrontDoor(inner, rules=lambda: rules), inner


def _call(door, path: str, *, kind: str = "http", method: str = "GET", host: str = "127.0.0.1:8501",
          cookie: str | None = None, body: bytes = b"", query: str = "", client: str = "198.51.100.1"):
    headers = [(b"host", host.encode())] + ([(b"cookie", cookie.encode())] if cookie else [])
    scope = {"type": kind, "path": path, "method": method, "headers": headers, "query_string": query.encode(),
             "client": (client, 5000), "scheme": "http"}
    sent: list[dict] = []
    bodies = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive():
        return bodies.pop(0) if bodies else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    asyncio.run(door(scope, receive, send))
    start = next(m for m in sent if m["type"] in ("http.response.start", "websocket.close", "websocket.accept"))
    status = start.get("status", {"websocket.close": 403, "websocket.accept": 101}.get(start["type"]))
    headers: dict[str, str] = {}
    for key, value in start.get("headers", []):  # a repeated header (Set-Cookie) joined by new lines
        headers[key.decode()] = "\n".join(filter(None, (headers.get(key.decode()), value.decode())))
    text = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, headers, text


def test_the_local_door_checks_the_host_and_nothing_else() -> None:
    door, inner = _door(shared=False, password=None)
    assert _call(door, "/")[0] == 200
    assert _call(door, "/_stcore/stream", kind="websocket")[0] == 101
    assert _call(door, "/_stcore/stream", kind="websocket", host="evil.example:8501")[0] == 403
    assert _call(door, "/", host="evil.example")[0] == 403
    assert _call(door, "/_stcore/metrics")[0] == 404
    assert inner.reached == ["/", "/_stcore/stream"]


def test_the_shared_door_lets_nothing_through_before_the_password() -> None:
    door_keys.LIMITER._addresses.clear()
    door, inner = _door(shared=True)
    status, headers, _ = _call(door, "/train")
    assert status == 303 and headers["location"] == "/_calm/signin?next=/train"
    assert _call(door, "/_stcore/stream", kind="websocket")[0] == 403
    assert _call(door, "/_stcore/upload_file/s/f", method="PUT", body=b"x" * 100)[0] == 401
    assert _call(door, "/static/js/main.js")[0] == 401
    assert _call(door, "/_stcore/health")[0] == 200  # open: it only says "ok"
    assert inner.reached == ["/_stcore/health"]

    form = urlencode({"password": PASSWORD, "next": "/train"}).encode()
    status, headers, _ = _call(door, "/_calm/signin", method="POST", body=form)
    assert status == 303 and headers["location"] == "/train"
    cookie = headers["set-cookie"].split(";", 1)[0]
    assert cookie.startswith(COOKIE_NAME + "=") and "HttpOnly" in headers["set-cookie"]
    assert "samesite=strict" in headers["set-cookie"].lower()
    assert _call(door, "/_stcore/stream", kind="websocket", cookie=cookie)[0] == 101
    assert _call(door, "/train", cookie=cookie)[0] == 200
    assert _call(door, "/train", cookie=f"{COOKIE_NAME}=1.2.3")[0] == 303


def test_the_sign_in_form_escapes_and_keeps_redirects_on_this_server() -> None:
    door_keys.LIMITER._addresses.clear()
    door, _ = _door(shared=True)
    _, _, page = _call(door, "/_calm/signin", query="next=/train%22%3E%3Cscript%3E")
    assert b"<script>" not in page and b"&quot;&gt;&lt;script&gt;" in page
    for target in ("https://evil.example/", "//evil.example/", "/\\evil.example"):
        form = urlencode({"password": PASSWORD, "next": target}).encode()
        assert _call(door, "/_calm/signin", method="POST", body=form, client="192.0.2.9")[1]["location"] == "/"
    too_big = urlencode({"password": "x" * (front.MAX_FORM_BYTES + 10)}).encode()
    assert _call(door, "/_calm/signin", method="POST", body=too_big)[0] == 413


def test_wrong_passwords_from_one_address_are_refused_unchecked_after_the_free_tries() -> None:
    door_keys.LIMITER._addresses.clear()
    door, _ = _door(shared=True)
    wrong = urlencode({"password": "guess", "next": "/"}).encode()
    statuses = [_call(door, "/_calm/signin", method="POST", body=wrong, client="203.0.113.5")[0] for _ in range(7)]
    assert statuses[:5] == [401] * 5 and statuses[5:] == [429, 429]
    right = urlencode({"password": PASSWORD, "next": "/"}).encode()
    status, headers, _ = _call(door, "/_calm/signin", method="POST", body=right, client="203.0.113.5")
    assert status == 429 and int(headers["retry-after"]) >= 1  # held back: not even checked
    assert _call(door, "/_calm/signin", method="POST", body=right, client="203.0.113.6")[0] == 303


def test_ten_thousand_addresses_leave_the_table_bounded() -> None:
    """Asking creates no entry; failures from 10,000 addresses keep at most max_tracked."""
    limiter = GuessLimiter(server_burst=10**9, max_tracked=1000)
    for i in range(10_000):
        assert limiter.wait_before(f"10.0.{i // 256}.{i % 256}", float(i)) == 0.0
    assert limiter.tracked() == 0
    for i in range(10_000):
        limiter.record(f"10.0.{i // 256}.{i % 256}", ok=False, now=float(i))
    assert limiter.tracked() <= 1000
    assert limiter.wait_before("10.0.39.15", 9999.0) == 0.0  # the newest are kept, with their count
    assert len(limiter._addresses["10.0.39.15"].failures) == 1
    limiter.record("old", ok=False, now=0.0)
    limiter.wait_before("old", limiter.window_s + 1)
    assert "old" not in limiter._addresses  # aged out on the next look


def test_a_known_device_is_not_held_back_by_its_address_or_the_server() -> None:
    limiter = GuessLimiter(server_burst=3)
    for i in range(12):
        limiter.record("203.0.113.5", ok=False, now=float(i))
    assert limiter.wait_before("203.0.113.5", 12.0) > 0 and limiter.wait_before("other", 12.0) > 0
    assert limiter.wait_before("device:abc", 12.0, known_device=True) == 0.0
    for _ in range(5):  # the device's own failures still count against it
        limiter.record("device:abc", ok=False, now=12.0, known_device=True)
    assert limiter.wait_before("device:abc", 12.0, known_device=True) > 0


@pytest.mark.parametrize(
    "header", ["localhost:80@evil.example", "localhost\t", "local host", "localhost:abc", "localhost:", "[::1]x",
               "x" * 300, "localhost\x00", "::1"],
)
def test_the_host_parser_refuses_userinfo_whitespace_and_junk(header: str) -> None:
    assert host_name(header) == ""
    assert not allowed_hosts({}, shared=True).permits(header)


def test_client_keys_ignore_forwarded_headers_unless_the_peer_is_a_trusted_proxy() -> None:
    from calm_core.access.clients import client_key, trusted_proxies

    none, local = trusted_proxies({}), trusted_proxies({"CALM_TRUSTED_PROXIES": "127.0.0.1, bogus, 10.0.0.0/8"})
    assert len(local) == 2  # the typo is skipped, not trusted
    assert client_key("127.0.0.1", ["198.51.100.4"], none) == "127.0.0.1"
    assert client_key("127.0.0.1", ["198.51.100.4"], local) == "198.51.100.4"
    # read from the right: the client's own claims to the left of the first untrusted hop are never read
    assert client_key("127.0.0.1", ["6.6.6.6, 198.51.100.4, 10.1.2.3"], local) == "198.51.100.4"
    assert client_key("127.0.0.1", ["not-an-ip"], local) == "127.0.0.1"
    assert client_key("127.0.0.1", ["x" * 5000], local) == "127.0.0.1"
    assert client_key("2001:db8::1", [], none) == client_key("2001:db8::ffff", [], none) == "2001:db8::/64"
    assert client_key("::ffff:192.0.2.1", [], none) == "192.0.2.1"
    assert client_key("garbage", [], none) == "unknown"


@pytest.mark.parametrize(
    ("origin", "scheme", "host", "ok"),
    [
        (None, "http", "127.0.0.1:8501", True),
        ("http://127.0.0.1:8501", "http", "127.0.0.1:8501", True),
        ("http://127.0.0.1:9999", "http", "127.0.0.1:8501", False),
        ("http://localhost:8501", "http", "127.0.0.1:8501", False),
        ("null", "http", "127.0.0.1:8501", False),
        ("https://127.0.0.1:8501", "http", "127.0.0.1:8501", False),
        ("http://localhost", "http", "localhost:80", True),
        ("https://studio.example.org", "wss", "studio.example.org", True),
        ("https://studio.example.org:8443", "https", "studio.example.org", True),
        ("https://evil.example:8443", "https", "evil.example", False),
        ("http://a@127.0.0.1:8501", "http", "127.0.0.1:8501", False),
    ],
)
def test_origins_must_be_the_studios_own(origin, scheme, host, ok) -> None:
    from calm_core.access.hosts import origin_permitted

    assert origin_permitted(origin, scheme, host, ("studio.example.org",)) is ok


def test_sign_out_revokes_every_copy_of_the_token() -> None:
    signer = Signer.fresh()
    token = signer.issue(1000.0, device="d1")
    grant = signer.grant(token, 1000.0)
    assert grant is not None and grant.device == "d1"
    assert signer.revoke(token, 1001.0) == grant
    assert not signer.valid(token, 1002.0)
    assert signer.valid(signer.issue(1003.0), 1003.0)  # a new sign-in is not affected
    assert signer.revoke("junk", 1004.0) is None


def test_a_device_cookie_names_a_device_only_with_its_key(tmp_path) -> None:
    from calm_core.access.tokens import DeviceSigner

    devices = DeviceSigner.at(tmp_path)
    cookie = devices.issue(1000.0)
    device = devices.device(cookie, 1000.0)
    assert device and DeviceSigner.at(tmp_path).device(cookie, 1000.0) == device  # the key outlives a restart
    assert (tmp_path / ".studio-device-key").stat().st_mode & 0o077 == 0
    assert DeviceSigner.at(tmp_path / "other").device(cookie, 1000.0) is None
    assert devices.device(cookie, 1000.0 + devices.lifetime_s) is None
    assert devices.device("abc.1.def", 1000.0) is None
