"""Thermometer (Shen et al., ICML 2024): a temperature for a whole new dataset, predicted
from its unlabelled inputs by a small model trained on other, labelled datasets.

    thermo = Thermometer.train([Labelled("arc/easy_dev", logits, gold, features), ...])
    thermo.temperature(features_of_the_new_set)       # one T from the mean hidden state
    thermo.probs(logits, features)                    # softmax(z / T) over the set

    T(d) = softplus(v . x(mean h over d) + c) + TAU_FLOOR

Why: TS needs labels from the domain it calibrates, and a temperature carried over from
another domain can be badly wrong (fitted where the model is right half the time, it
cools a set the model answers 86% right). A domain with no labels still has inputs, and
their mean hidden state says something about what kind of questions they are. Thermometer
learns, across labelled domains, which directions of that mean go with which temperature.

Few datasets train it (each one point for v), so the projection is small and chosen by
leave-one-dataset-out: x is the top `k` principal components of the training datasets'
mean features, standardised, and (k, decay) minimise the NLL of each left-out dataset
under the temperature predicted for it. k = 0 is in the grid: one temperature for every
domain, i.e. TS pooled over the other domains, the baseline it must beat. Each dataset's
NLL counts equally, whatever its size.

Not a registry calibrator (calibration.posthoc): it is not fitted on S_V's labels, and it
applies per dataset, not per item; `calm eval` applies it to any set, even one without
answers (workspace and CLI code call `load_thermometer`).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Sequence

import numpy as np
import torch

from calm_core.calibration import metrics
from calm_core.calibration.posthoc.base import lbfgs, one_thread
from calm_core.calibration.projection import principal_projection
from calm_core.paths import cache_dir

KIND = "thermometer"
COMPONENT_GRID = (0, 1, 2, 3)
DECAY_GRID = (0.001, 0.01, 0.1, 1.0)
TAU_FLOOR = 0.05
MIN_DATASETS = 3  # fewer, and leave-one-out has nothing to choose with
# Named models' thermometers are package data (`thermometer_<name>.json`, built by
# `python -m calm_core.training.thermometer_build --model <name>`); any other model's goes to the cache
SHIPPED_DIR = Path(__file__).resolve().parent
SHIPPED = SHIPPED_DIR / "thermometer_embedded.json"  # the embedded model's
_SAFE = re.compile(r"[A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Labelled:
    """One training dataset: its name, (N, K) option logits, (N,) gold and (N, H) features."""

    name: str
    logits: np.ndarray
    gold: np.ndarray
    features: np.ndarray

    @property
    def domain(self) -> str:
        return domain_of(self.name)


def domain_of(name: str) -> str:
    """A dataset's domain: its name up to the split ("arc/easy_dev" -> "arc",
    "builtin/capitals/test" -> "builtin/capitals"): what leave-one-domain-out leaves out."""
    parts = name.split("/")
    return "/".join(parts[:2]) if parts[0] == "builtin" else parts[0]


@dataclass
class Thermometer:
    """T(d) = softplus(v . x(mean h) + c) + TAU_FLOOR (module docstring)."""

    mean: list[float] = field(default_factory=list)
    projection: list[list[float]] = field(default_factory=list)  # (k, H)
    weights: list[float] = field(default_factory=list)
    bias: float = 0.5413248546129181  # softplus^-1(1)
    weight_decay: float = 0.0
    trained_on: list[str] = field(default_factory=list)
    cv_nll: dict[str, float] = field(default_factory=dict)
    model: str = ""  # the model whose hidden states it reads ("embedded", a hub id): another's mean nothing
    scoring: str = ""  # the rule its logits and states came from (ScoringConfig.name: "cloze"); "": not recorded
    kind: str = KIND

    reads_features: ClassVar[bool] = True  # scoring.evaluate applies it like a feature-reading calibrator
    name: ClassVar[str] = "thermometer"

    @classmethod
    def train(cls, datasets: Sequence[Labelled]) -> Thermometer:
        """Trained on labelled datasets, (k, decay) chosen by leave-one-dataset-out."""
        if len(datasets) < MIN_DATASETS:
            raise ValueError(
                f"Expected at least {MIN_DATASETS} labelled datasets to train a thermometer, got {len(datasets)}"
            )
        with one_thread():
            scores = leave_one_out_nll(datasets)
            k, decay = min(scores, key=lambda key: (scores[key], key[0], -key[1]))
            fitted = _train_once(datasets, k, decay)
        fitted.cv_nll = {f"k={kk},decay={dd:g}": round(v, 6) for (kk, dd), v in sorted(scores.items())}
        return fitted

    def temperature(self, features: np.ndarray) -> float:
        """The temperature of a dataset, from its (N, H) features (their mean)."""
        mean_h = np.asarray(features, dtype=np.float64).mean(axis=0)
        if not self.weights:
            return float(np.logaddexp(0.0, self.bias) + TAU_FLOOR)
        x = (mean_h - np.asarray(self.mean)) @ np.asarray(self.projection).T
        return float(np.logaddexp(0.0, x @ np.asarray(self.weights) + self.bias) + TAU_FLOOR)

    def probs(self, logits: np.ndarray, features: np.ndarray) -> np.ndarray:
        """softmax(z / T) with the one T of this set; the argmax never changes."""
        return metrics.softmax(np.asarray(logits, dtype=np.float64) / self.temperature(features))

    def cannot_apply(self, logits: np.ndarray) -> str | None:
        """Any option count: one temperature divides every logit (the calibrator protocol)."""
        return None

    def params(self) -> dict[str, Any]:
        """results.json's record of it: what it reads and what it was trained on."""
        return {
            "kind": KIND,
            "components": len(self.weights),
            "trained_on": list(self.trained_on),
            "model": self.model,
            "scoring": self.scoring,
        }

    def describe(self) -> str:
        parts = f"{len(self.weights)} components of the mean hidden state" if self.weights else "one temperature"
        return f"{parts}, trained on {len(self.trained_on)} datasets"

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=1))


def load_thermometer(path: str | Path) -> Thermometer:
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise ValueError(f"Expected a {KIND} file at {path}")
    return Thermometer(**{k: v for k, v in data.items() if k in Thermometer.__dataclass_fields__})


def _dataset_means(datasets: Sequence[Labelled]) -> np.ndarray:
    return np.stack([np.asarray(d.features, dtype=np.float64).mean(axis=0) for d in datasets])


def _train_once(datasets: Sequence[Labelled], k: int, decay: float) -> Thermometer:
    means = _dataset_means(datasets)
    center, projection = principal_projection(means, k, standardise=False)
    x = torch.from_numpy((means - center) @ projection.T)
    raw = [torch.tensor(np.asarray(d.logits, dtype=np.float64)) for d in datasets]
    finite = [torch.isfinite(z) for z in raw]
    logits = [torch.where(f, z, torch.zeros_like(z)) for z, f in zip(raw, finite, strict=True)]  # no -inf in z / T
    gold = [torch.tensor(np.asarray(d.gold, dtype=np.int64)) for d in datasets]
    w = torch.zeros(x.shape[1], dtype=torch.float64, requires_grad=True)
    b = torch.tensor(math.log(math.e - 1.0), dtype=torch.float64, requires_grad=True)

    def loss() -> torch.Tensor:
        tau = torch.nn.functional.softplus(x @ w + b) + TAU_FLOOR
        per_set = [_nll(z / t, y, f) for z, y, t, f in zip(logits, gold, tau, finite, strict=True)]
        return torch.stack(per_set).mean() + decay * (w * w).sum()

    lbfgs([w, b], loss)
    return Thermometer(
        mean=center.tolist() if k else [],
        projection=projection.tolist(),
        weights=w.detach().tolist(),
        bias=float(b.detach()),
        weight_decay=decay if k else 0.0,
        trained_on=[d.name for d in datasets],
    )


def _nll(scaled: torch.Tensor, gold: torch.Tensor, finite: torch.Tensor) -> torch.Tensor:
    """Mean NLL with padding put back as -inf after the division (a -inf divided by a
    parameter gives a nan gradient, even where the value is masked afterwards)."""
    return torch.nn.functional.cross_entropy(torch.where(finite, scaled, torch.full_like(scaled, -math.inf)), gold)


def leave_one_out_nll(datasets: Sequence[Labelled]) -> dict[tuple[int, float], float]:
    """(k, decay) -> mean NLL over the datasets, each predicted by a thermometer trained on
    the datasets of the other domains (so a domain's other splits never inform it)."""
    grid = [(0, 0.0)] + [(k, d) for k in COMPONENT_GRID if 0 < k <= len(datasets) - 2 for d in DECAY_GRID]
    scores = {}
    for k, decay in grid:
        losses = []
        for held in datasets:
            others = [d for d in datasets if d.domain != held.domain]
            if len(others) < 2:
                continue
            model = _train_once(others, k, decay)
            losses.append(metrics.nll(model.probs(held.logits, held.features), held.gold))
        scores[(k, decay)] = float(np.mean(losses))
    return scores


def leave_one_domain_out(datasets: Sequence[Labelled]) -> list[dict[str, Any]]:
    """For each domain: the thermometer trained on the others (its own (k, decay) chosen
    inside them) and its temperature for each of the domain's datasets. The rows of the
    leave-one-domain-out table (docs/results.md)."""
    rows = []
    for domain in dict.fromkeys(d.domain for d in datasets):
        others = [d for d in datasets if d.domain != domain]
        thermo = Thermometer.train(others)
        for held in (d for d in datasets if d.domain == domain):
            rows.append({"dataset": held.name, "temperature": thermo.temperature(held.features), "thermometer": thermo})
    return rows


def model_key(model: str) -> str:
    """A model setting as a file name: a name like `embedded` or `gemma3-270m` as it is;
    a path or a hub id by its last part and 8 hex digits of the whole (two folders named
    alike keep apart)."""
    name = model.strip()
    if _SAFE.fullmatch(name):
        return name
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(name).name or name)[:40]
    return f"{stem}-{hashlib.sha256(name.encode('utf-8')).hexdigest()[:8]}"


def thermometer_path(model: str) -> Path:
    """Where `model`'s thermometer is read from and built to: shipped in the package when
    there is one (the named models), else `<cache>/thermometers/thermometer_<key>.json`."""
    name = f"thermometer_{model_key(model)}.json"
    shipped = SHIPPED if model.strip() == "embedded" else SHIPPED_DIR / name
    return shipped if shipped.is_file() else cache_dir() / "thermometers" / name


def build_command(model: str) -> str:
    """The command that builds `model`'s thermometer (for messages that say none is built)."""
    flag = "" if model == "embedded" else f" --model {model}"
    return f"python -m calm_core.training.thermometer_build{flag}"


def run_thermometer(
    model: str, scoring: str, width: int | None = None, path: Path | None = None
) -> tuple[Thermometer | None, str | None]:
    """The thermometer a run's final evaluation adds as its `thermometer` variant, or why
    none: only a thermometer trained on this model's hidden states (`width`: their size),
    under this scoring rule, means anything (`thermometer_path`: the model's own, shipped
    or built into the cache; `path`: another thermometer file)."""
    path = thermometer_path(model) if path is None else path
    if not path.is_file():
        return None, _NO_THERMOMETER + f"none is built for {model} ({build_command(model)})"
    thermometer = load_thermometer(path)
    why = mismatch(thermometer, model, scoring, width)
    return (None, f"{_NO_THERMOMETER}it {why}") if why else (thermometer, None)


def mismatch(thermometer: Thermometer, model: str, scoring: str, width: int | None = None) -> str | None:
    """Why `thermometer` means nothing for `model` under `scoring` (a verb phrase: "reads
    X's hidden states, not Y's"), or None when it fits. The one check a run, `calm eval
    --thermometer` and an export make. A thermometer that records no model or rule is not
    refused for it; `width` (the model's hidden size, when known) catches another model
    under the same name."""
    if thermometer.model and thermometer.model != model:
        return f"reads {thermometer.model}'s hidden states, not {model}'s"
    if width is not None and thermometer.mean and len(thermometer.mean) != width:
        return f"reads states of width {len(thermometer.mean)}, not this model's {width}"
    if thermometer.scoring and thermometer.scoring != scoring:  # the state it reads is the rule's
        return f"was trained under {thermometer.scoring} scoring, not {scoring}"
    return None


_NO_THERMOMETER = "no `thermometer` variant: "
