"""The domain flow's studio glue (issue 14): Compare shares a run (report, portable model),
and the Train page takes a split made on the Data page."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.widgets.keys import CALIBRATE_SPLIT
from calm_core.runs.rundir import RunDir
from tests.test_trainer import DATA, fresh_lm


@pytest.fixture
def finished_in_workspace(tiny_model_dir: Path) -> RunDir:
    """A finished calm run in the (isolated) studio workspace, as `calm train` writes it."""
    from calm_core.training.config import TrainConfig
    from calm_core.training.loop import train
    from calm_core.launch import create_run

    cfg = TrainConfig(method="calm", steps=2, batch_size=2, heldout_batch_size=2, eval_every=0, checkpoint_every=0,
                      lr_theta=1e-2, lr_alpha=1e-1, scoring="letter", model=str(tiny_model_dir), **DATA)
    run = create_run(cfg)
    train(cfg, run=run, lm=fresh_lm(tiny_model_dir))
    return run


def test_compare_offers_the_report_and_the_portable_model(open_page, tiny_everywhere, finished_in_workspace) -> None:
    at = open_page("../pages/compare/compare.py")
    assert not at.exception, at.exception
    assert at.selectbox(key="compare_share_run").value == finished_in_workspace.run_id
    labels = [b.proto.label for b in at.get("download_button")]
    assert "Report (HTML)" in labels and "Calibrated model (zip)" in labels


def test_train_page_takes_the_split_from_the_data_page(tiny_everywhere) -> None:
    from streamlit.testing.v1 import AppTest

    from calm_core.data.entries import list_datasets

    root = Path(__file__).resolve().parent.parent
    at = AppTest.from_file(str(root / "app" / "server" / "studio.py"), default_timeout=180)
    split = {"train": "builtin/capitals/train", "heldout": "builtin/capitals/validation", "test": "builtin/capitals/test",
             "source": "builtin/capitals"}
    at.session_state[CALIBRATE_SPLIT] = split
    at.run()
    at.switch_page("../pages/train/train.py")
    at.run()
    assert not at.exception, at.exception
    assert at.selectbox(key="train_data").value == split["train"]
    assert at.selectbox(key="train_heldout").value == split["heldout"]
    names = {e.name for e in list_datasets(kind="mc")}
    outside = "arc/easy_test" if "arc/easy_test" in names else "builtin/units/test"
    assert at.multiselect(key="train_evals").value == [split["test"], outside]
    assert any("Calibrating `builtin/capitals`" in i.value for i in at.info)
    at.selectbox(key="train_data").set_value("builtin/units/train").run()  # an edit sticks: the split applied once
    assert at.selectbox(key="train_data").value == "builtin/units/train"


def test_the_playground_loads_the_selected_step_like_compare_and_the_export(finished_in_workspace: RunDir) -> None:
    """The model a user tries on a typed question is the one the run hands back: the
    calibrated stop's selected step (selected/), not the latest checkpoint."""
    from calm_core.results.playground import load_trained

    run = finished_in_workspace
    assert run.selected_step() is not None
    trained = load_trained(run, device="cpu")
    assert trained.lm.info["adapter"] == str(run.selected_dir) == str(run.exported_step()[1])
