"""Is a shared studio still usable for its rightful user while someone hammers the sign-in?

    PYTHONPATH=$PWD .venv/bin/python bench/door_under_attack.py [--tries 5] [--rate 20] \
        [--json bench/results/door_under_attack.json]

One shared studio (`streamlit run app/main.py`, as tests/test_attacks.py starts it). The
rightful user signs in once, so their browser holds the device cookie. Then, `--tries`
times each, side by side in one run (the machine is noisy): without an attack, and while
an attacker thread sends wrong passwords from the user's own address at `--rate` a
second (bounded in count and time, loopback only). Each try measures the rightful
browser's sign-in (POST with its device cookie, until the redirect) and its first page
(the WebSocket handshake and one script run of the Monitor page, until it finishes).
Then the same visits while an upload flood runs: a second browser, signed in with the
password, PUTs `--flood-mb` files to fresh ids of its one session without a rerun, and
between them uploads a CSV of one valid row and 500,000 bad lines through the Data page
(a parse each time). The server's peak resident memory during the flood is recorded.
Prints a table (median and worst, milliseconds) and writes JSON.
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

from tests.attack_client import StudioSession, put_file, put_upload, rss_bytes, sign_in_as  # noqa: E402
from tests.test_attacks import PASSWORD, _start, _stop  # noqa: E402

DEVICE_COOKIE, SIGNIN_COOKIE = "calm_studio_device", "calm_studio_signin"
MAX_ATTACK_S = 600.0  # the attacker stops by itself after this, whatever happens


def rightful_visit(port: int, device: str) -> tuple[float, float, int]:
    """(sign-in ms, first page ms, sign-in status) for the browser holding `device`."""
    started = time.perf_counter()
    status, cookies = sign_in_as(port, PASSWORD, {"Cookie": f"{DEVICE_COOKIE}={device}"})
    signed = time.perf_counter()
    if status != 303:
        return (signed - started) * 1000, float("nan"), status
    with StudioSession(port, f"{SIGNIN_COOKIE}={cookies[SIGNIN_COOKIE]}") as session:
        session.rerun("monitor")
    return (signed - started) * 1000, (time.perf_counter() - signed) * 1000, status


def attack(port: int, rate: float, stop: threading.Event, sent: list[int]) -> None:
    """Wrong passwords at `rate` a second until `stop` (or MAX_ATTACK_S)."""
    deadline = time.monotonic() + MAX_ATTACK_S
    while not stop.is_set() and time.monotonic() < deadline:
        sign_in_as(port, "a wrong guess")
        sent.append(1)
        stop.wait(1.0 / rate)


def upload_flood(port: int, cookie: str, flood_mb: int, stop: threading.Event, sent: list[int]) -> None:
    """A signed-in browser's session: a `flood_mb` PUT to a fresh id, then a junk CSV
    uploaded and read by the Data page, over and over until `stop` (or MAX_ATTACK_S)."""
    import uuid

    blob, junk = b"z" * (flood_mb * 2**20), b"question,A,B,answer\nWhat is 2 + 2?,4,5,A\n" + b"x\n" * 500_000
    deadline = time.monotonic() + MAX_ATTACK_S
    with StudioSession(port, cookie) as session:
        session.rerun("data")
        while not stop.is_set() and time.monotonic() < deadline:
            put_file(port, f"/_stcore/upload_file/{session.session_id}/{uuid.uuid4()}", "blob.csv", blob, cookie)
            try:
                session.rerun(
                    "data", files={"data_upload": put_upload(port, session.session_id, "junk.csv", junk, cookie)}
                )
            except ConnectionError:  # a PUT refused: the flood goes on
                pass
            sent.append(1)


class PeakRss:
    """The highest resident memory of the server while a condition runs (sampled every 50 ms)."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self.stop = pid, 0, threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        while not self.stop.wait(0.05):
            self.peak = max(self.peak, rss_bytes(self.pid))

    def done(self) -> float:
        self.stop.set()
        self.thread.join()
        return round(self.peak / 2**20)


def summary(values: list[float]) -> dict[str, float]:
    return {"median_ms": round(statistics.median(values), 1), "worst_ms": round(max(values), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tries", type=int, default=5)
    parser.add_argument("--rate", type=float, default=20.0, help="the attacker's wrong passwords a second")
    parser.add_argument("--flood-mb", type=int, default=64, help="the size of each file the upload flood PUTs")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "door_under_attack.json")
    args = parser.parse_args()
    server, port, log, _ = _start(Path(tempfile.mkdtemp(prefix="door-bench-")), shared=True)
    try:
        status, cookies = sign_in_as(port, PASSWORD)
        assert status == 303, status
        device = cookies[DEVICE_COOKIE]
        _, flooder = sign_in_as(port, PASSWORD)  # before the guessing locks this address out
        rightful_visit(port, device)  # warm: the first script run imports the pages
        rows: dict[str, list[tuple[float, float, int]]] = {"quiet": [], "under attack": [], "upload flood": []}
        stop, sent = threading.Event(), []
        attacker = threading.Thread(target=attack, args=(port, args.rate, stop, sent), daemon=True)
        for i in range(args.tries):
            rows["quiet"].append(rightful_visit(port, device))
            if i == 0:
                attacker.start()
                time.sleep(2.0)  # the attacker has spent the free tries and the bucket is draining
            rows["under attack"].append(rightful_visit(port, device))
        stop.set()
        attacker.join(timeout=10)
        flood_stop, uploads, peak = threading.Event(), [], PeakRss(server.pid)
        flood_cookie = f"{SIGNIN_COOKIE}={flooder[SIGNIN_COOKIE]}"
        args_flood = (port, flood_cookie, args.flood_mb, flood_stop, uploads)
        flood = threading.Thread(target=upload_flood, args=args_flood, daemon=True)
        flood.start()
        time.sleep(2.0)  # the flood's first uploads are in
        for _ in range(args.tries):
            rows["upload flood"].append(rightful_visit(port, device))
        flood_stop.set()
        flood.join(timeout=120)
        flood_peak_mb = peak.done()
    finally:
        _stop(server, log)
    result = {
        "tries": args.tries,
        "attack_rate_per_s": args.rate,
        "attacker_wrong_passwords_sent": len(sent),
        "upload_flood": {"file_mb": args.flood_mb, "rounds": len(uploads), "server_peak_rss_mb": flood_peak_mb},
        "conditions": {
            name: {
                "sign_in": summary([r[0] for r in visits]),
                "first_page": summary([r[1] for r in visits]),
                "signed_in": sum(1 for r in visits if r[2] == 303),
            }
            for name, visits in rows.items()
        },
    }
    print(f"rightful browser, {args.tries} visits each; attacker sent {len(sent)} wrong passwords")
    print(
        f"upload flood: {len(uploads)} rounds of a {args.flood_mb} MB PUT and a junk CSV read by the page; "
        f"server peak {flood_peak_mb:.0f} MB"
    )
    print(
        f"{'condition':<14} {'signed in':>9} {'sign-in median':>15} {'worst':>8} {'first page median':>18} {'worst':>8}"
    )
    for name, row in result["conditions"].items():
        print(
            f"{name:<14} {row['signed_in']:>6}/{args.tries:<2} {row['sign_in']['median_ms']:>12.1f} ms "
            f"{row['sign_in']['worst_ms']:>5.0f} ms {row['first_page']['median_ms']:>15.1f} ms "
            f"{row['first_page']['worst_ms']:>5.0f} ms"
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
