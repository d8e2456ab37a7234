"""A studio shared on purpose (issue 22): `bash scripts/studio.sh --share` with a password.

Started as docs/security.md says, it listens on every interface; a browser session
without the password sees only the front door's sign-in form, with it reaches Train, and
a sixth wrong try is refused unchecked. The password appears nowhere: not in the URL, the server's log or the page.
Skips without chromium or playwright, unless CALM_REQUIRE_BROWSER=1 (tests/test_browser.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
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


def _submit(page, password: str) -> str:
    """Type `password` into the sign-in form and press Enter; the text of the page after."""
    field = page.get_by_label("Password", exact=True)
    field.fill(password)
    with page.expect_navigation(timeout=60_000):
        field.press("Enter")
    return page.inner_text("body")


def test_shared_studio_gates_every_page_and_limits_guessing(shared_studio) -> None:
    from playwright.sync_api import sync_playwright

    url, port, log_path = shared_studio
    addresses = listening_addresses(port)
    assert addresses - {LOOPBACK_V4, LOOPBACK_V6}, addresses  # shared on purpose: beyond loopback
    shots = _shots()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            # With the password: the page asked for, the Train page. (First: the guessing
            # below holds back this address, 127.0.0.1, for everyone on it.)
            member = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
            member.goto(f"{url}/train")
            member.get_by_label("Password", exact=True).wait_for(timeout=120_000)
            member.screenshot(path=str(shots / "shared-gate.png"))
            _submit(member, PASSWORD)
            member.get_by_text("Launch training").first.wait_for(timeout=120_000)
            member.screenshot(path=str(shots / "shared-train.png"))
            assert PASSWORD not in member.url and PASSWORD not in member.content()
            assert "/train" in member.url

            # Without the password: the sign-in form and nothing else, whatever page is asked for.
            guest = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
            guest.goto(f"{url}/monitor")
            guest.get_by_label("Password", exact=True).wait_for(timeout=60_000)
            assert "/_calm/signin" in guest.url
            assert guest.get_by_role("link", name="Train").count() == 0
            assert guest.get_by_text("Launch training").count() == 0

            # Five wrong tries are checked; the sixth is refused unchecked, with the wait.
            answers = [_submit(guest, f"guess {i}") for i in range(5)]
            assert all("Wrong password." in a for a in answers), answers
            sixth = _submit(guest, "guess 6")
            assert "Too many wrong passwords" in sixth, sixth
            assert guest.get_by_text("Launch training").count() == 0
        finally:
            browser.close()
    assert PASSWORD not in log_path.read_text()
