"""The local and the shared studio (issue 22): calm_core/access/rules.py, the gate
(app/server/gate.py through app/server/studio.py), path confinement and the per-session rules on the
Train and Monitor pages, and a training job's environment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from calm_core.access import rules as access
from calm_core.access.rules import Access, PathRefused


def test_loopback_addresses_are_local_and_everything_else_is_shared() -> None:
    for address in ("127.0.0.1", "localhost", "::1", "127.0.1.1"):
        assert access.is_loopback(address)
        assert not access.access_from({}, address).shared
    for address in (None, "", "0.0.0.0", "192.168.1.4", "::"):
        assert access.access_from({}, address).shared, address  # unset: Streamlit listens everywhere
    assert access.access_from({access.SHARED_ENV: "1"}, "127.0.0.1").shared


def test_the_password_comes_from_the_environment_then_the_secrets_and_is_never_printed() -> None:
    env = {access.SHARED_ENV: "1", access.PASSWORD_ENV: "from-env"}
    assert access.access_from(env, "0.0.0.0", "from-secrets").password == "from-env"
    shared = access.access_from({access.SHARED_ENV: "1"}, "0.0.0.0", "from-secrets")
    assert shared.password == "from-secrets" and not shared.refuses_to_serve
    assert "from-secrets" not in repr(shared)
    assert access.access_from({access.SHARED_ENV: "1"}, "0.0.0.0").refuses_to_serve
    assert not access.access_from({}, "127.0.0.1").refuses_to_serve  # local needs none


def test_check_password_is_exact_and_an_unset_password_matches_nothing() -> None:
    assert access.check_password("s3cret pass", "s3cret pass")
    assert access.check_password("pässwort", "pässwort")  # compared as UTF-8 bytes
    for wrong in ("s3cret pas", "s3cret pass ", "S3cret pass", ""):
        assert not access.check_password(wrong, "s3cret pass")
    assert not access.check_password("", None) and not access.check_password("x", "")


def test_the_retry_delay_starts_after_five_wrong_tries_and_is_capped() -> None:
    """One back-off for the door and the gate (guesses.backoff): they once had two, 30 s and 60 s."""
    from calm_core.access import guesses

    assert [guesses.backoff(n) for n in range(5)] == [0.0] * 5
    assert [guesses.backoff(n) for n in (5, 6, 7)] == [1.0, 2.0, 4.0]
    assert guesses.backoff(100) == guesses.MAX_DELAY_S == guesses.GuessLimiter().delay_after(100)
    assert not hasattr(access, "retry_delay")


@pytest.fixture
def roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A workspace, a cache, an extra allowed root and a folder outside all of them."""
    paths = {name: tmp_path / name for name in ("workspace", "cache", "extra", "outside")}
    for path in paths.values():
        path.mkdir()
    monkeypatch.setenv("CALM_WORKSPACE", str(paths["workspace"]))
    monkeypatch.setenv("CALM_CACHE_DIR", str(paths["cache"]))
    return paths


def test_confine_accepts_paths_under_the_roots_only(roots: dict[str, Path]) -> None:
    allowed = access.allowed_roots({access.ROOTS_ENV: str(roots["extra"])})
    assert set(allowed) >= {roots["workspace"].resolve(), roots["cache"].resolve(), roots["extra"].resolve()}
    model = roots["extra"] / "my-model"
    model.mkdir()
    assert access.confine(str(model), allowed) == model.resolve()
    assert access.confine(str(roots["cache"] / "models" / "x.gguf"), allowed) == (roots["cache"] / "models" / "x.gguf").resolve()
    with pytest.raises(PathRefused, match="only under the workspace"):
        access.confine(str(roots["outside"]), allowed)
    with pytest.raises(PathRefused, match="only under"):
        access.confine("/etc", allowed)
    with pytest.raises(PathRefused, match="`..` is not allowed"):
        access.confine(str(roots["workspace"] / ".." / "outside"), allowed)
    with pytest.raises(PathRefused, match="`..`"):
        access.confine(str(model / ".."), allowed)  # even one that would land inside


def test_a_symlink_out_of_a_root_is_refused_and_one_inside_is_followed(roots: dict[str, Path]) -> None:
    allowed = access.allowed_roots({})
    escape = roots["workspace"] / "escape"
    escape.symlink_to(roots["outside"], target_is_directory=True)
    with pytest.raises(PathRefused):
        access.confine(str(escape), allowed)
    with pytest.raises(PathRefused):
        access.confine(str(escape / "model"), allowed)
    (roots["workspace"] / "real").mkdir()
    inside = roots["workspace"] / "link"
    inside.symlink_to(roots["workspace"] / "real", target_is_directory=True)
    assert access.confine(str(inside), allowed) == (roots["workspace"] / "real").resolve()


def test_model_names_are_free_locally_and_confined_when_shared(roots: dict[str, Path]) -> None:
    local = Access(shared=False)
    assert access.confine_model_name(str(roots["outside"]), local) == str(roots["outside"])
    listed = "HuggingFaceTB/SmolLM2-360M-Instruct"
    shared = Access(shared=True, password="x", roots=access.allowed_roots({}), hub_repos=(listed,))
    assert access.confine_model_name("embedded", shared) == "embedded"
    assert access.confine_model_name(listed, shared) == listed  # a hub id the operator listed
    with pytest.raises(PathRefused, match=access.HUB_REPOS_ENV):  # any other: its download would be the operator's
        access.confine_model_name("someone/private-model", shared)
    for refused in (str(roots["outside"]), "/etc/passwd", "../secrets", "~/.ssh", str(roots["outside"] / "m.gguf")):
        with pytest.raises(PathRefused):
            access.confine_model_name(refused, shared)
    model = roots["workspace"] / "models" / "mine"
    model.mkdir(parents=True)
    assert access.confine_model_name(str(model), shared) == str(model.resolve())


def test_cancel_rule_and_quota() -> None:
    local, shared = Access(shared=False), Access(shared=True, password="x")
    admin = Access(shared=True, password="x", admin=True)
    assert access.may_cancel(local, "a", "b") and access.may_cancel(local, None, None)
    assert access.may_cancel(shared, "a", "a")
    assert not access.may_cancel(shared, "a", "b") and not access.may_cancel(shared, "a", None)
    assert not access.may_cancel(shared, None, None)
    assert access.may_cancel(admin, "a", "b")
    assert access.quota_left(local, 10) is None
    assert [access.quota_left(shared, n) for n in (0, 2, 3, 5)] == [3, 1, 0, 0]
    assert "3" in access.quota_message(3)
    assert access.session_tag("abc") == access.session_tag("abc") != access.session_tag("abd")
    assert "abc" not in access.session_tag("abc") and len(access.session_tag("abc")) == 16


def test_a_training_job_never_gets_a_password(tmp_path: Path) -> None:
    from calm_core.runs.jobs import job_environment

    env = job_environment({"CALM_STUDIO_PASSWORD": "p", "MY_DB_PASSWORD": "q", "HF_TOKEN": "t", "PATH": "/bin"})
    assert env == {"HF_TOKEN": "t", "PATH": "/bin"}


def test_launched_runs_record_the_session_and_count_against_its_quota(tmp_path: Path) -> None:
    from calm_core.runs.listing import list_runs
    from calm_core.training.config import TrainConfig
    from calm_core.launch import active_runs_of, create_run

    root = tmp_path / "runs"
    cfg = TrainConfig.preset("quick")
    for tag in ("s1", "s1", "s2", None):
        create_run(cfg, root, launched_by=tag).write_status("queued")
    assert sorted((s.launched_by or "-") for s in list_runs(root)) == ["-", "s1", "s1", "s2"]
    assert active_runs_of("s1", root) == 2 and active_runs_of("s2", root) == 1 and active_runs_of("s3", root) == 0
    finished = [s for s in list_runs(root) if s.launched_by == "s1"][0]
    from calm_core.runs.rundir import RunDir

    RunDir(finished.path).write_status("finished")
    assert active_runs_of("s1", root) == 1


# ------------------------------------------------------------------ the pages (AppTest)

MAIN = str(Path(__file__).resolve().parent.parent / "app" / "server" / "studio.py")


def _main(monkeypatch: pytest.MonkeyPatch, **env: str):
    from streamlit.testing.v1 import AppTest

    for key in (access.SHARED_ENV, access.PASSWORD_ENV, access.ADMIN_ENV):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return AppTest.from_file(MAIN, default_timeout=60)


def test_local_studio_has_no_gate(monkeypatch: pytest.MonkeyPatch, tiny_everywhere) -> None:
    at = _main(monkeypatch).run()
    assert not at.exception, at.exception
    assert not [t for t in at.text_input if t.key == "gate_password"]


def test_shared_studio_without_a_password_serves_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    at = _main(monkeypatch, **{access.SHARED_ENV: "1"}).run()
    assert not at.exception, at.exception
    assert any("has no password" in e.value for e in at.error)
    assert not at.text_input and not at.sidebar.markdown  # nothing but the refusal


def test_shared_studio_gate_lets_the_right_password_in_and_delays_wrong_ones(monkeypatch: pytest.MonkeyPatch,
                                                                           tiny_everywhere) -> None:
    import app.server.gate

    waits: list[float] = []
    monkeypatch.setattr(app.server.gate, "_wait", waits.append)
    at = _main(monkeypatch, **{access.SHARED_ENV: "1", access.PASSWORD_ENV: "correct horse"}).run()
    assert [t.key for t in at.text_input] == ["gate_password"] and not at.sidebar.markdown
    for _ in range(6):
        at.text_input(key="gate_password").input("wrong").run()
    assert not at.exception, at.exception
    assert waits == [0.0] * 5 + [1.0]  # the sixth try waited
    assert any("Too many wrong tries" in e.value for e in at.error)
    assert "gate_password" not in at.session_state or at.session_state["gate_password"] in ("", None)
    at.text_input(key="gate_password").input("correct horse").run()
    assert not at.exception, at.exception
    assert at.session_state["gate_passed"] is True
    assert not [t for t in at.text_input if t.key == "gate_password"]  # the pages now
    assert "correct horse" not in str(at.session_state)  # what was typed is not kept


def test_shared_train_page_refuses_a_model_path_outside_the_roots(tiny_everywhere, monkeypatch, tmp_path: Path) -> None:
    at = _main(monkeypatch, **{access.SHARED_ENV: "1", access.PASSWORD_ENV: "a long pass phrase"}).run()
    at.text_input(key="gate_password").input("a long pass phrase").run()
    at.switch_page("../pages/train/train.py")
    at.run()
    at.radio(key="train_model_kind").set_value("local directory").run()
    at.text_input(key="train_model_name").input(str(tmp_path)).run()
    assert not at.exception, at.exception
    assert any("Refused" in e.value and "only under" in e.value for e in at.error)
    assert not [b for b in at.button if b.key == "train_launch"]  # the page stopped at the refusal


@pytest.mark.parametrize("admin", [False, True])
def test_shared_monitor_lets_a_session_change_only_its_own_runs(tiny_everywhere, monkeypatch, admin: bool) -> None:
    from calm_core.training.config import TrainConfig
    from calm_core.launch import create_run

    run = create_run(TrainConfig.preset("quick"), launched_by="another-session")
    run.write_status("queued")
    env = {access.SHARED_ENV: "1", access.PASSWORD_ENV: "a long pass phrase", **({access.ADMIN_ENV: "1"} if admin else {})}
    at = _main(monkeypatch, **env).run()
    at.text_input(key="gate_password").input("a long pass phrase").run()
    at.switch_page("../pages/monitor/monitor.py")
    at.run()
    assert not at.exception, at.exception
    said = any("Another session launched this run" in c.value for c in at.caption)
    assert said is not admin
    assert at.button(key="monitor_resume").disabled


def test_shared_train_page_stops_a_session_at_its_quota(tiny_everywhere, monkeypatch) -> None:
    import app.server.gate
    from calm_core.training.config import TrainConfig
    from calm_core.launch import create_run

    monkeypatch.setattr(app.server.gate, "this_session", lambda: "this-session")
    for tag in ("this-session", "this-session", "another-session"):
        create_run(TrainConfig.preset("quick"), launched_by=tag).write_status("queued")
    at = _main(monkeypatch, **{access.SHARED_ENV: "1", access.PASSWORD_ENV: "a long pass phrase"}).run()
    at.text_input(key="gate_password").input("a long pass phrase").run()
    at.switch_page("../pages/train/train.py")
    at.run()
    assert not at.exception, at.exception
    assert not at.button(key="train_launch").disabled  # 2 of 3
    create_run(TrainConfig.preset("quick"), launched_by="this-session").write_status("queued")
    at.run()
    assert at.button(key="train_launch").disabled
    assert any("the most a shared studio allows (3)" in w.value for w in at.warning)
