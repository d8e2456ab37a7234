"""A shared studio's rules wherever a run or a dataset is touched (issue 31, part 4):
a resume counts toward the quota, a run has a step budget, deleting or replacing an
upload or a split is owner-only (like cancel, with the admin's exception), and a typed
path that can name no file (NUL, control characters, overlong) is refused in one line.
Each rule is tested in calm_core and on its page (AppTest, as tests/test_access.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.widgets.keys import MONITOR_RUN
from calm_core.data.catalog import load_dataset
from calm_core.training.config import TrainConfig
from calm_core.access import rules as access
from calm_core.access.rules import Access, PathRefused, Refused
from tests.test_access import _main

PASSWORD = "a long pass phrase"  # a shared studio serves nothing with one under 12 characters
SHARED = Access(shared=True, password=PASSWORD)
ADMIN = Access(shared=True, password=PASSWORD, admin=True)
LOCAL = Access(shared=False)


def _queued(tag: str | None, state: str = "queued", browser: str | None = None):
    """A run launched by session `tag` (of the signed-in `browser`), in `state`, with a
    job.json (so it can be resumed)."""
    from calm_core.io import atomic_write_json
    from calm_core.runs.layout import JOB_FILE
    from calm_core.launch import create_run

    run = create_run(TrainConfig.preset("quick"), launched_by=tag, launched_from=browser)
    atomic_write_json(run.path / JOB_FILE, {"command": ["true"], "env": {}, "resume": False, "resumes": 0})
    run.write_status(state)
    return run


def _signed_in(monkeypatch: pytest.MonkeyPatch, page: str, session: str = "this-session", **env: str):
    """The shared studio, past the gate, on `page`, as session `session`."""
    import app.server.gate

    monkeypatch.setattr(app.server.gate, "this_session", lambda: session)
    at = _main(monkeypatch, **{access.SHARED_ENV: "1", access.PASSWORD_ENV: PASSWORD, **env}).run()
    at.text_input(key="gate_password").input(PASSWORD).run()
    at.switch_page(page)
    return at


# ------------------------------------------------------------------ resume counts toward the quota


def test_resume_refusal_counts_the_quota_and_the_owner() -> None:
    assert access.resume_refusal(SHARED, "s", "s", 2) is None
    assert "the most a shared studio allows (3)" in access.resume_refusal(SHARED, "s", "s", 3)
    assert access.resume_refusal(SHARED, "s", "other", 0) == access.OWNER_ONLY
    assert access.resume_refusal(SHARED, "s", None, 0) == access.OWNER_ONLY  # a CLI run: the admin's
    assert access.resume_refusal(ADMIN, "s", "other", 0) is None
    assert access.resume_refusal(ADMIN, "s", "other", 3) is not None  # the admin's session has a quota too
    assert access.resume_refusal(LOCAL, "s", "other", 10) is None


def test_cancel_launch_resume_cannot_hold_four_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's sequence: cancel your run, launch three, resume the first: refused."""
    from calm_core import launch
    from calm_core.launch import active_runs_of, resume_run

    resumed: list[str] = []
    monkeypatch.setattr(launch, "resume", lambda run, fresh=False: resumed.append(run.run_id) or [])
    first = _queued("s", state="cancelled")
    others = [_queued("s") for _ in range(3)]
    assert active_runs_of("s") == 3
    with pytest.raises(Refused, match=r"allows \(3\)"):
        resume_run(first, SHARED, "s")
    assert resumed == []
    others[0].write_status("cancelled")
    resume_run(first, SHARED, "s")
    assert resumed == [first.run_id]
    with pytest.raises(Refused, match="Another session"):
        resume_run(first, SHARED, "someone else")
    resume_run(first, LOCAL, None)  # local: no rule
    assert resumed == [first.run_id] * 2


def test_shared_monitor_disables_resume_at_the_quota(tiny_everywhere, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _queued("this-session", state="cancelled")
    queued = [_queued("this-session") for _ in range(3)]
    at = _signed_in(monkeypatch, "../pages/monitor/monitor.py")
    at.session_state[MONITOR_RUN] = first.run_id
    at.run()
    assert not at.exception, at.exception
    assert at.button(key="monitor_resume").disabled
    assert any("the most a shared studio allows (3)" in c.value for c in at.caption)
    queued[0].write_status("cancelled")
    at.run()
    assert not at.exception, at.exception
    assert not at.button(key="monitor_resume").disabled


# ------------------------------------------------------------------ the step budget


def test_the_step_budget_is_a_setting_and_applies_only_when_shared() -> None:
    assert access.max_steps_from({}) == access.DEFAULT_MAX_STEPS == 1000
    assert access.max_steps_from({access.MAX_STEPS_ENV: "200"}) == 200
    for typo in ("", "abc", "0", "-5", "1e9", "２００"):
        assert access.max_steps_from({access.MAX_STEPS_ENV: typo}) == access.DEFAULT_MAX_STEPS, typo
    assert access.access_from({access.MAX_STEPS_ENV: "50"}, "0.0.0.0").max_steps == 50
    budget = Access(shared=True, password=PASSWORD, max_steps=100)
    assert access.steps_refusal(budget, 100) is None
    line = access.steps_refusal(budget, 101)
    assert "101 steps" in line and "100" in line and access.MAX_STEPS_ENV in line and "\n" not in line
    assert access.steps_refusal(Access(shared=False, max_steps=100), 100_000) is None
    assert "allows (3)" in access.launch_refusal(budget, 10, 3)  # the quota first
    assert access.launch_refusal(budget, 10, 2) is None


def test_launch_enforces_the_budget_and_the_quota_when_given_the_access(tmp_path: Path) -> None:
    from calm_core.runs.listing import list_runs
    from calm_core.launch import create_run, launch_training

    budget = Access(shared=True, password=PASSWORD, max_steps=30)
    with pytest.raises(Refused, match="40 steps, more than the 30"):
        launch_training(TrainConfig.preset("quick"), root=tmp_path, launched_by="s", access=budget)
    for _ in range(3):
        create_run(TrainConfig.preset("quick", steps=5), tmp_path, launched_by="s").write_status("queued")
    with pytest.raises(Refused, match=r"allows \(3\)"):
        launch_training(TrainConfig.preset("quick", steps=5), root=tmp_path, launched_by="s", access=budget)
    assert len(list_runs(tmp_path)) == 3  # nothing was created by the refused launches


def test_shared_train_page_disables_launch_over_the_step_budget(tiny_everywhere, monkeypatch) -> None:
    at = _signed_in(monkeypatch, "../pages/train/train.py", **{access.MAX_STEPS_ENV: "30"}).run()
    assert not at.exception, at.exception
    assert at.button(key="train_launch").disabled  # the quick preset has 40 steps
    assert any("40 steps, more than the 30" in w.value for w in at.warning)
    at.number_input(key="train_steps").set_value(30).run()
    assert not at.exception, at.exception
    assert not at.button(key="train_launch").disabled


# ------------------------------------------------------------------ deleting is owner-only


def _upload(name: str, owner: str | None) -> str:
    from calm_core.data.uploads import save_upload

    return save_upload(name, load_dataset("builtin/capitals/test", limit=12), "caps.csv", owner=owner).name


def test_the_delete_rule_follows_the_cancel_rule() -> None:
    assert access.delete_refusal(SHARED, "s", "s") is None
    assert "Another session saved this dataset" in access.delete_refusal(SHARED, "s", "t")
    assert "only the admin" in access.delete_refusal(SHARED, "s", None)  # saved before owners were recorded
    assert access.delete_refusal(ADMIN, "s", "t") is None and access.delete_refusal(ADMIN, "s", None) is None
    assert access.delete_refusal(LOCAL, None, None) is None


def test_uploads_and_splits_record_their_owner_and_only_it_deletes_them() -> None:
    from calm_core.data.entries import upload_folder
    from calm_core.data.owners import OWNER_FILE, dataset_owner
    from calm_core.data.split import plan_split, read_split, save_split
    from calm_core.access.datasets import check_may_replace, delete_dataset

    mine, theirs, old = _upload("mine", "s"), _upload("theirs", "t"), _upload("old", None)
    assert (dataset_owner(mine), dataset_owner(theirs), dataset_owner(old)) == ("s", "t", None)
    assert not (upload_folder(old)[1] / OWNER_FILE).exists()  # the CLI's and older saves: no owner file
    plan = plan_split(load_dataset("builtin/capitals/test").items, seed=0, source="builtin/capitals/test")
    save_split(plan, "caps", owner="t")
    assert dataset_owner("split/caps") == dataset_owner("split/caps/train") == "t"
    for name in (theirs, old, "split/caps"):
        with pytest.raises(Refused):
            delete_dataset(name, SHARED, "s")
    with pytest.raises(Refused, match="Another session"):
        check_may_replace("upload/theirs", SHARED, "s")  # replacing is deleting
    check_may_replace("upload/new-name", SHARED, "s")  # a free name is anyone's
    delete_dataset(mine, SHARED, "s")
    assert not upload_folder(mine)[1].exists()
    delete_dataset(old, ADMIN, "s")
    delete_dataset("split/caps", LOCAL, None)
    assert not upload_folder(old)[1].exists()
    with pytest.raises(Exception, match="Expected a split named"):
        read_split("caps")
    delete_dataset(theirs, SHARED, "t")


@pytest.mark.parametrize("admin", [False, True])
def test_shared_data_page_lets_a_session_delete_only_its_own(monkeypatch: pytest.MonkeyPatch, admin: bool) -> None:
    from calm_core.data.entries import upload_folder

    for name, owner in (("mine", "this-session"), ("theirs", "another-session"), ("old", None)):
        _upload(name, owner)
    at = _signed_in(monkeypatch, "../pages/data/data.py", **({access.ADMIN_ENV: "1"} if admin else {})).run()
    assert not at.exception, at.exception
    for name, refused in (("upload/theirs", "Another session saved"), ("upload/old", "only the admin")):
        at.selectbox(key="data_delete_name").set_value(name).run()
        assert at.button(key="data_delete").disabled is not admin
        assert any(refused in c.value for c in at.caption) is not admin
    at.selectbox(key="data_delete_name").set_value("upload/mine").run()
    assert not at.button(key="data_delete").disabled
    at.button(key="data_delete").click().run()
    assert not at.exception, at.exception
    assert not upload_folder("mine")[1].exists() and upload_folder("theirs")[1].exists()


# ------------------------------------------------------------------ malformed typed paths


MALFORMED = {
    "a NUL byte": "/models/a\x00b",
    "a control character (U+001B)": "/models/\x1b[31mred",
    "a newline (U+000A)": "/models/a\nb",
    "too long": "/models/" + "a" * 5000,
}


@pytest.mark.parametrize("what", sorted(MALFORMED))
@pytest.mark.parametrize("mode", ["local", "shared"])
def test_malformed_model_paths_are_refused_in_one_line(what: str, mode: str) -> None:
    studio = LOCAL if mode == "local" else Access(shared=True, password=PASSWORD, roots=access.allowed_roots({}))
    with pytest.raises(PathRefused) as refused:
        access.confine_model_name(MALFORMED[what], studio)
    line = str(refused.value)
    assert "\n" not in line and "\x00" not in line and "\x1b" not in line and len(line) < 200, line
    assert line.startswith("Refused this path: it ")


def test_confine_turns_unresolvable_paths_into_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CALM_WORKSPACE", str(tmp_path))
    shared = Access(shared=True, password=PASSWORD, roots=access.allowed_roots({}))
    loop = tmp_path / "loop"
    loop.symlink_to(tmp_path / "loop")
    with pytest.raises(PathRefused, match="cannot be resolved"):
        access.confine_model_name(str(loop / "model"), shared)
    # A component longer than the file system allows: os.stat raises OSError, not a refusal
    # or a traceback; as an `org/name` it is a hub id (the Hub refuses it when loading),
    # so it meets the operator's list of hub repos (CALM_SHARED_HUB_REPOS): taken when
    # listed, else refused in one line for not being listed, not for the OSError. The long
    # component comes first: after a missing `org/` the stat would stop at ENOENT.
    long_name = "o" * 300 + "/model"
    listed = Access(shared=True, password=PASSWORD, roots=shared.roots, hub_repos=(long_name,))
    assert access.confine_model_name(long_name, listed) == long_name
    with pytest.raises(PathRefused, match="downloads only the hub repos") as refused:
        access.confine_model_name(long_name, shared)
    assert "\n" not in str(refused.value)


def test_malformed_upload_and_split_names_are_refused_in_one_line() -> None:
    from calm_core.data.entries import split_folder, upload_folder
    from calm_core.data.schema import DataError

    for text in ("quiz\x00", "quiz\x1b", "q" * 5000):
        for folder in (upload_folder, split_folder):
            with pytest.raises(DataError) as refused:
                folder(text)
            assert "\n" not in str(refused.value) and "Expected a plain" in str(refused.value)


@pytest.mark.parametrize("mode", ["local", "shared"])
def test_train_page_refuses_a_nul_model_path_in_one_line(tiny_everywhere, monkeypatch, mode: str) -> None:
    if mode == "shared":
        at = _signed_in(monkeypatch, "../pages/train/train.py").run()
    else:
        at = _main(monkeypatch).run()
        at.switch_page("../pages/train/train.py")
        at.run()
    at.radio(key="train_model_kind").set_value("local directory").run()
    at.text_input(key="train_model_name").input("/models/a\x00b").run()
    assert not at.exception, at.exception
    assert [e.value for e in at.error] == ["Refused this path: it holds a NUL byte."]
    assert not [b for b in at.button if b.key == "train_launch"]  # the page stopped at the refusal


def test_the_server_and_browser_budgets(tmp_path: Path) -> None:
    """One browser holds MAX_QUEUED_PER_BROWSER runs across its sessions; the server holds
    CALM_SHARED_MAX_RUNS across every browser, and its refusal says how far the running run is."""
    from calm_core.access.rules import MAX_QUEUED_PER_BROWSER, ActiveRuns
    from calm_core.launch import active_runs, create_run, launch_training

    shared = Access(shared=True, password=PASSWORD, max_runs=5)
    for i in range(MAX_QUEUED_PER_BROWSER):
        create_run(TrainConfig.preset("quick", steps=5), tmp_path, launched_by=f"s{i}", launched_from="b").write_status(
            "queued"
        )
    with pytest.raises(Refused, match="This browser already has 3"):
        launch_training(TrainConfig.preset("quick", steps=5), root=tmp_path, launched_by="s9", access=shared,
                        launched_from="b")
    assert active_runs(shared, "s9", "b", tmp_path) == ActiveRuns(0, 3, 3, active_runs(shared, "s9", "b", tmp_path).frees)
    for i in range(2):
        create_run(TrainConfig.preset("quick", steps=5), tmp_path, launched_by=f"o{i}", launched_from="c").write_status(
            "queued"
        )
    line = access.launch_refusal(shared, 5, active_runs(shared, "new", "new-browser", tmp_path))
    assert line and "5 queued or running runs" in line and access.MAX_RUNS_ENV in line and "\n" not in line
    assert "ends" in line
    assert access.launch_refusal(Access(shared=False), 5, ActiveRuns(9, 9, 99)) is None  # local: no budget
    assert access.access_from({access.MAX_RUNS_ENV: "2"}, "0.0.0.0").max_runs == 2
    assert access.access_from({access.MAX_RUNS_ENV: "two"}, "0.0.0.0").max_runs == access.DEFAULT_MAX_RUNS


def test_an_added_evaluation_is_held_to_its_item_budget() -> None:
    """An added evaluation in a shared studio scores at most CALM_SHARED_MAX_EVAL_ITEMS items
    ("all" of a large training set was hours of a job slot); an unknown count is refused
    (say how many items); a local studio is not held."""
    shared = access.access_from({access.SHARED_ENV: "1", access.MAX_EVAL_ITEMS_ENV: "50"}, "127.0.0.1")
    assert access.eval_items_refusal(shared, 50) is None
    assert "more than the 50" in (access.eval_items_refusal(shared, 51) or "")
    assert "items per set" in (access.eval_items_refusal(shared, None) or "")
    assert access.eval_items_refusal(Access(), 10**9) is None
    assert access.access_from({access.SHARED_ENV: "1"}, "x").max_eval_items == access.DEFAULT_MAX_EVAL_ITEMS
