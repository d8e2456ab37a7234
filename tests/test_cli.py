"""Tests for the `calm` command (calm_core.cli): `calm datasets` and `calm eval`.

`calm eval` runs in-process through `calm_core.cli.commands([...])` on the tiny random Llama
(`tiny_model_dir`), 8 items per dataset. The expensive runs are module fixtures shared
by several tests; one test runs the installed console script in a subprocess.

    .venv/bin/python -m pytest tests/test_cli.py -q
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calm_core.calibration import metrics
from calm_core.cli import main
from calm_core.data.builtin import builtin_names, load_builtin
from calm_core.data.catalog import load_dataset
from calm_core.calibration.posthoc import TemperatureScaler
from calm_core.runs.layout import predictions_path

LIMIT = 8  # items per evaluated dataset
FIT_LIMIT = 10  # = posthoc.MIN_FIT_ITEMS; capitals/train gives the tiny model a moderate T
CAPITALS = "builtin/capitals/test"
FIT_SET = "builtin/capitals/train"
HEADER = ["dataset", "variant", "n", "acc", "ece", "mce", "rms_ce", "brier", "nll", "auroc", "confidence"]
ROW_KEYS = {"dataset", "variant", "scoring", "n", "acc", "ece", "ece_bins", "ece_10", "bins", "mce", "rms_ce", "brier",
            "nll", "auroc", "confidence", "adaptive_ece", "classwise_ece", "entropy", "smooth_ece", "scoring_config"}

# A file with ids out of sorted order, 2-5 choices, answers as index / letter / text, and one
# rejected row (gold out of range): `--limit 8` keeps the first 8 VALID rows in file order.
ORDER_ROWS = [
    {"id": "q-07", "question": "Which planet is known as the red planet?", "choices": ["Venus", "Mars", "Jupiter"], "answer": 1},
    {"id": "q-02", "question": "What is 2 + 2?", "choices": ["3", "4", "5", "22"], "answer": 1},
    {"id": "q-bad", "question": "A row whose gold index is out of range.", "choices": ["a", "b"], "answer": 5},
    {"id": "q-11", "question": "Which gas do plants take in?", "choices": ["Oxygen", "Carbon dioxide"], "answer": "Carbon dioxide"},
    {"id": "q-05", "question": "Which animal is a mammal?", "choices": ["Shark", "Eagle", "Whale", "Frog", "Bee"], "answer": "C"},
    {"id": "q-01", "question": "What colour is the sky on a clear day?", "choices": ["Blue", "Green"], "answer": 0},
    {"id": "q-09", "question": "How many legs does a spider have?", "choices": ["Six", "Eight", "Ten"], "answer": "B"},
    {"id": "q-03", "question": "Which metal is liquid at room temperature?", "choices": ["Iron", "Mercury", "Gold", "Tin"], "answer": 1},
    {"id": "q-10", "question": "What is frozen water called?", "choices": ["Steam", "Ice", "Fog"], "answer": "Ice"},
    {"id": "q-04", "question": "Which is the largest ocean?", "choices": ["Atlantic", "Pacific"], "answer": 1},
    {"id": "q-06", "question": "Which bird cannot fly?", "choices": ["Penguin", "Robin", "Crow"], "answer": 0},
]
ORDER_IDS = ["q-07", "q-02", "q-11", "q-05", "q-01", "q-09", "q-03", "q-10"]
ORDER_GOLD = [1, 1, 1, 2, 0, 1, 1, 1]
ORDER_N_CHOICES = [3, 4, 2, 5, 2, 3, 4, 3]


class ModelLoaded(Exception):
    """Raised by the patched model loader: the CLI got past input checking."""


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """main(argv) in-process -> (exit status, stdout, stderr); usable from module fixtures."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def padded_probs(frame: pd.DataFrame) -> np.ndarray:
    """The parquet's ragged per-item probs as (N, K_max), zero padding (as the CLI's softmax)."""
    k_max = int(frame["n_choices"].max())
    probs = np.zeros((len(frame), k_max))
    for i, p in enumerate(frame["probs"]):
        probs[i, : len(p)] = p
    return probs


def rows_by_key(record: dict) -> dict[tuple[str, str], dict]:
    return {(r["dataset"], r["variant"]): r for r in record["results"]}


def table_rows(stdout: str) -> tuple[list[str], list[list[str]]]:
    """(header cells, data rows' cells) of the printed metric table (the intervals' table follows it)."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["dataset", "variant"])
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("90% ")), len(lines))
    return lines[start].split(), [line.split() for line in lines[start + 1:end] if line.strip()]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory):
    """Module-wide: an empty workspace and a small shared-data folder (one mc, one open set)."""
    shared = tmp_path_factory.mktemp("shared-data")
    (shared / "quiz").mkdir()
    write_jsonl(shared / "quiz" / "dev.jsonl", ORDER_ROWS[:2])
    (shared / "trivia").mkdir()
    write_jsonl(shared / "trivia" / "test.jsonl", [{"id": "t1", "question": "Capital of France?", "answers": ["Paris"]}])
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CALM_DATA_DIR", str(shared))
        mp.setenv("CALM_WORKSPACE", str(tmp_path_factory.mktemp("cli-workspace")))
        yield shared


@pytest.fixture(scope="module")
def order_file(env, tmp_path_factory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("order") / "order.jsonl", ORDER_ROWS)


@pytest.fixture(scope="module")
def main_run(env, tiny_model_dir, order_file, tmp_path_factory) -> dict:
    """Two datasets, TS fitted on one, saved temperature, JSON and per-item predictions."""
    out = tmp_path_factory.mktemp("main-run")
    argv = ["eval", "--model", str(tiny_model_dir), "--data", CAPITALS, str(order_file), "--limit", str(LIMIT),
            "--fit-ts-on", FIT_SET, "--fit-limit", str(FIT_LIMIT), "--save-ts", str(out / "ts.json"),
            "--json", str(out / "out.json"), "--save-preds", str(out / "preds"), "--quiet"]
    rc, stdout, stderr = run_cli(argv)
    assert rc == 0, stderr
    return {"stdout": stdout, "stderr": stderr, "dir": out, "record": json.loads((out / "out.json").read_text())}


@pytest.fixture
def no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make loading the model an uncaught error: checks must fail before it."""
    def refuse(args):
        raise ModelLoaded(args.model)

    monkeypatch.setattr("calm_core.cli.eval_io.load_lm", refuse)


# ----------------------------------------------------------------------------- calm eval: output


def test_eval_prints_table_with_header_and_rows(main_run):
    header, rows = table_rows(main_run["stdout"])
    assert header == HEADER
    results = main_run["record"]["results"]
    assert [r[:3] for r in rows] == [[CAPITALS, "base", "8"], [CAPITALS, "ts", "8"],
                                     [results[2]["dataset"], "base", "8"], [results[2]["dataset"], "ts", "8"]]
    for cells, result in zip(rows, results):  # the table shows the JSON values, 4 decimals
        for column, cell in zip(HEADER[3:], cells[3:]):
            assert cell == f"{result[column]:.4f}", column
    assert main_run["stdout"].startswith("model: ")
    assert "scoring: cloze  bins: 15" in main_run["stdout"].splitlines()[0]


def test_eval_notes_the_rejected_row_on_stderr_and_in_json(main_run, order_file):
    """order.jsonl's row 3 (gold out of range) is left out: said on stderr, counted in --json."""
    assert main_run["stderr"].splitlines() == [
        f"calm: note: 1 of 9 rows read from {order_file} were rejected:",
        "  order.jsonl, row 3, field `answer`: Expected an index in 0..1, but got 5"]
    data = {(d["dataset"], d["role"]): d for d in main_run["record"]["datasets"]}
    assert set(data) == {(CAPITALS, "eval"), (str(order_file), "eval"), (FIT_SET, "fit")}
    order = data[(str(order_file), "eval")]
    assert (order["n_items"], order["n_rows"], order["n_rejected"]) == (LIMIT, 9, 1)
    assert order["rejected"] == [{"source": "order.jsonl", "row": 3, "field": "answer",
                                  "message": "Expected an index in 0..1, but got 5"}]
    assert data[(CAPITALS, "eval")]["n_rejected"] == 0 and data[(CAPITALS, "eval")]["rejected"] == []


def test_eval_json_has_documented_keys(main_run, order_file):
    record = main_run["record"]
    assert {"results", "model", "scoring", "ts", "limit", "seed", "environment"} <= set(record)
    assert record["limit"] == LIMIT and record["seed"] == 0 and record["scoring"]["rule"] == "cloze"
    assert [(r["dataset"], r["variant"]) for r in record["results"]] == [
        (CAPITALS, "base"), (CAPITALS, "ts"), (str(order_file), "base"), (str(order_file), "ts")]
    for row in record["results"]:
        assert ROW_KEYS <= set(row), ROW_KEYS - set(row)
        assert row["n"] == LIMIT
        assert row["scoring"] == "cloze" and row["scoring_config"]["rule"] == "cloze"
        assert row["ece_bins"] == 15 and len(row["bins"]) == 15
        assert sum(b["count"] for b in row["bins"]) == LIMIT
        assert 0.0 <= row["acc"] <= 1.0 and 0.0 <= row["ece"] <= row["mce"] <= 1.0


@pytest.mark.parametrize("variant", ["base", "ts"])
@pytest.mark.parametrize("dataset", ["capitals", "order"])
def test_eval_json_metrics_match_saved_predictions(main_run, order_file, dataset, variant):
    name = CAPITALS if dataset == "capitals" else str(order_file)
    row = rows_by_key(main_run["record"])[(name, variant)]
    path = predictions_path(main_run["dir"] / "preds", variant, name)
    assert path.is_file()
    frame = pd.read_parquet(path)
    assert len(frame) == LIMIT
    probs, gold = padded_probs(frame), frame["gold"].to_numpy()
    for key, value in metrics.summarize(probs, gold, n_bins=15).items():
        assert row[key] == pytest.approx(value, rel=1e-9, abs=1e-12, nan_ok=True), key
    assert row["ece_10"] == pytest.approx(metrics.ece(probs, gold, n_bins=10), rel=1e-9, abs=1e-12)
    conf, correct = metrics.top_label(probs, gold)
    assert [b["count"] for b in row["bins"]] == [b["count"] for b in metrics.bin_confidences(conf, correct, 15).to_records()]
    np.testing.assert_array_equal(frame["prediction"], probs.argmax(axis=1))
    np.testing.assert_allclose(frame["confidence"], probs.max(axis=1), rtol=1e-12)


def test_ts_variant_applies_the_printed_temperature(main_run):
    record = main_run["record"]
    assert len(record["ts"]) == 1
    ts = record["ts"][0]
    assert ts["dataset"] == FIT_SET and ts["n"] == FIT_LIMIT
    assert ts["nll_after"] <= ts["nll_before"]
    t = ts["temperature"]
    assert f"ts: T = {t:.4f}" in main_run["stdout"].splitlines()
    assert TemperatureScaler.load(main_run["dir"] / "ts.json").temperature_ == t  # --save-ts
    base = pd.read_parquet(predictions_path(main_run["dir"] / "preds", "base", CAPITALS))
    scaled = pd.read_parquet(predictions_path(main_run["dir"] / "preds", "ts", CAPITALS))
    logits = np.array(base["logits"].tolist())  # built-in sets have 4 options each: (8, 4)
    np.testing.assert_allclose(np.array(scaled["logits"].tolist()), logits)
    np.testing.assert_allclose(np.array(scaled["probs"].tolist()), metrics.softmax(logits / t), rtol=1e-9)
    np.testing.assert_array_equal(scaled["prediction"], base["prediction"])  # TS keeps the argmax
    rows = rows_by_key(record)
    assert rows[(CAPITALS, "ts")]["acc"] == rows[(CAPITALS, "base")]["acc"]
    assert rows[(CAPITALS, "ts")]["ece"] != rows[(CAPITALS, "base")]["ece"]


def test_limit_takes_first_valid_items_in_file_order(main_run, order_file):
    frame = pd.read_parquet(predictions_path(main_run["dir"] / "preds", "base", str(order_file)))
    assert list(frame["id"]) == ORDER_IDS
    assert list(frame["gold"]) == ORDER_GOLD
    assert list(frame["n_choices"]) == ORDER_N_CHOICES
    assert [len(p) for p in frame["probs"]] == ORDER_N_CHOICES
    builtin = pd.read_parquet(predictions_path(main_run["dir"] / "preds", "base", CAPITALS))
    generated = load_builtin("capitals", "test").items  # the generator's order is the "file order"
    assert list(builtin["id"]) == [item.id for item in generated[:LIMIT]]


def test_ts_file_reproduces_fitted_ts_metrics(main_run, tiny_model_dir, order_file, tmp_path):
    ts_file = main_run["dir"] / "ts.json"
    rc, stdout, stderr = run_cli(["eval", "--model", str(tiny_model_dir), "--data", CAPITALS, "--data", str(order_file),
                                  "--limit", str(LIMIT), "--ts-file", str(ts_file), "--quiet",
                                  "--json", str(tmp_path / "again.json")])
    assert rc == 0, stderr
    again = json.loads((tmp_path / "again.json").read_text())
    assert again["ts"] == [{"file": str(ts_file)}]
    t = main_run["record"]["ts"][0]["temperature"]
    assert f"ts: T = {t:.4f}" in stdout.splitlines()
    assert json.dumps(again["results"]) == json.dumps(main_run["record"]["results"])  # base and ts rows, exactly


def test_fit_on_two_datasets_adds_one_ts_variant_each(main_run, tiny_model_dir, tmp_path):
    second = "builtin/animal_classes/test"
    rc, stdout, stderr = run_cli(["eval", "--model", str(tiny_model_dir), "--data", CAPITALS, "--limit", "4",
                                  "--fit-ts-on", FIT_SET, second, "--fit-limit", str(FIT_LIMIT), "--quiet",
                                  "--json", str(tmp_path / "two.json")])
    assert rc == 0, stderr
    record = json.loads((tmp_path / "two.json").read_text())
    assert [r["variant"] for r in record["results"]] == ["base", f"ts:{FIT_SET}", f"ts:{second}"]
    assert [t["dataset"] for t in record["ts"]] == [FIT_SET, second]
    for ts in record["ts"]:
        assert f"ts:{ts['dataset']}: T = {ts['temperature']:.4f}" in stdout.splitlines()
    assert not any(line.startswith("ts: T") for line in stdout.splitlines())
    # the same fit set and limit give the same temperature as the single-fit run
    assert record["ts"][0]["temperature"] == pytest.approx(main_run["record"]["ts"][0]["temperature"], rel=1e-9)
    assert record["ts"][0]["temperature"] != pytest.approx(record["ts"][1]["temperature"])


def test_eval_is_deterministic(main_run, tiny_model_dir, tmp_path):
    argv = ["eval", "--model", str(tiny_model_dir), "--data", CAPITALS, "--limit", str(LIMIT), "--quiet", "--json"]
    outputs = []
    for name in ("a.json", "b.json"):
        rc, _, stderr = run_cli(argv + [str(tmp_path / name)])
        assert rc == 0, stderr
        outputs.append(json.loads((tmp_path / name).read_text())["results"])
    assert len(outputs[0]) == 1
    assert json.dumps(outputs[0]) == json.dumps(outputs[1])
    assert json.dumps(outputs[0][0]) == json.dumps(rows_by_key(main_run["record"])[(CAPITALS, "base")])


# ----------------------------------------------------------------------------- calm eval: bad input


def _bad_files(tmp: Path) -> dict[str, Path]:
    bad = tmp / "bad.jsonl"
    bad.write_text('{not json\n{"question": "x"\n')
    empty = tmp / "empty.jsonl"
    empty.write_text("")
    table = tmp / "quiz.csv"
    table.write_text("q,A,B,label\nWhat is 1 + 1?,2,3,0\nWhat is 2 + 1?,4,3,1\n")
    open_qa = write_jsonl(tmp / "open.jsonl", [{"id": "o1", "question": "Capital of France?", "answers": ["Paris"]}])
    return {"bad": bad, "empty": empty, "csv": table, "open": open_qa, "missing": tmp / "missing.jsonl"}


BAD_INPUTS = [
    pytest.param(["--data", "builtin/capitalz/test"],
                 r"Expected a dataset name, but got 'builtin/capitalz/test'\. Close matches: builtin/capitals/test",
                 id="unknown-name"),
    pytest.param(["--data", "{bad}"], r"Expected at least one valid row in .*bad\.jsonl, but all 2 were rejected",
                 id="malformed-json"),
    pytest.param(["--data", "{empty}"], r"Expected data rows in .*empty\.jsonl, but the file is empty", id="empty-file"),
    pytest.param(["--data", "{csv}", "--mapping", "question=nope, choices=A|B, answer=label"],
                 r"Expected column\(s\) nope in .*quiz\.csv for mc items, but the columns are: q, A, B, label",
                 id="csv-wrong-mapping"),
    pytest.param(["--data", "{open}"], r"Expected a multiple-choice dataset for `.*open\.jsonl`, but it holds 'open' items",
                 id="open-answer-file"),
    pytest.param(["--data", "trivia/test"], r"Expected a multiple-choice dataset for `trivia/test`, but it holds 'open'",
                 id="open-answer-shared"),
    pytest.param(["--data", CAPITALS, "{missing}"], r"Expected a dataset file at .*missing\.jsonl, but it does not exist",
                 id="second-dataset-missing"),
    pytest.param(["--data", CAPITALS, "--fit-ts-on", "builtin/nope/train"],
                 r"Expected a dataset name, but got 'builtin/nope/train'", id="unknown-fit-set"),
    pytest.param(["--data", CAPITALS, "--limit", "0"], r"Expected `limit` to be a positive int or None, but got 0",
                 id="limit-zero"),
    pytest.param(["--data", CAPITALS, "--fit-ts-on", FIT_SET, "--ts-file", "{missing}"],
                 r"use either --fit-ts-on or --ts-file, not both", id="fit-and-ts-file"),
]


@pytest.mark.parametrize("args, message", BAD_INPUTS)
def test_bad_input_exits_2_with_one_line_before_loading_the_model(env, tmp_path, capsys, no_model, args, message):
    files = _bad_files(tmp_path)
    argv = ["eval", "--model", "/nonexistent/model", "--quiet"] + [a.format(**files) for a in args]
    assert main(argv) == 2  # ModelLoaded would escape main(): these fail before the model
    out, err = capsys.readouterr()
    assert out == ""
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert lines[0].startswith("calm: error: ")
    assert re.search(message, lines[0]), lines[0]
    assert len(lines) == 1, err


def test_malformed_file_names_the_rejected_rows(env, tmp_path, capsys, no_model):
    files = _bad_files(tmp_path)
    assert main(["eval", "--data", str(files["bad"]), "--quiet"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    assert err.startswith(f"calm: error: Expected at least one valid row in {files['bad']}, but all 2 were rejected")
    assert "bad.jsonl, row 1: Expected valid JSON" in err and "bad.jsonl, row 2: Expected valid JSON" in err


def test_duplicate_ids_are_named_on_stderr_before_the_model_loads(env, tmp_path, capsys, no_model):
    """The reported case: 5 rows sharing one id evaluated 1 row with no word about the other 4."""
    rows = [{"id": "same", "question": f"Q{i}?", "choices": ["a", "b"], "answer": 0} for i in range(5)]
    path = write_jsonl(tmp_path / "dups.jsonl", rows)
    with pytest.raises(ModelLoaded):
        main(["eval", "--data", str(path), "--quiet"])
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"calm: note: 4 of 5 rows read from {path} were rejected:"
    assert err[1:] == [f"  dups.jsonl, row {row}, field `id`: Expected a unique id, but 'same' already appeared in row 1"
                       for row in (2, 3, 4, 5)]


def test_rejected_rows_past_the_first_few_are_counted_on_stderr(env, tmp_path, capsys, no_model):
    good = {"id": "ok", "question": "Q?", "choices": ["a", "b"], "answer": 0}
    bad = [{"id": f"b{i}", "question": f"B{i}?", "choices": ["only"], "answer": 0} for i in range(8)]
    path = write_jsonl(tmp_path / "mixed.jsonl", [good, *bad])
    with pytest.raises(ModelLoaded):
        main(["eval", "--data", str(path), "--quiet"])
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"calm: note: 8 of 9 rows read from {path} were rejected:"
    assert err[1] == "  mixed.jsonl, row 2, field `choices`: Expected at least 2 choices, but got 1"
    assert len(err) == 1 + 5 + 1 and err[-1] == "  ... and 3 more"


UNWRITABLE = [
    pytest.param(["--json", "{blocker}/out.json"], r"Expected a folder at .*blocker\.txt to write .*out\.json into, but it is a file",
                 id="json-under-a-file"),
    pytest.param(["--json", "{folder}"], r"Expected a file to write at .*folder, but it is a directory", id="json-is-a-folder"),
    pytest.param(["--save-preds", "{blocker}/preds"], r"Expected a folder at .*blocker\.txt to write .*preds into",
                 id="preds-under-a-file"),
    pytest.param(["--save-preds", "{blocker}"], r"Expected a directory to write into at .*blocker\.txt, but it is a file",
                 id="preds-is-a-file"),
    pytest.param(["--fit-ts-on", FIT_SET, "--save-ts", "{blocker}/ts.json"], r"blocker\.txt to write .*ts\.json into",
                 id="save-ts-under-a-file"),
    pytest.param(["--save-ts", "{folder}/ts.json"], r"--save-ts needs exactly one --fit-ts-on dataset",
                 id="save-ts-without-fit-set"),
]


@pytest.mark.parametrize("args, message", UNWRITABLE)
def test_unwritable_outputs_fail_before_the_model_loads(env, tmp_path, capsys, no_model, args, message):
    """An output that cannot be written used to fail only after all the scoring."""
    blocker = tmp_path / "blocker.txt"
    blocker.write_text("a file where a folder is wanted")
    (tmp_path / "folder").mkdir()
    argv = ["eval", "--data", CAPITALS, "--limit", "2", "--quiet"]
    argv += [a.format(blocker=blocker, folder=tmp_path / "folder") for a in args]
    assert main(argv) == 2  # ModelLoaded would escape main(): the check comes first
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1
    assert re.search(message, err), err
    assert "Error" not in err


def test_ensure_writable_creates_missing_folders(tmp_path):
    from calm_core.paths import ensure_writable

    assert ensure_writable(tmp_path / "a" / "b" / "out.json", "file") == tmp_path / "a" / "b" / "out.json"
    assert (tmp_path / "a" / "b").is_dir() and not (tmp_path / "a" / "b" / "out.json").exists()
    assert ensure_writable(tmp_path / "preds" / "x", "directory").is_dir()
    assert list((tmp_path / "a" / "b").iterdir()) == []  # the write probe leaves nothing behind
    with pytest.raises(ValueError, match="Expected `kind` to be one of file, directory, but got 'dir'"):
        ensure_writable(tmp_path, "dir")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_ensure_writable_refuses_a_read_only_folder(tmp_path):
    from calm_core.paths import ensure_writable

    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(ValueError, match=r"Expected a writable folder for .*out\.json, but .*locked cannot be written"):
            ensure_writable(locked / "out.json", "file")
    finally:
        locked.chmod(0o700)


def test_missing_model_path_exits_2_with_one_line(env, tmp_path, capsys):
    missing = tmp_path / "no-such-model"
    assert main(["eval", "--model", str(missing), "--data", CAPITALS, "--limit", "2", "--quiet"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"calm: error: Expected a model directory at {missing}, but it does not exist.\n"


def test_too_few_fit_items_exits_2_with_one_line(env, tiny_model_dir, capsys):
    # Checked before the model is loaded; one clean line.
    argv = ["eval", "--model", str(tiny_model_dir), "--data", CAPITALS, "--limit", "2", "--fit-ts-on", FIT_SET,
            "--fit-limit", "5", "--quiet"]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"calm: error: Expected at least 10 items to fit TS on `{FIT_SET}`, but it has 5\n"


def test_console_script_reports_errors_with_status_2(env, tmp_path):
    script = Path(sys.executable).with_name("calm")
    command = [str(script)] if script.is_file() else [sys.executable, "-m", "calm_core.cli"]
    environ = {**os.environ, "CALM_WORKSPACE": str(tmp_path), "CALM_DATA_DIR": str(env)}
    done = subprocess.run(command + ["eval", "--data", "builtin/nope/test", "--quiet"], env=environ,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("calm: error: Expected a dataset name, but got 'builtin/nope/test'.")


# ----------------------------------------------------------------------------- calm datasets


def _listing(stdout: str) -> dict[str, tuple[str, str]]:
    """name -> (kind, source) from `calm datasets` lines."""
    return {cells[0]: (cells[1], cells[2]) for cells in (line.split() for line in stdout.splitlines())}


def test_datasets_lists_builtin_and_shared_names(env, capsys, tmp_path):
    assert main(["datasets", "--json", str(tmp_path / "list.json")]) == 0
    out = capsys.readouterr().out
    listed = _listing(out)
    assert list(listed)[: len(builtin_names())] == builtin_names()
    assert listed[CAPITALS] == ("mc", "builtin")
    assert listed["quiz/dev"] == ("mc", "shared")
    assert listed["trivia/test"] == ("open", "shared")
    capitals_line = next(line for line in out.splitlines() if line.startswith(CAPITALS + " "))
    assert f" {len(load_dataset(CAPITALS).items)}  " in capitals_line
    saved = json.loads((tmp_path / "list.json").read_text())
    assert [e["name"] for e in saved] == list(listed)


def test_datasets_kind_filters(env, capsys):
    builtin_open = {n for n in builtin_names() if "_open/" in n}
    assert main(["datasets", "--kind", "mc"]) == 0
    mc = _listing(capsys.readouterr().out)
    assert set(builtin_names()) - builtin_open <= set(mc) and "quiz/dev" in mc
    assert "trivia/test" not in mc and not builtin_open & set(mc)
    assert {kind for kind, _ in mc.values()} == {"mc"}
    assert main(["datasets", "--kind", "open"]) == 0
    assert _listing(capsys.readouterr().out) == {"trivia/test": ("open", "shared"),
                                                 **{n: ("open", "builtin") for n in builtin_open}}


def test_degenerate_temperature_is_flagged(env, tiny_model_dir, capsys):
    """A random model's fit set has no confidence signal: T runs off and the CLI says so."""
    argv = ["eval", "--model", str(tiny_model_dir), "--data", CAPITALS, "--limit", "4",
            "--fit-ts-on", "builtin/capitals/validation", "--fit-limit", "12", "--quiet"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert float(out.split("ts: T = ")[1].split()[0]) > 100
    assert "near-uniform" in out
    argv[argv.index("builtin/capitals/validation")] = FIT_SET  # here the tiny model's T stays moderate
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert float(out.split("ts: T = ")[1].split()[0]) < 100
    assert "near-uniform" not in out


def test_a_bug_keeps_its_traceback_and_a_refusal_is_one_line(monkeypatch, capsys):
    """`main()` turns the project's refusals ("Expected ..., but got ...") into one line; any
    other ValueError is a bug and propagates with its traceback; --debug shows it for all."""
    from calm_core.cli import commands

    def refuse(args):
        raise ValueError("Expected a number, but got 'x'")

    def bug(args):
        raise ValueError("operands could not be broadcast together")

    monkeypatch.setitem(commands.COMMANDS, "datasets", refuse)
    assert commands.main(["datasets"]) == 2
    assert capsys.readouterr().err == "calm: error: Expected a number, but got 'x'\n"
    with pytest.raises(ValueError, match="Expected a number"):
        commands.main(["--debug", "datasets"])
    monkeypatch.setitem(commands.COMMANDS, "datasets", bug)
    with pytest.raises(ValueError, match="broadcast"):
        commands.main(["datasets"])
