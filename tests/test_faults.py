"""Fault injection: a real training job (tiny model, detached worker) SIGKILLed at each
named point of its life (calm_core.faults.POINTS: model load, cache fill, steps, inside
and after a checkpoint write, the final evaluation, the final write). After each kill:

- `calm runs` tells the truth: the run is `failed`, its process gone, and the step it
  shows is the last one logged (or the one before, when the kill fell between the two);
- no file in the run directory is corrupt: every JSON file is an object, every metrics
  line parses, every complete checkpoint reads whole, every Parquet file reads;
- `calm resume` ends with the results of an uninterrupted run: the same result rows,
  every step logged once, the final adapter within the resume test's tolerance.

Five points run in the default suite; all twenty-two with `-m slow`:

    .venv/bin/python -m pytest tests/test_faults.py -q -m slow
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from calm_core.runs import queue
from calm_core.cli import main
from calm_core.faults import FAULT_ENV, POINTS
from calm_core.runs.process import pid_alive
from calm_core.runs.rundir import RunDir
from calm_core.training.checkpoints import read_checkpoint
from tests.test_cli_train import TINY
from tests.test_jobs import wait_for

STEPS = 6
RUN_ARGS = ["--method", "calm", "--steps", str(STEPS), "--set", "checkpoint_every=2", "--set", "eval_every=3",
            "--set", 'lora={"r": 4, "alpha": 8, "layers": 1}', *TINY,  # layers=1: the frozen-layer cache fills
            "--heldout-limit", "10",  # enough S_V for a `ts` variant: 5 variants written
            "--select-patience", "0"]  # every step runs; the selection (and selected/) is still made and resumed
JOB_TIMEOUT_S = 240.0

# (point, n): die the n-th time the job passes `point`. In a 6-step run with a checkpoint
# every 2 steps and one evaluation set: 6 steps, 3 checkpoints (2, 4 and the final one),
# 4 variants written (base, ts, calm, calm_theta_only).
QUICK = [("model_loaded", 1), ("step_logged", 3), ("checkpoint_files", 2), ("eval_written", 2), ("results_written", 1)]
EVERY = ([("model_loaded", 1), ("cache_fill", 1), ("cache_fill", 2)] + [("step_logged", n) for n in range(1, 7)]
         + [("checkpoint_files", n) for n in (1, 2, 3)] + [("checkpoint_done", n) for n in (1, 2, 3)]
         + [("eval_written", n) for n in (1, 2, 3, 4)] + [("results_written", 1)])
assert {point for point, _ in EVERY} == set(POINTS) and len(EVERY) >= 20


def start(tiny_model_dir: Path, root: Path, capsys) -> RunDir:
    assert main(["train", "--model", str(tiny_model_dir), "--detach", "--runs-root", str(root), *RUN_ARGS]) == 0
    return RunDir.at(capsys.readouterr().out.strip().splitlines()[-1], root)


def wait_finished(run: RunDir) -> None:
    def done() -> bool:
        state = run.state().state
        assert state not in ("failed", "damaged"), (run.state().reason, _log(run))
        return state == "finished"

    wait_for(f"run {run.run_id} to finish", done, JOB_TIMEOUT_S)


def _log(run: RunDir) -> str:
    path = run.path / "stdout.log"
    return path.read_text()[-3000:] if path.exists() else ""


def final_adapter(run: RunDir) -> dict[str, torch.Tensor]:
    step, directory = run.latest_checkpoint()
    assert step == STEPS
    return load_file(str(directory / "adapter_model.safetensors"))


def result_rows(run: RunDir) -> dict[tuple[str, str], dict]:
    return {(r["dataset"], r["variant"]): r for r in run.results().rows}


@pytest.fixture(scope="module")
def reference(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> RunDir:
    """The same run, uninterrupted, as a detached job like the others."""
    root = tmp_path_factory.mktemp("reference") / "runs"
    assert main(["train", "--model", str(tiny_model_dir), "--detach", "--runs-root", str(root), *RUN_ARGS]) == 0
    [path] = [p for p in root.iterdir() if not p.name.startswith(".")]
    run = RunDir(path)
    wait_finished(run)
    assert {variant for _, variant in result_rows(run)} == {"base", "ts", "vs", "calm", "calm_theta_only"}  # EVERY's writes
    return run


def assert_nothing_corrupt(run: RunDir) -> None:
    import pandas as pd

    for path in run.path.rglob("*.json"):
        assert isinstance(json.loads(path.read_text()), dict), path
    for path in run.path.rglob("COMPLETE"):
        assert isinstance(json.loads(path.read_text()), dict), path
    lines = [ln for ln in run.metrics_path.read_bytes().split(b"\n") if ln.strip()] if run.metrics_path.exists() else []
    assert len(run.read_metrics()) == len(lines)  # every line whole (a metrics line is one write)
    for step, directory, complete in run._checkpoints():
        assert complete, f"{directory.name} without COMPLETE: checkpoints appear whole"
        read_checkpoint(directory, with_head=True)
    for path in run.path.rglob("*.parquet"):
        pd.read_parquet(path)


def assert_truthful(run: RunDir, capsys) -> None:
    assert main(["runs", "--runs-root", str(run.path.parent)]) == 0
    [line] = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(run.run_id)]
    assert " failed " in line and "is gone" in line, line
    status, logged = run.status, [r["step"] for r in run.read_metrics()]
    assert logged == list(range(0, len(logged)))  # step 0's evaluation first
    assert status.step in (len(logged) - 1, max(len(logged) - 2, 0)), (status.step, logged)


def kill_then_resume(point: str, count: int, reference: RunDir, tiny_model_dir: Path, tmp_path: Path,
                     monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    root = tmp_path / "runs"
    monkeypatch.setenv(FAULT_ENV, f"{point}:{count}")  # the job inherits it; the resumed one will not
    run = start(tiny_model_dir, root, capsys)
    monkeypatch.delenv(FAULT_ENV)
    try:
        ended = wait_for(f"the kill at {point}:{count}", lambda: (s := run.state().state) in ("failed", "finished") and s,
                         JOB_TIMEOUT_S)
        assert ended == "failed", f"the job never passed {point} {count} times"
        assert "gone" in run.state().reason, (run.state().reason, _log(run))
        assert_truthful(run, capsys)
        assert_nothing_corrupt(run)
        queue.resume(run)
        wait_finished(run)
    finally:
        pid = run.status.pid
        if pid and pid_alive(pid):
            os.killpg(pid, signal.SIGKILL)
    assert [r["step"] for r in run.read_metrics()] == list(range(0, STEPS + 1))
    assert run.status.selection.selected_step == reference.status.selection.selected_step
    assert run.selected_step() == reference.selected_step()
    assert_nothing_corrupt(run)
    expected, got = result_rows(reference), result_rows(run)
    assert got.keys() == expected.keys()
    for key, row in expected.items():
        for metric in ("n", "acc"):
            assert got[key][metric] == row[metric], (key, metric)
        for metric in ("ece", "brier", "nll"):
            assert got[key][metric] == pytest.approx(row[metric], rel=1e-5, abs=1e-6), (key, metric)
    straight, resumed = final_adapter(reference), final_adapter(run)
    for name in straight:
        torch.testing.assert_close(resumed[name], straight[name], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("point, count", QUICK, ids=[f"{p}:{n}" for p, n in QUICK])
def test_killed_at_a_point_then_resumed_equals_uninterrupted(point: str, count: int, reference: RunDir,
                                                              tiny_model_dir: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    kill_then_resume(point, count, reference, tiny_model_dir, tmp_path, monkeypatch, capsys)


@pytest.mark.slow
@pytest.mark.parametrize("point, count", [c for c in EVERY if c not in QUICK],
                         ids=[f"{p}:{n}" for p, n in EVERY if (p, n) not in QUICK])
def test_killed_anywhere_then_resumed_equals_uninterrupted(point: str, count: int, reference: RunDir,
                                                           tiny_model_dir: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    kill_then_resume(point, count, reference, tiny_model_dir, tmp_path, monkeypatch, capsys)


def test_a_bad_fault_spec_is_refused() -> None:
    from calm_core.faults import parse

    assert parse("step_logged:3") == ("step_logged", 3) and parse("model_loaded") == ("model_loaded", 1)
    for bad in ("nowhere", "step_logged:0", "step_logged:x"):
        with pytest.raises(ValueError, match="CALM_FAULT"):
            parse(bad)
