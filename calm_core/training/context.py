"""What one training step sees (`StepContext`), and the shape every task module has (`Task`).

A method's step (training/methods/) asks the context for the two objectives of the
bilevel problem, `ctx.lower(train_items)` (L_tr) and `ctx.upper(heldout_items)` (F), as
closures it can call at any parameters. Which objectives those are is the task's
business (training/tasks/: option scores for `mcqa`, answer tokens for `openqa`), so a
method never asks which task it trains.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence

import torch

from calm_core.calibration.head_base import Head
from calm_core.scoring.prompts import ScoringConfig
from calm_core.training.objectives import option_logits

Closure = Callable[[], torch.Tensor]


class Task(Protocol):
    """A training task: one module under training/tasks/ with these names (a module
    satisfies a Protocol). The loop calls them in this order."""

    NAME: str
    ITEM_KIND: str  # "mc" | "open": the item schema its datasets load as (data.schema)
    METHODS: tuple[str, ...] | None  # the methods it supports (None: every one)
    DEFAULTS: dict  # settings `--task <NAME>` starts from, below anything given (TrainConfig.from_dict)
    PRESETS: dict  # per preset, this task's settings on top of the preset's
    SELECTS: bool  # whether selection_candidate judges evaluations (the calibrated stop, training/selection.py)

    def lower(self, ctx: "StepContext", items: Sequence[Any]) -> Closure: ...
    def upper(self, ctx: "StepContext", items: Sequence[Any]) -> Closure: ...
    def check_items(self, ctx: "StepContext", data: Any) -> dict[str, int]: ...
    def prefill(self, ctx: "StepContext", data: Any, start_step: int, writer: Any, show: bool) -> dict | None: ...
    def evaluate_now(
        self, ctx: "StepContext", data: Any, batch_size: int, caches: dict | None, heldout_only: bool
    ) -> dict[str, float]: ...
    def selection_candidate(self, ctx: "StepContext", data: Any, step: int, record: dict, caches: dict) -> Any: ...
    def final_evaluation(
        self, ctx: "StepContext", data: Any, run: Any, reuse: dict | None, extra: dict | None, times: Any = None
    ) -> list[dict]: ...
    def added_evaluation(self, ctx: "StepContext", evals: dict, calibrators: dict, root: Any) -> list[dict]: ...


class Method(Protocol):
    """A training method: one module under training/methods/ with these names. The first
    four are required; the rest are optional, and `methods.as_method` gives a module that
    lacks one the default written here, so callers read them without getattr."""

    NAME: str
    USES_HEAD: bool  # whether it trains a calibration head (alpha) beside theta
    DESCRIPTION: str  # one sentence for the Train page and `calm train --help`

    def step(self, ctx: "StepContext", train_items: Sequence[Any], heldout_items: Sequence[Any]) -> dict[str, float]:
        """One training step on a batch of S_T and one of S_V; returns the log values."""
        ...

    LABEL: str | None  # optional, None (NAME is shown): what a person reads, mid-sentence ("CALM")
    OPTIMIZER: str  # optional, "adamw": the optimizer `optimizer = auto` picks (a plain BOME step: "sgd")
    FORCED_SCOPE: str | None  # optional, None: the head scope the method always uses
    Settings: type | None  # optional, None: the method's own settings dataclass (method_settings)
    step_cost: Callable[[Any], float] | None  # optional, None: a step's cost in SFT steps, from the config


@dataclass(kw_only=True)
class StepContext:
    """The model under training, its head and optimizer, the method's settings and the task."""

    model: Any
    tokenizer: Any
    scoring: ScoringConfig
    optimizer: torch.optim.Optimizer
    theta: list[torch.nn.Parameter]  # LoRA weights
    alpha: list[torch.nn.Parameter]  # calibration head parameters ([] without a head)
    head: Head | None
    settings: Any  # TrainConfig: beta, label_smoothing, bilevel settings, ...
    task: Task  # the task module (training/tasks/): objectives and evaluation
    state: dict[str, Any] = field(default_factory=dict)  # per-method memory (e.g. iterate's phase)
    runner: Any = None  # a FrozenPrefixModel over `model` when the frozen layers are cached

    @property
    def net(self) -> Any:
        """What forward passes go through: the frozen-prefix runner if any, else the model."""
        return self.runner if self.runner is not None else self.model

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def logits(self, items: Sequence[Any]) -> torch.Tensor:
        """Calibrated option scores (B, K_max) of multiple-choice items, with gradients: what
        the methods that work on option scores alone (regularization, label_smoothing, cft) use."""
        return option_logits(self.net, self.tokenizer, items, self.scoring, self.head)

    def lower(self, items: Sequence[Any]) -> Closure:
        """L_tr closure: the task's cross-entropy on a training batch, under the head."""
        return self.task.lower(self, items)

    def upper(self, items: Sequence[Any]) -> Closure:
        """F closure: minus the task's mean entropy on held-out inputs (labels unused)."""
        return self.task.upper(self, items)


@dataclass(frozen=True)
class Variant:
    """One kind of row in a run's final evaluation: which parts of the trained model score
    the items (head, adapter) and which post-hoc calibrator, fitted on S_V, maps the
    untouched model's scores."""

    name: str
    use_head: bool = False
    use_adapter: bool = False
    calibrator: Any = None


def final_variants(method: str, has_head: bool, fitted: Mapping[str, Any], baselines: bool) -> list[Variant]:
    """The rows every task's final evaluation fills, in table order: `base` (when the run
    evaluates baselines), each fitted calibrator, the trained model, and with a head its
    theta-only ablation (adapter on, head off)."""
    variants = [Variant("base")] if baselines else []
    variants += [Variant(name, calibrator=calibrator) for name, calibrator in fitted.items()]
    variants.append(Variant(method, use_head=True, use_adapter=True))
    if has_head:
        variants.append(Variant(f"{method}_theta_only", use_adapter=True))
    return variants
