"""Issue 13's numbered run-directory defects, one test each (each failed before its fix):
a resumed copy writes only into itself, a damaged status.json neither crashes nor hides
a run, a damaged checkpoint is skipped before anything is cut, files follow the umask."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import sys
from pathlib import Path

import pytest
import torch

from calm_core.runs import jobs
from calm_core.runs.queue import JobQueue
from calm_core.cli import main
from calm_core.io import atomic_write_json
from calm_core.runs.listing import list_runs
from calm_core.runs.process import pid_alive
from calm_core.runs.damage import RunFileError
from calm_core.runs.rundir import RunDir
from calm_core.runs.state import DAMAGED
from tests.test_jobs import FAKE, steps_logged, wait_for
from tests.test_trainer import fresh_lm, small_config


def snapshot(path: Path) -> dict[str, bytes]:
    """Every file under `path` (but the lock) by relative name: what must not change."""
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file() and p.name != ".lock"}


@pytest.fixture
def kill_jobs_after():
    """Runs roots whose job process groups are killed at the end of the test."""
    roots: list[Path] = []
    yield roots
    for root in roots:
        for run_path in root.glob("*"):
            try:
                pid = RunDir(run_path).status.pid
            except (OSError, ValueError):
                continue
            if pid and pid_alive(pid) and os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGKILL)


def finished_fake_run(root: Path, *, absolute: bool) -> RunDir:
    """A fake job (tests/fixtures/jobs/fake_train.py) run to its end with checkpoints.
    `absolute`: its job.json names the run directory by absolute path, as before the fix."""
    run = RunDir.new({"name": "orig", "method": "fake"}, "orig", root)
    where = str(run.path) if absolute else jobs.RUN_DIR_ARG
    JobQueue.of(run).submit(run, [sys.executable, str(FAKE), "--run-dir", where, "--steps", "6", "--sleep", "0.01",
                      "--ckpt-every", "2"])
    wait_for("the fake run to finish", lambda: run.state().state == "finished")
    # `finished` is written before the worker exits (it still schedules the queue): a resume in
    # that moment is rightly refused ("a worker ... is still running"), so wait for the exit too
    wait_for("the fake run's worker to exit", lambda: not jobs.worker_pids(run))
    return run


@pytest.mark.parametrize("absolute", [True, False], ids=["old-job-json", "placeholder"])
def test_resuming_a_copied_run_writes_only_into_the_copy(tmp_path: Path, kill_jobs_after, absolute: bool) -> None:
    first, second = tmp_path / "ws1" / "runs", tmp_path / "ws2" / "runs"
    kill_jobs_after += [first, second]
    original = finished_fake_run(first, absolute=absolute)
    before = snapshot(original.path)
    second.mkdir(parents=True)
    copy = RunDir(second / f"{original.run_id}-copy")
    shutil.copytree(original.path, copy.path)
    copy.write_status("failed", error="pretend it died")
    assert main(["resume", copy.run_id, "--runs-root", str(second)]) == 0
    wait_for("the copy to finish", lambda: copy.state().state == "finished")
    assert snapshot(original.path) == before  # the defect: the original's files were rewritten
    assert f"--run-dir {copy.path}" in (copy.path / "stdout.log").read_text().splitlines()[-3]


def test_a_moved_workspace_resumes_in_its_new_place(tmp_path: Path, kill_jobs_after) -> None:
    old, new = tmp_path / "old" / "runs", tmp_path / "new" / "runs"
    kill_jobs_after.append(new)
    run = finished_fake_run(old, absolute=True)
    shutil.move(str(old.parent), str(new.parent))
    moved = RunDir(new / run.run_id)
    moved.write_status("failed", error="pretend it died")
    assert main(["resume", moved.run_id, "--runs-root", str(new)]) == 0
    wait_for("the moved run to finish", lambda: moved.state().state == "finished")
    assert steps_logged(moved) == [1, 2, 3, 4, 5, 6]


def test_a_job_that_dies_before_writing_shows_its_last_words(tmp_path: Path, kill_jobs_after) -> None:
    root = tmp_path / "runs"
    kill_jobs_after.append(root)
    run = RunDir.new({"name": "doomed"}, "doomed", root)
    JobQueue.of(run).submit(run, [sys.executable, "-c", "import sys; print('calm: error: no such run directory'); sys.exit(2)"])
    view = wait_for("the dead job to count as failed", lambda: (v := run.state()).state == "failed" and v)
    assert "its last output: calm: error: no such run directory" in view.reason


DAMAGED_JSON = {"null": b"null", "string": b'"x"', "list": b"[1, 2]", "truncated": b'{"state": "fin', "empty": b"",
                "not-utf8": b"\xff\xfe{}"}


@pytest.mark.parametrize("content", list(DAMAGED_JSON.values()), ids=list(DAMAGED_JSON))
def test_a_damaged_status_is_listed_named_and_does_not_stall_the_queue(tmp_path: Path, kill_jobs_after,
                                                                        content: bytes, capsys) -> None:
    root = tmp_path / "runs"
    kill_jobs_after.append(root)
    broken = RunDir.new({"name": "broken", "method": "fake"}, "broken", root)
    (broken.path / "status.json").write_bytes(content)
    [summary] = list_runs(root)
    assert (summary.state, summary.resumable) == (DAMAGED, True)
    assert str(broken.path / "status.json") in summary.reason and "calm resume" in summary.reason
    assert main(["runs", "--runs-root", str(root)]) == 0
    assert "damaged" in capsys.readouterr().out
    assert main(["cancel", broken.run_id, "--runs-root", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "status.json" in err  # one line naming the file
    queued = RunDir.new({"name": "next", "method": "fake"}, "next", root)
    JobQueue.of(queued).submit(queued, [sys.executable, str(FAKE), "--run-dir", jobs.RUN_DIR_ARG, "--steps", "2", "--sleep", "0.01"])
    wait_for("the run behind the damaged one to finish", lambda: queued.state().state == "finished")


def test_resume_rebuilds_a_damaged_status_and_continues(tmp_path: Path, kill_jobs_after) -> None:
    root = tmp_path / "runs"
    kill_jobs_after.append(root)
    run = finished_fake_run(root, absolute=False)
    (run.path / "status.json").write_bytes(b"[1, 2]")
    assert main(["resume", run.run_id, "--runs-root", str(root)]) == 0
    wait_for("the repaired run to finish", lambda: run.state().state == "finished")
    assert (run.path / "status.json.damaged").read_bytes() == b"[1, 2]"  # kept for inspection
    assert steps_logged(run) == [1, 2, 3, 4, 5, 6]


def test_compare_reads_intact_results_past_a_damaged_status(tmp_path: Path, capsys) -> None:
    run = RunDir.create(tmp_path, "done", {"name": "done", "method": "sft"})
    atomic_write_json(run.path / "results.json", {"results": [{"dataset": "d", "variant": "sft", "n": 3, "acc": 0.5,
                                                               "ece": 0.1}]})
    run.write_status("finished")
    (run.path / "status.json").write_bytes(b"null")
    from calm_core.results.tables import compare_rows

    assert [r["variant"] for r in compare_rows([run])] == ["sft"]


# ------------------------------------------------------------------------- checkpoints

def _weights(lm) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in lm.model.named_parameters() if p.requires_grad}


def _interrupted_at_5(tiny_model_dir: Path, root: Path, cfg) -> RunDir:
    """A run cancelled after step 5 of 6, with checkpoints 4 and 5 (checkpoint_every 2)."""
    from calm_core.training.loop import train

    run = RunDir.create(root, "interrupted", {"train": cfg.to_dict()})

    def cancel_at_5(step, total, record):
        if step == 5:
            run.request_cancel()

    assert train(cfg, run=run, lm=fresh_lm(tiny_model_dir), progress=cancel_at_5).step == 5
    assert [p.name for p in sorted(run.path.glob("checkpoint-*"))] == ["checkpoint-4", "checkpoint-5"]
    return run


def test_a_damaged_checkpoint_falls_back_to_the_previous_one(tiny_model_dir: Path, tmp_path: Path, capsys) -> None:
    from calm_core.training.loop import train

    cfg = small_config(steps=6, checkpoint_every=2, method="calm")
    straight_lm = fresh_lm(tiny_model_dir)
    train(cfg, run=RunDir.create(tmp_path, "straight", {"train": cfg.to_dict()}), lm=straight_lm)
    run = _interrupted_at_5(tiny_model_dir, tmp_path, cfg)
    (run.checkpoint_dir(5) / "optimizer.pt").unlink()
    resumed_lm = fresh_lm(tiny_model_dir)
    assert train(cfg, run=run, lm=resumed_lm).state == "finished"
    assert "skipped as damaged: checkpoint-5: optimizer.pt is missing" in capsys.readouterr().err  # a log note
    assert run.status.resumed_from == "checkpoint-4"
    assert [r["step"] for r in run.read_metrics()] == [0, 1, 2, 3, 4, 5, 6]
    straight, resumed = _weights(straight_lm), _weights(resumed_lm)
    for name in straight:
        torch.testing.assert_close(resumed[name], straight[name], rtol=1e-5, atol=1e-6)


def test_no_usable_checkpoint_fails_without_cutting_metrics(tiny_model_dir: Path, tmp_path: Path) -> None:
    from calm_core.training.loop import train

    cfg = small_config(steps=6, checkpoint_every=2)
    run = _interrupted_at_5(tiny_model_dir, tmp_path, cfg)
    (run.checkpoint_dir(5) / "optimizer.pt").unlink()
    (run.checkpoint_dir(4) / "adapter_model.safetensors").write_bytes(b"\x00" * 10)
    with pytest.raises(RunFileError, match="checkpoint-5: optimizer.pt is missing; checkpoint-4: "
                                           "adapter_model.safetensors is unreadable.*--fresh"):
        train(cfg, run=run, lm=fresh_lm(tiny_model_dir))
    assert [r["step"] for r in run.read_metrics()] == [0, 1, 2, 3, 4, 5]  # the defect: cut to 4 before failing
    run.update_status(fresh_start=True)  # what `calm resume --fresh` asks for
    assert train(cfg, run=run, lm=fresh_lm(tiny_model_dir)).state == "finished"
    assert [r["step"] for r in run.read_metrics()] == [0, 1, 2, 3, 4, 5, 6]
    assert run.status.resumed_from is None and run.status.fresh_start is False


# ------------------------------------------------------------------------- file modes

def test_run_files_follow_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        run = RunDir.create(tmp_path, "modes", {"name": "m"})
        with run.writing_checkpoint(1) as directory:
            (directory / "w.bin").write_bytes(b"w")
        atomic_write_json(tmp_path / "out.json", {"a": 1})
    finally:
        os.umask(old)
    mode = lambda p: stat.S_IMODE(p.stat().st_mode)  # noqa: E731
    assert mode(run.path) == mode(run.checkpoint_dir(1)) == 0o755  # mkdtemp made them 0700
    assert mode(run.path / "status.json") == mode(run.path / "config.json") == mode(tmp_path / "out.json") == 0o644


# ------------------------------------------------------------------------- outputs and data

def test_compare_checks_its_json_path_before_reading_any_run(tmp_path: Path, capsys) -> None:
    (tmp_path / "a-file").write_text("x")
    rc = main(["compare", "no-such-run", "--json", str(tmp_path / "a-file" / "out.json"), "--runs-root", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "a-file" in err and "no-such-run" not in err


def test_a_training_run_names_the_rows_its_data_rejected(tiny_model_dir: Path, tmp_path: Path, capsys) -> None:
    import json

    from calm_core.training.loop import train

    rows = [{"id": f"q{i}", "question": f"Capital {i}?", "choices": ["a", "b"], "answer": 0} for i in range(6)]
    rows[2] = {"id": "q2", "question": "Only one choice?", "choices": ["a"], "answer": 0}
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = small_config(steps=1, train_data=str(data), train_limit=None)
    run = RunDir.create(tmp_path / "runs", "rejects", {"train": cfg.to_dict()})
    train(cfg, run=run, lm=fresh_lm(tiny_model_dir))
    record = run.status.choices.rejected_rows[str(data)]  # beside dropped_training_questions
    assert record.n_rejected == 1 and record.n_items == 5 and record.rejected[0]["row"] == 3
    assert f"1 of 6 rows read from {data} were rejected" in capsys.readouterr().err


def test_monitor_shows_rejected_rows_and_cut_items(open_page, tiny_everywhere) -> None:
    run = RunDir.new({"train": {"method": "sft"}, "name": "notes", "method": "sft"}, "notes")
    run.update_status(choices={"rejected_rows": {"my.jsonl": {"n_items": 5, "n_rows": 6, "n_rejected": 1, "rejected": [
        {"source": "my.jsonl", "row": 3, "field": "choices", "message": "Expected at least 2 choices, but got 1"}]}}},
        items_cut_to_context={"train": 2})
    at = open_page("../pages/monitor/monitor.py")
    assert not at.exception, at.exception
    assert [e.label for e in at.expander] == ["1 of 6 rows of my.jsonl were rejected"]
    assert any("2 items of train were longer than the model's context" in c.value for c in at.caption)
