"""A CALM Studio calibration head, stand-alone: it needs torch, safetensors and transformers.

    import sys; sys.path.insert(0, "my-export")              # the folder `calm export` wrote
    from calm_head import CalibrationHead, option_probabilities
    head = CalibrationHead.from_folder("my-export")          # calibration_head.safetensors + calm_export.json
    p = option_probabilities(model, tokenizer, "What is the capital of France?", ["Paris", "Rome"], head)
    model.generate(**inputs, logits_processor=[head.logits_processor()])  # vocab (or scalar) scope
    z, h = option_scores_and_state(model, tokenizer, question, options, head.scoring)  # scores and state

The head alpha = (l, s) turns scores z into softmax(z / tau + l), tau = exp(s) > 0:
    vocab    one (l, s) per vocabulary id. Under letter scoring it acts on the answer
             position's logits at the letter tokens, each letter with its own row.
    options  one (l, s) per option position (A, B, ...), on the K option scores.
    scalar   one s and no l: a learned temperature on the K option scores.
options and scalar scale deviations from the item's mean score, (z - m) / tau + m + l
(`center` in calm_export.json): option scores are defined up to a per-item constant.

    adaptive a temperature per question, read from the model's hidden state h
             (`from_folder` returns an AdaptiveHead): softmax(z / tau(h)),
             tau(h) = softplus(w . x(h) + b) + floor, x(h) = (h - feature_mean) @ projection.T.
             A CALM run trained with `--scope adaptive`, or adaptive temperature scaling
             (`calm export --variant ats`). h is the last layer's state after the final norm
             (`output_hidden_states=True`, hidden_states[-1]) at the question's last prompt
             token, from the same forward pass that scores the options: letter, the answer
             position; cloze, the context's last token (the position that predicts each
             option's first token). One positive number divides all of a question's scores,
             so the head never re-ranks its options; it needs the question, so it cannot act
             while generating (no logits_processor).

    thermometer  one temperature for a whole set of questions (Shen et al., ICML 2024),
             read from the mean of their states: T = softplus(w . x(mean h) + b) + floor,
             x as above (`calm export --variant thermometer`: thermometer.safetensors,
             `Thermometer.from_folder`). It needs no answers, only a batch of the target
             domain's questions; `set_probabilities` scores them and divides every
             question's scores by the set's one T. Pass the whole set at once: each call
             reads its own T from the questions it is given.

Option scores follow the run's scoring rule (`scoring` in calm_export.json): `letter`,
the logit of each option's letter after a prompt that lists the options; `cloze`, the
summed log-likelihood of each option's text after the question (`cloze_norm`: the mean
per token). The same maths as calm_core.calibration.head and calm_core.scoring.options, one question at a
time; prompts longer than the model's context are cut from the left, as there.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from safetensors import safe_open
from transformers import LogitsProcessor

HEAD_FILE = "calibration_head.safetensors"
THERMOMETER_FILE = "thermometer.safetensors"
EXPORT_FILE = "calm_export.json"
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "n_ctx")


def read_export(folder: str | Path) -> dict:
    """calm_export.json: the run, its scoring rule, head scope and base model."""
    return json.loads((Path(folder) / EXPORT_FILE).read_text(encoding="utf-8"))


def calibrate(z: torch.Tensor, log_t: torch.Tensor, shift: torch.Tensor | None, center: bool) -> torch.Tensor:
    """z / exp(log_t) + shift over the last dim, or (z - m) / tau + m + shift with `center`
    (m: the mean finite score of each row); -inf entries (absent options) stay -inf."""
    pad = torch.isneginf(z)  # (..., K)
    z_safe = torch.where(pad, torch.zeros((), dtype=z.dtype, device=z.device), z)  # no 0 * inf in the maths
    if center:
        valid = (~pad).to(z_safe.dtype)  # (..., K)
        mean = (z_safe * valid).sum(-1, keepdim=True) / valid.sum(-1, keepdim=True).clamp(min=1)  # (..., 1)
        out = z_safe + (z_safe - mean) * torch.expm1(-log_t)  # = (z - m) / tau + m, exactly z at tau = 1
    else:
        out = z_safe / log_t.exp()  # (..., K) / (K,) or (1,)
    if shift is not None:
        out = out + shift  # (..., K) + (K,)
    return torch.where(pad, torch.full((), -math.inf, dtype=out.dtype, device=out.device), out)


class CalibrationHead(torch.nn.Module):
    """alpha = (l, s) of a CALM run; `head(z)` gives calibrated scores (softmax them)."""

    def __init__(
        self,
        scope: str,
        log_temperature: torch.Tensor,
        shift: torch.Tensor | None = None,
        center: bool | None = None,
        scoring: dict | None = None,
    ) -> None:
        super().__init__()
        if scope not in ("vocab", "options", "scalar"):
            raise ValueError(f"Expected `scope` to be one of ['vocab', 'options', 'scalar'], but got {scope!r}")
        self.scope = scope
        self.center = scope != "vocab" if center is None else bool(center)
        self.scoring = dict(scoring or {})  # the run's scoring rule, for option_probabilities
        self.register_buffer("log_temperature", log_temperature.float())  # s, (size,)
        self.register_buffer("shift", None if shift is None else shift.float())  # l, (size,); scalar: none

    @classmethod
    def from_folder(cls, folder: str | Path) -> "CalibrationHead | AdaptiveHead":
        """The folder's head; an AdaptiveHead when its scope is `adaptive` (it reads h)."""
        record, metadata, tensors = _head_tensors(folder)
        if metadata.get("scope") == AdaptiveHead.scope:
            return AdaptiveHead.from_tensors(metadata, tensors, record["scoring"])
        return cls(
            metadata.get("scope"),
            tensors["log_temperature"],
            tensors.get("shift"),
            record.get("center"),
            record["scoring"],
        )

    def extra_repr(self) -> str:
        return f"scope={self.scope!r}, size={self.log_temperature.numel()}, center={self.center}"

    def forward(self, z: torch.Tensor, index: torch.Tensor | None = None) -> torch.Tensor:
        """Calibrated scores over the last dim of z: (..., V) for vocab, or (..., K) logits
        already gathered at vocabulary ids `index` (vocab only); (..., K) option scores
        for options (K <= the run's K_max) and scalar."""
        log_t, shift = self.log_temperature, self.shift
        if index is not None:
            if self.scope != "vocab":
                raise ValueError(f"Expected `index` only with the vocab scope, but the head's scope is {self.scope!r}")
            log_t, shift = log_t[index], shift[index]  # each letter's own row
        elif self.scope == "options":
            if z.shape[-1] > len(log_t):
                raise ValueError(f"Expected at most {len(log_t)} options, but got {z.shape[-1]}")
            log_t, shift = log_t[: z.shape[-1]], shift[: z.shape[-1]]  # option k keeps entry k
        elif self.scope == "vocab" and z.shape[-1] != len(log_t):
            raise ValueError(f"Expected scores over the vocabulary ({len(log_t)}), but got {z.shape[-1]}")
        return calibrate(z, log_t, shift, self.center)

    def logits_processor(self) -> "HeadLogitsProcessor":
        """This head for `model.generate(..., logits_processor=[head.logits_processor()])`."""
        if self.scope == "options":
            raise ValueError(
                "Expected a vocab or scalar head for generation, but an options head acts on option scores"
            )
        return HeadLogitsProcessor(self)


def _head_tensors(folder: str | Path) -> tuple[dict, dict, dict]:
    """(calm_export.json, the head file's metadata, its tensors); a clear error without a head."""
    folder = Path(folder)
    record = read_export(folder)
    if (folder / THERMOMETER_FILE).is_file() and not (folder / HEAD_FILE).is_file():
        raise FileNotFoundError(
            f"Expected {HEAD_FILE} in {folder}, but it holds a thermometer: Thermometer.from_folder(folder)"
        )
    if not (folder / HEAD_FILE).is_file():
        raise FileNotFoundError(
            f"Expected {HEAD_FILE} in {folder}, but run {record.get('run_id')} has no "
            f"calibration head (method {record.get('method')!r}); score with head=None"
        )
    with safe_open(str(folder / HEAD_FILE), framework="pt") as f:
        return record, dict(f.metadata() or {}), {name: f.get_tensor(name) for name in f.keys()}


class AdaptiveHead(torch.nn.Module):
    """A temperature per question: `head(z, h)` = z / tau(h) for (..., K) scores and
    (..., d) states, tau(h) = softplus(w . x(h) + b) + floor (module docstring); a head
    trained under letter scoring adds l(h) = U x(h) + c, a shift per option position.
    Computed in float64: the stored float32 numbers are the only rounding."""

    scope = "adaptive"

    def __init__(
        self,
        feature_mean: torch.Tensor,
        projection: torch.Tensor,
        weights: torch.Tensor,
        bias: torch.Tensor,
        floor: float,
        scoring: dict | None = None,
        shift_weights: torch.Tensor | None = None,
        shift_bias: torch.Tensor | None = None,
    ) -> None:
        super().__init__()
        if projection.shape != (weights.numel(), feature_mean.numel()):
            raise ValueError(
                f"Expected a projection of shape ({weights.numel()}, {feature_mean.numel()}), "
                f"but got {tuple(projection.shape)}"
            )
        self.floor = float(floor)
        self.scoring = dict(scoring or {})
        self.register_buffer("feature_mean", feature_mean.double())  # (d,)
        self.register_buffer("projection", projection.double())  # (k, d)
        self.register_buffer("weights", weights.double())  # w, (k,)
        self.register_buffer("bias", bias.double().reshape(()))  # b, a scalar: tau(h) has h's batch shape
        self.options = 0 if shift_weights is None else int(shift_weights.shape[0])
        if shift_weights is not None:
            self.register_buffer("shift_weights", shift_weights.double())  # U, (options, k)
            self.register_buffer("shift_bias", shift_bias.double())  # c, (options,)

    @classmethod
    def from_tensors(cls, metadata: dict, tensors: dict, scoring: dict | None = None) -> "AdaptiveHead":
        if metadata.get("link", "softplus") != "softplus":
            raise ValueError(f"Expected the softplus link, but the head's metadata says {metadata.get('link')!r}")
        return cls(
            tensors["feature_mean"],
            tensors["projection"],
            tensors["weights"],
            tensors["bias"],
            float(metadata["floor"]),
            scoring,
            tensors.get("shift_weights"),
            tensors.get("shift_bias"),
        )

    @classmethod
    def from_folder(cls, folder: str | Path) -> "AdaptiveHead":
        record, metadata, tensors = _head_tensors(folder)
        if metadata.get("scope") != cls.scope:
            raise ValueError(f"Expected an adaptive head in {folder}, but its scope is {metadata.get('scope')!r}")
        return cls.from_tensors(metadata, tensors, record["scoring"])

    def extra_repr(self) -> str:
        return f"scope='adaptive', width={self.feature_mean.numel()}, components={self.weights.numel()}"

    def _components(self, h: torch.Tensor) -> torch.Tensor:
        return (h.to(self.feature_mean.device, torch.float64) - self.feature_mean) @ self.projection.T  # (..., k)

    def temperatures(self, h: torch.Tensor) -> torch.Tensor:
        """tau(h), (...,) of (..., d) final-norm states."""
        return torch.nn.functional.softplus(self._components(h) @ self.weights + self.bias) + self.floor

    def forward(self, z: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """z / tau(h) (+ l(h)) over the last dim of (..., K) float scores; -inf (absent options) stays -inf."""
        out = _divide(z, self.temperatures(h).to(z.device)[..., None])  # (..., K) / (..., 1)
        if not self.options:
            return out
        shift = self._components(h) @ self.shift_weights.T + self.shift_bias  # (..., options)
        k = z.shape[-1]
        if k > self.options:  # positions the head never saw get no shift
            shift = torch.nn.functional.pad(shift, (0, k - self.options))
        return out + shift[..., :k].to(out.device, out.dtype)

    def logits_processor(self) -> None:
        raise ValueError("Expected a vocab or scalar head for generation, but an adaptive head reads the question")


def _divide(z: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """z / tau, broadcast; -inf entries (absent options) stay -inf."""
    pad = torch.isneginf(z)
    out = torch.where(pad, torch.zeros((), dtype=z.dtype, device=z.device), z) / tau
    return torch.where(pad, torch.full((), -math.inf, dtype=out.dtype, device=out.device), out)


class Thermometer(torch.nn.Module):
    """One temperature for a set of questions: T = softplus(w . x(mean h) + b) + floor, the
    adaptive head's map on the mean of the set's (N, d) states (module docstring). A
    thermometer that chose one temperature (0 components) gives softplus(b) + floor."""

    def __init__(self, adaptive: AdaptiveHead, scoring: dict | None = None, record: dict | None = None) -> None:
        super().__init__()
        self.map = adaptive  # w, b, feature_mean, projection; float64
        self.scoring = dict(scoring or {})  # the run's scoring rule: the thermometer's states are this rule's
        self.record = dict(record or {})  # calm_export.json's `thermometer`: model, rule, training sets

    @classmethod
    def from_folder(cls, folder: str | Path) -> "Thermometer":
        folder = Path(folder)
        record = read_export(folder)
        if not (folder / THERMOMETER_FILE).is_file():
            raise FileNotFoundError(
                f"Expected {THERMOMETER_FILE} in {folder}, but it holds variant {record.get('variant')!r}: "
                "export with `calm export RUN_ID DIR --variant thermometer`"
            )
        with safe_open(str(folder / THERMOMETER_FILE), framework="pt") as f:
            metadata, tensors = dict(f.metadata() or {}), {name: f.get_tensor(name) for name in f.keys()}
        if metadata.get("format") != "calm_studio.thermometer":
            raise ValueError(f"Expected a thermometer file, but {folder / THERMOMETER_FILE} has metadata {metadata}")
        return cls(AdaptiveHead.from_tensors(metadata, tensors), record["scoring"], record.get("thermometer"))

    def extra_repr(self) -> str:
        return f"components={self.map.weights.numel()}, trained_on={len(self.record.get('trained_on', []))} sets"

    def temperature(self, states: torch.Tensor) -> torch.Tensor:
        """T, a float64 scalar, of the set whose (N, d) states are given (option_scores_and_state's h)."""
        mean = states.to(torch.float64).mean(0)  # (d,) in float64, as the studio averages
        if not self.map.weights.numel():
            mean = mean[:0]  # no components: x is empty and T = softplus(b) + floor
        return self.map.temperatures(mean)

    def forward(self, z: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
        """(..., K) scores of the set's questions / T of the set's (N, d) states."""
        return _divide(z, self.temperature(states).to(z.device))

    def logits_processor(self) -> None:
        raise ValueError("Expected a vocab or scalar head for generation, but a thermometer reads a set of questions")


class HeadLogitsProcessor(LogitsProcessor):
    """The head on every generation step's scores (B, V); the scores keep their dtype."""

    def __init__(self, head: CalibrationHead) -> None:
        self.head = head

    @torch.no_grad()
    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        shift = None if self.head.shift is None else self.head.shift.to(scores.device)
        log_t = self.head.log_temperature.to(scores.device)
        return calibrate(scores.float(), log_t, shift, self.head.center).to(scores.dtype)  # (B, V)


def _chat(tokenizer, text: str) -> str:
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
    )


def letter_prompt(question: str, options: list[str], scoring: dict, tokenizer=None) -> str:
    """The question, its lettered options and the cue after which a letter is expected."""
    listed = "\n".join(f"{LETTERS[k]}. {option}" for k, option in enumerate(options))
    if scoring["chat_template"]:
        return _chat(tokenizer, f"{question}\n{listed}\n{scoring['letter_instruction']}")
    body = scoring["question_template"].format(question=question)
    head, _, tail = body.rpartition("\n")  # the options go before the "Answer:" cue
    return f"{head}\n{listed}\n{tail}" if head else f"{body}\n{listed}"


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False).input_ids


def _context_limit(model, tokenizer) -> int | None:
    """The most tokens the model reads: its config's context length, else the tokenizer's."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    for key in _CONTEXT_KEYS:
        if isinstance(getattr(config, key, None), int) and getattr(config, key) > 0:
            return getattr(config, key)
    length = getattr(tokenizer, "model_max_length", None)
    return length if isinstance(length, int) and 0 < length < 10_000_000 else None


def _context_and_option(tokenizer, context: str, option: str) -> tuple[list[int], list[int]]:
    """Ids of context and option tokenized together (lm-evaluation-harness), cut where the
    context ends; trailing spaces of the context move to the option."""
    n_spaces = len(context) - len(context.rstrip(" "))
    if n_spaces:
        context, option = context[:-n_spaces], context[-n_spaces:] + option
    whole, context_ids = _ids(tokenizer, context + option), _ids(tokenizer, context)
    return whole[: len(context_ids)], whole[len(context_ids) :]


@torch.no_grad()
def option_scores(
    model, tokenizer, question: str, options: list[str], scoring: dict, head: CalibrationHead | None = None
) -> torch.Tensor:
    """The K option scores (K,) float64 under `scoring`; a vocab head acts here, on the
    letters' logits (an options, scalar or adaptive head acts on these scores afterwards)."""
    return option_scores_and_state(model, tokenizer, question, options, scoring, head)[0]


@torch.no_grad()
def option_scores_and_state(
    model, tokenizer, question: str, options: list[str], scoring: dict, head: CalibrationHead | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(the K option scores (K,) float64, h (d,) float32): h is the last layer's state after
    the final norm at the question's last prompt token, read from the pass that scores the
    options (letter: the answer position; cloze: the context's last token), what an
    adaptive head reads. transformers' hidden_states[-1] is that state: its LM head's input."""
    device = next(model.parameters()).device
    limit = _context_limit(model, tokenizer)
    if scoring["rule"] == "letter":
        ids = _ids(tokenizer, letter_prompt(question, options, scoring, tokenizer))
        prefix = "" if scoring["chat_template"] else scoring["choice_delimiter"]  # " A" after "Answer:"
        letters = [_ids(tokenizer, prefix + LETTERS[k]) for k in range(len(options))]
        if any(len(t) != 1 for t in letters):
            raise ValueError(f"Expected each option letter to be one token, but the tokenizer gives {letters}")
        letters = torch.tensor([t[0] for t in letters], device=device)  # (K,) vocabulary ids
        inputs = torch.tensor([ids[-limit:] if limit else ids], device=device)
        out = model(input_ids=inputs, output_hidden_states=True)
        z = out.logits[0, -1].float()[letters]  # (K,) the answer position's letter logits
        if head is not None and head.scope == "vocab":
            where = head.log_temperature.device
            z = head(z.to(where), index=letters.to(where))
        return z.double().cpu(), out.hidden_states[-1][0, -1].float().cpu()
    if head is not None and head.scope == "vocab":
        raise ValueError("Expected an options, scalar or adaptive head under cloze scoring, but got a vocab head")
    context = (
        _chat(tokenizer, question)
        if scoring["chat_template"]
        else scoring["question_template"].format(question=question)
    )
    delimiter = "" if scoring["chat_template"] else scoring["choice_delimiter"]
    pairs = [_context_and_option(tokenizer, context, delimiter + option) for option in options]
    cut = max(0, max(len(c) + len(o) - 1 for c, o in pairs) - limit) if limit else 0  # every option loses the same
    scores, state = [], None
    for context_ids, option_ids in pairs:
        inputs = torch.tensor([(context_ids[cut:] + option_ids)[:-1]], device=device)
        out = model(input_ids=inputs, output_hidden_states=state is None)
        if state is None:  # the first option's pass: its context's last token predicts the option's first
            state = out.hidden_states[-1][0, len(context_ids[cut:]) - 1].float().cpu()
        logits = out.logits[0, -len(option_ids) :].float()  # (c, V): these predict the option
        picked = torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(option_ids, device=device)[:, None])
        total = float(picked.double().sum())  # log p(option | question)
        scores.append(total / len(option_ids) if scoring["rule"] == "cloze_norm" else total)
    return torch.tensor(scores, dtype=torch.float64), state


def option_probabilities(
    model,
    tokenizer,
    question: str,
    options: list[str],
    head: CalibrationHead | AdaptiveHead | None = None,
    scoring: dict | None = None,
) -> torch.Tensor:
    """p(option | question), (K,) float64, calibrated by `head` under the run's scoring
    rule (`head.scoring`; pass `scoring=read_export(folder)["scoring"]` with head=None).
    An adaptive head divides the scores by the temperature of this question's state."""
    if isinstance(head, Thermometer):
        raise ValueError(
            "Expected a head that calibrates one question, but a thermometer reads a set: set_probabilities"
        )
    scoring = scoring or (head.scoring if head is not None else None)
    if not scoring:
        raise ValueError("Expected a head or a `scoring` dict (read_export(folder)['scoring']), but got neither")
    z, h = option_scores_and_state(model, tokenizer, question, options, scoring, head)  # (K,), (d,)
    if isinstance(head, AdaptiveHead):
        z = head(z, h).cpu()
    elif head is not None and head.scope != "vocab":
        z = head(z.to(head.log_temperature.device)).cpu()  # options / scalar: on the option scores
    return torch.softmax(z, dim=-1)


def set_probabilities(
    model, tokenizer, questions: list[tuple[str, list[str]]], thermometer: Thermometer
) -> list[torch.Tensor]:
    """p(option | question) for each (question, options) of one set, (K_i,) float64 each:
    every question's scores, under the run's scoring rule, divided by the one temperature
    the thermometer reads from the mean of the set's states (`thermometer.temperature`)."""
    if not questions:
        raise ValueError("Expected at least one (question, options) in the set, but got none")
    scored = [option_scores_and_state(model, tokenizer, q, options, thermometer.scoring) for q, options in questions]
    tau = thermometer.temperature(torch.stack([h for _, h in scored]))  # (N, d) -> one T
    return [torch.softmax(_divide(z, tau), dim=-1) for z, _ in scored]
