"""Features at scoring time: the hidden state a calibrator reads beside the option scores.

    scores = Scorer.of(lm).score(items, ScoringConfig(rule="cloze"), capture=Capture.FEATURES)
    scores.features         # (N, d) float32: per item, h
    scores.option_features  # (N, K_max, d) float32 with Capture.OPTION_FEATURES (cloze); NaN pads
    write_predictions(root, "base", name, predictions_frame(scores))   # float16, in the rows
    back = read_scores(predictions_path(root, "base", name))           # .features row-aligned

h is the final-layer hidden state at the item's last prompt token after the model's final
norm: the vector the LM head turns into the logits that score the item (letter: the
answer position, whose letter logits are the option scores; cloze: the position that
predicts every option's first token). An input-adaptive calibrator (a temperature per
question, tau(h)) reads it aligned with the item's option logits and gold. An option's
feature (cloze) is the mean of the states at the positions whose logits score its tokens:
its context's last token and its own tokens but the last (the last is only predicted).
Both are read from the forward pass that scores the options (`logprobs.logits_and_states_at`,
`forward.head_inputs`), never a second one, so capture changes no score by a bit; with a
FrozenPrefixModel the cached bottom layers feed the top ones as always and the states
are the top layers' output. The states are those of the model as scored (adapter on when
it is on); a calibration head acting on tokens changes logits, not states.

Stored in float16 with the per-item predictions (`OptionScores.to_frame`, written to
`eval/<variant>/<dataset>.parquet`): column `features`, a list of d halffloats per row,
and `option_features`, n_choices x d halffloats per row (option-major, ragged like the
logits). In the same file as the rows, they cannot go stale or out of order against them
as a sibling file could; half precision halves the file and keeps ~3 significant digits,
far below what a calibrator fitted on tens of items resolves. A file without the columns
(written before features existed, or without capture) reads with None.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

import numpy as np
import torch

log = logging.getLogger(__name__)

FEATURES = "features"  # predictions column: h per row, d float16
OPTION_FEATURES = "option_features"  # predictions column: n_choices x d float16 per row
STORED_DTYPE = np.float16
_FLOAT16_MAX = float(np.finfo(np.float16).max)


class FeatureCollector:
    """Per item, in item order whichever order the batches run in: its prompt state h and,
    when `options`, each option's mean state. Kept as tensors on the model's device and
    copied to the CPU once at the end, not once per option."""

    def __init__(self, n_choices: Sequence[int], options: bool) -> None:
        self.n_choices = [int(k) for k in n_choices]
        self.options = options
        self._prompt: list[torch.Tensor | None] = [None] * len(self.n_choices)
        self._option: list[list[torch.Tensor | None]] = [[None] * k for k in self.n_choices] if options else []

    def add_prompts(self, items: Sequence[int], states: torch.Tensor) -> None:
        """The prompt states of `items`, (len(items), d): the letter rule's answer positions."""
        for row, i in enumerate(items):
            self._prompt[i] = states[row].detach().float()

    def add_option(self, item: int, k: int, states: torch.Tensor) -> None:
        """Option k's states at the positions that score its tokens, (c, d), the first being
        its context's last token: h from the first option seen (an item's options share
        their context, `truncation.fit_cloze_item`), the mean for the option."""
        states = states.detach().float()
        if self._prompt[item] is None:
            self._prompt[item] = states[0].clone()  # a view would keep the whole batch's states alive
        if self.options:
            self._option[item][k] = states.mean(dim=0)

    def result(self) -> tuple[np.ndarray, np.ndarray | None]:
        """(features (N, d), option features (N, K_max, d) with NaN pads, or None), float32."""
        if any(h is None for h in self._prompt):
            raise RuntimeError("Expected a prompt state for every item; scoring skipped some")
        prompt = torch.stack(self._prompt).cpu().numpy().astype(np.float32)  # type: ignore[arg-type]
        if not self.options:
            return prompt, None
        out = np.full((len(prompt), max(self.n_choices), prompt.shape[1]), np.nan, dtype=np.float32)
        for i, row in enumerate(self._option):
            out[i, : len(row)] = torch.stack(row).cpu().numpy()  # type: ignore[arg-type]
        return prompt, out


def feature_columns(
    features: np.ndarray | None, option_features: np.ndarray | None, n_choices: np.ndarray
) -> dict[str, list[np.ndarray]]:
    """The predictions columns that hold the features, float16 (see the module docstring);
    empty without features."""
    columns: dict[str, list[np.ndarray]] = {}
    if features is not None:
        columns[FEATURES] = list(_half(features))
    if option_features is not None:
        half = _half(option_features)
        columns[OPTION_FEATURES] = [row[: int(k)].reshape(-1) for row, k in zip(half, n_choices, strict=True)]
    return columns


def stored_features(frame: Any) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(features (N, d), option features (N, K_max, d) NaN-padded) of a predictions frame,
    float32, in its row order; None for a column the file does not hold."""
    if FEATURES not in frame.columns:
        return None, None
    features = _stack(frame[FEATURES])
    if OPTION_FEATURES not in frame.columns:
        return features, None
    n_choices = frame["n_choices"].to_numpy(dtype=np.int64)
    d = features.shape[1]
    out = np.full((len(frame), int(n_choices.max()), d), np.nan, dtype=np.float32)
    for i, (row, k) in enumerate(zip(frame[OPTION_FEATURES], n_choices, strict=True)):
        out[i, :k] = np.asarray(row, dtype=np.float32).reshape(k, d)
    return features, out


def _stack(column: Any) -> np.ndarray:
    return np.stack([np.asarray(row, dtype=np.float32) for row in column])


def _half(values: np.ndarray) -> np.ndarray:
    """float16, with anything beyond its range clipped to it (said once on stderr): an
    inf feature would make every calibrator fit on it NaN. NaN pads stay NaN."""
    finite = values[np.isfinite(values)]
    if finite.size and float(np.abs(finite).max()) > _FLOAT16_MAX:
        log.warning(
            "warning: hidden-state features beyond float16's range (|x| up to %.3g) were clipped to +-%.0f when stored",
            np.abs(finite).max(),
            _FLOAT16_MAX,
        )
        values = np.clip(values, -_FLOAT16_MAX, _FLOAT16_MAX)
    return values.astype(STORED_DTYPE)
