"""The attacker's suite, part 2 (issue 31): forged widget messages against a running shared
studio, over the raw WebSocket (tests/attack_client.py StudioSession), no browser.

A browser sends a click only for an enabled button and types only what a person types;
an attacker signed in with the password sends any widget state. Each test forges one:
- a click on the Monitor's Resume over the session's quota of 3 queued or running runs;
- a click on the Data page's Delete for an upload that another session saved;
- a model path with a NUL byte typed into the Train page.

Two layers stand behind each button: the page draws it disabled by the rule of
calm_core/access/rules.py (and Streamlit 1.67 itself drops a forged value for a
disabled widget), and the calm_core function the page calls refuses as well
(`launch.resume_run`, `datasets.delete_dataset`). These tests check what the attacker
gets, whichever layer stops it: nothing changes on disk, and the page says why in one
line. They fail when the rule is gone (or both layers are); the rule's and each layer's
own tests are in tests/test_shared_rules.py. The path field has one layer,
`access.rules.check_typed_path`.
"""

from __future__ import annotations

import pytest

from calm_core.data.entries import upload_folder
from calm_core.runs.state import STATUS
from calm_core.access.rules import delete_refusal, quota_message, session_tag
from tests.attack_client import Element, StudioSession, sign_in
from tests.test_attacks import PASSWORD, _start, _stop
from tests.test_shared_rules import SHARED, _queued, _upload


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    """A shared studio; (port, its workspace). The tests write runs and uploads there."""
    root = tmp_path_factory.mktemp("forged")
    server, port, log, _ = _start(root, shared=True)
    yield port, root / "workspace"
    _stop(server, log)


@pytest.fixture()
def attacker(studio, monkeypatch: pytest.MonkeyPatch):
    """A fresh session of a signed-in attacker; calm_core in this process writes to the studio's workspace."""
    port, workspace = studio
    monkeypatch.setenv("CALM_WORKSPACE", str(workspace))
    _, cookie = sign_in(port, PASSWORD)
    with StudioSession(port, cookie) as session:
        yield session


def _texts(elements: list[Element]) -> list[str]:
    return [e.text for e in elements]


def _no_exception(elements: list[Element]) -> None:
    assert not [e for e in elements if e.kind == "exception"], [e.proto for e in elements if e.kind == "exception"]


def test_a_forged_resume_over_the_quota_is_refused(attacker: StudioSession) -> None:
    attacker.rerun("monitor")  # the server reports the session's id: its runs record its tag
    tag = session_tag(attacker.session_id)
    for _ in range(3):
        _queued(tag)
    stopped = _queued(tag, state="cancelled")  # the newest: the Monitor shows it first
    before = (stopped.path / STATUS).read_bytes()
    attacker.rerun("monitor")  # draws Resume, disabled: a browser cannot click it
    elements = attacker.rerun("monitor", click=["monitor_resume"])
    assert (stopped.path / STATUS).read_bytes() == before  # still cancelled: not queued again
    assert stopped.status.state == "cancelled"
    assert quota_message(3) in _texts(elements)
    _no_exception(elements)


def test_a_forged_delete_of_another_sessions_upload_is_refused(studio, attacker: StudioSession) -> None:
    port, _ = studio
    _, cookie = sign_in(port, PASSWORD)
    with StudioSession(port, cookie) as other:  # another signed-in session saves the upload
        other.rerun("data")
        owner = session_tag(other.session_id)
        theirs = _upload("theirs", owner)
    attacker.rerun("data")  # draws Delete on "upload/theirs" (the only upload), disabled
    elements = attacker.rerun("data", click=["data_delete"])
    assert upload_folder(theirs)[1].is_dir()  # still there
    assert delete_refusal(SHARED, session_tag(attacker.session_id), owner) in _texts(elements)
    _no_exception(elements)
    # The same click, on the attacker's own upload, deletes it: the client's clicks do land.
    mine = _upload("mine", session_tag(attacker.session_id))
    attacker.rerun("data", typed={"data_delete_name": mine}, click=["data_delete"])
    assert not upload_folder(mine)[1].exists() and upload_folder(theirs)[1].is_dir()


def test_a_forged_nul_model_path_is_one_line(attacker: StudioSession) -> None:
    attacker.rerun("train")
    attacker.rerun("train", typed={"train_model_kind": "local directory"})  # draws the path field
    elements = attacker.rerun("train", typed={"train_model_name": "models/\x00evil"})
    _no_exception(elements)  # the probe saw a ValueError's traceback, server paths and all
    assert [e.text for e in elements if e.is_error] == ["Refused this path: it holds a NUL byte."]
    assert not any("\x00" in text or "Traceback" in text for text in _texts(elements))
    assert not [e for e in elements if e.key == "train_launch"]  # the page stopped at the refusal
