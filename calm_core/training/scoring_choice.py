"""`scoring = auto`: the paper's setting where the model can answer in it, decided on S_V.

    cfg, choice = resolve_scoring(cfg, lm, data.heldout)   # in the job, once the model is loaded
    choice.rule, choice.chat_template, choice.reason      # recorded in status.json (choices.scoring)

The paper calibrates an aligned model that answers with the option's letter, its head
(alpha = l, tau) over the whole vocabulary at the answer position: `letter` scoring under
the chat template, the `vocab` scope. That setting only means something for a model that
answers letters above chance: a model at chance gives option scores that carry no
knowledge, and calibrating them calibrates noise (the embedded SmolLM2-135M is at chance
with letters and above it with cloze). So `auto` scores the first CHOICE_ITEMS items of S_V
under letter + chat and takes the paper's setting when accuracy's 90% Wilson interval lies
above chance (the mean of 1/K), cloze otherwise. S_V, never a test split: it is the set
the run already uses to choose (the calibrated stop, the recommendation). Its labels are
read, as TS and the calibrated stop read them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

from calm_core.calibration.selective_summary import wilson
from calm_core.scoring.prompts import ScoringConfig
from calm_core.scoring.scorer import Scorer

AUTO = "auto"
CHOICE_ITEMS = 40  # S_V items scored to decide: enough for a Wilson interval to clear 1/4 at 60% accuracy
PAPER_SETTING = ("letter", True)  # (rule, chat template)
FALLBACK = ("cloze", False)
AUTO_NOTE = (
    f"auto: when the run starts, the first {CHOICE_ITEMS} S_V items are scored under letter answers and the chat "
    "template; above chance by a 90% interval, the run takes that setting (the paper's, with the head over the "
    "whole vocabulary), else cloze. The run's Monitor page and status.json say which and why."
)


@dataclass(frozen=True)
class ScoringChoice:
    """The rule and chat template a run uses, and why (with the figures when measured)."""

    rule: str
    chat_template: bool
    reason: str
    measured_on: int = 0  # S_V items scored to decide (0: given, not measured)
    accuracy: float | None = None
    accuracy_low: float | None = None  # the 90% Wilson interval's lower end
    chance: float | None = None  # the mean of 1/K over those items

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def decide(correct: Sequence[bool], n_options: Sequence[int]) -> ScoringChoice:
    """The choice from letter + chat answers on S_V: the paper's setting when accuracy's
    interval clears chance, cloze otherwise."""
    n = len(correct)
    acc = wilson(int(sum(correct)), n)
    chance = float(np.mean([1.0 / k for k in n_options])) if n else float("nan")
    figures = f"{int(sum(correct))} of {n} S_V items right under letter + chat ({acc.value:.2f}, 90% interval "
    figures += f"{acc.low:.2f}-{acc.high:.2f}) against chance {chance:.2f}"
    above = n > 0 and acc.low > chance
    rule, chat = PAPER_SETTING if above else FALLBACK
    reason = (
        f"the paper's setting (letter answers, chat template): {figures}"
        if above
        else f"cloze: letters are not above chance ({figures}), so the letter scores would carry no knowledge"
    )
    return ScoringChoice(rule, chat, reason, n, acc.value, acc.low, chance)


def measure(lm: Any, heldout: Sequence[Any], limit: int = CHOICE_ITEMS) -> ScoringChoice:
    """Score the first `limit` S_V items under letter + chat and decide."""
    items = list(heldout[:limit])
    scores = Scorer.of(lm, progress=False).score(items, ScoringConfig(rule="letter", chat_template=True))
    correct = [bool(p == g) for p, g in zip(scores.predictions, scores.gold, strict=True)]
    return decide(correct, [len(item.choices) for item in items])


def resolve_scoring(cfg: Any, lm: Any, heldout: Sequence[Any], run: Any = None) -> tuple[Any, ScoringChoice]:
    """(the config with `scoring` resolved, the choice). A given rule is kept as given; a
    resolved one is written into `run`'s config.json (RunDir.record_resolved_train), so the
    run's config is the one it really has."""
    if cfg.scoring != AUTO:
        return cfg, ScoringChoice(cfg.scoring, cfg.chat_template, "set (--scoring)")
    if cfg.task != "mcqa":  # open answers are scored by their own tokens: no option rule to choose
        choice = ScoringChoice(FALLBACK[0], cfg.chat_template, "open answers: no option rule")
    else:
        choice = measure(lm, heldout)
    resolved = dataclasses.replace(cfg, scoring=choice.rule, chat_template=choice.chat_template)
    if run is not None:
        run.record_resolved_train(resolved.to_dict())
    return resolved, choice
