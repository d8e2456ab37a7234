"""The attacker's suite, part 4 (issue 47): the run budget when many clicks arrive at once.

A shared studio counts a session's, a browser's and the server's queued or running runs
before it queues one more. When the count and the queueing were not one step, N sessions
clicking Launch at the same moment each counted before any had queued, and all passed:
10 sessions of one browser queued 7 runs (budget 3), 10 browsers x 3 sessions 9 (budget 8).
Here raw WebSocket sessions (tests/attack_client.py) draw the Train page, then all send
their click on Launch from their own threads at once; the runs on disk are counted after.

A job slot is held by a stand-in run (a live `sleep`), so the launched runs stay queued
and no training starts on the test machine; it counts toward the server's 8.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from calm_core.access.rules import DEFAULT_MAX_RUNS, MAX_QUEUED_PER_BROWSER
from tests.attack_client import StudioSession, sign_in
from tests.test_attacks import PASSWORD, _start, _stop

ACTIVE = ("queued", "running", "stopping")


@pytest.fixture()
def busy_studio(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[int, Path]]:
    """A shared studio whose one job slot is held by a run of nobody's session; (port, runs root)."""
    from calm_core.launch import create_run
    from calm_core.training.config import TrainConfig

    monkeypatch.setenv("CALM_WORKSPACE", str(tmp_path / "workspace"))
    sleeper = subprocess.Popen(["sleep", "900"])
    holder = create_run(TrainConfig.preset("quick"))
    now = time.time()
    holder.write_status("running", pid=sleeper.pid, started=now, heartbeat=now)
    beating = threading.Event()

    def beat() -> None:  # a live job's heartbeat: drawing 30 sessions can outlast the 60 s that make one stale
        while not beating.wait(5.0):
            holder.update_status(heartbeat=time.time())

    heart = threading.Thread(target=beat, daemon=True)
    heart.start()
    server, port, log, _ = _start(tmp_path, shared=True, extra_env={"CALM_MAX_JOBS": "1"})
    try:
        yield port, holder.path.parent
    finally:
        beating.set()
        heart.join(timeout=10)
        _stop(server, log)
        sleeper.kill()
        sleeper.wait()


def _active(root: Path) -> list[object]:
    from calm_core.runs.listing import list_runs

    return [s for s in list_runs(root) if s.state in ACTIVE and s.launched_by]


def _click_launch_at_once(port: int, cookies: list[str]) -> list[str]:
    """One session per cookie draws the Train page; then every session clicks Launch from
    its own thread, released together. Returns any session's failure, as text."""
    sessions = [StudioSession(port, cookie, timeout_s=900) for cookie in cookies]
    failures: list[str] = []
    try:
        for session in sessions:
            elements = session.rerun("train")
            assert any(e.key == "train_launch" for e in elements), [e.text for e in elements if e.is_error]
        start = threading.Barrier(len(sessions))

        def click(session: StudioSession) -> None:
            start.wait()
            try:
                elements = session.rerun("train", click=["train_launch"])
            except Exception as error:  # noqa: BLE001 - reported by the test
                failures.append(repr(error))
            else:
                failures.extend(e.text for e in elements if e.kind == "exception")

        threads = [threading.Thread(target=click, args=(s,)) for s in sessions]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for session in sessions:
            session.__exit__()
    return failures


def test_ten_sessions_of_one_browser_clicking_at_once_queue_at_most_three(busy_studio) -> None:
    port, root = busy_studio
    _, cookie = sign_in(port, PASSWORD)
    assert cookie
    failures = _click_launch_at_once(port, [cookie] * 10)
    launched = _active(root)
    print(f"10 sessions of one browser at once: {len(launched)} runs queued (budget {MAX_QUEUED_PER_BROWSER})")
    assert not failures
    assert 1 <= len(launched) <= MAX_QUEUED_PER_BROWSER


def test_ten_browsers_of_three_sessions_queue_at_most_the_servers_eight(busy_studio) -> None:
    port, root = busy_studio
    browsers = [sign_in(port, PASSWORD)[1] for _ in range(10)]
    assert all(browsers)
    failures = _click_launch_at_once(port, [cookie for cookie in browsers for _ in range(3)])  # type: ignore[misc]
    launched = _active(root)
    total = len(launched) + 1  # the stand-in holding the slot counts toward the server's budget
    print(f"10 browsers x 3 sessions at once: {total} queued or running (budget {DEFAULT_MAX_RUNS})")
    assert not failures
    assert MAX_QUEUED_PER_BROWSER <= total <= DEFAULT_MAX_RUNS
