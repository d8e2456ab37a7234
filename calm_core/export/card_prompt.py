"""The prompt in the exported cards' code: one source for the merged folder's transformers
code (merged_card.py) and its "Serve it" code (served_card.py), so that both build the
studio's own prompt (scoring/prompts.py: `letter_prompt`, `cloze_context`) and cannot drift
apart. tests/test_card_prompt.py runs each card's prompt against the studio's.

Everything here returns Python source for a card: the `TEMPLATE, DELIMITER` line, the text
the model continues (`context_code`) and the letter rule's `prompt(question, options)`.
"""

from __future__ import annotations

from calm_core.scoring.prompts import ScoringConfig


def template_line(cfg: ScoringConfig) -> str:
    """The card's `TEMPLATE, DELIMITER = ...` line: the run's plain prompt and delimiter."""
    return f"TEMPLATE, DELIMITER = {cfg.question_template!r}, {cfg.choice_delimiter!r}  # the run's scoring rule"


def context_code(cfg: ScoringConfig, user_text: str = "question") -> str:
    """The expression of the text the model continues, `user_text` being the expression of
    the user's words: under a chat template, the model's template around them as one user
    message; else the run's TEMPLATE around them, as scoring/prompts.py does."""
    if cfg.chat_template:
        return (
            f'tokenizer.apply_chat_template([{{"role": "user", "content": {user_text}}}], tokenize=False, '
            "add_generation_prompt=True)"
        )
    return f"TEMPLATE.format(question={user_text})"


def letter_prompt_lines(cfg: ScoringConfig) -> list[str]:
    """`def prompt(question, options)`: the question, the options lettered A, B, ... and
    the cue, as `letter_prompt` builds them. The chat instruction goes in as a literal
    (repr), so quotes or braces in it are text, never code."""
    instruction = repr(cfg.letter_instruction)
    if cfg.chat_template:
        build = [f"    return {context_code(cfg, f'question + chr(10) + listed + chr(10) + {instruction}')}"]
    else:
        build = [
            f"    body = {context_code(cfg)}",
            '    head, _, cue = body.rpartition("\\n")  # the options go before the cue ("Answer:")',
            '    return f"{head}\\n{listed}\\n{cue}" if head else f"{body}\\n{listed}"',
        ]
    return [
        "def prompt(question, options):",
        '    listed = "\\n".join(f"{chr(65 + k)}. {option}" for k, option in enumerate(options))',
        *build,
    ]
