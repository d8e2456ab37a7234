"""TrainConfig: every setting of a training run, validated, with presets.

    cfg = TrainConfig.preset("quick", train_data="builtin/capitals/train")
    cfg = TrainConfig.from_dict(yaml.safe_load(open("run.yaml")))
    cfg.bilevel.inner_steps, cfg.method_settings      # the nested parts

The run's own settings are fields here; the BOME step's are a `section`
(bilevel.BilevelConfig), the method's are the method's own `Settings` dataclass
(`method_settings`: beta for regularization, ...), LoRA's and generation's their own.
Fields made with `calm_core.settings.setting` are also `calm train` flags and studio
widgets, with the same help text. `from_dict` also reads the flat form of earlier
versions and of flags and `--set` (inner_steps=3, beta=0.3), and routes each key to its
section. The resolved config is saved as the run's config.json (with `head_scope`, the
scope the head really has), so a run can be reproduced or resumed from its directory.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from calm_core.calibration.head import SCOPES, check_scope_fits, scopes_for
from calm_core.calibration.recommend import ALL_LABELLED, CALIBRATE_ON, HELDOUT_ONLY
from calm_core.generative.sampling import GenerationConfig
from calm_core.scoring.adapters import LoraSettings
from calm_core.scoring.prompts import RULES
from calm_core.settings import SettingSpec, check_settings, declared_settings, section, setting
from calm_core.training.bilevel import BilevelConfig
from calm_core.training.context import Method
from calm_core.training.methods import METHODS, get_method
from calm_core.training.scoring_choice import AUTO as AUTO_SCORING
from calm_core.training.selection import SELECT_RULES, EvalSchedule, SelectRule
from calm_core.training.tasks import TASKS, get_task

OPTIMIZERS = ("sgd", "adamw")
AUTOCASTS = ("bf16", "none")  # torch.autocast around the prefill, the steps and evaluation (autocast.autocast_for)
DERIVED_KEYS = ("head_scope",)  # written into config.json for readers, recomputed on reading
MERGED_SECTIONS = ("bilevel", "method_settings", "generation")  # a preset's part and a given part merge


@dataclass
class TrainConfig:
    method: str = setting(
        "calm",
        "training method: a module of calm_core/training/methods (calm, sft, scalar, ...)",
        choices=lambda: METHODS,
    )
    task: str = setting(
        "mcqa",
        "mcqa (option scores) | openqa (free-form answers): a module of calm_core/training/tasks",
        choices=lambda: TASKS,
    )
    model: str = setting("embedded", "'embedded', 'gemma3-270m', a local dir or a hub id")
    train_data: str = setting("builtin/capitals/train", "S_T: labelled training questions")
    heldout_data: str = setting(
        "builtin/capitals/validation", "S_V: inputs for the entropy objective (labels only for eval / TS)"
    )
    eval_data: tuple[str, ...] = ("builtin/capitals/test",)  # periodic and final evaluation sets (ID and OOD)
    train_limit: int | None = setting(
        None, "first N training items (None: all)", label="Training items", min=1, max=10_000_000
    )
    heldout_limit: int | None = setting(
        200, "first N held-out items after removing training questions (None: all)", min=1, max=10_000_000
    )
    eval_limit: int | None = setting(
        200, "first N items of each evaluation set (None: all)", label="Items per evaluation set", min=1, max=10_000_000
    )
    scoring: str = setting(
        "auto",
        "cloze | cloze_norm | letter | auto (the job scores S_V under letter + chat template and takes the paper's "
        "setting, letter answers under the chat template, where accuracy is above chance; cloze otherwise: "
        "training/scoring_choice.py; status.json choices.scoring says which and why)",
        choices=RULES + (AUTO_SCORING,),
    )
    chat_template: bool = False
    scope: str = setting(
        "auto",
        "head scope: vocab | options | scalar | adaptive | auto "
        "(letter: vocab, cloze: scalar, openqa: vocab; head.scopes_for)",
        choices=SCOPES + ("auto",),
    )
    steps: int = setting(60, "optimizer steps (one batch each)", min=1, max=100_000)
    batch_size: int = setting(4, "training questions per step", min=1, max=512)
    heldout_batch_size: int | None = setting(
        None, "S_V questions per step, the upper level (None: the same as batch_size)", min=1, max=512
    )
    optimizer: str = setting(
        "auto",
        "auto: the method's own. sgd: a plain step, which keeps BOME's guarantee that "
        "each step decreases q (calm, scalar, iterate); adamw: the usual fine-tuning "
        "optimizer (sft and the other baselines). AdamW on a BOME step voids the guarantee.",
        choices=("auto",) + OPTIMIZERS,
    )
    lr_theta: float | None = setting(
        None,
        "step size of the LoRA weights (None: DEFAULT_LR of the optimizer)",
        label="lr theta",
        min=1e-6,
        max=100.0,
        format="%.0e",
    )
    lr_alpha: float | None = setting(
        None,
        "step size of the head (None: DEFAULT_LR of the optimizer; no weight decay)",
        label="lr alpha",
        min=1e-6,
        max=100.0,
        format="%.0e",
    )
    weight_decay: float = setting(0.0, "weight decay on theta only (adamw)", min=0.0, max=1.0)
    bilevel: BilevelConfig = section(BilevelConfig, "the first-order (BOME) step: calm, scalar, iterate")
    method_settings: Any = None  # the method's own Settings (None: its defaults; a dict is read into them)
    lora: LoraSettings = field(default_factory=LoraSettings)
    generation: GenerationConfig = field(default_factory=GenerationConfig)  # openqa: prompts, sampling, grouping
    frozen_prefix: bool = (
        True  # with lora.layers = k: cache the hidden states below the top k layers (calm_core.scoring.frozen_prefix)
    )
    frozen_prefix_store: bool = False  # also keep them on disk (CALM_CACHE_DIR/frozen_prefix) for later runs
    load_in_4bit: bool | None = None  # None: QLoRA on CUDA, LoRA on CPU (recorded with the reason)
    device: str = "auto"
    dtype: str = setting(
        "auto",
        "the model body's precision: auto (bf16 on a GPU that has it; on a CPU with avx512_bf16 or AMX, bf16 "
        "for a model bench/precision.py showed keeps its answers, re-checked on a probe at each load; else "
        "fp32), float32 or bfloat16. The LM head's logits and every calibration figure stay fp32",
        choices=("auto", "float32", "bfloat16"),
    )
    autocast: str = setting(
        "auto",
        "torch.autocast around the cache fill, the steps and evaluation: bf16, none, "
        "or auto (bf16 on a CUDA GPU that has it, none on a CPU)",
        choices=("auto",) + AUTOCASTS,
    )
    threads: int = setting(
        0,
        "torch threads of a training job (0: every core but one, at least 1; beside one "
        "busy process a job with every core ran 2.8x slower than with one: bench/threads.py)",
        min=0,
        max=4096,
    )
    seed: int = setting(0, "seeds the batch schedule, the adapters' init and dropout", min=0, max=2**32 - 1)
    eval_every: int = setting(
        20, "steps between evaluations after the dense start (0: only the dense start and the end)", min=0, max=100_000
    )
    eval_dense_until: int = setting(
        20,
        "evaluate S_V every `eval_dense_every` steps up to this step (and at steps 0 "
        "and 1): the calibrated point comes early (training/selection.py)",
        min=0,
        max=100_000,
    )
    eval_dense_every: int = setting(2, "steps between the dense early evaluations", min=1, max=100_000)
    select: str = setting(
        "best",
        "which step the run hands back: best (lowest S_V NLL, ties by S_V ECE, among steps "
        "that keep the lower level and accuracy: the calibrated stop) or last",
        choices=SELECT_RULES,
    )
    select_patience: int = setting(
        4,
        "select best: stop after this many evaluations without a better step (0: run every step)",
        min=0,
        max=100_000,
    )
    lower_tolerance: float = setting(
        0.1,
        "select best: a step whose S_T cross-entropy of theta (no head) is more than "
        "this fraction above step 0's is not selected (the lower level is lost)",
        min=0.0,
        max=10.0,
    )
    checkpoint_every: int = setting(
        20, "steps between checkpoints (0: none but the last; cancel always checkpoints)", min=0, max=100_000
    )
    tensorboard: bool = setting(
        True,
        "write TensorBoard event files beside metrics.jsonl (<run>/tensorboard/) where the tensorboard "
        "package is installed (status.json choices.tensorboard says whether it was); false: none",
        label="TensorBoard event files",
    )
    eval_batch_size: int = setting(32, "questions per forward in evaluation", min=1, max=4096)
    calibrate_on: str = setting(
        HELDOUT_ONLY,
        "where the post-hoc calibrators (TS, vector scaling) are fitted: heldout (S_V) or all (every labelled "
        "item, S_T + S_V, k-fold cross-fitted: the recommendation reads their out-of-fold predictions, so a "
        "small S_V can still choose between them; a trained model is compared on S_V alone)",
        label="Fit post-hoc calibrators on",
        choices=CALIBRATE_ON,
    )
    eval_baselines: bool = (
        True  # final evaluation also runs base and ts (off: runs sharing a base model and S_V reuse the first run's)
    )
    name: str | None = setting(None, "a label for the run id and the studio")

    def job_threads(self, cores: int | None) -> tuple[int, str]:
        """(torch threads for this run's job, why): `threads`, or with 0 every core but one
        (at least 1). torch waits for all its threads at every operator, so a thread whose
        core another process holds stalls the job: beside one busy process, every core ran
        2.8x slower than one thread, while alone it was 1.3x faster (bench/threads.py)."""
        if self.threads:
            return self.threads, "set (threads)"
        cores = cores or 1
        return max(1, cores - 1), f"every core but one of {cores}, at least 1 (threads = 0)"

    def __post_init__(self) -> None:
        self._read_parts()
        check_settings(self)  # every declared kind, choice and bound (calm_core.settings)
        method = get_method(self.method)
        self.method_settings = method_settings(self.method, self.method_settings)
        if self.optimizer == "auto":
            self.optimizer = method.OPTIMIZER
        for name in ("lr_theta", "lr_alpha"):
            if getattr(self, name) is None:
                setattr(self, name, DEFAULT_LR[self.optimizer][name])
        if self.heldout_batch_size is None:
            self.heldout_batch_size = self.batch_size  # both front ends: decided here, recorded in config.json
        self._check_fits(method)
        _ = self.select_rule  # validates select, select_patience, lower_tolerance

    def _read_parts(self) -> None:
        """The nested parts given as dicts (a config file, config.json) as their classes."""
        if isinstance(self.lora, dict):
            given: dict[str, Any] = {k: module_names(v) if k == "target_modules" else v for k, v in self.lora.items()}
            self.lora = LoraSettings(**given)
        if isinstance(self.generation, dict):
            self.generation = GenerationConfig(**self.generation)
        if isinstance(self.bilevel, dict):
            self.bilevel = BilevelConfig(**self.bilevel)
        if isinstance(self.eval_data, (list, str)):
            self.eval_data = (self.eval_data,) if isinstance(self.eval_data, str) else tuple(self.eval_data)

    def _check_fits(self, method: Method) -> None:
        """The rules between settings: the method fits the task, the head's scope the
        scoring rule, k-fold calibration multiple choice."""
        if self.calibrate_on == ALL_LABELLED and self.task != "mcqa":
            raise ValueError(
                f"Expected `calibrate_on` heldout for task {self.task}: k-fold on all labelled items is mcqa's"
            )
        task = get_task(self.task)
        if task.METHODS is not None and self.method not in task.METHODS:
            raise ValueError(
                f"Expected `method` to be one of {list(task.METHODS)} for task {self.task}, but got "
                f"{self.method!r} (it works on option scores)"
            )
        if method.USES_HEAD and not (self.scoring == AUTO_SCORING and self.task == "mcqa"):  # checked once resolved
            check_scope_fits(self.effective_scope, self.scoring, self.task)

    @property
    def select_rule(self) -> SelectRule:
        """The calibrated stop's settings (training/selection.py)."""
        return SelectRule(rule=self.select, patience=self.select_patience, lower_tolerance=self.lower_tolerance)

    @property
    def eval_schedule(self) -> EvalSchedule:
        """The steps the loop evaluates at: dense early, then every `eval_every`, and the last."""
        return EvalSchedule(self.steps, self.eval_every, self.eval_dense_until, self.eval_dense_every)

    @property
    def effective_scope(self) -> str:
        """The head's scope: the method's forced one, else `scope`, with auto resolved by
        the scoring rule and task (head.scopes_for: letter -> vocab, cloze -> scalar)."""
        forced = get_method(self.method).FORCED_SCOPE
        if forced is not None:
            return forced
        if self.scope == "auto":
            if self.scoring == AUTO_SCORING and self.task == "mcqa":
                return "auto"  # decided with the rule, in the job (scoring_choice.resolve_scoring)
            return scopes_for(self.scoring, self.task)[0]
        return self.scope

    def to_dict(self) -> dict[str, Any]:
        """Nested, JSON-ready; `head_scope` is the effective scope, for readers of config.json."""
        data = asdict(self)
        data["eval_data"] = list(self.eval_data)
        data["lora"]["target_modules"] = list(self.lora.target_modules)
        data["head_scope"] = self.effective_scope if get_method(self.method).USES_HEAD else None
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TrainConfig":
        """Nested or flat (earlier config.json files, flags, --set): see `nest_settings`; the
        task's DEFAULTS fill what `data` leaves out (`--task openqa` starts on open-answer sets)."""
        task = get_task(data.get("task", cls.task))
        nested = nest_settings({**task.DEFAULTS, **data})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(nested) - known)
        if unknown:
            raise ValueError(f"Expected TrainConfig fields among {sorted(known)}, but got unknown field(s) {unknown}")
        return cls(**nested)

    @classmethod
    def preset(cls, preset_name: str, /, **overrides: Any) -> "TrainConfig":
        """A preset's fields, then `overrides` (any field, `name` included): `preset_settings`."""
        return cls.from_dict(preset_settings(preset_name, overrides))


def module_names(value: Any) -> tuple[str, ...]:
    """LoRA target modules as given: a list (config.json), or one string of names or groups
    separated by commas (`--set lora.target_modules=all`, `=c_attn,c_proj`)."""
    if isinstance(value, str):
        return tuple(name.strip() for name in value.split(",") if name.strip())
    return tuple(value)


def preset_settings(preset_name: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """A preset's fields, then the task's part of it (tasks/<task>.PRESETS), then
    `overrides`, then what the preset derives from them: `quick`
    evaluates every 20 steps, or every tenth of the run when that is longer, so a long
    quick run spends no larger share of its time evaluating than a short one (at most
    about 10 periodic evaluations; an explicit eval_every wins)."""
    if preset_name not in PRESETS:
        raise ValueError(f"Expected a preset in {sorted(PRESETS)}, but got {preset_name!r}")
    task = get_task(overrides.get("task", TrainConfig.task))
    settings: dict[str, Any] = {}
    for layer in (PRESETS[preset_name], task.PRESETS.get(preset_name, {}), overrides):  # later wins
        given = nest_settings(layer)
        for name in MERGED_SECTIONS:  # sections merge key by key: a preset's T stays beside a given eta
            if isinstance(settings.get(name), dict) and isinstance(given.get(name), dict):
                given[name] = {**settings[name], **given[name]}
        settings.update(given)
    if preset_name == "quick" and "eval_every" not in overrides:
        steps = settings.get("steps", TrainConfig.steps)
        settings["eval_every"] = max(settings["eval_every"], steps // QUICK_EVALUATIONS)
    return settings


# Step sizes when none is given. sgd: the plain BOME step. lr_theta is a tenth of
# lr_alpha's scale on purpose: on minibatches BOME's lambda stops adapting and the
# constraint acts as a fixed penalty, so theta drifts off its fit of S_T at a rate set by
# lr_theta * lambda (docs/bilevel.md, "Minibatches"); a small theta step keeps the lower
# level solved up to the calibrated stop, which comes early (docs/bilevel.md, "The
# calibrated stop": lr_theta 1.0 lost 3 capitals items when trained on chemical symbols,
# 0.1 lost none). log tau's gradient is of order 0.1 to 1. adamw: the usual fine-tuning
# rates (AdamW moves every coordinate by about lr per step, whatever its gradient).
DEFAULT_LR: dict[str, dict[str, float]] = {
    "sgd": {"lr_theta": 0.1, "lr_alpha": 0.5},
    "adamw": {"lr_theta": 1e-4, "lr_alpha": 1e-2},
}
QUICK_EVALUATIONS = 10  # periodic evaluations of a long `quick` run (see preset_settings)


PRESETS: dict[str, dict[str, Any]] = {
    # Minutes on 2 CPU cores with the embedded model: few steps, small batches, LoRA on the
    # attention projections of the top layers only; eval_batch_size 64 because larger
    # matmuls evaluate faster; inner_steps 3 because T = 3 already takes most of the inner
    # drop at a third of T = 10's cost (bench/train_step.py, docs/performance.md).
    "quick": {
        "steps": 40,
        "batch_size": 4,
        "eval_every": 20,
        "checkpoint_every": 20,
        "eval_batch_size": 64,
        "bilevel": {"inner_steps": 3},
        "eval_limit": 100,
        "heldout_limit": 100,
        "lora": {"r": 8, "alpha": 16, "layers": 4},
    },
    # The paper's settings: letter answers (the vocab head at the answer letter), QLoRA r64,
    # LoRA alpha 32, batch 16, BOME with T = 10 (a plain step, see bilevel.py); 5 epochs is
    # steps = 5 * len(train) / 16, set by the caller from the training set size.
    "paper": {
        "batch_size": 16,
        "scoring": "letter",
        "bilevel": {"inner_steps": 10},
        "load_in_4bit": True,
        "lora": {
            "r": 64,
            "alpha": 32,
            "dropout": 0.05,
            "target_modules": ["all"],  # every linear layer of the blocks: q, k, v, o, gate, up, down on Llama
        },
    },
}


def method_settings(method: str, given: Any) -> Any:
    """The method's Settings filled from `given` (None, a dict, or Settings already);
    None for a method that declares none (then `given` must be empty)."""
    kind = get_method(method).Settings
    if kind is None:
        if given:
            raise ValueError(f"Expected no method_settings for method {method!r} (it has none), but got {given!r}")
        return None
    if not isinstance(given, kind):
        values = dict(given or {})
        names = {f.name for f in dataclasses.fields(kind)}
        if set(values) - names:
            raise ValueError(
                f"Expected method_settings of {method!r} among {sorted(names)}, but got {sorted(set(values) - names)}"
            )
        given = kind(**values)
    check_settings(given)  # a method's Settings are declared settings too
    return given


def nest_settings(data: dict[str, Any]) -> dict[str, Any]:
    """`data` with flat keys moved into their sections: a BilevelConfig field into
    `bilevel`, a method setting into `method_settings` when the chosen method declares it.
    Another method's setting at its default is dropped (earlier config.json files carry
    every method's); at any other value it is an error naming the method it belongs to."""
    data = {k: v for k, v in data.items() if k not in DERIVED_KEYS}
    bilevel_names = {f.name for f in dataclasses.fields(BilevelConfig)}
    flat = {k: data.pop(k) for k in list(data) if k in bilevel_names}
    if flat:
        inner = data.get("bilevel") or {}
        data["bilevel"] = {**(asdict(inner) if isinstance(inner, BilevelConfig) else inner), **flat}
    method = data.get("method", TrainConfig.method)
    get_method(method)
    owners = {
        f.name: (name, f)
        for name, module in METHODS.items()
        if module.Settings is not None
        for f in dataclasses.fields(module.Settings)
    }
    own = dict(data.get("method_settings") or {}) if not dataclasses.is_dataclass(data.get("method_settings")) else None
    for key in [k for k in list(data) if k in owners]:
        owner, spec = owners[key]
        value = data.pop(key)
        if owner == method and own is not None:
            own[key] = value
        elif value != spec.default:
            raise ValueError(f"Expected settings of method {method!r}, but `{key}` is a setting of method {owner!r}")
    if own is not None and (own or "method_settings" in data):
        data["method_settings"] = own
    return data


def recorded_bilevel(train: Mapping[str, Any]) -> BilevelConfig | None:
    """The BOME settings in a run's config.json `train` record: the `bilevel` section, or
    the flat keys of runs made before sections; None when they do not validate."""
    names = {f.name for f in dataclasses.fields(BilevelConfig)}
    section = train.get("bilevel")
    values = section if isinstance(section, dict) else {k: v for k, v in train.items() if k in names}
    try:
        return BilevelConfig(**values)
    except (TypeError, ValueError):
        return None


def train_settings() -> dict[str, SettingSpec]:
    """Every declared setting (calm_core.settings) of TrainConfig, its sections and every
    method's Settings, by its flat name: the `calm train` flags and the studio's widgets.
    A value given by that name goes through `from_dict`, which puts it in its section."""
    kinds = [TrainConfig] + [m.Settings for m in METHODS.values() if m.Settings is not None]
    return {spec.name: spec for kind in kinds for spec in declared_settings(kind)}
