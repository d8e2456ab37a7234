"""The corruption table: every file of a run directory truncated, emptied or replaced by
the wrong JSON type, in a finished run (`done`) and a cancelled one (`halfway`). For each,
`calm runs`, `calm compare`, `calm cancel`, `calm resume` and the Monitor and Compare
pages either work or say, in one line, which file is damaged and what to do; a third
run in the same workspace (`bystander`) is untouched, byte for byte.

A handful of cases run by default; the whole table with `-m slow`:

    .venv/bin/python -m pytest tests/test_corruption.py -q -m slow
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from calm_core.cli import main
from calm_core.runs.jobs import worker_command
from calm_core.io import atomic_write_json
from calm_core.runs.rundir import RunDir
from calm_core.runs.state import DAMAGED
from tests.pages import run_picker
from tests.test_reliability import snapshot
from tests.test_trainer import DATA, fresh_lm

KINDS = {"truncated": lambda data: data[: len(data) // 2], "empty": lambda data: b"",
         "wrong-type": lambda data: b"[1, 2]"}
FILES = ["status.json", "config.json", "job.json", "metrics.jsonl", "results.json", "eval/calm/*.parquet",
         "checkpoint-*/COMPLETE", "checkpoint-*/adapter_config.json", "checkpoint-*/adapter_model.safetensors",
         "checkpoint-*/calibration_head.safetensors", "checkpoint-*/optimizer.pt", "checkpoint-*/rng.pt"]
QUICK = {("status.json", "wrong-type"), ("config.json", "truncated"), ("results.json", "empty"),
         ("checkpoint-*/optimizer.pt", "truncated"), ("eval/calm/*.parquet", "truncated")}
CASES = [(f, k) for f in FILES for k in KINDS]


@pytest.fixture(scope="module")
def template(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace with three runs of the tiny model: finished, cancelled at 3 of 4, and a bystander."""
    from calm_core.training.config import TrainConfig
    from calm_core.training.loop import train

    workspace = tmp_path_factory.mktemp("template")
    root = workspace / "runs"
    cfg = TrainConfig(method="calm", steps=4, batch_size=2, heldout_batch_size=2, eval_every=2, checkpoint_every=2,
                      lr_theta=1e-2, lr_alpha=1e-1, scoring="letter", model=str(tiny_model_dir), **DATA)
    for run_id, stop_at in (("done", None), ("halfway", 3), ("bystander", None)):
        run = RunDir.create(root, run_id, {"train": cfg.to_dict(), "name": run_id, "method": "calm"})
        atomic_write_json(run.path / "job.json", {"command": worker_command(), "env": {}, "resume": False, "resumes": 0})

        def cancel_at(step, total, record, run=run, stop_at=stop_at):
            if step == stop_at:
                run.request_cancel()

        train(cfg, run=run, lm=fresh_lm(tiny_model_dir), progress=cancel_at)
    return workspace


def damage(run: RunDir, pattern: str, kind: str) -> list[Path]:
    hit = sorted(run.path.glob(pattern))
    for path in hit:
        path.write_bytes(KINDS[kind](path.read_bytes()))
    return hit


def one_line_naming(err: str, pattern: str) -> bool:
    name = pattern.rsplit("/", 1)[-1].replace("*", "")
    return err.count("\n") == 1 and err.startswith("calm: error: ") and (name in err or "checkpoint" in err)


@pytest.fixture
def workspace(template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh copy of the template, the studio's workspace; `calm resume` trains in this process."""
    from calm_core.cli import train as cli_train
    from calm_core.runs import queue

    copy = tmp_path / "ws"
    shutil.copytree(template, copy)
    monkeypatch.setenv("CALM_WORKSPACE", str(copy))
    monkeypatch.setattr(cli_train, "_graceful", lambda run: None)

    def inline(run_dir: RunDir, command: list[str], env: dict | None = None, credentials: bool = True) -> int:
        run_dir.write_status("running", pid=os.getpid(), started=time.time())
        cli_train.run_in_process(RunDir.open(run_dir.path), show_progress=False)
        return os.getpid()

    monkeypatch.setattr(queue, "start_job", inline)  # the queue starts its jobs with it
    return copy


def check_case(pattern: str, kind: str, workspace: Path, capsys, open_page) -> None:
    root = workspace / "runs"
    done, halfway, bystander = (RunDir(root / name) for name in ("done", "halfway", "bystander"))
    untouched = snapshot(bystander.path)
    hit = damage(done, pattern, kind) + damage(halfway, pattern, kind)
    assert hit, f"nothing matches {pattern}"
    capsys.readouterr()

    assert main(["runs", "--runs-root", str(root)]) == 0
    listed = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert set(listed) == {"done", "halfway", "bystander"}  # no run vanishes
    for run in (done, halfway):
        if run.state().state == DAMAGED:
            assert pattern.split("/")[-1].replace("*", "") in listed[run.run_id] or "missing" in listed[run.run_id]

    for argv in (["compare", "done"], ["cancel", "halfway"]):
        rc = main([*argv, "--runs-root", str(root)])
        err = capsys.readouterr().err
        assert rc == 0 or (rc == 2 and one_line_naming(err, pattern)), (argv, rc, err)

    target = done if pattern in ("results.json", "eval/calm/*.parquet") else halfway
    if pattern.endswith(".parquet"):  # what the Compare page's message says to do: results go, resume evaluates
        (done.path / "results.json").unlink()
    rc = main(["resume", target.run_id, "--runs-root", str(root)])
    err = capsys.readouterr().err
    if rc == 0:
        view = target.state()
        status = target.status
        assert view.state == "finished" or (view.state == "failed" and one_line_naming(
            "calm: error: " + str(status.error) + "\n", pattern)), (view, status.error)
    else:
        assert rc == 2 and one_line_naming(err, pattern), (rc, err)

    for page, value in (("../pages/monitor/monitor.py", "halfway"), ("../pages/monitor/monitor.py", "done"), ("../pages/compare/compare.py", None)):
        at = open_page(page)
        if value:
            run_picker(at).set_value(value).run()
        assert not at.exception, (page, value, at.exception)
        for error in at.error:
            assert "\n" not in error.value.strip() and "Traceback" not in error.value, error.value

    assert snapshot(bystander.path) == untouched


@pytest.mark.parametrize("pattern, kind", sorted(QUICK), ids=[f"{p}-{k}" for p, k in sorted(QUICK)])
def test_damaged_file_is_named_or_survived(pattern: str, kind: str, workspace: Path, capsys, open_page,
                                           tiny_everywhere) -> None:
    check_case(pattern, kind, workspace, capsys, open_page)


@pytest.mark.slow
@pytest.mark.parametrize("pattern, kind", [c for c in CASES if c not in QUICK],
                         ids=[f"{p}-{k}" for p, k in CASES if (p, k) not in QUICK])
def test_every_damaged_file_is_named_or_survived(pattern: str, kind: str, workspace: Path, capsys, open_page,
                                                 tiny_everywhere) -> None:
    check_case(pattern, kind, workspace, capsys, open_page)
