"""The BOME charts' health lines (calm_core/training/bilevel_health.py): each declared rule
on metric rows made by hand, healthy and to watch."""

from __future__ import annotations

import math

import pytest

from calm_core.training.bilevel_health import (
    HEALTHY,
    RULES,
    TOO_EARLY,
    WINDOW,
    bome_health,
    health_summary,
    judge,
)

ETA = 0.5


def rows(n: int = 20, **overrides: list[float] | float) -> list[dict[str, float]]:
    """n steps of a working BOME log (the healthy values of a real tiny run), with any key
    replaced by a constant or a list of per-step values."""
    healthy = {
        "q": 0.6,
        "lambda": 0.8,
        "inner_drop_frac": 0.3,
        "coupling_ratio": 5.0,
        "cos_fq": 0.2,
        "descent_ratio": 1.0,
    }
    out = []
    for i in range(n):
        record: dict[str, float] = {"step": i + 1, "train/lower_loss": 1.0}
        for key, value in {**healthy, **overrides}.items():
            record[f"bome/{key}"] = value[i] if isinstance(value, list) else value
        out.append(record)
    return out


def test_a_working_log_is_healthy_on_every_chart() -> None:
    health = bome_health(rows(), ETA)
    assert list(health) == list(RULES)  # one line per chart, in the charts' order
    assert all(h.ok and h.line == HEALTHY for h in health.values())
    assert health_summary(health) == f"all {len(RULES)} healthy"


@pytest.mark.parametrize(
    "key, values, words",
    [
        ("q", [0.2] * 10 + [0.9] * 10, "q is rising"),
        ("lambda", [ETA * 1.01] * 20, "lambda sits at eta"),
        ("inner_drop_frac", 0.004, "inner solve removes 0.4% of the loss"),
        ("coupling_ratio", 0.002, "the head ignores the training fit"),
        ("cos_fq", -0.8, "pull against each other"),
        ("descent_ratio", [1.0] * 19 + [0.5], "descent ratio 0.50 < 1"),
    ],
)
def test_each_rule_says_what_to_watch(key: str, values, words: str) -> None:
    health = bome_health(rows(**{key: values}), ETA)
    assert not health[key].ok and health[key].line.startswith("watch: ") and words in health[key].line
    assert all(h.ok for k, h in health.items() if k != key)  # the others stay healthy
    assert health_summary(health) == f"1 of {len(RULES)} to watch: {RULES[key].title}"


def test_rules_read_only_the_last_window() -> None:
    """A bad stretch early in the run, then WINDOW good steps: healthy now."""
    values = [0.001] * 15 + [0.3] * WINDOW
    assert judge("inner_drop_frac", values, ETA).ok
    assert not judge("inner_drop_frac", [0.3] * 15 + [0.001] * WINDOW, ETA).ok
    # lambda near eta on some recent steps but not all: adapting
    assert judge("lambda", [ETA] * (WINDOW - 1) + [2.0], ETA).ok
    assert judge("lambda", [ETA] * WINDOW, None).ok  # no eta recorded: no judgement on it


def test_too_few_steps_and_not_a_number() -> None:
    assert judge("q", [0.5, 0.4], ETA).line == f"{TOO_EARLY} (2 steps logged)"
    assert health_summary(bome_health(rows(2), ETA)) == TOO_EARLY
    diverged = judge("q", [0.5] * 5 + [math.nan], ETA)
    assert not diverged.ok and "not a number" in diverged.line


def test_a_log_without_bome_has_no_charts() -> None:
    assert bome_health([{"step": 1, "train/lower_loss": 1.0}], ETA) == {}


def test_every_rule_is_said_in_words() -> None:
    assert all(rule.rule.startswith("watch when") and str(WINDOW) in rule.rule for rule in RULES.values())


def test_docs_state_each_rule_as_declared() -> None:
    """docs/bilevel.md's table says each rule in the words RULES holds, so the two cannot drift."""
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "docs" / "bilevel.md").read_text(encoding="utf-8")
    assert all(f"| {rule.title} (`bome/{rule.key}`) | {rule.rule}" in text for rule in RULES.values())
