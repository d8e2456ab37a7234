"""lm-evaluation-harness samples as option scores (calm_core/scoring/lm_eval_samples.py,
`calm eval --from-lm-eval`): a REAL `lm_eval --log_samples` run on a task of built-in
questions (tests/fixtures/lm_eval/calm_capitals.yaml), imported, must give the same
accuracy and the same option probabilities (1e-4) as `calm eval --scoring cloze` on the
same questions with the same model; the tiny model in the fast suite, the embedded one
marked `embedded`. The reader's refusals are checked on hand-written lines.

lm_eval comes with the `dev` extra; without it these tests skip, except in CI (CI set),
where they fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from calm_core.cli import main
from calm_core.data.schema import DataError
from calm_core.scoring.lm_eval_samples import read_harness_folder, read_samples_bytes

TASK_YAML = Path(__file__).parent / "fixtures" / "lm_eval" / "calm_capitals.yaml"
TASK = "calm_capitals"


def _need_lm_eval() -> None:
    try:
        import lm_eval  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip("lm-eval is not installed (the `dev` extra installs it)")


def run_harness(model_dir: Path, folder: Path, n_items: int) -> tuple[Path, Path, int]:
    """lm_eval on the first `n_items` built-in capitals test questions (the set has 35), offline:
    (the items file, the output folder, the number of questions)."""
    from calm_core.scoring.evaluate import load_mc_items

    _need_lm_eval()
    items = load_mc_items("builtin/capitals/test", limit=n_items)
    data = folder / "capitals.jsonl"
    rows = [{"id": i.id, "question": i.question, "choices": list(i.choices), "answer": i.answer, "subject": i.subject}
            for i in items]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tasks = folder / "tasks"
    tasks.mkdir()
    (tasks / TASK_YAML.name).write_text(TASK_YAML.read_text().replace("DATA_FILE", str(data)))
    out = folder / "harness"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, "-m", "lm_eval", "--model", "hf", "--model_args",
               f"pretrained={model_dir},dtype=float32", "--device", "cpu", "--batch_size", "8",
               "--tasks", TASK, "--include_path", str(tasks), "--log_samples", "--output_path", str(out)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    return data, out, len(items)


def _calm_eval(tmp: Path, *args: str) -> tuple[dict[str, Any], pd.DataFrame]:
    """`calm eval ... --json --save-preds`: its base row and its base predictions."""
    record, preds = tmp / "record.json", tmp / "preds"
    assert main(["eval", *args, "--json", str(record), "--save-preds", str(preds), "--quiet"]) == 0
    rows = json.loads(record.read_text())["results"]
    base = next(r for r in rows if r["variant"] == "base")
    frame = pd.read_parquet(next((preds / "eval" / "base").glob("*.parquet")))
    return base, frame


def _same_as_calm_eval(model_dir: Path, tmp: Path, n_items: int) -> None:
    """The harness's samples imported = `calm eval` on the same questions, cloze rule."""
    data, out, n_items = run_harness(model_dir, tmp, n_items)
    theirs, their_preds = _calm_eval(tmp / "theirs", "--from-lm-eval", str(out))
    ours, our_preds = _calm_eval(tmp / "ours", "--model", str(model_dir), "--dtype", "float32", "--device", "cpu",
                                 "--data", str(data), "--scoring", "cloze")
    assert theirs["n"] == ours["n"] == n_items
    assert theirs["acc"] == ours["acc"]
    assert list(their_preds["id"]) == list(our_preds["id"])
    assert list(their_preds["gold"]) == list(our_preds["gold"])
    np.testing.assert_allclose(np.stack(their_preds["probs"]), np.stack(our_preds["probs"]), atol=1e-4, rtol=0)
    assert set(their_preds["subject"]) == {"capitals"}
    task = read_harness_folder(out)[TASK]  # both of the harness's accuracies, recomputed from its samples
    assert task.reported and task.disagreement("acc") is None and task.disagreement("acc_norm") is None
    assert task.accuracy("acc") == pytest.approx(task.reported["acc"], abs=1e-12)
    assert task.accuracy("acc_norm") == pytest.approx(task.reported["acc_norm"], abs=1e-12)


def test_tiny_model_harness_samples_equal_calm_eval(tiny_model_dir: Path, tmp_path: Path) -> None:
    _same_as_calm_eval(tiny_model_dir, tmp_path, n_items=12)


@pytest.mark.embedded
def test_embedded_model_harness_samples_equal_calm_eval(embedded_dir: Path, tmp_path: Path) -> None:
    _same_as_calm_eval(embedded_dir, tmp_path, n_items=35)


# Hand-written sample lines: the harness's shape (stringified log-likelihoods, gen_args pairs).


def _line(lls: list[float], target: Any, choices: tuple[str, ...] = ("Paris", "Rome", "Oslo"), **extra: Any) -> dict:
    context = "Question: capital of France?\nAnswer:"
    return {
        "doc_id": extra.pop("doc_id", 0),
        "doc": extra.pop("doc", {"subject": "geo"}),
        "target": str(target),
        "arguments": {f"gen_args_{k}": {"arg_0": context, "arg_1": " " + c} for k, c in enumerate(choices)},
        "resps": [[[str(v), "False"]] for v in lls],
        "filtered_resps": [[str(v), "False"] for v in lls],
        "filter": "none",
        **extra,
    }


def _file(*lines: dict) -> bytes:
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def test_scores_are_the_logliks_and_acc_norm_divides_by_characters() -> None:
    task = read_samples_bytes(_file(_line([-3.0, -4.0, -2.6], 0)), "samples_geo_2026-01-01T00-00-00.000001.jsonl")
    assert task.task == "geo" and task.subjects == ["geo"]
    np.testing.assert_array_equal(task.scores("acc").logits[0], [-3.0, -4.0, -2.6])
    np.testing.assert_allclose(task.scores("acc_norm").logits[0], [-3.0 / 5, -4.0 / 4, -2.6 / 4])
    assert task.scores("acc").scoring["rule"] == "cloze"
    assert task.scores("acc_norm").scoring["rule"] == "cloze_chars"
    assert task.accuracy("acc") == 0.0 and task.accuracy("acc_norm") == 1.0


def test_a_gold_given_as_the_choice_text_is_its_index() -> None:
    task = read_samples_bytes(_file(_line([-1.0, -2.0, -3.0], "Oslo")), "x.jsonl")
    assert task.gold == [2]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (_line([-1.0, -2.0, -3.0], 3), "gold index in 0..2"),
        (_line([-1.0, -2.0, -3.0], "[0, 1]"), "one gold choice"),
        (_line([-1.0, float("inf"), -3.0], 0), "finite log-likelihoods"),
        (_line([-1.0, -2.0], 0), "Expected 3 responses"),
        ({**_line([-1.0], 0), "filtered_resps": ["Paris"], "resps": [["Paris"]],
          "arguments": {"gen_args_0": {"arg_0": "Q", "arg_1": {"until": ["\n"]}}}}, "text pairs"),
        (_line([-1.0, -2.0, -3.0, -1.5, -2.5, -3.5], 0, choices=("Paris", "Rome", "Oslo") * 2,
               arguments={f"gen_args_{k}": {"arg_0": "Q" if k < 3 else "", "arg_1": " x"} for k in range(6)}),
         "acc_mutual_info"),
    ],
)
def test_unreadable_rows_are_rejected_with_their_reason(line: dict, reason: str) -> None:
    task = read_samples_bytes(_file(_line([-1.0, -2.0, -3.0], 0), line), "x.jsonl")
    assert len(task) == 1 and len(task.rejected) == 1
    assert reason in str(task.rejected[0]) and "row 2" in str(task.rejected[0])


def test_only_one_filters_lines_are_read() -> None:
    other = _line([-9.0, -1.0, -9.0], 1, filter="take_last")
    task = read_samples_bytes(_file(_line([-1.0, -2.0, -3.0], 0), other), "x.jsonl")
    assert len(task) == 1 and task.gold == [0]


def test_a_file_of_more_questions_than_the_budget_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import calm_core.scoring.lm_eval_samples as samples

    monkeypatch.setattr(samples, "MAX_SAMPLES", 2)
    assert len(read_samples_bytes(_file(*[_line([-1.0, -2.0, -3.0], 0)] * 2), "x.jsonl")) == 2
    with pytest.raises(DataError, match="at most 2 questions"):
        read_samples_bytes(_file(*[_line([-1.0, -2.0, -3.0], 0)] * 3), "x.jsonl")


def _folder(tmp_path: Path, n: int = 30) -> Path:
    """A harness output folder with two tasks of `n` questions each, gold always 0."""
    rng = np.random.default_rng(0)
    model = tmp_path / "out" / "org__model"
    model.mkdir(parents=True)
    for task in ("fit_task", "eval_task"):
        lines = [_line(list(rng.normal(size=3) * 4), 0, doc_id=i, doc={"id": f"{task}-{i}"}) for i in range(n)]
        (model / f"samples_{task}_2026-01-01T00-00-00.000001.jsonl").write_bytes(_file(*lines))
    return tmp_path / "out"


def test_from_lm_eval_fits_calibrators_on_one_task_and_evaluates_the_other(tmp_path: Path) -> None:
    record = tmp_path / "r.json"
    assert main(["eval", "--from-lm-eval", str(_folder(tmp_path)), "--fit-ts-on", "fit_task", "--json", str(record)]) == 0
    rows = json.loads(record.read_text())["results"]
    assert {r["dataset"] for r in rows} == {"eval_task"}
    assert {"base", "ts"} <= {r["variant"] for r in rows}
    assert all(r["scoring"] == "cloze" and r["scoring_config"]["source"] == "lm-evaluation-harness" for r in rows)


def test_from_lm_eval_refuses_model_flags_and_unknown_tasks(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    folder = str(_folder(tmp_path))
    assert main(["eval", "--from-lm-eval", folder, "--model", "embedded"]) != 0
    assert "drop --model" in capsys.readouterr().err
    assert main(["eval", "--from-lm-eval", folder, "--fit-ts-on", "nope"]) != 0
    assert "not a task of the samples" in capsys.readouterr().err


def test_eval_without_data_or_samples_says_what_to_give(capsys: pytest.CaptureFixture) -> None:
    assert main(["eval", "--model", "embedded"]) != 0
    assert "--data NAME (or --from-lm-eval DIR)" in capsys.readouterr().err


def test_a_folder_without_samples_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="--log_samples"):
        read_harness_folder(tmp_path)


# The Data page's section (app/pages/data/lm_eval_view.py).


def test_summary_rows_give_both_forms_beside_the_harness_accuracy(tmp_path: Path) -> None:
    from app.pages.data.lm_eval_view import summary_rows

    tasks = read_harness_folder(_folder(tmp_path))
    tasks["eval_task"].reported = {"acc": 0.25}
    rows = summary_rows(tasks)
    assert [(r["task"], r["form"], r["scoring"]) for r in rows] == [
        ("eval_task", "acc", "cloze"), ("eval_task", "acc_norm", "cloze_chars"),
        ("fit_task", "acc", "cloze"), ("fit_task", "acc_norm", "cloze_chars"),
    ]
    assert rows[0]["harness acc"] == 0.25 and rows[0]["acc"] == tasks["eval_task"].accuracy("acc")
    assert rows[1]["acc"] == tasks["eval_task"].accuracy("acc_norm")


def _section_table(at) -> pd.DataFrame:
    return next(frame.value for frame in at.dataframe if "harness acc" in frame.value.columns)


def test_data_page_reads_a_local_folder(tmp_path: Path, open_page, tiny_everywhere) -> None:
    folder = _folder(tmp_path)
    at = open_page("../pages/data/data.py")
    at.text_input(key="data_lm_eval_dir").input(str(folder)).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert set(_section_table(at)["task"]) == {"eval_task", "fit_task"}
    assert any(f"--from-lm-eval {folder} --fit-ts-on" in c.value for c in at.code)
    at.text_input(key="data_lm_eval_dir").input(str(tmp_path / "nothing")).run()
    assert any("lm-evaluation-harness output" in e.value for e in at.error)


def test_a_shared_data_page_takes_no_path_but_an_upload(
    tmp_path: Path, open_page, tiny_everywhere, monkeypatch: pytest.MonkeyPatch
) -> None:
    import app.pages.data.lm_eval_view
    from calm_core.access.rules import access_from

    monkeypatch.setattr(app.pages.data.lm_eval_view, "studio_access", lambda: access_from({"CALM_STUDIO_SHARED": "1"}, "0.0.0.0"))
    at = open_page("../pages/data/data.py")
    assert not any(t.key == "data_lm_eval_dir" for t in at.text_input)
    data = _file(_line([-1.0, -2.0, -3.0], 0), _line([-1.0, -2.0, -3.0], 7))
    at.get("file_uploader")[1].set_value(("samples_geo_2026-01-01T00-00-00.000001.jsonl", data, "application/json")).run()
    assert not at.exception
    table = _section_table(at)
    assert list(table["task"]) == ["geo", "geo"] and list(table["rejected"]) == [1, 1]
