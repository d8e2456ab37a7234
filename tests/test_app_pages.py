"""Every studio page under Streamlit's AppTest: on a fresh workspace, and with runs.

The Train page launches a real background job on the tiny model, and the Monitor,
Compare and Playground pages then show that run.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from app.widgets.keys import CALIBRATE_SPLIT, MONITOR_RUN
from app.pages.train.advice import TRAIN_FIX
from app.navigation import page_paths
from calm_core.runs.listing import list_runs
from tests.pages import run_picker

ROOT = Path(__file__).resolve().parent.parent
PAGES = page_paths()  # app/navigation.py: every page the router has


def _unwrapped(spec: str) -> str:
    """A chart's JSON with its titles' line breaks (app/widgets/charts.py wraps a long title to its
    chart's width) read as spaces."""
    return spec.replace("\\u003cbr\\u003e", " ").replace("<br>", " ")


def _shown(table):
    """A static table's cells as they read on the page: st.table's cells are Markdown, so
    app/widgets/state.plain escaped every sign; the page shows them without the backslashes."""
    return table.map(lambda cell: cell.replace("\\", "") if isinstance(cell, str) else cell)


def _text(at) -> str:
    parts = [*at.markdown, *at.caption, *at.info, *at.error, *at.warning, *at.success, *at.title, *at.subheader]
    return "\n".join(str(p.value) for p in parts)


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_on_a_fresh_workspace(page: str, open_page, tiny_everywhere) -> None:
    at = open_page(page)
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    if page in ("../pages/monitor/monitor.py", "../pages/compare/compare.py"):
        assert "No runs yet" in _text(at) or "No finished runs yet" in _text(at)


def _wait_finished(timeout_s: float = 240.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        runs = list_runs()
        if runs and runs[0].state in ("finished", "failed"):
            assert runs[0].state == "finished", runs[0].reason
            return runs[0].run_id
        time.sleep(0.5)
    raise AssertionError(f"the job did not finish in {timeout_s} s: {[(r.run_id, r.state, r.reason) for r in list_runs()]}")


def test_train_launches_a_job_then_monitor_compare_and_playground_show_it(open_page, tiny_everywhere, tiny_model_dir,
                                                                          monkeypatch) -> None:
    at = open_page("../pages/train/train.py")
    at.radio(key="train_model_kind").set_value("local directory").run()
    at.text_input(key="train_model_name").set_value(str(tiny_model_dir)).run()
    at.selectbox(key="train_data").set_value("builtin/capitals/train")
    at.selectbox(key="train_heldout").set_value("builtin/capitals/validation")
    at.multiselect(key="train_evals").set_value(["builtin/capitals/test", "builtin/units/test"])
    at.number_input(key="train_steps").set_value(4)
    at.number_input(key="train_eval_limit").set_value(12)
    at.number_input(key="train_layers").set_value(1)
    at.number_input(key="train_select_patience").set_value(3)  # the last advanced settings have widgets too
    at.number_input(key="train_threads").set_value(1)
    at.run()
    assert not at.exception, at.exception
    assert any("Steps" == m.label for m in at.metric)
    at.button(key="train_launch").click().run()
    assert not at.exception, at.exception
    assert at.success and "Run `" in at.success[0].value
    shown = next(m.value for m in at.metric if m.label == "Estimated time")
    run_id = _wait_finished()
    from calm_core.estimate.text import minutes
    from calm_core.runs.rundir import RunDir

    run = RunDir.at(run_id)
    assert run.config.train["select_patience"] == 3 and run.config.train["threads"] == 1
    assert run.config.estimate is not None and minutes(run.config.estimate["likely_s"]) == shown  # the estimate shown
    assert run.status.threads == {"threads": 1, "why": "set (threads)"}
    for page in PAGES:  # every page, now with a finished run in the workspace
        at = open_page(page)
        assert not at.exception and not at.error, (page, at.exception, [e.value for e in at.error])

    monitor = open_page("../pages/monitor/monitor.py")
    assert run_picker(monitor).value == run_id
    text = _text(monitor)
    assert "finished" in "\n".join(str(p.proto.text) for p in monitor.get("progress")) or "finished" in text
    assert "Final evaluation" in text
    results = monitor.dataframe[-1].value
    assert {"the model as it is", "CALM", "CALM, adapter only"} <= set(results["variant"])  # named in full
    assert {"auroc", "aurc"} <= set(results.columns)  # beside ECE: a near-uniform forecast shows
    from calm_core.glossary import define
    from calm_core.training.bilevel_health import RULES

    # BOME: a health line per chart above one expander that holds the charts, each with its meaning in words
    assert "**Algorithm diagnostics (BOME)**:" in text
    for key in ("q", "lambda", "inner_drop_frac", "coupling_ratio", "cos_fq", "descent_ratio"):
        assert any(m.value.startswith(f"- **{RULES[key].title}**: ") for m in monitor.markdown), key
    assert define("inner_drop_frac") in text and define("descent_ratio") in text
    assert [e.label for e in monitor.expander if "diagnostic charts" in e.label] == ["The 6 diagnostic charts"]
    charts = [c for c in monitor.get("plotly_chart")]
    assert len(charts) >= 6  # losses, entropy, BOME, accuracy, ECE, entropy, alpha..., trade-off

    compare = open_page("../pages/compare/compare.py")
    assert compare.multiselect(key="compare_runs").value == [run_id]
    assert compare.get("plotly_chart"), "no reliability diagram"
    compare.radio(key="compare_layout").set_value("side by side").run()
    assert not compare.exception, compare.exception
    assert len(compare.get("plotly_chart")) == len(compare.multiselect(key="compare_variants").value)

    play = open_page("../pages/playground/playground.py")
    assert play.selectbox(key="play_run").value == run_id  # the newest finished run, from the start
    play.selectbox(key="play_run").set_value(run_id).run()
    assert not play.exception, play.exception
    variants = list(play.dataframe[0].value["variant"])  # named in full
    assert variants[0] == "the model as it is" and "CALM" in variants and "CALM, adapter only" in variants
    play.button(key="play_generate").click().run()
    assert not play.exception, play.exception
    assert len(play.dataframe) == 2 and len(play.dataframe[1].value) >= 1  # one row per generated token
    assert "special" in play.dataframe[1].value.columns and "<|im_end|>" not in play.text[-1].value


def test_data_page_validates_an_upload_and_saves_it(open_page, tiny_everywhere, tmp_path: Path) -> None:
    """AppTest has no file uploader driver: the page's own functions run on a file, and
    the catalog the page lists then holds the upload (the page renders it)."""
    from calm_core.data.loaders import load_file
    from calm_core.data.mapping import ColumnMapping
    from calm_core.data.readers import peek_columns
    from calm_core.data.uploads import save_upload

    path = tmp_path / "domain.csv"
    path.write_text("q,A,B,C,label\nWhat is 2+2?,4,5,6,A\nBad row,,,,Z\nCapital of Peru?,Lima,Quito,Cusco,A\n")
    assert peek_columns(path) == ["q", "A", "B", "C", "label"]
    report = load_file(path, kind="mc", mapping=ColumnMapping.parse("question=q, choices=A|B|C, answer=label"))
    assert len(report.items) == 2 and len(report.rejected) == 1
    save_upload("my domain", report, "domain.csv")
    at = open_page("../pages/data/data.py")
    names = list(at.dataframe[0].value["name"])
    assert "upload/my_domain" in names
    with pytest.raises(ValueError):
        save_upload("../escape", report, "domain.csv")


def test_train_page_says_which_rows_a_chosen_dataset_rejected(open_page, tiny_everywhere, tmp_path: Path) -> None:
    """An upload keeps only its valid rows; choosing it for training must not hide the rest."""
    from calm_core.data.loaders import load_file
    from calm_core.data.uploads import save_upload

    path = tmp_path / "日本.csv"
    path.write_text("q,A,B,label\n2 + 2?,4,5,A\nSky?,blue,red,A\nBroken,x,y,Z\n", encoding="utf-8")
    save_upload("quiz", load_file(path, mapping="question=q, choices=A|B, answer=label"), "日本.csv")
    at = open_page("../pages/train/train.py")
    assert not at.expander or all("rejected" not in e.label for e in at.expander)  # built-in sets: nothing to say
    at.selectbox(key="train_data").set_value("upload/quiz").run()
    assert not at.exception, at.exception
    labels = [e.label for e in at.expander if "rejected" in e.label]
    assert labels == [":material/warning: 1 of 3 rows read from upload/quiz were rejected"]
    assert "日本.csv, row 3, field `label`: Expected a letter in A..B, but got 'Z'" in "\n".join(t.value for t in at.text)


def test_train_page_keeps_a_sessions_data_choice_and_without_datasets_asks_for_one(open_page, tiny_everywhere,
                                                                                    monkeypatch) -> None:
    """The data pickers start at the studio's demo and keep the session's choice across
    reruns; with no dataset to choose the page asks for one instead of failing in the estimate."""
    import calm_core.data.entries

    at = open_page("../pages/train/train.py")
    assert at.selectbox(key="train_data").value == "builtin/chemical_symbols/train"  # the studio's demo
    at.selectbox(key="train_heldout").set_value("builtin/units/validation").run()
    at.run()
    assert at.selectbox(key="train_heldout").value == "builtin/units/validation"
    assert not at.exception, at.exception

    monkeypatch.setattr(calm_core.data.entries, "list_datasets", lambda kind=None: [])
    empty = open_page("../pages/train/train.py")
    assert not empty.exception, empty.exception
    assert [i.value for i in empty.info][-1].startswith("Choose a training set S_T and a held-out set S_V")
    assert not [b for b in empty.button if b.key == "train_launch"]


def _drawn(at, kind: str, key: str):
    """What a browser that mounts this widget from the run's message shows: the value the
    server sent with it, else the widget's own default (what the browser then sends back)."""
    proto = getattr(at, kind)(key=key).proto
    if kind == "multiselect":
        return list(proto.raw_values) if proto.set_value else [proto.options[i] for i in proto.default]
    return proto.raw_value if proto.set_value else proto.options[proto.default]


def test_train_page_sends_its_data_defaults_to_a_browser_that_missed_them(open_page, tiny_everywhere) -> None:
    """A first run interrupted before its output reached the browser (a click while the page
    loads) leaves the seeded data choices on the server only. The next run must still send
    them with the widgets: sent without, the browser drew the evaluation sets empty (and S_T,
    S_V at the first option) and sent that back, so Launch stayed disabled."""
    at = open_page("../pages/train/train.py")
    keys = {"train_evals": "multiselect", "train_data": "selectbox", "train_heldout": "selectbox"}
    seeded = {key: getattr(at, kind)(key=key).value for key, kind in keys.items()}
    assert seeded["train_evals"] and seeded["train_heldout"] != at.selectbox(key="train_heldout").options[0]
    missed = {getattr(at, kind)(key=key).id for key, kind in keys.items()}
    states = at._tree.get_widget_states()  # the browser never drew these widgets: it sends no state for them
    kept = [w for w in states.widgets if w.id not in missed]
    del states.widgets[:]
    states.widgets.extend(kept)
    at._run(states)
    assert {key: _drawn(at, kind, key) for key, kind in keys.items()} == seeded
    at.run()
    assert {key: getattr(at, kind)(key=key).value for key, kind in keys.items()} == seeded
    at.multiselect(key="train_evals").set_value([]).run()  # a person's own choice, empty included, stays
    at.run()
    assert at.multiselect(key="train_evals").value == [] and _drawn(at, "multiselect", "train_evals") == []
    assert not at.exception, at.exception


def test_no_pages_folder_so_a_direct_url_goes_through_the_router() -> None:
    """Streamlit treats a `pages/` folder beside the main script as a v1 multipage app:
    a fresh server whose first request is /monitor then runs monitor.py without the router
    (no router, no sys.path entry: ModuleNotFoundError 'app'). The main script is the
    router, app/server/studio.py; the pages live in app/pages/, one folder up."""
    app_dir = Path(__file__).resolve().parent.parent / "app"
    assert not (app_dir / "server" / "pages").exists()
    assert all((app_dir / "server" / page).is_file() for page in PAGES)
    routed = sorted(page.rsplit("/", 1)[1] for page in PAGES)  # app/navigation.py routes every page, and only pages
    assert sorted(p.name for p in (app_dir / "pages").glob("*/*.py") if p.stem == p.parent.name) == routed


# ----------------------------------------------------------------------------- Data page (issue 14)

ISSUE_CSV = (b"prompt,opt1,opt2,opt3,opt4,label\n"
             b"What is 2+2?,3,4,5,6,2\nCapital of Peru?,Quito,Lima,Cusco,Bogota,2\n"
             b"Red planet?,Venus,Earth,Mars,Jupiter,3\nLargest ocean?,Atlantic,Indian,Arctic,Pacific,4\n"
             b"Frozen water?,Ice,Steam,Fog,Dew,1\nBroken row?,a,b,c,d,9\n")


def _page_text(at) -> str:
    return _text(at) + "\n" + "\n".join(str(c.value) for c in at.code)


def test_data_preview_and_rejections_are_whole_cells_of_the_files_own_text(open_page, tiny_everywhere) -> None:
    """Issue 30: the preview and the rejected rows are static tables (cells wrap, none is
    cut at a column's edge), and a cell's Markdown signs are escaped so it reads as written."""
    from app.widgets.state import plain

    long = "an answer * that runs _on_ and [on](x) past any column width, $5 :red[no] <b>bold</b>"
    data = f'question,A,B,label\nQ?,"{long}",short,A\nBad row,,,A\n'.encode()
    at = open_page("../pages/data/data.py")
    at.get("file_uploader")[0].set_value(("long.csv", data, "text/csv")).run()
    assert not at.exception, at.exception
    preview = at.table[0].value
    assert list(preview["correct option"]) == [plain(long)] and plain(long).replace("\\", "") == long
    assert "options" in preview.columns and "answer" in preview.columns
    reasons = list(at.table[1].value["row"])
    assert len(reasons) == 1 and reasons[0].startswith(plain("long.csv, row 2"))
    assert plain(None) == "" and plain("two\nlines") == "two lines"


def test_data_page_maps_an_uploaded_csv_with_widgets_saves_and_splits_it(open_page, tiny_everywhere) -> None:
    """Issue 14: `prompt, opt1..opt4, label` needs no typed mapping; one file gives a run's three sets."""
    at = open_page("../pages/data/data.py")
    at.get("file_uploader")[0].set_value(("my quiz.csv", ISSUE_CSV, "text/csv")).run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    assert at.selectbox(key="data_map_question").value == "prompt"
    assert at.multiselect(key="data_map_options").value == ["opt1", "opt2", "opt3", "opt4"]
    assert at.selectbox(key="data_map_answer").value == "label"
    assert at.selectbox(key="data_map_answer_form").value == "index1"
    assert [c.value for c in at.code] == ["question=prompt, choices=opt1|opt2|opt3|opt4, answer=label, answer_form=index1"]
    assert [(m.label, m.value) for m in at.metric] == [("Rows", "6"), ("Kept", "5"), ("Rejected", "1")]
    preview = at.table[0].value  # a static table: whole cells, wrapped (issue 30)
    assert list(preview["correct option"]) == ["4", "Lima", "Mars", "Pacific", "Ice"]
    # A person changes the answer form: every answer moves by one, and the rejects say why.
    at.selectbox(key="data_map_answer_form").set_value("index0").run()
    assert list(at.table[0].value["correct option"])[:2] == ["5", "Cusco"]
    assert "answer_form=index0" in at.code[0].value
    at.selectbox(key="data_map_answer_form").set_value("index1").run()
    # Fewer than two option columns: one sentence naming the widget, no class name, no temporary path.
    at.multiselect(key="data_map_options").set_value(["opt1"]).run()
    assert not at.exception
    assert [e.value for e in at.error] == ["Expected at least 2 option columns (in order: the first is A), "
                                           "or one list column, but got 1"]
    at.multiselect(key="data_map_options").set_value(["opt1", "opt2", "opt3", "opt4"]).run()
    at.text_input(key="data_name").set_value("quiz").run()
    at.button(key="data_save").click().run()
    assert not at.exception and len(at.error) == 1, (at.exception, [e.value for e in at.error])  # the split's, below
    assert "Saved as `upload/quiz` (5 items)" in _text(at)
    assert at.selectbox(key="data_split_source").value == "upload/quiz"  # the split form starts from it
    table = at.dataframe[-1].value
    assert list(table["dataset"]) == ["split/quiz/train", "split/quiz/heldout", "split/quiz/test"]
    assert list(table["items"]) == [3, 1, 1]
    # Five items give S_V one: refused before saving, with the reason (issue 23).
    assert [e.value for e in at.error][0].startswith("1 held-out item: too few to fit even one temperature")
    assert "TS and the calibrated stop need held-out labels" in at.error[0].value and "too small" in at.error[0].value
    assert at.button(key="data_split_go").disabled
    # A larger dataset: calibrating it goes through.
    at.selectbox(key="data_split_source").set_value("builtin/capitals/train").run()
    at.text_input(key="data_split_name").set_value("quiz").run()
    at.button(key="data_split_go").click().run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    names = {p: f"split/quiz/{p}" for p in ("train", "heldout", "test")}
    assert at.session_state[CALIBRATE_SPLIT] == {**names, "source": "builtin/capitals/train",
                                                   "sizes": {"train": 62, "heldout": 21, "test": 20}}
    assert "S_T (train): 62 items · S_V (heldout): 21 items · test: 20 items" in _text(at)  # before Calibrate
    from calm_core.data.catalog import load_dataset
    from calm_core.data.split import read_split

    assert read_split("quiz").source == "builtin/capitals/train"
    assert sum(len(load_dataset(n).items) for n in names.values()) == 103
    at.button(key="data_calibrate").click().run()
    assert not at.exception, at.exception
    assert [t.value for t in at.title] == ["Train"]
    assert "(62 / 21 / 20 items)" in at.info[0].value  # the banner gives the sizes, and S_V's warning
    assert at.warning[0].value.startswith("21 held-out items: enough to fit one temperature, not to choose")
    assert at.selectbox(key="train_data").value == "split/quiz/train"  # the Train page takes the parts
    assert at.selectbox(key="train_heldout").value == "split/quiz/heldout"
    assert at.multiselect(key="train_evals").value[0] == "split/quiz/test"


def test_data_page_splits_a_catalog_dataset(open_page, tiny_everywhere) -> None:
    at = open_page("../pages/data/data.py")
    at.selectbox(key="data_split_source").set_value("builtin/capitals/train").run()
    at.number_input(key="data_split_train").set_value(70)
    at.number_input(key="data_split_heldout").set_value(20).run()
    assert "must add up to 100% (now 110%)" in _text(at) and not at.error
    at.number_input(key="data_split_test").set_value(10)
    at.number_input(key="data_split_seed").set_value(3).run()
    table = at.dataframe[-1].value
    assert list(table["items"]) == [72, 21, 10] and list(table["dataset"])[0] == "split/capitals-train/train"
    assert [w.value for w in at.warning][0].startswith("21 held-out items: enough to fit one temperature, not to")
    per_position = table[[c for c in table.columns if len(c) == 1]]
    assert list(per_position.sum(axis=1)) == [72, 21, 10]  # every item counted under its answer position
    assert at.checkbox(key="data_split_stratify").value is True
    at.text_input(key="data_split_name").set_value("caps").run()
    at.button(key="data_split_go").click().run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    assert at.session_state[CALIBRATE_SPLIT]["heldout"] == "split/caps/heldout"
    from calm_core.data.split import read_split

    record = read_split("caps")
    assert record.seed == 3 and record.sizes == {"train": 72, "heldout": 21, "test": 10} and record.stratify
    # Splitting again with another seed under the same name: refused, in words, until Replace is ticked.
    at.number_input(key="data_split_seed").set_value(4).run()
    at.button(key="data_split_go").click().run()
    assert [e.value for e in at.error][0].startswith("Expected a new split name, but split/caps already holds")
    at.checkbox(key="data_split_overwrite").check().run()
    at.button(key="data_split_go").click().run()
    assert not at.error and read_split("caps").seed == 4
    fresh = open_page("../pages/data/data.py")  # the parts are in the catalog table and every picker
    assert {"split/caps/train", "split/caps/heldout", "split/caps/test"} <= set(fresh.dataframe[0].value["name"])
    assert "split/caps/train" in fresh.selectbox(key="data_split_source").options


def test_data_page_upload_errors_name_the_file_not_a_temporary_copy(open_page, tiny_everywhere) -> None:
    at = open_page("../pages/data/data.py")
    at.get("file_uploader")[0].set_value(("mine.csv", b"x,y\n", "text/csv")).run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert errors == ["Expected data rows in mine.csv, but it has none"]
    at.get("file_uploader")[0].set_value(("mine.csv", b"x,y\n1,2\n", "text/csv")).run()
    errors = [e.value for e in at.error]
    assert errors == ["Expected a question column, but none is chosen"]
    at.get("file_uploader")[0].set_value(("mine.csv", b"x,y\n1,2,3\n", "text/csv")).run()
    errors += [e.value for e in at.error]
    assert errors[-1] == ("Expected readable rows in mine.csv, but the first ones could not be read:\n\n"
                          "mine.csv, row 1: Expected 2 fields as in the header, but got 3")
    assert not any("/tmp" in e or "Error:" in e or "upload.csv" in e for e in errors)
    # Issue 40: under a failed upload the Split section shows no built-in set's plan as if it were the upload's.
    assert at.selectbox(key="data_split_source").value is None
    assert len(at.dataframe) == 1 and "description" in at.dataframe[0].value.columns  # the catalog, no plan
    assert "Save an upload above, or choose a dataset" in _text(at)


# ----------------------------------------------------------------------------- the calibrated stop (issue 21.2)

@pytest.mark.parametrize("recommended", ["calm", "vs"])
def test_monitor_and_compare_show_the_selected_step_and_the_recommendation(open_page, recommended: str) -> None:
    """A finished run written by hand (tests/test_verdict.py): Monitor marks the selected
    step on its curves and says which step and which calibrator; Compare says both per
    run, plainly when a baseline beats the trained model, and why a baseline is missing."""
    from app.widgets.charts import SELECTED_SYMBOL
    from calm_core.results import advice
    from tests.test_verdict import finished_run

    run = finished_run(recommended=recommended, with_ts=recommended == "calm")
    monitor = open_page("../pages/monitor/monitor.py")
    assert not monitor.exception and not monitor.error, (monitor.exception, [e.value for e in monitor.error])
    text = _text(monitor)
    assert "Selected step 4 (rule `best`): S_V NLL 0.8123, ECE 0.0712, accuracy 0.625; stopped early at step 12." in text
    assert "The model is from step 4, selected on S_V" in text
    figures = [_unwrapped(c.proto.spec) for c in monitor.get("plotly_chart")]
    assert sum('"text":"selected"' in spec for spec in figures) >= 6  # losses, lower level, evaluation curves
    assert any(f'"symbol":"{SELECTED_SYMBOL}"' in spec for spec in figures)  # the trade-off path
    assert any("S_T cross-entropy of theta (lower level)" in spec and '"name":"tolerance"' in spec for spec in figures)
    evidence = _shown(next(t.value for t in monitor.table if "recommended" in t.value.columns))  # whole cells
    named = ["the model as it is", "temperature scaling", "vector scaling", "CALM"]  # the variants in full
    assert list(evidence["variant"]) == (named if recommended == "calm" else [named[0], *named[2:]])
    assert evidence["ece"].str.contains(r"\[").all()  # 90% intervals
    sentence = advice.recommendation_sentence(run.results())  # the same words as `calm train` and the report
    if recommended == "calm":
        assert [s.value for s in monitor.success][-1].startswith(sentence) and not monitor.warning
    else:
        assert [w.value for w in monitor.warning][-1].startswith(sentence)
    assert any(advice.HELDOUT_COLUMNS[2] in t.value.columns for t in monitor.table)  # the S_V evidence, whole cells

    compare = open_page("../pages/compare/compare.py")
    assert not compare.exception and not compare.error, (compare.exception, [e.value for e in compare.error])
    assert compare.multiselect(key="compare_runs").value == [run.run_id]
    assert "calm" in compare.multiselect(key="compare_variants").value  # the trained model is shown by default
    text = _text(compare)
    assert "The model is from step 4, selected on S_V" in text
    if recommended == "calm":
        assert compare.success[0].value.startswith(sentence) and not compare.info
    else:
        assert compare.warning[0].value.startswith(sentence)
        assert [i.value for i in compare.info] == ["no `ts` variant: S_V has 8 items, fewer than 10"]


# ----------------------------------------------------------------------------- the Monitor's incremental read (issue 22.5)

def _loss_steps(at) -> list[int]:
    import json

    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        if "Training loss" in json.dumps(spec["layout"].get("title", "")):
            return spec["data"][0]["x"]
    raise AssertionError("no Training loss chart")


def test_monitor_follows_appended_and_cut_back_metrics(open_page) -> None:
    """Each poll reads only what was appended (MetricsTail); a resume's cut-back file is read
    again, so the curve loses the steps after the checkpoint instead of keeping stale ones."""
    from calm_core.runs.rundir import RunDir

    run = RunDir.new({"train": {"method": "calm", "model": "tiny", "train_data": "builtin/capitals/train"}},
                     name_hint="tail")
    for step in range(1, 8):
        run.append_metrics({"step": step, "elapsed": float(step), "train/lower_loss": 1.0 / step})
    run.write_status("cancelled", step=7, total_steps=20)
    monitor = open_page("../pages/monitor/monitor.py")
    assert not monitor.exception, monitor.exception
    assert _loss_steps(monitor) == list(range(1, 8))
    for step in (8, 9):
        run.append_metrics({"step": step, "elapsed": float(step), "train/lower_loss": 1.0 / step})
    monitor.run()
    assert _loss_steps(monitor) == list(range(1, 10))
    run.truncate_metrics_after(4)  # what a resume from checkpoint-4 does
    monitor.run()
    assert _loss_steps(monitor) == [1, 2, 3, 4] and not monitor.exception


@pytest.mark.parametrize("setting, every", [(None, "15 s"), ("7", "7 s"), ("1", "3 s"), ("soon", "15 s")])
def test_an_active_runs_charts_redraw_at_their_own_cadence(open_page, monkeypatch, setting, every) -> None:
    """While a run is active the charts poll every CALM_MONITOR_CHART_SECONDS (default 15 s,
    at least the progress line's 3 s; a value that is no number is said and ignored), with
    a button to redraw them now; a finished run is drawn once, without either."""
    import os
    import time

    from calm_core.runs.rundir import RunDir

    if setting is not None:
        monkeypatch.setenv("CALM_MONITOR_CHART_SECONDS", setting)
    run = RunDir.new({"train": {"method": "calm", "model": "tiny", "train_data": "builtin/capitals/train"}},
                     name_hint="cadence")
    run.append_metrics({"step": 1, "elapsed": 1.0, "train/lower_loss": 1.0})
    run.write_status("running", step=1, total_steps=20, pid=os.getpid(), started=time.time(), heartbeat=time.time())
    monitor = open_page("../pages/monitor/monitor.py")
    assert not monitor.exception, monitor.exception
    captions = [c.value for c in monitor.caption]
    assert f"While the run is active the charts redraw every {every}, the progress line every 3 s." in captions
    assert any(b.label == "Refresh the charts" for b in monitor.button)
    assert (setting == "soon") == any("'soon' is not a number of seconds" in c for c in captions)
    assert _loss_steps(monitor) == [1]
    run.write_status("finished", step=20, total_steps=20)
    monitor.run()
    assert not any(b.label == "Refresh the charts" for b in monitor.button)
    assert not any(c.startswith("While the run is active") for c in (c.value for c in monitor.caption))


# ----------------------------------------------------------------------------- splits for a comparison (issue 23)

def test_data_page_refuses_a_tiny_heldout_part_and_offers_a_split_that_fits(open_page, tiny_everywhere) -> None:
    from calm_core.data.split_sizes import part_sizes

    at = open_page("../pages/data/data.py")
    at.selectbox(key="data_split_source").set_value("builtin/capitals/train").run()
    at.number_input(key="data_split_train").set_value(90)
    at.number_input(key="data_split_heldout").set_value(5).run()
    at.number_input(key="data_split_test").set_value(5).run()
    assert list(at.dataframe[-1].value["items"]) == [93, 5, 5]  # the sizes, before saving
    assert at.error[0].value.startswith("5 held-out items: too few to fit even one temperature (at least 10 needed)")
    assert at.button(key="data_split_go").disabled
    suggest = at.button(key="data_split_suggest")
    assert suggest.label == "Use 50 / 40 / 10 %"  # the most held out (40%): 80 items are out of reach
    suggest.click().run()
    assert [at.number_input(key=f"data_split_{p}").value for p in ("train", "heldout", "test")] == [50, 40, 10]
    assert list(at.dataframe[-1].value["items"]) == list(part_sizes(103, (0.50, 0.40, 0.10)))
    assert not at.error and not at.warning and not at.button(key="data_split_go").disabled
    # the best this source allows: the fix for the small S_V is Train's, said there (issue 40)
    assert any(c.value.endswith(TRAIN_FIX) for c in at.caption) and "41 held-out items" not in _text(at)


def test_the_practitioners_63_rows_take_the_pages_suggestion_and_hear_what_s_v_supports(open_page, tiny_everywhere,
                                                                                          tmp_path: Path) -> None:
    """Issues 30 and 40: 63 rows of one's own questions, 3 broken. The default 60 / 20 / 20
    is warned about with a larger held-out part; that split is then accepted (no warning,
    no second suggestion). Its held-out part holds the 29 items selective answering's default
    rule needs. What its 29 held-out items support is said once, on Train, under the choice it
    concerns, with the fix as one click: k-fold on all 48 labelled items."""
    from calm_core.data.loaders import load_file
    from calm_core.data.uploads import save_upload

    rows = ["q,A,B,C,D,label"] + [f"question {i}?,a{i},b{i},c{i},d{i},{'ABCD'[i % 4]}" for i in range(60)]
    rows += [f"broken {i}?,a,b,c,d," for i in range(3)]  # no answer: rejected
    path = tmp_path / "domain.csv"
    path.write_text("\n".join(rows) + "\n")
    report = load_file(path, mapping="question=q, choices=A|B|C|D, answer=label")
    assert len(report.items) == 60 and len(report.rejected) == 3
    save_upload("domain", report, "domain.csv")
    at = open_page("../pages/data/data.py")
    at.selectbox(key="data_split_source").set_value("upload/domain").run()
    assert list(at.dataframe[-1].value["items"]) == [36, 12, 12]
    assert at.warning[-1].value.startswith("12 held-out items: enough to fit one temperature, not to choose")
    suggest = at.button(key="data_split_suggest")
    assert suggest.label == "Use 32 / 48 / 20 %"
    suggest.click().run()
    assert list(at.dataframe[-1].value["items"]) == [19, 29, 12]
    assert not at.warning and not at.error and not any(b.key == "data_split_suggest" for b in at.button)
    assert any(c.value.endswith(TRAIN_FIX) for c in at.caption)
    at.text_input(key="data_split_name").set_value("domain").run()
    at.button(key="data_split_go").click().run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    assert _said_small(at) == 0  # Data says the sizes; what S_V supports is Train's to say
    at.button(key="data_calibrate").click().run()
    assert not at.exception, at.exception
    assert [t.value for t in at.title] == ["Train"]
    assert at.markdown[0].value.startswith("Fine-tune the model on your own questions, `upload/domain`")
    assert "chemical-symbols" not in at.markdown[0].value  # the opening matches the prefilled page
    # one warning, once, under the choice it concerns, with the fix as one click
    assert _said_small(at) == 1 and at.radio(key="train_calibrate_on").value == "heldout"
    assert [w.value for w in at.warning if "held-out items" in w.value] == [
        "29 held-out items: enough to fit one temperature, not to choose between methods (that takes 80). "
        "With k-fold on all 48 labelled items, the post-hoc choice has enough items to fit one temperature, "
        "not to choose between methods (that takes 80); a trained model is still compared on S_V alone."]
    assert at.button(key="train_use_kfold").label == "Use k-fold on all 48 labelled items"
    train = open_page("../pages/train/train.py")  # a rerun here goes back to the router's page: open Train itself
    train.selectbox(key="train_data").set_value("split/domain/train")
    train.selectbox(key="train_heldout").set_value("split/domain/heldout").run()
    assert _said_small(train) == 1 and train.radio(key="train_calibrate_on").value == "heldout"
    train.button(key="train_use_kfold").click().run()
    assert not train.exception, train.exception
    assert train.radio(key="train_calibrate_on").value == "all"  # the advice acted
    assert not any(b.key == "train_use_kfold" for b in train.button) and _said_small(train) == 1
    assert not [w.value for w in train.warning if "held-out items" in w.value]
    pooled = next(i.value for i in train.info if i.value.startswith("29 held-out items"))
    assert "With k-fold on all 48 labelled items, the post-hoc choice has enough items to fit one temperature" in pooled


def _said_small(at) -> int:
    """How many times the page says that S_V cannot choose between methods."""
    return _text(at).count("not to choose between methods (that takes 80).")


def _two_runs(with_ts: bool = False):
    """An older and a newer finished run, written by hand (tests/test_verdict.py)."""
    from tests.test_verdict import finished_run

    older = finished_run(run_id="20260101-000000-calm-0001", with_ts=with_ts)
    newer = finished_run(run_id="20260102-000000-calm-0002", with_ts=with_ts)
    for run, created in ((older, 1_000.0), (newer, 2_000.0)):
        run.write_status("finished", created=created, started=created + 5)
    return older, newer


def test_compare_opens_with_the_verdict_row_says_why_ts_is_missing_and_fits_its_table(open_page) -> None:
    from tests.test_verdict import DATASET

    older, newer = _two_runs()
    compare = open_page("../pages/compare/compare.py")
    assert not compare.exception and not compare.error, (compare.exception, [e.value for e in compare.error])
    assert compare.multiselect(key="compare_runs").value == [newer.run_id]  # newest first
    assert " · finished · calm on builtin/capitals/train · 1970-01-01 00:33" in \
        compare.multiselect(key="compare_runs").format_func(newer.run_id)
    verdict_table = _shown(compare.table[0].value)  # the page opens with it, a static table: whole cells
    assert list(verdict_table.columns) == ["evaluation set", "best calibrated", "flags", "recommended on S_V"]
    assert verdict_table.iloc[0].tolist() == [DATASET, "CALM (ECE 0.060)", "none", "Use CALM"]
    assert [i.value for i in compare.info] == ["no `ts` variant: S_V has 8 items, fewer than 10"]
    assert "No `ts` row: no `ts` variant: S_V has 8 items, fewer than 10" in _text(compare)
    metrics_table = next(d.value for d in compare.dataframe if "variant" in d.value.columns and "acc" in d.value.columns)
    assert list(metrics_table.columns) == ["variant", "n", "acc", "ece", "auroc", "aurc", "confidence"]
    assert list(metrics_table["variant"]) == ["the model as it is", "vector scaling", "CALM",
                                              "CALM, adapter only"]  # variants as rows, one set, named in full
    compare.multiselect(key="compare_columns").set_value(["acc", "brier"]).run()
    metrics_table = next(d.value for d in compare.dataframe if "brier" in d.value.columns)
    assert list(metrics_table.columns) == ["variant", "acc", "brier"]
    assert any("side by side" in e.label for e in compare.expander)  # the long table, folded away
    compare.radio(key="compare_layout").set_value("side by side").run()
    titles = [_unwrapped(c.proto.spec) for c in compare.get("plotly_chart")]
    assert titles and all('ECE 0.' in spec and "(15 bins)" in spec for spec in titles)


def test_monitor_and_playground_start_on_the_newest_run_and_monitor_follows_a_launch(open_page, tiny_everywhere,
                                                                                    monkeypatch) -> None:
    import app.widgets.state
    from calm_core.results.playground import untrained

    older, newer = _two_runs(with_ts=True)
    monitor = open_page("../pages/monitor/monitor.py")
    assert run_picker(monitor).value == newer.run_id
    assert not monitor.exception, monitor.exception
    verdict_table = _shown(next(t.value for t in monitor.table if "best calibrated" in t.value.columns))
    assert verdict_table.iloc[0]["best calibrated"] == "CALM (ECE 0.060)"
    run_picker(monitor).set_value(older.run_id).run()
    # What the Train page's launch does: the Monitor then opens that run, in this session.
    monitor.switch_page("../pages/train/train.py").run()
    monitor.session_state[MONITOR_RUN] = newer.run_id
    monitor.switch_page("../pages/monitor/monitor.py").run()
    assert run_picker(monitor).value == newer.run_id

    monkeypatch.setattr(app.widgets.state, "get_trained", lambda run_id: untrained(tiny_everywhere))
    play = open_page("../pages/playground/playground.py")
    assert not play.exception, play.exception
    assert play.selectbox(key="play_run").value == newer.run_id
    rows = play.dataframe[0].value
    assert list(rows["right"])[0] in ("✓ right", "✗ wrong") and "p(Mars)" in rows.columns  # the first option is right


def test_the_monitors_picker_shows_a_runs_new_state_after_a_rerun(open_page) -> None:
    """The browser keeps a keyed selectbox's text across reruns, so a picker whose key stayed put
    showed "queued" on a finished run; the key follows the labels, the chosen run stays chosen."""
    older, newer = _two_runs()
    monitor = open_page("../pages/monitor/monitor.py")
    run_picker(monitor).set_value(older.run_id).run()
    before = run_picker(monitor)
    assert " · finished · " in before.format_func(older.run_id)
    older.write_status("cancelled")
    monitor.run()
    after = run_picker(monitor)
    assert after.key != before.key and after.value == older.run_id
    assert " · cancelled · " in after.format_func(older.run_id)
    assert not monitor.exception, monitor.exception
