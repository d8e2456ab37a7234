"""The studio with open-answer runs: chart and table builders, the Playground's
open_answers_for on the tiny model, and AppTest renders of Train (task: open answers),
Compare and Playground with a finished open-QA run.

One open-QA run is trained once for the module (2 steps on the tiny model, 4
evaluation items, 3 samples grouped by string) in a workspace of its own.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from app.widgets.charts import answer_groups, cluster_summary, confidence_histogram, histogram_counts, open_answers_table
from calm_core.generative.sampling import GenerationConfig
from calm_core.training.config import DEFAULT_LR
from calm_core.generative.semantic import group_by_string, modal_confidence
from tests.pages import run_picker

ROOT = Path(__file__).resolve().parent.parent
EVAL_SET = "builtin/capitals_open/test"
N_SAMPLES = 3


# --- pure builders -------------------------------------------------------------------

def test_histogram_counts_bins_confidences_over_unit_interval() -> None:
    counts, edges = histogram_counts([0.05, 0.15, 0.19, 1.0, 0.0, math.nan, 1.2], n_bins=10)
    assert counts.tolist() == [2, 2, 0, 0, 0, 0, 0, 0, 0, 2]  # NaN left out, 1.2 clipped into the last bin
    assert edges[0] == 0.0 and edges[-1] == 1.0 and len(edges) == 11


def test_confidence_histogram_one_trace_per_variant_with_counts_and_escaped_names() -> None:
    fig = confidence_histogram({"base": [1 / 3, 1 / 3, 1.0], "<b>calm</b>": [2 / 3, 1.0, 1.0, 1.0]}, "set", n_bins=3)
    assert [t.name for t in fig.data] == ["base", "&lt;b&gt;calm&lt;/b&gt;"]
    assert list(fig.data[0].y) == [0, 2, 1]  # 1/3 falls on an edge: it opens the middle bin
    assert list(fig.data[1].y) == [0, 0, 4]  # 2/3 is the last bin's left edge
    assert sum(fig.data[1].y) == 4 and fig.layout.barmode == "group"


def test_cluster_summary_groups_largest_first_with_first_member_as_label() -> None:
    samples = ["London", "Paris", "paris", "Paris.", "", "London"]
    clusters = group_by_string(samples)
    assert answer_groups(samples, clusters) == [("Paris", 3), ("London", 2), ("", 1)]
    assert cluster_summary(samples, clusters) == "Paris ×3 | London ×2 | (empty) ×1"
    index, confidence = modal_confidence(clusters)  # the first group is Sem1's answer
    assert samples[index] == "Paris" and confidence == pytest.approx(3 / 6)
    assert cluster_summary(["a", "b"], [0, 1]) == "a ×1 | b ×1"  # ties keep the order of appearance
    assert cluster_summary(["<script>x</script>"], [0]) == "<script>x</script> ×1"  # plain text, shown with st.text
    with pytest.raises(ValueError):
        answer_groups(["a", "b"], [0])


def test_open_answers_table_from_a_run_frame() -> None:
    frame = pd.DataFrame([
        {"id": "q1", "greedy": "Paris", "samples": ["Paris", "London", "Paris"], "clusters": [0, 1, 0],
         "sem_conf": 2 / 3, "sem_correct": 1.0},
        {"id": "q2", "greedy": "", "samples": [], "clusters": [], "sem_conf": math.nan, "sem_correct": math.nan},
    ])
    table = open_answers_table(frame)
    assert list(table.columns) == ["id", "greedy", "samples by cluster", "Sem1 confidence", "correct"]
    assert table.iloc[0].to_dict() == {"id": "q1", "greedy": "Paris", "samples by cluster": "Paris ×2 | London ×1",
                                       "Sem1 confidence": pytest.approx(2 / 3), "correct": True}
    assert table.iloc[1]["samples by cluster"] == "" and table.iloc[1]["correct"] is None
    assert table.iloc[1]["Sem1 confidence"] is None or np.isnan(table.iloc[1]["Sem1 confidence"])


# --- a finished open-QA run ------------------------------------------------------------

@pytest.fixture(scope="module")
def open_run(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """(workspace, run id) of a finished open-QA calm run on the tiny model."""
    from calm_core import launch
    from calm_core.training import loop as trainer
    from calm_core.scoring.models import ModelSpec, load_model
    from calm_core.training.config import TrainConfig

    workspace = tmp_path_factory.mktemp("openqa-workspace")
    cfg = TrainConfig(task="openqa", method="calm", steps=2, batch_size=2, heldout_batch_size=2, eval_every=0,
                      checkpoint_every=0, train_data="builtin/capitals_open/train",
                      heldout_data="builtin/capitals_open/validation", eval_data=(EVAL_SET,), train_limit=6,
                      heldout_limit=10, eval_limit=4,
                      generation=GenerationConfig(n_samples=N_SAMPLES, max_new_tokens=4, grouping="string"),
                      lora={"r": 4, "alpha": 8, "layers": 2}, model=str(tiny_model_dir))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CALM_WORKSPACE", str(workspace))
        run = launch.create_run(cfg)
        lm = load_model(ModelSpec(name=str(tiny_model_dir), device="cpu"))  # fresh: PEFT wraps it in place
        result = trainer.train(cfg, run=run, lm=lm)
    assert result.state == "finished"
    return workspace, run.run_id


@pytest.fixture()
def open_workspace(open_run: tuple[Path, str], monkeypatch: pytest.MonkeyPatch) -> str:
    """This test sees the open-QA run's workspace; returns the run id."""
    workspace, run_id = open_run
    monkeypatch.setenv("CALM_WORKSPACE", str(workspace))
    return run_id


@pytest.fixture()
def trained_open(open_workspace: str):
    from calm_core.results.playground import load_trained
    from calm_core.runs.rundir import RunDir

    return load_trained(RunDir.at(open_workspace), device="cpu")


def test_open_answers_for_every_variant_on_a_typed_question(trained_open, tiny_lm) -> None:
    from calm_core.results.playground import open_answers_for, untrained

    assert trained_open.task == "openqa" and trained_open.generation.n_samples == N_SAMPLES
    assert trained_open.temperature is not None  # S_V of 10 items fits a TS temperature
    cfg = GenerationConfig(n_samples=4, max_new_tokens=3, grouping="string")
    out = open_answers_for(trained_open, "What is the capital of Peru?", cfg)
    assert list(out) == ["base", "ts", "calm", "calm_theta_only"]
    for name, answers in out.items():
        assert len(answers["samples"]) == 4 and answers["clusters"] == group_by_string(answers["samples"]), name
        index, share = modal_confidence(answers["clusters"])
        assert answers["answer"] == answers["samples"][index] and answers["confidence"] == pytest.approx(share)
        assert 0.0 <= answers["seq_prob"] <= 1.0 and isinstance(answers["greedy"], str)
    assert out["ts"]["greedy"] == out["base"]["greedy"]  # z / T keeps the argmax
    alone = open_answers_for(untrained(tiny_lm), "What is the capital of Peru?", cfg)
    assert list(alone) == ["base"]  # no run: the base model alone
    assert alone["base"]["greedy"] == out["base"]["greedy"]  # the adapter is off for base
    assert alone["base"]["seq_prob"] == pytest.approx(out["base"]["seq_prob"], rel=1e-4)
    default = open_answers_for(trained_open, "What is the capital of Chile?")  # the run's own settings
    assert all(len(a["samples"]) == N_SAMPLES for a in default.values())
    no_samples = open_answers_for(trained_open, "Capital of Peru?", GenerationConfig(n_samples=0, max_new_tokens=2),
                                  theta_only=False)
    assert list(no_samples) == ["base", "ts", "calm"] and no_samples["calm"]["confidence"] is None
    with pytest.raises(ValueError):
        open_answers_for(trained_open, "   ", cfg)


def test_free_generation_applies_the_open_run_head(trained_open) -> None:
    from calm_core.results.playground import generate, head_acts_on_tokens

    assert head_acts_on_tokens(trained_open)
    rows = generate(trained_open, "Capital of Peru?", max_new_tokens=2)
    assert 1 <= len(rows) <= 2 and all(0.0 <= r["p_calibrated"] <= 1.0 for r in rows)


# --- pages under AppTest ---------------------------------------------------------------

def _text(at) -> str:
    parts = [*at.markdown, *at.caption, *at.info, *at.error, *at.warning, *at.success, *at.title, *at.subheader]
    return "\n".join(str(p.value) for p in parts)


def test_train_page_builds_an_open_answer_config(open_page, tiny_everywhere, tiny_model_dir, monkeypatch) -> None:
    import calm_core.launch
    from calm_core.data.entries import list_datasets
    from calm_core.training.tasks import get_task

    launched = []

    def fake_launch(cfg, root=None, launched_by=None, access=None, launched_from=None, estimate=None):  # no job: the config is checked
        launched.append(cfg)
        return calm_core.launch.create_run(cfg, root, launched_by), True

    monkeypatch.setattr(calm_core.launch, "launch_training", fake_launch)
    at = open_page("../pages/train/train.py")
    at.radio(key="train_task").set_value("open answers").run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    assert at.selectbox(key="train_data_open").value == "builtin/capitals_open/train"
    assert at.selectbox(key="train_heldout_open").value == "builtin/capitals_open/validation"
    assert at.multiselect(key="train_evals_open").value == [EVAL_SET]
    assert at.selectbox(key="train_data_open").options == [e.name for e in list_datasets(kind="open")]
    from app.widgets.words import method_name

    offered = set(at.selectbox(key="train_method_open").options)  # each named in full, with its flag name
    assert offered <= {method_name(m) for m in get_task("openqa").METHODS} and "CALM (calm)" in offered
    assert at.selectbox(key="train_scope_open").options == ["vocab", "scalar"]
    assert at.number_input(key="train_lr_alpha_sgd_open").value == pytest.approx(DEFAULT_LR["sgd"]["lr_alpha"])
    assert at.number_input(key="train_samples").value == 5
    at.radio(key="train_model_kind").set_value("local directory").run()
    at.text_input(key="train_model_name").set_value(str(tiny_model_dir))
    at.selectbox(key="train_grouping").set_value("string")
    at.number_input(key="train_max_new").set_value(6)
    at.selectbox(key="train_scope_open").set_value("scalar")
    at.run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    at.button(key="train_launch").click().run()
    assert not at.exception, at.exception
    assert at.success and "Run `" in at.success[0].value
    (cfg,) = launched
    assert cfg.task == "openqa" and cfg.method == "calm" and cfg.effective_scope == "scalar"
    assert cfg.generation == GenerationConfig(n_samples=5, max_new_tokens=6, grouping="string")
    assert cfg.lr_alpha == pytest.approx(DEFAULT_LR["sgd"]["lr_alpha"]) and cfg.eval_data == (EVAL_SET,)
    assert cfg.optimizer == "sgd"  # calm's plain BOME step
    # back to multiple choice: the MCQA pickers and defaults, untouched by the open-answer choice
    at.radio(key="train_task").set_value("multiple choice").run()
    assert not at.exception and not at.error
    assert not at.selectbox(key="train_data").value.endswith("_open/train")
    assert at.selectbox(key="train_scoring").value == "auto"  # decided on S_V when the run starts
    assert at.selectbox(key="train_scope_auto").options == ["auto", "scalar", "adaptive"]  # those that fit either rule
    at.selectbox(key="train_scoring").set_value("cloze").run()
    assert at.selectbox(key="train_scope_cloze").options == ["scalar", "adaptive"]  # cloze: no head that re-ranks
    at.selectbox(key="train_scoring").set_value("letter").run()
    assert at.selectbox(key="train_scope_letter").options == ["vocab", "options", "scalar", "adaptive"]  # paper's first
    assert not at.exception and not at.error


NAMED = ["the model as it is", "temperature scaling", "CALM", "CALM, adapter only"]  # base, ts, calm, calm_theta_only


def test_compare_page_shows_open_answers(open_page, tiny_everywhere, open_workspace) -> None:
    at = open_page("../pages/compare/compare.py")
    assert not at.exception, at.exception
    assert at.multiselect(key="compare_runs").value == [open_workspace]
    assert at.selectbox(key="compare_dataset").value == EVAL_SET
    assert not at.error, [e.value for e in at.error]
    assert "Sem1" in _text(at) and "Open answers" in _text(at)
    charts = at.get("plotly_chart")
    assert len(charts) >= 2  # reliability overlay + confidence histogram
    tables = [d.value for d in at.dataframe if "samples by cluster" in d.value.columns]
    assert len(tables) == 1 and len(tables[0]) == 4
    assert all(" ×" in text for text in tables[0]["samples by cluster"])
    metrics_table = at.dataframe[-1].value
    assert {"acc", "sem_acc", "ece", "auroc"} <= set(metrics_table.columns)  # the columns that fit (issue 23)
    assert set(NAMED) <= set(metrics_table["variant"])  # the variants named in full
    assert {"ece_10", "sem2_ece_10", "seq_ece_10"} <= set(at.multiselect(key="compare_columns").options)
    at.multiselect(key="compare_columns").set_value(["sem_acc", "ece_10", "sem2_ece_10", "seq_ece_10"]).run()
    assert list(at.dataframe[-1].value.columns) == ["variant", "sem_acc", "ece_10", "sem2_ece_10", "seq_ece_10"]
    at.selectbox(key="compare_open_variant").set_value("calm").run()
    assert not at.exception and not at.error
    at.radio(key="compare_layout").set_value("side by side").run()
    assert not at.exception and not at.error


def test_playground_answers_an_open_question_with_the_run(open_page, tiny_everywhere, open_workspace) -> None:
    at = open_page("../pages/playground/playground.py")
    at.selectbox(key="play_run").set_value(open_workspace).run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    assert "Open answer" in _text(at) and "Multiple choice" not in _text(at)
    assert at.slider(key="play_open_samples").value == N_SAMPLES  # the run's own settings
    at.text_input(key="play_open_question").set_value("What is the capital of <b>Peru</b>?")
    at.slider(key="play_open_max_new").set_value(3)
    at.button(key="play_open_answer").click().run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    table = at.dataframe[0].value
    assert list(table["variant"]) == NAMED
    assert all(" ×" in text for text in table["samples by cluster"])
    assert len(at.text) >= 4  # one literal list of clusters per variant
    at.button(key="play_generate").click().run()
    assert not at.exception and not at.error


def test_monitor_page_shows_an_open_answer_run(open_page, tiny_everywhere, open_workspace) -> None:
    at = open_page("../pages/monitor/monitor.py")
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    assert run_picker(at).value == open_workspace
    assert "greedy answer's sequence probability" in _text(at)  # what its periodic ECE is
    results = at.dataframe[-1].value
    assert {"sem_acc", "ece", "auroc"} <= set(results.columns)  # the columns that fit; all of them on Compare
    assert set(NAMED) == set(results["variant"])
