"""Notes the Train page shows under its pickers: the rows a chosen dataset rejects, which
fast paths the chosen model got on this machine, and the model's precision and scoring rule.

Why a module: app/pages/train/train.py stays a short script. The fast-path note must
be drawn after the data pickers: drawn above them, its caption-to-expander swap reset them
(tests/test_browser_sessions.py::test_two_sessions_launch_at_once guards it).
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from calm_core.data.schema import DataError
from calm_core.results.fast_path_view import fast_path_rows, model_fast_paths
from calm_core.scoring.evaluate import load_report
from calm_core.scoring.models import ModelLoadError, expected_precision
from calm_core.scoring.named_models import named_model
from calm_core.training.config import TrainConfig
from calm_core.training.scoring_choice import AUTO, AUTO_NOTE


@st.cache_data(ttl=60, show_spinner="Reading the chosen dataset...")
def _rejections(name: str, kind: str) -> list[str]:
    """Headline and first reasons of the rows `name` rejects, [] when none: training
    silently on part of a file is the surprise this page must not hide. Cached a minute
    (a shared file is re-read at most that often while the page reruns)."""
    try:
        return load_report(name, kind).rejection_lines()
    except DataError as exc:
        return [f"{name} cannot be loaded", str(exc)]


def show_rejections(names: list[str], kind: str) -> None:
    """One expander per chosen dataset that rejects rows, headed by what it rejected."""
    for name in dict.fromkeys(n for n in names if n):
        lines = _rejections(name, kind)
        if lines:
            with st.expander(f":material/warning: {lines[0]}"):
                st.text("\n".join(lines[1:]))


def fast_paths_note(model: str) -> None:
    """Under section 1: which fast paths the chosen model got on this machine and why
    (each measured once against the model's own forward, calm_core/scoring/fast_paths.py)."""
    try:
        record = model_fast_paths(model)
    except (ModelLoadError, OSError, ValueError):  # a path being typed, an embedded model not installed
        record = None
    if record is None:
        st.caption(
            "Fast paths (frozen prefix, hidden path, feature capture, prefix sharing) are measured against "
            "this model's own forward when a run or an evaluation first loads it; each one it fails is "
            "switched off, and the run's Monitor page and report say why."
        )
        return
    used = ", ".join(row["fast path"] for row in fast_path_rows(record) if row["used"] == "yes") or "none"
    with st.expander(f"Fast paths this model got: {used}"):
        st.dataframe(pd.DataFrame(fast_path_rows(record)), hide_index=True, width="stretch")


def setting_note(cfg: TrainConfig) -> None:
    """One caption: the model the run loads, the dtype its body will run in and why, and
    the scoring rule and why (auto: decided on S_V when the run starts)."""
    named = named_model(cfg.model)
    label = named.label if named is not None else cfg.model
    try:
        precision = expected_precision(cfg.model, cfg.dtype, cfg.device)
    except (ModelLoadError, ValueError) as exc:
        precision = f"not known before loading ({exc})"
    if cfg.task != "mcqa":
        rule = "open answers (no option rule)"
    elif cfg.scoring == AUTO:
        rule = AUTO_NOTE
    else:
        rule = f"{cfg.scoring}{' under the chat template' if cfg.chat_template else ''} (set here)"
    st.caption(f"**Model**: {label}. **Precision**: {precision}. **Scoring**: {rule}")
