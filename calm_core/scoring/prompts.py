"""The scoring rule as data: how an MCQA item becomes token ids to score.

Two rules, recorded with every result (`ScoringConfig.to_dict()`):

- `cloze`  (default): the log-likelihood of each choice text as the continuation of
  `Question: {question}\\nAnswer:` with one space before the choice (the
  lm-evaluation-harness ARC formulation), summed over the choice's tokens.
  `cloze_norm` divides that sum by the choice's token count (per-token mean; the
  harness's `acc_norm` divides by bytes instead, which we do not use).
- `letter`: the choices listed as `A. ...`, the prompt ending `Answer:`, the score of
  option k = the logit of letter k's token at the last position.

With `chat_template=True` the question (and for `letter` the listed choices) becomes a
user message and the model's own chat template adds the assistant turn; the
continuation (choice text or letter) then follows the template without a leading space.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

from calm_core.data.schema import MCItem

RULES = ("cloze", "cloze_norm", "letter")
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass(frozen=True)
class ScoringConfig:
    """Everything that decides the option scores. Part of every result's record."""

    rule: str = "cloze"  # "cloze" | "cloze_norm" | "letter"
    chat_template: bool = False  # wrap the question in the model's chat template
    question_template: str = "Question: {question}\nAnswer:"  # plain (non-chat) prompt
    choice_delimiter: str = " "  # between "Answer:" and the choice/letter (plain prompts)
    letter_instruction: str = "Answer with the letter of the correct option."  # chat letter prompts

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"Expected `rule` to be one of {RULES}, but got {self.rule!r}")
        if "{question}" not in self.question_template:
            raise ValueError("Expected `question_template` to contain '{question}', but it does not")

    @property
    def is_cloze(self) -> bool:
        return self.rule in ("cloze", "cloze_norm")

    @property
    def name(self) -> str:
        """Short label used in tables: e.g. `cloze`, `letter+chat`."""
        return self.rule + ("+chat" if self.chat_template else "")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def chat_prompt(tokenizer: Any, user_text: str) -> str:
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("Expected the tokenizer to have a chat template for chat_template=True, but it has none")
    prompt: str = tokenizer.apply_chat_template(
        [{"role": "user", "content": user_text}], tokenize=False, add_generation_prompt=True
    )
    return prompt


def cloze_context(item: MCItem, cfg: ScoringConfig, tokenizer: Any) -> str:
    """The text that every choice of `item` continues."""
    if cfg.chat_template:
        return chat_prompt(tokenizer, item.question)
    return cfg.question_template.format(question=item.question)


def cloze_continuations(item: MCItem, cfg: ScoringConfig) -> list[str]:
    """One continuation string per choice (leading delimiter included for plain prompts)."""
    delimiter = "" if cfg.chat_template else cfg.choice_delimiter
    return [delimiter + choice for choice in item.choices]


def letter_prompt(item: MCItem, cfg: ScoringConfig, tokenizer: Any) -> str:
    """Question, the lettered choices, and the cue after which a letter is expected."""
    listed = "\n".join(f"{LETTERS[k]}. {choice}" for k, choice in enumerate(item.choices))
    if cfg.chat_template:
        return chat_prompt(tokenizer, f"{item.question}\n{listed}\n{cfg.letter_instruction}")
    body = cfg.question_template.format(question=item.question)
    head, _, tail = body.rpartition("\n")  # put the choices before the "Answer:" cue
    return f"{head}\n{listed}\n{tail}" if head else f"{body}\n{listed}"


def letter_token_ids(tokenizer: Any, n_choices: int, cfg: ScoringConfig) -> list[int]:
    """The single token id of each option letter as it would follow the prompt.

    Plain prompts end in "Answer:", so the letter comes with the delimiter (" A"); chat
    prompts end with the assistant header's newline, so the bare letter follows.
    """
    if n_choices > len(LETTERS):
        raise ValueError(f"Expected at most {len(LETTERS)} choices for letter scoring, but got {n_choices}")
    prefix = "" if cfg.chat_template else cfg.choice_delimiter
    ids = []
    for letter in LETTERS[:n_choices]:
        encoded = tokenizer(prefix + letter, add_special_tokens=False).input_ids
        if len(encoded) != 1:
            raise ValueError(f"Expected {prefix + letter!r} to be one token, but the tokenizer gives {encoded}")
        ids.append(encoded[0])
    return ids


def split_context_continuation(tokenizer: Any, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """Token ids of context and continuation, tokenized jointly as the harness does.

    Encoding `context + continuation` once and cutting at len(encode(context)) keeps
    merges across the boundary identical to lm-evaluation-harness, so per-item
    log-likelihoods agree with it. Trailing spaces move from context to continuation.
    """
    n_spaces = len(context) - len(context.rstrip(" "))
    if n_spaces:
        context, continuation = context[:-n_spaces], context[-n_spaces:] + continuation
    whole = tokenizer(context + continuation, add_special_tokens=False).input_ids
    context_ids = tokenizer(context, add_special_tokens=False).input_ids
    return whole[: len(context_ids)], whole[len(context_ids) :]


def describe(cfg: ScoringConfig, items: Sequence[MCItem], tokenizer: Any) -> str:
    """The first item rendered under `cfg`, for docs and the studio's 'what is scored' box."""
    item = items[0]
    if cfg.is_cloze:
        context = cloze_context(item, cfg, tokenizer)
        return "\n".join(f"{context}[{c}]" for c in cloze_continuations(item, cfg))
    return letter_prompt(item, cfg, tokenizer) + "[letter]"
