"""The calibration head alpha = (l, s): p = softmax(z / tau + l), tau = exp(s) > 0.

    head = CalibrationHead("options", size=5)     # l, s in R^5; zero init = identity
    p = head.probs(option_logits)                 # (N, K<=5), -inf padding stays at p = 0
    head.save(checkpoint_dir); CalibrationHead.load(checkpoint_dir)

    z = head.on_tokens(z, index=letters)          # inside the forward pass: identity unless it acts on tokens
    scores = head.on_options(scores)              # on the K option scores: identity unless it acts on options

Scopes (the shape of alpha):
    vocab    l, s in R^V, one entry per vocabulary id (the paper's form). `index` applies
             only the rows of the answer tokens to logits gathered at those ids, and
             `as_logits_processor()` applies the head to generation scores.
    options  l, s in R^K_max, one entry per option position (ragged K <= K_max allowed).
    scalar   one s and no l: a learned temperature (the "learned TS" ablation).
    adaptive a temperature per question read from the model's hidden state,
             tau(h) = softplus(w . x(h) + b) (calibration.adaptive_head.AdaptiveHead; not
             this class: `make_head` and `CalibrationHead.load` give the right one).

Where it acts (`acts_on`, saved with the head; callers never ask for the scope):
    tokens   a logits transform inside the forward pass: next-token logits over the
             vocabulary, or rows gathered at `index` (vocab; the answer letters'
             logits). `as_logits_processor()` applies it to generation scores.
    options  a transform of the K option scores after the forward pass.
A vocab head acts on tokens and an options head on options; a scalar head acts on the
option scores for multiple choice and on the answer tokens for open answers, where it
was trained (`acts_on_for`, generative.objectives).

Padding: option logits of items with fewer options are -inf. The head keeps them -inf,
and computes on a finite stand-in there, because d(z / tau)/d s = -z / tau times an
upstream gradient of 0 would otherwise be 0 * inf = nan.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import LogitsProcessor

from calm_core.calibration.head_base import FORMAT, Head, calibrate, head_file

SCOPES = ("vocab", "options", "scalar", "adaptive")
_CONSTANT_SCOPES = ("vocab", "options", "scalar")  # alpha a constant vector: this class
ACTS_ON = ("tokens", "options")


# Where a head may act, by scoring rule. Under `letter` the
# option scores are the answer position's logits at the letter tokens: the vocab head
# (the paper's) scales those rows and the options head is the same thing on the K
# letters. Under cloze an option's score is a sum over its own tokens and the prompt
# never lists the options, so a position means nothing: per-position temperatures
# re-rank options (ARC-Easy accuracy 0.49 -> 0.40 in docs/results.md) and a vocab head
# on every continuation token favours the shortest option (uniform vocab tau = 100 made
# 58% of predictions the shortest one). There only the scalar head, which cannot
# re-rank, is allowed. Free-form answers (task openqa) have no options: vocab or scalar.
SCOPES_BY_RULE: dict[str, tuple[str, ...]] = {
    "letter": ("vocab", "options", "scalar", "adaptive"),
    "cloze": ("scalar", "adaptive"),
    "cloze_norm": ("scalar", "adaptive"),
    "openqa": ("vocab", "scalar"),
}
DEFAULT_SCOPE = {"letter": "vocab", "cloze": "scalar", "cloze_norm": "scalar", "openqa": "vocab"}
_WHY_NOT = {
    "cloze": "under cloze scoring an option's score is a sum over its own tokens and the prompt lists no options, "
    "so per-position or per-token temperatures re-rank a question's options; use scope scalar or adaptive "
    "(one temperature per question, which cannot re-rank), or scoring letter for the paper's per-vocabulary head",
    "openqa": "free-form answers have no options (and the adaptive head reads a question's state before its options)",
}


def scopes_for(rule: str, task: str = "mcqa") -> tuple[str, ...]:
    """The head scopes that fit a scoring rule (or the openqa task), the default first."""
    key = "openqa" if task == "openqa" else rule
    allowed = SCOPES_BY_RULE[key]
    return (DEFAULT_SCOPE[key], *[s for s in allowed if s != DEFAULT_SCOPE[key]])


def scope_note(rule: str, task: str = "mcqa") -> str:
    """One line for a page or a help text: which scopes fit this rule, and why."""
    allowed = scopes_for(rule, task)
    if task == "openqa":
        return f"Open answers: scopes {', '.join(allowed)} (free-form answers have no options)."
    if rule == "letter":
        return "Letter answers: every scope fits (the vocab head acts on the answer letters' logits, as in the paper)."
    return f"Under {rule} scoring the scalar and adaptive scopes fit: {_WHY_NOT['cloze']}."


def check_scope_fits(scope: str, rule: str, task: str = "mcqa") -> None:
    """Refuse a head scope that would act where the option scores give it no meaning."""
    allowed = scopes_for(rule, task)
    if scope not in allowed:
        key = "openqa" if task == "openqa" else ("cloze" if rule.startswith("cloze") else rule)
        where = "task openqa" if task == "openqa" else f"scoring {rule!r}"
        raise ValueError(
            f"Expected `scope` to be one of {list(allowed)} with {where}, but got {scope!r}: {_WHY_NOT.get(key, '')}"
        )


def acts_on_for(scope: str, task: str = "mcqa") -> str:
    """Where a head of `scope` acts for `task`: the one place that decides it. Only the
    scalar head depends on the task: open answers have no option scores, so there it
    acts on the answer tokens (generative.objectives trains it there)."""
    if scope == "scalar":
        return "tokens" if task == "openqa" else "options"
    return "tokens" if scope == "vocab" else "options"


def _check_acts_on(scope: str, acts_on: object) -> str:
    """A vocab head has a row per vocabulary id and an options head one per option
    position, so each acts in one place only; the scalar head fits both."""
    fits = {"vocab": ("tokens",), "options": ("options",), "scalar": ACTS_ON}[scope]
    if acts_on not in fits:
        raise ValueError(f"Expected `acts_on` to be one of {list(fits)} for the {scope} scope, but got {acts_on!r}")
    return str(acts_on)


def _check_scope(scope: object) -> str:
    if scope == "adaptive":
        raise ValueError("Expected a constant scope here: build an adaptive head with `make_head` (AdaptiveHead)")
    if scope not in _CONSTANT_SCOPES:
        raise ValueError(f"Expected `scope` to be one of {list(SCOPES)}, but got {scope!r}")
    return str(scope)


def make_head(scope: str, *, size: int | None, width: int, acts_on: str | None = None, shifts: int = 0) -> Head:
    """The head of `scope` for a model whose hidden states are `width` wide: a
    CalibrationHead, or for `adaptive` an AdaptiveHead (its projection is fitted before
    the first step, `AdaptiveHead.fit_projection`), with l(h) over `shifts` option
    positions where the scoring rule allows shifts (`shifts_allowed`)."""
    if scope == "adaptive":
        from calm_core.calibration.adaptive_head import AdaptiveHead

        return AdaptiveHead(width, options=shifts)
    return CalibrationHead(scope, size=size, acts_on=acts_on)


def shifts_allowed(rule: str, task: str) -> bool:
    """Whether a shift per option position means something under `rule`: where the options
    scope fits (letter: an option is a position), not where an option is its text (cloze)."""
    return "options" in scopes_for(rule, task)


def _check_size(scope: str, size: object) -> int:
    if scope == "scalar":
        if size not in (None, 1):
            raise ValueError(f"Expected `size` to be None or 1 for the scalar scope, but got {size!r}")
        return 1
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"Expected `size` to be a positive int for the {scope} scope, but got {size!r}")
    return size


class CalibrationHead(torch.nn.Module):
    """alpha = (shift l, log_temperature s), zero-initialised: the identity at init."""

    reads_features = False  # AdaptiveHead reads the question's hidden state; these scopes do not

    def __init__(
        self, scope: str, size: int | None = None, acts_on: str | None = None, center: bool | None = None
    ) -> None:
        """acts_on: "tokens" or "options"; None takes the scope's multiple-choice default
        (`acts_on_for`): pass `acts_on_for(scope, task)` where the task is known.
        center: whether scores are scaled about each row's mean (`centred`); None takes the
        scope's default (every scope but vocab). An uncentred options head is z / tau_k + l_k,
        exactly vector scaling (z w + b with w = 1 / tau > 0): how its export is written."""
        super().__init__()
        self.scope = _check_scope(scope)
        self.size = _check_size(self.scope, size)
        self.acts_on = _check_acts_on(self.scope, acts_on_for(self.scope) if acts_on is None else acts_on)
        self._center = self.scope != "vocab" if center is None else bool(center)
        self.log_temperature = torch.nn.Parameter(torch.zeros(self.size, dtype=torch.float32))  # s, (size,)
        if self.scope == "scalar":
            self.register_parameter("shift", None)  # learned TS has no shift
        else:
            self.shift = torch.nn.Parameter(torch.zeros(self.size, dtype=torch.float32))  # l, (size,)

    def extra_repr(self) -> str:
        return f"scope={self.scope!r}, size={self.size}, acts_on={self.acts_on!r}, center={self._center}"

    @property
    def centred(self) -> bool:
        """Whether the head scales deviations from each row's mean (see `head_base.calibrate`): by
        default every scope but vocab, whose per-id rows are the paper's z / tau + l."""
        return self._center

    @property
    def tau(self) -> torch.Tensor:
        """The temperatures exp(s), (size,)."""
        return self.log_temperature.exp()

    def _rows_for(self, z: torch.Tensor, index: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The (s, l) entries that line up with the last dim of z."""
        k = z.shape[-1]
        if index is not None and self.scope == "scalar":  # one tau for every id
            return self.log_temperature, self.shift
        if index is not None:
            if self.scope != "vocab":
                raise ValueError(
                    f"Expected `index` only with the vocab scope (or scalar, whose one tau fits "
                    f"every id), but the head's scope is {self.scope!r}"
                )
            if index.shape[-1] != k:
                raise ValueError(f"Expected `z` last dim to match `index` ({index.shape[-1]}), but got {k}")
            return self.log_temperature[index], self.shift[index]  # index.shape each
        if self.scope == "vocab" and k != self.size:
            raise ValueError(f"Expected `z` last dim to be the vocab size {self.size}, but got {k}")
        if self.scope == "options":
            if k > self.size:
                raise ValueError(f"Expected `z` to have at most K_max = {self.size} options, but got {k}")
            return self.log_temperature[:k], self.shift[:k]  # (K,) each: option k keeps its own entry
        return self.log_temperature, self.shift

    def forward(self, z: torch.Tensor, index: torch.Tensor | None = None) -> torch.Tensor:
        """Calibrated scores z / tau + l over the last dim of z (vocab scope, the paper's
        form); options and scalar scopes scale deviations from the item's mean score,
        (z - m) / tau + m + l (see `head_base.calibrate`).

        z: (..., V) for vocab, (..., K) with K <= K_max for options (-inf = padded
        option), anything for scalar. index (vocab only): LongTensor of vocab ids whose
        shape broadcasts with z and whose last dim matches z's, for logits already
        gathered at those ids; equal to gathering after the full head. A scalar head
        takes `index` too (its one tau fits every id) and centres on the gathered rows:
        their softmax is the full head's, restricted and renormalised.

        This applies the head wherever it is called; callers that score options use
        `on_tokens` and `on_options`, which apply it only where it acts.
        """
        log_t, shift = self._rows_for(z, index)
        return calibrate(z, log_t, shift, center=self.centred)

    def on_tokens(self, z: torch.Tensor, index: torch.Tensor | None = None) -> torch.Tensor:
        """The head on next-token logits (..., V), or on rows gathered at `index`, if it
        acts on tokens; z itself otherwise. Call it inside every forward pass."""
        return self(z, index) if self.acts_on == "tokens" else z

    def on_options(self, scores: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        """The head on option scores (..., K), -inf padded, if it acts on options; the
        scores themselves otherwise. Call it on every item's option scores. `features`
        (the questions' hidden states) is for heads that read them; this one does not."""
        return self(scores) if self.acts_on == "options" else scores

    def probs(self, z: torch.Tensor, index: torch.Tensor | None = None) -> torch.Tensor:
        """softmax(z / tau + l) over the last dim: THE torch softmax used in training."""
        return torch.softmax(self(z, index), dim=-1)  # (..., K)

    @torch.no_grad()
    def summary(self) -> dict[str, float]:
        """tau and l statistics for the `alpha/*` log keys (scalar scope: tau only)."""
        tau = self.tau
        out = {"tau_mean": float(tau.mean()), "tau_min": float(tau.min()), "tau_max": float(tau.max())}
        if self.shift is not None:
            shift = self.shift
            out.update(
                l_mean=float(shift.mean()),
                l_min=float(shift.min()),
                l_max=float(shift.max()),
                l_abs_mean=float(shift.abs().mean()),
            )
        return out

    @torch.no_grad()
    def rows(self, index: Sequence[int] | torch.Tensor) -> dict[str, list[Any]]:
        """tau and l at the given ids (vocab ids of the answer tokens, or option positions)."""
        idx = torch.as_tensor(index, dtype=torch.long).flatten()  # (n,)
        if self.scope == "scalar":  # one shared tau, whatever the ids
            return {"index": idx.tolist(), "tau": [float(self.tau[0])] * idx.numel()}
        if idx.numel() and (idx.min() < 0 or idx.max() >= self.size):
            raise ValueError(f"Expected `index` values in [0, {self.size}), but got {idx.tolist()}")
        return {"index": idx.tolist(), "tau": self.tau[idx].tolist(), "l": self.shift[idx].tolist()}

    def as_logits_processor(self) -> "HeadLogitsProcessor":
        """This head as a transformers LogitsProcessor for `generate(logits_processor=[...])`;
        only a head that acts on tokens has one."""
        return HeadLogitsProcessor(self)

    def save(self, path: str | Path) -> Path:
        """Write the head to `path` (a .safetensors file, or a directory that gets
        calibration_head.safetensors); scope, size, acts_on and center go in the metadata. Returns the file."""
        file = head_file(path)
        file.parent.mkdir(parents=True, exist_ok=True)
        tensors = {name: p.detach().cpu().contiguous() for name, p in self.named_parameters()}
        save_file(
            tensors,
            str(file),
            metadata={
                "format": FORMAT,
                "scope": self.scope,
                "size": str(self.size),
                "acts_on": self.acts_on,
                "center": str(int(self.centred)),
            },
        )
        return file

    @classmethod
    def load(cls, path: str | Path, task: str = "mcqa") -> "CalibrationHead":
        """Read a head written by `save`; a file without a valid scope or shapes is refused.

        A file written before heads said where they act has no `acts_on`: it gets
        `acts_on_for(scope, task)`, so pass the run's task (an open-QA run's scalar head
        acts on tokens)."""
        file = head_file(path)
        with safe_open(str(file), framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
        if meta.get("format") != FORMAT:
            raise ValueError(f"Expected a calibration head file, but {file} has metadata {meta}")
        if meta.get("scope") == "adaptive":
            from calm_core.calibration.adaptive_head import AdaptiveHead

            return AdaptiveHead.load(file)  # type: ignore[return-value]  # the same interface
        if meta.get("scope") not in _CONSTANT_SCOPES:
            raise ValueError(f"Expected `scope` in {list(SCOPES)} in {file}, but got {meta.get('scope')!r}")
        size = meta.get("size", "")
        acts_on = meta.get("acts_on", acts_on_for(meta["scope"], task))
        center = meta.get("center")  # absent in heads written before it was saved: the scope's default
        if center not in (None, "0", "1"):
            raise ValueError(f"Expected `center` to be '0' or '1' in {file}, but got {center!r}")
        head = cls(
            meta["scope"], int(size) if size.isdigit() else size, acts_on, None if center is None else center == "1"
        )
        _load_tensors(head, tensors, file)
        return head


def _load_tensors(head: CalibrationHead, tensors: dict[str, torch.Tensor], file: Path) -> None:
    expected = {name: tuple(p.shape) for name, p in head.named_parameters()}
    got = {name: tuple(t.shape) for name, t in tensors.items()}
    if got != expected:
        raise ValueError(f"Expected tensors {expected} in {file}, but got {got}")
    with torch.no_grad():
        for name, p in head.named_parameters():
            p.copy_(tensors[name])


class HeadLogitsProcessor(LogitsProcessor):
    """Applies a head that acts on tokens to generation scores: the numbers its forward
    gives (vocab: scores / tau + l; scalar: centred, softmax(scores / tau)).

    The head stays where it is; its parameters are copied to the scores' device per call
    (at most 2V floats, small beside a forward pass). It computes in at least float32,
    as the head does, and the output keeps the scores' dtype.
    """

    def __init__(self, head: CalibrationHead) -> None:
        if head.acts_on != "tokens":
            raise ValueError(
                f"Expected a head that acts on tokens to process generation scores, but this "
                f"{head.scope}-scope head acts on {head.acts_on!r}"
            )
        self.head = head

    @torch.no_grad()
    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        if self.head.scope == "vocab" and scores.shape[-1] != self.head.size:
            raise ValueError(f"Expected scores over the head's vocab ({self.head.size}), but got {scores.shape[-1]}")
        z = scores.to(torch.promote_types(scores.dtype, torch.float32))  # (B, V)
        log_t = self.head.log_temperature.to(scores.device)  # (V,) or (1,)
        shift = None if self.head.shift is None else self.head.shift.to(scores.device)  # (V,) or None
        return calibrate(z, log_t, shift, center=self.head.centred).to(scores.dtype)  # (B, V)


def scalar_head(temperature: float) -> CalibrationHead:
    """softmax(z / T) as a scalar options head: exactly temperature scaling at T."""
    head = CalibrationHead("scalar", acts_on="options")
    with torch.no_grad():
        head.log_temperature.fill_(math.log(temperature))
    return head


def options_head(weights: Sequence[float], biases: Sequence[float]) -> CalibrationHead:
    """softmax(z w + b) per option position as an uncentred options head z / tau + l with
    tau = 1 / w and l = b: the same probabilities (every w > 0, else ValueError)."""
    if not weights or len(weights) != len(biases):
        raise ValueError(f"Expected as many biases as weights (at least one), but got {len(weights)} and {len(biases)}")
    if not all(math.isfinite(w) and w > 0 for w in weights):
        raise ValueError(f"Expected weights > 0 to export as temperatures, but got {list(weights)}")
    head = CalibrationHead("options", size=len(weights), acts_on="options", center=False)
    with torch.no_grad():
        head.log_temperature.copy_(-torch.log(torch.tensor(list(weights), dtype=torch.float64)).float())
        head.shift.copy_(torch.tensor(list(biases), dtype=torch.float32))
    return head
