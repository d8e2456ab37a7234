"""The Train page's data choice: its task, model and data pickers, kept as one value per
session, so what the page says, what its pickers show and what Launch sends agree.

Why a module: Streamlit forgets a widget's value on any run where the widget is not drawn
(a visit to another page), while a plain session key survives. The split taken from the
Data page did survive, so the page named the user's split above pickers that had gone back
to the demo, and Launch trained on the demo. Every picker here starts from the value this
session kept for it (`start_at`), the value it held when the person left the page; the
page's words are then drawn from the `DataChoice` the pickers return.

    choice = choose_data(task, names)      # the pickers, starting from what was kept
    intro(slot, split, choice)             # the words, from the same value
"""

from __future__ import annotations

from typing import Any, Callable, MutableMapping, NamedTuple

import streamlit as st

from app.pages.train.notes import show_rejections
from calm_core.calibration.recommend import ALL_LABELLED, HELDOUT_ONLY
from calm_core.glossary import tooltip
from calm_core.training.tasks import get_task

KEPT = "train_kept"  # widget key -> the value it held when last drawn (a plain key: it outlives the widget)
CALIBRATE_ON_KEY = "train_calibrate_on"  # the radio the one click of the advice (advice.py) sets
SessionState = MutableMapping[str | int, Any]  # st.session_state (Streamlit's keys are str or int)
TASK_KEY = "train_task"
TASKS = {"multiple choice": "mcqa", "open answers": "openqa"}
# The studio's multiple-choice demo: one domain to train on, two more to show what happens out of
# domain. Other tasks start from their own DEFAULTS (training/tasks/<task>.py), as `calm train` does.
STUDIO_MC_DATA: dict[str, Any] = {
    "train_data": "builtin/chemical_symbols/train",
    "heldout_data": "builtin/chemical_symbols/validation",
    "eval_data": ["builtin/chemical_symbols/test", "builtin/units/test", "builtin/animal_classes/test"],
}
# calibrate_on's choices as the page names them
CALIBRATE_ON_WORDS = {
    HELDOUT_ONLY: "the held-out set S_V",
    ALL_LABELLED: "all labelled items, k-fold (S_T + S_V)",
}


class DataChoice(NamedTuple):
    """The three data pickers' values: S_T, S_V and the evaluation sets, and where the
    post-hoc calibrators are fitted (calibrate_on)."""

    train: str
    heldout: str
    evals: list[str]
    calibrate_on: str = HELDOUT_ONLY


def data_key(name: str, openqa: bool) -> str:
    """Widgets whose options or defaults depend on the task get one key per task."""
    return f"{name}_open" if openqa else name


def put(state: SessionState, key: str, value: Any) -> None:
    """Set a picker from outside it (the Data page's split): the widget, the value that
    `start_at` sends again, and the kept value, in one step."""
    state[key] = value
    state[f"{key}_seeded"] = value
    state.setdefault(KEPT, {})[key] = value


def start_at(state: SessionState, key: str, default: Any, allowed: Callable[[Any], bool] = lambda _: True) -> None:
    """A widget starts at the value this session kept for it (if still `allowed`: a deleted
    dataset is not), else at `default`; its value this run is then kept for the next visit.
    The value goes into the session, never as the widget's default: a default of None for
    "already set" built the picker empty whenever the browser had not sent its value yet.

    While the widget still holds the value put there (`{key}_seeded`, not a widget's key),
    it is put there again on every run, since only a value set this run is sent with the
    widget: Streamlit keeps a value set in a run that was interrupted before its output
    reached the browser (a click while the page first loads) under the widget's id, and
    then sends the widget without it, so the browser drew it at its own default (an empty
    multiselect, the first option) and sent that back as the person's choice."""
    kept = state.setdefault(KEPT, {})
    seeded = f"{key}_seeded"
    if key not in state:
        value = kept[key] if key in kept and allowed(kept[key]) else default
        state[seeded] = value
        state[key] = value
    elif seeded in state and state[key] == state[seeded]:
        state[key] = state[seeded]
    kept[key] = state[key]


def choose_task() -> str:
    """`mcqa` or `openqa`: it decides the datasets offered, the methods and the widgets' keys."""
    start_at(st.session_state, TASK_KEY, next(iter(TASKS)))
    return TASKS[
        st.radio(
            "Task",
            list(TASKS),
            horizontal=True,
            key=TASK_KEY,
            help="multiple choice: the model scores given options. open answers: it writes a short "
            "answer; confidence comes from how often n sampled answers agree (Sem1).",
        )
    ]


def _start_pickers(openqa: bool, names: list[str]) -> None:
    """S_T, S_V and the evaluation sets start from what was kept, else the task's demo data."""
    task_data = get_task("openqa").DEFAULTS if openqa else STUDIO_MC_DATA
    state = st.session_state

    def first(wanted: str) -> str | None:  # a missing demo set never fails the page
        return wanted if wanted in names else (names[0] if names else None)

    start_at(state, data_key("train_data", openqa), first(task_data["train_data"]), lambda v: v in names)
    start_at(state, data_key("train_heldout", openqa), first(task_data["heldout_data"]), lambda v: v in names)
    demo_evals = [n for n in task_data["eval_data"] if n in names]
    start_at(state, data_key("train_evals", openqa), demo_evals, lambda v: all(n in names for n in v))
    if not openqa:
        start_at(state, CALIBRATE_ON_KEY, HELDOUT_ONLY, lambda v: v in CALIBRATE_ON_WORDS)


def choose_data(task: str, names: list[str]) -> DataChoice | None:
    """Section 2: S_T, S_V and the evaluation sets, starting from what this session kept (else
    the task's demo data), and says which rows a chosen set rejects. None: no S_T or S_V."""
    openqa = task == "openqa"
    _start_pickers(openqa, names)
    st.subheader("2. Data")
    c1, c2 = st.columns(2)
    train_data = c1.selectbox(
        "Training set S_T (labelled)", names, key=data_key("train_data", openqa), help=tooltip("S_T")
    )
    heldout = c2.selectbox(
        "Held-out set S_V (labelled, not trained on)",
        names,
        key=data_key("train_heldout", openqa),
        help=tooltip("S_V", "TS"),
    )
    evals = st.multiselect(
        "Evaluation sets (in domain and out of domain)",
        names,
        key=data_key("train_evals", openqa),
        help=tooltip("evaluation set", "test split", "out of domain"),
    )
    if train_data is None or heldout is None:
        return None
    show_rejections([train_data, heldout, *evals], "open" if openqa else "mc")
    return DataChoice(train_data, heldout, evals, HELDOUT_ONLY if openqa else choose_calibrate_on())


def choose_calibrate_on() -> str:
    """Where the post-hoc calibrators are fitted: S_V, or every labelled item k-fold, the
    fix for a small S_V that the advice under it offers as one click (multiple choice only;
    app/pages/train/advice.py)."""
    return st.radio(
        "Fit post-hoc calibrators on",
        list(CALIBRATE_ON_WORDS),
        format_func=CALIBRATE_ON_WORDS.get,
        horizontal=True,
        key=CALIBRATE_ON_KEY,
        help=tooltip("k-fold on all labelled items", "TS", "S_V"),
    )


def require_data(choice: DataChoice | None) -> DataChoice:
    """The choice; without S_T and S_V the page stops here: the estimate and the launch need both."""
    if choice is None:
        st.info("Choose a training set S_T and a held-out set S_V: the cost and the launch need both.")
        st.stop()
    return choice
