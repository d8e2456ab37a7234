"""Every page at 1280 px in headless Chromium: no chart title clipped or under a toolbar.

One `streamlit run app/main.py` on a workspace holding one finished short CALM run of the
tiny model (trained first with `calm train`, so Monitor, Compare and the Playground have
something to show) and one upload with long answers and rejected rows (the Data page's
preview). Each page is opened from its URL and waited for with real-time waits (a cold
server renders blank at first); every expander is opened so the charts behind it are
drawn, and every tab shown in turn; then each Plotly chart is hovered (its toolbars show on hover) and measured:

- its title's box lies inside the chart (a title longer than the chart is cut at its edge);
- its title's box meets neither Plotly's mode bar nor Streamlit's element toolbar, nor
  the plot area or a label above it (the selected step's);
- its legend's box meets no axis title;

and no static table's cell (st.table) is narrower than its text.

A screenshot of each page goes to $CALM_SCREENSHOTS (default: a temporary folder):

    CALM_SCREENSHOTS=docs/screenshots .venv/bin/python -m pytest tests/test_browser_layout.py

Skips without chromium or playwright, unless CALM_REQUIRE_BROWSER=1 (as tests/test_browser.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_browser import CHROMIUM, CHROMIUM_ARGS, DATASET_UPLOAD, _require_browser, _shots, running_studio, wait_idle
from tests.test_browser_sessions import _exceptions

pytestmark = [pytest.mark.browser]

WIDTH = 1280
PAGES = {"learn": "", "data": "data", "train": "train", "monitor": "monitor", "compare": "compare",
         "playground": "playground"}
HEADINGS = {"learn": "Overconfidence, live", "data": "Data", "train": "Train", "monitor": "Monitor",
            "compare": "Compare", "playground": "Playground"}
LONG_ANSWER = "the answer that runs on and on across the whole cell so that a narrow column would cut it"
TRAIN = ["--method", "calm", "--name", "layout", "--steps", "6", "--set", "eval_every=2",
         "--train-data", "builtin/capitals/train", "--heldout-data", "builtin/capitals/validation",
         "--eval-data", "builtin/capitals/test", "--train-limit", "8", "--heldout-limit", "12", "--eval-limit", "12",
         "--scoring", "letter", "--batch-size", "2", "--set", "heldout_batch_size=2"]

# Per Plotly chart on the page: the boxes the checks compare (null where the chart has none).
CHART_BOXES_JS = """
() => [...document.querySelectorAll('[data-testid="stPlotlyChart"]')].map(c => {
  const box = e => { if (!e) return null; const r = e.getBoundingClientRect();
                     return r.width && r.height ? {x: r.x, y: r.y, w: r.width, h: r.height} : null; };
  const holder = c.closest('[data-testid="stElementContainer"]') || c.parentElement;
  return {
    title: c.querySelector('.gtitle') ? c.querySelector('.gtitle').textContent : '',
    titleBox: box(c.querySelector('.gtitle')),
    chart: box(c.querySelector('svg.main-svg')),
    modebar: box(c.querySelector('.modebar')),
    toolbar: box(holder.querySelector('[data-testid="stElementToolbar"]')),
    plot: box(c.querySelector('.draglayer .nsewdrag')),
    labels: [...c.querySelectorAll('.annotation')].map(box).filter(b => b),
    legend: box(c.querySelector('.legend .bg')),
    axisTitles: [...c.querySelectorAll('.g-xtitle text, .g-x2title text, .g-ytitle text, .g-y2title text')]
                .map(box).filter(b => b),
  };
})
"""


# Table cells (st.table: static, wrapping) whose text is wider than the cell: cut off.
CUT_CELLS_JS = """
() => [...document.querySelectorAll('[data-testid="stTable"] td, [data-testid="stTable"] th')]
  .filter(c => c.offsetParent && c.scrollWidth > c.clientWidth + 1).map(c => c.innerText.slice(0, 80))
"""


def overlap(a: dict | None, b: dict | None) -> bool:
    """Whether two boxes share more than a pixel of area."""
    if not a or not b:
        return False
    return min(a["x"] + a["w"], b["x"] + b["w"]) - max(a["x"], b["x"]) > 1 and \
        min(a["y"] + a["h"], b["y"] + b["h"]) - max(a["y"], b["y"]) > 1


def inside(inner: dict | None, outer: dict | None) -> bool:
    """Whether `inner` lies within `outer` (a pixel of slack for anti-aliasing)."""
    if not inner or not outer:
        return True
    return inner["x"] >= outer["x"] - 1 and inner["x"] + inner["w"] <= outer["x"] + outer["w"] + 1


def layout_problems(charts: list[dict]) -> list[str]:
    """What is wrong with each measured chart, in words (empty: nothing)."""
    problems = []
    for chart in charts:
        name = repr(chart["title"] or "(untitled chart)")
        if not inside(chart["titleBox"], chart["chart"]):
            problems.append(f"{name}: the title runs past the chart's edge (clipped)")
        for bar in ("modebar", "toolbar"):
            if overlap(chart["titleBox"], chart[bar]):
                problems.append(f"{name}: the title is under the {bar}")
        if overlap(chart["titleBox"], chart["plot"]):
            problems.append(f"{name}: the title runs into the plot area")
        if any(overlap(chart["titleBox"], label) for label in chart["labels"]):
            problems.append(f"{name}: a label is written over the title")
        if any(overlap(chart["legend"], axis) for axis in chart["axisTitles"]):
            problems.append(f"{name}: the legend covers an axis title")
    return problems


def test_overlap_and_inside_read_boxes_as_meant() -> None:
    a = {"x": 0, "y": 0, "w": 100, "h": 20}
    assert overlap(a, {"x": 90, "y": 10, "w": 50, "h": 50}) and not overlap(a, {"x": 100, "y": 0, "w": 5, "h": 5})
    assert inside({"x": 5, "y": 0, "w": 90, "h": 5}, a) and not inside({"x": 5, "y": 0, "w": 120, "h": 5}, a)
    assert layout_problems([{"title": "t", "titleBox": a, "chart": a, "modebar": a, "toolbar": None, "plot": None,
                             "labels": [], "legend": None, "axisTitles": []}]) == ["'t': the title is under the modebar"]


@pytest.fixture()
def workspace(tmp_path: Path, tiny_model_dir: Path) -> Path:
    """A workspace with one finished short CALM run of the tiny model."""
    workspace = tmp_path / "workspace"
    env = {**os.environ, "CALM_WORKSPACE": str(workspace)}
    done = subprocess.run([sys.executable, "-m", "calm_core.cli", "train", "--model", str(tiny_model_dir), *TRAIN],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return workspace


def _upload_file(tmp_path: Path) -> Path:
    """A CSV whose answers are long sentences, with two rows the loader rejects."""
    path = tmp_path / "long_answers.csv"
    rows = ["question,A,B,C,label"]
    rows += [f"Question {i}?,{LONG_ANSWER} {i},short {i},other {i},A" for i in range(12)]
    rows += ["A row without options,,,,A", "A row whose label names no option,x,y,z,Q"]
    path.write_text("\n".join(rows) + "\n")
    return path


def _open(page, url: str, name: str) -> None:
    """The page from its URL, its heading, and the end of its script run (real-time waits)."""
    page.goto(f"{url}/{PAGES[name]}")
    page.get_by_role("heading", name=HEADINGS[name]).first.wait_for(timeout=180_000)
    wait_idle(page)


def _open_expanders(page) -> None:
    """Every closed expander opened, so the charts inside are drawn and measured."""
    closed = page.locator('[data-testid="stExpander"] details:not([open]) > summary')
    for _ in range(40):  # opening one can draw more (a chart, another expander)
        if not closed.count():
            break
        closed.first.click()
        page.wait_for_timeout(400)
    wait_idle(page)


def _each_tab(page):
    """Yields "" for a page without tabs, else each tab's name once it is shown (the
    charts of a hidden tab are not drawn)."""
    tabs = page.get_by_role("tab")
    if not tabs.count():
        yield ""
        return
    for i in range(tabs.count()):
        tabs.nth(i).click()
        wait_idle(page)
        yield "".join(c if c.isalnum() else "_" for c in tabs.nth(i).inner_text().strip().lower())


def _measure(page) -> list[dict]:
    """Each chart hovered in turn (its toolbars appear) and measured while hovered."""
    measured = []
    for i, chart in enumerate(page.locator('[data-testid="stPlotlyChart"]').all()):
        if not chart.is_visible():
            continue
        chart.scroll_into_view_if_needed()
        chart.hover(position={"x": 20, "y": 20})
        page.wait_for_timeout(400)
        measured.append(page.evaluate(CHART_BOXES_JS)[i])
    return measured


def _screenshot(page, path: Path) -> None:
    """The whole main area: Streamlit scrolls it inside one viewport, so the viewport
    grows to the content's height for the picture."""
    height = page.evaluate("() => { const m = document.querySelector('[data-testid=\"stMainBlockContainer\"]');"
                           " return m ? Math.ceil(m.getBoundingClientRect().height + 160) : 900; }")
    size = page.viewport_size
    page.set_viewport_size({"width": size["width"], "height": max(size["height"], min(height, 6000))})
    page.wait_for_timeout(2000)
    page.screenshot(path=str(path))
    page.set_viewport_size(size)
    page.wait_for_timeout(500)


def test_every_page_at_1280_px_has_whole_chart_titles(workspace: Path, tmp_path: Path) -> None:
    _require_browser()
    from playwright.sync_api import sync_playwright

    shots = _shots()
    problems: dict[str, list[str]] = {}
    with running_studio(tmp_path, workspace) as url, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": WIDTH, "height": 1000})
        try:
            for name in PAGES:
                _open(page, url, name)
                if name == "data":
                    page.locator(DATASET_UPLOAD).set_input_files(str(_upload_file(tmp_path)))
                    page.get_by_text("Why 2 rows were rejected").first.wait_for(timeout=60_000)
                    wait_idle(page)
                found = []
                for tab in _each_tab(page):
                    _open_expanders(page)
                    assert not _exceptions(page), (name, tab, _exceptions(page))
                    found += layout_problems(_measure(page))
                    found += [f"table cell cut off: {text!r}" for text in page.evaluate(CUT_CELLS_JS)]
                    _screenshot(page, shots / f"page-{name}{'-' + tab if tab else ''}.png")
                if found:
                    problems[name] = sorted(set(found))
        except Exception:
            page.screenshot(path=str(shots / "failure-layout.png"), full_page=True)
            raise
        finally:
            browser.close()
    assert not problems, f"{problems} (screenshots in {shots})"
