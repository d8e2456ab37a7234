"""The attacker's suite, part 6 (issue 47): no operator credential reaches a shared user's request.

The operator's environment holds a Hugging Face token (HF_TOKEN, and the token file under
HF_HOME). A shared studio's job inherited both, so a hub id a user with the studio's
password typed on the Train page downloaded private or gated repos as the operator. Now a
shared user may name only the hub repos the operator lists (CALM_SHARED_HUB_REPOS), and a
job such a user launches gets no token, whichever process starts it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.attack_client import StudioSession, sign_in
from tests.test_attacks import PASSWORD, _start, _stop

TOKEN = "hf_operator_token_do_not_leak"
FILE_TOKEN = "hf_operator_file_token_do_not_leak"
LISTED = "allowed-org/allowed-model"
PROBE = (
    "import json, os, sys; from huggingface_hub import get_token; "
    "json.dump({'env': os.environ.get('HF_TOKEN'), 'token': get_token()}, open(sys.argv[1], 'w'))"
)


def _operator_env(tmp_path: Path) -> dict[str, str]:
    """The operator's hub credentials: the variable and the token file."""
    home = tmp_path / "hf-home"
    home.mkdir(exist_ok=True)
    (home / "token").write_text(FILE_TOKEN)
    return {"HF_TOKEN": TOKEN, "HF_HOME": str(home)}


@pytest.fixture()
def studio(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A shared studio run by an operator who holds a hub token; its one job slot held by a
    stand-in run, so a launch stays queued. Yields (port, the stand-in, the sleeper)."""
    from calm_core.launch import create_run
    from calm_core.training.config import TrainConfig

    monkeypatch.setenv("CALM_WORKSPACE", str(tmp_path / "workspace"))
    for name, value in _operator_env(tmp_path).items():
        monkeypatch.setenv(name, value)
    sleeper = subprocess.Popen(["sleep", "900"])
    holder = create_run(TrainConfig.preset("quick"))
    holder.write_status("running", pid=sleeper.pid, started=time.time(), heartbeat=time.time())
    env = {**_operator_env(tmp_path), "CALM_MAX_JOBS": "1", "CALM_SHARED_HUB_REPOS": LISTED}
    server, port, log, _ = _start(tmp_path, shared=True, extra_env=env)
    try:
        yield port, holder, sleeper
    finally:
        _stop(server, log)
        sleeper.kill()
        sleeper.wait()


def test_a_shared_user_names_only_listed_repos_and_their_jobs_get_no_token(studio, tmp_path: Path) -> None:
    from calm_core.runs.jobs import JOB
    from calm_core.runs.queue import JobQueue
    from calm_core.runs.listing import list_runs
    from calm_core.runs.rundir import RunDir

    port, holder, sleeper = studio
    _, cookie = sign_in(port, PASSWORD)
    with StudioSession(port, cookie) as session:
        session.rerun("train")
        session.rerun("train", typed={"train_model_kind": "hub id"})
        refused = session.rerun("train", typed={"train_model_name": "private-org/gated-model"})
        assert [e.text for e in refused if e.is_error] == [
            "Refused 'private-org/gated-model': a shared studio downloads only the hub repos its operator "
            "lists (CALM_SHARED_HUB_REPOS)"
        ]
        assert not [e for e in refused if e.key == "train_launch"]
        listed = session.rerun("train", typed={"train_model_name": LISTED})
        assert not [e for e in listed if e.is_error] and [e for e in listed if e.key == "train_launch"]
        session.rerun("train", typed={"train_model_kind": "embedded"})
        session.rerun("train", click=["train_launch"])
    (mine,) = [s for s in list_runs(holder.path.parent) if s.launched_by]
    run = RunDir(mine.path)
    job = json.loads((run.path / JOB).read_text())
    assert job["operator_credentials"] is False
    seen = tmp_path / "seen.json"
    job["command"] = [sys.executable, "-c", PROBE, str(seen)]  # what the job would see, instead of training
    (run.path / JOB).write_text(json.dumps(job))
    sleeper.kill()
    sleeper.wait()
    holder.write_status("cancelled")
    assert JobQueue.of(holder).schedule() == [run.run_id]  # started by the operator's own process, token and all
    deadline = time.monotonic() + 60
    while not seen.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert json.loads(seen.read_text()) == {"env": None, "token": None}
