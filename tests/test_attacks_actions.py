"""The attacker's suite, part 5 (issue 47): every action the server runs for a session is
owned and budgeted, probed over the raw WebSocket (tests/attack_client.py StudioSession).

- Compare's "Evaluate on more data" on another session's run ran in the server's process,
  unbudgeted (131 s of CPU and +1.2 GB per 100 items), and wrote added_results.json into
  that run; "Use this threshold in the export" wrote its selective.json. Both are refused.
- The owner's own evaluation is a queued job with its cost estimate, counted by the same
  quotas as training: it runs in its own process, and the rows land in the owner's run;
  at the session's quota the next one is refused.

One tiny finished run (a random Llama, 3 steps), trained in this process into the shared
studio's workspace under the owner session's tag.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from calm_core.access.rules import OWNER_WRITES, quota_message, session_tag
from calm_core.runs.layout import ADDED_RESULTS, SELECTIVE
from calm_core.runs.rundir import RunDir
from tests.attack_client import Element, StudioSession, sign_in
from tests.test_attacks import PASSWORD, _start, _stop

NEW_SET = "builtin/units/test"


@pytest.fixture(scope="module")
def studio(tmp_path_factory: pytest.TempPathFactory):
    """A shared studio; (port, its workspace)."""
    root = tmp_path_factory.mktemp("actions")
    server, port, log, _ = _start(root, shared=True)
    yield port, root / "workspace"
    _stop(server, log)


@pytest.fixture()
def owner(studio, owned_run: RunDir):
    """A signed-in session that launched `owned_run` (its tag written into config.json: the
    run was trained before the session opened, so the server's pings were not answered)."""
    from calm_core.io import atomic_write_json
    from calm_core.runs.layout import CONFIG

    port, _ = studio
    _, cookie = sign_in(port, PASSWORD)
    with StudioSession(port, cookie, timeout_s=600) as session:
        session.rerun("monitor")  # the server reports the session's id: the run records its tag
        config = {**owned_run.config.to_json(), "launched_by": session_tag(session.session_id)}
        atomic_write_json(owned_run.path / CONFIG, config)
        yield session


@pytest.fixture(scope="module")
def owned_run(studio, tiny_model_dir: Path) -> RunDir:
    """A finished run of another session, with S_V probabilities stored."""
    from calm_core.launch import run_config_record
    from calm_core.training.loop import train
    from tests.test_trainer import fresh_lm, small_config

    _, workspace = studio
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CALM_WORKSPACE", str(workspace))
        cfg = small_config(model=str(tiny_model_dir), scope="options", heldout_limit=10, steps=3, eval_every=1)
        run = RunDir.create(None, "owned", run_config_record(cfg, launched_by="a-session-long-gone"))
        train(cfg, run=run, lm=fresh_lm(tiny_model_dir))
    assert run.status.state == "finished"
    return run


def _texts(elements: list[Element]) -> list[str]:
    return [e.text for e in elements]


def _runs(workspace: Path) -> list[Path]:
    return sorted(p for p in (workspace / "runs").iterdir() if not p.name.startswith("."))


def test_another_session_cannot_write_into_the_run(studio, owned_run: RunDir) -> None:
    port, workspace = studio
    _, cookie = sign_in(port, PASSWORD)
    before = _runs(workspace)
    with StudioSession(port, cookie, timeout_s=600) as attacker:
        attacker.rerun("compare")
        attacker.rerun("compare", chosen={"compare_more_sets": [NEW_SET]})
        evaluated = attacker.rerun("compare", click=["compare_more_go"])  # drawn disabled: a forged click
        threshold = attacker.rerun("compare", click=["selective_save"])
    assert not (owned_run.path / ADDED_RESULTS).exists()  # no rows written into the owner's run
    assert not (owned_run.path / SELECTIVE).exists()  # nor a threshold into its export
    assert _runs(workspace) == before  # and no job queued in the attacker's name
    assert OWNER_WRITES in _texts(evaluated) and OWNER_WRITES in _texts(threshold)
    assert not [e for e in evaluated + threshold if e.kind == "exception"]


def test_the_owners_evaluation_is_a_queued_job_under_the_quotas(
    studio, owner: StudioSession, owned_run: RunDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    from calm_core.results.added_job import EVALUATES
    from tests.test_shared_rules import _queued

    _, workspace = studio
    monkeypatch.setenv("CALM_WORKSPACE", str(workspace))
    before = _runs(workspace)
    owner.rerun("compare")
    owner.rerun("compare", chosen={"compare_more_sets": [NEW_SET]})
    elements = owner.rerun("compare", click=["compare_more_go"])
    assert not [e for e in elements if e.kind == "exception" or e.is_error], _texts(elements)
    (job_dir,) = [p for p in _runs(workspace) if p not in before]
    job = RunDir(job_dir)
    spec = job.config.extra[EVALUATES]
    assert spec["run"] == owned_run.run_id and spec["datasets"] == [NEW_SET]
    assert spec["cost"]["items"] > 0 and spec["cost"]["seconds"] > 0  # its own estimate, made before it queued
    assert job.config.launched_by == session_tag(owner.session_id)  # counted by the owner's quota
    deadline = time.monotonic() + 300
    while job.state().state not in ("finished", "failed") and time.monotonic() < deadline:
        time.sleep(1)
    assert job.state().state == "finished", job.status.error
    assert {r.dataset for r in owned_run.added_results()} == {NEW_SET}  # the rows, in the owner's run
    for _ in range(3):
        _queued(session_tag(owner.session_id))  # the owner now holds its quota of 3
    count = len(_runs(workspace))
    elements = owner.rerun("compare", click=["compare_more_go"])
    assert len(_runs(workspace)) == count and quota_message(3) in _texts(elements)
