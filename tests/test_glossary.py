"""The glossary (calm_core/glossary.py): every variant, flag and metric a page shows has an
entry, docs/glossary.md is what the declaration writes, and the pages take their
definitions from it.

The vocabulary is declared here from the project's own registries (the post-hoc
calibrators, the training methods and their adapter-only variants, the verdict's flags,
the metric columns), so a calibrator, method or metric added tomorrow and shown on a page
fails this test until the glossary defines it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from calm_core import glossary
from tests.pages import run_picker

ROOT = Path(__file__).resolve().parent.parent


def vocabulary() -> set[str]:
    """The project's words a page may show: each variant by key and by name, the verdict's
    flags and every declared metric column."""
    from calm_core.calibration.metrics.columns import COLUMNS
    from calm_core.calibration.posthoc import calibrators
    from calm_core.training.methods import METHODS
    from calm_core.results import advice
    from calm_core.results import selective
    from calm_core.results import verdict

    variants = {"base", *calibrators(), *METHODS, *(f"{m}{glossary.THETA_ONLY}" for m in METHODS)}
    words = variants | {verdict.variant_label(v) for v in variants}
    words |= {verdict.NEAR_UNIFORM, verdict.ACCURACY_LOST, verdict.UNDER_CONFIDENT}
    words |= set(verdict.VERDICT_COLUMNS) | set(advice.HELDOUT_COLUMNS) | set(advice.POOLED_COLUMNS)
    words |= set(RUN_WORDS) | set(RELIABILITY_WORDS) | set(selective.COLUMNS) | set(selective.WORDS)
    return words | {c.name for c in COLUMNS}


# Labels the pages show beside the registries' words (issue 40 found them unexplained): the
# calibrated stop's rule as the Monitor's selection line writes it, and the job's words.
RUN_WORDS = ("rule `best`", "rule `last`", "heartbeat", "frozen-layer cache")
# The reliability diagrams' words (issue 40, item 4): the bins, the whiskers, the hollow marks, the noise line.
RELIABILITY_WORDS = ("equal-mass", "Wilson interval", "one-item bin", "ECE from noise alone")


def _visit(node: Any, shown: list[str], helps: list[str]) -> None:
    """What one element shows (labels, bodies, options, table headers and cells, chart
    titles and legends) and what its tooltips say, then its children's."""
    label = getattr(node, "label", None)
    if isinstance(label, str):
        shown.append(label)
    proto = getattr(node, "proto", None)
    fields = {f.name for f, _ in proto.ListFields()} if hasattr(proto, "ListFields") else set()
    for name in ("body", "label"):
        if name in fields and isinstance(getattr(proto, name), str):
            shown.append(getattr(proto, name))
    if "options" in fields:
        shown.extend(str(o) for o in proto.options)
    if "help" in fields:
        helps.append(proto.help)
    if "columns" in fields and isinstance(proto.columns, str) and proto.columns:  # a dataframe's column config
        for config in json.loads(proto.columns).values():
            helps.append(config.get("help", ""))
            shown.append(config.get("label", ""))
    if "spec" in fields:  # a plotly chart: its title, its axes' titles, its legend
        shown.extend(_figure_words(json.loads(proto.spec)))
    if getattr(node, "type", None) in ("arrow_data_frame", "table") or type(node).__name__ in ("Dataframe", "Table"):
        frame = node.value
        shown.extend(str(c) for c in frame.columns)
        # a static table's cells are escaped Markdown (app/widgets/state.plain): read as the page shows them
        shown.extend(str(v).replace("\\", "") for col in frame.columns for v in frame[col] if isinstance(v, str))
    children = getattr(node, "children", None)
    for child in children.values() if isinstance(children, dict) else []:
        _visit(child, shown, helps)


def _figure_words(spec: dict) -> list[str]:
    def text(title: Any) -> str:
        return title.get("text", "") if isinstance(title, dict) else str(title or "")

    layout = spec.get("layout", {})
    words = [text(layout.get("title"))]
    words += [
        text(v.get("title")) for k, v in layout.items() if k.startswith(("xaxis", "yaxis")) and isinstance(v, dict)
    ]
    return words + [str(trace.get("name", "")) for trace in spec.get("data", [])]


def page_words(at: Any) -> tuple[str, str]:
    """(everything the page shows, everything its tooltips say), each as one text."""
    shown: list[str] = []
    helps: list[str] = []
    _visit(at._tree, shown, helps)
    return "\n".join(shown), "\n".join(helps)


def shown_terms(text: str, words: set[str]) -> set[str]:
    """The words of `words` that `text` holds as whole words ("ece" in "ece_10" does not count)."""
    return {w for w in words if re.search(rf"(?<![\w-]){re.escape(w)}(?![\w-])", text)}


def undefined(text: str) -> list[str]:
    """The vocabulary words `text` shows that have no glossary entry: what the test forbids."""
    return sorted(w for w in shown_terms(text, vocabulary()) if glossary.lookup(w) is None)


# ----------------------------------------------------------------------------- the declaration


def test_docs_glossary_is_what_the_declaration_writes() -> None:
    """docs/glossary.md is generated (`python -m calm_core.glossary`): page and docs cannot disagree."""
    assert (ROOT / "docs" / "glossary.md").read_text(encoding="utf-8") == glossary.markdown()
    assert glossary.main(["--check"]) == 0


def test_terms_are_unique_short_and_found_by_every_spelling() -> None:
    seen: dict[str, str] = {}
    for term in glossary.TERMS:
        assert term.group in glossary.GROUPS, term
        assert term.definition.endswith(".") and len(term.definition) < 420, term.name  # one or two sentences
        for spelling in term.spellings:
            assert spelling not in seen, f"{spelling!r} is in {seen[spelling]!r} and {term.name!r}"
            seen[spelling] = term.name
            assert glossary.lookup(spelling) == term
    assert glossary.lookup("vs").name == "vector scaling" and '"versus"' in glossary.define("vs")
    assert glossary.lookup("calm_theta_only").name == "CALM, adapter only"
    assert glossary.lookup("scalar_theta_only").name == "adapter only"  # any method's adapter-only variant
    assert glossary.lookup("Ece") == glossary.lookup("ECE")  # case is forgiven when nothing matches exactly
    assert glossary.lookup("mystery") is None and glossary.lookup("mystery_theta_only") is None
    with pytest.raises(KeyError, match="glossary entry for 'mystery'"):
        glossary.define("mystery")
    assert glossary.tooltip("ECE", "NLL").startswith("**ECE**: Expected calibration error")


def test_the_brief_words_are_defined() -> None:
    """The words issue 30 found unexplained on the pages, and the verdict's own."""
    words = [
        "ECE",
        "NLL",
        "AUROC",
        "AURC",
        "Brier",
        "TS",
        "temperature scaling",
        "vector scaling",
        "vs",
        "ATS",
        "adaptive temperature scaling",
        "thermometer",
        "S_T",
        "S_V",
        "test split",
        "BOME",
        "q",
        "lambda",
        "eta",
        "xi",
        "phi",
        "theta",
        "theta~",
        "alpha",
        "tau",
        "l",
        "cloze",
        "letter scoring",
        "head scope",
        "vocab",
        "options",
        "scalar",
        "calm_theta_only",
        "ln K",
        "lower level",
        "upper level",
        "near-uniform",
        "accuracy lost",
        "under-confident",
        "calibrated stop",
        "selected step",
    ]
    assert [w for w in words if glossary.lookup(w) is None] == []


def test_the_flags_thresholds_are_the_verdicts() -> None:
    """The glossary cannot import the verdict (it is layer 1): its numbers are checked here."""
    from calm_core.results import verdict

    assert f"more than {verdict.UNDER_CONFIDENT_GAP:.2f} below the accuracy" in glossary.define("under-confident")


def test_the_noise_ece_entry_says_the_draws_noise_ece_makes() -> None:
    from calm_core.calibration.metrics.reliability import LEVEL, NOISE_DRAWS

    text = glossary.define("ECE from noise alone")
    assert f"redrawn {NOISE_DRAWS} times" in text and f"its {LEVEL:.0%} line" in text
    assert f"({LEVEL:.0%}, Wilson" in glossary.define("Wilson interval")


def test_the_run_words_numbers_are_the_runs() -> None:
    """The heartbeat's entry states the stale limits of calm_core/runs/state.py in words."""
    from calm_core.runs.state import STALE_AFTER_S, STARTUP_GRACE_S

    assert (STALE_AFTER_S, STARTUP_GRACE_S) == (60.0, 600.0)
    assert "silent for a minute (ten before its first heartbeat)" in glossary.define("heartbeat")


def test_the_evidence_and_verdict_columns_and_run_words_are_defined() -> None:
    """Issue 40: "counted" was explained nowhere; every column of the recommendation's
    evidence and of the verdict row, and the Monitor's run words, have entries."""
    from calm_core.results import advice
    from calm_core.results import verdict

    shown = {*advice.HELDOUT_COLUMNS, *advice.POOLED_COLUMNS, *verdict.VERDICT_COLUMNS, *RUN_WORDS}
    assert "counted" in shown and "rule `best`" in shown
    assert sorted(w for w in shown if glossary.lookup(w) is None) == []
    assert shown <= vocabulary()


def test_every_registered_variant_flag_and_metric_is_defined() -> None:
    """Without rendering a page: the whole vocabulary has entries (the page test below
    names the page that shows an undefined one)."""
    assert sorted(w for w in vocabulary() if glossary.lookup(w) is None) == []


# ----------------------------------------------------------------------------- the pages


def _bome_log(run: Any) -> None:
    """The hand-written run's steps with the BOME diagnostics and the head's tau and l, as a
    calm run logs them (the Monitor's Losses and alpha tabs then draw them)."""
    records = run.read_metrics()
    for record in records:
        if record["step"]:
            record.update(
                {
                    "bome/q": 0.6,
                    "bome/lambda": 0.8,
                    "bome/inner_drop_frac": 0.3,
                    "bome/coupling_ratio": 0.001,
                    "bome/cos_fq": 0.2,
                    "bome/descent_ratio": 1.0,
                    "alpha/tau": [1.0, 1.1, 1.2, 1.3],
                    "alpha/l": [0.0, 0.1, 0.0, -0.1],
                }
            )
    run.metrics_path.write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.fixture()
def every_page(open_page, tiny_everywhere, monkeypatch) -> dict[str, tuple[str, str]]:
    """Every page rendered on a workspace with one finished calm run (written by hand, as
    tests/test_app_pages.py's fixtures do, with its BOME log), the Playground on the tiny
    model dressed as that run: page -> (what it shows, what its tooltips say)."""
    import app.widgets.state
    from app.navigation import page_paths
    from calm_core.calibration.head import CalibrationHead
    from calm_core.scoring.prompts import ScoringConfig
    from calm_core.results.playground import TrainedModel
    from tests.test_verdict import finished_run

    from tests.test_selective_run import add_selective_files

    run = add_selective_files(finished_run(recommended="vs"))  # Compare's selective section shows its words
    _bome_log(run)
    dressed = TrainedModel(
        run.run_id, "calm", tiny_everywhere, CalibrationHead("options", size=5), 1.5, ScoringConfig()
    )
    monkeypatch.setattr(app.widgets.state, "get_trained", lambda run_id: dressed)
    pages = {}
    for page in page_paths():
        at = open_page(page)
        assert not at.exception and not at.error, (page, at.exception, [e.value for e in at.error])
        if page == "../pages/monitor/monitor.py":
            assert run_picker(at).value == run.run_id
        pages[page] = page_words(at)
    return pages


def test_no_page_shows_a_variant_flag_or_metric_without_a_glossary_entry(every_page) -> None:
    shown_anywhere = "\n".join(text for text, _ in every_page.values())
    for page, (text, _) in every_page.items():
        assert undefined(text) == [], f"{page} shows words with no glossary entry: {undefined(text)}"
    # The pages do show the vocabulary: variants by name, flags, metric columns.
    seen = shown_terms(shown_anywhere, vocabulary())
    assert {
        "temperature scaling",
        "vector scaling",
        "CALM",
        "CALM, adapter only",
        "ece",
        "auroc",
        "aurc",
        "near-uniform",
        "under-confident",
        "accuracy lost",
    } <= seen, sorted(seen)
    # And the test bites: without one entry, the word it defined is reported.
    for name in ("ECE", "vector scaling", "near-uniform"):
        term = next(t for t in glossary.TERMS if t.name == name)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(glossary, "TERMS", tuple(t for t in glossary.TERMS if t is not term))
            missing = undefined(shown_anywhere)
        assert missing and set(missing) <= set(term.spellings), (name, missing)


def test_pages_define_the_words_they_show(every_page) -> None:
    """Item 2 of issue 30: a vocabulary word a page shows has its definition on that page, in
    a tooltip or a caption, not only in the docs."""
    missing = {}
    for page, (text, helps) in every_page.items():
        on_page = text + "\n" + helps
        defined = [w for w in shown_terms(text, vocabulary()) if glossary.lookup(w)]  # the others fail the test above
        missing[page] = sorted(w for w in defined if glossary.define(w) not in on_page)
    assert {page: words for page, words in missing.items() if words} == {}, "shown without their definitions"

