"""Features at scoring time (scoring.features): the hidden state captured in the scoring
pass is a separate forward pass's, capture changes no score, and the stored float16
features come back aligned with the rows (an older file without them reads as None)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from calm_core.data.schema import MCItem
from calm_core.runs.layout import predictions_path, write_predictions
from calm_core.scoring.evaluate import predictions_frame
from calm_core.scoring.features import FEATURES, OPTION_FEATURES, feature_columns
from calm_core.scoring.frozen_prefix import FrozenPrefixModel
from calm_core.scoring.options import OptionScores, read_scores
from calm_core.scoring.scorer import Capture, Scorer
from calm_core.scoring.prompts import ScoringConfig
from calm_core.scoring.truncation import fitted_cloze_requests, fitted_letter_prompts
from tests.conftest import TINY_CONFIG

ITEMS = [
    MCItem("a", "What is the capital of France?", ("Paris", "Lyon", "Marseille", "Nice"), 0),
    MCItem(
        "b",
        "Which gas do plants absorb from the air during photosynthesis?",
        ("carbon dioxide", "oxygen", "a mixture of nitrogen and argon"),
        0,
    ),
    MCItem("c", "2 + 2 =", ("4", "5"), 0),
    MCItem(
        "d",
        "Which planet is known as the red planet in popular astronomy books?",
        ("Mars", "Venus", "Jupiter", "Saturn", "the planet closest to the sun"),
        3,
    ),
]
TOL = 1e-5
# How the scoring pass runs: prefix-shared KV cache, every sequence in full, and through a
# FrozenPrefixModel (bottom layer cached) in memory and in the disk arena.
PATHS = ["shared", "flat", "frozen", "frozen_arena"]


def _scorer(tiny_lm, path: str, tmp_path):
    """(model, share_prefix) for one way of running the scoring pass."""
    if path in ("shared", "flat"):
        return tiny_lm.model, path == "shared"
    frozen = copy.deepcopy(tiny_lm.model).requires_grad_(False)
    return FrozenPrefixModel(frozen, split=1, store_root=tmp_path if path == "frozen_arena" else None), True


def _score(model, tokenizer, rule: str, share: bool, capture: Capture = Capture.NOTHING) -> OptionScores:
    scorer = Scorer(model, tokenizer, batch_size=5, progress=False, share_prefix=share)
    return scorer.score(ITEMS, ScoringConfig(rule=rule), capture=capture)


def _reference_states(tiny_lm, ids: list[int]) -> torch.Tensor:
    """A separate, unpadded forward pass: the last layer's hidden states, after the final
    norm (transformers' hidden_states[-1] is normed), (L, d)."""
    with torch.no_grad():
        out = tiny_lm.model(input_ids=torch.tensor([ids]), output_hidden_states=True)
    return out.hidden_states[-1][0]


def _prompts(tiny_lm, rule: str) -> list[list[int]]:
    """Each item's prompt as scoring tokenizes it: the cloze context, or the letter prompt."""
    cfg = ScoringConfig(rule=rule)
    if cfg.is_cloze:
        requests, _ = fitted_cloze_requests(ITEMS, cfg, tiny_lm.tokenizer, None)
        return [reqs[0][0] for reqs in requests]
    prompts, _ = fitted_letter_prompts(ITEMS, cfg, tiny_lm.tokenizer, None)
    return prompts


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("rule", ["cloze", "letter"])
def test_captured_state_is_a_separate_forward_pass_last_prompt_token(tiny_lm, tmp_path, rule: str, path: str) -> None:
    model, share = _scorer(tiny_lm, path, tmp_path)
    scores = _score(model, tiny_lm.tokenizer, rule, share, Capture.FEATURES)
    assert scores.features is not None and scores.features.dtype == np.float32
    assert scores.features.shape == (len(ITEMS), tiny_lm.model.config.hidden_size)
    for i, prompt in enumerate(_prompts(tiny_lm, rule)):
        expected = _reference_states(tiny_lm, prompt)[-1].numpy()
        np.testing.assert_allclose(scores.features[i], expected, atol=TOL, rtol=0)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("rule", ["cloze", "letter"])
def test_capture_changes_no_score(tiny_lm, tmp_path, rule: str, path: str) -> None:
    model, share = _scorer(tiny_lm, path, tmp_path)
    off = _score(model, tiny_lm.tokenizer, rule, share)
    both = Capture.FEATURES | (Capture.OPTION_FEATURES if rule == "cloze" else Capture.NOTHING)
    on = _score(model, tiny_lm.tokenizer, rule, share, both)
    assert off.features is None and off.option_features is None
    np.testing.assert_array_equal(on.logits, off.logits)  # to the last bit
    np.testing.assert_array_equal(on.predictions, off.predictions)


@pytest.mark.parametrize("path", PATHS)
def test_option_features_are_the_mean_state_over_the_positions_that_score_the_option(tiny_lm, tmp_path, path) -> None:
    model, share = _scorer(tiny_lm, path, tmp_path)
    scores = _score(model, tiny_lm.tokenizer, "cloze", share, Capture.OPTION_FEATURES)
    requests, _ = fitted_cloze_requests(ITEMS, ScoringConfig(), tiny_lm.tokenizer, None)
    assert scores.option_features is not None and scores.features is not None
    for i, reqs in enumerate(requests):
        for k, (context, cont) in enumerate(reqs):
            states = _reference_states(tiny_lm, (context + cont)[:-1])  # what scoring reads
            expected = states[len(context) - 1 :].mean(dim=0).numpy()  # positions predicting cont's tokens
            np.testing.assert_allclose(scores.option_features[i, k], expected, atol=TOL, rtol=0)
        assert np.all(np.isnan(scores.option_features[i, len(reqs) :]))


def test_the_hook_path_captures_the_same_states(tiny_lm, monkeypatch) -> None:
    """A model off the hidden path (soft-capped, not Llama-shaped) gives its states through
    a hook on the LM head: the same numbers."""
    import calm_core.scoring.logprobs as logprobs

    direct = _score(tiny_lm.model, tiny_lm.tokenizer, "cloze", False, Capture.OPTION_FEATURES)
    monkeypatch.setattr(logprobs, "hidden_path", lambda model: False)
    hooked = _score(tiny_lm.model, tiny_lm.tokenizer, "cloze", False, Capture.OPTION_FEATURES)
    np.testing.assert_allclose(hooked.features, direct.features, atol=TOL, rtol=0)
    np.testing.assert_allclose(hooked.option_features, direct.option_features, atol=TOL, rtol=0)
    np.testing.assert_allclose(hooked.logits, direct.logits, atol=1e-4)


def test_letter_rule_has_no_option_features(tiny_lm) -> None:
    with pytest.raises(ValueError, match="cloze rule"):
        _score(tiny_lm.model, tiny_lm.tokenizer, "letter", False, Capture.OPTION_FEATURES)


def test_stored_features_round_trip_in_float16(tiny_lm, tmp_path) -> None:
    scores = _score(tiny_lm.model, tiny_lm.tokenizer, "cloze", True, Capture.OPTION_FEATURES)
    path = write_predictions(tmp_path, "base", "builtin/some set", predictions_frame(scores))
    assert path == predictions_path(tmp_path, "base", "builtin/some set")
    back = read_scores(path)
    assert back.ids == scores.ids
    np.testing.assert_array_equal(back.gold, scores.gold)
    np.testing.assert_array_equal(back.logits, scores.logits)
    assert back.features is not None and back.option_features is not None
    np.testing.assert_array_equal(back.features, scores.features.astype(np.float16).astype(np.float32))
    np.testing.assert_allclose(back.features, scores.features, rtol=1e-3, atol=1e-4)
    np.testing.assert_array_equal(back.option_features, scores.option_features.astype(np.float16).astype(np.float32))


def test_a_file_without_features_reads_with_none(tiny_lm, tmp_path) -> None:
    scores = _score(tiny_lm.model, tiny_lm.tokenizer, "cloze", True)  # what every file before features held
    path = write_predictions(tmp_path, "ts", "set", predictions_frame(scores))
    frame = __import__("pandas").read_parquet(path)
    assert FEATURES not in frame.columns and OPTION_FEATURES not in frame.columns
    back = read_scores(path)
    assert back.features is None and back.option_features is None
    np.testing.assert_array_equal(back.logits, scores.logits)


def test_features_only_file_reads_without_option_features(tiny_lm, tmp_path) -> None:
    scores = _score(tiny_lm.model, tiny_lm.tokenizer, "letter", False, Capture.FEATURES)
    back = read_scores(write_predictions(tmp_path, "base", "set", predictions_frame(scores)))
    assert back.option_features is None
    np.testing.assert_allclose(back.features, scores.features, rtol=1e-3, atol=1e-4)


def test_features_beyond_float16_are_clipped_not_infinite(capsys) -> None:
    features = np.array([[1e6, -1e6, 0.5]], dtype=np.float32)
    stored = feature_columns(features, None, np.array([2]))[FEATURES][0]
    assert stored.dtype == np.float16 and np.all(np.isfinite(stored))
    assert stored[2] == np.float16(0.5)
    assert "clipped" in capsys.readouterr().err


def test_option_scores_refuse_misaligned_features() -> None:
    logits = np.zeros((2, 3))
    with pytest.raises(ValueError, match="features"):
        OptionScores(["a", "b"], logits, np.array([0, 1]), {}, features=np.zeros((3, 4)))
    with pytest.raises(ValueError, match="option features"):
        OptionScores(["a", "b"], logits, np.array([0, 1]), {}, option_features=np.zeros((2, 2, 4)))


def _calm(argv: list[str]) -> tuple[int, str]:
    """`calm` in-process -> (exit status, stderr)."""
    import contextlib
    import io

    from calm_core.cli import main

    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, err.getvalue()


def test_calm_eval_stores_features_with_every_variant(tiny_model_dir, tmp_path) -> None:
    data = "builtin/capitals/test"
    flags = f"--data {data} --limit 6 --fit-ts-on builtin/capitals/train --fit-limit 10 --features options --quiet"
    argv = ["eval", "--model", str(tiny_model_dir), "--save-preds", str(tmp_path), *flags.split()]
    assert _calm(argv)[0] == 0
    base, ts = (read_scores(predictions_path(tmp_path, v, data)) for v in ("base", "ts"))
    assert base.features is not None and base.features.shape == (6, TINY_CONFIG["hidden_size"])
    assert base.option_features is not None and base.option_features.shape[:2] == base.logits.shape
    np.testing.assert_array_equal(ts.features, base.features)  # one scoring pass, every variant's rows


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--features"], "give --save-preds DIR too"),
        (["--features", "options", "--scoring", "letter", "--save-preds", "{tmp}"], "needs a cloze rule"),
        (["--features", "--run", "someid"], "--features cannot go with --run"),
    ],
)
def test_calm_eval_refuses_features_it_cannot_store(tmp_path, argv, message) -> None:
    full = ["eval", "--data", "builtin/capitals/test", *[a.replace("{tmp}", str(tmp_path)) for a in argv]]
    rc, err = _calm(full)
    assert rc == 2 and message in err
