"""The run's autocast: bf16 where it pays (a CUDA GPU that has it), nothing elsewhere. The
loop runs the fill, the steps and the final evaluation inside it; an evaluation of a
finished run (`calm_core.results.added`) runs under the same choice.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch


def resolve_autocast(setting: str, device: torch.device) -> str:
    """`auto` -> bf16 on a CUDA GPU that has it, none elsewhere. On the GPU the QLoRA
    model keeps its norms, embeddings and LM head in fp32 (prepare_model_for_kbit_training)
    and PEFT keeps LoRA weights in fp32, so without autocast those matmuls run in fp32;
    on the CPU bf16 matmuls are slower than fp32, so nothing is gained there."""
    if setting != "auto":
        return setting
    return "bf16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "none"


def autocast_for(setting: str, device: torch.device) -> AbstractContextManager[Any]:
    """torch.autocast in bf16 (thread-local: it covers everything the block runs), or nothing."""
    if resolve_autocast(setting, device) == "none":
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
