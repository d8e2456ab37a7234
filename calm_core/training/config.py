"""TrainConfig: every setting of a training run, validated, with presets.

    cfg = TrainConfig.preset("quick", train_data="builtin/capitals/train")
    cfg = TrainConfig.from_dict(yaml.safe_load(open("run.yaml")))

The resolved config (plus seed, versions and the scoring rule) is saved as the run's
config.json, so a run can be reproduced or resumed from its directory alone.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from typing import Any

from calm_core.training.adapters import LoraSettings
from calm_core.generative.sampling import GenerationConfig
from calm_core.training.bilevel import CONSTRAINTS, INNER_RULES, INNER_STARTS, PHI_CHOICES
from calm_core.calibration.head import SCOPES, check_scope_fits, scopes_for
from calm_core.training.methods import get_method
from calm_core.scoring.prompts import RULES


@dataclass
class TrainConfig:
    method: str = "calm"  # see calm_core.training.methods.METHODS
    task: str = "mcqa"  # mcqa (option scores) | openqa (free-form answers, calm_core.generative)
    model: str = "embedded"  # 'embedded', a local dir or a hub id
    train_data: str = "builtin/capitals/train"  # S_T: labelled training questions
    heldout_data: str = "builtin/capitals/validation"  # S_V: inputs for the entropy objective (labels only for eval / TS)
    eval_data: tuple[str, ...] = ("builtin/capitals/test",)  # periodic and final evaluation sets (ID and OOD)
    train_limit: int | None = None  # first N training items (None: all)
    heldout_limit: int | None = 200
    eval_limit: int | None = 200
    scoring: str = "cloze"  # cloze | cloze_norm | letter
    chat_template: bool = False
    scope: str = "auto"  # head scope: vocab | options | scalar | auto (letter: vocab, cloze: scalar, openqa: vocab; head.scopes_for)
    steps: int = 60  # optimizer steps (one batch each)
    batch_size: int = 4  # training questions per step
    heldout_batch_size: int = 4  # S_V questions per step (upper level)
    optimizer: str = "auto"  # sgd (a plain step) | adamw | auto (the method's: sgd for calm, scalar, iterate)
    lr_theta: float | None = None  # step size of the LoRA weights (None: DEFAULT_LR of the optimizer)
    lr_alpha: float | None = None  # step size of the head (None: DEFAULT_LR of the optimizer; no weight decay)
    weight_decay: float = 0.0  # on theta only (adamw)
    inner_steps: int = 10  # BOME's T (the paper's 10)
    inner_lr: float = 3.0  # BOME inner step size (inner_rule fixed) or its cap (polyak)
    inner_rule: str = "polyak"  # polyak: step L / ||grad L||^2, scale-free | fixed: inner_lr
    inner_start: str = "theta"  # theta: theta~ starts at theta each step (BOME) | persistent: at the last theta~
    eta: float = 0.5  # BOME's eta in phi = eta * ||grad q||^2 (or eta * q)
    max_update_norm: float = 1.0  # BOME's plain step is cut to this length, direction kept (0: no limit)
    constraint: str = "theta"  # theta: theta optimal for L given alpha (the paper) | joint: (alpha, theta) optimal (docs/bilevel.md)
    phi: str = "grad"  # grad | value
    beta: float = 0.5  # regularization method: CE - beta * entropy
    label_smoothing: float = 0.1  # label_smoothing method
    cft_gamma: float = 1.0  # cft method: weight of the calibration penalty
    lora: LoraSettings = field(default_factory=LoraSettings)
    generation: GenerationConfig = field(default_factory=GenerationConfig)  # openqa: prompts, sampling, grouping
    frozen_prefix: bool = True  # with lora.layers = k: cache the hidden states below the top k layers (calm_core.scoring.frozen_prefix)
    frozen_prefix_store: bool = False  # also keep them on disk (CALM_CACHE_DIR/frozen_prefix) for later runs
    load_in_4bit: bool | None = None  # None: QLoRA on CUDA, LoRA on CPU (recorded with the reason)
    device: str = "auto"
    seed: int = 0
    eval_every: int = 20  # steps between evaluations (0: only at the end)
    checkpoint_every: int = 20  # steps between checkpoints (cancel always checkpoints)
    eval_batch_size: int = 32
    eval_baselines: bool = True  # final evaluation also runs base and ts (off: runs sharing a base model and S_V reuse the first run's)
    name: str | None = None  # a label for the run id and the studio

    def __post_init__(self) -> None:
        if isinstance(self.lora, dict):
            self.lora = LoraSettings(**{k: tuple(v) if k == "target_modules" else v for k, v in self.lora.items()})
        if isinstance(self.generation, dict):
            self.generation = GenerationConfig(**self.generation)
        if isinstance(self.eval_data, (list, str)):
            self.eval_data = (self.eval_data,) if isinstance(self.eval_data, str) else tuple(self.eval_data)
        get_method(self.method)
        _one_of("scoring", self.scoring, RULES)
        _one_of("task", self.task, TASKS)
        _one_of("scope", self.scope, SCOPES + ("auto",))
        if self.task == "openqa":
            _check_openqa(self.method)
        if get_method(self.method).USES_HEAD:
            check_scope_fits(self.effective_scope, self.scoring, self.task)
        _one_of("phi", self.phi, PHI_CHOICES)
        _one_of("inner_rule", self.inner_rule, INNER_RULES)
        _one_of("inner_start", self.inner_start, INNER_STARTS)
        _one_of("constraint", self.constraint, CONSTRAINTS)
        _one_of("optimizer", self.optimizer, OPTIMIZERS + ("auto",))
        if self.optimizer == "auto":
            self.optimizer = getattr(get_method(self.method), "OPTIMIZER", "adamw")
        for name in ("lr_theta", "lr_alpha"):
            if getattr(self, name) is None:
                setattr(self, name, DEFAULT_LR[self.optimizer][name])
        for name in ("steps", "batch_size", "heldout_batch_size", "inner_steps", "eval_batch_size"):
            _positive_int(name, getattr(self, name))
        if not self.max_update_norm >= 0:
            raise ValueError(f"Expected `max_update_norm` to be >= 0, but got {self.max_update_norm}")
        for name in ("lr_theta", "lr_alpha", "inner_lr", "eta"):
            if not getattr(self, name) > 0:
                raise ValueError(f"Expected `{name}` to be > 0, but got {getattr(self, name)}")
        if self.eval_every < 0 or self.checkpoint_every < 0:
            raise ValueError("Expected `eval_every` and `checkpoint_every` to be >= 0")

    @property
    def effective_scope(self) -> str:
        """The head's scope: the method's forced one, else `scope`, with auto resolved by
        the scoring rule and task (head.scopes_for: letter -> vocab, cloze -> scalar)."""
        forced = getattr(get_method(self.method), "FORCED_SCOPE", None)
        if forced is not None:
            return forced
        if self.scope == "auto":
            return scopes_for(self.scoring, self.task)[0]
        return self.scope

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["eval_data"] = list(self.eval_data)
        data["lora"]["target_modules"] = list(self.lora.target_modules)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrainConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"Unknown TrainConfig field(s) {unknown}; expected some of {sorted(known)}")
        return cls(**data)

    @classmethod
    def preset(cls, preset_name: str, /, **overrides: Any) -> "TrainConfig":
        """A preset's fields, then `overrides` (any field, `name` included): `preset_settings`."""
        return cls.from_dict(preset_settings(preset_name, overrides))


def preset_settings(preset_name: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """A preset's fields, then `overrides`, then what the preset derives from them: `quick`
    evaluates every 20 steps, or every tenth of the run when that is longer, so a long
    quick run spends no larger share of its time evaluating than a short one (at most
    about 10 periodic evaluations; an explicit eval_every wins)."""
    if preset_name not in PRESETS:
        raise ValueError(f"Expected a preset in {sorted(PRESETS)}, but got {preset_name!r}")
    settings = {**PRESETS[preset_name], **overrides}
    if preset_name == "quick" and "eval_every" not in overrides:
        steps = settings.get("steps", TrainConfig.steps)
        settings["eval_every"] = max(settings["eval_every"], steps // QUICK_EVALUATIONS)
    return settings


OPTIMIZERS = ("sgd", "adamw")
# Step sizes when none is given. sgd: the plain BOME step; LoRA's B starts at 0, so its
# gradients are small (||grad_theta L|| ~ 0.1 on the embedded model) and a step of 1 is
# what moves it; log tau's gradient is of order 0.1 to 1. adamw: the usual fine-tuning
# rates (AdamW moves every coordinate by about lr per step, whatever its gradient).
DEFAULT_LR: dict[str, dict[str, float]] = {
    "sgd": {"lr_theta": 1.0, "lr_alpha": 0.5},
    "adamw": {"lr_theta": 1e-4, "lr_alpha": 1e-2},
}
QUICK_EVALUATIONS = 10  # periodic evaluations of a long `quick` run (see preset_settings)
TASKS = ("mcqa", "openqa")
OPENQA_METHODS = ("calm", "scalar", "sft", "iterate")  # methods built on the lower / upper closures alone


def _check_openqa(method: str) -> None:
    if method not in OPENQA_METHODS:
        raise ValueError(f"Expected `method` to be one of {list(OPENQA_METHODS)} for task openqa, but got {method!r} "
                         "(it works on option scores)")


def _one_of(name: str, value: Any, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ValueError(f"Expected `{name}` to be one of {list(valid)}, but got {value!r}")


def _positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"Expected `{name}` to be a positive int, but got {value!r}")


PRESETS: dict[str, dict[str, Any]] = {
    # Minutes on 2 CPU cores with the embedded model: few steps, small batches, LoRA on
    # the attention projections of the top layers only.
    # eval_batch_size 64: larger matmuls make the periodic evaluation a little faster than at 32.
    # inner_steps 3: bench/train_step.py measures 0.90 s/step and an inner drop of 0.80 of L on
    # ARC-Easy (T = 10: 2.65 s and 0.99), which keeps a 300-step run near 5 minutes here.
    "quick": {"steps": 40, "batch_size": 4, "heldout_batch_size": 4, "eval_every": 20, "checkpoint_every": 20,
              "eval_batch_size": 64, "inner_steps": 3,
              "eval_limit": 100, "heldout_limit": 100, "lora": {"r": 8, "alpha": 16, "layers": 4}},
    # The paper's settings: letter answers (the vocab head at the answer letter), QLoRA r64,
    # LoRA alpha 32, batch 16, BOME with T = 10 (a plain step, see bilevel.py); 5 epochs is
    # steps = 5 * len(train) / 16, set by the caller from the training set size.
    "paper": {"batch_size": 16, "heldout_batch_size": 16, "scoring": "letter", "inner_steps": 10, "load_in_4bit": True,
              "lora": {"r": 64, "alpha": 32, "dropout": 0.05,
                       "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}},
}
