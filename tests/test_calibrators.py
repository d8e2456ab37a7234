"""Tests for the post-hoc calibrator registry (calm_core.calibration.posthoc) and the one
declaration of result-table columns (calm_core.calibration.metrics.columns).

The registry's promise is "adding a calibrator is one file": a toy calibrator written
to a temporary directory that joins the package's `__path__` (what dropping a module
into calm_core/calibration/posthoc/ does) must show up as a variant of `calm eval`, of
a run's final evaluation (scoring.evaluate.fit_baselines) and in Compare's shared rows.

    .venv/bin/python -m pytest tests/test_calibrators.py -q
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calm_core.calibration import metrics
from calm_core.calibration import posthoc
from calm_core.calibration.metrics.columns import (COLUMNS, KEY_COLUMNS, TABLES, cell, help_texts, metric_names,
                                                   table_columns, task_table)
from calm_core.calibration.posthoc import (MIN_FIT_ITEMS, TemperatureScaler, VectorScaler, calibrators,
                                           fit_defaults, for_task, load_calibrator)
from calm_core.scoring.evaluate import (baseline_records, fit_baselines, fit_posthoc, format_table, result_row,
                                        wide_table)
from calm_core.scoring.options import OptionScores

TOY = '''
"""A toy calibrator: halves the logits (what a new module in the package looks like)."""
from dataclasses import dataclass

import numpy as np

from calm_core.calibration.posthoc.base import PosthocCalibrator, check_fit_inputs

NAME = "halve"


@dataclass
class Halver(PosthocCalibrator):
    name = NAME
    label = "Halved logits"
    kind = "halve"

    factor: float = 0.5
    n_fit: int = 0

    @classmethod
    def fit(cls, logits, labels):
        return cls(0.5, len(check_fit_inputs(logits, labels)[1]))

    def transform(self, logits):
        return np.asarray(logits, dtype=np.float64) * self.factor


CALIBRATOR = Halver
'''


@pytest.fixture
def add_module(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """add_module(name, text): `text` as module `name` of the posthoc package, found
    through its `__path__` as a file in calm_core/calibration/posthoc/ would be; the
    path and the imported modules are gone when the test ends."""
    added: list[str] = []
    monkeypatch.setattr(posthoc, "__path__", [*posthoc.__path__, str(tmp_path)])

    def add(name: str, text: str) -> None:
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(text))
        added.append(f"{posthoc.__name__}.{name}")

    yield add
    for module in added:
        sys.modules.pop(module, None)


@pytest.fixture
def toy(add_module) -> type:
    add_module("halve", TOY)
    return calibrators()["halve"]


def _scores(rng: np.random.Generator, n: int, k: int = 4, scale: float = 3.0) -> OptionScores:
    """Synthetic option scores: overconfident logits (labels drawn at a third of them)."""
    z = rng.normal(0.0, scale, size=(n, k))
    p = metrics.softmax(z / 3.0)
    gold = np.array([rng.choice(k, p=row) for row in p])
    return OptionScores([f"q{i}" for i in range(n)], z, gold, {"rule": "cloze"})


# ----------------------------------------------------------------------------- the registry


def test_registry_finds_temperature_and_vector_scaling_in_order():
    found = calibrators()
    assert found["ts"] is TemperatureScaler and found["vs"] is VectorScaler
    assert list(found)[:2] == ["ts", "vs"]  # by `order`: ts is the first post-hoc variant everywhere
    assert list(for_task("mcqa"))[0] == "ts" and "vs" not in for_task("mcqa")  # VS: a baseline, not fitted by default
    assert "vs" in for_task("mcqa", defaults_only=False)
    assert "ts" in for_task("openqa") and "vs" not in for_task("openqa", defaults_only=False)  # no per-position


def test_fit_defaults_is_the_temperature_fit_itself():
    scores = _scores(np.random.default_rng(0), 400)
    z, y = scores.logits, scores.gold
    fitted = fit_defaults(z, y)
    assert list(fitted) == ["ts"]
    assert fitted["ts"] == TemperatureScaler.fit(z, y)  # the same numbers as before the registry
    assert fitted["ts"].params() == {"temperature": fitted["ts"].temperature_}
    assert set(fitted["ts"].fit_stats()) == {"nll_before", "nll_after"}


def test_toy_module_is_found_fitted_saved_and_loaded(toy, tmp_path):
    assert list(calibrators())[:4] == ["ts", "vs", "ats", "halve"]  # order 100 after ts (0), vs (10) and ats (20)
    assert "halve" in for_task("mcqa") and "halve" not in for_task("openqa")
    scores = _scores(np.random.default_rng(1), 50)
    fitted = fit_defaults(scores.logits, scores.gold)
    assert type(fitted["halve"]) is toy and fitted["halve"].n_fit == 50
    fitted["halve"].save(tmp_path / "halve.json")
    assert json.loads((tmp_path / "halve.json").read_text()) == {"factor": 0.5, "n_fit": 50, "kind": "halve"}
    assert load_calibrator(tmp_path / "halve.json") == fitted["halve"]
    np.testing.assert_allclose(fitted["halve"].probs(scores.logits), metrics.softmax(scores.logits / 2))


def test_no_toy_outside_its_test():
    """The registry scans `__path__` on each call: the toy of the tests above is gone
    with its directory (file order: this runs after them)."""
    assert "halve" not in calibrators() and f"{posthoc.__name__}.halve" not in sys.modules


@pytest.mark.parametrize("change, message", [
    (('NAME = "halve"', 'NAME = "ts"'), "named 'ts'"),  # two variants `ts`: rows and results.json keys would clash
    (('kind = "halve"', 'kind = "temperature"'), "share kind 'temperature'"),  # load_calibrator could not choose
    (("CALIBRATOR = Halver", "CALIBRATOR = None"), "CALIBRATOR to be a PosthocCalibrator named 'halve'"),
])
def test_a_module_that_would_be_ambiguous_is_refused(add_module, change, message):
    add_module("second", TOY.replace(*change))
    with pytest.raises(ValueError, match=message):
        calibrators()


# ----------------------------------------------------------------------------- where the toy shows up


def test_toy_is_a_variant_of_calm_eval(toy, env_cli, tiny_model_dir, tmp_path):
    from calm_core.cli import main

    argv = ["eval", "--model", str(tiny_model_dir), "--data", "builtin/capitals/test", "--limit", "8",
            "--fit-ts-on", "builtin/capitals/train", "--fit-limit", str(MIN_FIT_ITEMS),
            "--json", str(tmp_path / "out.json"), "--quiet"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    record = json.loads((tmp_path / "out.json").read_text())
    rows = {r["variant"]: r for r in record["results"]}
    assert list(rows) == ["base", "ts", "halve"]
    assert record["halve"] == [{"dataset": "builtin/capitals/train", "n": MIN_FIT_ITEMS, "factor": 0.5}]
    assert rows["halve"]["acc"] == rows["base"]["acc"]  # halving keeps the argmax ...
    assert rows["halve"]["confidence"] < rows["base"]["confidence"]  # ... and flattens every forecast
    assert "halve: factor = 0.5000" in out.getvalue().splitlines()
    metrics_part = out.getvalue().split("90% bootstrap intervals")[0]  # the intervals' table follows, same rows
    table = [line.split()[:2] for line in metrics_part.splitlines() if line.startswith("builtin/capitals/test ")]
    assert table == [["builtin/capitals/test", v] for v in ("base", "ts", "halve")]  # the printed table's rows


def test_toy_is_a_variant_of_the_final_evaluation(toy):
    """fit_baselines is what both training tasks' final evaluations call (training/tasks)."""
    scores = _scores(np.random.default_rng(2), 30)
    asked = []

    def fit_data():
        asked.append(True)
        return scores.logits, scores.gold

    fitted, notes = fit_baselines(len(scores), fit_data, "mcqa")
    assert list(fitted) == ["ts", "halve"] and asked == [True]  # S_V scored once for all
    assert notes == {"ats": "no `ats` variant: S_V has 30 items, fewer than 40"}  # its own, larger minimum
    assert baseline_records(fitted, {}, fit_on="S") == {
        "ts": {"temperature": fitted["ts"].temperature_, "fit_on": "S"}, "halve": {"factor": 0.5, "fit_on": "S"}}
    fitted, notes = fit_baselines(MIN_FIT_ITEMS - 1, fit_data, "mcqa")
    assert fitted == {} and asked == [True]  # too few labels: nothing scored, nothing fitted
    assert {k: v for k, v in notes.items() if k != "ats"} == {
        name: f"no `{name}` variant: S_V has {MIN_FIT_ITEMS - 1} items, fewer than {MIN_FIT_ITEMS}"
        for name in ("ts", "halve")}
    _, notes = fit_baselines(len(scores), fit_data, "mcqa", enabled=False)
    assert notes["ts"] == "no `base` / `ts` variants: eval_baselines = false"
    assert baseline_records({}, notes) == {name: {"note": note} for name, note in notes.items()}


def test_toy_is_a_variant_of_a_runs_final_evaluation(toy, tiny_model_dir, tmp_path):
    """A run's results.json: the toy beside ts, fitted on S_V, recorded under its name."""
    from calm_core.runs.rundir import RunDir
    from calm_core.scoring.models import ModelSpec, load_model
    from calm_core.training.config import TrainConfig
    from calm_core.training.loop import train

    cfg = TrainConfig.from_dict(dict(
        method="sft", steps=1, batch_size=2, heldout_batch_size=2, eval_every=0, checkpoint_every=0, scoring="letter",
        train_data="builtin/capitals/train", heldout_data="builtin/capitals/validation",
        eval_data=["builtin/capitals/test"], train_limit=4, heldout_limit=MIN_FIT_ITEMS, eval_limit=4))
    run = RunDir.create(tmp_path, "toy", {"train": cfg.to_dict()})
    train(cfg, run=run, lm=load_model(ModelSpec(name=str(tiny_model_dir), device="cpu")))
    results = run.results()
    # a run fits every calibrator, by order: ts, vs (order 10), then the toy
    assert [r.variant for r in results.rows][:4] == ["base", "ts", "vs", "halve"]
    assert results.calibrator("halve").to_json() == {"factor": 0.5, "fit_on": "builtin/capitals/validation", "calibrate_on": "heldout"}


def test_toy_is_shared_in_compare_and_described_in_reports(toy):
    from calm_core.results.tables import posthoc_lines, shared_variants
    from calm_core.runs.records import RunResults

    assert shared_variants() == ("base", "ts", "vs", "ats", "halve", "thermometer")  # every registered one, and the thermometer
    results = RunResults.from_json({"results": [], "ts": {"temperature": 1.23456, "fit_on": "S"},
                                    "halve": {"note": "no `halve` variant: why"}})
    assert posthoc_lines(results) == ["Temperature scaling (ts): T = 1.235, fitted on S.", "no `halve` variant: why"]
    assert posthoc_lines(results, notes_only=True) == ["no `halve` variant: why"]


def test_fit_posthoc_names_a_variant_per_fit_set_and_calibrator(toy):
    fits = fit_posthoc({"a": _scores(np.random.default_rng(3), 20), "b": _scores(np.random.default_rng(4), 20)})
    assert [f.variant for f in fits] == ["ts:a", "ts:b", "halve:a", "halve:b"]
    assert fits[0].record == {"dataset": "a", "n": 20, "temperature": fits[0].calibrator.temperature_,
                              "nll_before": fits[0].calibrator.nll_before_, "nll_after": fits[0].calibrator.nll_after_}
    assert [f.variant for f in fit_posthoc({"a": _scores(np.random.default_rng(3), 20)})] == ["ts", "halve"]


@pytest.fixture
def env_cli(monkeypatch, tmp_path):
    monkeypatch.setenv("CALM_WORKSPACE", str(tmp_path / "workspace"))


# ----------------------------------------------------------------------------- result columns


# What each table showed when its columns were listed where it was drawn: the declaration
# must keep every table as it was (a new column changes these on purpose).
HISTORIC = {
    "mcqa": ("n", "acc", "ece", "ece_10", "brier", "nll", "auroc", "aurc", "confidence"),
    "mcqa_eval": ("n", "acc", "ece", "mce", "rms_ce", "brier", "nll", "auroc", "confidence"),
    "openqa": ("n", "acc", "sem_acc", "ece", "ece_10", "sem2_ece_10", "seq_ece_10", "auroc", "confidence"),
    "paper_mcqa": ("acc", "ece", "ece_10"),
    "paper_openqa": ("acc", "sem_acc", "ece_10"),
}


@pytest.mark.parametrize("table", sorted(TABLES))
def test_each_table_keeps_its_columns(table):
    assert metric_names(table) == HISTORIC[table]
    assert table_columns(table) == (*KEY_COLUMNS, *HISTORIC[table])


def test_a_compare_of_both_kinds_shows_the_union_in_one_order():
    both = table_columns("mcqa", "openqa")
    assert set(both) == set(table_columns("mcqa")) | set(table_columns("openqa"))
    assert [c for c in both if c in table_columns("mcqa")] == list(table_columns("mcqa"))  # each order kept
    assert [c for c in both if c in table_columns("openqa")] == list(table_columns("openqa"))


def test_every_multiple_choice_column_is_a_key_of_result_row():
    row = result_row(_scores(np.random.default_rng(5), 40), "set", "base")
    for table in ("mcqa", "mcqa_eval", "paper_mcqa"):
        assert set(metric_names(table)) <= set(row), (table, set(metric_names(table)) - set(row))


def test_every_open_answer_column_is_a_key_of_summarize_open():
    from calm_core.generative.judge import summarize_open

    rng = np.random.default_rng(6)
    n = 30
    correct = rng.random(n) < 0.5
    frame = pd.DataFrame({"greedy_correct": correct, "greedy_f1": correct.astype(float), "sem_conf": rng.random(n),
                          "sem_correct": correct, "sem2_conf": rng.random(n), "sem2_correct": correct,
                          "seq_prob": rng.random(n), "greedy_entropy": rng.random(n)})
    row = summarize_open(frame)
    for table in ("openqa", "paper_openqa"):
        assert set(metric_names(table)) <= set(row), (table, set(metric_names(table)) - set(row))


def test_declarations_are_unique_and_name_known_tables():
    assert len({c.name for c in COLUMNS}) == len(COLUMNS)
    assert all(set(c.tables) <= set(TABLES) for c in COLUMNS)
    assert all(c.tables or c.compute or c.curve for c in COLUMNS)  # each declaration is used somewhere
    assert all(c.compute for c in COLUMNS if c.curve or c.interval or c.binned)  # a curve or interval needs a metric
    assert not set(KEY_COLUMNS) & {c.name for c in COLUMNS}
    with pytest.raises(ValueError, match="table names in"):
        metric_names("mcqa", "monitor")


def test_cells_tooltips_and_task_tables():
    assert cell("acc", 0.123456) == "0.1235" and cell("n", 8) == "8" and cell("dataset", "a/b") == "a/b"
    assert cell("not_declared", 0.5) == "0.5000"
    from calm_core.glossary import define

    # the glossary's plain definition first, then the column's own label and direction
    assert help_texts(["dataset", "ece", "aurc"]) == {
        "ece": define("ece") + "\n\n`ece`: ECE, 15 equal-width bins (lower is better)",
        "aurc": define("aurc") + "\n\n`aurc`: area under the risk-coverage curve (lower is better)"}
    assert task_table([{"task": "openqa"}]) == "openqa" and task_table([{"task": "openqa"}, {}]) == "mcqa"
    assert task_table([]) == "mcqa"


def test_format_table_and_wide_table_take_the_declared_columns():
    rows = [result_row(_scores(np.random.default_rng(7), 40), "set", v) for v in ("base", "ts")]
    assert format_table(rows).splitlines()[0].split() == list(table_columns("mcqa_eval"))
    header = wide_table(rows).splitlines()[0]
    assert header == "| variant | " + " | ".join(f"set {m}" for m in metric_names("paper_mcqa")) + " |"
