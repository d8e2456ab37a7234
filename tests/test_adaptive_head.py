"""The adaptive CALM head: identity at the start, never re-ranks, the same numbers in
training and evaluation, saved and loaded whole, and the same temperatures as a post-hoc
ATS fit it is built from."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from calm_core.calibration.adaptive_head import AdaptiveHead, bias_for
from calm_core.calibration.head import CalibrationHead, check_scope_fits, make_head
from calm_core.calibration.posthoc.ats import AdaptiveTemperature
from calm_core.data.schema import MCItem
from calm_core.scoring.scorer import Capture, Scorer
from calm_core.scoring.prompts import ScoringConfig
from calm_core.training.objectives import option_logits
from tests.numeric import float32_noise

ITEMS = [
    MCItem("a", "What is the capital of France?", ("Paris", "Lyon", "Marseille", "Nice"), 0),
    MCItem("b", "2 + 2 =", ("4", "5 and a half"), 1),
    MCItem("c", "Which one is a fish?", ("trout", "crow", "cow"), 0),
]


def _fitted_head(width: int, seed: int = 0, components: int = 3) -> AdaptiveHead:
    """A head with a fitted projection and non-zero weights: temperatures differ by row."""
    gen = torch.Generator().manual_seed(seed)
    head = AdaptiveHead(width, components)
    head.fit_projection(torch.randn(40, width, generator=gen, dtype=torch.float64))
    with torch.no_grad():
        head.weights.copy_(torch.randn(components, generator=gen))
        head.bias.fill_(0.3)
    return head


def test_identity_at_the_start() -> None:
    head = AdaptiveHead(16, 4)
    h = torch.randn(5, 16)
    torch.testing.assert_close(head.temperatures(h), torch.ones(5))
    z = torch.tensor([[1.0, -2.0, float("-inf")], [0.5, 0.25, 3.0]] * 2 + [[0.0, 1.0, 2.0]])
    out = head.on_options(z, features=h)
    torch.testing.assert_close(out, z)  # -inf padding stays -inf
    assert bias_for(1.0) == pytest.approx(np.log(np.expm1(1.0 - head.floor)))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(2, 6), pad=st.integers(0, 2))
def test_never_changes_a_questions_ranking(seed: int, k: int, pad: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    head = _fitted_head(8, seed)
    z = torch.randn(6, k, generator=gen, dtype=torch.float64) * 5
    z[:, k - pad :] = float("-inf") if pad else z[:, k - pad :]
    out = head.on_options(z, features=torch.randn(6, 8, generator=gen))
    assert torch.equal(out.argmax(-1), z.argmax(-1))
    assert torch.equal(torch.isneginf(out), torch.isneginf(z))
    finite = torch.isfinite(z)
    assert torch.equal(out.argsort(-1)[finite.all(-1)], z.argsort(-1)[finite.all(-1)])


def test_temperatures_differ_by_question_and_need_the_states() -> None:
    head = _fitted_head(8)
    tau = head.temperatures(torch.randn(10, 8))
    assert tau.min() > head.floor and tau.std() > 1e-3
    with pytest.raises(ValueError, match="hidden states"):
        head.on_options(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="one state per row"):
        head.on_options(torch.zeros(2, 3), features=torch.zeros(3, 8))
    with pytest.raises(ValueError, match=r"shape \(N, 8\)"):
        head.fit_projection(np.zeros((10, 7)))


def test_saved_and_loaded_whole_through_the_one_loader(tmp_path) -> None:
    head = _fitted_head(8)
    head.save(tmp_path)
    loaded = CalibrationHead.load(tmp_path)  # dispatches on the scope in the file
    assert isinstance(loaded, AdaptiveHead)
    for name, tensor in head.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], tensor)
    h = torch.randn(4, 8)
    torch.testing.assert_close(loaded.temperatures(h), head.temperatures(h))


def test_scope_fits_cloze_and_letter_not_open_answers() -> None:
    for rule in ("cloze", "cloze_norm", "letter"):
        check_scope_fits("adaptive", rule)
    with pytest.raises(ValueError, match="adaptive"):
        check_scope_fits("adaptive", "cloze", task="openqa")
    assert isinstance(make_head("adaptive", size=None, width=8), AdaptiveHead)
    with pytest.raises(ValueError, match="make_head"):
        CalibrationHead("adaptive")


def test_the_same_temperatures_as_the_ats_fit_it_comes_from() -> None:
    rng = np.random.default_rng(0)
    h = rng.normal(size=(60, 12))
    tau_true = np.log1p(np.exp(0.8 * h[:, 0])) + 0.3
    z = rng.normal(size=(60, 4)) * 4
    gold = np.array([rng.choice(4, p=np.exp(r - r.max()) / np.exp(r - r.max()).sum()) for r in z / tau_true[:, None]])
    ats = AdaptiveTemperature.fit(z, gold, h)
    assert ats.weights_, "the feature carries the temperature here: cross-fitting should read it"
    head = AdaptiveHead.from_ats(ats)
    ours = head.temperatures(torch.from_numpy(h)).detach().double().numpy()
    np.testing.assert_allclose(ours, ats.temperatures(h), rtol=1e-5)


@pytest.mark.parametrize("rule", ["cloze", "letter"])
def test_training_scores_equal_evaluation_scores(tiny_lm, rule: str) -> None:
    """The training objective reads h from its own forward pass; `Scorer.score` with the
    head reads it from the scoring pass: the same calibrated scores."""
    cfg = ScoringConfig(rule=rule)
    width = tiny_lm.model.config.hidden_size
    states = Scorer.of(tiny_lm, progress=False).score(ITEMS, cfg, capture=Capture.FEATURES).features
    head = AdaptiveHead(width, 2)
    head.fit_projection(np.concatenate([states, states + np.random.default_rng(0).normal(size=states.shape)]))
    with torch.no_grad():
        head.weights.copy_(torch.tensor([0.7, -0.4]))
        z = option_logits(tiny_lm.model, tiny_lm.tokenizer, ITEMS, cfg, head).double().numpy()
    expected = Scorer.of(tiny_lm, progress=False).score(ITEMS, cfg, head=head).logits
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(finite, np.isfinite(z))
    noise = float32_noise(float(np.abs(expected[finite]).max()), tiny_lm.model.config.vocab_size)
    np.testing.assert_allclose(z[finite], expected[finite], atol=10 * noise)
    plain = Scorer.of(tiny_lm, progress=False).score(ITEMS, cfg).logits
    assert not np.allclose(plain[finite], expected[finite])  # the head did act
    assert (plain.argmax(-1) == expected.argmax(-1)).all()


def test_gradients_reach_w_and_b_not_theta_through_h(tiny_lm) -> None:
    cfg = ScoringConfig(rule="cloze")
    head = _fitted_head(tiny_lm.model.config.hidden_size, components=2)
    z = option_logits(tiny_lm.model, tiny_lm.tokenizer, ITEMS, cfg, head)
    loss = torch.nn.functional.cross_entropy(z, torch.tensor([it.answer for it in ITEMS]))
    weights_grad, bias_grad = torch.autograd.grad(loss, [head.weights, head.bias], retain_graph=True)
    assert torch.isfinite(weights_grad).all() and weights_grad.abs().sum() > 0 and bias_grad.abs().sum() > 0


# ----------------------------------------------------------------------------- l(h) under letter scoring


def _shifting_head(width: int = 8, options: int = 4, seed: int = 0) -> AdaptiveHead:
    """A fitted head with l(h) = U x(h) + c set to non-zero values."""
    gen = torch.Generator().manual_seed(seed)
    head = AdaptiveHead(width, 3, options=options)
    head.fit_projection(torch.randn(40, width, generator=gen, dtype=torch.float64))
    with torch.no_grad():
        head.weights.copy_(torch.randn(3, generator=gen))
        head.shift_weights.copy_(torch.randn(options, 3, generator=gen))
        head.shift_bias.copy_(torch.randn(options, generator=gen))
    return head


def test_shifts_start_at_zero_and_only_where_the_rule_allows_them() -> None:
    from calm_core.calibration.head import shifts_allowed

    assert shifts_allowed("letter", "mcqa") and not shifts_allowed("cloze", "mcqa")
    assert not shifts_allowed("cloze_norm", "mcqa")
    head = make_head("adaptive", size=None, width=16, shifts=4)
    assert head.options == 4 and make_head("adaptive", size=None, width=16).options == 0
    z = torch.tensor([[1.0, -2.0, 0.5, float("-inf")], [0.5, 0.25, 3.0, 1.0]])
    torch.testing.assert_close(head.on_options(z, features=torch.randn(2, 16)), z)  # the identity at the start


def test_shifts_are_per_question_and_keep_padding() -> None:
    """l(h) = U x(h) + c: each question its own shift per position, added after the
    temperature; absent options stay -inf; positions past the head's get no shift."""
    head = _shifting_head()
    h = torch.randn(3, 8)
    z = torch.tensor([[1.0, 0.0, -1.0, float("-inf")], [0.0, 0.0, 0.0, 0.0], [2.0, 1.0, 0.0, -1.0]])
    out = head.on_options(z, features=h)
    expected = z / head.temperatures(h)[:, None] + head.shifts(h, 4)
    finite = torch.isfinite(z)
    torch.testing.assert_close(out[finite], expected[finite])
    assert torch.isneginf(out[0, 3])
    assert not torch.allclose(head.shifts(h, 4)[0], head.shifts(h, 4)[1])  # read from each question's state
    wide = head.shifts(h, 6)
    assert wide.shape == (3, 6) and torch.equal(wide[:, 4:], torch.zeros(3, 2))
    flat = head.on_options(torch.zeros(3, 4), features=h)  # equal scores: the shift alone ranks them
    assert torch.equal(flat.argmax(-1), head.shifts(h, 4).argmax(-1))


def test_shifts_get_gradients_and_survive_save_and_load(tmp_path) -> None:
    head = _shifting_head()
    h = torch.randn(5, 8)
    z = torch.randn(5, 4)
    loss = torch.nn.functional.cross_entropy(head.on_options(z, features=h), torch.tensor([0, 1, 2, 3, 0]))
    loss.backward()
    assert head.shift_weights.grad is not None and head.shift_weights.grad.abs().sum() > 0
    assert head.shift_bias.grad.abs().sum() > 0
    head.save(tmp_path)
    loaded = CalibrationHead.load(tmp_path)
    assert loaded.options == 4
    torch.testing.assert_close(loaded.on_options(z, features=h), head.on_options(z, features=h))
