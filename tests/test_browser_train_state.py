"""One state per page, in a real browser: upload, Train, another page, Train again, Launch.

One `streamlit run app/main.py` server on an empty workspace, headless Chromium, the
embedded model (SmolLM2-135M). A CSV of 70 questions is uploaded on Data with the guessed
mapping, split as the page suggests, and sent to Train with *Calibrate this dataset*. The
person then opens Monitor and comes back to Train: Streamlit forgets the values of widgets
not drawn on a run, so the pickers went back to the built-in demo under a banner that still
named the upload, and Launch trained on the demo. The walk checks that the banner, the
pickers and the launched run's config.json all name the uploaded set's parts.

    CALM_REQUIRE_BROWSER=1 .venv/bin/python -m pytest tests/test_browser_train_state.py

The fast guard of the same story (AppTest, no browser) is tests/test_train_state.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.test_browser import DATASET_UPLOAD, _goto, fill_short_tiny_run, wait_idle
from tests.test_browser_domain import _key
from tests.test_browser_sessions import _exceptions, empty_workspace_studio
from tests.test_browser_story import _write_csv

pytestmark = [pytest.mark.browser, pytest.mark.embedded]  # it launches a run of the embedded model

UPLOAD = "mine"


@pytest.fixture()
def studio_workspace(tmp_path: Path, embedded_dir: Path):
    """A studio server on an empty workspace; yields (url, workspace)."""
    with empty_workspace_studio(tmp_path) as pair:
        yield pair


def test_train_page_launches_what_it_shows_after_another_page(studio_workspace, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    from tests.test_browser import CHROMIUM, CHROMIUM_ARGS

    url, workspace = studio_workspace
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        try:
            record = _upload_and_split(page, url, workspace, tmp_path)
            parts = record["names"]
            _train_shows(page, record)
            _goto(page, "Monitor")
            wait_idle(page)
            _goto(page, "Train")
            _train_shows(page, record)  # the same state after the visit elsewhere
            train = _launch(page, workspace)
        except Exception:
            shot = tmp_path / "failure-train-state.png"
            page.screenshot(path=str(shot), full_page=True)
            print(f"exceptions on the page: {_exceptions(page)}; screenshot in {shot}")
            raise
        finally:
            browser.close()
    assert (train["train_data"], train["heldout_data"]) == (parts["train"], parts["heldout"]), train
    assert train["eval_data"][0] == parts["test"], train


def _upload_and_split(page, url: str, workspace: Path, tmp_path: Path) -> dict:
    """Data: the CSV with the guessed mapping, saved; the page's suggested split (when it
    offers one), saved; *Calibrate this dataset*. Returns the saved split.json."""
    from playwright.sync_api import expect

    page.goto(f"{url}/data")
    page.get_by_role("heading", name="Data").first.wait_for(timeout=180_000)
    upload = tmp_path / f"{UPLOAD}.csv"
    _write_csv(upload)
    page.locator(DATASET_UPLOAD).set_input_files(str(upload))
    page.get_by_text("Columns found:").wait_for(timeout=120_000)
    expect(page.get_by_label("Save as", exact=True)).to_have_value(UPLOAD, timeout=60_000)
    page.get_by_role("button", name="Save to the workspace").click()
    page.get_by_text(f"Saved as upload/{UPLOAD}").wait_for(timeout=60_000)
    wait_idle(page)
    suggestion = page.get_by_role("button", name=re.compile(r"^Use [0-9]+ . [0-9]+ . [0-9]+ %$"))
    if suggestion.count():
        suggestion.click()
        wait_idle(page)
    page.get_by_role("button", name="Split", exact=True).click()
    page.get_by_text("Saved: split/").wait_for(timeout=60_000)
    record = json.loads(next(workspace.rglob("split.json")).read_text())
    assert record["source"] == f"upload/{UPLOAD}", record
    page.get_by_role("button", name="Calibrate this dataset").click()
    return record


def _train_shows(page, record: dict) -> None:
    """Train: the pickers hold the split's parts, and the banner above them names it."""
    from playwright.sync_api import expect

    page.get_by_role("heading", name="Train").first.wait_for(timeout=180_000)
    wait_idle(page)
    parts, sizes = record["names"], record["sizes"]
    expect(page.locator(_key("train_data")).get_by_role("combobox")).to_have_value(parts["train"], timeout=60_000)
    expect(page.locator(_key("train_heldout")).get_by_role("combobox")).to_have_value(parts["heldout"])
    expect(page.locator(_key("train_evals"))).to_contain_text(parts["test"])
    banner = page.locator('[data-testid="stAlert"]').filter(has_text="Calibrating upload/")
    expect(banner).to_have_count(1)
    counts = f"({sizes['train']} / {sizes['heldout']} / {sizes['test']} items)"
    expect(banner).to_contain_text(f"Calibrating upload/{UPLOAD}: S_T, S_V and the test part come from its split")
    expect(banner).to_contain_text(counts)
    assert not _exceptions(page), _exceptions(page)


def _launch(page, workspace: Path) -> dict:
    """A short run on the embedded model, launched; its config.json's `train` section."""
    fill_short_tiny_run(page, None, 2, 8, "state")  # None: the embedded model, the page's default
    page.locator('[data-testid="stMetric"]').filter(has_text="Estimated time").wait_for(timeout=120_000)
    page.get_by_role("button", name="Launch training").click()
    page.get_by_text("Follow it on the Monitor page").wait_for(timeout=180_000)
    said = page.locator('[data-testid="stAlert"]').filter(has_text=re.compile(r"Run\s+\S+\s+(started|queued)"))
    run_id = re.search(r"Run\s+(\S+)\s+(started|queued)", said.first.inner_text()).group(1)
    return json.loads((workspace / "runs" / run_id / "config.json").read_text())["train"]
