"""Tests for calm_core.runs (rundir, state, process, listing): the run-directory protocol, on disk
only (no processes but one).

    .venv/bin/python -m pytest tests/test_runs.py -q
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from calm_core.runs import metrics_lines, naming
from calm_core.runs import rundir as runs
from calm_core.runs.listing import list_runs
from calm_core.runs.process import HOST
from calm_core.runs.records import RunStatus
from calm_core.runs.damage import RunFileError
from calm_core.runs.naming import new_run_id
from calm_core.runs.rundir import RunDir
from calm_core.runs.state import STARTUP_GRACE_S, STATES, run_state

CONFIG = {"name": "capitals demo", "train": {"method": "calm", "steps": 10}, "seed": 0}


@pytest.fixture
def run(tmp_path: Path) -> RunDir:
    return RunDir.create(tmp_path, "20261130-051200-demo-ab12", CONFIG)


def _dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


# ------------------------------------------------------------------------- ids and creation

def test_new_run_id_is_sortable_safe_and_hinted() -> None:
    early = new_run_id("my model/v2 ../../etc", now=1_700_000_000)
    late = new_run_id("a", now=1_700_000_001)
    assert re.fullmatch(r"20231114-221320-my_model_v2_.._.._etc-[0-9a-f]{4}", early)
    assert naming.check_run_id(early) == early  # one safe path component
    assert early < late
    assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{4}", new_run_id(None))


def test_new_run_id_rejects_hint_without_letters() -> None:
    with pytest.raises(ValueError, match="letters or digits"):
        new_run_id("///")


@pytest.mark.parametrize("bad", ["..", "../x", "a/b", "", "with space", ".hidden"])
def test_unsafe_run_ids_are_rejected(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError, match="path-safe run id"):
        RunDir.create(tmp_path, bad, CONFIG)
    with pytest.raises(ValueError, match="path-safe run id"):
        RunDir.at(bad, tmp_path)


def test_create_writes_config_and_queued_status(run: RunDir, tmp_path: Path) -> None:
    assert run.config.to_json() == CONFIG
    status = run.status
    assert status.state == "queued" and status.run_id == run.run_id
    assert status.name == "capitals demo" and status.method == "calm"
    assert RunDir.at(run.run_id, tmp_path).path == run.path
    with pytest.raises(FileExistsError):
        RunDir.create(tmp_path, run.run_id, CONFIG)


def test_new_retries_on_id_clash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hexes = iter(["aaaa", "aaaa", "bbbb"])
    monkeypatch.setattr(naming.secrets, "token_hex", lambda n: next(hexes))
    real_gmtime = time.gmtime
    monkeypatch.setattr(naming.time, "gmtime", lambda now=None: real_gmtime(1_700_000_000))  # one second
    first, second = RunDir.new(CONFIG, "x", tmp_path), RunDir.new(CONFIG, "x", tmp_path)
    assert first.run_id.endswith("-aaaa") and second.run_id.endswith("-bbbb")


def test_open_without_status_explains(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="status.json"):
        RunDir.open(tmp_path / "nothing")


# ------------------------------------------------------------------------- status

def test_write_status_merges_and_validates(run: RunDir) -> None:
    run.write_status("running", pid=os.getpid(), step=3, total_steps=10)
    run.heartbeat(4)
    status = run.status
    assert status.state == "running" and status.step == 4 and status.total_steps == 10
    assert status.pid == os.getpid() and status.host == HOST and status.name == "capitals demo"
    assert time.time() - status.heartbeat < 60
    run.write_status("failed", error="CUDA out of memory")
    assert run.status.error == "CUDA out of memory" and run.status.ended is not None
    with pytest.raises(ValueError) as info:
        run.write_status("done")
    assert all(state in str(info.value) for state in STATES)


def test_write_status_only_from_does_not_overwrite_a_newer_state(run: RunDir) -> None:
    run.write_status("finished", step=10)
    assert run.write_status("stopping", only_from=("running",)) is False
    assert run.status.state == "finished"


def test_concurrent_reader_never_sees_partial_status(run: RunDir) -> None:
    stop = threading.Event()
    payload = "x" * 200_000  # large, so a non-atomic write would be caught half-way

    def writer() -> None:
        step = 0
        while not stop.is_set():
            step += 1
            run.write_status("running", step=step, payload=payload)

    run.write_status("running", step=0, payload=payload)
    thread = threading.Thread(target=writer)
    thread.start()
    try:
        reads, deadline = 0, time.monotonic() + 1.0
        while time.monotonic() < deadline:
            status = json.loads((run.path / "status.json").read_text())  # raises on a partial file
            assert status["payload"] == payload
            reads += 1
    finally:
        stop.set()
        thread.join()
    assert reads > 10
    assert not [p.name for p in run.path.iterdir() if p.name.startswith(".status.json.")]  # no temp files


def test_concurrent_updates_are_not_lost(run: RunDir) -> None:
    """The job heartbeats while the launcher or the studio writes other fields."""
    lost: list[tuple[str, int]] = []

    def bump(key: str) -> None:
        for i in range(1, 201):
            run.update_status(**{key: i})
            if run.status.extra[key] != i:  # only this thread writes `key`: anything else is a lost update
                lost.append((key, i))

    threads = [threading.Thread(target=bump, args=(key,)) for key in ("job_field", "studio_field")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not lost
    assert (run.status.extra["job_field"], run.status.extra["studio_field"]) == (200, 200)


def test_failed_write_leaves_old_file_and_no_temp(run: RunDir, monkeypatch: pytest.MonkeyPatch) -> None:
    before = (run.path / "status.json").read_text()

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(runs.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        run.write_status("running", step=1)
    assert (run.path / "status.json").read_text() == before
    assert not [p.name for p in run.path.iterdir() if p.name.startswith(".status.json.")]


# ------------------------------------------------------------------------- effective state

def test_fresh_heartbeat_of_live_process_is_running() -> None:
    now = time.time()
    status = {"state": "running", "pid": os.getpid(), "host": HOST, "heartbeat": now - 5, "step": 2}
    view = run_state(RunStatus.from_json(status), now=now)
    assert view.state == "running" and not view.resumable


def test_stale_heartbeat_is_failed_and_resumable() -> None:
    now = time.time()
    status = {"state": "running", "pid": 12345, "host": "another-machine", "heartbeat": now - 120, "step": 7}
    view = run_state(RunStatus.from_json(status), now=now)
    assert view.state == "failed" and view.resumable and "no heartbeat for 120 s" in view.reason
    assert run_state(RunStatus.from_json(status), now=now, stale_after=300).state == "running"  # pid not checkable elsewhere


def test_stale_heartbeat_of_live_process_says_hung() -> None:
    now = time.time()
    status = {"state": "stopping", "pid": os.getpid(), "host": HOST, "heartbeat": now - 120}
    view = run_state(RunStatus.from_json(status), now=now)
    assert view.state == "failed" and view.resumable and "still alive" in view.reason


def test_startup_grace_before_the_first_heartbeat() -> None:
    now = time.time()
    status = {"state": "running", "pid": 12345, "host": "another-machine", "heartbeat": None, "started": now - 120}
    assert run_state(RunStatus.from_json(status), now=now).state == "running"  # still importing torch, say
    assert run_state(RunStatus.from_json(status), now=now + STARTUP_GRACE_S).state == "failed"


def test_keepalive_heartbeats_through_a_blocking_phase(run: RunDir) -> None:
    run.write_status("running", pid=os.getpid(), heartbeat=0.0)
    with run.keepalive("loading model", every_s=0.02):
        assert run.status.phase == "loading model"
        first = run.status.heartbeat
        wait = time.monotonic() + 30
        while run.status.heartbeat == first and time.monotonic() < wait:
            time.sleep(0.01)
        assert run.status.heartbeat > first  # beats from the thread, not only on entry
    status = run.status
    assert status.phase is None and status.state == "running"
    time.sleep(0.1)
    assert run.status.heartbeat == status.heartbeat  # the thread has stopped


def test_dead_pid_is_failed_even_with_fresh_heartbeat() -> None:
    status = {"state": "running", "pid": _dead_pid(), "host": HOST, "heartbeat": time.time()}
    view = run_state(RunStatus.from_json(status))
    assert view.state == "failed" and view.resumable and "is gone" in view.reason


def test_reused_pid_counts_as_dead() -> None:
    status = {"state": "running", "pid": os.getpid(), "host": HOST, "heartbeat": time.time(),
              "pid_start": "not-our-start-time"}
    if not os.path.isdir("/proc/self"):
        pytest.skip("needs /proc")
    assert run_state(RunStatus.from_json(status)).state == "failed"


@pytest.mark.parametrize(("status", "state", "resumable"), [
    ({"state": "queued"}, "queued", False),
    ({"state": "finished", "step": 10, "total_steps": 10}, "finished", False),
    ({"state": "failed", "error": "boom"}, "failed", True),
    ({"state": "cancelled", "step": 4}, "cancelled", True),
    ({"state": "exploded"}, "failed", False),
])
def test_settled_states(status: dict, state: str, resumable: bool) -> None:
    view = run_state(RunStatus.from_json(status))
    assert (view.state, view.resumable) == (state, resumable)


# ------------------------------------------------------------------------- metrics

def test_metrics_round_trip_and_validation(run: RunDir) -> None:
    for step in range(1, 4):
        run.append_metrics({"step": step, "elapsed": 0.1 * step, "train/loss": 1.0 / step})
    assert [r["step"] for r in run.read_metrics()] == [1, 2, 3]
    with pytest.raises(ValueError, match="`step` and `elapsed`"):
        run.append_metrics({"train/loss": 1.0})


def test_metrics_line_is_one_write_call(run: RunDir, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real_write = os.write
    monkeypatch.setattr(runs.os, "write", lambda fd, data: calls.append(data) or real_write(fd, data))
    run.append_metrics({"step": 1, "elapsed": 0.0, "alpha/l": list(range(500))})
    assert len(calls) == 1 and calls[0].endswith(b"\n")


def test_truncated_last_line_is_ignored_and_sealed(run: RunDir) -> None:
    run.append_metrics({"step": 1, "elapsed": 0.1})
    with open(run.metrics_path, "ab") as handle:
        handle.write(b'{"step": 2, "elap')  # a crash mid-write
    assert [r["step"] for r in run.read_metrics()] == [1]
    run.append_metrics({"step": 2, "elapsed": 0.2})  # must not be glued onto the fragment
    assert [r["step"] for r in run.read_metrics()] == [1, 2]


def test_truncate_metrics_after(run: RunDir) -> None:
    for step in range(1, 8):
        run.append_metrics({"step": step, "elapsed": float(step)})
    assert run.truncate_metrics_after(4) == 4
    assert [r["step"] for r in run.read_metrics()] == [1, 2, 3, 4]
    run.append_metrics({"step": 5, "elapsed": 5.0})
    assert [r["step"] for r in run.read_metrics()] == [1, 2, 3, 4, 5]


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every byte string handed to the one line parser, in order."""
    seen: list[bytes] = []
    real = metrics_lines.parse_metrics_lines
    monkeypatch.setattr(metrics_lines, "parse_metrics_lines", lambda data: seen.append(data) or real(data))
    return seen


def test_metrics_tail_parses_each_appended_line_once(run: RunDir, parsed: list[bytes]) -> None:
    tail = metrics_lines.MetricsTail(run.metrics_path)
    seen = [tail.read()]  # no file yet
    for step in range(1, 4):
        run.append_metrics({"step": step, "elapsed": 0.1 * step})
    seen += [tail.read(), tail.read()]  # the second finds nothing new
    run.append_metrics({"step": 4, "elapsed": 0.4})
    seen.append(tail.read())
    assert b"".join(parsed) == run.metrics_path.read_bytes(), "each line goes to the parser exactly once"
    assert [[r["step"] for r in records] for records in seen] == [[], [1, 2, 3], [1, 2, 3], [1, 2, 3, 4]]
    assert seen[-1] == run.read_metrics()


def test_metrics_tail_waits_for_a_half_written_line(run: RunDir) -> None:
    tail = metrics_lines.MetricsTail(run.metrics_path)
    run.append_metrics({"step": 1, "elapsed": 0.1})
    line = json.dumps({"step": 2, "elapsed": 0.2}).encode() + b"\n"
    with open(run.metrics_path, "ab") as handle:
        handle.write(line[:7])
        handle.flush()
        assert [r["step"] for r in tail.read()] == [1] and tail.read() == run.read_metrics()
        handle.write(line[7:])
    assert [r["step"] for r in tail.read()] == [1, 2] and tail.read() == run.read_metrics()


def test_metrics_tail_skips_a_fragment_sealed_after_a_crash(run: RunDir) -> None:
    tail = metrics_lines.MetricsTail(run.metrics_path)
    run.append_metrics({"step": 1, "elapsed": 0.1})
    with open(run.metrics_path, "ab") as handle:
        handle.write(b'{"step": 2, "elap')  # a crash mid-write
    assert tail.read() == run.read_metrics()
    run.append_metrics({"step": 2, "elapsed": 0.2})
    assert [r["step"] for r in tail.read()] == [1, 2] and tail.read() == run.read_metrics()


def test_metrics_tail_reads_a_cut_back_file_again(run: RunDir) -> None:
    """A resume rewrites metrics.jsonl (atomic replace) back to its checkpoint's step."""
    tail = metrics_lines.MetricsTail(run.metrics_path)
    for step in range(1, 8):
        run.append_metrics({"step": step, "elapsed": float(step)})
    assert len(tail.read()) == 7
    run.truncate_metrics_after(4)
    assert [r["step"] for r in tail.read()] == [1, 2, 3, 4] == [r["step"] for r in run.read_metrics()]
    for step in range(5, 10):  # longer than before: size alone would not tell
        run.append_metrics({"step": step, "elapsed": float(step), "again": True})
    assert tail.read() == run.read_metrics() and tail.read()[-1]["again"]


def test_metrics_tail_notices_a_rewrite_in_place(run: RunDir) -> None:
    """Same file (inode), new content at least as long: the bytes read last no longer match."""
    tail = metrics_lines.MetricsTail(run.metrics_path)
    for step in range(1, 4):
        run.append_metrics({"step": step, "elapsed": float(step)})
    assert len(tail.read()) == 3
    with open(run.metrics_path, "r+b") as handle:  # not how the project writes, but a copy tool might
        handle.write(b"".join(json.dumps({"step": s, "elapsed": 9.0 + s}).encode() + b"\n" for s in (7, 8, 9, 10)))
    assert [r["step"] for r in tail.read()] == [7, 8, 9, 10] == [r["step"] for r in run.read_metrics()]
    run.metrics_path.unlink()
    assert tail.read() == [] == run.read_metrics()


# ------------------------------------------------------------------------- checkpoints, cancel

def _checkpoint(run: RunDir, step: int, complete: bool = True) -> None:
    if complete:
        with run.writing_checkpoint(step) as directory:
            (directory / "adapter.bin").write_bytes(b"w")
    else:  # what an older version left after a crash: the directory without its marker
        run.checkpoint_dir(step).mkdir()
        (run.checkpoint_dir(step) / "adapter.bin").write_bytes(b"w")


def test_latest_checkpoint_counts_only_complete(run: RunDir) -> None:
    assert run.latest_checkpoint() is None
    _checkpoint(run, 5)
    _checkpoint(run, 10, complete=False)  # crashed while saving
    assert run.latest_checkpoint() == (5, run.path / "checkpoint-5")


def test_a_checkpoint_appears_whole_or_not_at_all(run: RunDir) -> None:
    with pytest.raises(RuntimeError):
        with run.writing_checkpoint(3) as directory:
            (directory / "adapter.bin").write_bytes(b"w")
            assert not run.checkpoint_dir(3).exists()  # nothing under the final name while writing
            raise RuntimeError("killed mid-write")
    assert run.latest_checkpoint() is None and not list(run.path.glob("*checkpoint-3*"))
    _checkpoint(run, 3)
    with run.writing_checkpoint(3) as directory:  # the same step again replaces it as a whole
        (directory / "adapter.bin").write_bytes(b"v2")
    assert (run.checkpoint_dir(3) / "adapter.bin").read_bytes() == b"v2"
    assert [p.name for p in run.path.iterdir() if "checkpoint" in p.name] == ["checkpoint-3"]


def test_a_replacement_cut_between_its_renames_restores_the_old_checkpoint(run: RunDir) -> None:
    _checkpoint(run, 4)
    os.rename(run.checkpoint_dir(4), run.path / ".checkpoint-4.old")  # the kill landed between the renames
    assert run.latest_checkpoint() == (4, run.checkpoint_dir(4))


def test_staging_left_by_a_kill_is_pruned(run: RunDir) -> None:
    (run.path / ".checkpoint-6.abcd.partial").mkdir()
    _checkpoint(run, 4)
    run.prune_checkpoints(keep=2)
    assert not list(run.path.glob(".checkpoint-*"))


def test_prune_keeps_newest_complete(run: RunDir) -> None:
    for step in (2, 4, 6):
        _checkpoint(run, step)
    _checkpoint(run, 3, complete=False)
    _checkpoint(run, 8, complete=False)  # newer than every complete one: may be in progress
    run.prune_checkpoints(keep=2)
    assert sorted(p.name for p in run.path.glob("checkpoint-*")) == ["checkpoint-4", "checkpoint-6", "checkpoint-8"]
    with pytest.raises(ValueError, match="`keep`"):
        run.prune_checkpoints(keep=0)


def test_prepare_resume_cuts_metrics_to_the_checkpoint(run: RunDir) -> None:
    for step in range(1, 8):
        run.append_metrics({"step": step, "elapsed": float(step)})
    assert run.prepare_resume()[:2] == (0, None)  # no checkpoint: start over, no metrics kept
    assert run.read_metrics() == []
    for step in range(1, 8):
        run.append_metrics({"step": step, "elapsed": float(step)})
    _checkpoint(run, 5)
    assert run.prepare_resume()[:2] == (5, run.path / "checkpoint-5")
    assert [r["step"] for r in run.read_metrics()] == [1, 2, 3, 4, 5]


def _read_adapter(directory: Path) -> bytes:
    data = (directory / "adapter.bin").read_bytes()
    if data != b"w":
        raise ValueError("adapter.bin is damaged")
    return data


def test_prepare_resume_skips_a_damaged_checkpoint_before_cutting_anything(run: RunDir) -> None:
    for step in range(1, 9):
        run.append_metrics({"step": step, "elapsed": float(step)})
    _checkpoint(run, 4)
    _checkpoint(run, 6)
    (run.checkpoint_dir(6) / "adapter.bin").write_bytes(b"")  # the newest is damaged
    point = run.prepare_resume(_read_adapter)
    assert (point.step, point.path, point.data) == (4, run.checkpoint_dir(4), b"w")
    assert point.skipped == ("checkpoint-6: adapter.bin is damaged",)
    assert [r["step"] for r in run.read_metrics()] == [1, 2, 3, 4]


def test_prepare_resume_without_a_usable_checkpoint_touches_nothing_unless_fresh(run: RunDir) -> None:
    for step in range(1, 9):
        run.append_metrics({"step": step, "elapsed": float(step)})
    _checkpoint(run, 6)
    (run.checkpoint_dir(6) / "adapter.bin").write_bytes(b"")
    with pytest.raises(RunFileError, match="checkpoint-6: adapter.bin is damaged.*--fresh"):
        run.prepare_resume(_read_adapter)
    assert len(run.read_metrics()) == 8  # the defect: metrics were cut before the load failed
    point = run.prepare_resume(_read_adapter, fresh=True)
    assert point[:2] == (0, None) and run.read_metrics() == []


def test_cancel_flag(run: RunDir) -> None:
    assert not run.cancel_requested()
    run.request_cancel()
    assert run.cancel_requested()
    run.clear_cancel()
    assert not run.cancel_requested()


# ------------------------------------------------------------------------- listing

def test_list_runs_newest_first_with_effective_state(tmp_path: Path) -> None:
    made = []
    for i, created in enumerate([300.0, 100.0, 200.0]):
        run = RunDir.create(tmp_path, f"run-{i}", {"name": f"n{i}", "method": "sft"})
        run.update_status(created=created)
        made.append(run)
    made[0].write_status("running", pid=_dead_pid(), heartbeat=time.time())
    (tmp_path / "half-made").mkdir()  # no status.json yet: skipped
    summaries = list_runs(tmp_path)
    assert [s.run_id for s in summaries] == ["run-0", "run-2", "run-1"]
    assert summaries[0].state == "failed" and summaries[0].resumable
    assert (summaries[1].name, summaries[1].method, summaries[1].state) == ("n2", "sft", "queued")
    assert list_runs(tmp_path / "missing") == []


def test_a_run_with_config_alone_is_listed_as_damaged(run: RunDir) -> None:
    """status.json lost (config.json kept): listed, as `damaged`, naming the file and `calm resume`."""
    (run.path / "status.json").unlink()
    [summary] = list_runs(run.path.parent)
    assert (summary.run_id, summary.state, summary.resumable, summary.name) == (run.run_id, "damaged", True,
                                                                                 "capitals demo")
    assert f"{run.path / 'status.json'} is missing" in summary.reason and "calm resume" in summary.reason


def test_list_runs_reads_each_small_file_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A listing polls every run: status.json and config.json are read once per run, for a
    healthy, a finished (with results.json), a dead and a damaged run alike."""
    RunDir.create(tmp_path, "queued", {"method": "sft"})
    finished = RunDir.create(tmp_path, "finished", CONFIG)
    (finished.path / "results.json").write_text(json.dumps({"results": [{"dataset": "d", "variant": "calm"}]}))
    finished.write_status("finished")
    dead = RunDir.create(tmp_path, "dead", CONFIG)
    dead.write_status("running", pid=_dead_pid())
    damaged = RunDir.create(tmp_path, "damaged", CONFIG)
    (damaged.path / "status.json").write_text("[1, 2]")
    reads: dict[str, int] = {}
    real_read = runs.read_json_object  # patched where RunDir looks it up (it lives in runs.damage)

    def counted(path: str | Path, *args, **kwargs) -> dict:
        key = f"{Path(path).parent.name}/{Path(path).name}"
        reads[key] = reads.get(key, 0) + 1
        return real_read(path, *args, **kwargs)

    monkeypatch.setattr(runs, "read_json_object", counted)
    states = {s.run_id: (s.state, s.method) for s in list_runs(tmp_path)}
    assert states == {"queued": ("queued", "sft"), "finished": ("finished", "calm"), "dead": ("failed", "calm"),
                      "damaged": ("damaged", "calm")}
    for run_id in states:
        assert reads[f"{run_id}/status.json"] == 1 and reads[f"{run_id}/config.json"] == 1, reads
    assert reads["finished/results.json"] == 1


def test_list_runs_defaults_to_workspace(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CALM_WORKSPACE", str(tmp_path))
    run = RunDir.new(CONFIG, "ws")
    assert run.path.parent == tmp_path / "runs"
    assert [s.run_id for s in list_runs()] == [run.run_id]


def test_running_reason_names_the_phase() -> None:
    import os
    import time

    from calm_core.runs.state import run_state

    status = {"state": "running", "pid": os.getpid(), "heartbeat": time.time(), "step": 20, "total_steps": 20,
              "phase": "final evaluation"}
    assert "(final evaluation)" in run_state(RunStatus.from_json(status)).reason
