"""A shared studio's rules wherever a run or a dataset is touched (issue 31, part 4):
a resume counts toward the quota, a run has a step budget, deleting or replacing an
upload or a split is owner-only (like cancel, with the admin's exception), and a typed
path that can name no file (NUL, control characters, overlong) is refused in one line.
Each rule is tested in calm_core and on its page (AppTest, as tests/test_access.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from calm_core.data.catalog import load_dataset
from calm_core.training.config import TrainConfig
from calm_core.workspace import access
from calm_core.workspace.access import Access, PathRefused, Refused
from tests.test_access import _main

PASSWORD = "a long pass phrase"  # a shared studio serves nothing with one under 12 characters
SHARED = Access(shared=True, password=PASSWORD)
ADMIN = Access(shared=True, password=PASSWORD, admin=True)
LOCAL = Access(shared=False)


def _signed_in(monkeypatch: pytest.MonkeyPatch, page: str, session: str = "this-session", **env: str):
    """The shared studio, past the gate, on `page`, as session `session`."""
    import app.gate

    monkeypatch.setattr(app.gate, "this_session", lambda: session)
    at = _main(monkeypatch, **{access.SHARED_ENV: "1", access.PASSWORD_ENV: PASSWORD, **env}).run()
    at.text_input(key="gate_password").input(PASSWORD).run()
    at.switch_page(page)
    return at


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
    # or a traceback; as an `org/name` it is a hub id (the Hub refuses it when loading).
    long_name = "org/" + "x" * 300
    assert access.confine_model_name(long_name, shared) == long_name


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
        at = _signed_in(monkeypatch, "views/train.py").run()
    else:
        at = _main(monkeypatch).run()
        at.switch_page("views/train.py")
        at.run()
    at.radio(key="train_model_kind").set_value("local directory").run()
    at.text_input(key="train_model_name").input("/models/a\x00b").run()
    assert not at.exception, at.exception
    assert [e.value for e in at.error] == ["Refused this path: it holds a NUL byte."]
    assert not [b for b in at.button if b.key == "train_launch"]  # the page stopped at the refusal
