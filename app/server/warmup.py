"""The libraries every page needs, imported once per server, never behind a blank page.

PyTorch, transformers and the scoring code take seconds to import, and a page's script
imports them before it draws its first element, so a fresh server's first page was
blank for that long. The server starts importing them in the background as it starts
(`start_in_background`, from app/main.py), and the router (app/server/studio.py) calls `ready`
before it runs a page: a spinner while anything is still missing, nothing once loaded.

Both import the same modules in the same order, one at a time: two threads that take
Python's per-module import locks in one order cannot deadlock, the later one waits for
each module whole.
"""

from __future__ import annotations

import importlib
import sys
import threading

import streamlit as st

HEAVY: tuple[str, ...] = (
    "torch",
    "transformers",
    "pandas",
    "plotly.graph_objects",
    "app.widgets.charts",
    "calm_core.scoring.evaluate",
    "calm_core.scoring.score_cache",
    "calm_core.results.playground",
)
SPINNER = "Starting the studio: loading PyTorch and the model code (once per server start)..."


def missing() -> list[str]:
    """The heavy modules not imported yet, in import order."""
    return [name for name in HEAVY if name not in sys.modules]


def import_all() -> None:
    """Import every heavy module in order (a no-op for those already imported)."""
    for name in HEAVY:
        importlib.import_module(name)


def start_in_background() -> threading.Thread:
    """A daemon thread importing the heavy modules while the server waits for a browser."""
    thread = threading.Thread(target=import_all, name="calm-warmup", daemon=True)
    thread.start()
    return thread


def ready() -> None:
    """Before a page runs: the heavy modules imported, under a spinner when any is missing."""
    if not missing():
        return
    with st.spinner(SPINNER):
        import_all()
