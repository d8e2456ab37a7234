"""The first `bash scripts/studio.sh` on a fresh clone: the longest silence between two lines.

    .venv/bin/python bench/studio_silence.py [--log FILE] [--keep DIR] [--no-pip-cache] [--timeout 1800]

Clones this repository's HEAD into a temporary folder (a fresh clone: no .venv), gives it an
empty model cache (CALM_CACHE_DIR: the embedded model is converted and Learn's quiz scored,
as on a new machine) and an empty workspace, runs `bash scripts/studio.sh` on a free port and
reads what it prints (stdout and stderr, a line ending at \\n or \\r) until Streamlit gives
its address. Prints the time to that line, the number of lines and the five longest gaps
with the line that ended each (--log: every line with its time); exits 1 when a gap is
longer than the promised 20 s (issue 40: the first run printed nothing for about 4 minutes).
pip's own cache (~/.cache/pip) is used unless --no-pip-cache: with it, the packages
download again (as on a new machine).
Minutes of CPU and network: a bench, not a test (tests/test_ticker.py checks the tickers).
"""

from __future__ import annotations

import argparse
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMISED_GAP_S = 20.0
READY = re.compile(r"(Local URL|You can now view)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _clone(target: Path) -> Path:
    """A fresh clone of this checkout's branch (its commits: uncommitted edits are not in it)."""
    branch = subprocess.run(["git", "rev-parse", "--abbrev-ref", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    which = ["--branch", branch.stdout.strip()] if branch.returncode == 0 and branch.stdout.strip() != "HEAD" else []
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", *which, str(ROOT), str(target)], check=True)
    return target


def _read_lines(process: subprocess.Popen, timeout_s: float) -> list[tuple[float, str]]:
    """(seconds since start, line) of everything `process` prints, until Streamlit's address or `timeout_s`."""
    start, lines, pending = time.monotonic(), [], b""
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    while time.monotonic() - start < timeout_s:
        if not selector.select(timeout=1.0):
            if process.poll() is not None:
                break
            continue
        chunk = os.read(process.stdout.fileno(), 65536)
        if not chunk:
            break
        pending += chunk
        *done, pending = re.split(rb"[\r\n]", pending)
        now = time.monotonic() - start
        lines += [(now, raw.decode("utf-8", "replace")) for raw in done if raw.strip()]
        if any(READY.search(text) for _, text in lines[-len(done) :] if done):
            break
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", type=Path, help="write every line with its time (seconds since the start) here")
    parser.add_argument("--keep", type=Path, help="clone into DIR and keep it (default: a temporary folder)")
    parser.add_argument("--no-pip-cache", action="store_true", help="download every package again")
    parser.add_argument("--timeout", type=float, default=1800, help="give up after this many seconds")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="calm-fresh-") as tmp:
        clone = _clone(args.keep or Path(tmp) / "clone")
        env = {**os.environ, "CALM_CACHE_DIR": str(Path(tmp) / "cache"), "CALM_WORKSPACE": str(Path(tmp) / "ws")}
        env.pop("VIRTUAL_ENV", None)
        if args.no_pip_cache:
            env["PIP_NO_CACHE_DIR"] = "1"
        command = ["bash", "scripts/studio.sh", "--server.port", str(_free_port()), "--server.headless", "true"]
        process = subprocess.Popen(
            command, cwd=clone, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            lines = _read_lines(process, args.timeout)
        finally:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=60)
        if args.log:
            args.log.write_text("".join(f"{t:7.1f}  {text}\n" for t, text in lines), encoding="utf-8")
        return _report(lines)  # before the clone's folder is removed: that takes a while


def _report(lines: list[tuple[float, str]]) -> int:
    if not lines:
        print("no output at all")
        return 1
    times = [0.0] + [t for t, _ in lines]
    gaps = sorted(((b - a, text) for a, (b, text) in zip(times[:-1], lines, strict=True)), reverse=True)
    ready = next((t for t, text in lines if READY.search(text)), None)
    print(f"lines: {len(lines)}  to Streamlit's address: {'not reached' if ready is None else f'{ready:.0f} s'}")
    print("longest gaps (seconds, then the line that ended the silence):")
    for gap, text in gaps[:5]:
        print(f"  {gap:6.1f}  {text[:110]}")
    worst = gaps[0][0]
    verdict = "within" if worst <= PROMISED_GAP_S else "past"
    print(f"longest silence: {worst:.1f} s ({verdict} the promised {PROMISED_GAP_S:g} s)")
    return 0 if worst <= PROMISED_GAP_S and ready is not None else 1


if __name__ == "__main__":
    sys.exit(main())
