"""The scorer object (calm_core/scoring/scorer.py): for each rule, with and without a head,
the scores of each sequence run alone through the model's own forward; what it captures
changes no score by a bit; every head class is a `Head`."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from calm_core.calibration.head import make_head
from calm_core.calibration.head_base import Head
from calm_core.data.schema import MCItem
from calm_core.scoring.options import pad_ragged
from calm_core.scoring.prompts import ScoringConfig, letter_token_ids
from calm_core.scoring.scorer import Capture, Scorer
from calm_core.scoring.truncation import context_limit, fitted_cloze_requests, fitted_letter_prompts
from tests.numeric import float32_noise

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


def _reference(lm, items, cfg: ScoringConfig, head: Head | None) -> np.ndarray:
    """The naive path: each sequence alone, unpadded, through the model's own forward (no
    KV cache, no fast path, no batch), the head applied where it acts. (N, K_max) float64."""
    model, tokenizer = lm.model, lm.tokenizer
    limit = context_limit(model, tokenizer)
    rows, states = [], []
    with torch.no_grad():
        if cfg.is_cloze:
            requests, _ = fitted_cloze_requests(items, cfg, tokenizer, limit)
            for reqs in requests:
                rows.append([_cloze_score(model, context, cont, head) for context, cont in reqs])
                states.append(_state(model, reqs[0][0]))
        else:
            prompts, _ = fitted_letter_prompts(items, cfg, tokenizer, limit)
            letters = letter_token_ids(tokenizer, max(it.n_choices for it in items), cfg)
            for prompt, item in zip(prompts, items, strict=True):
                z = model(torch.tensor([prompt])).logits[0, -1].float()[letters]  # (K_max,)
                z = head.on_tokens(z[None], index=torch.tensor(letters))[0] if head is not None else z
                rows.append(z[: item.n_choices].double().tolist())
                states.append(_state(model, prompt))
        z = torch.from_numpy(pad_ragged([np.array(r) for r in rows]))
        return (head.on_options(z, features=torch.stack(states)) if head is not None else z).double().numpy()


def _cloze_score(model, context: list[int], cont: list[int], head: Head | None) -> float:
    logits = model(torch.tensor([context + cont[:-1]])).logits[0, -len(cont) :].float()  # (c, V)
    logprobs = torch.log_softmax(head.on_tokens(logits) if head is not None else logits, dim=-1)
    return float(logprobs.gather(-1, torch.tensor(cont)[:, None]).double().sum())


def _state(model, ids: list[int]) -> torch.Tensor:
    """h: the final-norm state at the last token (transformers' hidden_states[-1] is normed)."""
    return model(torch.tensor([ids]), output_hidden_states=True).hidden_states[-1][0, -1]


@pytest.mark.parametrize("rule, scope", CASES)
def test_the_scorer_equals_the_naive_path(tiny_lm, rule: str, scope: str | None) -> None:
    """Batched, padded, prefix-shared and on the fast paths, the scores are those of each
    sequence alone through the model's forward, with and without a head."""
    cfg = ScoringConfig(rule=rule)
    head = _head(scope, tiny_lm) if scope else None
    scores = Scorer.of(tiny_lm, batch_size=4, progress=False).score(ITEMS, cfg, head=head).logits
    expected = _reference(tiny_lm, ITEMS, cfg, head)
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(np.isfinite(scores), finite)
    noise = float32_noise(float(np.abs(expected[finite]).max()), tiny_lm.model.config.vocab_size)
    np.testing.assert_allclose(scores[finite], expected[finite], atol=noise, rtol=0)
    if head is not None:
        plain = Scorer.of(tiny_lm, progress=False).score(ITEMS, cfg).logits
        assert not np.allclose(scores[finite], plain[finite], atol=1e-3)  # the head did something


@pytest.mark.parametrize("share_prefix", [True, False])
def test_capture_changes_no_score_to_the_bit(tiny_lm, share_prefix: bool) -> None:
    cfg = ScoringConfig(rule="cloze")
    scorer = Scorer.of(tiny_lm, batch_size=5, progress=False, share_prefix=share_prefix)
    plain = scorer.score(ITEMS, cfg)
    captured = scorer.score(ITEMS, cfg, capture=Capture.FEATURES | Capture.OPTION_FEATURES)
    np.testing.assert_array_equal(captured.logits, plain.logits)
    assert plain.features is None and plain.option_features is None
    assert captured.features is not None and captured.features.shape == (len(ITEMS), tiny_lm.model.config.hidden_size)
    assert captured.option_features is not None and captured.option_features.shape[:2] == plain.logits.shape


def test_option_features_need_a_cloze_rule(tiny_lm) -> None:
    with pytest.raises(ValueError, match="cloze rule for option features"):
        Scorer.of(tiny_lm, progress=False).score(ITEMS, ScoringConfig(rule="letter"), capture=Capture.OPTION_FEATURES)


def test_every_head_is_a_head(tiny_lm) -> None:
    """What the scorer and training type a head by: each scope's class has its names."""
    for scope in ("scalar", "options", "vocab", "adaptive"):
        assert isinstance(_head(scope, tiny_lm), Head), scope
    assert not isinstance(torch.nn.Linear(2, 2), Head)


def test_building_a_scorer_measures_the_model(tiny_model_dir) -> None:
    """The passes read the verdict the scorer's construction kept on the model; before it,
    a model nobody measured runs the plain forward."""
    from calm_core.scoring.forward import hidden_path
    from calm_core.scoring.models import ModelSpec, load_model

    lm = load_model(ModelSpec(name=str(tiny_model_dir), device="cpu"))  # a fresh object: nothing kept on it
    assert not hidden_path(lm.model)
    scorer = Scorer.of(lm, progress=False)
    assert hidden_path(lm.model) and scorer.kv_sharing
