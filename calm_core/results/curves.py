"""A run's curves for display, from metrics.jsonl: a metric over steps, the evaluation sets
logged, alpha over time, the BOME step's health, and the entropy ceiling the Monitor draws.

    steps, values = series(run.read_metrics(), "train/lower_loss")
    steps, taus = alpha_vectors(run.read_metrics(), "tau")     # (S,), (S, K)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from calm_core.data.catalog import load_dataset
from calm_core.glossary import define, lookup
from calm_core.runs.rundir import RunDir
from calm_core.training.bilevel_health import coupling_inert

EVAL_PREFIX = "eval/"


def series(records: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one logged scalar, skipping steps that did not log it."""
    pairs = [(r["step"], float(r[key])) for r in records if isinstance(r.get(key), (int, float))]
    return [s for s, _ in pairs], [v for _, v in pairs]


def eval_sets(records: list[dict[str, Any]]) -> list[str]:
    """Names of the sets evaluated during training (`heldout` is S_V), in logged order."""
    names: dict[str, None] = {}
    for record in records:
        for key in record:
            if key.startswith(EVAL_PREFIX):
                names[key[len(EVAL_PREFIX) :].rsplit("/", 1)[0]] = None
    return list(names)


def alpha_vectors(records: list[dict[str, Any]], name: str = "tau") -> tuple[list[int], np.ndarray]:
    """Steps and the logged alpha vector (`alpha/tau` or `alpha/l`) at each: (S,), (S, K).
    Empty when the run logs no vector (vocab scope logs summary statistics only)."""
    rows = [(r["step"], r[f"alpha/{name}"]) for r in records if isinstance(r.get(f"alpha/{name}"), list)]
    if not rows:
        return [], np.zeros((0, 0))
    return [s for s, _ in rows], np.array([v for _, v in rows], dtype=np.float64)


# The BOME diagnostics a page, the report or `calm runs` shows, in the order shown. What each
# means is its glossary entry (calm_core/glossary.py), in plain words, as on the Monitor.
BOME_KEYS: tuple[str, ...] = ("q", "lambda", "inner_drop_frac", "coupling_ratio", "cos_fq", "descent_ratio")


BOME_MEANINGS: dict[str, str] = {key: define(key) for key in BOME_KEYS}


def bome_name(key: str) -> str:
    """A diagnostic's name as the glossary heads it ("coupling ratio" for `coupling_ratio`)."""
    term = lookup(key)
    return term.name if term is not None else key


def bome_summary(records: list[dict[str, Any]], eta: float | None, last: int = 10) -> dict[str, Any]:
    """Means of the BOME diagnostics over the last `last` logged steps, and whether the
    run's coupling was inert throughout (bilevel_health.coupling_inert); {} without a BOME log."""
    steps = [r for r in records if "bome/q" in r]
    if not steps:
        return {}
    tail = steps[-last:]
    out: dict[str, Any] = {}
    for key in BOME_KEYS:
        values = [float(r[f"bome/{key}"]) for r in tail if isinstance(r.get(f"bome/{key}"), (int, float))]
        if values:
            out[key] = sum(values) / len(values)
    out["inert"] = eta is not None and coupling_inert(steps, eta)
    out["steps"] = len(steps)
    return out


def bome_line(summary: dict[str, Any]) -> str:
    """`calm runs`' BOME column: the flag, or the inner drop, lambda and the coupling ratio."""
    if not summary:
        return ""
    if summary.get("inert"):
        return "BOME coupling INERT (inner drop ~ 0, lambda ~ eta)"
    parts = [
        f"{name} {summary[key]:.3g}"
        for key, name in (("inner_drop_frac", "drop"), ("lambda", "lambda"), ("coupling_ratio", "ratio"))
        if key in summary
    ]
    return "bome: " + ", ".join(parts)


def uniform_entropy(run: RunDir) -> float | None:
    """The entropy of a uniform forecast over S_V's options, mean ln K over its items: the
    ceiling the Monitor's entropy curve approaches as tau grows (docs/bilevel.md). None for
    an open-answer run (its entropy is per token) or when S_V cannot be read."""
    heldout = run.config.train.heldout_data
    if run.config.train.task != "mcqa" or not heldout:
        return None
    try:
        items = load_dataset(heldout).items
    except Exception:  # a moved or damaged file: the curve is drawn without its ceiling
        return None
    sizes = np.array([len(item.choices) for item in items if len(item.choices) > 1], dtype=np.float64)  # (N,)
    return float(np.log(sizes).mean()) if len(sizes) else None
