"""The context a run's steps see, built once per run: the LoRA-wrapped model, the calibration
head, the optimizer and the frozen-prefix runner, with a record of each choice made
(status.json `choices`). `restored_context` builds the same for a finished run's model and
puts its saved adapter and head in, so an evaluation after the run scores as its final
evaluation did. The loop that uses it is `calm_core.training.loop`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from calm_core.calibration.head import CalibrationHead, acts_on_for, make_head, shifts_allowed
from calm_core.paths import cache_dir
from calm_core.scoring.adapters import attach_lora, lora_parameters, quantization_choice
from calm_core.scoring.prompts import ScoringConfig
from calm_core.training.config import TrainConfig
from calm_core.training.context import Method, StepContext
from calm_core.training.methods import get_method
from calm_core.training.tasks import get_task

if TYPE_CHECKING:  # loading models pulls in transformers; the loop imports it when it loads one
    from calm_core.scoring.models import LoadedModel


def build_context(cfg: TrainConfig, lm: LoadedModel, k_max: int, method: Method) -> tuple[StepContext, dict[str, Any]]:
    """LoRA-wrapped model, head and optimizer; returns the context and the choices it made (status.json `choices`)."""
    use_4bit, why = quantization_choice(cfg.load_in_4bit, lm.device)
    model, lora_record = attach_lora(lm.model, cfg.lora, quantized=use_4bit and lm.spec.load_in_4bit)
    model.train()
    head = None
    if method.USES_HEAD:
        scope = cfg.effective_scope
        size = {"vocab": model.config.vocab_size, "options": k_max}.get(scope)
        width = model.config.get_text_config().hidden_size  # a multimodal model's LM part
        shifts = k_max if scope == "adaptive" and shifts_allowed(cfg.scoring, cfg.task) else 0  # l(h): letter
        head = make_head(scope, size=size, width=width, acts_on=acts_on_for(scope, cfg.task), shifts=shifts)
        head = head.to(lm.device)
    theta = lora_parameters(model)
    alpha = list(head.parameters()) if head is not None else []
    optimizer = make_optimizer(cfg, theta, alpha)
    scoring = ScoringConfig(rule=cfg.scoring, chat_template=cfg.chat_template)
    runner, prefix_record = _frozen_prefix_runner(cfg, model)
    ctx = StepContext(
        model=model,
        tokenizer=lm.tokenizer,
        scoring=scoring,
        optimizer=optimizer,
        theta=theta,
        alpha=alpha,
        head=head,
        settings=cfg,
        task=get_task(cfg.task),
        runner=runner,
    )
    choices = {
        "quantization": {"four_bit": use_4bit and lm.spec.load_in_4bit, "reason": why},
        "lora": lora_record,
        "frozen_prefix": prefix_record,
        "fast_paths": _fast_path_record(model, prefix_record),
        "precision": lm.info.get("precision"),  # the body's dtype and why (scoring/precision.py)
    }
    return ctx, choices


def _fast_path_record(model: Any, prefix_record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each fast path the run uses or not, and why (`scoring.fast_paths`): the measured
    scoring paths and the frozen prefix as `_frozen_prefix_runner` decided it."""
    from calm_core.scoring.fast_paths import fast_path_choices

    frozen = {"on": bool(prefix_record["used"]), "reason": prefix_record["reason"], "gap": prefix_record.get("gap")}
    return {**fast_path_choices(model), "frozen_prefix": frozen}


def restored_context(cfg: TrainConfig, lm: LoadedModel, directory: Path, k_max: int) -> StepContext:
    """The context of a finished run's model for evaluation: LoRA and head built as the run
    built them (`build_context`), then the adapter and head of `directory` (its `selected/`
    or a checkpoint) put in, so scores go through the same path as its final evaluation.
    An options head keeps its saved size: items with more than that many options are refused."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    from calm_core.calibration.head_base import HEAD_FILENAME

    saved = CalibrationHead.load(directory, cfg.task) if (directory / HEAD_FILENAME).is_file() else None
    if saved is not None and saved.scope == "options":
        if k_max > saved.size:
            raise ValueError(
                f"Expected items with at most {saved.size} options (the run's options head has "
                f"{saved.size} positions), but got items with {k_max}"
            )
        k_max = saved.size
    ctx, _ = build_context(cfg, lm, k_max, get_method(cfg.method))
    loaded = set_peft_model_state_dict(ctx.model, load_file(str(directory / "adapter_model.safetensors")))
    if loaded.unexpected_keys:  # an adapter of another shape would leave this one at its random start
        raise ValueError(
            f"Expected the adapter in {directory} to fit the run's LoRA settings, but "
            f"{len(loaded.unexpected_keys)} of its tensors do not (first: {loaded.unexpected_keys[0]})"
        )
    if (ctx.head is None) != (saved is None):
        raise ValueError(
            f"Expected {'a' if ctx.head is not None else 'no'} calibration head in {directory} "
            f"(method {cfg.method}), but found {'none' if saved is None else 'one'}"
        )
    if ctx.head is not None:
        ctx.head.load_state_dict(saved.state_dict())
    ctx.model.eval()
    return ctx


def make_optimizer(
    cfg: TrainConfig, theta: list[torch.nn.Parameter], alpha: list[torch.nn.Parameter]
) -> torch.optim.Optimizer:
    """`sgd`: a plain step u <- u - lr g per block (no momentum, no weight decay), which
    keeps BOME's descent guarantee (bilevel.plain_step_sizes); `adamw`: AdamW, weight
    decay on theta only."""
    if cfg.optimizer == "sgd":
        groups = [{"params": theta, "lr": cfg.lr_theta}] + ([{"params": alpha, "lr": cfg.lr_alpha}] if alpha else [])
        return torch.optim.SGD(groups, momentum=0.0)
    groups = [{"params": theta, "lr": cfg.lr_theta, "weight_decay": cfg.weight_decay}]
    if alpha:
        groups.append({"params": alpha, "lr": cfg.lr_alpha, "weight_decay": 0.0})
    return torch.optim.AdamW(groups)


def _frozen_prefix_runner(cfg: TrainConfig, model: Any) -> tuple[Any, dict[str, Any]]:
    """A FrozenPrefixModel when it applies and proves equal to the model's own forward
    (`fast_paths.frozen_prefix_check`, measured once per model and split), and a
    record of why or why not (config.json)."""
    from calm_core.scoring.fast_paths import frozen_prefix_check
    from calm_core.scoring.frozen_prefix import FrozenPrefixModel, frozen_prefix_split

    if not cfg.frozen_prefix:
        return None, {"used": False, "reason": "off (frozen_prefix = false)"}
    split = frozen_prefix_split(model, cfg.lora.layers)
    if split is None:
        why = "LoRA adapts every layer" if cfg.lora.layers is None else "no decoder layers to cache or k >= layers"
        return None, {"used": False, "reason": why}
    check = frozen_prefix_check(model, split)
    if not check.on:
        return None, {"used": False, "split_layer": split, "reason": check.reason, "gap": check.gap}

    store = cache_dir() / "frozen_prefix" if cfg.frozen_prefix_store else None
    runner = FrozenPrefixModel(model, split, store_root=store)
    runner.share_top = check.share_top  # off where only the top layers' prefix sharing failed the probe
    return runner, {
        "used": True,
        "split_layer": split,
        "share_top": check.share_top,
        "store": str(runner.store.path) if runner.store else None,
        "reason": f"LoRA on the top {cfg.lora.layers} layers only; {check.reason}",
        "gap": check.gap,
    }
