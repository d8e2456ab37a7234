"""The practitioner's second hour, in a real browser (issue 40, "Done when").

One `streamlit run app/main.py` server on an empty workspace, headless Chromium at 1280 px,
the embedded model (SmolLM2-135M). The story: a failed upload first (the Split section then
shows no built-in set's plan as if it were the upload's), then the user's own 70 questions
as a CSV (written here from the capitals fact table, `calm_core.data.facts`), uploaded with
the mapping guessed and nothing typed; the page's suggested split taken in one click; on
Train, whose opening sentence describes that split, the advised k-fold on all labelled
items taken in one click; a short run launched and followed on Monitor to the end; on
Compare, the recommendation whose sentence states its reason, then selective answering at a
target error of 5%: the threshold, the answered fraction and the error among answered items,
each with its interval.

Why the walk meets a refusal first: 70 rows split as the page suggests, 39 / 41 / 20, leave 29
held-out items, what the default guarantee (Learn then Test, 10% with 95% probability) needs
(issue 49: the suggestion counts it); at 5% it needs 59. The refusal must
name its way out (conformal risk control, 19 items at 5%), and choosing it must give a real
threshold: the walk asserts both, and that the table's cells are the library's own
(`calm_core.results.selective.table_rows`).

Screenshots story-1..9 go to $CALM_SCREENSHOTS (default: a temporary folder):

    CALM_SCREENSHOTS=docs/screenshots CALM_REQUIRE_BROWSER=1 .venv/bin/python -m pytest tests/test_browser_story.py

Skips without chromium or playwright, unless CALM_REQUIRE_BROWSER=1 (as tests/test_browser.py).
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from calm_core.calibration.selective import CRC, DEFAULT_DELTA, crc_min_items, ltt_min_items
from calm_core.data.facts import CAPITALS
from calm_core.results.advice import recommendation_sentence
from calm_core.results.verdict import variant_label
from calm_core.runs.records import RunResults
from tests.test_browser import (CHROMIUM, CHROMIUM_ARGS, DATASET_UPLOAD, as_shown, _goto, _require_browser, _shots, fill_short_tiny_run,
                                wait_idle)
from tests.test_browser_domain import _assert_fits, _key, _recommendation_says_its_uncertainty, _shot
from tests.test_browser_sessions import _exceptions, empty_workspace_studio

pytestmark = [pytest.mark.browser, pytest.mark.embedded]  # it trains the embedded model

UPLOAD = "my_capitals"
N_ROWS = 70
FACTS = CAPITALS[:N_ROWS]  # one question per fact
SIZES = {"train": 27, "heldout": 29, "test": 14}  # the page's suggestion for 70 rows: 39 / 41 / 20 %
STEPS = 4  # a short run: the walk is about the pages, not the training
EVAL_ITEMS = SIZES["test"]  # the whole test split; the out-of-domain set as many
TARGET = 0.05  # under the default rule's reach on 29 items (it reaches 10%), over crc's
PERCENT_WITH_INTERVAL = re.compile(r"^\d+% \(\d+%-\d+%\)$")  # "93% (73%-98%)": selective.cell
LETTERS = "ABCD"


def _rows() -> list[dict[str, str]]:
    """The CSV's rows, `question, A, B, C, D, answer` (a letter): the right capital at a
    position cycling A..D (the split can stratify), three other facts' capitals as the wrong
    options. Deterministic."""
    rows = []
    for i, (country, capital) in enumerate(FACTS):
        wrong = [FACTS[(i + k) % N_ROWS][1] for k in (7, 19, 31)]
        position = i % 4
        options = wrong[:position] + [capital] + wrong[position:]
        rows.append({"question": f"What is the capital of {country}?", **dict(zip(LETTERS, options, strict=True)),
                     "answer": LETTERS[position]})
    return rows


def _write_csv(path: Path) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["question", *LETTERS, "answer"])
        writer.writeheader()
        writer.writerows(_rows())


@pytest.fixture()
def studio_workspace(tmp_path: Path, embedded_dir: Path):
    """A studio server on an empty workspace; yields (url, workspace)."""
    with empty_workspace_studio(tmp_path) as pair:
        yield pair


def test_the_practitioners_second_hour(studio_workspace, tmp_path: Path) -> None:
    _require_browser()
    from playwright.sync_api import sync_playwright

    url, workspace = studio_workspace
    shots = _shots()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        try:
            parts = _data(page, url, workspace, tmp_path, shots)
            run_id = _train(page, workspace, parts, shots)
            results = _monitor(page, workspace, run_id, shots)
            _compare(page, workspace, run_id, results, shots)
        except Exception:
            page.screenshot(path=str(shots / "failure-story.png"), full_page=True)
            print(f"exceptions on the page: {_exceptions(page)}; screenshot in {shots / 'failure-story.png'}")
            raise
        finally:
            browser.close()
    for step in range(1, 10):
        found = list(shots.glob(f"story-{step}-*.png"))
        assert len(found) == 1 and found[0].stat().st_size > 20_000, f"story-{step}: {found}"


def _data(page, url: str, workspace: Path, tmp_path: Path, shots: Path) -> dict[str, str]:
    """Data: a failed upload (no plan shown), the catalog fits, the 70 questions with the
    guessed mapping, saved; the suggested split in one click; the parts' names."""
    from playwright.sync_api import expect

    page.goto(f"{url}/data")
    page.get_by_role("heading", name="Data").first.wait_for(timeout=180_000)
    page.locator(_key("data_catalog")).locator('[data-testid="stDataFrame"]').wait_for(timeout=120_000)
    _assert_fits(page, "data_catalog")  # issue 40: the description column is not cut at the right edge
    # A file that cannot be read: an error, and no built-in set's split plan under it (issue 40).
    broken = tmp_path / "broken.csv"
    broken.write_text("question,answer\n")
    page.locator(DATASET_UPLOAD).set_input_files(str(broken))
    expect(page.get_by_text("Expected data rows in broken.csv, but it has none")).to_be_visible(timeout=120_000)
    wait_idle(page)
    expect(page.locator(_key("data_split_source")).get_by_role("combobox")).to_have_value("")
    expect(page.locator('[data-testid="stDataFrame"]')).to_have_count(1)  # the catalog; no plan
    expect(page.get_by_text("Items per part")).to_have_count(0)
    _shot(page, shots, "1-failed-upload", bottom=page.get_by_text("Save an upload above, or choose a dataset"),
          prefix="story")  # from the page's top: the catalog too

    upload = tmp_path / f"{UPLOAD}.csv"
    _write_csv(upload)
    page.locator(DATASET_UPLOAD).set_input_files(str(upload))
    page.get_by_text("Columns found:").wait_for(timeout=120_000)
    code = page.locator('[data-testid="stCode"]').first
    expect(code).to_contain_text("question=question, choices=A|B|C|D, answer=answer", timeout=60_000)
    metrics = {m.locator('[data-testid="stMetricLabel"]').inner_text().strip():
               m.locator('[data-testid="stMetricValue"]').inner_text().strip()
               for m in page.locator('[data-testid="stMetric"]').all()}
    assert metrics == {"Rows": str(N_ROWS), "Kept": str(N_ROWS), "Rejected": "0"}, metrics
    expect(page.get_by_label("Save as", exact=True)).to_have_value(UPLOAD)
    page.get_by_role("button", name="Save to the workspace").click()
    page.get_by_text(f"Saved as upload/{UPLOAD} ({N_ROWS} items)").wait_for(timeout=60_000)
    wait_idle(page)
    _shot(page, shots, "2-mapping", top=page.get_by_role("heading", name="Upload a dataset"),
          bottom=page.locator('[data-testid="stAlert"]').filter(has_text="Saved as"), prefix="story")

    # The split: the default 60/20/20 is warned about; the page's suggestion is one click.
    expect(page.locator(_key("data_split_source")).get_by_role("combobox")).to_have_value(f"upload/{UPLOAD}")
    suggestion = page.get_by_role("button", name=re.compile(r"^Use [0-9]+ . [0-9]+ . [0-9]+ %$"))  # "." for "/", which the selector parser refuses
    expect(suggestion).to_have_count(1, timeout=60_000)
    print(f"suggested: {suggestion.inner_text()!r}")
    suggestion.click()
    wait_idle(page)
    page.get_by_role("button", name="Split", exact=True).click()
    parts = {p: f"split/{UPLOAD}/{p}" for p in ("train", "heldout", "test")}
    page.get_by_text("Saved: " + ", ".join(parts.values())).wait_for(timeout=60_000)
    record = json.loads(next(workspace.rglob("split.json")).read_text())
    assert record["source"] == f"upload/{UPLOAD}" and record["sizes"] == SIZES, record
    # The docstring's arithmetic: S_V holds what the default guarantee needs at 10%, not at 5%; over CRC's.
    assert ltt_min_items(0.10, DEFAULT_DELTA) == SIZES["heldout"]
    assert crc_min_items(TARGET) < SIZES["heldout"] < ltt_min_items(TARGET, DEFAULT_DELTA)
    assert not _exceptions(page), _exceptions(page)
    _shot(page, shots, "3-split", top=page.get_by_role("heading", name="Split a dataset"),
          bottom=page.get_by_role("button", name="Calibrate this dataset"), prefix="story")
    page.get_by_role("button", name="Calibrate this dataset").click()
    return parts


def _train(page, workspace: Path, parts: dict[str, str], shots: Path) -> str:
    """Train: the opening sentence describes the user's split; the advised k-fold in one
    click; a short run on the embedded model; its id."""
    from playwright.sync_api import expect

    page.get_by_role("heading", name="Train").first.wait_for(timeout=180_000)
    opening = page.locator('[data-testid="stMarkdown"]').filter(has_text="Fine-tune the model").first
    expect(opening).to_contain_text(f"on your own questions, upload/{UPLOAD}", timeout=60_000)
    expect(opening).not_to_contain_text("chemical-symbols")  # issue 40: not the default run's words
    expect(page.locator(_key("train_data")).get_by_role("combobox")).to_have_value(parts["train"])
    expect(page.locator(_key("train_heldout")).get_by_role("combobox")).to_have_value(parts["heldout"])
    labelled = SIZES["train"] + SIZES["heldout"]
    advised = page.get_by_role("button", name=f"Use k-fold on all {labelled} labelled items")
    expect(advised).to_have_count(1, timeout=120_000)
    advised.click()
    wait_idle(page)
    expect(advised).to_have_count(0)  # it acted
    expect(page.get_by_role("radio", name=re.compile("^all labelled items, k-fold"))).to_be_checked()
    fill_short_tiny_run(page, None, STEPS, EVAL_ITEMS, "story")  # None: the embedded model, the page's default
    expect(page.locator(_key("train_data")).get_by_role("combobox")).to_have_value(parts["train"])
    page.locator('[data-testid="stMetric"]').filter(has_text="Estimated time").wait_for(timeout=120_000)
    assert not _exceptions(page), _exceptions(page)
    _shot(page, shots, "4-train", bottom=page.get_by_role("button", name="Launch training"), prefix="story")
    page.get_by_role("button", name="Launch training").click()
    page.get_by_text("Follow it on the Monitor page").wait_for(timeout=180_000)
    text = page.locator('[data-testid="stAlert"]').filter(has_text=re.compile(r"Run\s+\S+\s+started")).first.inner_text()
    run_id = re.search(r"Run\s+(\S+)\s+started", text).group(1)
    train = json.loads((workspace / "runs" / run_id / "config.json").read_text())["train"]
    assert (train["model"], train["calibrate_on"], train["heldout_data"]) == ("embedded", "all", parts["heldout"]), train
    return run_id


def _monitor(page, workspace: Path, run_id: str, shots: Path) -> dict:
    """Monitor: follow the run to its end; the recommendation's sentence on the page."""
    from playwright.sync_api import expect

    _goto(page, "Monitor")
    expect(page.locator(_key("monitor_select")).get_by_role("combobox")).to_have_value(
        re.compile("^" + re.escape(run_id) + " · "), timeout=120_000)
    page.get_by_role("heading", name="Final evaluation").wait_for(timeout=1_200_000)
    expect(page.locator('[data-testid="stProgress"]').first).to_contain_text("finished", timeout=60_000)
    status = json.loads((workspace / "runs" / run_id / "status.json").read_text())
    assert status["state"] == "finished", status
    print(f"run {run_id} ran {status['ended'] - status['started']:.1f}s")
    results = json.loads((workspace / "runs" / run_id / "results.json").read_text())
    expect(page.get_by_text(as_shown(recommendation_sentence(RunResults.from_json(results)))).first).to_be_visible(
        timeout=60_000
    )
    assert not _exceptions(page), _exceptions(page)
    _shot(page, shots, "5-monitor", bottom=page.get_by_text("Compare reliability diagrams"), prefix="story")
    # The trade-off chart: every reference variant a marker of its own, named in the caption (issue 40).
    page.get_by_role("tab", name="Trade-off").click()
    chart = page.locator(_key("monitor_tradeoff"))
    chart.wait_for(timeout=60_000)
    key = page.get_by_text("star: the selected step")
    for name in ("x: the model as it is", "diamond: temperature scaling", "square: vector scaling"):
        expect(key).to_contain_text(name)
    _shot(page, shots, "6-tradeoff", top=page.get_by_role("tab", name="Trade-off"), bottom=key, prefix="story")
    return results


def _compare(page, workspace: Path, run_id: str, results: dict, shots: Path) -> None:
    """Compare: the recommendation states its reason; selective answering at 5%: the
    default guarantee's refusal names its way out, which then gives the threshold and the
    table, each figure with its interval."""
    from playwright.sync_api import expect

    _goto(page, "Compare")
    expect(page.locator(_key("compare_runs"))).to_contain_text(run_id, timeout=120_000)
    sentence = recommendation_sentence(RunResults.from_json(results))
    _recommendation_says_its_uncertainty(results)  # the reason words: noise, too few, no gain, or a sure gain
    assert f"on {SIZES['train'] + SIZES['heldout']} labelled items" in sentence or \
        f"on {SIZES['heldout']} held-out items" in sentence, sentence  # on which items, in words
    shown = page.get_by_text(sentence).first
    expect(shown).to_be_visible(timeout=120_000)
    assert not _exceptions(page), _exceptions(page)
    evidence = page.get_by_text("The recommendation's evidence").first  # the caption under its S_V evidence
    _shot(page, shots, "7-compare", top=page.get_by_role("heading", name="Which model to use"),
          bottom=evidence, prefix="story")

    section = page.locator(_key("compare_selective"))
    section.scroll_into_view_if_needed(timeout=60_000)
    target = section.get_by_label("Target error (%)", exact=True)
    target.fill(str(round(TARGET * 100)))
    target.press("Enter")
    target.blur()  # the focus ring is red: in a picture it reads as an error
    wait_idle(page)
    expect(target).to_have_value(str(round(TARGET * 100)))
    refusal = section.locator('[data-testid="stAlert"]').filter(has_text="no threshold").first
    expect(refusal).to_be_visible(timeout=120_000)
    said = refusal.inner_text()
    print(f"refusal: {said!r}")
    needed = ltt_min_items(TARGET, DEFAULT_DELTA)
    assert f"Expected at least {needed} held-out items" in said and f"but got {SIZES['heldout']}" in said, said
    assert f"conformal risk control: {crc_min_items(TARGET)} items" in said, said  # the way out, named
    expect(section.locator('[data-testid="stTable"]')).to_have_count(0)
    _shot(page, shots, "8-refusal", top=section, bottom=section.get_by_role("button", name="Use this threshold"),
          prefix="story")

    section.get_by_text("error among all, on average (conformal risk control)").click()
    wait_idle(page)
    table = section.locator('[data-testid="stTable"]')
    expect(table).to_have_count(1, timeout=120_000)
    expect(section.locator('[data-testid="stAlert"]').filter(has_text="no threshold")).to_have_count(0)
    _selective_table_is_the_librarys(section, workspace, run_id)
    assert not _exceptions(page), _exceptions(page)
    _shot(page, shots, "9-selective", top=section, bottom=section.get_by_role("button", name="Use this threshold"),
          prefix="story")


def _selective_table_is_the_librarys(section, workspace: Path, run_id: str) -> None:
    """The threshold line and each row of the table as `calm selective` computes them; on the
    test split, the answered fraction and the error among answered with their intervals."""
    from calm_core.runs.rundir import RunDir
    from calm_core.results import selective as sel

    run = RunDir.open(workspace / "runs" / run_id)  # not RunDir.at: this process's workspace is another
    variant = sel.default_variant(run)  # the page's first: the recommended variant
    report = sel.selective_report(run, sel.SelectiveRequest(variant, TARGET, CRC))
    choice = report.choices[variant]
    assert choice.threshold is not None, choice
    text = section.inner_text()
    line = sel.choice_line(choice)
    print(f"threshold: {line!r}")
    assert f"threshold {sel.threshold_text(choice.threshold)}, answers " in text, text
    assert re.match(r"^\d\.\d{3}$", sel.threshold_text(choice.threshold)), choice.threshold  # a real threshold
    cells = [[c.inner_text().strip() for c in row.locator("td, th").all()]
             for row in section.locator('[data-testid="stTable"] tr').all()]
    header, body = cells[0], cells[1:]
    print(f"selective table: {header}")
    for row in body:
        print(f"    {row}")
    expected = sel.table_rows(report)
    assert header == list(expected[0]) and body == [list(r.values()) for r in expected], (expected, body)
    test_set = f"split/{UPLOAD}/test"
    mine = next(r for r in expected if r["evaluation set"] == test_set and r["variant"] == variant_label(variant))
    assert PERCENT_WITH_INTERVAL.match(mine["answered"]), mine
    assert PERCENT_WITH_INTERVAL.match(mine["error among answered"]), mine  # something answered on test
