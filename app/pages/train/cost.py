"""Section 4 of the Train page, Cost and launch: the steps and the time a run will take,
before anything is launched.

Why a module: app/pages/train/train.py stays a short script. What S_V supports is not
said here: it is said once, under the calibrate_on choice (app/pages/train/advice.py).
"""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from app.widgets.state import describe_error
from calm_core.data.schema import DataError
from calm_core.estimate import text as estimate_text
from calm_core.estimate.arithmetic import Estimate
from calm_core.estimate.machine_load import MachineLoad
from calm_core.estimate.predict import estimate_for, planned_sizes
from calm_core.training.config import TrainConfig
from calm_core.training.timings import RunSizes


@st.cache_data(ttl=10, show_spinner=False)
def _machine_load() -> MachineLoad:
    """The machine's load for the time estimate, kept a few seconds: sampling it takes a
    moment, and the page reruns on each widget change."""
    return MachineLoad.now()


@st.cache_data(ttl=60, show_spinner="Counting the chosen datasets' items for the time estimate...")
def _planned_sizes(config_json: str) -> RunSizes:
    """The run's item counts for its time estimate, kept a minute: no dataset is loaded
    (data/counts.py), but a large file's lines are still read, and the page reruns on each
    widget change."""
    return planned_sizes(TrainConfig.from_dict(json.loads(config_json)))


def cost(cfg: TrainConfig) -> Estimate | None:
    """Section 4's figures: the steps and the time the run will take, before anything is
    launched: one likely duration and the range runs like it fall into, the breakdown in
    an expander (no estimate, and why, when a dataset's size cannot be known). Returns the
    estimate shown, which a launch records."""
    st.subheader("4. Cost and launch")
    try:
        sizes = _planned_sizes(json.dumps(cfg.to_dict(), sort_keys=True))
        estimate = estimate_for(cfg, machine=_machine_load(), sizes=sizes)
    except (DataError, ValueError, OSError) as exc:  # a dataset that cannot be read: its warning is shown above
        estimate = None
        st.caption(f"No time estimate: {describe_error(exc)}")
    c1, c2 = st.columns(2)
    c1.metric("Steps", cfg.steps)
    if estimate is None:
        return None
    c2.metric(
        "Estimated time",
        estimate_text.headline(estimate),
        help="The likely wall time from the job's start to its final evaluation, on this machine at its load now.",
    )
    st.markdown(estimate_text.range_sentence(estimate))
    if estimate.machine.note(estimate.threads):
        st.warning(estimate.machine.note(estimate.threads), icon=":material/speed:")
    st.caption(estimate_text.basis_sentence(estimate))
    with st.expander("Where the time goes"):
        st.dataframe(pd.DataFrame(estimate_text.part_rows(estimate)), hide_index=True, width="stretch")
        early = estimate_text.early_sentence(estimate)
        st.caption((f"{early} " if early else "") + estimate_text.parts_note(estimate))
    return estimate
