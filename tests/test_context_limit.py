"""Items longer than the model's context: cut from the left on purpose, scored as cut, counted.

The tiny random Llama is copied with max_position_embeddings = 64 (RoPE does not read it,
so the copy computes what the original does), which makes a long item cheap. Before this
guard a long item was scored in full, past the positions the model was trained on.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from calm_core.data.schema import DataError, MCItem
from calm_core.scoring.frozen_prefix import FrozenPrefixModel
from calm_core.training.objectives import forward_sequences, option_logits
from calm_core.scoring.prompts import ScoringConfig, letter_prompt, letter_token_ids
from calm_core.scoring.logprobs import continuation_inputs
from calm_core.scoring.scorer import Scorer
from calm_core.scoring.truncation import cloze_requests, context_limit, truncated_item_ids

LIMIT = 64
LONG = MCItem("long", "Some background: " + "the river runs by the old mill and " * 8
              + "What is the capital of France?", ("Paris", "Lyon", "the city of Marseille on the coast"), 0)
SHORT = MCItem("short", "2 + 2 =", ("4", "5"), 0)
TOO_LONG_OPTION = MCItem("wordy", "Pick one.", ("yes", "no " * 70), 0)


@pytest.fixture(scope="module")
def short_lm(tiny_lm):
    """The tiny model with a 64-token context, same weights and tokenizer."""
    model = copy.deepcopy(tiny_lm.model)
    model.config.max_position_embeddings = LIMIT
    return SimpleNamespace(model=model, tokenizer=tiny_lm.tokenizer, device=torch.device("cpu"), info={})


def naive_cloze(model, pairs: list[tuple[list[int], list[int]]], rule: str) -> np.ndarray:
    """One unpadded forward per option on exactly the given tokens."""
    out = []
    for ctx, cont in pairs:
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([(ctx + cont)[:-1]])).logits[0].double()
        picked = torch.log_softmax(logits, -1)[len(ctx) - 1:].gather(-1, torch.tensor(cont)[:, None])[:, 0]
        out.append(float(picked.mean() if rule == "cloze_norm" else picked.sum()))
    return np.array(out)


def test_limit_comes_from_the_config_then_a_sane_tokenizer(short_lm) -> None:
    assert context_limit(short_lm.model, short_lm.tokenizer) == LIMIT
    assert short_lm.tokenizer.model_max_length > 10**20  # "unknown" in transformers: never used
    assert context_limit(None, short_lm.tokenizer) is None
    assert context_limit(None, SimpleNamespace(model_max_length=128)) == 128
    gpt2_like = SimpleNamespace(config=SimpleNamespace(n_positions=1024))
    assert context_limit(gpt2_like) == 1024


@pytest.mark.parametrize("share_prefix", [True, False])
@pytest.mark.parametrize("rule", ["cloze", "cloze_norm"])
def test_long_cloze_item_is_cut_from_the_left_and_scored_as_cut(short_lm, rule: str, share_prefix: bool) -> None:
    cfg = ScoringConfig(rule=rule)
    scores = Scorer.of(short_lm, progress=False, share_prefix=share_prefix).score([LONG, SHORT], cfg, dataset="toy-a")
    assert scores.truncated == 1 and scores.context_length == LIMIT
    full = cloze_requests([LONG], cfg, short_lm.tokenizer)[0]  # no limit: what the model used to read
    cut = len(full[0][0]) + max(len(cont) for _, cont in full) - 1 - LIMIT
    assert cut > 0
    explicit = [(ctx[cut:], cont) for ctx, cont in full]  # the same tokens gone from every option
    assert max(len(ctx) + len(cont) - 1 for ctx, cont in explicit) == LIMIT  # the smallest cut that fits
    np.testing.assert_allclose(scores.logits[0, :3], naive_cloze(short_lm.model, explicit, rule), atol=1e-4)
    short = cloze_requests([SHORT], cfg, short_lm.tokenizer)[0]
    np.testing.assert_allclose(scores.logits[1, :2], naive_cloze(short_lm.model, short, rule), atol=1e-4)
    assert not np.allclose(scores.logits[0, :3], naive_cloze(short_lm.model, full, rule), atol=1e-3)


def test_long_letter_prompt_keeps_its_last_tokens(short_lm) -> None:
    cfg = ScoringConfig(rule="letter")
    scores = Scorer.of(short_lm, progress=False).score([LONG, SHORT], cfg, dataset="toy-b")
    assert scores.truncated == 1
    ids = short_lm.tokenizer(letter_prompt(LONG, cfg, short_lm.tokenizer), add_special_tokens=False).input_ids
    assert len(ids) > LIMIT
    with torch.no_grad():
        last = short_lm.model(input_ids=torch.tensor([ids[-LIMIT:]])).logits[0, -1].double()
    letters = letter_token_ids(short_lm.tokenizer, 3, cfg)
    np.testing.assert_allclose(scores.logits[0, :3], last[letters].numpy(), atol=1e-4)


def test_warns_once_per_dataset_on_stderr(short_lm, capsys: pytest.CaptureFixture[str]) -> None:
    for _ in range(2):
        Scorer.of(short_lm, progress=False).score([LONG, SHORT], ScoringConfig(), dataset="toy-c")
    Scorer.of(short_lm, progress=False).score([LONG, SHORT], ScoringConfig(), dataset="toy-d")
    lines = [line for line in capsys.readouterr().err.splitlines() if "cut from the left" in line]
    assert lines == [
        f"calm: warning: 1 of 2 items of {name} were longer than the model's context ({LIMIT} tokens) and were "
        "cut from the left, as lm-evaluation-harness does" for name in ("toy-c", "toy-d")
    ]


def test_items_that_fit_are_neither_cut_nor_reported(short_lm, capsys: pytest.CaptureFixture[str]) -> None:
    scores = Scorer.of(short_lm, progress=False).score([SHORT], ScoringConfig(), dataset="toy-e")
    assert scores.truncated == 0 and "cut from the left" not in capsys.readouterr().err


@pytest.mark.parametrize("rule", ["cloze", "letter"])
def test_an_option_longer_than_the_context_is_refused_by_item_id(short_lm, rule: str) -> None:
    with pytest.raises(DataError, match="item 'wordy'.*context of 64 tokens"):
        Scorer.of(short_lm, progress=False).score([SHORT, TOO_LONG_OPTION], ScoringConfig(rule=rule))
    with pytest.raises(DataError, match="'wordy'"):
        truncated_item_ids([TOO_LONG_OPTION], ScoringConfig(rule=rule), short_lm.tokenizer, LIMIT)


@pytest.mark.parametrize("rule", ["cloze", "letter"])
def test_training_scores_long_items_as_evaluation_does(short_lm, rule: str) -> None:
    cfg = ScoringConfig(rule=rule)
    with torch.no_grad():
        z = option_logits(short_lm.model, short_lm.tokenizer, [LONG, SHORT], cfg).double().numpy()
    expected = Scorer.of(short_lm, progress=False).score([LONG, SHORT], cfg).logits
    finite = np.isfinite(expected)
    np.testing.assert_allclose(z[finite], expected[finite], atol=1e-4)


def test_frozen_prefix_sequences_are_the_cut_ones(short_lm) -> None:
    cfg = ScoringConfig()
    sequences = forward_sequences(short_lm.tokenizer, [LONG, SHORT], cfg, max_length=LIMIT)
    assert max(len(seq) for item in sequences for seq in item) == LIMIT
    assert sequences == [continuation_inputs(r) for r in cloze_requests([LONG, SHORT], cfg, short_lm.tokenizer, LIMIT)]
    assert truncated_item_ids([LONG, SHORT], cfg, short_lm.tokenizer, LIMIT) == ["long"]


def test_frozen_prefix_model_knows_the_limit_and_scores_the_same(short_lm) -> None:
    model = copy.deepcopy(short_lm.model).requires_grad_(False)
    runner = FrozenPrefixModel(model, split=1)
    assert context_limit(runner) == LIMIT
    via_runner = Scorer(runner, short_lm.tokenizer, progress=False).score([LONG, SHORT], ScoringConfig())
    direct = Scorer.of(short_lm, progress=False).score([LONG, SHORT], ScoringConfig())
    assert via_runner.truncated == 1
    finite = np.isfinite(direct.logits)
    np.testing.assert_allclose(via_runner.logits[finite], direct.logits[finite], atol=1e-4)


def test_a_training_run_checks_its_sets_before_the_first_step(short_lm, tmp_path) -> None:
    """The trainer says which sets have items cut to the context (status.json) before step 1,
    and an item that cannot fit stops the run before any step rather than at its batch."""
    import json

    from calm_core.runs.rundir import RunDir
    from calm_core.training.config import TrainConfig
    from calm_core.training.loop import train

    def write(name: str, items: list[MCItem]) -> str:
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps({"id": it.id, "question": it.question, "choices": list(it.choices),
                                            "answer": it.answer}) + "\n" for it in items))
        return str(path)

    short = [MCItem(f"s{i}", f"{i} + 1 =", (str(i + 1), str(i + 2)), 0) for i in range(4)]
    other = [MCItem(f"o{i}", f"{i} + 3 =", (str(i + 3), str(i + 4)), 0) for i in range(4)]  # S_V: other questions
    cfg = TrainConfig(method="sft", steps=1, batch_size=2, heldout_batch_size=2, eval_every=0, checkpoint_every=0,
                      scoring="cloze", train_data=write("train", short + [LONG]), heldout_data=write("heldout", other),
                      eval_data=(write("eval", other),), lr_theta=1e-2, frozen_prefix=False)
    def fresh():  # LoRA wraps a model in place: each run its own copy
        return SimpleNamespace(model=copy.deepcopy(short_lm.model), tokenizer=short_lm.tokenizer,
                               device=torch.device("cpu"), info={})

    run = RunDir.create(tmp_path / "runs", "long", {"train": cfg.to_dict()})
    train(cfg, run=run, lm=fresh())
    assert run.status.items_cut_to_context == {"train": 1}
    bad = TrainConfig.from_dict({**cfg.to_dict(), "train_data": write("bad", short + [TOO_LONG_OPTION])})
    with pytest.raises(DataError, match="wordy"):
        train(bad, run=RunDir.create(tmp_path / "runs", "bad", {"train": bad.to_dict()}), lm=fresh())
