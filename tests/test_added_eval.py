"""`calm eval --run`: a finished run evaluated on more data after training.

A tiny run (letter scoring, options head, the calibrated stop choosing its step) is
evaluated again on its own evaluation set, where its rows must come back to 1e-5, and on
a set of another domain, whose rows are stored with the run, marked, and shown by
`calm compare` and the report; an unfinished run is refused in one line. An open-QA run
gives its rows back the same way; Compare's "Evaluate on more data" drives the same call.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from calm_core.cli.commands import main
from calm_core.data.schema import MCItem, items_fingerprint
from calm_core.runs.layout import ADDED_RESULTS, predictions_path
from calm_core.runs.rundir import RunDir
from calm_core.training.loop import train
from calm_core.launch import run_config_record
from calm_core.results.report import run_report_html
from tests.test_studio_openqa import open_run  # noqa: F401 - the module-scoped open-QA run
from tests.test_trainer import fresh_lm, small_config

TOLERANCE = 1e-5  # the run's scores came from its last evaluation's cache; these are computed afresh
OWN, NEW = "builtin/capitals/test", "builtin/chemical_symbols/test"
METRICS = ("acc", "ece", "ece_10", "nll", "brier", "auroc", "confidence")


@pytest.fixture(scope="module")
def finished(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> RunDir:
    root = tmp_path_factory.mktemp("runs")
    with pytest.MonkeyPatch.context() as patch:  # module scope: set up before the autouse workspace fixture
        patch.setenv("CALM_WORKSPACE", str(tmp_path_factory.mktemp("workspace")))
        cfg = small_config(model=str(tiny_model_dir), scope="options", heldout_limit=10, steps=3, eval_every=1)
        run = RunDir.create(root, "tiny-added", run_config_record(cfg))
        train(cfg, run=run, lm=fresh_lm(tiny_model_dir))
    return run


@pytest.fixture(scope="module")
def evaluated(finished: RunDir, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """`calm eval --run` on the run's own set and on a new one (its default limit: the run's)."""
    out = tmp_path_factory.mktemp("out") / "added.json"
    code = main(["eval", "--run", finished.run_id, "--runs-root", str(finished.path.parent), "--device", "cpu",
                 "--data", OWN, NEW, "--json", str(out)])
    assert code == 0
    return json.loads(out.read_text())


def _numbers(row: dict) -> dict:
    return {**{m: row[m] for m in METRICS}, **{f"ci90/{k}/{i}": v for k, pair in row["ci90"].items()
                                              for i, v in enumerate(pair)}}


def test_the_runs_own_set_gives_its_own_rows_back(finished: RunDir, evaluated: dict) -> None:
    own = {r["variant"]: r for r in finished.results().rows if r["dataset"] == OWN}
    again = {r["variant"]: r for r in evaluated["results"] if r["dataset"] == OWN}
    assert set(again) == set(own) == {"base", "ts", "vs", "calm", "calm_theta_only"}
    for variant, row in own.items():
        expected, got = _numbers(row), _numbers(again[variant])
        worst = max(abs(got[k] - expected[k]) for k in expected)
        assert worst <= TOLERANCE, f"{variant}: max |added - run| = {worst:.2e}"
        assert again[variant]["n"] == row["n"]
    # Not vacuous: the trained model and the post-hoc variants differ from base by far more.
    assert abs(own["calm"]["nll"] - own["base"]["nll"]) > 100 * TOLERANCE
    assert abs(own["ts"]["nll"] - own["base"]["nll"]) > 100 * TOLERANCE


def test_the_selected_step_is_the_one_measured(finished: RunDir, evaluated: dict) -> None:
    selected = finished.selected_step()
    assert selected is not None and {r["step"] for r in evaluated["results"]} == {selected}


def test_a_new_set_is_stored_with_the_run_marked_and_fingerprinted(finished: RunDir, evaluated: dict) -> None:
    from calm_core.training.batches import load_data
    from calm_core.training.config import TrainConfig

    stored = json.loads((finished.path / ADDED_RESULTS).read_text())["results"]
    new = [r for r in stored if r["dataset"] == NEW]
    assert {r["variant"] for r in new} == {"base", "ts", "vs", "calm", "calm_theta_only"}
    cfg = TrainConfig.from_dict({**finished.config.train, "eval_data": [NEW]})
    items = load_data(cfg, "mc").evals[NEW]
    for row in new:
        assert row["added_after_training"] is True and row["n"] == row["n_items"] == len(items) == 6
        assert row["fingerprint"] == items_fingerprint(items) and row["added_at"]
        frame = pd.read_parquet(predictions_path(finished.added_dir, row["variant"], NEW))
        assert list(frame["id"]) == [it.id for it in items]
    assert [r["dataset"] for r in finished.results().rows] == [OWN] * 5  # the final evaluation untouched
    assert not predictions_path(finished.path, "calm", NEW).exists()  # nor its predictions folder
    ts = finished.results().calibrators["ts"]["temperature"]  # TS applied with the run's own S_V temperature, not refitted
    base = pd.read_parquet(predictions_path(finished.added_dir, "base", NEW))
    scaled = pd.read_parquet(predictions_path(finished.added_dir, "ts", NEW))
    import numpy as np
    from calm_core.calibration.metrics import softmax

    logits = np.array([np.array(z, dtype=np.float64) for z in base["logits"]])
    np.testing.assert_allclose(np.stack(scaled["probs"]), softmax(logits / ts), atol=1e-12)


def test_evaluating_a_set_again_replaces_its_added_rows(finished: RunDir, evaluated: dict) -> None:
    assert main(["eval", "--run", finished.run_id, "--runs-root", str(finished.path.parent), "--device", "cpu",
                 "--data", NEW, "--limit", "4"]) == 0
    stored = finished.added_results()
    assert sorted({(r["dataset"], r["n"]) for r in stored}) == [(OWN, 6), (NEW, 4)]
    assert len(stored) == 10


def test_calm_compare_and_the_report_show_added_rows_marked(finished: RunDir, evaluated: dict, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "compare.json"
    assert main(["compare", finished.run_id, "--runs-root", str(finished.path.parent), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    rows = json.loads(out.read_text())["results"]
    assert {r["dataset"] for r in rows} == {OWN, f"{OWN} (added)", f"{NEW} (added)"}
    assert all(r.get("added_after_training") is (True if r["dataset"].endswith("(added)") else None) for r in rows)
    assert f"{NEW} (added)" in printed and "added after training: " in printed and "sha256:" in printed
    html = run_report_html(finished)
    assert f"{NEW} (added)" in html and "sha256:" in html and "was evaluated after training" in html
    assert html.count("<figure>") == len(rows) and "Expected predictions" not in html  # every added diagram found


def test_an_unfinished_run_is_refused_in_one_line(tiny_model_dir: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture) -> None:
    run = RunDir.create(tmp_path, "queued-run", run_config_record(small_config(model=str(tiny_model_dir))))
    code = main(["eval", "--run", run.run_id, "--runs-root", str(tmp_path), "--data", NEW])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith("calm: error: Expected a finished run, but queued-run is queued")
    assert not (run.path / ADDED_RESULTS).exists()


def test_options_the_run_fixed_are_refused_with_run(finished: RunDir, capsys: pytest.CaptureFixture) -> None:
    code = main(["eval", "--run", finished.run_id, "--runs-root", str(finished.path.parent), "--data", NEW,
                 "--model", "embedded", "--fit-ts-on", OWN])
    err = capsys.readouterr().err
    assert code == 2 and "--model, --fit-ts-on cannot go with --run" in err


def test_items_fingerprint_follows_the_items_not_their_source() -> None:
    a = [MCItem("1", "Capital of Peru?", ("Lima", "Quito"), 0)]
    assert items_fingerprint(a) == items_fingerprint([MCItem("1", "Capital of Peru?", ("Lima", "Quito"), 0)])
    assert items_fingerprint(a) != items_fingerprint([MCItem("1", "Capital of Peru?", ("Lima", "Quito"), 1)])
    assert items_fingerprint(a) != items_fingerprint(a + a) and items_fingerprint(a).startswith("sha256:")


def test_compare_evaluates_a_run_on_more_data(finished: RunDir, evaluated: dict, open_page) -> None:
    """Compare's "Evaluate on more data": a dataset picked, the button pressed, and the page
    shows the added set (marked) beside the run's own with its fingerprint line."""
    import shutil

    from calm_core.runs.naming import runs_root

    copy = RunDir(shutil.copytree(finished.path, runs_root() / finished.run_id))
    (copy.path / ADDED_RESULTS).unlink()
    at = open_page("../pages/compare/compare.py")
    assert at.selectbox(key="compare_more_run").value == copy.run_id
    assert at.number_input(key="compare_more_limit").value == 6  # the run's eval_limit
    assert at.button(key="compare_more_go").disabled  # nothing picked yet
    at.multiselect(key="compare_more_sets").set_value(["builtin/units/test"])
    at.number_input(key="compare_more_limit").set_value(3).run()
    at.button(key="compare_more_go").click().run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    assert [s.value for s in at.success][-1].startswith("Added 5 rows on builtin/units/test")
    assert "builtin/units/test (added)" in at.selectbox(key="compare_dataset").options
    assert any("builtin/units/test (added): 3 items, sha256:" in c.value for c in at.caption)
    assert {r["n"] for r in copy.added_results()} == {3}


def test_an_open_answer_run_gives_its_own_rows_back_and_adds_a_set(open_run) -> None:
    """Open QA the same way: generation is seeded per batch, so the run's own set (same
    items, same batches) gives its rows back, and a new set is added beside it."""
    from calm_core.results.added import evaluate_run, run_eval_limit
    from tests.test_studio_openqa import EVAL_SET

    workspace, run_id = open_run
    run = RunDir(workspace / "runs" / run_id)
    new = "builtin/chemical_symbols_open/test"
    rows = evaluate_run(run, [EVAL_SET, new], run_eval_limit(run), device="cpu")
    own = {r["variant"]: r for r in run.results().rows}
    again = {r["variant"]: r for r in rows if r["dataset"] == EVAL_SET}
    assert set(again) == set(own) and "ts" in own and "calm" in own
    for variant, row in own.items():
        numbers = [k for k, v in row.items() if isinstance(v, float)]
        assert numbers and all(abs(again[variant][k] - row[k]) <= TOLERANCE for k in numbers
                               if row[k] == row[k]), variant  # nan (no AUROC on one class) compares unequal
    assert {r["variant"] for r in rows if r["dataset"] == new} == set(own)
    assert all(r["task"] == "openqa" and r["added_after_training"] for r in rows)
