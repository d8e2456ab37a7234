"""Adaptive temperature scaling (ATS; Xie et al., EMNLP 2024): a temperature per question,
read from the model's hidden state.

    ats = AdaptiveTemperature.fit(logits, labels, features)   # features: (N, H) hidden states
    probs = ats.probs(logits, features)                        # softmax(z / tau(h)) per row
    ats.temperatures(features)                                  # the tau of each question

    tau(h) = softplus(w . x(h) + b) + TAU_FLOOR,   x(h) = (h - mean) @ projection.T

Why: one temperature cannot tell a question the model knows from one it does not, so a
temperature fitted where the model is right half the time cools a set it answers 86%
right (docs/results.md). A temperature per question can, and because each question's
logits are divided by one positive number its ranking of its options never changes:
accuracy is identical by construction, under letter and cloze scoring alike.

The fit set (S_V) is small and the hidden state is wide, so the features are reduced
and the weights shrunk, and both are chosen by cross-fitting on S_V rather than set by
hand: x(h) is the top `k` principal components of the standardised hidden states, scaled
to unit variance (`projection` folds the standardisation and the scaling in), and the
pair (k, weight decay) with the lowest held-out NLL over CV_FOLDS folds wins. k = 0 is in
the grid: it is plain temperature scaling, so when the features do not help on held-out
folds ATS says so by becoming TS. Below MIN_ITEMS items it is refused, as TS is below its
minimum.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import torch

from calm_core.calibration import metrics
from calm_core.calibration.adaptive_head import TAU_FLOOR, AdaptiveHead
from calm_core.calibration.head_base import Head
from calm_core.calibration.posthoc.base import (
    PosthocCalibrator,
    check_fit_inputs,
    check_logits,
    lbfgs,
    masked_nll,
    one_thread,
)
from calm_core.calibration.projection import principal_projection

NAME = "ats"

MIN_ITEMS = 40  # five folds of eight: fewer, and the cross-fitted choice is noise
CV_FOLDS = 5
COMPONENT_GRID = (0, 2, 4, 8, 16)  # k = 0: one shared temperature (TS)
DECAY_GRID = (0.01, 0.1, 1.0)
SEED = 0
CV_ROUNDS = 3  # LBFGS rounds of a cross-fitting fit: enough to rank the grid, a tenth of the time


class AdaptiveTemperature(PosthocCalibrator):
    """softmax(z / tau(h)), tau(h) = softplus(w . x(h) + b) + TAU_FLOOR (module docstring);
    after a fit (or `load`): `mean_` (H,), `projection_` (k, H), `weights_` (k,), `bias_`,
    `weight_decay_` and `cv_nll_` ("k=8,decay=0.1" -> held-out NLL)."""

    name = NAME
    label = "Adaptive temperature scaling"
    abbreviation = "ATS"
    kind = "adaptive_temperature"
    reads_features: ClassVar[bool] = True  # fitted where the scores carry features (posthoc.for_task)
    min_items: ClassVar[int] = MIN_ITEMS
    order = 20
    fitted_state = {
        "mean": [],
        "projection": [],
        "weights": [],
        "bias": 0.5413248546129181,  # softplus^-1(1): tau = 1 + floor
        "weight_decay": 0.0,
        "cv_nll": {},
        "nll_before": None,
        "nll_after": None,
        "n_fit": 0,
    }

    mean_: list[float]
    projection_: list[list[float]]
    weights_: list[float]
    bias_: float
    weight_decay_: float
    cv_nll_: dict[str, float]
    nll_before_: float | None
    nll_after_: float | None
    n_fit_: int

    @classmethod
    def fit_work(cls, n: int) -> float:
        """Its cross-fitting dominates a fit: every (k, decay) of the grid on CV_FOLDS folds,
        each on the items the fold leaves (the final fit on all `n` is a few more)."""
        return float(len(search_grid(n)) * CV_FOLDS * (n - n // CV_FOLDS) + n)

    @classmethod
    def _fit(cls, logits: np.ndarray, labels: np.ndarray, features: np.ndarray | None = None) -> AdaptiveTemperature:
        """Fitted on (N, K) logits, (N,) gold indices and (N, H) features; (k, decay) by cross-fitting."""
        z, y = check_fit_inputs(
            logits,
            labels,
            MIN_ITEMS,
            f"adaptive temperature scaling ({CV_FOLDS}-fold cross-fitting chooses its features)",
        )
        h = _features(features, len(y))
        with one_thread():
            scores = cross_fitted_nll(z, y, h)
            k, decay = min(scores, key=lambda key: (scores[key], key[0], -key[1]))
            fitted = _fit_once(z, y, h, k, decay)
        fitted.cv_nll_ = {f"k={kk},decay={dd:g}": round(v, 6) for (kk, dd), v in sorted(scores.items())}
        return fitted

    def temperatures(self, features: np.ndarray) -> np.ndarray:
        """tau(h) of each row of (N, H) features."""
        h = np.asarray(features, dtype=np.float64)
        if not self.weights_:
            return np.full(len(h), float(_softplus(self.bias_)) + TAU_FLOOR)
        x = (h - np.asarray(self.mean_)) @ np.asarray(self.projection_).T
        return np.asarray(_softplus(x @ np.asarray(self.weights_) + self.bias_)) + TAU_FLOOR

    @classmethod
    def from_json(cls, data: Any, source: str = "the record") -> AdaptiveTemperature:
        """The fit of a saved object; a record that counts its `components` but lacks their
        `weights` (results.json before it kept them) is refused: read as it is, it would be
        one temperature for every question."""
        if isinstance(data, dict) and data.get("components") and not data.get("weights"):
            raise ValueError(
                f"Expected ATS's weights in {source}, but it records only their number ({data['components']} "
                "components): it was written before results.json kept them"
            )
        return super().from_json(data, source)

    def export_head(self) -> Head:
        """The head that computes the same temperatures: an adaptive head reading the
        question's state, or, when cross-fitting chose no feature (k = 0), a scalar head at
        its one temperature (an adaptive head needs a width)."""
        if self.weights_:
            return AdaptiveHead.from_ats(self)
        from calm_core.calibration.head import scalar_head  # loads transformers: only when exporting

        return scalar_head(float(self.temperatures(np.zeros((1, 0)))[0]))

    def card_words(self, fitted: str) -> str:
        scope = "adaptive" if self.weights_ else "scalar (it chose one temperature)"
        return (
            "**adaptive temperature scaling** of the base model (a temperature per question, "
            f"tau(h) = softplus(w . x(h) + b), read from the question's hidden state; {fitted}, as an "
            f"{scope} head over a zero adapter)"
        )

    def transform(self, logits: np.ndarray, features: np.ndarray | None = None) -> np.ndarray:
        if features is None:
            raise ValueError(
                "Expected the hidden-state features of these items: adaptive temperature scaling reads them"
            )
        z = check_logits(logits)
        return z / self.temperatures(features)[:, None]

    def probs(self, logits: np.ndarray, features: np.ndarray | None = None) -> np.ndarray:
        return metrics.softmax(self.transform(logits, features))

    def params(self) -> dict[str, Any]:
        """The summary (components, decay) and every number `temperatures` reads: results.json
        keeps them, so the Playground and `calm export --variant ats` rebuild this fit from it."""
        return {
            "components": len(self.weights_),
            "weight_decay": self.weight_decay_,
            "bias": self.bias_,
            "weights": self.weights_,
            "mean": self.mean_,
            "projection": self.projection_,
        }

    def describe(self, fmt: str = ".4f") -> str:
        if not self.weights_:
            return (
                f"one temperature (no feature helped on held-out folds), T = {_softplus(self.bias_) + TAU_FLOOR:{fmt}}"
            )
        return f"{len(self.weights_)} feature components, weight decay {self.weight_decay_:g}"

    def check(self, source: str) -> None:
        if len(self.projection_) != len(self.weights_) or any(len(row) != len(self.mean_) for row in self.projection_):
            raise ValueError(f"Expected `projection` of shape (len(weights), len(mean)) in {source}")


def _features(features: np.ndarray | None, n: int) -> np.ndarray:
    if features is None:
        raise ValueError("Expected hidden-state features to fit adaptive temperature scaling, but got none")
    h = np.asarray(features, dtype=np.float64)
    if h.ndim != 2 or len(h) != n:
        raise ValueError(f"Expected `features` of shape (N, H) with N = {n}, but got {h.shape}")
    return h


def _fit_once(
    z: torch.Tensor, y: torch.Tensor, h: np.ndarray, k: int, decay: float, rounds: int = 50
) -> AdaptiveTemperature:
    mean, projection = principal_projection(h, k, standardise=True)
    x = torch.from_numpy((h - mean) @ projection.T)
    finite = torch.isfinite(z)
    z_safe = torch.where(finite, z, torch.zeros_like(z))
    w = torch.zeros(x.shape[1], dtype=torch.float64, requires_grad=True)
    b = torch.tensor(math.log(math.e - 1.0), dtype=torch.float64, requires_grad=True)  # tau = 1 (+ floor)

    def scaled(weights: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        tau = torch.nn.functional.softplus(x @ weights + bias) + TAU_FLOOR
        out = z_safe / tau[:, None]
        return torch.where(finite, out, torch.full_like(out, -math.inf))

    def loss() -> torch.Tensor:
        return masked_nll(scaled(w, b), y) + decay * (w * w).sum()

    before = float(masked_nll(z, y))
    lbfgs([w, b], loss, max_rounds=rounds, tol=1e-10 if rounds > CV_ROUNDS else 1e-7)
    with torch.no_grad():
        after = float(masked_nll(scaled(w, b), y))
    return AdaptiveTemperature.fitted(
        mean=mean.tolist() if k else [],
        projection=projection.tolist(),
        weights=w.detach().tolist(),
        bias=float(b.detach()),
        weight_decay=decay if k else 0.0,
        nll_before=before,
        nll_after=after,
        n_fit=len(y),
    )


def search_grid(n: int) -> list[tuple[int, float]]:
    """The (k, decay) pairs cross-fitting compares on `n` items: TS, then every k up to n / 4."""
    return [(0, 0.0)] + [(k, d) for k in COMPONENT_GRID if 0 < k <= n // 4 for d in DECAY_GRID]


def cross_fitted_nll(z: torch.Tensor, y: torch.Tensor, h: np.ndarray) -> dict[tuple[int, float], float]:
    """(k, decay) -> mean NLL on the left-out folds, each fold predicted by a fit on the
    others (the projection included, so no fold sees its own items)."""
    folds = np.array_split(np.random.default_rng(SEED).permutation(len(y)), CV_FOLDS)
    scores = {}
    for k, decay in search_grid(len(y)):
        losses = []
        for fold in folds:
            train = np.setdiff1d(np.arange(len(y)), fold)
            model = _fit_once(z[train], y[train], h[train], k, decay, rounds=CV_ROUNDS)
            probs = model.probs(z[fold].numpy(), h[fold])
            losses.append(metrics.nll(probs, y[fold].numpy()) * len(fold))
        scores[(k, decay)] = float(sum(losses) / len(y))
    return scores


def _softplus(x: np.ndarray | float) -> np.ndarray | float:
    return np.logaddexp(0.0, x)


CALIBRATOR = AdaptiveTemperature
