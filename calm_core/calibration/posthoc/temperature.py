"""Temperature scaling: p = softmax(z / T), one T > 0 fitted by NLL (Guo et al. 2017).

One parameter, and it keeps the argmax: it changes calibration, never accuracy. It
applies to option logits (MCQA) and, divided into every generation step's vocabulary
logits, to generated answers (open QA).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from calm_core.calibration.posthoc.base import PosthocCalibrator, fit_nll

NAME = "ts"  # the variant and its results.json key

DEGENERATE_T = 100.0  # above this, TS has flattened the fit set's predictions to ~uniform


@dataclass
class TemperatureScaler(PosthocCalibrator):
    """p = softmax(z / T), T = exp(log_t) > 0 fitted by NLL on labelled logits."""

    name = NAME
    label = "Temperature scaling"
    kind = "temperature"
    tasks = ("mcqa", "openqa")
    order = 0

    temperature: float = 1.0
    nll_before: float | None = None
    nll_after: float | None = None
    n_fit: int = 0

    @classmethod
    def _fit(cls, logits: np.ndarray, labels: np.ndarray) -> "TemperatureScaler":
        (log_t,), before, after, n = fit_nll(
            logits, labels, [torch.zeros((), dtype=torch.float64)], lambda z, p: z / p[0].exp()
        )
        return cls(float(log_t.exp()), before, after, n)

    def transform(self, logits: np.ndarray) -> np.ndarray:
        return np.asarray(logits, dtype=np.float64) / self.temperature

    def token_transform(self) -> Callable[[torch.Tensor], torch.Tensor]:
        return lambda z: z / self.temperature

    def describe(self, fmt: str = ".4f") -> str:
        return f"T = {self.temperature:{fmt}}"

    def warning(self) -> str | None:
        if self.temperature <= DEGENERATE_T:
            return None
        return (
            f"T > {DEGENERATE_T:g} makes every answer near-uniform: the fit set carries no usable "
            "confidence signal (accuracy at or below chance there)"
        )

    def check(self, source: str) -> None:
        if not float(self.temperature) > 0:
            raise ValueError(f"Expected a positive `temperature` in {source}, but got {self.temperature!r}")


CALIBRATOR = TemperatureScaler
