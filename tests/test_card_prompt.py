"""The prompt the exported cards' code builds is the studio's own (scoring/prompts.py).

Both cards (the merged folder's transformers code, merged_card.py, and its "Serve it" code
through an OpenAI-compatible server, served_card.py) define `prompt(question, options)`
under the letter rule and a `context` under cloze. Each card's code is parsed, those parts
run against a stand-in tokenizer, and the text compared with `letter_prompt` and
`cloze_context` for plain and chat prompts, including a question template without a cue
line and an instruction holding quotes and braces (which an f-string in the code would
break on).
"""

from __future__ import annotations

import ast
from typing import Any

import pytest

from calm_core.data.schema import MCItem
from calm_core.export.merged_card import merged_snippet
from calm_core.export.served_card import served_snippet
from calm_core.scoring.prompts import ScoringConfig, cloze_context, letter_prompt

ITEM = MCItem(id="q0", question="What is 2 + 2?", choices=["3", "4", "5"], answer=1)
CARDS = {"merged": merged_snippet, "served": served_snippet}
CONFIGS = {
    "plain": {},
    "plain, no cue line": {"question_template": "Q: {question} A:"},
    "chat": {"chat_template": True},
    "chat, quoted instruction": {"chat_template": True, "letter_instruction": 'Say "A" or {B}\\n, nothing else.'},
}


class ChatTokenizer:
    """The two things the prompt code asks of a tokenizer: a chat template, applied."""

    chat_template = "stand-in"

    def apply_chat_template(self, messages: list[dict[str, str]], tokenize: bool, add_generation_prompt: bool) -> str:
        assert not tokenize and add_generation_prompt
        return "".join(f"<|{m['role']}|>{m['content']}<|end|>" for m in messages) + "<|assistant|>"


def record(cfg: ScoringConfig) -> dict[str, Any]:
    """What the snippets read of an export's record: the scoring rule and a fold."""
    check = {"items": ["What is the capital of France?"], "probabilities": [[0.25] * 4], "tolerance": 1e-4}
    merged = {"fold": "temperature", "letter_shifts": None, "shift_file": "shift.safetensors", "temperature": 1.5}
    return {"scoring": cfg.to_dict(), "merged": {**merged, "tau": None, "shift": None, "check": check}}


def card_names(code: str) -> dict[str, Any]:
    """The card's TEMPLATE line and `prompt` function run, with the stand-in tokenizer."""
    tree = ast.parse(code)
    keep = [
        node
        for node in tree.body
        if (isinstance(node, ast.Assign) and "TEMPLATE" in ast.unparse(node.targets[0]))
        or (isinstance(node, ast.FunctionDef) and node.name == "prompt")
    ]
    names: dict[str, Any] = {"tokenizer": ChatTokenizer()}
    exec(compile(ast.Module(body=keep, type_ignores=[]), "<card>", "exec"), names)
    names["calibrated_context"] = _context_expression(tree)
    return names


def _context_expression(tree: ast.Module) -> str | None:
    """The expression `calibrated` assigns to `context` (cloze cards), as source."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "context":
            return ast.unparse(node.value)
    return None


@pytest.mark.parametrize("card", list(CARDS))
@pytest.mark.parametrize("setting", list(CONFIGS))
def test_the_cards_letter_prompt_is_the_studios(card: str, setting: str) -> None:
    cfg = ScoringConfig(rule="letter", **CONFIGS[setting])
    names = card_names(CARDS[card](record(cfg)))
    assert names["prompt"](ITEM.question, ITEM.choices) == letter_prompt(ITEM, cfg, ChatTokenizer())


@pytest.mark.parametrize("card", list(CARDS))
@pytest.mark.parametrize("setting", list(CONFIGS))
def test_the_cards_cloze_context_is_the_studios(card: str, setting: str) -> None:
    cfg = ScoringConfig(rule="cloze", **CONFIGS[setting])
    names = card_names(CARDS[card](record(cfg)))
    context = eval(names["calibrated_context"], {**names, "question": ITEM.question})
    assert context == cloze_context(ITEM, cfg, ChatTokenizer())
