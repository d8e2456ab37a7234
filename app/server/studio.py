"""CALM Studio's page router, run per session behind the front door of app/main.py.

A router over thin pages (st.navigation); every number comes from calm_core and every
figure from app/widgets/charts.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # `app.*` imports when run as a script by streamlit

import streamlit as st  # noqa: E402

from app import navigation  # noqa: E402
from app.server import warmup  # noqa: E402
from app.server.gate import passes_gate, studio_access  # noqa: E402
from calm_core.logs import configure as configure_logging  # noqa: E402

configure_logging()  # calm_core's notes to the server's stderr (idempotent per process)

st.set_page_config(page_title="CALM Studio", page_icon=str(ROOT / "assets" / "logo.svg"), layout="wide")

PAGES = [
    st.Page(str(ROOT / "app" / "pages" / spec.script), title=spec.title, icon=spec.icon, default=i == 0)
    for i, spec in enumerate(navigation.PAGES)
]

# Shared mode: the password first (calm_core/access/rules.py). The navigation is
# still declared, hidden, so the page asked for in the URL is the one shown once it passes.
gated = not passes_gate(studio_access())
page = st.navigation(PAGES, position="hidden" if gated else "sidebar")
if gated:
    st.stop()
st.sidebar.markdown("### CALM Studio")
st.sidebar.caption("Calibrate aligned LLMs during fine-tuning, and see the difference.")
warmup.ready()  # a fresh server's first page: a spinner while PyTorch loads, not a blank page
page.run()
