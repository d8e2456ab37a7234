"""What both calibration heads share (head.py's constant scopes, adaptive_head.py's
temperature per question): the `Head` protocol the scorer and training type them by, the
file name and format tag they are saved under and the one formula that applies a
temperature and a shift to scores. A module of its own, so each head imports it and
neither imports the other's private names."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterator, Protocol, runtime_checkable

import torch

HEAD_FILENAME = "calibration_head.safetensors"  # the name inside checkpoint-<step>/
FORMAT = "calm_studio.calibration_head"  # metadata tag, so a random safetensors file is refused


@runtime_checkable
class Head(Protocol):
    """What scoring, training and the export call on a calibration head, whichever class
    it is (`CalibrationHead`'s constant scopes, `AdaptiveHead`): callers apply both
    transforms and let the head say where it acts, never asking for its class.

    `on_tokens` is the identity unless the head acts inside the forward pass (`acts_on`
    "tokens"); `on_options` is the identity unless it acts on the option scores, where a
    head that `reads_features` takes the question's hidden state h, (B, d)."""

    @property
    def scope(self) -> str: ...  # "scalar", "options", "vocab" or "adaptive"

    @property
    def acts_on(self) -> str: ...  # "tokens" or "options"

    @property
    def reads_features(self) -> bool: ...

    @property
    def centred(self) -> bool: ...

    @property
    def tau(self) -> torch.Tensor: ...  # the temperatures (one, per option, per token id; at the mean state)

    @property
    def shift(self) -> torch.Tensor | None: ...  # the constant shift l, None where the head has none

    def on_tokens(self, z: torch.Tensor, index: torch.Tensor | None = None) -> torch.Tensor: ...

    def on_options(self, scores: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor: ...

    def summary(self) -> dict[str, float]: ...

    def save(self, path: str | Path) -> Path: ...

    def parameters(self, recurse: bool = True) -> Iterator[torch.nn.Parameter]: ...

    def state_dict(self, *args: Any, **kwargs: Any) -> Any: ...

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any: ...

    def to(self, *args: Any, **kwargs: Any) -> Any: ...  # torch.nn.Module.to: a head moves with its model


def calibrate(z: torch.Tensor, log_t: torch.Tensor, shift: torch.Tensor | None, center: bool = False) -> torch.Tensor:
    """z / exp(log_t) + shift over the last dim; -inf entries (padding) stay -inf.

    center: scale the deviations from each row's mean finite score instead,
    (z - m) / tau + m + l. Option scores (summed log-likelihoods, letter logits) are
    only defined up to a per-item constant; centring makes the head ignore it, so a
    shared tau is exactly temperature scaling and each option's tau flattens or
    sharpens instead of favouring long (very negative) answers. Identity at init.

    The result has the promoted dtype of z and the float32 parameters, so bf16 logits
    come out float32 and float64 logits stay float64 (the identity at init is exact).
    """
    pad = torch.isneginf(z)  # (..., K)
    z_safe = torch.where(pad, torch.zeros((), dtype=z.dtype, device=z.device), z)  # (..., K)
    if center:
        valid = (~pad).to(z_safe.dtype)  # (..., K)
        mean = (z_safe * valid).sum(-1, keepdim=True) / valid.sum(-1, keepdim=True).clamp(min=1)  # (..., 1)
        out = z_safe + (z_safe - mean) * torch.expm1(-log_t)  # = (z - m) / tau + m, and exactly z at tau = 1
    else:
        out = z_safe / log_t.exp()  # (..., K) / (K,) or (1,)
    if shift is not None:
        out = out + shift  # (..., K) + (K,)
    return torch.where(pad, torch.full((), -math.inf, dtype=out.dtype, device=out.device), out)


def head_file(path: str | Path) -> Path:
    path = Path(path)
    return path if path.suffix == ".safetensors" else path / HEAD_FILENAME
