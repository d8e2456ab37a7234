"""The studio's words on a page: variants named in full and terms defined where they are
shown, from one place each (calm_core.glossary for definitions, results.verdict's
`variant_label` for names), so every page says and defines a thing the same way."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pandas as pd
import streamlit as st

from calm_core.calibration.metrics.columns import help_texts
from calm_core.glossary import define, lookup
from calm_core.results.verdict import variant_label
from calm_core.training.methods import METHODS

VARIANT = "variant"  # the key column of every results table


def variant_names(variants: Iterable[str]) -> dict[str, str]:
    """variant key -> the name a person reads ("ts" -> "temperature scaling")."""
    return {v: variant_label(v) for v in dict.fromkeys(variants)}


def label_of(labels: Mapping[str, str]) -> Callable[[str], str]:
    """A widget's `format_func` that shows each option under its label in `labels`."""
    return lambda option: labels.get(option, option)


def method_name(method: str) -> str:
    """A training method as a person reads it, with the name its flag takes: its LABEL
    (training/methods/<method>.py) then the name, "CALM (calm)"; the name alone without one."""
    label = METHODS[method].LABEL if method in METHODS else None
    return f"{label} ({method})" if label and label != method else method


def variant_help(variants: Iterable[str]) -> str:
    """A tooltip defining each variant shown, under its full name and its key."""
    lines = []
    for key, name in variant_names(variants).items():
        term = lookup(key)
        lines.append(f"**{name}** (`{key}`): {term.definition if term else 'a variant of this run'}")
    return "\n\n".join(lines)


def named(frame: pd.DataFrame, column: str = VARIANT) -> pd.DataFrame:
    """The table with its variant keys replaced by their full names (the CSV keeps the keys)."""
    if column not in frame.columns:
        return frame
    out = frame.copy()
    out[column] = [variant_label(str(v)) for v in out[column]]
    return out


def column_help(columns: Sequence[str], variants: Iterable[str] = ()) -> dict[str, Any]:
    """Header tooltips of a results table: each metric's definition and direction, the
    variant column's list of the variants it names."""
    config: dict[str, Any] = {
        name: st.column_config.Column(help=text) for name, text in help_texts(list(columns)).items()
    }
    shown = list(variants)
    if VARIANT in columns and shown:
        config[VARIANT] = st.column_config.Column(help=variant_help(shown))
    return config


def helps(*words: str) -> str | None:
    """A tooltip defining those of `words` the glossary has (None when it has none): for
    names a run brings (its method, its scope), where a method added by a user may have no
    entry yet and the page must still draw (tests/test_glossary.py asks for the entry)."""
    known = [w for w in dict.fromkeys(words) if lookup(w) is not None]
    return "\n\n".join(f"**{w}**: {define(w)}" for w in known) or None


def explained(text: str, *terms: str) -> None:
    """A caption whose tooltip defines `terms`: the definitions where the words appear,
    without a paragraph of them on the page."""
    st.caption(text, help="\n\n".join(f"**{t}**: {define(t)}" for t in dict.fromkeys(terms)) or None)
