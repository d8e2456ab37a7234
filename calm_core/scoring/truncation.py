"""Fitting items to the model's context: the token ids scoring reads for each item, cut
from the left when an item is longer than the model can read.

`cloze_requests` (per item, per option: context ids, continuation ids) and
`letter_prompt_ids` (one prompt per item) are what scoring and the training objectives
feed the model. Items longer than the model's context (`context_limit`) are cut from
the left, as lm-evaluation-harness does: the start of the prompt goes, the same tokens
for every option of an item (so they still share their prefix), until prompt + the
longest option fits (`fit_cloze_item`, `fit_letter_item`). An item whose options cannot
fit at all raises DataError. `warn_truncated` says so once per dataset and process.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

from calm_core.data.schema import DataError, MCItem
from calm_core.scoring.prompts import (
    ScoringConfig,
    cloze_context,
    cloze_continuations,
    letter_prompt,
    split_context_continuation,
)

log = logging.getLogger(__name__)

SANE_MAX_LENGTH = 10_000_000  # tokens: transformers puts 1e30 in model_max_length when a tokenizer does not know
_CONTEXT_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "n_ctx",
)  # Llama-likes, GPT-2, GPT-J; the harness reads these
_WARNED: set[tuple[Any, ...]] = set()  # (dataset, limit, truncated ids) already reported by this process


def context_limit(model: Any, tokenizer: Any = None) -> int | None:
    """The most tokens `model` reads in one sequence: its config's max_position_embeddings
    (n_positions / n_ctx for GPT-2-likes), else the tokenizer's model_max_length when that
    is a real number; None when neither knows, and then nothing is cut. A PEFT model or a
    FrozenPrefixModel answers for its base model (both expose `.config`)."""
    config = getattr(model, "config", None)
    text = config
    if config is not None and hasattr(config, "get_text_config"):  # multimodal: the LM part
        text = config.get_text_config()
    for key in _CONTEXT_KEYS:
        value = getattr(text, key, None)
        if isinstance(value, int) and value > 0:
            return value
    length = getattr(tokenizer, "model_max_length", None)
    return int(length) if isinstance(length, int) and 0 < length < SANE_MAX_LENGTH else None


def fit_cloze_item(
    item_id: str, requests: list[tuple[list[int], list[int]]], limit: int | None
) -> tuple[list[tuple[list[int], list[int]]], bool]:
    """One item's (context, option) pairs with the contexts cut from the left so that the
    model reads at most `limit` tokens per option; (pairs, whether anything was cut).

    The model reads (context + option)[:-1], so the cut is len(context) + len(longest
    option) - 1 - limit tokens from the start of the prompt. lm-evaluation-harness cuts
    each option on its own; here every option of the item loses the same tokens, so
    their contexts stay identical and the prefix-shared path still applies.

    An option that does not fit even after one token of context (it alone is longer than
    `limit`) raises DataError naming the item, rather than skipping the item: a skip would
    compare models (or variants of one model) on different item sets, and a model with a
    shorter context would quietly lose its longest questions. The person decides: drop
    or shorten the item, or use a model with a longer context.
    """
    if limit is None:
        return requests, False
    cut = max(0, max(len(context) + len(cont) - 1 for context, cont in requests) - limit)
    if cut == 0:
        return requests, False
    if cut >= min(len(context) for context, _ in requests):  # no context token left to predict an option's first token
        longest = max(len(cont) for _, cont in requests)
        raise DataError(
            f"Expected every option of item {item_id!r} to fit in the model's context of {limit} "
            f"tokens, but its longest option is {longest} tokens; drop or shorten the item, "
            "or use a model with a longer context"
        )
    return [(context[cut:], cont) for context, cont in requests], True


def fit_letter_item(item_id: str, prompt: list[int], limit: int | None, listed: int) -> tuple[list[int], bool]:
    """A letter prompt cut from the left to `limit` tokens; (ids, whether anything was cut).

    The letter is read at the prompt's last position, so the prompt itself must fit. The
    last `listed` tokens (the lettered options and the answer cue) must survive: a prompt
    that lost the text of option A cannot be answered "A", so that raises DataError, as
    an option too long for cloze scoring does (`fit_cloze_item` says why not skip)."""
    if limit is None or len(prompt) <= limit:
        return prompt, False
    if listed > limit:
        raise DataError(
            f"Expected the lettered options of item {item_id!r} to fit in the model's context of "
            f"{limit} tokens, but they take {listed} tokens; drop or shorten the item, "
            "or use a model with a longer context"
        )
    return prompt[-limit:], True


def _listed_length(item: MCItem, prompt: str, tokenizer: Any) -> int:
    """Tokens after the question in a letter prompt (the options and the cue): the part
    a left cut must not reach. Counted on its own, so within a token of the real split."""
    start = prompt.rfind(item.question)
    if start < 0:  # a template that rewrites the question: protect only the cue's last token
        return 1
    return len(tokenizer(prompt[start + len(item.question) :], add_special_tokens=False).input_ids)


def fitted_letter_prompts(
    items: Sequence[MCItem], cfg: ScoringConfig, tokenizer: Any, limit: int | None
) -> tuple[list[list[int]], list[str]]:
    """Each item's letter prompt ids, cut to fit `limit` (`fit_letter_item`), and the ids of the items cut."""
    prompts, truncated = [], []
    for item in items:
        text = letter_prompt(item, cfg, tokenizer)
        ids = tokenizer(text, add_special_tokens=False).input_ids
        listed = _listed_length(item, text, tokenizer) if limit is not None and len(ids) > limit else 0
        ids, cut = fit_letter_item(item.id, ids, limit, listed)
        prompts.append(ids)
        if cut:
            truncated.append(item.id)
    return prompts, truncated


def fitted_cloze_requests(
    items: Sequence[MCItem],
    cfg: ScoringConfig,
    tokenizer: Any,
    limit: int | None,
) -> tuple[list[list[tuple[list[int], list[int]]]], list[str]]:
    """`cloze_requests` cut to fit `limit` (`fit_cloze_item`), and the ids of the items cut."""
    requests, truncated = [], []
    for item in items:
        context = cloze_context(item, cfg, tokenizer)
        pairs = [split_context_continuation(tokenizer, context, c) for c in cloze_continuations(item, cfg)]
        pairs, cut = fit_cloze_item(item.id, pairs, limit)
        requests.append(pairs)
        if cut:
            truncated.append(item.id)
    return requests, truncated


def truncated_item_ids(items: Sequence[MCItem], cfg: ScoringConfig, tokenizer: Any, limit: int | None) -> list[str]:
    """The ids of the items that scoring under `cfg` cuts to fit `limit` tokens; DataError
    for one that cannot fit. Tokenizes only: a trainer can check its sets before the first
    step instead of failing on the batch that draws such an item."""
    fitted = fitted_cloze_requests if cfg.is_cloze else fitted_letter_prompts
    return fitted(items, cfg, tokenizer, limit)[1]


def warn_truncated(truncated: Sequence[str], n_items: int, limit: int | None, dataset: str | None = None) -> None:
    """One stderr line when items were cut to fit the context, once per dataset and process:
    a trainer's periodic evaluation scores the same set many times and should say it once."""
    key = (dataset, limit, tuple(truncated))
    if not truncated or key in _WARNED:
        return
    _WARNED.add(key)
    of = f" of {dataset}" if dataset else ""
    log.warning(
        "warning: %d of %d items%s were longer than the model's context (%d tokens) and were cut from the left, "
        "as lm-evaluation-harness does",
        len(truncated),
        n_items,
        of,
        limit,
    )


def letter_prompt_ids(
    items: Sequence[MCItem], cfg: ScoringConfig, tokenizer: Any, max_length: int | None = None
) -> list[list[int]]:
    """The token ids of each item's letter prompt (its answer-position logits score the
    letters), each cut from the left to `max_length` tokens (`fit_letter_item`)."""
    return fitted_letter_prompts(items, cfg, tokenizer, max_length)[0]


def cloze_requests(
    items: Sequence[MCItem], cfg: ScoringConfig, tokenizer: Any, max_length: int | None = None
) -> list[list[tuple[list[int], list[int]]]]:
    """Per item, per choice: (context ids, continuation ids), tokenized as the harness does
    and cut from the left to fit `max_length` tokens (`fit_cloze_item`)."""
    return fitted_cloze_requests(items, cfg, tokenizer, max_length)[0]
