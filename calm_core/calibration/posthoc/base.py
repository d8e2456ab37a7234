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
    fit(logits, labels) -> calibrator (a classmethod), transform(logits) -> logits

Padding: logits are (N, K_max) with -inf for options an item does not have; a
calibrator must keep them at -inf (probability 0). `fit_nll` does the fitting for
calibrators that minimise the NLL of the gold option over a few parameters.
"""

from __future__ import annotations

import dataclasses
import json
import math
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

    @classmethod
    @abstractmethod
    def fit(cls: type[C], logits: np.ndarray, labels: np.ndarray) -> C:
        """Fitted on (N, K) logits and (N,) gold indices."""

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
