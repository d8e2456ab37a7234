"""The Train page's words about its data: the split a Data page sends, the page's opening
sentence, and the one piece of advice on a small S_V, with its fix as one click.

Why a module: the advice is said once, under the choice it concerns (section 2's *Fit
post-hoc calibrators on*); said in more places it would be read as more warnings. And
app/pages/train/train.py stays a short script.

    split = prefilled_split(st.session_state, names)   # the Data page's split, once taken
    choice = choose_data(task, names)                   # app/pages/train/data_choice.py
    intro(top_slot, split, choice)                      # the opening, from what the pickers hold
    heldout_advice(slot, cfg, offer_kfold=True)         # under the calibrate_on radio
"""

from __future__ import annotations

import json
from typing import Any

import streamlit as st

from app.pages.train.data_choice import CALIBRATE_ON_KEY, TASK_KEY, TASKS, DataChoice, SessionState, put
from app.widgets.keys import CALIBRATE_SPLIT
from app.widgets.state import code
from calm_core.calibration.recommend import ALL_LABELLED
from calm_core.data.schema import DataError
from calm_core.data.split_sizes import CHOOSE_HELDOUT, heldout_support
from calm_core.glossary import tooltip
from calm_core.results.support import labelled_counts, support_sentence
from calm_core.training.config import TrainConfig

PREFILLED_KEY = "train_prefilled"  # the split taken from the Data page, kept for the page's words
OUT_OF_DOMAIN = ["arc/easy_test", "builtin/capitals/test", "builtin/units/test"]  # a transfer check, first found
DEFAULT_INTRO = (
    "Fine-tune the model so that it is as sure as it is right. The defaults are a good first run: **CALM** on "
    "the built-in chemical-symbols questions, checked on two other domains, a few minutes on a laptop. "
)
# What the Data page says of a small S_V it cannot split better: the fix is here, as one click.
TRAIN_FIX = (
    "Its S_V is small: **Calibrate this dataset** opens Train, which says what S_V supports and offers the "
    "fix, k-fold on all labelled items, in one click."
)
CLOSING = (
    "**Launch training** starts a background job (closing the tab does not stop it); the **Monitor** page "
    "says whether it is going well and, at the end, which model to use."
)


def take_split(state: SessionState, names: list[str]) -> dict[str, Any] | None:
    """Prefill S_T, S_V and the evaluation sets from a split made on the Data page
    (`calibrate_split`: its train / heldout / test parts), plus one out-of-domain set to
    show transfer. Applied once, by setting the pickers' kept values, so edits stick."""
    split: dict[str, Any] | None = state.pop(CALIBRATE_SPLIT, None)
    if not split or not all(split.get(part) in names for part in ("train", "heldout", "test")):
        return None
    outside = next((n for n in OUT_OF_DOMAIN if n in names and n not in split.values()), None)
    put(state, TASK_KEY, next(iter(TASKS)))
    put(state, "train_data", split["train"])
    put(state, "train_heldout", split["heldout"])
    put(state, "train_evals", [split["test"]] + ([outside] if outside else []))
    return split


def prefilled_split(state: SessionState, names: list[str]) -> dict[str, Any] | None:
    """The split this session took from the Data page (taking a newly sent one first), or None."""
    taken = take_split(state, names)
    if taken:
        state[PREFILLED_KEY] = taken
    prefilled: dict[str, Any] | None = state.get(PREFILLED_KEY)
    return prefilled


def split_in_use(split: dict[str, Any] | None, choice: DataChoice | None) -> dict[str, Any] | None:
    """The split, while the pickers still hold its three parts (S_T, S_V and its test part
    among the evaluation sets); None once the person has chosen other data, so the page
    never describes a split that Launch would not send."""
    if not split or not choice or (choice.train, choice.heldout) != (split["train"], split["heldout"]):
        return None
    return split if split["test"] in choice.evals else None


def intro(slot: Any, split: dict[str, Any] | None, choice: DataChoice | None) -> None:
    """The page's opening into `slot` (drawn above the pickers), from the pickers' values:
    the user's split with its sizes while the pickers hold it, else the default run."""
    in_use = split_in_use(split, choice)
    slot.markdown(intro_text(in_use), help=tooltip("CALM", "S_T", "S_V", "evaluation set"))
    if in_use:
        slot.info(banner_text(in_use))


def intro_text(split: dict[str, Any] | None) -> str:
    """The page's opening paragraph: the user's own split (one the pickers hold), else the
    default run's description (the page's defaults are then what it describes)."""
    if not split:
        return DEFAULT_INTRO + CLOSING
    source = split.get("source", split["train"])
    return (
        f"Fine-tune the model on your own questions, {code(source)}, so that it is as sure as it is right: its "
        "training, held-out and test parts are filled in below, with one out-of-domain set to show transfer. " + CLOSING
    )


def banner_text(split: dict[str, Any]) -> str:
    """Where the pickers' values came from, with the parts' sizes (what S_V supports is said
    once, under the calibrate_on choice: `heldout_advice`)."""
    sizes = split.get("sizes") or {}
    counts = f" ({sizes['train']} / {sizes['heldout']} / {sizes['test']} items)" if len(sizes) == 3 else ""
    return (
        f"Calibrating {code(split.get('source', split['train']))}: S_T, S_V and the test part come from its split"
        f"{counts}; one out-of-domain set shows transfer. The time estimate is in section 4, **Cost and launch**."
    )


@st.cache_data(ttl=60, show_spinner=False)
def _labelled_counts(config_json: str) -> tuple[int, int]:
    """(S_V items, S_T items), kept a minute: counting reads both datasets."""
    return labelled_counts(TrainConfig.from_dict(json.loads(config_json)))


def _use_kfold() -> None:
    """The one click: fit the post-hoc calibrators k-fold on all labelled items."""
    st.session_state[CALIBRATE_ON_KEY] = ALL_LABELLED


def heldout_advice(slot: Any, cfg: TrainConfig, offer_kfold: bool) -> None:
    """What S_V supports, said once into `slot` (under the calibrate_on choice) in the words
    `calm train` prints (results/support.py): a caption when S_V can choose between methods;
    a warning when it cannot, with k-fold on all labelled items as one click where the task
    offers it (`offer_kfold`); a note once k-fold is chosen."""
    try:
        heldout, train = _labelled_counts(json.dumps(cfg.to_dict(), sort_keys=True))
    except (DataError, ValueError, OSError):  # the pickers above already say why
        return
    if heldout >= CHOOSE_HELDOUT:
        slot.caption(support_sentence(cfg, (heldout, train)))
    elif cfg.calibrate_on == ALL_LABELLED:
        slot.info(support_sentence(cfg, (heldout, train)), icon=":material/rule:")
    elif not offer_kfold:
        slot.warning(support_sentence(cfg, (heldout, train)), icon=":material/rule:")
    else:
        slot.warning(heldout_support(heldout, heldout + train), icon=":material/rule:")
        slot.button(
            f"Use k-fold on all {heldout + train} labelled items",
            key="train_use_kfold",
            on_click=_use_kfold,
            help="Sets *Fit post-hoc calibrators on* above to all labelled items, k-fold (S_T + S_V).",
        )
