"""Vector scaling: p = softmax(z * w + b), a temperature w_k and shift b_k per option
position (K_max each), fitted by NLL (Guo et al. 2017).

It can change predictions. For MCQA option positions are exchangeable, which is why it
is a baseline here, not a recommendation: it is not fitted by default (`default = False`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from calm_core.calibration.head_base import Head
from calm_core.calibration.posthoc.base import PosthocCalibrator, check_logits, fit_nll

NAME = "vs"  # the variant and its results.json key


class VectorScaler(PosthocCalibrator):
    """p = softmax(z * w + b): a temperature w_k and shift b_k per option position; after a
    fit (or `load`), `weights_` and `biases_` (K_max each)."""

    name = NAME
    label = "Vector scaling"
    kind = "vector"
    default = False
    order = 10
    fitted_state = {"weights": [], "biases": [], "nll_before": None, "nll_after": None, "n_fit": 0}
    takes_sample_weight = True

    weights_: list[float]
    biases_: list[float]
    nll_before_: float | None
    nll_after_: float | None
    n_fit_: int

    @classmethod
    def _fit(cls, logits: np.ndarray, labels: np.ndarray, sample_weight: Any = None) -> VectorScaler:
        k = check_logits(logits).shape[1]
        init = [torch.ones(k, dtype=torch.float64), torch.zeros(k, dtype=torch.float64)]
        (w, b), before, after, n = fit_nll(
            logits, labels, init, lambda z, p: z * p[0][None, :] + p[1][None, :], sample_weight
        )
        return cls.fitted(weights=w.tolist(), biases=b.tolist(), nll_before=before, nll_after=after, n_fit=n)

    def cannot_apply(self, logits: np.ndarray) -> str | None:
        k = np.shape(logits)[1]
        if k > len(self.weights_):
            return f"fitted on {len(self.weights_)} option positions, this set has {k}"
        return None

    def transform(self, logits: np.ndarray) -> np.ndarray:
        z = check_logits(logits)
        if self.cannot_apply(z):
            raise ValueError(f"Expected at most {len(self.weights_)} options (fitted K), but got {z.shape[1]}")
        k = z.shape[1]
        w, b = np.asarray(self.weights_[:k]), np.asarray(self.biases_[:k])
        with np.errstate(invalid="ignore"):
            return np.where(np.isfinite(z), z * w + b, -np.inf)

    def export_head(self) -> Head:
        """An uncentred options head z / tau + l, tau = 1 / w, l = b (calibration.head.options_head);
        a weight <= 0 (an option whose score the fit turned around) has no temperature: refused."""
        from calm_core.calibration.head import options_head  # loads transformers: only when exporting

        try:
            return options_head(self.weights_, self.biases_)
        except ValueError as exc:
            raise ValueError(f"{exc}: export `ts` or the trained model instead") from None

    def card_words(self, fitted: str) -> str:
        return (
            f"**vector scaling** of the base model (softmax(z w + b) per option position, {fitted}, "
            "as an uncentred options head over a zero adapter: tau = 1 / w, l = b)"
        )


CALIBRATOR = VectorScaler
