"""What every post-hoc calibrator is, and the NLL fitting they share.

A post-hoc calibrator maps a frozen model's logits to calibrated probabilities; it is
fitted on labelled logits (S_V in a run, `--fit-ts-on` in `calm eval`) and then applied
to every evaluation set as one more *variant* beside `base`. Its module in this package
defines NAME and CALIBRATOR (the class; the registry in __init__ finds it). The class
declares its fitted state (`fitted_state`: saved name -> default, what `save` writes),
held after a fit or a load as `<name>_` attributes, with:

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
    takes_sample_weight  `_fit` takes `sample_weight` (N,): a weighted NLL (ts, vs)
    _fit(logits, labels) -> a new fitted calibrator (a classmethod, building it with
             `cls.fitted(**state)`), transform(logits) -> logits

A calibrator written to the earlier contract, a dataclass whose fields are the fitted
state (as a plug-in may be; `fitted_state` left empty), keeps working: its fields are
its state under their own names.

scikit-learn's estimator conventions come with it, from this base (no scikit-learn at
run time: it is a dev dependency, the tests' reference; `calibration/fitted.py`):

    ts = TemperatureScaler().fit(X, y, sample_weight=None)  # X: (N, K) logits, y: (N,) gold indices
    ts.temperature_, ts.n_features_in_, ts.classes_         # fitted state: set by fit or load
    ts.predict_proba(X); ts.predict(X)     # probabilities (N, K), argmax (N,); NotFittedError before fit
    ts.score(X, y)                         # mean log-likelihood of the gold options (= -NLL; higher is better)
    ts.get_params(); ts.set_params()       # the hyperparameters (`hyperparameters`; none so far)
    sklearn.base.clone(ts)                 # an unfitted calibrator with the same parameters

`TemperatureScaler.fit(X, y)` on the class still returns a new fitted calibrator (every
caller before the estimator interface; `fit` is both, see `_FitMethod`). Inputs are
checked once (posthoc/inputs.py): NaN, +inf, text labels and labels outside the columns
are refused with a message saying so. Logits of another width than the fit's are not
refused: a temperature applies to any option count (tests/test_sklearn_calibrators.py
lists the scikit-learn checks this and the labels-are-columns design fail, and why).

Padding: logits are (N, K_max) with -inf for options an item does not have; a
calibrator must keep them at -inf (probability 0). `fit_nll` does the fitting for
calibrators that minimise the NLL of the gold option over a few parameters.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import types
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping, TypeVar

import numpy as np
import torch

from calm_core.calibration import metrics
from calm_core.calibration.fitted import not_fitted
from calm_core.calibration.head_base import Head
from calm_core.calibration.posthoc.fitting import (  # fitting by NLL, re-exported where calibrators import it
    fit_nll as fit_nll,
)
from calm_core.calibration.posthoc.fitting import (
    lbfgs as lbfgs,
)
from calm_core.calibration.posthoc.fitting import (
    masked_nll as masked_nll,
)
from calm_core.calibration.posthoc.fitting import (
    one_thread as one_thread,
)
from calm_core.calibration.posthoc.inputs import (
    MIN_FIT_ITEMS,
    check_fit_inputs,
    check_labels,
    check_logits,
    item_weights,
)

FIT_STATS = ("nll_before", "nll_after")  # fields a fit may record beside its parameters
BOOKKEEPING = (*FIT_STATS, "n_fit")  # fields that are not parameters
# One fit of a few parameters on the logits (TS, vector scaling), in item-fits: about as long
# as this many items through one of ATS's cross-fitting fits (bench/cross_fit_cost.py)
FIXED_FIT_WORK = 20.0

C = TypeVar("C", bound="PosthocCalibrator")
__all__ = [  # the input checks live in inputs.py; calibrators and plug-ins import them from here
    "MIN_FIT_ITEMS",
    "PosthocCalibrator",
    "check_fit_inputs",
    "check_labels",
    "check_logits",
    "fit_nll",
    "item_weights",
    "lbfgs",
    "masked_nll",
    "one_thread",
]


class _FitMethod:
    """`fit` as scikit-learn calls it and as this project always has: on an instance,
    `calibrator.fit(X, y)` fits it in place and returns it; on the class,
    `TemperatureScaler.fit(X, y)` is the thin wrapper `TemperatureScaler().fit(X, y)`, a
    new fitted calibrator, so every earlier caller keeps working unchanged."""

    def __get__(self, obj: PosthocCalibrator | None, owner: type[PosthocCalibrator]) -> Callable[..., Any]:
        if obj is not None:
            return types.MethodType(PosthocCalibrator._fit_in_place, obj)

        @functools.wraps(PosthocCalibrator._fit_in_place)
        def fit_new(
            X: np.ndarray, y: np.ndarray, *args: Any, sample_weight: Any = None, **fit_params: Any
        ) -> PosthocCalibrator:
            fit_params.update(owner._weight_param(sample_weight))
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
    # The fitted state by its saved name (a key of `save`'s JSON) and its default where a file
    # lacks it. Non-empty: the state is held as `<name>_` attributes, absent until `fit` or
    # `load` sets them (scikit-learn's convention). Empty: a dataclass whose fields are the
    # state (a calibrator written to the earlier contract, as a plug-in may be).
    fitted_state: ClassVar[Mapping[str, Any]] = {}

    @classmethod
    def fit_work(cls, n: int) -> float:
        """The cost of one fit on `n` items, in item-fits (one item through one cheap LBFGS
        fit): what the time estimate counts. A few parameters on the logits cost about the
        same whatever `n` is (FIXED_FIT_WORK, measured); a calibrator that cross-fits its
        own choices inside its fit says so by overriding this."""
        return FIXED_FIT_WORK

    takes_sample_weight: ClassVar[bool] = False  # `_fit` takes `sample_weight` (N,): a weighted NLL
    abbreviation: ClassVar[str | None] = None  # a short name readers meet ("ATS"): shown after the label

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

    def _fit_in_place(
        self: C, X: np.ndarray, y: np.ndarray, *args: Any, sample_weight: Any = None, **fit_params: Any
    ) -> C:
        """scikit-learn's `fit`: this calibrator fitted on X (N, K) logits and y (N,) gold
        indices (and the features for one that reads them), each item counted
        `sample_weight[i]` times in the NLL (None: once), returned; its hyperparameters are
        kept, its fitted state replaced."""
        fit_params.update(self._weight_param(sample_weight))
        fitted = type(self)._fit(X, y, *args, **fit_params)
        self._set_state(fitted.state())
        return self._fitted_on(X)

    @classmethod
    def _weight_param(cls, sample_weight: Any) -> dict[str, Any]:
        """{"sample_weight": w} for `_fit`, {} without weights; a calibrator whose fit takes
        none refuses them, saying so (scikit-learn's meta-estimators then do not pass them)."""
        if sample_weight is None:
            return {}
        if not cls.takes_sample_weight:
            raise ValueError(f"Expected no `sample_weight`: {cls.__name__} fits without item weights")
        return {"sample_weight": sample_weight}

    def _fitted_on(self: C, X: np.ndarray) -> C:
        """The attributes scikit-learn reads after a fit: the option positions as classes."""
        k = int(np.asarray(X).shape[1])
        self.classes_ = np.arange(k)
        self.n_features_in_ = k
        return self

    # --- the fitted state --------------------------------------------------------------

    @classmethod
    def _state_names(cls) -> tuple[str, ...]:
        """The saved names of the fitted state (`fitted_state`, or the dataclass fields)."""
        if cls.fitted_state:
            return tuple(cls.fitted_state)
        return tuple(f.name for f in dataclasses.fields(cls) if f.name not in cls.hyperparameters)  # type: ignore[arg-type]

    @classmethod
    def _attribute(cls, name: str) -> str:
        """The attribute that holds the state saved as `name`: `name_`, or `name` on a dataclass."""
        return f"{name}_" if cls.fitted_state else name

    def state(self) -> dict[str, Any]:
        """The fitted state by its saved name (what `save` writes, less `kind`); before a
        fit, NotFittedError."""
        return {name: getattr(self, self._attribute(name)) for name in self._state_names()}

    def _set_state(self, values: Mapping[str, Any]) -> None:
        for name, value in values.items():
            setattr(self, self._attribute(name), value)

    @classmethod
    def fitted(cls: type[C], **state: Any) -> C:
        """A calibrator holding `state` (saved names; a name left out takes its default):
        what `_fit` returns and `from_json` reads, e.g. `TemperatureScaler.fitted(temperature=2.0)`."""
        if not cls.fitted_state:
            return cls(**state)
        unknown = sorted(set(state) - set(cls.fitted_state))
        if unknown:
            raise TypeError(f"Expected fitted state among {list(cls.fitted_state)}, but got {unknown}")
        calibrator = cls()
        calibrator._set_state({**copy.deepcopy(dict(cls.fitted_state)), **state})
        return calibrator

    def __getattr__(self, name: str) -> Any:
        """Only reached for an attribute that is not set: a fitted-state one before `fit`
        is NotFittedError (an AttributeError, so `hasattr` says False)."""
        state = type(self).fitted_state
        if name.endswith("_") and name[:-1] in state:
            raise not_fitted(self)
        if name in state:  # the name before the estimator conventions: say where it went
            raise AttributeError(
                f"{type(self).__name__!r} object has no attribute {name!r}: its fitted value is `{name}_`"
            )
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __eq__(self, other: object) -> bool:
        """Same class, hyperparameters and fitted state (both unfitted counts as the same)."""
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, PosthocCalibrator)
        if not type(self).fitted_state:
            return dataclasses.astuple(self) == dataclasses.astuple(other)  # type: ignore[call-overload]
        mine, theirs = self.__sklearn_is_fitted__(), other.__sklearn_is_fitted__()
        same_state = mine == theirs and (not mine or self.state() == other.state())
        return self.get_params() == other.get_params() and same_state

    __hash__ = None  # type: ignore[assignment]  # mutable state: unhashable, as a dataclass with eq

    def __repr__(self) -> str:
        """scikit-learn's form, the hyperparameters; a fitted one adds its parameters."""
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        fitted = f" [{self.describe()}]" if self.__sklearn_is_fitted__() and type(self).fitted_state else ""
        return f"{type(self).__name__}({args}){fitted}"

    # --- scikit-learn's prediction methods ----------------------------------------------

    def predict_proba(self, X: np.ndarray, **params: Any) -> np.ndarray:
        """scikit-learn's name for `probs`: calibrated probabilities (N, K), rows summing to 1."""
        self._check_fitted()
        return self.probs(X, **params)

    def fit_transform(self, X: np.ndarray, y: np.ndarray, *args: Any, **fit_params: Any) -> np.ndarray:
        """Fit, then the calibrated logits of X (scikit-learn's transformer shortcut)."""
        params = {k: v for k, v in fit_params.items() if k != "sample_weight"}  # transform takes no weights
        return self._fit_in_place(X, y, *args, **fit_params).transform(X, *args, **params)

    def predict(self, X: np.ndarray, **params: Any) -> np.ndarray:
        """The most probable option of each row (a temperature never changes it)."""
        return np.argmax(self.predict_proba(X, **params), axis=1)

    def score(self, X: np.ndarray, y: np.ndarray, sample_weight: Any = None, **params: Any) -> float:
        """The mean log-likelihood of the gold options, log p(y_i | X_i) averaged over items
        (weighted by `sample_weight`): minus the NLL, so higher is better, as scikit-learn's
        `score` is everywhere. X (N, K) logits, y (N,) gold indices."""
        probs = self.predict_proba(X, **params)
        gold = check_labels(y, len(probs), probs.shape[1])
        weights = item_weights(sample_weight, len(gold))
        with np.errstate(divide="ignore"):
            log_likelihood = np.log(probs[np.arange(len(gold)), gold])  # (N,)
        return float(np.sum(weights * log_likelihood) / np.sum(weights))

    def _check_fitted(self) -> None:
        if not self.__sklearn_is_fitted__():
            raise not_fitted(self)

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
        """Fitted once `fit` ran or a calibrator was loaded: its state attributes are set
        (on a dataclass calibrator, `n_fit` counts the items it was fitted on)."""
        if type(self).fitted_state:
            return all(self._attribute(name) in vars(self) for name in self._state_names())
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

    # ------------------------------------------------------------------ the export (export/folder.py)

    def export_head(self) -> Head | None:
        """The calibration head that computes this fit's probabilities over a zero adapter
        (calibration/head.py or adaptive_head.py), so that `calm export --variant NAME`
        writes it as a folder loading like the trained model; None: this calibrator is not
        exported. ValueError with the reason when this fit has no such head."""
        return None

    def card_words(self, fitted: str) -> str:
        """What an export's model card says the folder holds; `fitted`: what the fit was
        fitted on, in words (export/model_card.fitted_on)."""
        label = self.label[:1].lower() + self.label[1:]
        return f"**{label}** of the base model ({fitted}, as a head over a zero adapter)"

    @classmethod
    def exports(cls) -> bool:
        """Whether `calm export --variant NAME` writes it: its class builds a head."""
        return cls.export_head is not PosthocCalibrator.export_head

    def to_json(self) -> dict[str, Any]:
        """The saved form: the fitted state by its saved name, and `kind`."""
        return {**copy.deepcopy(self.state()), "kind": self.kind}

    @classmethod
    def from_json(cls: type[C], data: Any, source: str = "the record") -> C:
        """The calibrator of a saved object (its fields; `kind` checked when present).
        Subclasses check their parameters' values (`check`)."""
        if not isinstance(data, dict):
            raise ValueError(f"Expected a JSON object in {source}, but got {type(data).__name__}")
        if data.get("kind", cls.kind) != cls.kind:
            raise ValueError(f"Expected a {cls.kind}-scaling file, but {source} holds kind={data.get('kind')!r}")
        calibrator = cls.fitted(**{k: data[k] for k in cls._state_names() if k in data})
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
