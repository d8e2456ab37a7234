"""Option scoring: the batched, prefix-shared paths against a one-sequence-at-a-time reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from calm_core.data.schema import MCItem
from calm_core.scoring.prompts import ScoringConfig, cloze_context, letter_prompt, letter_token_ids
from calm_core.scoring.forward import left_pad_batch
from calm_core.scoring.options import OptionScores, pad_ragged
from calm_core.scoring.scorer import Scorer

ITEMS = [
    MCItem("a", "What is the capital of France?", ("Paris", "Lyon", "Marseille", "Nice"), 0),
    MCItem("b", "Which gas do plants absorb from the air during photosynthesis?",
           ("carbon dioxide", "oxygen", "a mixture of nitrogen and argon"), 0),
    MCItem("c", "2 + 2 =", ("4", "5"), 0),
    MCItem("d", "Which planet is known as the red planet in popular astronomy books?",
           ("Mars", "Venus", "Jupiter", "Saturn", "the planet closest to the sun"), 3),
]


def reference_cloze(lm, item: MCItem, cfg: ScoringConfig) -> np.ndarray:
    """One unpadded forward per choice; sum (or mean) of the choice tokens' log-probs."""
    tok = lm.tokenizer
    context = cloze_context(item, cfg, tok)
    out = []
    for choice in item.choices:
        ctx = tok(context, add_special_tokens=False).input_ids
        whole = tok(context + " " + choice, add_special_tokens=False).input_ids
        cont = whole[len(ctx):]
        with torch.no_grad():
            logits = lm.model(input_ids=torch.tensor([whole])).logits[0].double()
        logprobs = torch.log_softmax(logits, -1)
        picked = [float(logprobs[len(ctx) - 1 + j, t]) for j, t in enumerate(cont)]
        out.append(np.mean(picked) if cfg.rule == "cloze_norm" else np.sum(picked))
    return np.array(out)


@pytest.mark.parametrize("rule", ["cloze", "cloze_norm"])
def test_cloze_matches_one_at_a_time_reference(tiny_lm, rule: str) -> None:
    cfg = ScoringConfig(rule=rule)
    scores = Scorer.of(tiny_lm, batch_size=6, progress=False).score(ITEMS, cfg)
    for i, item in enumerate(ITEMS):
        np.testing.assert_allclose(scores.logits[i, : item.n_choices], reference_cloze(tiny_lm, item, cfg), atol=1e-4)
        assert np.all(np.isneginf(scores.logits[i, item.n_choices:]))


def test_prefix_sharing_equals_flat_path(tiny_lm) -> None:
    shared = Scorer.of(tiny_lm, batch_size=8, progress=False, share_prefix=True).score(ITEMS, ScoringConfig())
    flat = Scorer.of(tiny_lm, batch_size=3, progress=False, share_prefix=False).score(ITEMS, ScoringConfig())
    finite = np.isfinite(flat.logits)
    np.testing.assert_array_equal(finite, np.isfinite(shared.logits))
    np.testing.assert_allclose(shared.logits[finite], flat.logits[finite], atol=1e-4)


@pytest.mark.parametrize("rule", ["cloze", "letter"])
def test_scores_do_not_depend_on_batch_size(tiny_lm, rule: str) -> None:
    one = Scorer.of(tiny_lm, batch_size=1, progress=False).score(ITEMS, ScoringConfig(rule=rule))
    many = Scorer.of(tiny_lm, batch_size=32, progress=False).score(ITEMS, ScoringConfig(rule=rule))
    finite = np.isfinite(one.logits)
    np.testing.assert_allclose(one.logits[finite], many.logits[finite], atol=1e-4)


def test_letter_scores_are_last_position_letter_logits(tiny_lm) -> None:
    cfg = ScoringConfig(rule="letter")
    scores = Scorer.of(tiny_lm, batch_size=4, progress=False).score(ITEMS, cfg)
    for i, item in enumerate(ITEMS):
        ids = tiny_lm.tokenizer(letter_prompt(item, cfg, tiny_lm.tokenizer), add_special_tokens=False).input_ids
        with torch.no_grad():
            last = tiny_lm.model(input_ids=torch.tensor([ids])).logits[0, -1].double()
        expected = last[letter_token_ids(tiny_lm.tokenizer, item.n_choices, cfg)].numpy()
        np.testing.assert_allclose(scores.logits[i, : item.n_choices], expected, atol=1e-4)


def test_chat_template_cloze_runs_and_differs_from_plain(tiny_lm) -> None:
    plain = Scorer.of(tiny_lm, progress=False).score(ITEMS[:2], ScoringConfig())
    chat = Scorer.of(tiny_lm, progress=False).score(ITEMS[:2], ScoringConfig(chat_template=True))
    assert chat.scoring["chat_template"] is True
    assert not np.allclose(plain.logits[np.isfinite(plain.logits)], chat.logits[np.isfinite(chat.logits)])


def test_result_records_rule_gold_and_ids(tiny_lm) -> None:
    scores = Scorer.of(tiny_lm, progress=False).score(ITEMS, ScoringConfig(rule="cloze_norm"))
    assert scores.scoring["rule"] == "cloze_norm"
    assert scores.ids == ["a", "b", "c", "d"]
    np.testing.assert_array_equal(scores.gold, [0, 0, 0, 3])
    np.testing.assert_array_equal(scores.n_choices, [4, 3, 2, 5])
    np.testing.assert_allclose(scores.probs().sum(axis=1), 1.0)


def test_progress_callback_reaches_total(tiny_lm) -> None:
    seen: list[tuple[int, int]] = []
    Scorer.of(tiny_lm, batch_size=5, progress=lambda d, t: seen.append((d, t))).score(ITEMS, ScoringConfig())
    assert seen[-1] == (len(ITEMS), len(ITEMS))
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_frame_round_trip_keeps_ragged_logits(tiny_lm) -> None:
    scores = Scorer.of(tiny_lm, progress=False).score(ITEMS, ScoringConfig())
    back = OptionScores.from_frame(scores.to_frame(), scores.scoring)
    np.testing.assert_array_equal(back.logits, scores.logits)
    np.testing.assert_array_equal(back.gold, scores.gold)


def test_left_padding_positions_skip_pad() -> None:
    batch = left_pad_batch([[5, 6, 7], [8]], pad_id=0, device=torch.device("cpu"))
    assert batch["input_ids"].tolist() == [[5, 6, 7], [0, 0, 8]]
    assert batch["position_ids"].tolist() == [[0, 1, 2], [0, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [0, 0, 1]]


def test_pad_ragged_and_empty_input_errors(tiny_lm) -> None:
    padded = pad_ragged([np.array([1.0, 2.0]), np.array([3.0])])
    assert padded.shape == (2, 2) and np.isneginf(padded[1, 1])
    with pytest.raises(ValueError, match="at least one item"):
        Scorer.of(tiny_lm, progress=False).score([], ScoringConfig())
    with pytest.raises(ValueError, match="batch_size"):
        Scorer.of(tiny_lm, batch_size=0, progress=False).score(ITEMS, ScoringConfig())


@pytest.mark.embedded
def test_embedded_model_beats_chance_on_capitals_with_cloze(embedded_lm) -> None:
    """The real model knows capitals: cloze accuracy well above 1/4 on the built-in set."""
    from calm_core.scoring.evaluate import load_mc_items

    items = load_mc_items("builtin/capitals/test")
    scores = Scorer.of(embedded_lm, progress=False).score(items, ScoringConfig())
    assert (scores.predictions == scores.gold).mean() > 0.5


@pytest.mark.embedded
def test_docs_arc_easy_numbers_reproduce_to_the_item(embedded_lm) -> None:
    """docs/results.md's ARC-Easy row: the first items score as in the committed reference
    (made by the command in docs/results.md; `calm eval ... --save-preds`)."""
    import json
    from pathlib import Path

    from calm_core.scoring.evaluate import load_mc_items
    from calm_core.paths import data_dir

    if data_dir() is None:
        pytest.skip("no shared data folder (CALM_DATA_DIR)")
    reference = Path(__file__).parent / "fixtures" / "reference" / "arc_easy_test_cloze_base.jsonl"
    rows = [json.loads(line) for line in reference.read_text().splitlines()][:12]
    items = load_mc_items("arc/easy_test", limit=12)
    scores = Scorer.of(embedded_lm, progress=False).score(items, ScoringConfig(rule="cloze"))
    assert scores.ids == [r["id"] for r in rows]
    assert scores.predictions.tolist() == [r["prediction"] for r in rows]
    for i, row in enumerate(rows):
        np.testing.assert_allclose(scores.logits[i, : len(row["logits"])], row["logits"], atol=1e-3)


def test_head_on_distinct_rows_runs_each_row_once_with_exact_values_and_gradients() -> None:
    """Bit-identical rows (a question's options at its prompt's last position) go through
    the head once; the logits and the gradient upstream equal the head on every row."""
    from calm_core.scoring.logprobs import head_on_distinct_rows

    torch.manual_seed(0)
    head = torch.nn.Linear(8, 50, bias=False)
    x, y = torch.randn(1, 8, requires_grad=True), torch.randn(1, 8, requires_grad=True)
    weights = torch.randn(4, 50)
    rows_seen: list[int] = []
    hook = head.register_forward_hook(lambda module, args, out: rows_seen.append(args[0].shape[0]))

    def loss_and_grads(fn) -> tuple[torch.Tensor, list[torch.Tensor]]:
        hidden = torch.cat([x, y, x, x])  # rows 0, 2, 3 are the same function of x
        logits = fn(hidden)
        return logits.detach(), list(torch.autograd.grad((logits * weights).sum(), [x, y]))

    got, got_grads = loss_and_grads(lambda h: head_on_distinct_rows(head, h))
    want, want_grads = loss_and_grads(head)
    hook.remove()
    assert rows_seen == [2, 4]
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)  # a matmul's last bit depends on its row count
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w)
