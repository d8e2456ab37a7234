"""The studio in a real browser: headless Chromium driven by Playwright.

Starts `streamlit run app/main.py` on a free port with an empty workspace, opens every
page, launches a short CALM job on the embedded model from the Train page, watches the
Monitor page update until the run finishes, and opens the Compare page; screenshots of
each go to $CALM_SCREENSHOTS (default: a temporary folder). Waits are real-time waits
for the app's own elements: a cold Streamlit server renders blank at first.

    CALM_SCREENSHOTS=docs/screenshots bash scripts/test.sh tests/test_browser.py   # README images

Needs Debian's `chromium` (`.ci/run` installs it). Without it the test skips, unless
CALM_REQUIRE_BROWSER=1 (set by .ci/run), where it fails.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# the Data page's dataset uploader (key data_upload); the page has another, for harness samples
DATASET_UPLOAD = '.st-key-data_upload input[type="file"]'


def as_shown(sentence: str) -> str:
    """A sentence of the studio's as a page shows it: its set names are code spans, their backticks not drawn."""
    return sentence.replace("`", "")

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
PAGE_TITLES = {"Learn: overconfidence": "Overconfidence, live", "Data": "Data", "Train": "Train",
               "Monitor": "Monitor", "Compare": "Compare", "Playground": "Playground"}

pytestmark = [pytest.mark.browser, pytest.mark.embedded]  # it trains the embedded model


def _require_browser() -> None:
    missing = [what for what, ok in (("chromium", CHROMIUM), ("playwright", _has_playwright())) if not ok]
    if missing:
        if os.environ.get("CALM_REQUIRE_BROWSER") == "1":
            pytest.fail(f"browser test needs {', '.join(missing)} (CALM_REQUIRE_BROWSER=1)")
        pytest.skip(f"browser test needs {', '.join(missing)}: apt-get install chromium; pip install playwright")


def _has_playwright() -> bool:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return False
    return True


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def running_studio(tmp_path: Path, workspace: Path, **extra_env: str) -> Iterator[str]:
    """`streamlit run app/main.py` on a free port over `workspace`, with `extra_env`;
    yields its URL once healthy and stops it (and leaves no job running) afterwards."""
    port = _free_port()
    env = {**os.environ, "CALM_WORKSPACE": str(workspace), "PYTHONUNBUFFERED": "1", **extra_env}
    log_path = tmp_path / "streamlit.log"
    log = open(log_path, "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "app" / "main.py"), "--server.headless", "true",
         "--server.port", str(port), "--browser.gatherUsageStats", "false"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                break
        except OSError:
            time.sleep(0.5)
    else:
        os.killpg(server.pid, 9)
        pytest.fail(f"streamlit did not come up: {log_path.read_text()[-2000:]}")
    try:
        yield url
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)
        log.close()
        subprocess.run([sys.executable, "-m", "calm_core.cli", "runs"], env=env, capture_output=True)


@pytest.fixture()
def studio(tmp_path: Path, embedded_dir: Path):
    """A running studio server on an empty workspace; yields its URL."""
    with running_studio(tmp_path, tmp_path / "workspace") as url:
        yield url


IDLE_JS = ("() => { const w = document.querySelector('[data-testid=\"stStatusWidget\"]');"
           " return (!w || !w.innerText.includes('Running'))"
           " && !document.querySelector('[data-testid=\"stSpinner\"]'); }")


def wait_idle(page, rounds: int = 2) -> None:
    """Until no script run is going and no spinner shows, `rounds` times a second apart (a
    run that has just been asked for shows its status a moment later). Under a loaded
    machine a rerun outlasts any fixed sleep, and a click made while one is going can be
    lost: a walk waits for this before it clicks what matters."""
    for _ in range(rounds):
        page.wait_for_timeout(1000)
        page.wait_for_function(IDLE_JS, timeout=240_000)
    page.wait_for_timeout(500)


def fill_short_tiny_run(page, model_dir: Path | None, steps: int, eval_items: int, name: str) -> None:
    """On the Train page: the tiny model from a local directory (`model_dir`; None keeps
    the embedded model) and a short run named `name` (LoRA on the top layer: the tiny
    model has two); each entry's rerun over before the next."""
    if model_dir is not None:
        page.get_by_text("local directory", exact=True).click()
        path = page.get_by_label("Path or hub id", exact=True)
        path.wait_for(timeout=60_000)
        path.fill(str(model_dir))
        path.press("Enter")
        wait_idle(page)
    page.get_by_text("Advanced settings").click()
    for label, value in (("Steps", steps), ("Items per evaluation set", eval_items),
                         ("LoRA on top N layers (0: all)", 1), ("Run name", name)):
        field = page.get_by_label(label, exact=True)
        field.wait_for(timeout=60_000)
        field.fill(str(value))
        field.press("Enter")
        wait_idle(page, rounds=1)
    wait_idle(page)


def _shots() -> Path:
    target = Path(os.environ.get("CALM_SCREENSHOTS") or "")
    if not str(target) or str(target) == ".":
        import tempfile

        target = Path(tempfile.mkdtemp(prefix="calm-shots-"))
    target.mkdir(parents=True, exist_ok=True)
    return target


def _goto(page, title: str) -> None:
    page.get_by_role("link", name=title).first.click()
    page.get_by_role("heading", name=PAGE_TITLES[title]).first.wait_for(timeout=120_000)


def test_studio_in_chromium(studio: str) -> None:
    _require_browser()
    from playwright.sync_api import expect, sync_playwright

    shots = _shots()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 2000})
        try:
            _walk_through(page, studio, shots, expect)
        except Exception:
            page.screenshot(path=str(shots / "failure.png"), full_page=True)
            print(f"browser test failed; screenshot in {shots / 'failure.png'}")
            raise
        finally:
            browser.close()
    for name in ("learn", "monitor", "compare"):
        assert (shots / f"{name}.png").stat().st_size > 20_000, f"{name}.png looks blank"


def _walk_through(page, studio: str, shots: Path, expect) -> None:
    page.goto(studio)
    # Learn: the embedded model scores a built-in set; wait for its metrics and diagram.
    page.get_by_text("Mean confidence").first.wait_for(timeout=240_000)
    page.locator('[data-testid="stPlotlyChart"]').first.wait_for(timeout=120_000)
    page.screenshot(path=str(shots / "learn.png"), full_page=True)
    # Data: upload a CSV with one column per option; the mapping is guessed (no typing), one row rejected.
    _goto(page, "Data")
    upload = shots / "domain.csv"
    upload.write_text("q,A,B,C,label\nWhat is 2+2?,4,5,6,A\nBad row,,,,Z\nCapital of Peru?,Lima,Quito,Cusco,A\n")
    page.locator(DATASET_UPLOAD).set_input_files(str(upload))
    page.get_by_text("question=q, choices=A|B|C, answer=label").first.wait_for(timeout=60_000)
    page.get_by_text("Why 1 row was rejected").wait_for(timeout=60_000)
    page.get_by_role("button", name="Save to the workspace").click()
    page.get_by_text("Saved as upload/domain").wait_for(timeout=60_000)
    upload.unlink()
    _goto(page, "Playground")
    expect(page.locator('[data-testid="stException"]')).to_have_count(0)

    # Train: a short CALM run on the embedded model, built-in data.
    _goto(page, "Train")
    page.get_by_text("Advanced settings").click()
    steps = page.get_by_label("Steps", exact=True)
    steps.fill("12")
    steps.press("Enter")
    items = page.get_by_label("Items per evaluation set", exact=True)
    items.fill("20")
    items.press("Enter")
    page.wait_for_timeout(1000)
    page.get_by_role("button", name="Launch training").click()
    page.get_by_text("Follow it on the Monitor page").wait_for(timeout=60_000)

    # Monitor: the progress text moves on while the job runs, then says finished.
    _goto(page, "Monitor")
    progress = page.locator('[data-testid="stProgress"]').first
    progress.wait_for(timeout=60_000)
    first_text = progress.inner_text()
    page.wait_for_function(
        "t => { const p = document.querySelector('[data-testid=\"stProgress\"]');"
        " return p && p.innerText !== t; }", arg=first_text, timeout=300_000)
    page.get_by_role("heading", name="Final evaluation").wait_for(timeout=600_000)
    expect(page.locator('[data-testid="stException"]')).to_have_count(0)
    page.wait_for_timeout(1500)
    page.screenshot(path=str(shots / "monitor.png"), full_page=True)
    page.get_by_role("tab", name="alpha").click()
    page.get_by_text("tau per option").first.wait_for(timeout=60_000)
    page.wait_for_timeout(1500)
    page.screenshot(path=str(shots / "monitor_alpha.png"), full_page=True)

    # Compare: reliability diagrams of base, TS and CALM.
    _goto(page, "Compare")
    page.locator('[data-testid="stPlotlyChart"]').first.wait_for(timeout=120_000)
    expect(page.locator('[data-testid="stException"]')).to_have_count(0)
    page.wait_for_timeout(1500)
    page.screenshot(path=str(shots / "compare.png"), full_page=True)
