"""The adaptive CALM head: a temperature per question, read from the model's hidden state.

    head = AdaptiveHead(width=576)                 # weights 0: tau = 1 for every question (identity)
    head = AdaptiveHead(width=576, options=4)      # letter scoring: also l(h), a shift per option position
    head.fit_projection(h_heldout)                 # (N, d) base-model states: mean and top components
    z = head.on_options(scores, features=h)        # (B, K) scores / tau(h) per row; -inf padding stays
    head.temperatures(h)                           # (B,) the tau of each question

    tau(h) = softplus(w . x(h) + b) + TAU_FLOOR,   x(h) = (h - mean) @ projection.T
    l(h) = U x(h) + c                              # (K,) letter scoring only: z / tau(h) + l(h)

The paper's alpha is a constant vector, so after training CALM is one temperature per
model, and one temperature cannot tell a question the model knows from one it does not.
Here alpha = (w, b) and the temperature is a function of h, the final-norm state at the
question's last token (letter: the answer position; cloze: the context's last token),
the state `scoring.features` captures. The same form as post-hoc ATS
(`calibration.posthoc.ats`), so both export as one head (`calm_head.py`), but trained by
the bilevel step: the lower level fits theta by cross-entropy under tau(h), the upper
level moves (w, b) towards predictive entropy on held-out inputs, and the calibrated
stop picks the step.

Why these choices:
- One positive number divides all of a question's option scores, so the head never
  re-ranks a question's options: it fits cloze scoring, where only the scalar scope does.
- Where the scoring rule allows shifts (letter: an option is a position, A, B, ..., as the
  options scope's l is), `options` > 0 adds l(h) = U x(h) + c, a shift per position read
  from the same state (U = 0, c = 0 at the start); under cloze an option is its text, and
  a shift by position would re-rank arbitrarily, so there is none.
- The state is wide and S_V is small, so the head reads the top `components` principal
  directions of the standardised base-model states on S_V, at unit variance
  (`calibration.projection`), fixed before the first step (`fit_projection`, saved with
  the head). w = 0 at the start, so the head starts as the identity, as every scope does.
- h enters detached (`objectives.option_logits`): the temperature is alpha's to set;
  a theta that could move h to move its own temperature would undo the upper level.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from calm_core.calibration.head_base import FORMAT, calibrate, head_file
from calm_core.calibration.projection import principal_projection

SCOPE = "adaptive"
COMPONENTS = 8  # principal directions read; ATS's cross-fitting most often chose 4-8 on S_V of 48-100


TAU_FLOOR = 0.05  # the smallest temperature (the head's and post-hoc ATS's): keeps z / tau finite


def bias_for(tau: float, floor: float = TAU_FLOOR) -> float:
    """b with softplus(b) + floor = tau: the bias of a head that gives every question tau."""
    if tau <= floor:
        raise ValueError(f"Expected a temperature above the floor {floor}, but got {tau}")
    return math.log(math.expm1(tau - floor))


class AdaptiveHead(torch.nn.Module):
    """alpha = (w, b): tau(h) = softplus(w . x(h) + b) + floor (module docstring)."""

    scope = SCOPE
    acts_on = "options"  # the per-question temperature divides the K option scores
    reads_features = True
    centred = True  # softmax((z - m) / tau + m) = softmax(z / tau): one tau per row
    shift = None  # no constant l; with `options`, l(h) is `shifts(h)`
    feature_mean: torch.Tensor  # buffers (register_buffer): typed here, since Module types attributes loosely
    projection: torch.Tensor

    def __init__(self, width: int, components: int = COMPONENTS, floor: float = TAU_FLOOR, options: int = 0) -> None:
        super().__init__()
        if width < 1 or components < 1 or options < 0:
            raise ValueError(
                f"Expected positive `width`, `components` and `options` >= 0, but got {width}, {components}, {options}"
            )
        self.width, self.size, self.floor, self.options = int(width), int(components), float(floor), int(options)
        self.register_buffer("feature_mean", torch.zeros(self.width))  # (d,)
        self.register_buffer("projection", torch.zeros(self.size, self.width))  # (k, d): zero until fitted
        self.weights = torch.nn.Parameter(torch.zeros(self.size))  # w, (k,)
        self.bias = torch.nn.Parameter(torch.tensor([bias_for(1.0, self.floor)]))  # b, (1,): tau = 1
        if self.options:  # l(h) = U x(h) + c, zero at the start
            self.shift_weights = torch.nn.Parameter(torch.zeros(self.options, self.size))  # U, (K, k)
            self.shift_bias = torch.nn.Parameter(torch.zeros(self.options))  # c, (K,)
        self._last_tau: torch.Tensor | None = None  # the last batch's temperatures, for `summary`

    def extra_repr(self) -> str:
        return (
            f"scope='adaptive', width={self.width}, components={self.size}, floor={self.floor}, options={self.options}"
        )

    @torch.no_grad()
    def fit_projection(self, features: np.ndarray | torch.Tensor) -> int:
        """Fix the mean and the top principal directions from (N, d) states (the base model
        on S_V); returns how many directions had variance (the rest stay zero rows)."""
        h = np.asarray(torch.as_tensor(features).double().cpu().numpy(), dtype=np.float64)
        if h.ndim != 2 or h.shape[1] != self.width:
            raise ValueError(f"Expected features of shape (N, {self.width}), but got {h.shape}")
        mean, projection = principal_projection(h, min(self.size, max(len(h) - 1, 0)), standardise=True)
        self.feature_mean.copy_(torch.from_numpy(mean))
        self.projection.zero_()
        self.projection[: len(projection)] = torch.from_numpy(projection)
        return len(projection)

    def _components(self, features: torch.Tensor) -> torch.Tensor:
        """x(h) of each row of (B, d) states, (B, k), in float32."""
        h = features.to(self.feature_mean.device, torch.float32)
        return (h - self.feature_mean) @ self.projection.T

    def temperatures(self, features: torch.Tensor) -> torch.Tensor:
        """tau(h) of each row of (B, d) states, (B,), in float32 with the head's gradients."""
        x = self._components(features)  # (B, k)
        return torch.nn.functional.softplus(x @ self.weights + self.bias) + self.floor  # (B,)

    def shifts(self, features: torch.Tensor, k: int) -> torch.Tensor | None:
        """l(h) of each row for its first `k` option positions, (B, k) (positions past the
        head's `options` get 0); None for a head without shifts."""
        if not self.options:
            return None
        x = self._components(features)
        shift = x @ self.shift_weights.T + self.shift_bias  # (B, options)
        if k > self.options:
            shift = torch.nn.functional.pad(shift, (0, k - self.options))
        return shift[:, :k]

    @property
    def tau(self) -> torch.Tensor:
        """The temperature of a question at the mean state, (1,): what one number says of alpha."""
        return torch.nn.functional.softplus(self.bias) + self.floor

    def forward(self, z: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        """(B, K) scores divided by each row's tau(h); -inf padding stays -inf."""
        if features is None:
            raise ValueError("Expected the questions' hidden states (`features`): the adaptive head reads them")
        if features.shape[0] != z.shape[0]:
            raise ValueError(f"Expected one state per row of z ({z.shape[0]}), but got {features.shape[0]}")
        tau = self.temperatures(features)  # (B,)
        self._last_tau = tau.detach()
        scaled = calibrate(z, tau.to(z.device).log()[:, None], None)  # (B, K) / (B, 1); padding stays -inf
        shift = self.shifts(features, z.shape[-1])
        return scaled if shift is None else scaled + shift.to(scaled.device, scaled.dtype)  # -inf + l stays -inf

    def on_tokens(self, z: torch.Tensor, index: torch.Tensor | None = None) -> torch.Tensor:
        """Identity: this head acts on option scores only."""
        return z

    def on_options(self, scores: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        return self(scores, features)

    def probs(self, z: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        return torch.softmax(self(z, features), dim=-1)

    @torch.no_grad()
    def summary(self) -> dict[str, float]:
        """tau at the mean state, the spread of the last batch's temperatures, and |w|."""
        out = {"tau_at_mean": float(self.tau[0]), "w_norm": float(self.weights.norm())}
        if self.options:
            out["l_norm"] = float(torch.cat([self.shift_weights.flatten(), self.shift_bias]).norm())
        tau = self._last_tau if self._last_tau is not None else self.tau
        out.update(tau_mean=float(tau.mean()), tau_min=float(tau.min()), tau_max=float(tau.max()))
        return out

    @torch.no_grad()
    def rows(self, index: Any) -> dict[str, list[Any]]:
        """Every position shares the question's temperature: tau at the mean state here."""
        idx = torch.as_tensor(index, dtype=torch.long).flatten()
        return {"index": idx.tolist(), "tau": [float(self.tau[0])] * idx.numel()}

    def as_logits_processor(self) -> Any:
        raise ValueError("Expected a head that acts on tokens to process generation scores, but this one reads states")

    def save(self, path: str | Path) -> Path:
        """calibration_head.safetensors with w, b, the mean and the projection; scope,
        components, width and floor in the metadata."""
        file = head_file(path)
        file.parent.mkdir(parents=True, exist_ok=True)
        tensors = {name: t.detach().cpu().contiguous().float() for name, t in self.state_dict().items()}
        metadata = {
            "format": FORMAT,
            "scope": SCOPE,
            "size": str(self.size),
            "width": str(self.width),
            "floor": repr(self.floor),
            "options": str(self.options),
            "acts_on": self.acts_on,
            "center": "1",
            "link": "softplus",
        }
        save_file(tensors, str(file), metadata=metadata)
        return file

    @classmethod
    def load(cls, path: str | Path) -> AdaptiveHead:
        file = head_file(path)
        with safe_open(str(file), framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
        if meta.get("format") != FORMAT or meta.get("scope") != SCOPE:
            raise ValueError(f"Expected an adaptive calibration head, but {file} has metadata {meta}")
        try:
            head = cls(int(meta["width"]), int(meta["size"]), float(meta["floor"]), int(meta.get("options", "0")))
        except (KeyError, ValueError) as err:
            raise ValueError(f"Expected width, size and floor in {file}'s metadata, but got {meta}") from err
        expected = {name: tuple(t.shape) for name, t in head.state_dict().items()}
        got = {name: tuple(t.shape) for name, t in tensors.items()}
        if got != expected:
            raise ValueError(f"Expected tensors {expected} in {file}, but got {got}")
        head.load_state_dict(tensors)
        return head

    @classmethod
    def from_ats(cls, ats: Any) -> AdaptiveHead:
        """A fitted post-hoc ATS (`posthoc.ats.AdaptiveTemperature`) as this head: the same
        temperatures, so it exports and applies like a trained one. An ATS that chose k = 0
        is one temperature and has no width: export it as a scalar head (TS) instead."""
        if not ats.weights_ or not ats.mean_:
            raise ValueError("Expected an ATS fit that reads features, but this one chose one temperature (k = 0)")
        head = cls(len(ats.mean_), len(ats.weights_))
        with torch.no_grad():
            head.feature_mean.copy_(torch.tensor(ats.mean_, dtype=torch.float64))
            head.projection.copy_(torch.tensor(ats.projection_, dtype=torch.float64))
            head.weights.copy_(torch.tensor(ats.weights_, dtype=torch.float64))
            head.bias.fill_(float(ats.bias_))
        return head
