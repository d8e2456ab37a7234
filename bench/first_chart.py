"""How long a fresh studio takes to show a page's first chart, in headless Chromium.

    PYTHONPATH=$PWD .venv/bin/python bench/first_chart.py [--page Learn] [--repeat 1]
        [--json bench/results/first_chart.json]

Each repeat starts its own `streamlit run app/main.py` (tests/test_browser.py
`running_studio`) over an empty workspace, so nothing is cached in the server's memory;
what is on disk (the converted embedded model, the quiz scores `python -m
calm_core.scoring.score_cache` writes) is kept, as on a user's machine after set-up. Once
the server answers its health check, one Chromium page opens the page and the bench
notes the first spinner or progress bar (something says it is working; none when the
chart comes first), the first Plotly chart drawn (an `svg.main-svg` inside a
`stPlotlyChart`), and the longest stretch before it in which the page showed neither (a
silent wait; it counts from the navigation, so a blank page at first counts too). Prints
one line per repeat and writes `--json`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WORKING = '[data-testid="stSpinner"], [data-testid="stProgress"]'
CHART = '[data-testid="stPlotlyChart"] svg.main-svg'
POLL_S = 0.2


def measure_once(page_title: str, timeout_s: float) -> dict[str, float | None]:
    """One fresh server, one page: seconds from navigation to the first sign of work, to
    the first chart (None: never within `timeout_s`), and the longest silent stretch."""
    from playwright.sync_api import sync_playwright

    from tests.test_browser import CHROMIUM, CHROMIUM_ARGS, running_studio

    with tempfile.TemporaryDirectory(prefix="calm-first-chart-") as tmp:
        with running_studio(Path(tmp), Path(tmp) / "workspace") as url:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
                page = browser.new_page(viewport={"width": 1280, "height": 1600})
                start = time.monotonic()
                page.goto(url)
                if page_title != "Learn":
                    page.get_by_role("link", name=page_title).first.click()
                seen = _watch(page, start, timeout_s)
                browser.close()
    return seen


def _watch(page, start: float, timeout_s: float) -> dict[str, float | None]:
    """Polled every POLL_S until the first chart: when a spinner or progress bar was first
    seen, when the chart came, and the longest stretch in between with neither (a wait
    that says nothing). None: not seen."""
    working = chart = None
    silent_since, longest = 0.0, 0.0
    while chart is None and time.monotonic() - start < timeout_s:
        now = time.monotonic() - start
        if page.locator(CHART).count():
            chart = round(now, 1)
        elif page.locator(WORKING).count():
            working = round(now, 1) if working is None else working
            silent_since = now
        longest = max(longest, now - silent_since)
        time.sleep(POLL_S)
    return {"first_spinner_s": working, "first_chart_s": chart, "longest_silent_s": round(longest, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--page", default="Learn", help="a sidebar link's text (Learn: the default page)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per repeat")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    rows = []
    for i in range(args.repeat):
        row = {"page": args.page, "repeat": i + 1, **measure_once(args.page, args.timeout)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
