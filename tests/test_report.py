"""The shareable HTML report of a run (calm_core.results.report): one well-formed, offline
document (no script, no external URL) holding the run's results table, settings, one
reliability diagram per variant and set, the alpha and BOME summaries; user strings are
escaped; a run without results.json is refused.

One calm run (options scope, so alpha vectors are logged) is trained once for the module
on the tiny random model; tests that damage it work on a copy. The open-answer run is
written by hand (its files, not its training), to test the report's open-QA paths fast.
"""

from __future__ import annotations

import math
import shutil
from html import escape
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from calm_core.calibration import metrics
from calm_core.calibration.metrics.columns import interval_names
from calm_core.io import atomic_write_json
from calm_core.runs.layout import predictions_path, write_predictions
from calm_core.runs.rundir import RunDir
from calm_core.results.report import run_report_html
from calm_core.results.report_svg import OVER, UNDER, WHISKER, reliability_svg
from calm_core.results.curves import bome_line, bome_summary
from tests.test_trainer import fresh_lm, small_config

MALICIOUS = "<script>alert(1)</script>"
VOID = {"meta", "br", "hr", "img", "input", "link", "col", "wbr", "area", "base", "source"}


class Document(HTMLParser):
    """Checks nesting (every end tag closes the innermost open one) and collects the
    tags, attributes and the metrics table's cells."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.tags: list[tuple[str, dict]] = []
        self.rows: list[list[str]] = []
        self._in_cell = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "tr":
            self.rows.append([])
        self._in_cell = tag in ("td", "th")
        if self._in_cell and self.rows:
            self.rows[-1].append("")
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()
        if tag in ("td", "th"):
            self._in_cell = False

    def handle_data(self, data: str) -> None:
        if self._in_cell and self.rows and self.rows[-1]:
            self.rows[-1][-1] += data


def parse(text: str) -> Document:
    doc = Document()
    doc.feed(text)
    doc.close()
    return doc


@pytest.fixture(scope="module")
def finished_run(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> RunDir:
    """A finished calm run as `calm train` writes it (config.json with train + environment)."""
    from calm_core.training.loop import train
    from calm_core.launch import create_run

    cfg = small_config(steps=3, eval_every=2, heldout_limit=12, scope="options", name="report run",
                       model=str(tiny_model_dir))  # 12 S_V items: enough for the ts variant (>= 10)
    run = create_run(cfg, tmp_path_factory.mktemp("report-runs"))
    assert train(cfg, run=run, lm=fresh_lm(tiny_model_dir)).state == "finished"
    return run


@pytest.fixture()
def run_copy(finished_run: RunDir, tmp_path: Path) -> RunDir:
    target = tmp_path / finished_run.run_id
    shutil.copytree(finished_run.path, target)
    return RunDir.open(target)


@pytest.fixture(scope="module")
def report(finished_run: RunDir) -> str:
    return run_report_html(finished_run)


def test_report_is_one_well_formed_offline_document(report: str) -> None:
    assert report.startswith("<!DOCTYPE html>") and report.count("<html") == 1 and report.rstrip().endswith("</html>")
    doc = parse(report)
    assert not doc.errors and doc.stack == []
    assert "<script" not in report.lower() and "http://" not in report and "https://" not in report
    linked = [a.get("src") or a.get("href") for _, a in doc.tags if a.get("src") or a.get("href")]
    assert linked == []  # nothing to fetch: styles inline, figures inline SVG
    assert 5_000 < len(report.encode()) < 200_000


def test_report_holds_the_results_table_as_results_json_has_it(finished_run: RunDir, report: str) -> None:
    results = finished_run.results().rows
    assert {r["variant"] for r in results} == {"base", "ts", "vs", "calm", "calm_theta_only"}
    from calm_core.calibration.metrics.columns import table_columns

    declared = list(table_columns("mcqa"))  # the one column list (pinned in tests/test_calibrators.py)
    table = {(cells[0], cells[1]): cells for cells in parse(report).rows if len(cells) == len(declared)}
    header = table.pop(("dataset", "variant"))
    assert header == declared
    for row in results:
        cells = dict(zip(header, table[(row["dataset"], row["variant"])]))
        assert cells["n"] == str(row["n"])
        for name in header[3:]:
            value = row[name]
            assert cells[name] == ("–" if value != value else f"{value:.4f}"), name  # 4 decimals; nan as a dash
    calm = next(r for r in results if r["variant"] == "calm")
    assert f"<b>calm</b>: acc {calm['acc']:.3f}" in report  # the diagram's caption agrees with the table


def test_report_draws_one_reliability_diagram_per_variant_and_set(finished_run: RunDir, report: str) -> None:
    results = finished_run.results().rows
    section = report[report.index('id="reliability"'):report.index('id="alpha"')]
    assert section.count("<svg") == len(results)
    for row in results:
        assert f"<b>{row['variant']}</b>" in section
    assert "builtin/capitals/test" in section
    # issue 40: each diagram says the ECE that noise alone gives at its size, and where its own stands
    assert section.count("ECE from noise alone at ") == len(results)
    assert section.count(" is within that.") + section.count(" is beyond that.") == len(results)


def test_report_names_settings_alpha_and_bome(finished_run: RunDir, report: str) -> None:
    train = finished_run.config.train
    records = finished_run.read_metrics()
    assert "CALM report: " + finished_run.run_id + " (report run)" in report
    settings = {cells[0]: cells[1] for cells in parse(report).rows if len(cells) == 2}
    assert settings["method"] == "calm" and settings["head scope (effective)"] == "options"
    assert settings["scoring rule"] == "letter, chat template off"
    assert settings["steps"] == "3 of 3"
    assert settings["S_V (held-out set)"] == "builtin/capitals/validation (first 12 items)"
    assert settings["BOME step"].startswith(f"eta {train['bilevel']['eta']},")
    assert settings["LoRA"].endswith("on q_proj, k_proj, v_proj, o_proj (attention)")  # found in the model: the group asked
    assert finished_run.config.environment.git in report
    last = records[-1]
    assert settings["tau_mean"] == f"{last['alpha/tau_mean']:.6g}"
    assert "option D" in report and f"{last['alpha/tau'][3]:.4f}" in report  # the options scope's vector
    assert report.count("<polyline") == 3  # tau_mean, tau_min, tau_max over steps
    assert bome_line(bome_summary(records, train["bilevel"]["eta"])) in report
    assert "a near-uniform forecast" in report and "AUROC" in report


def test_report_describes_bome_diagnostics_in_the_glossarys_plain_words(report: str) -> None:
    """Issue 30: the BOME table names each diagnostic as the glossary does and describes it
    with its glossary entry (the Monitor's words), not with a formula."""
    from html import escape

    from calm_core.glossary import define

    section = report[report.index('<section id="bome">'):]
    section = section[: section.index("</section>")]
    rows = {cells[0]: cells[2] for cells in parse(section).rows if len(cells) == 3}
    assert set(rows) == {"q", "lambda", "inner drop", "coupling ratio", "cos", "descent ratio"}
    for name, meaning in rows.items():
        assert meaning == define(name)
        assert escape(meaning) in section
    for formula in ("||grad", "L(theta)", "cos(grad", ">= 1", "grad F"):
        assert formula not in section


def test_user_strings_are_escaped(run_copy: RunDir) -> None:
    run_copy.update_status(name=MALICIOUS)
    data = run_copy.results().to_json()
    for row in data["results"]:
        row["dataset"] = "<img src=x onerror=alert(2)>"  # no predictions under that name: a note instead
    atomic_write_json(run_copy.path / "results.json", data)
    text = run_report_html(run_copy)
    assert MALICIOUS not in text and "<img" not in text and "<script" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text and "&lt;img src=x onerror=alert(2)&gt;" in text
    assert not parse(text).errors


def test_run_without_results_is_refused(run_copy: RunDir) -> None:
    (run_copy.path / "results.json").unlink()
    with pytest.raises(ValueError, match="results.json"):
        run_report_html(run_copy)


def test_missing_predictions_leave_a_note_in_place_of_the_figure(run_copy: RunDir) -> None:
    row = run_copy.results().rows[0]
    predictions_path(run_copy.path, row["variant"], row["dataset"]).unlink()
    text = run_report_html(run_copy)
    assert f"Expected predictions of `{row['variant']}`" in text
    assert text.count("<svg") == len(run_copy.results().rows)  # the other diagrams, and the tau chart


def test_reliability_svg_colours_gaps_and_marks_empty_bins() -> None:
    # bin 0: confidence 0.1, accuracy 1 (under-confident, blue); bin 3: 0.9 vs 0.5 (over, red); 2 bins empty
    table = metrics.prepare_reliability([0.1, 0.9, 0.9], [1, 0, 1], n_bins=4, strategy="uniform").to_records()
    svg = reliability_svg(table)
    assert svg.count(f'fill="{OVER}"') == 1  # the two-item bin's gap, filled
    assert svg.count(f'stroke="{UNDER}"') == 1 and f'fill="{UNDER}"' not in svg  # the one-item bin's: an outline
    assert svg.count(">x</text>") == 2  # the two empty bins
    assert "0.75-1.00: 2 items, accuracy 0.500 (90% interval" in svg
    assert svg.count(f'stroke="{WHISKER}"') == 2 * 3  # a whisker per filled bin (a line, two caps): never a point
    assert not parse(svg).errors


@pytest.fixture()
def open_run(tmp_path: Path) -> RunDir:
    """A finished open-QA run's files: two variants, one item without samples (nan Sem1)."""
    from calm_core.generative.sampling import GenerationConfig
    from calm_core.launch import create_run

    cfg = small_config(task="openqa", train_data="builtin/capitals_open/train",
                       heldout_data="builtin/capitals_open/validation", eval_data=("builtin/capitals_open/test",),
                       generation=GenerationConfig(n_samples=3, grouping="string"))
    run = create_run(cfg, tmp_path)
    dataset, rows = "builtin/capitals_open/test", []
    for variant in ("base", "calm"):
        frame = pd.DataFrame({"confidence": [1.0, 2 / 3, 1 / 3, math.nan], "correct": [1.0, 1.0, 0.0, math.nan]})
        write_predictions(run.path, variant, dataset, frame)
        rows.append({"dataset": dataset, "variant": variant, "task": "openqa", "n": 4, "acc": 0.25, "sem_acc": 2 / 3,
                     "ece": 0.2, "ece_10": 0.2, "sem2_ece_10": 0.1, "seq_ece_10": 0.3, "auroc": math.nan,
                     "confidence": 2 / 3})
    atomic_write_json(run.path / "results.json", {"results": rows, "task": "openqa"})
    run.write_status("finished", step=2)
    return run


def test_open_answer_run_gets_its_columns_and_diagrams(open_run: RunDir) -> None:
    text = run_report_html(open_run)
    header = next(cells for cells in parse(text).rows if cells[:2] == ["dataset", "variant"])
    assert header == ["dataset", "variant", "n", "acc", "sem_acc", "ece", "ece_10", "sem2_ece_10", "seq_ece_10",
                      "auroc", "confidence"]
    assert "0.6667" in text and "–" in text  # sem_acc, and the nan auroc as a dash
    assert text.count("<svg") == 2 and "1 without confidence" in text and "sem_acc 0.667" in text
    assert "Sem1" in text and not parse(text).errors


def test_calm_report_writes_the_file_and_checks_the_path_first(run_copy: RunDir, tmp_path: Path, capsys) -> None:
    from calm_core.cli import main

    out = tmp_path / "shared" / "report.html"
    assert main(["report", run_copy.run_id, "--out", str(out), "--runs-root", str(run_copy.path.parent)]) == 0
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>") and str(out) in capsys.readouterr().out
    (tmp_path / "a-file").write_text("x")
    assert main(["report", run_copy.run_id, "--out", str(tmp_path / "a-file" / "r.html"),
                 "--runs-root", str(run_copy.path.parent)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.parametrize("recommended", ["calm", "vs"])
def test_report_opens_with_the_selected_step_the_recommendation_and_the_evidence(tmp_path: Path,
                                                                                 recommended: str) -> None:
    """Near the top: which step the model is from and why, which calibrator to use (said
    plainly when calm does not win), why a baseline is missing, and the evidence table
    (base, ts, vs, calm on each evaluation set) with 90% intervals."""
    from calm_core.results import verdict
    from calm_core.results import advice
    from tests.test_verdict import DATASET, finished_run

    run = finished_run(tmp_path, recommended=recommended, with_ts=recommended == "calm")
    text = run_report_html(run)
    doc = parse(text)
    assert not doc.errors and doc.stack == []
    results = run.results()
    section = text[text.index('id="verdict"'):text.index('id="settings"')]  # before the settings and the metrics
    assert escape(advice.selection_line(results)) in section
    assert escape(advice.recommendation_line(results, "calm")) in section
    assert ('class="win"' in section) == (recommended == "calm")
    evidence = [cells for cells in doc.rows if len(cells) == 2 + len(interval_names())]
    assert evidence[0] == ["dataset", "variant", "acc", "ece", "auroc", "confidence"]
    wanted = ["base", "ts", "vs", "calm"] if recommended == "calm" else ["base", "vs", "calm"]
    assert [cells[1].rstrip(" *") for cells in evidence[1:]] == wanted
    calm = next(cells for cells in evidence[1:] if cells[1].startswith("calm"))
    assert calm[0] == DATASET and calm[3] == "0.060 [0.030, 0.120]"
    assert [cells[1] for cells in evidence[1:] if cells[1].endswith(" *")] == [f"{recommended} *"]
    heldout = section[section.index('id="heldout"'):section.index('id="evidence"')]  # the S_V evidence, paired
    assert escape(advice.HELDOUT_CAPTION) in heldout and "-0.100 [-0.180, -0.030]" in heldout
    if recommended == "vs":
        assert "Use vector scaling: on 24 held-out items" in section
        assert escape("no `ts` variant: S_V has 8 items, fewer than 10") in section
        diagrams = text[text.index('id="reliability"'):text.index('id="alpha"')]  # in place of the ts diagram
        assert escape("<b>ts</b>: no `ts` variant: S_V has 8 items, fewer than 10").replace("&lt;b&gt;", "<b>") \
            .replace("&lt;/b&gt;", "</b>") in diagrams
    # Issue 23: the verdict opens with one line per evaluation set.
    assert section.index('id="verdict-row"') < section.index('id="evidence"')
    row = next(cells for cells in doc.rows if cells[:1] == [DATASET] and len(cells) == len(verdict.VERDICT_COLUMNS))
    assert row == [DATASET, "CALM (ECE 0.060)", "none", verdict.recommendation_decision(results)]


def test_report_of_a_run_without_a_calibrated_stop_has_only_the_verdict_row(open_run: RunDir) -> None:
    from calm_core.results import verdict

    text = run_report_html(open_run)
    section = text[text.index('id="verdict"'):text.index('id="settings"')]
    assert 'id="verdict-row"' in section and 'id="evidence"' not in section
    assert "The model is from step" not in section and "held-out items" not in section
    sets = {r["dataset"] for r in open_run.results().rows}
    assert section.count("<tr>") == 1 + len(sets) and escape(verdict.VERDICT_CAPTION) in section
