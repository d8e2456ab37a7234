"""Process-wide caches for the pages: a model is loaded once per process, and a
dataset is scored once per (model, dataset, rule, limit), kept on disk across restarts."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from calm_core.data.schema import DataError, MCItem
from calm_core.results.playground import TrainedModel, load_trained
from calm_core.runs.rundir import RunDir
from calm_core.scoring.models import LoadedModel, load_model, named_model, named_model_dir
from calm_core.scoring.options import OptionScores
from calm_core.scoring.score_cache import Quiz, cached_scores, quiz_items, score_quiz


@st.cache_resource(show_spinner="Loading the model (the first time converts it: about a minute)...")
def get_model(name: str = "embedded") -> LoadedModel:
    return load_model(name)


@st.cache_resource
def _score_store() -> dict[tuple[str, str, str, int, int], OptionScores]:
    """Scores shared by every session of this process (scoring is deterministic)."""
    return {}


@st.cache_resource(show_spinner="Preparing the model (the first time converts it: under a minute)...")
def model_dir(name: str = "embedded") -> Path:
    """The directory whose files name the model in the scores' disk cache; a named
    model's first use converts it, its steps shown in a progress bar."""
    return _converted(name) if named_model(name) else Path(name)


def _converted(name: str) -> Path:
    """named_model_dir with its conversion's steps in a bar (shown only while converting)."""
    bar: list[DeltaGenerator] = []

    def step(done: int, total: int, what: str) -> None:
        if not bar:
            bar.append(st.progress(0.0))
        bar[0].progress(done / total, text=f"Converting {name} once ({done}/{total}): {what}")

    try:
        return named_model_dir(name, step=step)
    finally:
        if bar:
            bar[0].empty()


def get_scores(model_name: str, dataset: str, rule: str, limit: int, seed: int = 0) -> OptionScores:
    """Scores for a page: from this process's memory, else from the disk cache that set-up
    fills for Learn's default quiz (calm_core/scoring/score_cache.py), else scored with a
    progress bar and written there for the next start."""
    key = (model_name, dataset, rule, limit, seed)
    store = _score_store()
    if key not in store:
        quiz = Quiz(dataset, rule, limit, seed)
        with st.spinner(f"Reading the questions of {dataset}..."):
            items = quiz_items(quiz)
        store[key], _ = cached_scores(model_dir(model_name), quiz, items, lambda todo: _score(model_name, quiz, todo))
    return store[key]


def _score(model_name: str, quiz: Quiz, items: Sequence[MCItem]) -> OptionScores:
    """The model loaded (a spinner) and the items scored under a progress bar."""
    lm = get_model(model_name)
    bar = st.progress(0.0, text=f"Scoring {quiz.dataset} with {model_name} ({quiz.rule})...")

    def report(done: int, total: int) -> None:
        bar.progress(done / total, text=f"Scoring {quiz.dataset}: {done}/{total} questions")

    try:
        return score_quiz(lm, quiz, items, progress=report)
    finally:
        bar.empty()


def code(text: object) -> str:
    """User-given text (a model path, a dataset name) as inline code in Markdown: inside
    backticks nothing renders, so only the backticks themselves need taking out."""
    return "`" + str(text).replace("`", "'").replace("\n", " ") + "`"


_MARKDOWN_SIGNS = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:=])")


def plain(text: object) -> str:
    """User-given text (a file's question, a rejection's reason) for a Markdown cell of
    st.table, shown as written: every sign Markdown, LaTeX or a Streamlit directive could
    read is escaped, and a line break is a space (None is an empty cell)."""
    if text is None:
        return ""
    return _MARKDOWN_SIGNS.sub(r"\\\1", str(text)).replace("\r", " ").replace("\n", " ")


def describe_error(exc: Exception) -> str:
    """One readable line for the page instead of a stack trace. The project's own errors
    (bad input, a damaged file) already say what and what to do: shown as they are; any
    other exception is a defect, and its class name helps whoever reports it."""
    if isinstance(exc, (DataError, ValueError, FileNotFoundError)):
        return " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    return f"{type(exc).__name__}: {exc}"


@st.cache_resource(show_spinner="Loading the run's adapter and calibration head...", max_entries=4)
def get_trained(run_id: str) -> TrainedModel:
    """A finished run's model, once per process (a fresh base model under its adapter)."""
    return load_trained(RunDir.at(run_id))
