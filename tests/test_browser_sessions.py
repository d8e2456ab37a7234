"""Two studio sessions launch at once through a real browser (issue 13).

One `streamlit run app/main.py` server (CALM_MAX_JOBS=1, its own workspace) and two
independent Chromium contexts, i.e. two Streamlit sessions. Both open the Train page,
configure a short CALM run on the tiny random model (distinct run names) and press
"Launch training" at the same instant (a timer in each page, set to one shared time).
Then: two distinct run directories, each holding its own session's settings; one
session was told "started", the other "queued" and its run waits as `queued` while the
first runs; the runs never overlap; both finish; and each session's Monitor page
follows its own run to `finished` with its final evaluation.

Screenshots go to $CALM_SCREENSHOTS (default: a temporary folder). Skips without
chromium or playwright, unless CALM_REQUIRE_BROWSER=1 (as tests/test_browser.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.test_browser import (CHROMIUM, CHROMIUM_ARGS, _goto, _require_browser, _shots, fill_short_tiny_run,
                                running_studio)

pytestmark = [pytest.mark.browser]

STEPS = 12
EVAL_ITEMS = 20
NAMES = ("session-a", "session-b")
ACTIVE = ("queued", "running", "stopping")
LAUNCH_BUTTON_JS = "() => [...document.querySelectorAll('button')].find(b => b.innerText.includes('Launch training'))"


@contextmanager
def empty_workspace_studio(tmp_path: Path, **extra_env: str) -> Iterator[tuple[str, Path]]:
    """A studio server on an empty workspace: (url, workspace). Any job a failed test left
    behind is stopped afterwards; no server starts without a browser to drive it."""
    _require_browser()
    workspace = tmp_path / "workspace"
    try:
        with running_studio(tmp_path, workspace, **extra_env) as url:
            yield url, workspace
    finally:
        _stop_leftover_jobs(workspace / "runs")


@pytest.fixture()
def studio_one_slot(tmp_path: Path, tiny_model_dir: Path):
    """A studio server with one job slot on an empty workspace; yields (url, workspace)."""
    with empty_workspace_studio(tmp_path, CALM_MAX_JOBS="1") as pair:
        yield pair


def _stop_leftover_jobs(root: Path) -> None:
    """A failed test leaves no job behind: queued runs are cancelled first (so none
    starts when a slot frees), then running ones are killed."""
    from calm_core.runs.jobs import kill
    from calm_core.runs.queue import cancel
    from calm_core.runs.listing import list_runs
    from calm_core.runs.rundir import RunDir

    if not root.is_dir():
        return
    for wanted, stop in (("queued", cancel), ("running", kill), ("stopping", kill)):
        for summary in list_runs(root):
            if summary.state == wanted:
                try:
                    stop(RunDir(summary.path))
                except Exception as error:  # noqa: BLE001 - best effort in teardown
                    print(f"could not stop {summary.run_id}: {error}")


def _exceptions(page) -> list[str]:
    return [e.inner_text() for e in page.locator('[data-testid="stException"]').all()]


def _configure_run(page, url: str, model_dir: Path, name: str) -> None:
    """The Train page, opened directly, set to a short run of the tiny model named `name`."""
    page.goto(f"{url}/train")
    page.get_by_role("heading", name="Train").first.wait_for(timeout=180_000)
    fill_short_tiny_run(page, model_dir, STEPS, EVAL_ITEMS, name)
    page.wait_for_function(LAUNCH_BUTTON_JS, timeout=180_000)  # a cold Train page under a full suite
    assert not _exceptions(page), _exceptions(page)


def _click_launch_at(page, when_ms: float) -> None:
    """Arm a timer in the page that clicks "Launch training" at `when_ms` (Date.now())."""
    page.evaluate("""when => { setTimeout(() => {
        const b = [...document.querySelectorAll('button')].find(b => b.innerText.includes('Launch training'));
        window.__launched = b ? Date.now() : -1; if (b) b.click(); }, Math.max(0, when - Date.now())); }""", when_ms)


def _launch_message(page) -> tuple[str, str]:
    """(run id, 'started' | 'queued') from the Train page's success line."""
    page.get_by_text("Follow it on the Monitor page").wait_for(timeout=180_000)
    launched = re.compile(r"Run\s+\S+\s+(started|queued)")  # not the estimate's load warning, which speaks of runs
    text = page.locator('[data-testid="stAlert"]').filter(has_text=launched).first.inner_text()
    found = re.search(r"Run\s+(\S+)\s+(started|queued)", text)
    assert found, f"unexpected launch message: {text!r}"
    return found.group(1), found.group(2)


def _launch_state(page) -> str:
    """For a failure's report: when the page's timer clicked, the Launch button's state, the
    alerts on the page and whether a script run is in progress."""
    return page.evaluate("""() => {
        const b = [...document.querySelectorAll('button')].find(b => b.innerText.includes('Launch training'));
        const alerts = [...document.querySelectorAll('[data-testid="stAlert"]')].map(a => a.innerText.slice(0, 160));
        const running = !!document.querySelector('[data-testid="stStatusWidget"]');
        return `clicked at ${window.__launched}; button ${b ? (b.disabled ? 'disabled' : 'enabled') : 'absent'}; `
            + `script running: ${running}; alerts: ${JSON.stringify(alerts)}`;
    }""")


def _status(root: Path, run_id: str) -> dict:
    return json.loads((root / run_id / "status.json").read_text())


def _labelled(run_id: str) -> re.Pattern:
    """The run picker's label for `run_id` (runs.listing.run_label: the id, then its state and data)."""
    return re.compile(rf"^{re.escape(run_id)}( · |$)")


def _open_monitor(page, run_id: str) -> str:
    """This session's Monitor page shows its own run; returns the progress line then."""
    from playwright.sync_api import expect

    _goto(page, "Monitor")
    chosen = page.locator(".st-key-monitor_select").get_by_role("combobox")
    chosen.wait_for(timeout=120_000)
    expect(chosen).to_have_value(_labelled(run_id), timeout=30_000)  # not the other session's run
    progress = page.locator('[data-testid="stProgress"]').first
    progress.wait_for(timeout=120_000)
    return progress.inner_text()


def _wait_finished(page, run_id: str) -> str:
    """The Monitor page, live, until the run's final evaluation; returns the progress line."""
    from playwright.sync_api import expect

    page.get_by_role("heading", name="Final evaluation").wait_for(timeout=900_000)
    progress = page.locator('[data-testid="stProgress"]').first
    expect(progress).to_contain_text("finished", timeout=60_000)
    assert not _exceptions(page), _exceptions(page)
    expect(page.locator(".st-key-monitor_select").get_by_role("combobox")).to_have_value(_labelled(run_id))
    return progress.inner_text()


def test_two_sessions_launch_at_once(studio_one_slot, tiny_model_dir: Path) -> None:
    _require_browser()
    from playwright.sync_api import sync_playwright

    url, workspace = studio_one_slot
    root = workspace / "runs"
    shots = _shots()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        contexts = [browser.new_context(viewport={"width": 1400, "height": 2000}) for _ in NAMES]
        pages = [context.new_page() for context in contexts]
        try:
            _two_sessions(pages, url, root, tiny_model_dir, shots)
        except Exception:
            for name, page in zip(NAMES, pages):
                page.screenshot(path=str(shots / f"failure-{name}.png"), full_page=True)
                print(f"{name}: exceptions on the page: {_exceptions(page)}; {_launch_state(page)}")
            print(f"browser test failed; screenshots in {shots}")
            raise
        finally:
            browser.close()


def _two_sessions(pages, url: str, root: Path, model_dir: Path, shots: Path) -> None:
    for name, page in zip(NAMES, pages):
        _configure_run(page, url, model_dir, name)
    assert not root.is_dir() or not [p for p in root.iterdir() if not p.name.startswith(".")], "runs before launch"

    # The same instant in both sessions: one shared clock (one browser), one timer per page.
    when = pages[0].evaluate("() => Date.now()") + 1500
    for page in pages:
        _click_launch_at(page, when)
    launched = [_launch_message(page) for page in pages]
    snapshot = {run_id: _status(root, run_id) for run_id, _ in launched}
    clicks = [page.evaluate("() => window.__launched") for page in pages]
    for name, page in zip(NAMES, pages):
        page.screenshot(path=str(shots / f"train-{name}.png"), full_page=True)
    print(f"clicks at {clicks} (target {when}); launch messages {launched}; "
          f"states then {[(i, s.get('state')) for i, s in snapshot.items()]}")
    assert all(c >= 0 for c in clicks), f"a page had no Launch button when its timer fired: {clicks}"

    # Each session created its own run, with its own settings; nothing else was created.
    ids = [run_id for run_id, _ in launched]
    assert len(set(ids)) == 2, f"both sessions report the same run: {launched}"
    for name, run_id in zip(NAMES, ids):
        assert f"-{name}-" in run_id, f"session {name} reports run {run_id}"
        config = json.loads((root / run_id / "config.json").read_text())["train"]
        assert (config["name"], config["steps"], config["model"]) == (name, STEPS, str(model_dir)), config
    on_disk = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    assert on_disk == sorted(ids), f"run directories {on_disk}, sessions launched {ids}"

    # One slot: one session's run started, the other's waits queued while the first is active.
    words = sorted(word for _, word in launched)
    assert words == ["queued", "started"], f"launch messages with CALM_MAX_JOBS=1: {launched}"
    first = next(run_id for run_id, word in launched if word == "started")
    second = next(run_id for run_id, word in launched if word == "queued")
    assert snapshot[first]["state"] in (*ACTIVE, "finished"), snapshot[first]
    if snapshot[first]["state"] in ACTIVE:
        assert snapshot[second]["state"] == "queued" and not snapshot[second].get("pid"), snapshot[second]

    # Each Monitor page follows its own run to the end (the queued one through queued -> running -> finished).
    before = {name: _open_monitor(page, run_id) for name, page, run_id in zip(NAMES, pages, ids)}
    print(f"monitor progress at first: {before}")
    after = {}
    for name, page, run_id in zip(NAMES, pages, ids):
        after[name] = _wait_finished(page, run_id)
        page.wait_for_timeout(1500)
        page.screenshot(path=str(shots / f"monitor-{name}.png"), full_page=True)
    print(f"monitor progress at the end: {after}")

    # Both finished, one after the other, never at the same time.
    done = {run_id: _status(root, run_id) for run_id in ids}
    for run_id, status in done.items():
        assert status["state"] == "finished", (run_id, status)
        assert (root / run_id / "results.json").is_file(), run_id
    assert done[second]["started"] >= done[first]["ended"], (
        f"the runs overlapped with one job slot: {first} ended {done[first]['ended']}, "
        f"{second} started {done[second]['started']}")
    print(f"{first}: {done[first]['started'] - done[first]['created']:.1f}s queued, ran "
          f"{done[first]['ended'] - done[first]['started']:.1f}s; {second}: started "
          f"{done[second]['started'] - done[first]['ended']:.1f}s after it, ran "
          f"{done[second]['ended'] - done[second]['started']:.1f}s")
