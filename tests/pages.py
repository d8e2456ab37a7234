"""Helpers for AppTest page tests."""

from __future__ import annotations

from typing import Any


def run_picker(at: Any) -> Any:
    """The Monitor's run picker. Its key follows its labels (app/pages/monitor/monitor.py), so tests find
    it by its label."""
    return next(box for box in at.selectbox if box.label == "Run")
