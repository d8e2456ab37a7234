"""`scoring = auto` (training/scoring_choice.py): the paper's setting (letter answers under
the chat template, the vocab head) when letter accuracy on S_V is above chance by its
interval, cloze otherwise; a given rule is kept; the job records the choice and rewrites
config.json with the resolved rule."""

from __future__ import annotations

import pytest

from calm_core.training.config import TrainConfig
from calm_core.training.scoring_choice import decide, resolve_scoring


def test_above_chance_by_its_interval_takes_the_paper_setting() -> None:
    choice = decide([True] * 36 + [False] * 4, [4] * 40)
    assert (choice.rule, choice.chat_template) == ("letter", True)
    assert choice.accuracy == pytest.approx(0.9) and choice.accuracy_low > 0.25 and choice.chance == 0.25
    assert "paper's setting" in choice.reason and "36 of 40" in choice.reason


def test_at_chance_falls_back_to_cloze_and_says_why() -> None:
    choice = decide([True] * 11 + [False] * 29, [4] * 40)  # 0.275: above 1/4, not by its interval
    assert (choice.rule, choice.chat_template) == ("cloze", False)
    assert "not above chance" in choice.reason and choice.accuracy_low < 0.25


def test_chance_is_the_mean_of_one_over_k() -> None:
    choice = decide([True, False, True, False], [2, 2, 4, 4])
    assert choice.chance == pytest.approx(0.375)


def test_the_default_is_auto_and_its_scope_waits_for_the_rule() -> None:
    cfg = TrainConfig()
    assert cfg.scoring == "auto" and cfg.effective_scope == "auto"
    given = TrainConfig(scoring="letter")
    assert given.effective_scope == "vocab"  # the paper's head where letters are given


def test_a_given_rule_is_kept_without_measuring() -> None:
    cfg = TrainConfig(scoring="cloze")
    same, choice = resolve_scoring(cfg, lm=None, heldout=[])
    assert same is cfg and choice.reason.startswith("set") and choice.measured_on == 0


def test_auto_measures_on_s_v_and_resolves(tiny_lm) -> None:
    from calm_core.scoring.evaluate import load_mc_items

    heldout = load_mc_items("builtin/capitals/validation", limit=12)
    cfg, choice = resolve_scoring(TrainConfig(), tiny_lm, heldout)
    assert choice.measured_on == 12 and cfg.scoring == choice.rule and cfg.scoring != "auto"
    assert cfg.effective_scope == ("vocab" if cfg.scoring == "letter" else "scalar")
