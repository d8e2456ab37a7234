"""LoRA / QLoRA adapters through PEFT, with the choice and its reason recorded.

    model, record = attach_lora(lm, LoraSettings(r=8), want_4bit=False)

QLoRA (NF4 base weights, bf16 compute) is the GPU path; on a CPU we use plain LoRA by
default because 4-bit gains nothing at 135M parameters (bitsandbytes 0.50 does run
there if asked). Either way `record` says what was done and why, for config.json.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass
from typing import Any

import torch

from calm_core.scoring.lora_targets import DEFAULT_TARGETS, layer_stack, resolve_targets, uses_conv1d
from calm_core.settings import check_settings, setting


@dataclass(frozen=True)
class LoraSettings:
    r: int = setting(8, "adapter rank", label="LoRA rank", min=1, max=256)
    alpha: int = setting(16, "LoRA scaling numerator (scale = alpha / r)", label="LoRA alpha", min=1, max=1024)
    dropout: float = setting(0.0, "LoRA dropout (0 keeps training deterministic on the CPU)", min=0.0, max=0.9)
    # groups (attention, mlp, all) or the model's own module names: scoring/lora_targets.py
    target_modules: tuple[str, ...] = DEFAULT_TARGETS
    layers: int | None = setting(
        None, "adapt only the top N decoder layers (None: all)", label="LoRA on top N layers", min=1, max=1000
    )

    def __post_init__(self) -> None:
        check_settings(self)  # each setting's declared kind and bounds


def quantization_choice(want_4bit: bool | None, device: torch.device) -> tuple[bool, str]:
    """(use 4-bit?, why). None means 'decide for me'."""
    if want_4bit is None:
        if device.type == "cuda":
            return True, "auto: QLoRA (NF4, bf16 compute) on CUDA saves memory"
        return False, "auto: LoRA on CPU; 4-bit gains nothing at this size and is slower there"
    return want_4bit, "requested " + ("4-bit (QLoRA)" if want_4bit else "full-precision LoRA")


def attach_lora(model: Any, settings: LoraSettings, quantized: bool = False) -> tuple[Any, dict[str, Any]]:
    """Wrap `model` with a fresh LoRA adapter; returns (peft model, record for config.json)."""
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    if quantized:
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    targets = resolve_targets(model, settings.target_modules)  # refused here, in one line, if nothing fits
    stack = layer_stack(model)
    layers = top_layers(stack.count if stack else None, settings.layers)
    config = LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=targets,
        layers_to_transform=layers,
        layers_pattern=stack.pattern if stack and layers is not None else None,
        fan_in_fan_out=uses_conv1d(model, targets),
        bias="none",
        task_type="CAUSAL_LM",
    )
    peft_model = get_peft_model(model, config)
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    record = {
        **asdict(settings),
        "targets": targets,  # what `target_modules` resolved to on this model
        "layer_stack": stack.path if stack else None,
        "layers_to_transform": layers,
        "trainable_parameters": trainable,
        "quantized": quantized,
    }
    return peft_model, record


def top_layers(count: int | None, top: int | None) -> list[int] | None:
    """The indices of the top `top` of `count` decoder layers (None: every layer)."""
    if top is None or not count:
        return None
    return list(range(max(0, count - top), count))


def lora_parameters(model: Any) -> list[torch.nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


@contextmanager
def evaluating(model: Any, adapter: bool = True) -> Iterator[Any]:
    """`model` in eval mode (no dropout) for the block, its LoRA adapter switched off
    unless `adapter`; the train / eval mode it had is restored afterwards. A model
    without adapters (no `disable_adapter`) is its own base model."""
    was_training = model.training
    model.eval()
    off = model.disable_adapter() if not adapter and hasattr(model, "disable_adapter") else nullcontext()
    try:
        with off:
            yield model
    finally:
        model.train(was_training)
