"""The score cache: a page's questions scored by a model, kept on disk beside the converted
models, so a page reads them back instead of scoring them again; Learn's quiz is filled
at set-up.

    from calm_core.scoring.score_cache import LEARN_QUIZ, cached_scores, quiz_items, score_quiz
    items = quiz_items(LEARN_QUIZ)
    scores, hit = cached_scores(model_dir, LEARN_QUIZ, items, lambda todo: score_quiz(lm, LEARN_QUIZ, todo))
    python -m calm_core.scoring.score_cache      # set-up: convert the embedded model, score Learn's quiz

Scoring even 40 questions on a laptop CPU takes longer than anyone waits for a page, and
the scores are a pure function of the model's files, the questions and the scoring rule.
So every page that shows a model's scores on a set of questions (`app/widgets/state.get_scores`)
reads them from `<cache>/scores/<model>/<questions>.json` when they are there and writes
them there when it had to score; `scripts/studio.sh` fills Learn's default quiz right
after converting the embedded model, so the first visit opens on stored scores.

A file holds its key (the model's `provenance.model_fingerprint`, a hash of the quiz's
items, the scoring rule and `FORMAT`) and is used only when every part matches, so a new
model, edited questions or another rule score again and replace it. JSON, never pickle:
a cache directory is writable by anything running as the user, and reading it must not
run code. A missing, damaged or mismatched file is a miss, never an error.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from calm_core.data.schema import MCItem
from calm_core.io import atomic_write_json
from calm_core.paths import cache_dir, safe_name
from calm_core.provenance import model_fingerprint
from calm_core.scoring.evaluate import load_mc_items
from calm_core.scoring.models import EMBEDDED_NAME, embedded_model_dir, load_model, named_model_dir
from calm_core.scoring.options import OptionScores, pad_ragged
from calm_core.scoring.progress import ProgressFn, Ticker
from calm_core.scoring.prompts import ScoringConfig
from calm_core.scoring.scorer import Scorer

FORMAT = 1  # bump when OptionScores' meaning or this file's layout changes: old files then miss


@dataclass(frozen=True)
class Quiz:
    """A page's questions: which dataset, how many (the seeded sample of `load_items`), scored how."""

    dataset: str
    rule: str = "cloze"
    limit: int = 40
    seed: int = 0

    @property
    def scoring(self) -> ScoringConfig:
        """The rule, with `+chat` (e.g. `letter+chat`) for the model's chat template."""
        return ScoringConfig(rule=self.rule.removesuffix("+chat"), chat_template=self.rule.endswith("+chat"))

    def file_name(self) -> str:
        return f"{safe_name(self.dataset)}-{safe_name(self.rule)}-n{self.limit}-s{self.seed}.json"


# 46% right at 82% confidence on the embedded model: see docs/results.md
LEARN_QUIZ = Quiz("builtin/chemical_symbols/test")


def items_digest(items: Sequence[MCItem]) -> str:
    """A hash of every field of every item, in order: edited questions or answers change it."""
    text = json.dumps([asdict(item) for item in items], sort_keys=True, ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]


def cache_key(model_dir: Path, quiz: Quiz, items: Sequence[MCItem]) -> dict[str, Any] | None:
    """What a stored file must match; None when the model's files cannot be fingerprinted
    (nothing is cached for a model whose identity is unknown)."""
    fingerprint = model_fingerprint(model_dir)
    if fingerprint is None:
        return None
    return {
        "format": FORMAT,
        "model": fingerprint,
        "items": items_digest(items),
        "scoring": quiz.scoring.to_dict(),
    }


def scores_root() -> Path:
    """Where stored scores live: beside the converted models, in the user's cache."""
    return cache_dir() / "scores"


def cache_path(model_dir: Path, quiz: Quiz) -> Path:
    return scores_root() / safe_name(Path(model_dir).name) / quiz.file_name()


def _encode(scores: OptionScores, key: dict[str, Any]) -> dict[str, Any]:
    """The scores as JSON: each item's finite logits only (JSON has no -inf padding)."""
    return {
        "key": key,
        "ids": list(scores.ids),
        "gold": [int(g) for g in scores.gold],
        "logits": [[float(x) for x in row[np.isfinite(row)]] for row in scores.logits],
        "scoring": scores.scoring,
        "model": scores.model,
        "truncated": int(scores.truncated),
        "context_length": scores.context_length,
    }


def _decode(data: dict[str, Any]) -> OptionScores:
    """`_encode`'s dict back; ValueError, TypeError or KeyError for anything malformed."""
    rows = [np.asarray(row, dtype=np.float64) for row in data["logits"]]
    if any(row.ndim != 1 or len(row) < 2 or not all(math.isfinite(x) for x in row) for row in rows):
        raise ValueError("Expected each item's logits as two or more finite numbers")
    return OptionScores(
        [str(i) for i in data["ids"]],
        pad_ragged(rows),
        np.asarray(data["gold"], dtype=np.int64),
        dict(data["scoring"]),
        dict(data.get("model") or {}),
        truncated=int(data.get("truncated") or 0),
        context_length=data.get("context_length"),
    )


def read_cached(path: Path, key: dict[str, Any]) -> OptionScores | None:
    """The stored scores when the file's key is `key`; None for a miss of any kind."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("key") != key:
            return None
        return _decode(data)
    except (OSError, ValueError, TypeError, KeyError):
        return None


def cached_scores(
    model_dir: Path,
    quiz: Quiz,
    items: Sequence[MCItem],
    score: Callable[[Sequence[MCItem]], OptionScores],
) -> tuple[OptionScores, bool]:
    """The quiz's scores from the cache, else `score(items)` stored for next time.
    Returns (scores, whether they came from the cache)."""
    key = cache_key(model_dir, quiz, items)
    path = cache_path(model_dir, quiz)
    if key is not None:
        stored = read_cached(path, key)
        if stored is not None:
            return stored, True
    scores = score(items)
    if key is not None:
        try:
            atomic_write_json(path, _encode(scores, key))
        except OSError:
            pass  # a read-only cache costs the next visit a rescore, not this one its scores
    return scores, False


def quiz_items(quiz: Quiz) -> list[MCItem]:
    """The quiz's questions (a seeded sample of its dataset): the content the key hashes."""
    return load_mc_items(quiz.dataset, quiz.limit, quiz.seed)


def score_quiz(lm: Any, quiz: Quiz, items: Sequence[MCItem], progress: bool | ProgressFn = True) -> OptionScores:
    """The quiz's items scored by a loaded model under the quiz's rule (what the cache stores)."""
    return Scorer.of(lm, progress=progress).score(list(items), quiz.scoring, dataset=quiz.dataset)


def prepare_learn_quiz(
    quiz: Quiz = LEARN_QUIZ, model_dir: Path | None = None, ticker: Ticker | None = None
) -> tuple[Path, bool]:
    """Set-up: `quiz` scored by the embedded model into the cache. Returns the cache file and
    whether it was already there (then the model is not even loaded). `ticker`: says
    what it does and, while it scores, how far it got (else a progress bar)."""
    model_dir = model_dir or embedded_model_dir()
    items = quiz_items(quiz)

    def score(todo: Sequence[MCItem]) -> OptionScores:
        if ticker is None:
            return score_quiz(load_model(EMBEDDED_NAME), quiz, todo)
        ticker.stage(f"loading the embedded model to score Learn's quiz once ({len(todo)} questions)")
        lm = load_model(EMBEDDED_NAME)
        ticker.stage("scoring Learn's quiz")
        return score_quiz(lm, quiz, todo, progress=ticker.progress("scoring Learn's quiz"))

    _, hit = cached_scores(model_dir, quiz, items, score)
    return cache_path(model_dir, quiz), hit


def main() -> int:
    """Convert the embedded model (a failure stops the set-up, as the studio needs it), then
    score Learn's quiz (a failure is only said: the page then scores it on its first visit).
    Both say what they do, and a line at least every `TICK_S` seconds while they do it."""
    with Ticker() as ticker:
        ticker.stage("checking the embedded model (converted from its GGUF once, about a minute the first time)")
        model_dir = named_model_dir(EMBEDDED_NAME, step=ticker.step)
        try:
            path, hit = prepare_learn_quiz(model_dir=model_dir, ticker=ticker)
        except Exception as exc:  # the studio still starts: the page scores the quiz itself
            print(f"embedded model: {model_dir.name}; Learn's quiz not scored ({type(exc).__name__}: {exc})")
            return 0
    print(f"embedded model: {model_dir.name}; Learn's quiz: {'already scored' if hit else 'scored'} ({path.name})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
