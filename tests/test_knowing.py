""""This model does not know this data" (issue 49).

The issue's model was at 20% on 4 options, and the recommended temperature scaling (T = 37)
was near-uniform on ARC-Easy, recommended with no caveat. Here results records written by
hand are read back: where the model as it is is not above chance (1/K) by its 90% interval,
the recommendation sentence says so (Compare, the Monitor, the report and `calm train`
show it); where the recommended variant is near-uniform, the sentence and the model card
carry that word. Neither is said where it does not hold.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from calm_core.results import advice
from calm_core.results.knowing import chance_note, near_uniform_note, not_above_chance
from tests.test_verdict import _results, results

SET = "builtin/capitals/test"


def _base_at(data: dict[str, Any], acc: float, lo: float, hi: float) -> dict[str, Any]:
    """`data` with its base row answering `acc` right, 90% interval [lo, hi], on 4 options."""
    base = next(r for r in data["results"] if r["variant"] == "base")
    base.update(acc=acc, chance=0.25)
    base["ci90"]["acc"] = [lo, hi]
    return data


def test_accuracy_not_above_chance_by_its_interval_is_said_in_the_sentence() -> None:
    unknown = _results(_base_at(results(recommended="ts"), 0.20, 0.10, 0.32))
    expected = (
        f"This model does not know this data: on `{SET}`, the model as it is answers 0.200 [0.100, 0.320] right, "
        "not above chance (1/K = 0.250) by its 90% interval."
    )
    assert chance_note(unknown) is not None and chance_note(unknown).startswith(expected)
    sentence = advice.recommendation_sentence(unknown)
    assert sentence is not None and expected in sentence
    line = advice.recommendation_line(unknown, "calm")
    assert line is not None and expected in line  # what Compare shows under "Which model to use"


def test_an_interval_above_chance_says_nothing() -> None:
    known = _results(_base_at(results(recommended="ts"), 0.40, 0.27, 0.53))  # lower end above 1/K
    assert chance_note(known) is None
    assert "does not know" not in (advice.recommendation_sentence(known) or "")
    assert not_above_chance({"acc": 0.4, "chance": 0.25, "ci90": {"acc": [0.25, 0.55]}})  # touching 1/K: not above
    assert not not_above_chance({"acc": 0.4, "chance": 0.25})  # no interval: the accuracy itself


def _near_uniform_ts(data: dict[str, Any]) -> dict[str, Any]:
    """TS recommended, its mean confidence 0.27 on 4 options where the model is right half the time."""
    ts = next(r for r in data["results"] if r["variant"] == "ts")
    ts["confidence"] = 0.27
    return data


def test_a_near_uniform_recommended_variant_carries_the_word_in_its_sentence() -> None:
    flat = _results(_near_uniform_ts(results(recommended="ts")))
    note = near_uniform_note(flat)
    assert note is not None and note.startswith(f"Temperature scaling is near-uniform on `{SET}`: ")
    sentence = advice.recommendation_sentence(flat)
    assert sentence is not None and note in sentence
    assert near_uniform_note(_results(_near_uniform_ts(results(recommended="calm")))) is None  # not the recommended
    assert near_uniform_note(_results(results(recommended="ts"))) is None


def test_the_model_card_carries_the_word(tmp_path: Path) -> None:
    from calm_core.export.model_card import _recommendation_section
    from calm_core.io import atomic_write_json
    from calm_core.runs.layout import RESULTS
    from tests.test_verdict import finished_run

    run = finished_run(tmp_path, recommended="ts")
    data = _base_at(_near_uniform_ts(results(recommended="ts")), 0.20, 0.10, 0.32)
    atomic_write_json(run.path / RESULTS, data)
    card = _recommendation_section(run)
    assert "near-uniform" in card and "This model does not know this data" in card


def test_a_set_name_is_shown_as_written() -> None:
    """A set's name is the user's text and the sentence is Markdown on the pages and the card."""
    data = _base_at(results(recommended="ts"), 0.20, 0.10, 0.32)
    for row in data["results"]:
        row["dataset"] = "my_*set*`$x$"
    note = chance_note(_results(data))
    assert note is not None and "on `my_*set*'$x$`, the model" in note
