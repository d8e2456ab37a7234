"""CalibrationHead: identity at init, the formula, -inf padding, index rows, save/load,
the transformers LogitsProcessor. Toy tensors only."""

from __future__ import annotations

import math

import pytest
import torch
from safetensors.torch import save_file
from transformers import LogitsProcessor, LogitsProcessorList

from calm_core.calibration.head import HEAD_FILENAME, SCOPES, CalibrationHead

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


def _random_head(scope: str, size: int | None, seed: int = 1) -> CalibrationHead:
    torch.manual_seed(seed)
    head = CalibrationHead(scope, size)
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
    with pytest.raises(ValueError, match=r"Expected `scope` to be one of \['vocab', 'options', 'scalar'\], but got 'bias'"):
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
def test_logits_processor_needs_vocab_scope(scope: str, size: int | None) -> None:
    with pytest.raises(ValueError, match="vocab-scope"):
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
    ("cloze", "mcqa", ("scalar",)), ("cloze_norm", "mcqa", ("scalar",)),
    ("letter", "mcqa", ("vocab", "options", "scalar")), ("cloze", "openqa", ("vocab", "scalar")),
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
        TrainConfig(scope="options")
    with pytest.raises(ValueError, match="re-rank"):
        TrainConfig(scope="vocab", scoring="cloze_norm")
    assert TrainConfig(method="sft", scope="options").method == "sft"  # no head, nothing to refuse
    assert TrainConfig().effective_scope == "scalar"
    assert TrainConfig(scoring="letter").effective_scope == "vocab"
