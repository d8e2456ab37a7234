"""The scoring rule as data: exact prompt text and token splits."""

from __future__ import annotations

import pytest

from calm_core.data.schema import MCItem
from calm_core.scoring.prompts import (
    ScoringConfig,
    cloze_context,
    cloze_continuations,
    letter_prompt,
    letter_token_ids,
    split_context_continuation,
)

ITEM = MCItem("x", "Which is a mammal?", ("whale", "shark", "trout"), 0)


def test_cloze_is_the_harness_arc_formulation(tiny_lm) -> None:
    cfg = ScoringConfig()
    assert cloze_context(ITEM, cfg, tiny_lm.tokenizer) == "Question: Which is a mammal?\nAnswer:"
    assert cloze_continuations(ITEM, cfg) == [" whale", " shark", " trout"]


def test_letter_prompt_lists_choices_before_answer_cue(tiny_lm) -> None:
    text = letter_prompt(ITEM, ScoringConfig(rule="letter"), tiny_lm.tokenizer)
    assert text == "Question: Which is a mammal?\nA. whale\nB. shark\nC. trout\nAnswer:"


def test_letter_tokens_are_distinct_single_tokens(tiny_lm) -> None:
    plain = letter_token_ids(tiny_lm.tokenizer, 5, ScoringConfig(rule="letter"))
    chat = letter_token_ids(tiny_lm.tokenizer, 5, ScoringConfig(rule="letter", chat_template=True))
    assert len(set(plain)) == 5 and len(set(chat)) == 5
    assert tiny_lm.tokenizer.decode([plain[0]]) == " A"
    assert tiny_lm.tokenizer.decode([chat[1]]) == "B"


def test_split_matches_joint_tokenization(tiny_lm) -> None:
    tok = tiny_lm.tokenizer
    ctx, cont = split_context_continuation(tok, "Question: Q?\nAnswer:", " carbon dioxide")
    assert ctx + cont == tok("Question: Q?\nAnswer: carbon dioxide", add_special_tokens=False).input_ids
    assert tok.decode(cont) == " carbon dioxide"


def test_trailing_space_moves_to_continuation(tiny_lm) -> None:
    ctx, cont = split_context_continuation(tiny_lm.tokenizer, "Answer: ", "whale")
    assert tiny_lm.tokenizer.decode(ctx) == "Answer:"
    assert tiny_lm.tokenizer.decode(cont) == " whale"


def test_chat_template_wraps_question(tiny_lm) -> None:
    cfg = ScoringConfig(chat_template=True)
    text = cloze_context(ITEM, cfg, tiny_lm.tokenizer)
    assert "Which is a mammal?" in text and text.endswith("<|im_start|>assistant\n")
    assert cloze_continuations(ITEM, cfg) == ["whale", "shark", "trout"]


@pytest.mark.parametrize("kwargs, match", [
    ({"rule": "logit"}, "rule"),
    ({"question_template": "Q: {q}"}, "question_template"),
])
def test_config_rejects_bad_values(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ScoringConfig(**kwargs)


def test_config_name_and_record() -> None:
    cfg = ScoringConfig(rule="letter", chat_template=True)
    assert cfg.name == "letter+chat"
    assert cfg.to_dict()["question_template"] == "Question: {question}\nAnswer:"
