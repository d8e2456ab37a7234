"""Post-hoc calibration baselines fitted on option logits: temperature and vector scaling.

    ts = TemperatureScaler.fit(scores.logits, scores.gold)   # log T by NLL, LBFGS to convergence
    probs = ts.probs(other.logits)                           # apply anywhere
    ts.save("ts.json"); TemperatureScaler.load("ts.json")

Both work on (N, K_max) logits padded with -inf (ragged option counts); padding stays
at probability 0. Temperature scaling has one parameter and keeps the argmax, so it
changes calibration, never accuracy. Vector scaling learns a per-position temperature
and shift (K_max each), so it can change predictions; for MCQA, option positions are
exchangeable, which is why it is a baseline here, not a recommendation.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from calm_core.calibration import metrics

MIN_FIT_ITEMS = 10  # fewer and the fitted temperature is mostly noise


def _read_scaler_file(path: str | Path, kind: str) -> dict[str, Any]:
    """The JSON object of a saved calibrator, checked before any field is trusted."""
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict):
        raise ValueError(f"Expected a JSON object in {path}, but got {type(data).__name__}")
    if data.get("kind") != kind:
        raise ValueError(f"Expected a {kind}-scaling file, but {path} holds kind={data.get('kind')!r}")
    return data


def _check_fit_inputs(logits: np.ndarray, labels: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    logits = np.asarray(logits, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    if logits.ndim != 2 or len(logits) != len(labels):
        raise ValueError(f"Expected `logits` of shape (N, K) with N = len(labels), but got {logits.shape} and {labels.shape}")
    if len(labels) < MIN_FIT_ITEMS:
        raise ValueError(f"Expected at least {MIN_FIT_ITEMS} items to fit a post-hoc calibrator, but got {len(labels)}")
    return torch.from_numpy(logits), torch.from_numpy(labels)


def _masked_nll(scaled: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean NLL of softmax(scaled) at the gold option; -inf padding stays excluded."""
    return torch.nn.functional.cross_entropy(scaled, labels)


def _split_padding(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(finite mask, z with padding zeroed): keeps -inf out of products whose
    gradient would otherwise be 0 * inf = nan."""
    finite = torch.isfinite(z)
    return finite, torch.where(finite, z, torch.zeros_like(z))


def _repad(finite: torch.Tensor, scaled: torch.Tensor) -> torch.Tensor:
    return torch.where(finite, scaled, torch.full_like(scaled, -math.inf))


def _lbfgs(params: list[torch.Tensor], loss_fn: Any, max_rounds: int = 50, tol: float = 1e-10) -> float:
    """Run LBFGS until the loss stops moving (not a fixed iteration count)."""
    optimizer = torch.optim.LBFGS(params, lr=1.0, max_iter=100, tolerance_grad=1e-10,
                                  tolerance_change=tol, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = loss_fn()
        loss.backward()
        return loss

    previous = math.inf
    for _ in range(max_rounds):
        loss = float(optimizer.step(closure).detach())
        if abs(previous - loss) < tol:
            break
        previous = loss
    with torch.no_grad():
        return float(loss_fn())


class _ScalerFile:
    """probs() and JSON save/load shared by the scalers (fields = the dataclass's)."""

    kind: str

    def transform(self, logits: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def probs(self, logits: np.ndarray) -> np.ndarray:
        return metrics.softmax(self.transform(logits))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=2))  # type: ignore[call-overload]

    @classmethod
    def _from_file(cls, path: str | Path, kind: str) -> Any:
        data = _read_scaler_file(path, kind)
        names = [f for f in cls.__dataclass_fields__ if f != "kind"]  # type: ignore[attr-defined]
        return cls(**{k: data[k] for k in names if k in data})


@dataclass
class TemperatureScaler(_ScalerFile):
    """p = softmax(z / T), T = exp(log_t) > 0 fitted by NLL on labelled logits."""

    temperature: float = 1.0
    nll_before: float | None = None
    nll_after: float | None = None
    n_fit: int = 0
    kind: str = "temperature"

    @classmethod
    def fit(cls, logits: np.ndarray, labels: np.ndarray) -> "TemperatureScaler":
        z, y = _check_fit_inputs(logits, labels)
        finite, z_safe = _split_padding(z)
        log_t = torch.zeros((), dtype=torch.float64, requires_grad=True)
        before = float(_masked_nll(z, y))
        after = _lbfgs([log_t], lambda: _masked_nll(_repad(finite, z_safe / log_t.exp()), y))
        return cls(float(log_t.detach().exp()), before, after, len(y))

    def transform(self, logits: np.ndarray) -> np.ndarray:
        return np.asarray(logits, dtype=np.float64) / self.temperature

    @classmethod
    def load(cls, path: str | Path) -> "TemperatureScaler":
        scaler = cls._from_file(path, "temperature")
        if not float(scaler.temperature) > 0:
            raise ValueError(f"Expected a positive `temperature` in {path}, but got {scaler.temperature!r}")
        return scaler


@dataclass
class VectorScaler(_ScalerFile):
    """p = softmax(z * w + b): a temperature w_k and shift b_k per option position."""

    weights: list[float]
    biases: list[float]
    nll_before: float | None = None
    nll_after: float | None = None
    n_fit: int = 0
    kind: str = "vector"

    @classmethod
    def fit(cls, logits: np.ndarray, labels: np.ndarray) -> "VectorScaler":
        z, y = _check_fit_inputs(logits, labels)
        k = z.shape[1]
        finite, z_safe = _split_padding(z)
        w = torch.ones(k, dtype=torch.float64, requires_grad=True)
        b = torch.zeros(k, dtype=torch.float64, requires_grad=True)

        def loss() -> torch.Tensor:
            return _masked_nll(_repad(finite, z_safe * w[None, :] + b[None, :]), y)  # (N, K)

        before = float(_masked_nll(z, y))
        after = _lbfgs([w, b], loss)
        return cls(w.detach().tolist(), b.detach().tolist(), before, after, len(y))

    def transform(self, logits: np.ndarray) -> np.ndarray:
        z = np.asarray(logits, dtype=np.float64)
        k = min(z.shape[1], len(self.weights))
        if z.shape[1] > len(self.weights):
            raise ValueError(f"Expected at most {len(self.weights)} options (fitted K), but got {z.shape[1]}")
        w, b = np.asarray(self.weights[:k]), np.asarray(self.biases[:k])
        with np.errstate(invalid="ignore"):
            return np.where(np.isfinite(z), z * w + b, -np.inf)

    @classmethod
    def load(cls, path: str | Path) -> "VectorScaler":
        return cls._from_file(path, "vector")


SCALERS = {"temperature": TemperatureScaler, "vector": VectorScaler}


def load_scaler(path: str | Path) -> TemperatureScaler | VectorScaler:
    data = json.loads(Path(path).read_text())
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind not in SCALERS:
        raise ValueError(f"Expected a calibrator kind in {sorted(SCALERS)}, but {path} holds {kind!r}")
    return SCALERS[kind].load(path)
