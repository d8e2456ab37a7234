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
    at = open_page("views/learn.py")
    assert at.slider(key="learn_temperature").value == 1.0
    at.button(key="learn_fit").click().run()
    assert not at.exception, at.exception
    fitted = at.slider(key="learn_temperature").value
    assert fitted != 1.0
    at.run()  # a later rerun keeps the fitted value
    assert at.slider(key="learn_temperature").value == fitted
    warnings = [r.getMessage() for r in streamlit_log if r.levelno >= logging.WARNING]
    assert not [w for w in warnings if "Session State" in w or "default value" in w], warnings
