"""Batched option scoring: MCQA items -> per-item option scores (N x K, ragged K).

    scores = score_items(lm, items, ScoringConfig(rule="cloze"), batch_size=16)
    scores.logits      # (N, K_max) float64, -inf where an item has fewer options
    scores.probs()     # softmax over each item's own options
    scores.predictions # argmax per item
    score_items(lm, items, cfg, features=True).features   # (N, d): h per item (scoring.features)

Cloze rules score every (item, choice) continuation; the letter rule scores one prompt
per item. Sequences are sorted by length and left-padded with explicit position ids,
so one forward per batch needs only the last few logits (`logits_to_keep`), and the
result does not depend on the batch size (a test checks it against one-at-a-time).

Items longer than the model's context are cut from the left, as lm-evaluation-harness
does (`calm_core.scoring.truncation`); `OptionScores.truncated` counts them and
`score_items` says so once per dataset on stderr. The forward passes that give the
log-probabilities are `calm_core.scoring.logprobs`. Asked to, the same passes give the
hidden-state features a calibrator reads (`calm_core.scoring.features`), stored with
the predictions and read back by `read_scores`.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, NamedTuple, Sequence

import numpy as np
import torch

from calm_core.calibration import metrics
from calm_core.data.schema import MCItem
from calm_core.scoring.fast_paths import fast_paths
from calm_core.scoring.features import FeatureCollector, feature_columns, stored_features
from calm_core.scoring.forward import HiddenStateRunner, head_inputs, left_pad_batch
from calm_core.scoring.logprobs import LogitsTransform, continuation_logprobs, last_logits, shared_prefix_logprobs
from calm_core.scoring.progress import ProgressFn, progress_callback
from calm_core.scoring.prompts import ScoringConfig, letter_token_ids
from calm_core.scoring.truncation import context_limit, fitted_cloze_requests, fitted_letter_prompts, warn_truncated


@dataclass
class OptionScores:
    """Per-item option scores from one model under one scoring rule."""

    ids: list[str]
    logits: np.ndarray  # (N, K_max) float64; -inf pads items with fewer options
    gold: np.ndarray  # (N,) int
    scoring: dict[str, Any]  # ScoringConfig.to_dict(), recorded with every result
    model: dict[str, Any] = field(default_factory=dict)  # LoadedModel.info subset
    truncated: int = 0  # items cut from the left to fit the model's context (fit_cloze_item)
    context_length: int | None = None  # the model's context in tokens (context_limit); None: unknown, nothing cut
    features: np.ndarray | None = None  # (N, d) float32: h per item (scoring.features); None: not captured
    option_features: np.ndarray | None = None  # (N, K_max, d) float32, NaN pads: each option's mean state (cloze)

    def __post_init__(self) -> None:
        if self.logits.ndim != 2 or len(self.logits) != len(self.gold) or len(self.gold) != len(self.ids):
            raise ValueError(f"Expected logits (N, K) with N = len(gold) = len(ids), but got {self.logits.shape}")
        if self.features is not None and (self.features.ndim != 2 or len(self.features) != len(self.ids)):
            raise ValueError(f"Expected features (N, d) with N = {len(self.ids)}, but got {self.features.shape}")
        if self.option_features is not None and self.option_features.shape[:2] != self.logits.shape:
            raise ValueError(
                f"Expected option features (N, K_max, d) with (N, K_max) = {self.logits.shape}, "
                f"but got {self.option_features.shape}"
            )

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def n_choices(self) -> np.ndarray:
        return np.isfinite(self.logits).sum(axis=1)

    @property
    def predictions(self) -> np.ndarray:
        return np.argmax(self.logits, axis=1)

    def probs(self, temperature: float = 1.0) -> np.ndarray:
        """Option probabilities softmax(z / T) over each item's own options."""
        return metrics.softmax(self.logits / temperature)

    def to_frame(self) -> Any:
        """Per-item table (id, gold, prediction, n_choices, logits, probs) for Parquet, and
        the features in float16 where they were captured (scoring.features)."""
        import pandas as pd

        probs = self.probs()
        return pd.DataFrame(
            {
                "id": self.ids,
                "gold": self.gold,
                "prediction": self.predictions,
                "n_choices": self.n_choices,
                "logits": [row[np.isfinite(row)].tolist() for row in self.logits],
                "probs": [p[: int(k)].tolist() for p, k in zip(probs, self.n_choices, strict=True)],
                **feature_columns(self.features, self.option_features, self.n_choices),
            }
        )

    @classmethod
    def from_frame(cls, frame: Any, scoring: dict[str, Any], model: dict[str, Any] | None = None) -> "OptionScores":
        """`to_frame`'s table back: raw logits, gold, ids and (None where the table has
        none) the features, in the table's row order."""
        rows = [np.asarray(r, dtype=np.float64) for r in frame["logits"]]
        features, option_features = stored_features(frame)
        return cls(
            list(frame["id"]),
            pad_ragged(rows),
            frame["gold"].to_numpy(dtype=np.int64),
            scoring,
            model or {},
            features=features,
            option_features=option_features,
        )


def read_scores(path: str | Path, scoring: dict[str, Any] | None = None) -> OptionScores:
    """A per-item predictions file (`runs.layout.write_predictions`: eval/<variant>/<dataset>.parquet
    of `calm eval --save-preds` or a run) as OptionScores: the raw logits, gold and ids in
    the file's order, and its features, None in a file without them: what a calibrator
    is fitted or refitted on without the model. `scoring`: the rule to record (the file
    does not hold it). A run's files read through `RunDir.read_predictions` then
    `OptionScores.from_frame` say which file is damaged."""
    import pandas as pd

    return OptionScores.from_frame(pd.read_parquet(path), scoring or {})


def pad_ragged(rows: Sequence[np.ndarray]) -> np.ndarray:
    """Stack rows of different lengths into (N, K_max), padding with -inf."""
    k_max = max(len(r) for r in rows)
    out = np.full((len(rows), k_max), -np.inf, dtype=np.float64)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def _batches(order: Sequence[int], batch_size: int) -> Iterable[list[int]]:
    for start in range(0, len(order), batch_size):
        yield list(order[start : start + batch_size])


def _reduce(logprobs: torch.Tensor, rule: str) -> float:
    total = float(logprobs.double().sum())
    return total / len(logprobs) if rule == "cloze_norm" else total


def _cloze_scores(
    lm: Any,
    items: Sequence[MCItem],
    requests: list[list[tuple[list[int], list[int]]]],
    cfg: ScoringConfig,
    batch_size: int,
    progress: bool | ProgressFn,
    share_prefix: bool = True,
    transform: LogitsTransform | None = None,
    collector: FeatureCollector | None = None,
) -> list[np.ndarray]:
    """Option scores for cloze rules from `cloze_requests`. `batch_size` counts sequences
    (continuations). `collector` receives each option's states (scoring.features)."""
    runner = isinstance(lm.model, HiddenStateRunner)  # no KV cache, but it shares prefixes inside a batch
    kv_sharing = share_prefix and not runner and fast_paths(lm.model).prefix_sharing.on  # measured once per model
    if not kv_sharing or any(len({tuple(context) for context, _ in reqs}) > 1 for reqs in requests):
        return _cloze_scores_flat(lm, requests, cfg, batch_size, progress, transform, share_prefix, collector)
    order = sorted(range(len(items)), key=lambda i: -len(requests[i][0][0]))
    rows = [np.zeros(item.n_choices) for item in items]
    update, close = progress_callback(progress, len(items), f"scoring ({cfg.name})")
    done, items_per_batch = 0, max(1, batch_size // max(it.n_choices for it in items))
    with torch.inference_mode():
        for batch in _batches(order, items_per_batch):
            groups = [(requests[i][0][0], [cont for _, cont in requests[i]]) for i in batch]
            states: list[list[torch.Tensor]] | None = [] if collector is not None else None
            scored = shared_prefix_logprobs(lm.model, groups, lm.tokenizer.pad_token_id, lm.device, transform, states)
            for i, per_choice in zip(batch, scored, strict=True):
                rows[i] = np.array([_reduce(lp, cfg.rule) for lp in per_choice])
            if collector is not None and states is not None:
                for i, per_choice_states in zip(batch, states, strict=True):
                    for k, option_states in enumerate(per_choice_states):
                        collector.add_option(i, k, option_states)
            done += len(batch)
            update(done, len(items))
    close()
    return rows


def _cloze_scores_flat(
    lm: Any,
    requests: list[list[tuple[list[int], list[int]]]],
    cfg: ScoringConfig,
    batch_size: int,
    progress: bool | ProgressFn,
    transform: LogitsTransform | None = None,
    by_item: bool = False,
    collector: FeatureCollector | None = None,
) -> list[np.ndarray]:
    """The straightforward path: every (context + choice) sequence runs in full, longest
    first; `by_item` keeps each item's sequences together (items longest first), so a
    model that shares prefixes within a batch (a FrozenPrefixModel) finds them."""
    flat = [(i, k, context, cont) for i, reqs in enumerate(requests) for k, (context, cont) in enumerate(reqs)]
    longest = [max(len(context) + len(cont) for context, cont in reqs) for reqs in requests]
    if by_item:
        order = sorted(range(len(flat)), key=lambda r: (-longest[flat[r][0]], flat[r][0], flat[r][1]))
    else:
        order = sorted(range(len(flat)), key=lambda r: -len(flat[r][2]) - len(flat[r][3]))
    rows = [np.zeros(len(reqs)) for reqs in requests]
    update, close = progress_callback(progress, len(flat), f"scoring ({cfg.name}, sequences)")
    done = 0
    with torch.inference_mode():
        for batch in _batches(order, batch_size):
            pairs = [(flat[r][2], flat[r][3]) for r in batch]
            states: list[torch.Tensor] | None = [] if collector is not None else None
            scored = continuation_logprobs(lm.model, pairs, lm.tokenizer.pad_token_id, lm.device, transform, states)
            for r, logprobs in zip(batch, scored, strict=True):
                rows[flat[r][0]][flat[r][1]] = _reduce(logprobs, cfg.rule)
            if collector is not None and states is not None:
                for r, option_states in zip(batch, states, strict=True):
                    collector.add_option(flat[r][0], flat[r][1], option_states)
            done += len(batch)
            update(done, len(flat))
    close()
    return rows


def _letter_scores(
    lm: Any,
    items: Sequence[MCItem],
    prompts: list[list[int]],
    cfg: ScoringConfig,
    batch_size: int,
    progress: bool | ProgressFn,
    head: Any = None,
    collector: FeatureCollector | None = None,
) -> list[np.ndarray]:
    """Option scores for the letter rule from `letter_prompt_ids`. `batch_size` counts
    prompts. `collector` receives the answer position's state, what the LM head reads
    in this same call (`forward.head_inputs`)."""
    tokenizer = lm.tokenizer
    letters = letter_token_ids(tokenizer, max(it.n_choices for it in items), cfg)
    order = sorted(range(len(items)), key=lambda i: -len(prompts[i]))
    rows = [np.zeros(item.n_choices) for item in items]
    update, close = progress_callback(progress, len(items), f"scoring ({cfg.name})")
    done = 0
    with torch.inference_mode():
        for batch in _batches(order, batch_size):
            inputs = left_pad_batch([prompts[i] for i in batch], tokenizer.pad_token_id, lm.device)
            with head_inputs(lm.model) if collector is not None else nullcontext([]) as seen:
                logits = last_logits(lm.model, inputs, 1)
            if collector is not None:
                collector.add_prompts(batch, seen[-1][:, -1])  # (B, d)
            gathered = logits[:, -1, letters]  # (B, K_max)
            if head is not None:  # a head acting on tokens: each letter's own row of (l, tau)
                gathered = head.on_tokens(gathered, index=torch.tensor(letters, device=gathered.device))
            for row, i in enumerate(batch):
                rows[i] = gathered[row, : items[i].n_choices].double().cpu().numpy()
            done += len(batch)
            update(done, len(items))
    close()
    return rows


def apply_option_head(logits: np.ndarray, head: Any, features: np.ndarray | None = None) -> np.ndarray:
    """`head.on_options` on option scores (N, K_max) already computed, float64 out: the
    same numbers as scoring with a head that acts on options, without another forward
    pass. The identity (a copy) without a head or for one that acts on tokens. The
    scores go to the head's device and back, so a head on the GPU works too. A head
    that reads hidden states (the adaptive scope) needs the items' `features` (N, d)."""
    if head is None:
        return logits.astype(np.float64)  # a copy, as with a head
    device = next(head.parameters()).device
    with torch.inference_mode():
        z = torch.from_numpy(logits).to(device)  # (N, K_max)
        h = torch.from_numpy(np.asarray(features, dtype=np.float32)).to(device) if features is not None else None
        return head.on_options(z, features=h).double().cpu().numpy().copy()


class _Scorer(NamedTuple):
    """What scoring reads of a model: the module forward passes go through (a model or a
    FrozenPrefixModel), its tokenizer and the device its inputs go to."""

    model: Any
    tokenizer: Any
    device: torch.device


def score_items(
    lm: Any,
    items: Sequence[MCItem],
    cfg: ScoringConfig | None = None,
    *,
    batch_size: int = 32,
    progress: bool | ProgressFn = True,
    share_prefix: bool = True,
    head: Any = None,
    dataset: str | None = None,
    features: bool = False,
    option_features: bool = False,
) -> OptionScores:
    """`score_with` on a LoadedModel (scoring.models), its name, kind and dtype recorded
    with the scores."""
    info = {k: lm.info[k] for k in ("name", "kind", "dtype", "device") if k in getattr(lm, "info", {})}
    return score_with(
        lm.model,
        lm.tokenizer,
        items,
        cfg,
        batch_size=batch_size,
        progress=progress,
        share_prefix=share_prefix,
        head=head,
        dataset=dataset,
        model_info=info,
        features=features,
        option_features=option_features,
    )


def score_with(
    model: Any,
    tokenizer: Any,
    items: Sequence[MCItem],
    cfg: ScoringConfig | None = None,
    *,
    batch_size: int = 32,
    progress: bool | ProgressFn = True,
    share_prefix: bool = True,
    head: Any = None,
    dataset: str | None = None,
    model_info: dict[str, Any] | None = None,
    features: bool = False,
    option_features: bool = False,
) -> OptionScores:
    """Score every option of every item under `cfg` with `model` (a causal LM, a PEFT
    model, or a FrozenPrefixModel over one) and its tokenizer.

    `batch_size` counts sequences per forward pass (cloze: continuations; letter:
    prompts). `share_prefix=False` forces the straightforward cloze path (for tests
    and benchmarks); results agree to float precision. `head` (a CalibrationHead) gives
    the calibrated model's scores, with the head where it acts (`acts_on`), as in training
    (calm_core.training.objectives): on the vocabulary logits inside the forward pass, or
    on the option scores.
    Items longer than the model's context are cut from the left (`fit_cloze_item`),
    counted in `.truncated` and reported once on stderr, naming `dataset` when given.
    `features=True` also returns `.features`, h per item, and `option_features=True`
    (cloze rules) `.option_features`, each option's mean state, and h with them
    (scoring.features), from the same forward passes: the scores are the same to the
    last bit either way.
    """
    if not items:
        raise ValueError("Expected at least one item to score, but got none")
    if batch_size < 1:
        raise ValueError(f"Expected `batch_size` to be a positive int, but got {batch_size}")
    cfg = cfg or ScoringConfig()
    if option_features and not cfg.is_cloze:
        raise ValueError(f"Expected a cloze rule for option features (the {cfg.rule} rule scores no option tokens)")
    lm = _Scorer(model, tokenizer, next(model.parameters()).device)
    fast_paths(model.model if isinstance(model, HiddenStateRunner) else model)  # measured once, read by the passes
    limit = context_limit(lm.model, lm.tokenizer)
    wanted = features or option_features or (head is not None and head.reads_features)
    collector = FeatureCollector([it.n_choices for it in items], option_features) if wanted else None
    if cfg.is_cloze:
        requests, cut = fitted_cloze_requests(items, cfg, lm.tokenizer, limit)
        transform = head.on_tokens if head is not None else None
        rows = _cloze_scores(lm, items, requests, cfg, batch_size, progress, share_prefix, transform, collector)
    else:
        prompts, cut = fitted_letter_prompts(items, cfg, lm.tokenizer, limit)
        rows = _letter_scores(lm, items, prompts, cfg, batch_size, progress, head, collector)
    warn_truncated(cut, len(items), limit, dataset)
    h, per_option = collector.result() if collector is not None else (None, None)
    logits = apply_option_head(pad_ragged(rows), head, h)
    return OptionScores(
        ids=[it.id for it in items],
        logits=logits,
        gold=np.array([it.answer for it in items], dtype=np.int64),
        scoring=cfg.to_dict(),
        model=model_info or {},
        truncated=len(cut),
        context_length=limit,
        features=h,
        option_features=per_option,
    )
