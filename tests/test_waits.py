"""No silent waits (issue 30): a fresh server's first page says it is loading PyTorch, and
the Playground says it is scoring while its forward passes run."""

from __future__ import annotations

import sys
from contextlib import contextmanager

import pytest


@pytest.fixture()
def spinners(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """Every st.spinner the code under test opens: (its text, False), then (its text, True)
    once its block is done."""
    import streamlit

    shown: list[tuple[str, bool]] = []

    @contextmanager
    def spinner(text: str = "", *args, **kwargs):
        shown.append((text, False))
        yield
        shown.append((text, True))

    monkeypatch.setattr(streamlit, "spinner", spinner)
    return shown


def test_the_first_page_of_a_fresh_server_imports_under_a_spinner(monkeypatch, spinners) -> None:
    from app.server import warmup

    monkeypatch.setattr(warmup, "HEAVY", ("json", "tabnanny"))
    monkeypatch.delitem(sys.modules, "tabnanny", raising=False)  # not imported yet: a fresh server
    assert warmup.missing() == ["tabnanny"]
    warmup.ready()
    assert spinners == [(warmup.SPINNER, False), (warmup.SPINNER, True)] and "tabnanny" in sys.modules
    spinners.clear()
    warmup.ready()  # every later page: already imported, no spinner
    assert spinners == []


def test_the_background_import_leaves_nothing_missing(monkeypatch) -> None:
    from app.server import warmup

    monkeypatch.setattr(warmup, "HEAVY", ("json", "tabnanny"))
    monkeypatch.delitem(sys.modules, "tabnanny", raising=False)
    warmup.start_in_background().join(timeout=60)
    assert warmup.missing() == []


def test_the_server_starts_the_background_import_and_the_router_waits_for_it() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    main, studio = ((root / "app" / name).read_text() for name in ("main.py", "server/studio.py"))
    assert "warmup.start_in_background()" in main
    assert studio.index("warmup.ready()") < studio.index("page.run()")


def test_the_playground_scores_under_a_spinner(open_page, tiny_everywhere, monkeypatch, spinners) -> None:
    import calm_core.results.playground as playground

    real = playground.option_probabilities
    inside: list[bool] = []

    def watched(trained, item):
        text, done = spinners[-1] if spinners else ("", True)
        inside.append(text.startswith("Scoring the options") and not done)  # the spinner is open while it scores
        return real(trained, item)

    monkeypatch.setattr(playground, "option_probabilities", watched)
    at = open_page("../pages/playground/playground.py")
    assert not at.exception, at.exception
    assert inside == [True] and any(text.startswith("Scoring the options") and done for text, done in spinners)
    assert len(at.get("plotly_chart")) == 1
