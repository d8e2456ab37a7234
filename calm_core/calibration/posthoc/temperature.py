"""Temperature scaling: p = softmax(z / T), one T > 0 fitted by NLL (Guo et al. 2017).

One parameter, and it keeps the argmax: it changes calibration, never accuracy. It
applies to option logits (MCQA) and, divided into every generation step's vocabulary
logits, to generated answers (open QA), whatever the number of options it was fitted on.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from calm_core.calibration.head_base import Head
from calm_core.calibration.posthoc.base import PosthocCalibrator, check_logits, fit_nll

NAME = "ts"  # the variant and its results.json key

DEGENERATE_T = 100.0  # above this, TS has flattened the fit set's predictions to ~uniform


class TemperatureScaler(PosthocCalibrator):
    """p = softmax(z / T), T = exp(log_t) > 0 fitted by NLL on labelled logits; after a
    fit (or `load`), `temperature_` is T."""

    name = NAME
    label = "Temperature scaling"
    kind = "temperature"
    tasks = ("mcqa", "openqa")
    order = 0
    fitted_state = {"temperature": 1.0, "nll_before": None, "nll_after": None, "n_fit": 0}
    takes_sample_weight = True

    temperature_: float
    nll_before_: float | None
    nll_after_: float | None
    n_fit_: int

    @classmethod
    def _fit(cls, logits: np.ndarray, labels: np.ndarray, sample_weight: Any = None) -> TemperatureScaler:
        (log_t,), before, after, n = fit_nll(
            logits, labels, [torch.zeros((), dtype=torch.float64)], lambda z, p: z / p[0].exp(), sample_weight
        )
        return cls.fitted(temperature=float(log_t.exp()), nll_before=before, nll_after=after, n_fit=n)

    def transform(self, logits: np.ndarray) -> np.ndarray:
        return check_logits(logits) / self.temperature_

    def token_transform(self) -> Callable[[torch.Tensor], torch.Tensor]:
        temperature = self.temperature_
        return lambda z: z / temperature

    def describe(self, fmt: str = ".4f") -> str:
        return f"T = {self.temperature_:{fmt}}"

    def warning(self) -> str | None:
        if self.temperature_ <= DEGENERATE_T:
            return None
        return (
            f"T > {DEGENERATE_T:g} makes every answer near-uniform: the fit set carries no usable "
            "confidence signal (accuracy at or below chance there)"
        )

    def export_head(self) -> Head:
        """softmax(z / T) as a scalar options head: exactly temperature scaling."""
        from calm_core.calibration.head import scalar_head  # loads transformers: only when exporting

        return scalar_head(self.temperature_)

    def card_words(self, fitted: str) -> str:
        return (
            f"**temperature scaling** of the base model (T = {self.temperature_:.4f}, {fitted}, "
            "as a scalar head over a zero adapter)"
        )

    def check(self, source: str) -> None:
        if not float(self.temperature_) > 0:
            raise ValueError(f"Expected a positive `temperature` in {source}, but got {self.temperature_!r}")


CALIBRATOR = TemperatureScaler
