"""The Learn page's temperature: Fit T moves the slider without a warning in the server log."""

from __future__ import annotations

import logging

import pytest


class Records(logging.Handler):
    """Every record a logger emits (Streamlit's loggers do not propagate to pytest's caplog)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture()
def streamlit_log():
    handler = Records()
    logger = logging.getLogger("streamlit")
    logger.addHandler(handler)
    for name in list(logging.root.manager.loggerDict):  # Streamlit's own loggers, each with propagate off
        if name.startswith("streamlit."):
            logging.getLogger(name).addHandler(handler)
    yield handler.records
    for name in ["streamlit", *list(logging.root.manager.loggerDict)]:
        if name == "streamlit" or name.startswith("streamlit."):
            logging.getLogger(name).removeHandler(handler)


def test_fit_t_moves_the_slider_and_logs_no_warning(open_page, tiny_everywhere, streamlit_log) -> None:
    at = open_page("../pages/learn/learn.py")
    assert at.slider(key="learn_temperature").value == 1.0
    at.button(key="learn_fit").click().run()
    assert not at.exception, at.exception
    fitted = at.slider(key="learn_temperature").value
    assert fitted != 1.0
    at.run()  # a later rerun keeps the fitted value
    assert at.slider(key="learn_temperature").value == fitted
    warnings = [r.getMessage() for r in streamlit_log if r.levelno >= logging.WARNING]
    assert not [w for w in warnings if "Session State" in w or "default value" in w], warnings


def test_a_letter_model_installed_is_offered_with_letter_and_chat(open_page, tiny_everywhere, monkeypatch) -> None:
    """Where Qwen2.5-Coder is installed, Learn offers it beside the embedded model, scored by
    default under letter answers and its chat template (the model answers letters; its
    under-confidence is the other half of the lesson). Scores stand in from the tiny model."""
    import app.widgets.state
    import calm_core.scoring.named_models as named

    monkeypatch.setattr(named, "installed_models", lambda: ["embedded", "qwen2.5-coder-1.5b"])
    asked: list[tuple[str, str]] = []
    real = app.widgets.state.get_scores

    def recorded(model: str, dataset: str, rule: str, limit: int, seed: int = 0):
        asked.append((model, rule))
        return real("embedded", dataset, rule, limit, seed)

    monkeypatch.setattr(app.widgets.state, "get_scores", recorded)
    at = open_page("../pages/learn/learn.py")
    assert not at.exception, at.exception
    assert at.radio(key="learn_model").options == ["SmolLM2-135M-Instruct", "Qwen2.5-Coder-1.5B-Instruct, SFT + DPO"]
    assert asked[-1] == ("embedded", "cloze")
    at.radio(key="learn_model").set_value("qwen2.5-coder-1.5b").run()
    assert not at.exception, at.exception
    assert asked[-1] == ("qwen2.5-coder-1.5b", "letter+chat")


def test_a_quiz_rule_with_chat_scores_under_the_chat_template() -> None:
    from calm_core.scoring.score_cache import Quiz

    assert Quiz("builtin/capitals/test", "letter+chat").scoring.chat_template
    assert Quiz("builtin/capitals/test", "letter+chat").scoring.rule == "letter"
    assert not Quiz("builtin/capitals/test", "cloze").scoring.chat_template
