"""What every post-hoc calibrator is, and the NLL fitting they share.

A post-hoc calibrator maps a frozen model's logits to calibrated probabilities; it is
fitted on labelled logits (S_V in a run, `--fit-ts-on` in `calm eval`) and then applied
to every evaluation set as one more *variant* beside `base`. Its module in this package
defines NAME and CALIBRATOR (the class; the registry in __init__ finds it). The class
is a dataclass whose fields are its fitted parameters (what `save` writes), with:

    name     NAME: the variant's name and its results.json key ("ts")
    label    what a person reads ("Temperature scaling")
    kind     the `kind` of its saved JSON file ("temperature")
    tasks    where it applies: "mcqa" (option logits), "openqa" (vocabulary logits at
             every generation step; needs `token_transform`)
    default  fitted wherever post-hoc baselines are (`calm eval`, a run's final evaluation)
    order    place among the variants (then by name)
    reads_features  False for most; True for a calibrator that reads each item's hidden
             state (ats): its fit and transform take `features` (N, H) after the logits,
             and callers that have no features skip it (`fit_with`, `apply` in __init__)
    _fit(logits, labels) -> a new fitted calibrator (a classmethod), transform(logits) -> logits

The scikit-learn estimator interface comes with it, from this base (no scikit-learn at
run time: it is a dev dependency, the tests' reference):

    ts = TemperatureScaler().fit(X, y)     # X: (N, K) logits, y: (N,) gold indices; returns ts
    ts.predict_proba(X); ts.predict(X)     # probabilities (N, K), argmax (N,)
    ts.get_params(); ts.set_params()       # the hyperparameters (`hyperparameters`; none so far)
    sklearn.base.clone(ts)                 # an unfitted calibrator with the same parameters

`TemperatureScaler.fit(X, y)` on the class still returns a new fitted calibrator (every
caller before the estimator interface; `fit` is both, see `_FitMethod`). The dataclass
fields are the fitted state, not constructor hyperparameters in scikit-learn's sense:
they are what `save` writes and `from_json` reads back.

Padding: logits are (N, K_max) with -inf for options an item does not have; a
calibrator must keep them at -inf (probability 0). `fit_nll` does the fitting for
calibrators that minimise the NLL of the gold option over a few parameters.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import types
from abc import ABC, abstractmethod
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterator, TypeVar

import numpy as np
import torch

from calm_core.calibration import metrics

MIN_FIT_ITEMS = 10  # fewer and the fitted temperature is mostly noise
FIT_STATS = ("nll_before", "nll_after")  # fields a fit may record beside its parameters
BOOKKEEPING = (*FIT_STATS, "n_fit")  # fields that are not parameters

C = TypeVar("C", bound="PosthocCalibrator")


class _FitMethod:
    """`fit` as scikit-learn calls it and as this project always has: on an instance,
    `calibrator.fit(X, y)` fits it in place and returns it; on the class,
    `TemperatureScaler.fit(X, y)` is the thin wrapper `TemperatureScaler().fit(X, y)`, a
    new fitted calibrator, so every earlier caller keeps working unchanged."""

    def __get__(self, obj: PosthocCalibrator | None, owner: type[PosthocCalibrator]) -> Callable[..., Any]:
        if obj is not None:
            return types.MethodType(PosthocCalibrator._fit_in_place, obj)

        @functools.wraps(PosthocCalibrator._fit_in_place)
        def fit_new(X: np.ndarray, y: np.ndarray, *args: Any, **fit_params: Any) -> PosthocCalibrator:
            return owner._fit(X, y, *args, **fit_params)._fitted_on(X)

        return fit_new


class PosthocCalibrator(ABC):
    """Base of the calibrators in this package (see the module docstring)."""

    name: ClassVar[str]
    label: ClassVar[str]
    kind: ClassVar[str]
    tasks: ClassVar[tuple[str, ...]] = ("mcqa",)
    default: ClassVar[bool] = True
    order: ClassVar[int] = 100
    reads_features: ClassVar[bool] = False
    min_items: ClassVar[int] = MIN_FIT_ITEMS  # fewer labelled items and `fit` refuses, saying why
    hyperparameters: ClassVar[tuple[str, ...]] = ()  # get_params / set_params; what `clone` copies

    fit = _FitMethod()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A calibrator written to the earlier contract (a `fit` classmethod returning a new
        calibrator, as a plug-in module may be) gets the estimator interface too: its
        classmethod becomes `_fit`, and `fit` the method that serves both calls."""
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("fit")
        if isinstance(own, classmethod):
            cls._fit = own  # type: ignore[assignment]  # the plug-in's classmethod, kept as `_fit`
            cls.fit = _FitMethod()

    @classmethod
    @abstractmethod
    def _fit(cls: type[C], logits: np.ndarray, labels: np.ndarray) -> C:
        """A new calibrator fitted on (N, K) logits and (N,) gold indices."""

    def _fit_in_place(self: C, X: np.ndarray, y: np.ndarray, *args: Any, **fit_params: Any) -> C:
        """scikit-learn's `fit`: this calibrator fitted on X (N, K) logits and y (N,) gold
        indices (and the features for one that reads them), returned; its hyperparameters
        are kept, its fitted fields replaced."""
        fitted = type(self)._fit(X, y, *args, **fit_params)
        for spec in dataclasses.fields(self):  # type: ignore[arg-type]
            if spec.name not in self.hyperparameters:
                setattr(self, spec.name, getattr(fitted, spec.name))
        return self._fitted_on(X)

    def _fitted_on(self: C, X: np.ndarray) -> C:
        """The attributes scikit-learn reads after a fit: the option positions as classes."""
        self.classes_ = np.arange(np.shape(X)[1])
        self.n_features_in_ = int(np.shape(X)[1])
        return self

    def predict_proba(self, X: np.ndarray, **params: Any) -> np.ndarray:
        """scikit-learn's name for `probs`: calibrated probabilities (N, K), rows summing to 1."""
        return self.probs(X, **params)

    def fit_transform(self, X: np.ndarray, y: np.ndarray, *args: Any, **fit_params: Any) -> np.ndarray:
        """Fit, then the calibrated logits of X (scikit-learn's transformer shortcut)."""
        return self._fit_in_place(X, y, *args, **fit_params).transform(X, *args, **fit_params)

    def predict(self, X: np.ndarray, **params: Any) -> np.ndarray:
        """The most probable option of each row (a temperature never changes it)."""
        return np.argmax(self.predict_proba(X, **params), axis=1)

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The hyperparameters by name (scikit-learn's convention); `deep` has nothing to
        descend into. The fitted state is not among them, so `clone` gives an unfitted copy."""
        return {name: getattr(self, name) for name in self.hyperparameters}

    def set_params(self: C, **params: Any) -> C:
        """Set hyperparameters by name; an unknown name is refused, as scikit-learn does."""
        for name, value in params.items():
            if name not in self.hyperparameters:
                raise ValueError(
                    f"Expected a hyperparameter of {type(self).__name__} ({list(self.hyperparameters)}), "
                    f"but got {name!r}"
                )
            setattr(self, name, value)
        return self

    def __sklearn_tags__(self) -> Any:
        """scikit-learn's tags, read only by scikit-learn itself (so it is installed when this
        runs): a classifier over K option positions (its `transform` gives logits), labels
        required, no sparse input."""
        from sklearn.utils import ClassifierTags, InputTags, Tags, TargetTags, TransformerTags

        return Tags(
            estimator_type="classifier",
            target_tags=TargetTags(required=True),
            classifier_tags=ClassifierTags(poor_score=True),
            transformer_tags=TransformerTags(preserves_dtype=["float64"]),  # `transform`: calibrated logits
            input_tags=InputTags(two_d_array=True, sparse=False),
        )

    def __sklearn_is_fitted__(self) -> bool:
        """Fitted once `fit` ran or a fitted calibrator was loaded (n_fit counts its items)."""
        return bool(getattr(self, "n_fit", 0))

    @abstractmethod
    def transform(self, logits: np.ndarray) -> np.ndarray:
        """Calibrated logits (N, K) of (N, K) logits; -inf padding stays -inf."""

    def probs(self, logits: np.ndarray) -> np.ndarray:
        return metrics.softmax(self.transform(logits))

    def token_transform(self) -> Callable[[torch.Tensor], torch.Tensor]:
        """The transform applied to the vocabulary logits at every generation step (open QA)."""
        raise NotImplementedError(f"{type(self).__name__} does not apply to generation (tasks {self.tasks})")

    def params(self) -> dict[str, Any]:
        """The fitted parameters, as results.json and `calm eval --json` record them."""
        return {k: v for k, v in self.to_json().items() if k not in (*BOOKKEEPING, "kind")}

    def fit_stats(self) -> dict[str, Any]:
        """NLL before and after the fit, where the calibrator records them."""
        return {k: v for k, v in self.to_json().items() if k in FIT_STATS}

    def describe(self, fmt: str = ".4f") -> str:
        """One line for people: the parameters (`T = 1.2345` for temperature scaling)."""
        return ", ".join(f"{k} = {_number(v, fmt)}" for k, v in self.params().items())

    def warning(self) -> str | None:
        """A note to print beside the fit when it is degenerate; None when it is not."""
        return None

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "kind": self.kind}  # type: ignore[call-overload]

    @classmethod
    def from_json(cls: type[C], data: Any, source: str = "the record") -> C:
        """The calibrator of a saved object (its fields; `kind` checked when present).
        Subclasses check their parameters' values (`check`)."""
        if not isinstance(data, dict):
            raise ValueError(f"Expected a JSON object in {source}, but got {type(data).__name__}")
        if data.get("kind", cls.kind) != cls.kind:
            raise ValueError(f"Expected a {cls.kind}-scaling file, but {source} holds kind={data.get('kind')!r}")
        names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
        calibrator = cls(**{k: data[k] for k in names if k in data})
        calibrator.check(source)
        return calibrator

    def cannot_apply(self, logits: np.ndarray) -> str | None:
        """Why this fit cannot map these (N, K) scores (None: it can). A calibrator with a
        parameter per option position cannot map a set with more options than it was
        fitted on; the evaluation then leaves its row out for that set and says why."""
        return None

    def check(self, source: str) -> None:  # noqa: B027 - a hook with a default, not an abstract method
        """Raise ValueError when a loaded parameter cannot be right; nothing to check by default."""

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2))

    @classmethod
    def load(cls: type[C], path: str | Path) -> C:
        """The calibrator saved at `path` (by `save` or `calm eval --save-ts`); its kind must be ours."""
        data = json.loads(Path(path).read_text())
        if not isinstance(data, dict):
            raise ValueError(f"Expected a JSON object in {path}, but got {type(data).__name__}")
        if data.get("kind") != cls.kind:
            raise ValueError(f"Expected a {cls.kind}-scaling file, but {path} holds kind={data.get('kind')!r}")
        return cls.from_json(data, str(path))


def _number(value: Any, fmt: str) -> str:
    if isinstance(value, float):
        return format(value, fmt)
    if isinstance(value, list):
        return "[" + ", ".join(_number(v, fmt) for v in value) + "]"
    return str(value)


# --- fitting by NLL ---------------------------------------------------------------------


def fit_nll(
    logits: np.ndarray,
    labels: np.ndarray,
    init: list[torch.Tensor],
    scale: Callable[[torch.Tensor, list[torch.Tensor]], torch.Tensor],
) -> tuple[list[torch.Tensor], float, float, int]:
    """Minimise the mean NLL of softmax(scale(z, params)) at the gold option over `params`
    (float64 tensors, started at `init`) by LBFGS to convergence. `scale` sees z with its
    -inf padding zeroed (a -inf in a product makes a nan gradient); the padding is put
    back after it. Returns (params, NLL before, NLL after, N)."""
    z, y = check_fit_inputs(logits, labels)
    finite = torch.isfinite(z)
    z_safe = torch.where(finite, z, torch.zeros_like(z))
    params = [p.detach().clone().to(torch.float64).requires_grad_(True) for p in init]

    def loss() -> torch.Tensor:
        scaled = scale(z_safe, params)
        return masked_nll(torch.where(finite, scaled, torch.full_like(scaled, -math.inf)), y)

    before = float(masked_nll(z, y))
    after = lbfgs(params, loss)
    return [p.detach() for p in params], before, after, len(y)


def check_fit_inputs(
    logits: np.ndarray, labels: np.ndarray, min_items: int = MIN_FIT_ITEMS, what: str = "a post-hoc calibrator"
) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits, labels) as tensors, or ValueError: shapes first, then at least `min_items`
    items (a calibrator with a larger minimum says so, and why, in `what`)."""
    logits = np.asarray(logits, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    if logits.ndim != 2 or len(logits) != len(labels):
        raise ValueError(
            f"Expected `logits` of shape (N, K) with N = len(labels), but got {logits.shape} and {labels.shape}"
        )
    if len(labels) < min_items:
        raise ValueError(f"Expected at least {min_items} items to fit {what}, but got {len(labels)}")
    return torch.from_numpy(logits), torch.from_numpy(labels)


def masked_nll(scaled: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean NLL of softmax(scaled) at the gold option; -inf padding stays excluded."""
    return torch.nn.functional.cross_entropy(scaled, labels)


@contextmanager
def one_thread() -> Iterator[None]:
    """Torch on one thread for a small fit: on tensors of a few thousand numbers, threads
    only contend (a cross-fitted ATS fit ran many times slower with two on a busy machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def lbfgs(
    params: list[torch.Tensor], loss_fn: Callable[[], torch.Tensor], max_rounds: int = 50, tol: float = 1e-10
) -> float:
    """Run LBFGS until the loss stops moving (not a fixed iteration count)."""
    optimizer = torch.optim.LBFGS(
        params, lr=1.0, max_iter=100, tolerance_grad=1e-10, tolerance_change=tol, line_search_fn="strong_wolfe"
    )

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
