"""Reading runs for display: series, alpha vectors, and comparing several runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calm_core.results import curves as run_curves

from calm_core.results import predictions as run_predictions

from calm_core.results import tables as run_tables
from calm_core.runs.rundir import RunDir

RECORDS = [
    {"step": 1, "elapsed": 2.0, "train/lower_loss": 1.5, "alpha/tau": [1.0, 1.1]},
    {"step": 2, "elapsed": 4.0, "train/lower_loss": 1.2, "alpha/tau": [1.2, 1.3], "eval/heldout/acc": 0.5,
     "eval/arc/easy_test/acc": 0.4, "eval/arc/easy_test/ece": 0.2},
    {"step": 3, "elapsed": 6.0, "train/lower_loss": 1.1},
]


def test_series_eval_sets_and_alpha_vectors() -> None:
    assert run_curves.series(RECORDS, "train/lower_loss") == ([1, 2, 3], [1.5, 1.2, 1.1])
    assert run_curves.series(RECORDS, "eval/arc/easy_test/ece") == ([2], [0.2])
    assert run_curves.eval_sets(RECORDS) == ["heldout", "arc/easy_test"]
    steps, taus = run_curves.alpha_vectors(RECORDS)
    assert steps == [1, 2] and taus.tolist() == [[1.0, 1.1], [1.2, 1.3]]
    assert run_curves.alpha_vectors(RECORDS, "l")[1].shape == (0, 0)


def _run(root: Path, run_id: str, name: str, variants: list[str]) -> RunDir:
    run = RunDir.create(root, run_id, {"train": {}, "name": name})
    run.update_status(name=name)
    rows = [{"dataset": "d", "variant": v, "acc": 0.5} for v in variants]
    (run.path / "results.json").write_text(json.dumps({"results": rows}))
    return run


def test_compare_rows_share_base_and_ts_and_label_repeated_methods(tmp_path: Path) -> None:
    a = _run(tmp_path, "a", "calm-options", ["base", "ts", "calm", "calm_theta_only"])
    b = _run(tmp_path, "b", "calm-vocab", ["base", "ts", "calm", "calm_theta_only"])
    c = _run(tmp_path, "c", "sft", ["base", "ts", "sft"])
    rows = run_tables.compare_rows([a, b, c])
    assert [r["variant"] for r in rows] == ["base", "ts", "calm", "calm_theta_only", "calm@calm-vocab",
                                            "calm_theta_only@calm-vocab", "sft"]
    assert rows[4]["variant_raw"] == "calm" and rows[4]["run"] == "b"
    with pytest.raises(ValueError, match="results.json"):
        run_tables.compare_rows([RunDir.create(tmp_path, "d", {"train": {}})])


def test_compare_shows_base_a_calibrator_and_the_trained_model_first() -> None:
    from calm_core.results.tables import default_variants

    assert default_variants(["base", "ts", "vs", "calm", "calm_theta_only"]) == ["base", "ts", "calm"]
    assert default_variants(["base", "vs", "calm", "calm_theta_only", "calm@b"]) == ["base", "vs", "calm"]
    assert default_variants(["base", "calm_theta_only"]) == ["base", "calm_theta_only"]  # nothing else to show
    # what the run recommends is on the page from the start too
    assert default_variants(["base", "ts", "vs", "ats", "calm"], recommended=["ats"]) == ["base", "ts", "ats", "calm"]
    assert default_variants(["base", "ts", "calm"], recommended=["ts"]) == ["base", "ts", "calm"]
    # the thermometer is post-hoc (label-free), never the trained model Compare must show
    assert default_variants(["base", "ts", "thermometer", "calm", "calm_theta_only"]) == ["base", "ts", "calm"]


def test_predictions_reads_confidence_and_correctness(tmp_path: Path) -> None:
    import pandas as pd

    from calm_core.runs.layout import write_predictions

    run = RunDir.create(tmp_path, "p", {"train": {}})
    write_predictions(run.path, "calm", "arc/easy_test",
                      pd.DataFrame({"gold": [0, 1], "prediction": [0, 0], "confidence": [0.9, 0.6]}))
    confidence, correct = run_predictions.predictions(run, "calm", "arc/easy_test")
    assert confidence.tolist() == [0.9, 0.6] and correct.tolist() == [1.0, 0.0]
    with pytest.raises(ValueError, match="predictions"):
        run_predictions.predictions(run, "sft", "arc/easy_test")


def test_bome_summary_means_the_last_steps_and_flags_an_inert_coupling() -> None:
    from calm_core.results.curves import bome_line, bome_summary

    acting = [{"step": i, "bome/q": 0.5, "bome/lambda": 1.0 + i, "bome/inner_drop_frac": 0.9,
               "bome/coupling_ratio": 0.5} for i in range(1, 13)]
    summary = bome_summary(acting, eta=0.5, last=10)
    assert summary["lambda"] == pytest.approx(sum(1.0 + i for i in range(3, 13)) / 10)
    assert not summary["inert"] and "drop 0.9" in bome_line(summary)
    inert = [{"step": i, "bome/q": 1e-6, "bome/lambda": 0.5, "bome/inner_drop_frac": 1e-5,
              "bome/coupling_ratio": 1e-4} for i in range(1, 6)]
    assert bome_summary(inert, eta=0.5)["inert"] and "INERT" in bome_line(bome_summary(inert, eta=0.5))
    assert bome_summary([{"step": 1, "train/lower_loss": 1.0}], eta=0.5) == {} and bome_line({}) == ""


def test_reference_points_come_from_the_final_evaluation(tmp_path) -> None:
    import json

    from calm_core.results.tables import reference_points
    from calm_core.runs.rundir import RunDir

    run = RunDir.create(tmp_path, "r", {"method": "calm"})
    assert reference_points(run) == {}
    rows = [{"dataset": "a", "variant": v, "ece": e, "acc": 0.5} for v, e in (("base", 0.3), ("ts", 0.1), ("calm", 0.05))]
    (run.path / "results.json").write_text(json.dumps({"results": rows}))
    assert reference_points(run) == {"a": {"base": (0.3, 0.5), "ts": (0.1, 0.5)}}


def test_head_scope_resolves_auto_by_the_scoring_rule() -> None:
    from calm_core.results.run_facts import head_scope

    assert head_scope({"method": "calm", "scope": "auto", "scoring": "cloze"}) == "scalar"
    assert head_scope({"method": "calm", "scope": "auto", "scoring": "letter"}) == "vocab"
    assert head_scope({"method": "calm", "scope": "options", "scoring": "cloze", "bogus": 1}) == "options"


def test_config_json_records_the_scope_the_head_really_has() -> None:
    """`scalar` forces its scope: a run asked for `options` records `head_scope: scalar`,
    and the Monitor / Compare read that, not the asked-for scope."""
    from calm_core.training.config import TrainConfig
    from calm_core.results.run_facts import head_scope

    train = TrainConfig(method="scalar", scope="options", scoring="letter").to_dict()
    assert (train["scope"], train["head_scope"]) == ("options", "scalar")
    assert head_scope(train) == "scalar"
    assert TrainConfig.from_dict(train).effective_scope == "scalar"  # the derived key is read back, not stored
    assert TrainConfig(method="sft").to_dict()["head_scope"] is None  # no head, no scope


def test_uniform_entropy_is_mean_ln_k_of_the_heldout_set(tmp_path) -> None:
    """The Monitor's entropy ceiling (issue 23): ln K over S_V's items; none for open answers."""
    import math

    from calm_core.data.catalog import load_dataset
    from calm_core.runs.rundir import RunDir
    from calm_core.results.curves import uniform_entropy

    name = "builtin/capitals/validation"
    run = RunDir.create(tmp_path, "r-mc", {"train": {"task": "mcqa", "heldout_data": name}})
    items = load_dataset(name).items
    assert uniform_entropy(run) == pytest.approx(sum(math.log(len(i.choices)) for i in items) / len(items))
    assert uniform_entropy(RunDir.create(tmp_path, "r-open", {"train": {"task": "openqa", "heldout_data": name}})) is None
    assert uniform_entropy(RunDir.create(tmp_path, "r-gone", {"train": {"heldout_data": "upload/none"}})) is None


def test_sets_read_from_files_are_shown_by_name_never_by_path(tmp_path: Path) -> None:
    run = _run(tmp_path, "a", "calm", ["base", "calm"])
    added = [
        {"dataset": "/home/me/private.csv", "variant": "calm", "acc": 0.6, "added_after_training": True},
        {"dataset": "/home/me/other/private.csv", "variant": "calm", "acc": 0.7, "added_after_training": True},
        {"dataset": "arc/easy_test", "variant": "calm", "acc": 0.4, "added_after_training": True},
    ]
    (run.path / "added_results.json").write_text(json.dumps({"results": added}))
    rows = run_tables.compare_rows([run])
    shown = [r["dataset"] for r in rows if r.get("added_after_training")]
    # a file by its name; a second file of the same name keeps its path, so two sets never merge
    assert shown == ["private.csv (added)", "/home/me/other/private.csv (added)", "arc/easy_test (added)"]
    assert rows[2]["dataset_raw"] == "/home/me/private.csv"  # the files' own name, for reading predictions
