"""Vector scaling: p = softmax(z * w + b), a temperature w_k and shift b_k per option
position (K_max each), fitted by NLL (Guo et al. 2017).

It can change predictions. For MCQA option positions are exchangeable, which is why it
is a baseline here, not a recommendation: it is not fitted by default (`default = False`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from calm_core.calibration.posthoc.base import PosthocCalibrator, fit_nll

NAME = "vs"  # the variant and its results.json key


@dataclass
class VectorScaler(PosthocCalibrator):
    """p = softmax(z * w + b): a temperature w_k and shift b_k per option position."""

    name = NAME
    label = "Vector scaling"
    kind = "vector"
    default = False
    order = 10

    weights: list[float] = field(default_factory=list)  # empty until fitted (VectorScaler().fit(X, y))
    biases: list[float] = field(default_factory=list)
    nll_before: float | None = None
    nll_after: float | None = None
    n_fit: int = 0

    @classmethod
    def _fit(cls, logits: np.ndarray, labels: np.ndarray) -> "VectorScaler":
        k = np.shape(logits)[1] if np.ndim(logits) == 2 else 0
        init = [torch.ones(k, dtype=torch.float64), torch.zeros(k, dtype=torch.float64)]
        (w, b), before, after, n = fit_nll(logits, labels, init, lambda z, p: z * p[0][None, :] + p[1][None, :])
        return cls(w.tolist(), b.tolist(), before, after, n)

    def cannot_apply(self, logits: np.ndarray) -> str | None:
        k = np.shape(logits)[1]
        if k > len(self.weights):
            return f"fitted on {len(self.weights)} option positions, this set has {k}"
        return None

    def transform(self, logits: np.ndarray) -> np.ndarray:
        z = np.asarray(logits, dtype=np.float64)
        if self.cannot_apply(z):
            raise ValueError(f"Expected at most {len(self.weights)} options (fitted K), but got {z.shape[1]}")
        k = z.shape[1]
        w, b = np.asarray(self.weights[:k]), np.asarray(self.biases[:k])
        with np.errstate(invalid="ignore"):
            return np.where(np.isfinite(z), z * w + b, -np.inf)


CALIBRATOR = VectorScaler
