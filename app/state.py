"""Process-wide caches for the pages: a model is loaded once per process, and a
dataset is scored once per (model, dataset, rule, limit)."""

from __future__ import annotations

import streamlit as st

from calm_core.scoring.evaluate import score_dataset
from calm_core.scoring.models import LoadedModel, load_model
from calm_core.scoring.options import OptionScores
from calm_core.scoring.prompts import ScoringConfig
from calm_core.workspace.playground import TrainedModel


@st.cache_resource(show_spinner="Loading the model (the first time converts it: about a minute)...")
def get_model(name: str = "embedded") -> LoadedModel:
    return load_model(name)


@st.cache_resource
def _score_store() -> dict[tuple, OptionScores]:
    """Scores shared by every session of this process (scoring is deterministic)."""
    return {}


def get_scores(model_name: str, dataset: str, rule: str, limit: int, seed: int = 0) -> OptionScores:
    """Scores for a page, computed once per process with a progress bar while they run."""
    key = (model_name, dataset, rule, limit, seed)
    store = _score_store()
    if key not in store:
        lm = get_model(model_name)
        bar = st.progress(0.0, text=f"Scoring {dataset} with {model_name} ({rule})...")

        def report(done: int, total: int) -> None:
            bar.progress(done / total, text=f"Scoring {dataset}: {done}/{total} questions")

        store[key] = score_dataset(lm, dataset, ScoringConfig(rule=rule), limit=limit, seed=seed, progress=report)
        bar.empty()
    return store[key]


def code(text: object) -> str:
    """User-given text (a model path, a dataset name) as inline code in Markdown: inside
    backticks nothing renders, so only the backticks themselves need taking out."""
    return "`" + str(text).replace("`", "'").replace("\n", " ") + "`"


def describe_error(exc: Exception) -> str:
    """One readable line for the page instead of a stack trace. The project's own errors
    (bad input, a damaged file) already say what and what to do: shown as they are; any
    other exception is a defect, and its class name helps whoever reports it."""
    from calm_core.data.schema import DataError

    if isinstance(exc, (DataError, ValueError, FileNotFoundError)):
        return " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    return f"{type(exc).__name__}: {exc}"


@st.cache_resource(show_spinner="Loading the run's adapter and calibration head...", max_entries=4)
def get_trained(run_id: str) -> TrainedModel:
    """A finished run's model, once per process (a fresh base model under its adapter)."""
    from calm_core.runs.rundir import RunDir
    from calm_core.workspace.playground import load_trained

    return load_trained(RunDir.at(run_id))
