"""A studio shared on purpose (issue 22): `bash scripts/studio.sh --share` with a password.

Started as docs/security.md says, it listens on every interface; a browser session
without the password sees only the gate, with it reaches Train, and a sixth wrong try
waits. The password appears nowhere: not in the URL, the server's log or the page.
Skips without chromium or playwright, unless CALM_REQUIRE_BROWSER=1 (tests/test_browser.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.test_browser import CHROMIUM, CHROMIUM_ARGS, _require_browser, _shots
from tests.test_private import LOOPBACK_V4, LOOPBACK_V6, _free_port, listening_addresses, wait_until_healthy

pytestmark = [pytest.mark.browser]

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "tiger lily 4 ever"


def test_share_refuses_to_start_without_a_password(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "CALM_STUDIO_PASSWORD"}
    done = subprocess.run(["bash", "scripts/studio.sh", "--share"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    assert "needs a password" in done.stderr and "CALM_STUDIO_PASSWORD" in done.stderr


@pytest.fixture
def shared_studio(tmp_path: Path):
    """The README's shared command on a free port; yields (url, port, log path)."""
    _require_browser()
    port = _free_port()
    env = {**os.environ, "CALM_WORKSPACE": str(tmp_path / "workspace"), "CALM_STUDIO_PASSWORD": PASSWORD}
    log_path = tmp_path / "studio.log"
    with open(log_path, "w") as log:
        server = subprocess.Popen(["bash", "scripts/studio.sh", "--share", "--server.port", str(port)], cwd=ROOT,
                                  env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_until_healthy(port, server, log_path)
            yield f"http://127.0.0.1:{port}", port, log_path
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)


def _submit(page, password: str) -> float:
    """Type `password` into the gate and press Enter; seconds until the page answered
    (the gate's message changed or the gate went away)."""
    field = page.get_by_label("Password", exact=True)
    before = page.locator('[data-testid="stAlert"]').all_inner_texts()
    field.fill(password)
    started = time.monotonic()
    field.press("Enter")
    deadline = started + 60
    while time.monotonic() < deadline:
        if page.get_by_label("Password", exact=True).count() == 0:
            break
        if page.locator('[data-testid="stAlert"]').all_inner_texts() != before:
            break
        page.wait_for_timeout(50)
    return time.monotonic() - started


def test_shared_studio_gates_every_page_and_delays_guessing(shared_studio) -> None:
    from playwright.sync_api import sync_playwright

    url, port, log_path = shared_studio
    addresses = listening_addresses(port)
    assert addresses - {LOOPBACK_V4, LOOPBACK_V6}, addresses  # shared on purpose: beyond loopback
    shots = _shots()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            # Without the password: the gate and nothing else, whatever page is asked for.
            guest = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
            guest.goto(f"{url}/train")
            guest.get_by_label("Password", exact=True).wait_for(timeout=120_000)
            assert guest.get_by_role("link", name="Train").count() == 0
            assert guest.get_by_text("Launch training").count() == 0
            guest.screenshot(path=str(shots / "shared-gate.png"))

            # Five wrong tries answer at once; the sixth waits.
            quick = [_submit(guest, f"guess {i}") for i in range(5)]
            assert guest.get_by_text("Wrong password (5 wrong tries).").first.is_visible()
            sixth = _submit(guest, "guess 6")
            assert sixth >= 1.0 and sixth > max(quick), (quick, sixth)
            assert guest.get_by_text("Too many wrong tries").first.is_visible()
            assert guest.get_by_text("Launch training").count() == 0

            # With the password: the Train page.
            member = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
            member.goto(f"{url}/train")
            member.get_by_label("Password", exact=True).wait_for(timeout=120_000)
            _submit(member, PASSWORD)
            member.get_by_text("Launch training").first.wait_for(timeout=120_000)
            member.screenshot(path=str(shots / "shared-train.png"))
            assert PASSWORD not in member.url and PASSWORD not in member.content()
        finally:
            browser.close()
    assert PASSWORD not in log_path.read_text()
