"""Is a shared studio still usable for its rightful user while someone hammers the sign-in?

    PYTHONPATH=$PWD .venv/bin/python bench/door_under_attack.py [--tries 5] [--rate 20] \
        [--flood-mb 64] [--json bench/results/door_under_attack.json]

One shared studio (`streamlit run app/main.py`, as tests/test_attacks.py starts it). The
rightful user signs in once, so their browser holds the device cookie. Then, `--tries`
times each, side by side in one run (the machine is noisy): without an attack, and while
an attacker thread sends wrong passwords from the user's own address at `--rate` a
second (bounded in count and time, loopback only). Each try measures the rightful
browser's sign-in (POST with its device cookie, until the redirect) and its first page
(the WebSocket handshake and one script run of the Monitor page, until it finishes).
Then a browser that has never signed in (no device cookie: it fetches the sign-in form,
which gives it a form cookie, and posts the password) visits `--tries` times while the
attacker sends the same rate from other addresses. Then the rightful browser's visits
while an upload flood runs: a second browser, signed in with the password from its own
address before any attack, PUTs `--flood-mb` files to fresh ids of its one session without
a rerun, and between them uploads a CSV of one valid row and 500,000 bad lines through the
Data page (a parse each time). The server's peak resident memory during the flood is
recorded. The studio runs as the proxy recipe runs it (CALM_TRUSTED_PROXIES,
CALM_PROXY_SECRET), so each request names its address. Prints a table (median and worst,
milliseconds) and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.attack_client import StudioSession, put_file, put_upload, request, rss_bytes, sign_in_as  # noqa: E402
from tests.test_attacks import PASSWORD, _start, _stop  # noqa: E402

DEVICE_COOKIE, SIGNIN_COOKIE = "calm_studio_device", "calm_studio_signin"
MAX_ATTACK_S = 600.0  # the attacker stops by itself after this, whatever happens
PUT_TIMEOUT_S = 180.0  # a 64 MB multipart PUT can take minutes to be read on a busy 2-core machine
SECRET = "bench-proxy-secret-0123456789"
USER = {"X-Forwarded-For": "203.0.113.5", "X-Calm-Proxy-Secret": SECRET}  # the rightful user's address
NEW_USER = {**USER, "X-Forwarded-For": "203.0.113.9"}  # the new browser's: not the one attacked before
FLOODER = {**USER, "X-Forwarded-For": "203.0.113.77"}  # the upload flood's browser


def elsewhere(i: int) -> dict[str, str]:
    """The headers of the attacker's `i`-th try from addresses other than the user's."""
    return {"X-Forwarded-For": f"198.51.{i // 250}.{i % 250}", "X-Calm-Proxy-Secret": SECRET}


def rightful_visit(port: int, device: str | None) -> tuple[float, float, int]:
    """(sign-in ms, first page ms, sign-in status) for the browser holding `device`; with
    None, a browser new to the studio: it fetches the form (its form cookie) first."""
    started = time.perf_counter()
    cookie, user = f"{DEVICE_COOKIE}={device}", USER
    if device is None:
        user = NEW_USER
        cookie = request(port, "GET", "/_calm/signin", headers=user)[1]["set-cookie"].split(";", 1)[0]
    status, cookies = sign_in_as(port, PASSWORD, {**user, "Cookie": cookie})
    signed = time.perf_counter()
    if status != 303:
        return (signed - started) * 1000, float("nan"), status
    with StudioSession(port, f"{SIGNIN_COOKIE}={cookies[SIGNIN_COOKIE]}", headers=user) as session:
        session.rerun("monitor")
    return (signed - started) * 1000, (time.perf_counter() - signed) * 1000, status


def attack(port: int, rate: float, stop: threading.Event, sent: list[int], spread: bool = False) -> None:
    """Wrong passwords at `rate` a second until `stop` (or MAX_ATTACK_S), from the user's own
    address, or with `spread` from others."""
    deadline = time.monotonic() + MAX_ATTACK_S
    while not stop.is_set() and time.monotonic() < deadline:
        sign_in_as(port, "a wrong guess", elsewhere(len(sent)) if spread else USER)
        sent.append(1)
        stop.wait(1.0 / rate)


def visits_under_attack(
    port: int, args: argparse.Namespace, device: str | None, spread: bool
) -> list[tuple[float, float, int]]:
    """`args.tries` visits of the browser holding `device` (None: a new one) during an attack."""
    stop, sent = threading.Event(), []
    attacker = threading.Thread(target=attack, args=(port, args.rate, stop, sent, spread), daemon=True)
    attacker.start()
    time.sleep(3.0)  # the attacker has spent the free tries and the server's bucket of 30
    visits = [rightful_visit(port, device) for _ in range(args.tries)]
    stop.set()
    attacker.join(timeout=10)
    return visits


def upload_flood(port: int, cookie: str, flood_mb: int, stop: threading.Event, sent: list[int]) -> None:
    """A signed-in browser's session: a `flood_mb` PUT to a fresh id, then a junk CSV
    uploaded and read by the Data page, over and over until `stop` (or MAX_ATTACK_S).
    Each round appends to `sent` 1 when all of it went through, else 0 (a PUT refused or
    cut off)."""
    import uuid

    blob, junk = b"z" * (flood_mb * 2**20), b"question,A,B,answer\nWhat is 2 + 2?,4,5,A\n" + b"x\n" * 500_000
    deadline = time.monotonic() + MAX_ATTACK_S
    with StudioSession(port, cookie, headers=FLOODER) as session:
        session.rerun("data")
        while not stop.is_set() and time.monotonic() < deadline:
            url = f"/_stcore/upload_file/{session.session_id}/{uuid.uuid4()}"
            try:
                status, _ = put_file(port, url, "blob.csv", blob, cookie, FLOODER, PUT_TIMEOUT_S)
                state = put_upload(port, session.session_id, "junk.csv", junk, cookie, FLOODER, PUT_TIMEOUT_S)
                session.rerun("data", files={"data_upload": state})
                sent.append(1 if status in (200, 204) else 0)
            except OSError:  # a PUT refused or cut off (ConnectionError, a timeout): the flood goes on
                sent.append(0)


class PeakRss:
    """The highest resident memory of the server while a condition runs (sampled every 50 ms)."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self.stop = pid, 0, threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        while not self.stop.wait(0.05):
            self.peak = max(self.peak, rss_bytes(self.pid))

    def done(self) -> int:
        self.stop.set()
        self.thread.join()
        return round(self.peak / 2**20)


def visits_during_flood(
    port: int, args: argparse.Namespace, device: str, flood_cookie: str, pid: int
) -> tuple[list[tuple[float, float, int]], dict[str, int]]:
    """`args.tries` visits of the browser holding `device` while the upload flood runs, and
    the flood's figures (file size, rounds, the server's peak resident memory)."""
    stop, rounds, peak = threading.Event(), [], PeakRss(pid)
    flood = threading.Thread(target=upload_flood, args=(port, flood_cookie, args.flood_mb, stop, rounds), daemon=True)
    flood.start()
    time.sleep(2.0)  # the flood's first PUT is under way
    visits = [rightful_visit(port, device) for _ in range(args.tries)]
    stop.set()
    flood.join(timeout=PUT_TIMEOUT_S)
    figures = {"file_mb": args.flood_mb, "rounds": len(rounds), "rounds_refused_or_cut_off": rounds.count(0)}
    return visits, {**figures, "server_peak_rss_mb": peak.done()}


def summary(values: list[float]) -> dict[str, float]:
    return {"median_ms": round(statistics.median(values), 1), "worst_ms": round(max(values), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tries", type=int, default=5)
    parser.add_argument("--rate", type=float, default=20.0, help="the attacker's wrong passwords a second")
    parser.add_argument("--flood-mb", type=int, default=64, help="the size of each file the upload flood PUTs")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "door_under_attack.json")
    args = parser.parse_args()
    proxy = {"CALM_TRUSTED_PROXIES": "127.0.0.1", "CALM_PROXY_SECRET": SECRET}
    server, port, log, _ = _start(Path(tempfile.mkdtemp(prefix="door-bench-")), shared=True, extra_env=proxy)
    try:
        status, cookies = sign_in_as(port, PASSWORD, USER)
        assert status == 303, status
        device = cookies[DEVICE_COOKIE]
        status, flooder = sign_in_as(port, PASSWORD, FLOODER)  # its own address, before any attack
        assert status == 303, status
        rightful_visit(port, device)  # warm: the first script run imports the pages
        rows: dict[str, list[tuple[float, float, int]]] = {
            "quiet": [rightful_visit(port, device) for _ in range(args.tries)],
            "under attack": visits_under_attack(port, args, device, spread=False),
            "new browser, attack from elsewhere": visits_under_attack(port, args, None, spread=True),
        }
        flood_cookie = f"{SIGNIN_COOKIE}={flooder[SIGNIN_COOKIE]}"
        rows["upload flood"], flood = visits_during_flood(port, args, device, flood_cookie, server.pid)
    finally:
        _stop(server, log)
    result = {
        "tries": args.tries,
        "attack_rate_per_s": args.rate,
        "upload_flood": flood,
        "conditions": {
            name: {
                "sign_in": summary([r[0] for r in visits]),
                "first_page": summary([r[1] for r in visits]),
                "signed_in": sum(1 for r in visits if r[2] == 303),
            }
            for name, visits in rows.items()
        },
    }
    print(f"rightful browser, {args.tries} visits each; the attacker: {args.rate:g} wrong passwords a second")
    print(
        f"upload flood: {flood['rounds']} rounds of a {args.flood_mb} MB PUT and a junk CSV read by the page "
        f"({flood['rounds_refused_or_cut_off']} refused or cut off); server peak {flood['server_peak_rss_mb']:.0f} MB"
    )
    print(
        f"{'condition':<36} {'signed in':>9} {'sign-in median':>15} {'worst':>8} {'first page median':>18} {'worst':>8}"
    )
    for name, row in result["conditions"].items():
        print(
            f"{name:<36} {row['signed_in']:>6}/{args.tries:<2} {row['sign_in']['median_ms']:>12.1f} ms "
            f"{row['sign_in']['worst_ms']:>5.0f} ms {row['first_page']['median_ms']:>15.1f} ms "
            f"{row['first_page']['worst_ms']:>5.0f} ms"
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
