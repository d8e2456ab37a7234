"""Is a free-form answer right? Normalised exact match and token F1 against aliases.

The rule is the SQuAD / TriviaQA evaluation script's, written out so it is recorded:

    normalize_answer(text):
        1. lower case
        2. remove punctuation (every character in `string.punctuation`, plus the
           typographic quotes and dashes ‘ ’ “ ” – —)
        3. remove the articles "a", "an", "the" as whole words
        4. collapse whitespace to single spaces and strip

    exact_match(pred, aliases) = 1 if normalize(pred) == normalize(alias) for some alias
    token_f1(pred, aliases)    = max over aliases of the F1 between the normalised
                                 token multisets (precision = overlap / |pred tokens|,
                                 recall = overlap / |alias tokens|)

An empty prediction matches nothing (its F1 is 0). Example: "The Eiffel Tower!" and
"eiffel tower" both normalise to "eiffel tower".
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Iterable

_PUNCTUATION = set(string.punctuation) | set("\u2018\u2019\u201c\u201d\u2013\u2014")
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """Lower case, punctuation and articles removed, whitespace collapsed (see module doc)."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, aliases: Iterable[str]) -> bool:
    """True when the normalised prediction equals some normalised alias (non-empty)."""
    pred = normalize_answer(prediction)
    return bool(pred) and any(pred == normalize_answer(a) for a in aliases)


def _f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    overlap = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(pred_tokens), overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, aliases: Iterable[str]) -> float:
    """Best token-level F1 of the normalised prediction against any alias, in [0, 1]."""
    pred = normalize_answer(prediction).split()
    if not pred:
        return 0.0
    return max((_f1(pred, normalize_answer(a).split()) for a in aliases), default=0.0)
