"""Post-hoc calibration baselines fitted on logits: one module per calibrator.

    ts = TemperatureScaler.fit(scores.logits, scores.gold)   # log T by NLL, LBFGS to convergence
    probs = ts.probs(other.logits)                           # apply anywhere
    ts.save("ts.json"); load_calibrator("ts.json")           # any kind, by its `kind`
    fitted = fit_defaults(scores.logits, scores.gold, "mcqa")  # {"ts": TemperatureScaler(...)}
    ts = TemperatureScaler().fit(X, y); ts.predict_proba(X)   # scikit-learn's interface (base.py)

The registry is this package's modules (calm_core.registry): every module that defines
NAME (the variant's name) and CALIBRATOR (its PosthocCalibrator class) is found by
`calibrators()`, so adding one is one new file; `calm eval`, a run's final evaluation
and the pages then show it as a variant named NAME (docs/architecture.md, "Adding a
post-hoc calibrator"). base.py defines no NAME.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from calm_core.calibration.posthoc.base import MIN_FIT_ITEMS, PosthocCalibrator
from calm_core.calibration.posthoc.temperature import DEGENERATE_T, TemperatureScaler
from calm_core.calibration.posthoc.vector import VectorScaler
from calm_core.registry import discover

__all__ = [
    "DEGENERATE_T",
    "MIN_FIT_ITEMS",
    "PosthocCalibrator",
    "TemperatureScaler",
    "VectorScaler",
    "calibrated_probs",
    "calibrators",
    "fit_calibrator",
    "fit_defaults",
    "for_task",
    "from_results",
    "load_calibrator",
    "load_scaler",
]


def calibrators() -> dict[str, type[PosthocCalibrator]]:
    """NAME -> CALIBRATOR of every calibrator module of the package, by (order, name).
    Scans `__path__` on each call (a directory listing; imports are cached), so a module
    added to the package, or a directory added to `__path__`, is found without a list."""
    found: dict[str, type[PosthocCalibrator]] = {}
    for name, module in discover(__name__, __path__).items():
        cls = getattr(module, "CALIBRATOR", None)
        if not (isinstance(cls, type) and issubclass(cls, PosthocCalibrator)) or cls.name != name:
            raise ValueError(
                f"Expected {module.__name__}.CALIBRATOR to be a PosthocCalibrator named {name!r} "
                f"(NAME), but got {cls!r}"
            )
        kinds = {other.kind: other for other in found.values()}
        if cls.kind in kinds:  # one file kind for two classes: load_calibrator could not tell them apart
            raise ValueError(
                f"Expected one calibrator per kind, but {cls.__name__} and {kinds[cls.kind].__name__} "
                f"share kind {cls.kind!r}"
            )
        found[name] = cls
    return dict(sorted(found.items(), key=lambda item: (item[1].order, item[0])))


def for_task(task: str, defaults_only: bool = True, with_features: bool = False) -> dict[str, type[PosthocCalibrator]]:
    """The calibrators that apply to `task` ("mcqa" or "openqa"), by default only those
    fitted by default: the post-hoc variants of `calm eval` and of a final evaluation.
    Those that read hidden-state features (`reads_features`) only `with_features`: a
    caller whose scores carry none cannot fit them."""
    return {
        name: cls
        for name, cls in calibrators().items()
        if task in cls.tasks and (cls.default or not defaults_only) and (with_features or not cls.reads_features)
    }


def fit_calibrator(
    cls: type[PosthocCalibrator], logits: np.ndarray, labels: np.ndarray, features: np.ndarray | None = None
) -> PosthocCalibrator:
    """`cls.fit`, with the hidden-state features for a calibrator that reads them: the one
    call every fitting site makes, so logits-only calibrators keep their two-argument fit."""
    if cls.reads_features:
        return cls.fit(logits, labels, features)
    return cls.fit(logits, labels)


def calibrated_probs(
    calibrator: PosthocCalibrator, logits: np.ndarray, features: np.ndarray | None = None
) -> np.ndarray:
    """`calibrator.probs`, with the features for one that reads them (see `fit_calibrator`)."""
    if calibrator.reads_features:
        return calibrator.probs(logits, features)  # type: ignore[call-arg]
    return calibrator.probs(logits)


def fit_defaults(logits: np.ndarray, labels: np.ndarray, task: str = "mcqa") -> dict[str, PosthocCalibrator]:
    """name -> fitted calibrator, for every default calibrator of `task`, on one fit set
    ((N, K) logits and (N,) gold indices: option logits, or logits at gold answer tokens)."""
    return {name: cls.fit(logits, labels) for name, cls in for_task(task).items()}


def from_results(name: str, record: Mapping[str, Any], source: str = "results.json") -> PosthocCalibrator:
    """Calibrator `name` as a run's results.json records its fit (its `params()` and
    `fit_on`; no `kind`, which only a saved file carries): ValueError for an unknown name
    or a record that is not a fit of it."""
    cls = calibrators().get(name)
    if cls is None:
        raise ValueError(f"Expected a post-hoc calibrator among {sorted(calibrators())}, but got {name!r}")
    return cls.from_json({k: v for k, v in record.items() if k != "kind"}, source)


def load_calibrator(path: str | Path) -> PosthocCalibrator:
    """The calibrator saved at `path`, whatever its kind (the file's `kind` picks the class)."""
    data = json.loads(Path(path).read_text())
    kind = data.get("kind") if isinstance(data, dict) else None
    kinds = {cls.kind: cls for cls in calibrators().values()}
    if kind not in kinds:
        raise ValueError(f"Expected a calibrator kind in {sorted(kinds)}, but {path} holds {kind!r}")
    return kinds[kind].load(path)


load_scaler = load_calibrator  # the name before the registry
