"""Training objectives: differentiable option scores equal evaluation scores; losses behave."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from calm_core.data.schema import MCItem
from calm_core.calibration.head import CalibrationHead
from calm_core.training.objectives import negative_entropy, option_cross_entropy, option_entropy, option_logits
from calm_core.scoring.prompts import ScoringConfig
from calm_core.scoring.scorer import Scorer
from tests.numeric import float32_noise


def score_noise(scores: np.ndarray, lm) -> float:
    """Two float32 computations of option scores (sums of log-softmax over the vocabulary)
    agree to the float32 noise of the largest score (tests/numeric.py)."""
    return float32_noise(float(np.abs(scores).max()), lm.model.config.vocab_size)

ITEMS = [
    MCItem("a", "What is the capital of France?", ("Paris", "Lyon", "Marseille", "Nice"), 0),
    MCItem("b", "2 + 2 =", ("4", "5 and a half"), 1),
]


@pytest.mark.parametrize("rule", ["cloze", "cloze_norm", "letter"])
def test_identity_head_scores_equal_evaluation_scores(tiny_lm, rule: str) -> None:
    cfg = ScoringConfig(rule=rule)
    head = CalibrationHead("vocab", size=tiny_lm.model.config.vocab_size)
    with torch.no_grad():
        z = option_logits(tiny_lm.model, tiny_lm.tokenizer, ITEMS, cfg, head).double().numpy()
    expected = Scorer.of(tiny_lm, progress=False).score(ITEMS, cfg).logits
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(finite, np.isfinite(z))
    np.testing.assert_allclose(z[finite], expected[finite], atol=score_noise(expected[finite], tiny_lm))


@pytest.mark.parametrize("scope", ["vocab", "options", "scalar"])
@pytest.mark.parametrize("rule", ["cloze", "letter"])
def test_gradients_reach_the_head_and_stay_finite(tiny_lm, scope: str, rule: str) -> None:
    size = {"vocab": tiny_lm.model.config.vocab_size, "options": 4, "scalar": None}[scope]
    head = CalibrationHead(scope, size=size)
    z = option_logits(tiny_lm.model, tiny_lm.tokenizer, ITEMS, ScoringConfig(rule=rule), head)
    loss = option_cross_entropy(z, torch.tensor([0, 1])) + negative_entropy(z)
    loss.backward()
    grads = [p.grad for p in head.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)
    tiny_lm.model.zero_grad(set_to_none=True)


def test_entropy_ignores_padding_and_matches_hand_values() -> None:
    z = torch.tensor([[0.0, 0.0, -torch.inf], [0.0, 0.0, 0.0]], requires_grad=True)
    h = option_entropy(z)
    torch.testing.assert_close(h, torch.tensor([np.log(2.0), np.log(3.0)], dtype=torch.float32))
    negative_entropy(z).backward()
    assert torch.isfinite(z.grad).all()


def test_cross_entropy_at_gold() -> None:
    z = torch.tensor([[2.0, 0.0, -torch.inf]])
    expected = -torch.log_softmax(torch.tensor([2.0, 0.0]), -1)[1]
    torch.testing.assert_close(option_cross_entropy(z, torch.tensor([1])), expected)


@pytest.mark.parametrize("scope, rule", [("vocab", "cloze"), ("vocab", "letter"), ("options", "cloze"),
                                         ("scalar", "letter")])
def test_trained_head_scores_equal_evaluation_scores(tiny_lm, scope: str, rule: str) -> None:
    """With a non-identity head, training-time scores == `Scorer.score(..., head=head)`."""
    size = {"vocab": tiny_lm.model.config.vocab_size, "options": 4, "scalar": None}[scope]
    head = CalibrationHead(scope, size=size)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in head.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=generator))
        z = option_logits(tiny_lm.model, tiny_lm.tokenizer, ITEMS, ScoringConfig(rule=rule), head).double().numpy()
    plain = Scorer.of(tiny_lm, progress=False).score(ITEMS, ScoringConfig(rule=rule)).logits
    calibrated = Scorer.of(tiny_lm, progress=False).score(ITEMS, ScoringConfig(rule=rule), head=head).logits
    finite = np.isfinite(calibrated)
    np.testing.assert_allclose(calibrated[finite], z[finite], atol=score_noise(calibrated[finite], tiny_lm))
    assert not np.allclose(calibrated[finite], plain[finite], atol=1e-3)  # the head did something


@pytest.mark.parametrize("rule", ["cloze", "letter"])
def test_a_head_acts_where_it_says_in_training_and_evaluation(tiny_lm, rule: str) -> None:
    """The same scalar head acting on tokens or on option scores: training and evaluation
    agree for each. Under `letter` the option positions are the letters, so both places
    give the same option probabilities; under cloze a per-token temperature is not a
    temperature of the summed scores, so they differ."""
    cfg = ScoringConfig(rule=rule)
    probs = {}
    for acts_on in ("tokens", "options"):
        head = CalibrationHead("scalar", acts_on=acts_on)
        with torch.no_grad():
            head.log_temperature.fill_(0.7)
            z = option_logits(tiny_lm.model, tiny_lm.tokenizer, ITEMS, cfg, head).double().numpy()
        scores = Scorer.of(tiny_lm, progress=False).score(ITEMS, cfg, head=head).logits
        finite = np.isfinite(scores)
        np.testing.assert_array_equal(finite, np.isfinite(z))
        np.testing.assert_allclose(z[finite], scores[finite], atol=score_noise(scores[finite], tiny_lm))
        probs[acts_on] = torch.softmax(torch.from_numpy(scores), -1).numpy()
    assert np.allclose(probs["tokens"], probs["options"], atol=1e-6) == (rule == "letter")
