"""The Data page imports lm-evaluation-harness samples in a real browser (issue 50): a real
`lm_eval --log_samples` run of the tiny model on built-in capitals questions, its output
folder typed into "Results of lm-evaluation-harness", and the table read back against
what `calm eval --from-lm-eval` computes from the same folder: the task, its questions and
the accuracy of each form. Its screenshot goes to $CALM_SCREENSHOTS
(docs/screenshots/data_lm_eval.png).

Skips without chromium or playwright unless CALM_REQUIRE_BROWSER=1, and without lm_eval
outside CI (tests/test_lm_eval_samples.py says why).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_browser import CHROMIUM, CHROMIUM_ARGS, _require_browser, _shots, running_studio
from tests.test_lm_eval_samples import run_harness

pytestmark = pytest.mark.browser
TABLE = '[data-testid="stDataFrame"]'
# the grid draws on a canvas; its accessible table holds the cells' text for screen readers
CELLS_JS = (
    "el => [...el.querySelectorAll('th, td, [role=gridcell], [role=columnheader]')]"
    ".map(c => c.textContent).join(' | ')"
)


def test_data_page_imports_a_harness_folder(tiny_model_dir: Path, tmp_path: Path) -> None:
    _require_browser()
    from playwright.sync_api import sync_playwright

    from calm_core.scoring.evaluate import result_row
    from calm_core.scoring.lm_eval_samples import FORMS, read_harness_folder

    _, out, n_items = run_harness(tiny_model_dir, tmp_path, n_items=12)
    tasks = read_harness_folder(str(out))
    (name, task), = tasks.items()
    expected = {metric: result_row(task.scores(metric), name, "base")["acc"] for metric in FORMS}
    shots = _shots()
    with running_studio(tmp_path, tmp_path / "workspace") as url, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1280, "height": 2400})
        try:
            page.goto(f"{url}/data")
            page.get_by_role("heading", name="Results of lm-evaluation-harness").wait_for(timeout=180_000)
            field = page.get_by_label("Folder on this machine (the harness's --output_path)")
            field.fill(str(out))
            field.press("Enter")
            page.get_by_text(f"calm eval --from-lm-eval {out}", exact=False).wait_for(timeout=120_000)
            table = page.locator(TABLE).last
            table.scroll_into_view_if_needed()
            page.wait_for_timeout(1500)
            page.screenshot(path=str(shots / "data_lm_eval.png"), full_page=True)
            assert not page.locator('[data-testid="stException"]').count()
            csv = table.evaluate(CELLS_JS)
        finally:
            browser.close()
    cells = csv.split(" | ")
    header, body = cells[:10], cells[10:]
    rows = [dict(zip(header, body[i : i + 10], strict=True)) for i in range(0, len(body), 10)]
    assert {row["form"] for row in rows} == set(FORMS) and all(row["task"] == name for row in rows), rows
    for row in rows:  # the page's figures are the library's, and the harness's own accuracy beside them
        assert int(row["n"]) == n_items and float(row["acc"]) == pytest.approx(expected[row["form"]], abs=1e-9)
        assert float(row["harness acc"]) == pytest.approx(float(row["acc"]), abs=1e-9)
