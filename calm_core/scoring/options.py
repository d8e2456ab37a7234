"""Option scores: per item, one score per option (N x K, ragged K), what every variant,
metric and calibrator reads, and the per-item predictions file they are stored in.

    scores = Scorer.of(lm).score(items, ScoringConfig(rule="cloze"))   # scoring.scorer
    scores.logits      # (N, K_max) float64, -inf where an item has fewer options
    scores.probs()     # softmax over each item's own options
    scores.predictions # argmax per item
    scores.features    # (N, d): h per item, with capture=Capture.FEATURES (scoring.features)
    back = read_scores(path)   # a predictions file (runs.layout.write_predictions) as OptionScores

How the scores are computed (batches, the fast paths, truncation, the head) is the
scorer's (`scoring.scorer`); this module holds what they are once computed, and
`apply_option_head`, which turns them into a head's calibrated scores without another
forward pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from calm_core.calibration import metrics
from calm_core.calibration.head_base import Head
from calm_core.scoring.features import feature_columns, stored_features


@dataclass
class OptionScores:
    """Per-item option scores from one model under one scoring rule."""

    ids: list[str]
    logits: np.ndarray  # (N, K_max) float64; -inf pads items with fewer options
    gold: np.ndarray  # (N,) int
    scoring: dict[str, Any]  # ScoringConfig.to_dict(), recorded with every result
    model: dict[str, Any] = field(default_factory=dict)  # LoadedModel.info subset
    truncated: int = 0  # items cut from the left to fit the model's context (fit_cloze_item)
    context_length: int | None = None  # the model's context in tokens (context_limit); None: unknown, nothing cut
    features: np.ndarray | None = None  # (N, d) float32: h per item (scoring.features); None: not captured
    option_features: np.ndarray | None = None  # (N, K_max, d) float32, NaN pads: each option's mean state (cloze)

    def __post_init__(self) -> None:
        if self.logits.ndim != 2 or len(self.logits) != len(self.gold) or len(self.gold) != len(self.ids):
            raise ValueError(f"Expected logits (N, K) with N = len(gold) = len(ids), but got {self.logits.shape}")
        if self.features is not None and (self.features.ndim != 2 or len(self.features) != len(self.ids)):
            raise ValueError(f"Expected features (N, d) with N = {len(self.ids)}, but got {self.features.shape}")
        if self.option_features is not None and self.option_features.shape[:2] != self.logits.shape:
            raise ValueError(
                f"Expected option features (N, K_max, d) with (N, K_max) = {self.logits.shape}, "
                f"but got {self.option_features.shape}"
            )

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def n_choices(self) -> np.ndarray:
        counts: np.ndarray = np.isfinite(self.logits).sum(axis=1)
        return counts

    @property
    def predictions(self) -> np.ndarray:
        best: np.ndarray = np.argmax(self.logits, axis=1)
        return best

    def probs(self, temperature: float = 1.0) -> np.ndarray:
        """Option probabilities softmax(z / T) over each item's own options."""
        return metrics.softmax(self.logits / temperature)

    def to_frame(self) -> Any:
        """Per-item table (id, gold, prediction, n_choices, logits, probs) for Parquet, and
        the features in float16 where they were captured (scoring.features)."""
        import pandas as pd

        probs = self.probs()
        return pd.DataFrame(
            {
                "id": self.ids,
                "gold": self.gold,
                "prediction": self.predictions,
                "n_choices": self.n_choices,
                "logits": [row[np.isfinite(row)].tolist() for row in self.logits],
                "probs": [p[: int(k)].tolist() for p, k in zip(probs, self.n_choices, strict=True)],
                **feature_columns(self.features, self.option_features, self.n_choices),
            }
        )

    @classmethod
    def from_frame(cls, frame: Any, scoring: dict[str, Any], model: dict[str, Any] | None = None) -> "OptionScores":
        """`to_frame`'s table back: raw logits, gold, ids and (None where the table has
        none) the features, in the table's row order."""
        rows = [np.asarray(r, dtype=np.float64) for r in frame["logits"]]
        features, option_features = stored_features(frame)
        return cls(
            list(frame["id"]),
            pad_ragged(rows),
            frame["gold"].to_numpy(dtype=np.int64),
            scoring,
            model or {},
            features=features,
            option_features=option_features,
        )


def read_scores(path: str | Path, scoring: dict[str, Any] | None = None) -> OptionScores:
    """A per-item predictions file (`runs.layout.write_predictions`: eval/<variant>/<dataset>.parquet
    of `calm eval --save-preds` or a run) as OptionScores: the raw logits, gold and ids in
    the file's order, and its features, None in a file without them: what a calibrator
    is fitted or refitted on without the model. `scoring`: the rule to record (the file
    does not hold it). A run's files read through `RunDir.read_predictions` then
    `OptionScores.from_frame` say which file is damaged."""
    import pandas as pd

    return OptionScores.from_frame(pd.read_parquet(path), scoring or {})


def pad_ragged(rows: Sequence[np.ndarray]) -> np.ndarray:
    """Stack rows of different lengths into (N, K_max), padding with -inf."""
    k_max = max(len(r) for r in rows)
    out = np.full((len(rows), k_max), -np.inf, dtype=np.float64)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def apply_option_head(logits: np.ndarray, head: Head | None, features: np.ndarray | None = None) -> np.ndarray:
    """`head.on_options` on option scores (N, K_max) already computed, float64 out: the
    same numbers as scoring with a head that acts on options, without another forward
    pass. The identity (a copy) without a head or for one that acts on tokens. The
    scores go to the head's device and back, so a head on the GPU works too. A head
    that reads hidden states (the adaptive scope) needs the items' `features` (N, d)."""
    if head is None:
        return logits.astype(np.float64)  # a copy, as with a head
    device = next(head.parameters()).device
    with torch.inference_mode():
        z = torch.from_numpy(logits).to(device)  # (N, K_max)
        h = torch.from_numpy(np.asarray(features, dtype=np.float32)).to(device) if features is not None else None
        return head.on_options(z, features=h).double().cpu().numpy().copy()
