"""CalibrationHead: identity at init, the formula, -inf padding, index rows, save/load,
the transformers LogitsProcessor. Toy tensors only."""

from __future__ import annotations

import math

import pytest
import torch
from safetensors.torch import save_file
from transformers import LogitsProcessor, LogitsProcessorList

from calm_core.calibration.head import (
    SCOPES,
    CalibrationHead,
    acts_on_for,
)
from calm_core.calibration.head_base import HEAD_FILENAME

V, K_MAX = 11, 4
NEG_INF = -math.inf


def _ragged_option_logits() -> torch.Tensor:
    """(3, K_MAX) option logits; item 1 has 3 options, item 2 has 2 (padding = -inf)."""
    torch.manual_seed(0)
    z = torch.randn(3, K_MAX) * 3  # (N, K)
    z[1, 3:] = NEG_INF
    z[2, 2:] = NEG_INF
    return z


def _set(head: CalibrationHead, s: list[float] | float, l: list[float] | None = None) -> CalibrationHead:
    with torch.no_grad():
        head.log_temperature.copy_(torch.as_tensor(s, dtype=torch.float32))
        if l is not None:
            head.shift.copy_(torch.as_tensor(l, dtype=torch.float32))
    return head


def _random_head(scope: str, size: int | None, seed: int = 1, acts_on: str | None = None) -> CalibrationHead:
    torch.manual_seed(seed)
    head = CalibrationHead(scope, size, acts_on)
    with torch.no_grad():
        for p in head.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    return head


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize(("scope", "size", "shape"), [("vocab", V, (2, 3, V)), ("options", K_MAX, (5, K_MAX)),
                                                       ("options", K_MAX, (5, 2)), ("scalar", None, (4, 7))])
def test_identity_at_init(scope: str, size: int | None, shape: tuple[int, ...], dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    z = (torch.randn(shape) * 10).to(dtype)
    assert torch.equal(CalibrationHead(scope, size)(z), z.float() if dtype == torch.bfloat16 else z)


def test_identity_at_init_keeps_ragged_padding() -> None:
    z = _ragged_option_logits()
    out = CalibrationHead("options", K_MAX)(z)
    assert torch.equal(out, z)  # -inf == -inf, so the padding must still be -inf


def test_forward_matches_hand_computation() -> None:
    """Options scope: deviations from the row's mean finite score are scaled, (z - m) / tau + m + l."""
    head = _set(CalibrationHead("options", 3), s=[math.log(2.0), 0.0, math.log(4.0)], l=[1.0, -1.0, 0.5])
    z = torch.tensor([[2.0, 4.0, 9.0], [-2.0, 0.0, NEG_INF]])  # row means 5 and -1
    expected = torch.tensor([[(2 - 5) / 2 + 5 + 1, (4 - 5) / 1 + 5 - 1, (9 - 5) / 4 + 5 + 0.5],
                             [(-2 + 1) / 2 - 1 + 1, (0 + 1) / 1 - 1 - 1, NEG_INF]])
    torch.testing.assert_close(head(z), expected)
    torch.testing.assert_close(head.probs(z), torch.softmax(expected, dim=-1))


def test_scalar_scope_is_one_temperature_and_no_shift() -> None:
    head = _set(CalibrationHead("scalar"), s=[math.log(2.0)])
    assert sum(p.numel() for p in head.parameters()) == 1
    assert head.shift is None
    z = torch.tensor([[2.0, -4.0, 6.0]])  # mean 4/3: centring keeps softmax(z / 2) exactly
    torch.testing.assert_close(head(z), (z - 4 / 3) / 2 + 4 / 3)
    torch.testing.assert_close(head.probs(z), torch.softmax(z / 2, dim=-1))


def test_option_scores_offset_per_item_does_not_change_probabilities() -> None:
    """Summed log-likelihoods are defined up to a per-item constant; the head ignores it."""
    head = _set(CalibrationHead("options", 3), s=[math.log(2.0), 0.0, math.log(4.0)], l=[1.0, -1.0, 0.5])
    z = torch.tensor([[-12.0, -20.0, -31.0], [-2.0, -5.0, NEG_INF]])
    shifted = z + torch.tensor([[-40.0], [7.0]])
    torch.testing.assert_close(head.probs(shifted), head.probs(z))


def test_options_padding_stays_neg_inf_with_finite_gradients() -> None:
    z = _ragged_option_logits()
    head = _random_head("options", K_MAX)
    out = head(z)
    assert torch.equal(torch.isneginf(out), torch.isneginf(z))
    assert torch.all(head.probs(z)[torch.isneginf(z)] == 0)
    torch.nn.functional.cross_entropy(out, torch.tensor([0, 2, 1])).backward()
    assert all(torch.isfinite(p.grad).all() for p in head.parameters())


def test_without_finite_stand_in_the_padding_gradient_is_nan() -> None:
    """Why the head needs torch.where: the plain formula gives nan gradients (0 * inf)."""
    z = _ragged_option_logits()
    s = torch.zeros(K_MAX, requires_grad=True)
    torch.nn.functional.cross_entropy(z / s.exp(), torch.tensor([0, 2, 1])).backward()
    assert torch.isnan(s.grad).any()


@pytest.mark.parametrize("index_shape", ["shared", "per_row"])
def test_vocab_index_equals_gather_after_full_head(index_shape: str) -> None:
    torch.manual_seed(2)
    head, z = _random_head("vocab", V), torch.randn(3, V)  # (B, V)
    ids = torch.tensor([4, 1, 9])  # (n,) answer-token ids
    index = ids if index_shape == "shared" else torch.tensor([[4, 1, 9], [0, 2, 3], [10, 5, 6]])  # (B, n)
    gathered = z.gather(-1, index.expand(3, -1))  # (B, n)
    expected = head(z).gather(-1, index.expand(3, -1))  # (B, n)
    torch.testing.assert_close(head(gathered, index=index), expected)


def test_index_only_for_vocab_scope() -> None:
    with pytest.raises(ValueError, match="vocab scope"):
        CalibrationHead("options", K_MAX)(torch.zeros(2, 2), index=torch.tensor([0, 1]))


@pytest.mark.parametrize(("scope", "size", "shape", "match"), [("vocab", V, (2, V - 1), "vocab size 11"),
                                                               ("options", K_MAX, (2, K_MAX + 1), "at most K_max = 4")])
def test_wrong_last_dim_refused(scope: str, size: int, shape: tuple[int, ...], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        CalibrationHead(scope, size)(torch.zeros(shape))


def test_unknown_scope_lists_valid_scopes() -> None:
    with pytest.raises(ValueError, match=r"Expected `scope` to be one of \['vocab', 'options', 'scalar', 'adaptive'\], but got 'bias'"):
        CalibrationHead("bias", 3)


@pytest.mark.parametrize(("scope", "size"), [("vocab", None), ("options", 0), ("options", True), ("scalar", 5)])
def test_bad_size_refused(scope: str, size: object) -> None:
    with pytest.raises(ValueError, match="Expected `size`"):
        CalibrationHead(scope, size)  # type: ignore[arg-type]


def test_summary_and_rows() -> None:
    head = _set(CalibrationHead("vocab", 4), s=[0.0, math.log(2.0), math.log(0.5), 0.0], l=[0.0, -3.0, 1.0, 2.0])
    summary = head.summary()
    expected = {"tau_mean": (1 + 2 + 0.5 + 1) / 4, "tau_min": 0.5, "tau_max": 2.0,
                "l_mean": 0.0, "l_min": -3.0, "l_max": 2.0, "l_abs_mean": 1.5}
    assert summary.keys() == expected.keys()
    assert summary == pytest.approx(expected)
    rows = head.rows([2, 1])
    assert rows["index"] == [2, 1]
    assert rows["tau"] == pytest.approx([0.5, 2.0]) and rows["l"] == pytest.approx([1.0, -3.0])
    with pytest.raises(ValueError, match=r"in \[0, 4\)"):
        head.rows([4])


def test_scalar_summary_has_no_shift() -> None:
    head = _set(CalibrationHead("scalar"), s=[math.log(3.0)])
    assert head.summary() == pytest.approx({"tau_mean": 3.0, "tau_min": 3.0, "tau_max": 3.0})
    assert head.rows([0, 7]) == {"index": [0, 7], "tau": pytest.approx([3.0, 3.0])}


@pytest.mark.parametrize(("scope", "size"), [("vocab", V), ("options", K_MAX), ("scalar", None)])
@pytest.mark.parametrize("as_file", [False, True])
def test_save_load_round_trip(tmp_path, scope: str, size: int | None, as_file: bool) -> None:
    head = _random_head(scope, size)
    target = tmp_path / "head.safetensors" if as_file else tmp_path / "checkpoint-3"
    written = head.save(target)
    assert written == (target if as_file else target / HEAD_FILENAME) and written.exists()
    loaded = CalibrationHead.load(target)
    assert (loaded.scope, loaded.size) == (head.scope, head.size)
    for (name, p), (name2, p2) in zip(head.named_parameters(), loaded.named_parameters()):
        assert name == name2 and torch.equal(p, p2) and p2.dtype == torch.float32


def _write(path, tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None) -> None:
    save_file(tensors, str(path), metadata=metadata)


@pytest.mark.parametrize(("metadata", "tensors", "match"), [
    ({"format": "calm_studio.calibration_head", "scope": "bogus", "size": "4"}, None, "Expected `scope` in"),
    ({"format": "calm_studio.calibration_head", "size": "4"}, None, "Expected `scope` in"),
    (None, None, "Expected a calibration head file"),
    ({"format": "calm_studio.calibration_head", "scope": "options", "size": "5"}, None, "Expected tensors"),
    ({"format": "calm_studio.calibration_head", "scope": "options", "size": "4"},
     {"log_temperature": torch.zeros(4)}, "Expected tensors"),
])
def test_bad_head_file_refused(tmp_path, metadata: dict[str, str] | None,
                               tensors: dict[str, torch.Tensor] | None, match: str) -> None:
    path = tmp_path / "bad.safetensors"
    _write(path, tensors or {"log_temperature": torch.zeros(4), "shift": torch.zeros(4)}, metadata)
    with pytest.raises(ValueError, match=match):
        CalibrationHead.load(path)


def test_logits_processor_applies_the_head() -> None:
    head = _random_head("vocab", V)
    processor = head.as_logits_processor()
    assert isinstance(processor, LogitsProcessor)
    torch.manual_seed(3)
    scores = torch.randn(2, V)  # (B, V)
    scores[0, 5] = NEG_INF  # an earlier processor banned a token
    input_ids = torch.zeros(2, 4, dtype=torch.long)
    out = LogitsProcessorList([processor])(input_ids, scores.clone())
    expected = scores / head.tau.detach() + head.shift.detach()  # (B, V) / (V,) + (V,)
    torch.testing.assert_close(out, expected)
    assert out[0, 5] == NEG_INF and not out.requires_grad


def test_logits_processor_keeps_score_dtype() -> None:
    processor = _random_head("vocab", V).as_logits_processor()
    out = processor(torch.zeros(1, 1, dtype=torch.long), torch.randn(1, V, dtype=torch.bfloat16))
    assert out.dtype == torch.bfloat16


@pytest.mark.parametrize(("scope", "size"), [("options", K_MAX), ("scalar", None)])
def test_logits_processor_needs_a_head_that_acts_on_tokens(scope: str, size: int | None) -> None:
    """An options head, and a multiple-choice scalar head, act on option scores: generation has none."""
    with pytest.raises(ValueError, match="acts on tokens.*acts on 'options'"):
        CalibrationHead(scope, size).as_logits_processor()



def test_the_scalar_head_never_reranks_and_a_per_position_head_does() -> None:
    """Why cloze scoring allows only the scalar scope: one temperature keeps every item's
    argmax and ranking (any tau); per-position temperatures and shifts change them."""
    torch.manual_seed(0)
    z = torch.randn(200, 4) * 3  # (N, K) option scores
    z[::3, 3] = NEG_INF  # ragged items
    scalar = CalibrationHead("scalar")
    for log_tau in (-2.0, 0.5, 3.0):
        with torch.no_grad():
            scalar.log_temperature.fill_(log_tau)
        out = scalar(z)
        assert torch.equal(out.argsort(dim=-1), z.argsort(dim=-1))
    options = _random_head("options", 4)
    assert (options(z).argmax(-1) != z.argmax(-1)).any()


@pytest.mark.parametrize(("rule", "task", "allowed"), [
    ("cloze", "mcqa", ("scalar", "adaptive")), ("cloze_norm", "mcqa", ("scalar", "adaptive")),
    ("letter", "mcqa", ("vocab", "options", "scalar", "adaptive")), ("cloze", "openqa", ("vocab", "scalar")),
])
def test_scopes_fit_the_scoring_rule(rule: str, task: str, allowed: tuple[str, ...]) -> None:
    from calm_core.calibration.head import check_scope_fits, scopes_for

    assert scopes_for(rule, task) == allowed  # the default first
    for scope in SCOPES:
        if scope in allowed:
            check_scope_fits(scope, rule, task)
        else:
            with pytest.raises(ValueError, match=f"Expected `scope` to be one of .* but got '{scope}'"):
                check_scope_fits(scope, rule, task)


def test_train_config_refuses_a_reranking_head_under_cloze_and_picks_the_papers_under_letter() -> None:
    from calm_core.training.config import TrainConfig

    with pytest.raises(ValueError, match="re-rank"):
        TrainConfig(scope="options", scoring="cloze")
    with pytest.raises(ValueError, match="re-rank"):
        TrainConfig(scope="vocab", scoring="cloze_norm")
    assert TrainConfig(method="sft", scope="options", scoring="cloze").method == "sft"  # no head, nothing to refuse
    assert TrainConfig(scoring="cloze").effective_scope == "scalar"
    assert TrainConfig().effective_scope == "auto"  # scoring auto: the scope follows the rule the job takes
    assert TrainConfig(scoring="letter").effective_scope == "vocab"


# Where the head acts (`acts_on`): callers apply on_tokens and on_options to every batch.
PLACEMENTS = [("vocab", V, "tokens"), ("options", K_MAX, "options"), ("scalar", None, "options"),
              ("scalar", None, "tokens")]


@pytest.mark.parametrize(("scope", "task", "expected"), [
    ("vocab", "mcqa", "tokens"), ("options", "mcqa", "options"), ("scalar", "mcqa", "options"),
    ("vocab", "openqa", "tokens"), ("scalar", "openqa", "tokens"),
])
def test_acts_on_defaults_by_scope_and_task(scope: str, task: str, expected: str) -> None:
    """An open-QA scalar head acts on the answer tokens it was trained on; a multiple-choice one on option scores."""
    size = {"vocab": V, "options": K_MAX, "scalar": None}[scope]
    assert acts_on_for(scope, task) == expected
    assert CalibrationHead(scope, size, acts_on_for(scope, task)).acts_on == expected
    assert CalibrationHead(scope, size).acts_on == acts_on_for(scope)  # no task: multiple choice


@pytest.mark.parametrize(("scope", "size", "acts_on"), [("vocab", V, "options"), ("options", K_MAX, "tokens"),
                                                         ("scalar", None, "logits")])
def test_acts_on_that_does_not_fit_the_scope_is_refused(scope: str, size: int | None, acts_on: str) -> None:
    match = f"Expected `acts_on` to be one of .* for the {scope} scope, but got '{acts_on}'"
    with pytest.raises(ValueError, match=match):
        CalibrationHead(scope, size, acts_on)


@pytest.mark.parametrize(("scope", "size", "acts_on"), PLACEMENTS)
def test_on_tokens_and_on_options_apply_the_head_only_where_it_acts(scope: str, size: int | None,
                                                                     acts_on: str) -> None:
    head = _random_head(scope, size, acts_on=acts_on)
    tokens, options = torch.randn(3, V if scope == "vocab" else 7), _ragged_option_logits()  # (B, V), (N, K)
    on_tokens, on_options = head.on_tokens(tokens), head.on_options(options)
    if acts_on == "tokens":
        torch.testing.assert_close(on_tokens, head(tokens))
        assert not torch.allclose(on_tokens, tokens) and on_options is options
    else:
        torch.testing.assert_close(on_options, head(options))
        assert not torch.allclose(on_options[torch.isfinite(options)], options[torch.isfinite(options)])
        assert on_tokens is tokens


def test_on_tokens_with_index_for_a_scalar_head_keeps_the_restricted_distribution() -> None:
    """A scalar head that acts on tokens meets the letter rule's gathered logits: its one
    tau fits every id, and softmax over the gathered ids is the full head's, renormalised."""
    head = _set(CalibrationHead("scalar", acts_on="tokens"), s=[math.log(3.0)])
    torch.manual_seed(4)
    z, ids = torch.randn(2, V) * 4, torch.tensor([4, 1, 9])  # (B, V), (n,)
    gathered = head.on_tokens(z[:, ids], index=ids)  # (B, n)
    torch.testing.assert_close(torch.softmax(gathered, -1), torch.softmax(head(z)[:, ids], -1))


@pytest.mark.parametrize(("scope", "size", "acts_on"), PLACEMENTS)
def test_save_load_round_trips_acts_on(tmp_path, scope: str, size: int | None, acts_on: str) -> None:
    CalibrationHead(scope, size, acts_on).save(tmp_path)
    other_task = "openqa" if acts_on == "options" else "mcqa"  # the file's own place wins over the task default
    assert CalibrationHead.load(tmp_path).acts_on == acts_on
    assert CalibrationHead.load(tmp_path, other_task).acts_on == acts_on


@pytest.mark.parametrize(("scope", "size", "task", "expected"), [
    ("vocab", V, "mcqa", "tokens"), ("options", K_MAX, "mcqa", "options"), ("scalar", None, "mcqa", "options"),
    ("scalar", None, "openqa", "tokens"),
])
def test_head_file_without_acts_on_loads_with_the_default(tmp_path, scope: str, size: int | None, task: str,
                                                          expected: str) -> None:
    """Heads saved before they said where they act: the scope's default, the run's task for a scalar head."""
    head = _random_head(scope, size)
    path = tmp_path / "old.safetensors"
    meta = {"format": "calm_studio.calibration_head", "scope": scope, "size": str(head.size)}
    _write(path, {name: p.detach() for name, p in head.named_parameters()}, meta)
    loaded = CalibrationHead.load(path, task)
    assert loaded.acts_on == expected
    assert all(torch.equal(p, q) for p, q in zip(head.parameters(), loaded.parameters()))


def test_head_file_with_a_bad_acts_on_is_refused(tmp_path) -> None:
    path = tmp_path / "bad.safetensors"
    meta = {"format": "calm_studio.calibration_head", "scope": "options", "size": "4", "acts_on": "tokens"}
    _write(path, {"log_temperature": torch.zeros(4), "shift": torch.zeros(4)}, meta)
    with pytest.raises(ValueError, match="Expected `acts_on`"):
        CalibrationHead.load(path)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_scalar_head_on_tokens_as_logits_processor_is_z_over_tau(dtype: torch.dtype) -> None:
    """An open-QA run's scalar head at generation: softmax(z / tau), the numbers its
    forward gives in training (deviations from the row's mean, so equal up to a constant)."""
    head = _set(CalibrationHead("scalar", acts_on="tokens"), s=[math.log(2.5)])
    torch.manual_seed(5)
    scores = (torch.randn(2, V) * 3).to(dtype)  # (B, V)
    scores[1, 2] = NEG_INF  # an earlier processor banned a token
    out = LogitsProcessorList([head.as_logits_processor()])(torch.zeros(2, 4, dtype=torch.long), scores.clone())
    assert out.dtype == dtype and out[1, 2] == NEG_INF
    expected = torch.log_softmax(scores.float() / 2.5, dim=-1)
    torch.testing.assert_close(torch.log_softmax(out.float(), dim=-1), expected,
                               **({} if dtype == torch.float32 else {"atol": 0.05, "rtol": 0}))
    assert torch.equal(out, head(scores.float()).to(dtype))  # what training computed


@pytest.mark.parametrize(("scope", "size", "acts_on"), PLACEMENTS)
def test_numpy_option_scores_go_through_on_options(scope: str, size: int | None, acts_on: str) -> None:
    """`apply_option_head`: the one way to put a head on option scores already computed."""
    import numpy as np

    from calm_core.scoring.options import apply_option_head

    head = CalibrationHead(scope, size, acts_on)
    _set(head, s=[0.3] * head.size, l=None if head.shift is None else [0.2] * head.size)
    scores = _ragged_option_logits().double().numpy()  # (N, K), -inf padding
    out = apply_option_head(scores, head)
    expected = head.on_options(torch.from_numpy(scores)).detach().numpy()
    np.testing.assert_array_equal(out, expected)
    assert out is not scores and out.dtype == np.float64
    assert np.array_equal(out, scores) == (acts_on == "tokens")
    np.testing.assert_array_equal(apply_option_head(scores, None), scores)
