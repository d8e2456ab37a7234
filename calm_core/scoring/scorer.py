"""The scorer: one model, its tokenizer and how to run it, fixed once; option scores for
any items under any rule, with or without a calibration head.

    scorer = Scorer.of(lm, batch_size=16, progress=False)        # lm: a LoadedModel
    scores = scorer.score(items, ScoringConfig(rule="cloze"))    # OptionScores (N, K_max)
    scorer.score(items, rule, head=head)                         # the calibrated model's scores
    scorer.score(items, rule, capture=Capture.FEATURES)          # .features: h per item

Cloze rules score every (item, choice) continuation; the letter rule scores one prompt
per item. Sequences are sorted by length and left-padded with explicit position ids,
so one forward per batch needs only the last few logits (`logits_to_keep`), and the
result does not depend on the batch size (a test checks it against one-at-a-time).

Why an object: what a model is and how it runs (device, context limit, batch size,
progress, which fast paths it proved) does not change between calls, while the items,
the rule, the head and what to record do. Building the scorer measures the model's
fast paths (`scoring.fast_paths`, cached by fingerprint) before any pass reads them, so
the forward passes below never decide it themselves. What to record besides the scores
is one `Capture` value, not a flag per feature.

Items longer than the model's context are cut from the left, as lm-evaluation-harness
does (`calm_core.scoring.truncation`); `OptionScores.truncated` counts them and `score`
says so once per dataset on stderr. The log-probabilities are `scoring.logprobs`'; the
hidden-state features a calibrator reads come from the same passes (`scoring.features`).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from enum import Flag, auto
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np
import torch

from calm_core.calibration.head_base import Head
from calm_core.data.schema import MCItem
from calm_core.scoring.fast_paths import fast_paths
from calm_core.scoring.features import FeatureCollector
from calm_core.scoring.forward import HiddenStateRunner, head_inputs, left_pad_batch
from calm_core.scoring.logprobs import LogitsTransform, continuation_logprobs, last_logits, shared_prefix_logprobs
from calm_core.scoring.options import OptionScores, apply_option_head, pad_ragged
from calm_core.scoring.progress import ProgressFn, progress_callback
from calm_core.scoring.prompts import ScoringConfig, letter_token_ids
from calm_core.scoring.truncation import context_limit, fitted_cloze_requests, fitted_letter_prompts, warn_truncated

if TYPE_CHECKING:  # a type only: scoring.models' import chain (GGUF conversion) is not needed to score
    from calm_core.scoring.models import LoadedModel

Requests = list[list[tuple[list[int], list[int]]]]  # per item, per option: (context ids, continuation ids)


class Capture(Flag):
    """What a scoring pass records besides the scores, read from the same forward passes
    (`scoring.features`): the scores are the same to the last bit whatever is recorded."""

    NOTHING = 0
    FEATURES = auto()  # .features (N, d): h per item, the state at its last prompt token
    OPTION_FEATURES = auto()  # .option_features (N, K_max, d), each option's mean state (cloze rules), and h


@dataclass(frozen=True)
class _Job:
    """One call's varying part: the items, the rule, the head and the feature collector."""

    items: Sequence[MCItem]
    rule: ScoringConfig
    head: Head | None
    collector: FeatureCollector | None

    @property
    def transform(self) -> LogitsTransform | None:
        """The head's token transform (identity unless it acts on tokens), for cloze passes."""
        return self.head.on_tokens if self.head is not None else None


class Scorer:
    """Option scores of one model (a causal LM, a PEFT model, or a FrozenPrefixModel
    over one) with its tokenizer: device, context limit, batch size and progress fixed."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        batch_size: int = 32,  # sequences per forward pass (cloze: continuations; letter: prompts)
        progress: bool | ProgressFn = True,  # a tqdm bar, a callback (done, total), or nothing
        share_prefix: bool = True,  # False forces the straightforward cloze path (tests, benchmarks)
        info: dict[str, Any] | None = None,  # the model's name, kind, dtype, device: recorded with the scores
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"Expected `batch_size` to be a positive int, but got {batch_size}")
        self.model, self.tokenizer = model, tokenizer
        self.batch_size, self.progress, self.share_prefix = batch_size, progress, share_prefix
        self.info = info or {}
        self.device: torch.device = next(model.parameters()).device
        self.limit = context_limit(model, tokenizer)
        runner = isinstance(model, HiddenStateRunner)  # no KV cache, but it shares prefixes inside a batch
        support = fast_paths(model.model if runner else model)  # measured once per model, read by every pass
        self.kv_sharing = share_prefix and not runner and support.prefix_sharing.on

    @classmethod
    def of(cls, lm: LoadedModel, **settings: Any) -> Scorer:
        """The scorer of a LoadedModel (scoring.models), its name, kind, dtype and device
        recorded with the scores; `settings` are the constructor's keywords."""
        info = {k: lm.info[k] for k in ("name", "kind", "dtype", "device") if k in getattr(lm, "info", {})}
        return cls(lm.model, lm.tokenizer, info=info, **settings)

    def score(
        self,
        items: Sequence[MCItem],
        rule: ScoringConfig | None = None,
        head: Head | None = None,
        capture: Capture = Capture.NOTHING,
        dataset: str | None = None,
    ) -> OptionScores:
        """Every option of every item scored under `rule` (default: ScoringConfig()).

        `head` gives the calibrated model's scores, with the head where it acts (`acts_on`),
        as in training (calm_core.training.objectives): on the vocabulary logits inside the
        forward pass, or on the option scores; a head that reads features gets h from the
        same passes. `capture` says what else to record. Items longer than the model's
        context are cut from the left (`fit_cloze_item`), counted in `.truncated` and
        reported once on stderr, naming `dataset` when given."""
        if not items:
            raise ValueError("Expected at least one item to score, but got none")
        rule = rule or ScoringConfig()
        if Capture.OPTION_FEATURES in capture and not rule.is_cloze:
            why = f"the {rule.rule} rule scores no option tokens"
            raise ValueError(f"Expected a cloze rule for option features ({why})")
        job = _Job(items, rule, head, self._collector(items, capture, head))
        if rule.is_cloze:
            requests, cut = fitted_cloze_requests(items, rule, self.tokenizer, self.limit)
            rows = self._cloze(job, requests)
        else:
            prompts, cut = fitted_letter_prompts(items, rule, self.tokenizer, self.limit)
            rows = self._letter(job, prompts)
        warn_truncated(cut, len(items), self.limit, dataset)
        h, per_option = job.collector.result() if job.collector is not None else (None, None)
        return OptionScores(
            ids=[it.id for it in items],
            logits=apply_option_head(pad_ragged(rows), head, h),
            gold=np.array([it.answer for it in items], dtype=np.int64),
            scoring=rule.to_dict(),
            model=dict(self.info),
            truncated=len(cut),
            context_length=self.limit,
            features=h,
            option_features=per_option,
        )

    @staticmethod
    def _collector(items: Sequence[MCItem], capture: Capture, head: Head | None) -> FeatureCollector | None:
        """A collector when anything reads states: the capture asked, or a head that reads them."""
        if capture == Capture.NOTHING and (head is None or not head.reads_features):
            return None
        return FeatureCollector([it.n_choices for it in items], Capture.OPTION_FEATURES in capture)

    def _cloze(self, job: _Job, requests: Requests) -> list[np.ndarray]:
        """Cloze option scores: each context once on a shared KV cache where the model
        proved it and every item has one context, else every sequence in full."""
        if not self.kv_sharing or any(len({tuple(context) for context, _ in reqs}) > 1 for reqs in requests):
            return self._cloze_flat(job, requests)
        items, collector = job.items, job.collector
        order = sorted(range(len(items)), key=lambda i: -len(requests[i][0][0]))
        rows = [np.zeros(item.n_choices) for item in items]
        update, close = progress_callback(self.progress, len(items), f"scoring ({job.rule.name})")
        done, items_per_batch = 0, max(1, self.batch_size // max(it.n_choices for it in items))
        with torch.inference_mode():
            for batch in _batches(order, items_per_batch):
                groups = [(requests[i][0][0], [cont for _, cont in requests[i]]) for i in batch]
                states: list[list[torch.Tensor]] | None = [] if collector is not None else None
                pad_id = self.tokenizer.pad_token_id
                scored = shared_prefix_logprobs(self.model, groups, pad_id, self.device, job.transform, states)
                for i, per_choice in zip(batch, scored, strict=True):
                    rows[i] = np.array([_reduce(lp, job.rule.rule) for lp in per_choice])
                if collector is not None and states is not None:
                    for i, per_choice_states in zip(batch, states, strict=True):
                        for k, option_states in enumerate(per_choice_states):
                            collector.add_option(i, k, option_states)
                done += len(batch)
                update(done, len(items))
        close()
        return rows

    def _cloze_flat(self, job: _Job, requests: Requests) -> list[np.ndarray]:
        """The straightforward path: every (context + choice) sequence runs in full, longest
        first; with `share_prefix` each item's sequences stay together (items longest
        first), so a model that shares prefixes within a batch (a FrozenPrefixModel) finds them."""
        flat = [(i, k, context, cont) for i, reqs in enumerate(requests) for k, (context, cont) in enumerate(reqs)]
        longest = [max(len(context) + len(cont) for context, cont in reqs) for reqs in requests]
        if self.share_prefix:
            order = sorted(range(len(flat)), key=lambda r: (-longest[flat[r][0]], flat[r][0], flat[r][1]))
        else:
            order = sorted(range(len(flat)), key=lambda r: -len(flat[r][2]) - len(flat[r][3]))
        rows = [np.zeros(len(reqs)) for reqs in requests]
        update, close = progress_callback(self.progress, len(flat), f"scoring ({job.rule.name}, sequences)")
        done, collector = 0, job.collector
        with torch.inference_mode():
            for batch in _batches(order, self.batch_size):
                pairs = [(flat[r][2], flat[r][3]) for r in batch]
                states: list[torch.Tensor] | None = [] if collector is not None else None
                pad_id = self.tokenizer.pad_token_id
                scored = continuation_logprobs(self.model, pairs, pad_id, self.device, job.transform, states)
                for r, logprobs in zip(batch, scored, strict=True):
                    rows[flat[r][0]][flat[r][1]] = _reduce(logprobs, job.rule.rule)
                if collector is not None and states is not None:
                    for r, option_states in zip(batch, states, strict=True):
                        collector.add_option(flat[r][0], flat[r][1], option_states)
                done += len(batch)
                update(done, len(flat))
        close()
        return rows

    def _letter(self, job: _Job, prompts: list[list[int]]) -> list[np.ndarray]:
        """Letter option scores: the answer position's logits of the letter tokens, with a
        head acting on tokens on each letter's own row. The collector receives the answer
        position's state, what the LM head reads in this same call (`forward.head_inputs`)."""
        items, head, collector = job.items, job.head, job.collector
        letters = letter_token_ids(self.tokenizer, max(it.n_choices for it in items), job.rule)
        order = sorted(range(len(items)), key=lambda i: -len(prompts[i]))
        rows = [np.zeros(item.n_choices) for item in items]
        update, close = progress_callback(self.progress, len(items), f"scoring ({job.rule.name})")
        done = 0
        with torch.inference_mode():
            for batch in _batches(order, self.batch_size):
                inputs = left_pad_batch([prompts[i] for i in batch], self.tokenizer.pad_token_id, self.device)
                with self._recording(collector is not None) as seen:
                    logits = last_logits(self.model, inputs, 1)
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

    def _recording(self, wanted: bool) -> AbstractContextManager[list[torch.Tensor]]:
        """What the LM head reads in the passes inside (`forward.head_inputs`), or nothing."""
        return head_inputs(self.model) if wanted else nullcontext([])


def _batches(order: Sequence[int], batch_size: int) -> Iterable[list[int]]:
    for start in range(0, len(order), batch_size):
        yield list(order[start : start + batch_size])


def _reduce(logprobs: torch.Tensor, rule: str) -> float:
    total = float(logprobs.double().sum())
    return total / len(logprobs) if rule == "cloze_norm" else total
