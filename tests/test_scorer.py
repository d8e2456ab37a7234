"""The scorer object (calm_core/scoring/scorer.py): the same numbers as the entry points
it replaces, to the last bit, for each rule, with and without a head and a capture."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from calm_core.calibration.head import make_head
from calm_core.calibration.head_base import Head
from calm_core.data.schema import MCItem
from calm_core.scoring.options import score_items
from calm_core.scoring.prompts import ScoringConfig
from calm_core.scoring.scorer import Capture, Scorer

ITEMS = [
    MCItem("a", "What is the capital of France?", ("Paris", "Lyon", "Marseille", "Nice"), 0),
    MCItem("b", "2 + 2 =", ("4", "5 and a half"), 1),
    MCItem("c", "Which gas do plants take in?", ("carbon dioxide", "oxygen", "helium"), 0),
]
CASES = [(rule, scope) for rule in ("letter", "cloze") for scope in (None, "scalar", "adaptive")]
CASES += [("letter", "vocab"), ("letter", "options")]  # the scopes only the letter rule fits


def _head(scope: str, lm) -> Head:
    """A head of `scope` with random parameters (not the identity), its projection fitted."""
    width = lm.model.config.hidden_size
    size = {"vocab": lm.model.config.vocab_size, "options": 4, "scalar": None, "adaptive": None}[scope]
    head = make_head(scope, size=size, width=width)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in head.parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=generator))
    if scope == "adaptive":
        head.fit_projection(torch.randn(8, width, generator=generator).numpy())
    return head


@pytest.mark.parametrize("rule, scope", CASES)
def test_the_scorer_equals_score_items_to_the_bit(tiny_lm, rule: str, scope: str | None) -> None:
    cfg = ScoringConfig(rule=rule)
    head = _head(scope, tiny_lm) if scope else None
    before = score_items(tiny_lm, ITEMS, cfg, batch_size=4, progress=False, head=head, features=True)
    after = Scorer.of(tiny_lm, batch_size=4, progress=False).score(ITEMS, cfg, head=head, capture=Capture.FEATURES)
    np.testing.assert_array_equal(after.logits, before.logits)
    np.testing.assert_array_equal(after.features, before.features)
    assert after.model == before.model and after.scoring == before.scoring and after.ids == before.ids
    if head is not None:
        plain = Scorer.of(tiny_lm, progress=False).score(ITEMS, cfg)
        assert not np.allclose(after.logits, plain.logits, atol=1e-3)  # the head did something


@pytest.mark.parametrize("share_prefix", [True, False])
def test_option_features_equal_to_the_bit(tiny_lm, share_prefix: bool) -> None:
    cfg = ScoringConfig(rule="cloze")
    before = score_items(tiny_lm, ITEMS, cfg, batch_size=5, progress=False, share_prefix=share_prefix,
                         option_features=True)  # fmt: skip
    scorer = Scorer.of(tiny_lm, batch_size=5, progress=False, share_prefix=share_prefix)
    after = scorer.score(ITEMS, cfg, capture=Capture.OPTION_FEATURES)
    np.testing.assert_array_equal(after.logits, before.logits)
    np.testing.assert_array_equal(after.option_features, before.option_features)
    assert after.features is not None and after.features.shape == (len(ITEMS), tiny_lm.model.config.hidden_size)


def test_option_features_need_a_cloze_rule(tiny_lm) -> None:
    with pytest.raises(ValueError, match="cloze rule for option features"):
        Scorer.of(tiny_lm, progress=False).score(ITEMS, ScoringConfig(rule="letter"), capture=Capture.OPTION_FEATURES)


def test_every_head_is_a_head(tiny_lm) -> None:
    """What the scorer and training type a head by: each scope's class has its names."""
    for scope in ("scalar", "options", "vocab", "adaptive"):
        assert isinstance(_head(scope, tiny_lm), Head), scope
    assert not isinstance(torch.nn.Linear(2, 2), Head)
