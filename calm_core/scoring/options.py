"""Batched option scoring: MCQA items -> per-item option scores (N x K, ragged K).

    scores = score_items(lm, items, ScoringConfig(rule="cloze"), batch_size=16)
    scores.logits      # (N, K_max) float64, -inf where an item has fewer options
    scores.probs()     # softmax over each item's own options
    scores.predictions # argmax per item

Cloze rules score every (item, choice) continuation; the letter rule scores one prompt
per item. Sequences are sorted by length and left-padded with explicit position ids,
so one forward per batch needs only the last few logits (`logits_to_keep`), and the
result does not depend on the batch size (a test checks it against one-at-a-time).

Items longer than the model's context (`context_limit`) are cut from the left, as
lm-evaluation-harness does: the start of the prompt goes, the same tokens for every
option of an item (so they still share their prefix), until prompt + the longest option
fits. `OptionScores.truncated` counts them and `score_items` says so once per dataset on
stderr. An item whose options cannot fit at all raises DataError (`fit_cloze_item`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, NamedTuple, Sequence

import numpy as np
import torch

from calm_core.calibration import metrics
from calm_core.data.schema import DataError, MCItem
from calm_core.scoring.forward import (
    HiddenStateRunner,
    cache_kwarg,
    hidden_path,
    last_hidden,
    left_pad_batch,
    length_runs,
    output_head,
    select_cache,
)
from calm_core.scoring.prompts import (
    ScoringConfig,
    cloze_context,
    cloze_continuations,
    letter_prompt,
    letter_token_ids,
    split_context_continuation,
)

ProgressFn = Callable[[int, int], None]  # (done, total) -> None
LogitsTransform = Callable[[torch.Tensor], torch.Tensor]  # (..., V) -> (..., V), e.g. a calibration head


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

    def __post_init__(self) -> None:
        if self.logits.ndim != 2 or len(self.logits) != len(self.gold) or len(self.gold) != len(self.ids):
            raise ValueError(f"Expected logits (N, K) with N = len(gold) = len(ids), but got {self.logits.shape}")

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
        """Per-item table (id, gold, prediction, n_choices, logits, probs) for Parquet."""
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
            }
        )

    @classmethod
    def from_frame(cls, frame: Any, scoring: dict[str, Any], model: dict[str, Any] | None = None) -> "OptionScores":
        rows = [np.asarray(r, dtype=np.float64) for r in frame["logits"]]
        return cls(list(frame["id"]), pad_ragged(rows), frame["gold"].to_numpy(dtype=np.int64), scoring, model or {})


def pad_ragged(rows: Sequence[np.ndarray]) -> np.ndarray:
    """Stack rows of different lengths into (N, K_max), padding with -inf."""
    k_max = max(len(r) for r in rows)
    out = np.full((len(rows), k_max), -np.inf, dtype=np.float64)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def progress_callback(progress: bool | ProgressFn, total: int, desc: str) -> tuple[ProgressFn, Callable[[], None]]:
    if callable(progress):
        return progress, lambda: None
    if not progress:
        return (lambda done, total: None), lambda: None
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc=desc, unit="item", file=sys.stderr, leave=False)

    def update(done: int, _total: int) -> None:
        bar.update(done - bar.n)

    return update, bar.close


def last_logits(model: Any, batch: dict[str, torch.Tensor], n_last: int) -> torch.Tensor:
    """Logits of the last `n_last` positions of each left-padded row: (B, n_last, V), fp32."""
    out = model(**batch, logits_to_keep=n_last, use_cache=False)
    return out.logits.float()


def continuation_logprobs(
    model: Any,
    contexts_and_conts: Sequence[tuple[list[int], list[int]]],
    pad_id: int,
    device: torch.device,
    transform: LogitsTransform | None = None,
) -> list[torch.Tensor]:
    """Per-token log p(continuation token | prefix) for each (context, continuation) pair.

    The model reads (context + continuation)[:-1]; with left padding the logits that
    predict a continuation of length c are the row's last c positions.
    """
    lengths = [len(cont) for _, cont in contexts_and_conts]
    logits = needed_logits(model, left_pad_batch(continuation_inputs(contexts_and_conts), pad_id, device), lengths)
    if transform is not None:
        logits = transform(logits)
    logprobs = torch.log_softmax(logits, dim=-1)
    targets = torch.tensor([t for _, cont in contexts_and_conts for t in cont], device=logprobs.device)
    picked = logprobs.gather(-1, targets[:, None])[:, 0]  # (sum c,)
    return list(picked.split(lengths))


def continuation_inputs(contexts_and_conts: Sequence[tuple[list[int], list[int]]]) -> list[list[int]]:
    """What the model reads to score each (context, continuation): (context + continuation)[:-1]."""
    return [(ctx + cont)[:-1] for ctx, cont in contexts_and_conts]


def letter_prompt_ids(
    items: Sequence[MCItem], cfg: ScoringConfig, tokenizer: Any, max_length: int | None = None
) -> list[list[int]]:
    """The token ids of each item's letter prompt (its answer-position logits score the
    letters), each cut from the left to `max_length` tokens (`fit_letter_item`)."""
    return fitted_letter_prompts(items, cfg, tokenizer, max_length)[0]


def needed_logits(model: Any, batch: dict[str, torch.Tensor], lengths: Sequence[int]) -> torch.Tensor:
    """fp32 logits at the last lengths[r] positions of each left-padded row r, stacked
    in row order: (sum(lengths), V). Where the model allows (calm_core.scoring.frozen_prefix.
    hidden_path), the LM head runs on those positions only, not on B x max(lengths):
    the head and its log-softmax over the vocabulary are most of a small model's cost."""
    longest = max(lengths)
    keep = torch.arange(longest, device=batch["input_ids"].device)[None, :] >= (
        longest - torch.tensor(lengths, device=batch["input_ids"].device)[:, None]
    )  # (B, c_max)
    return logits_at(model, {**batch, "use_cache": False}, keep)  # (sum c, V)


def _batches(order: Sequence[int], batch_size: int) -> Iterable[list[int]]:
    for start in range(0, len(order), batch_size):
        yield list(order[start : start + batch_size])


def cloze_requests(
    items: Sequence[MCItem], cfg: ScoringConfig, tokenizer: Any, max_length: int | None = None
) -> list[list[tuple[list[int], list[int]]]]:
    """Per item, per choice: (context ids, continuation ids), tokenized as the harness does
    and cut from the left to fit `max_length` tokens (`fit_cloze_item`)."""
    return fitted_cloze_requests(items, cfg, tokenizer, max_length)[0]


SANE_MAX_LENGTH = 10_000_000  # tokens: transformers puts 1e30 in model_max_length when a tokenizer does not know
_CONTEXT_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "n_ctx",
)  # Llama-likes, GPT-2, GPT-J; the harness reads these
_WARNED: set[tuple[Any, ...]] = set()  # (dataset, limit, truncated ids) already reported by this process


def context_limit(model: Any, tokenizer: Any = None) -> int | None:
    """The most tokens `model` reads in one sequence: its config's max_position_embeddings
    (n_positions / n_ctx for GPT-2-likes), else the tokenizer's model_max_length when that
    is a real number; None when neither knows, and then nothing is cut. A PEFT model or a
    FrozenPrefixModel answers for its base model (both expose `.config`)."""
    config = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config  # multimodal: the LM part
    for key in _CONTEXT_KEYS:
        value = getattr(text, key, None)
        if isinstance(value, int) and value > 0:
            return value
    length = getattr(tokenizer, "model_max_length", None)
    return int(length) if isinstance(length, int) and 0 < length < SANE_MAX_LENGTH else None


def fit_cloze_item(
    item_id: str, requests: list[tuple[list[int], list[int]]], limit: int | None
) -> tuple[list[tuple[list[int], list[int]]], bool]:
    """One item's (context, option) pairs with the contexts cut from the left so that the
    model reads at most `limit` tokens per option; (pairs, whether anything was cut).

    The model reads (context + option)[:-1], so the cut is len(context) + len(longest
    option) - 1 - limit tokens from the start of the prompt. lm-evaluation-harness cuts
    each option on its own; here every option of the item loses the same tokens, so
    their contexts stay identical and the prefix-shared path still applies.

    An option that does not fit even after one token of context (it alone is longer than
    `limit`) raises DataError naming the item, rather than skipping the item: a skip would
    compare models (or variants of one model) on different item sets, and a model with a
    shorter context would quietly lose its longest questions. The person decides: drop
    or shorten the item, or use a model with a longer context.
    """
    if limit is None:
        return requests, False
    cut = max(0, max(len(ctx) + len(cont) - 1 for ctx, cont in requests) - limit)
    if cut == 0:
        return requests, False
    if cut >= min(len(ctx) for ctx, _ in requests):  # no context token left to predict an option's first token
        longest = max(len(cont) for _, cont in requests)
        raise DataError(
            f"Expected every option of item {item_id!r} to fit in the model's context of {limit} "
            f"tokens, but its longest option is {longest} tokens; drop or shorten the item, "
            "or use a model with a longer context"
        )
    return [(ctx[cut:], cont) for ctx, cont in requests], True


def fit_letter_item(item_id: str, prompt: list[int], limit: int | None, listed: int) -> tuple[list[int], bool]:
    """A letter prompt cut from the left to `limit` tokens; (ids, whether anything was cut).

    The letter is read at the prompt's last position, so the prompt itself must fit. The
    last `listed` tokens (the lettered options and the answer cue) must survive: a prompt
    that lost the text of option A cannot be answered "A", so that raises DataError, as
    an option too long for cloze scoring does (`fit_cloze_item` says why not skip)."""
    if limit is None or len(prompt) <= limit:
        return prompt, False
    if listed > limit:
        raise DataError(
            f"Expected the lettered options of item {item_id!r} to fit in the model's context of "
            f"{limit} tokens, but they take {listed} tokens; drop or shorten the item, "
            "or use a model with a longer context"
        )
    return prompt[-limit:], True


def _listed_length(item: MCItem, prompt: str, tokenizer: Any) -> int:
    """Tokens after the question in a letter prompt (the options and the cue): the part
    a left cut must not reach. Counted on its own, so within a token of the real split."""
    start = prompt.rfind(item.question)
    if start < 0:  # a template that rewrites the question: protect only the cue's last token
        return 1
    return len(tokenizer(prompt[start + len(item.question) :], add_special_tokens=False).input_ids)


def fitted_letter_prompts(
    items: Sequence[MCItem], cfg: ScoringConfig, tokenizer: Any, limit: int | None
) -> tuple[list[list[int]], list[str]]:
    """Each item's letter prompt ids, cut to fit `limit` (`fit_letter_item`), and the ids of the items cut."""
    prompts, truncated = [], []
    for item in items:
        text = letter_prompt(item, cfg, tokenizer)
        ids = tokenizer(text, add_special_tokens=False).input_ids
        listed = _listed_length(item, text, tokenizer) if limit is not None and len(ids) > limit else 0
        ids, cut = fit_letter_item(item.id, ids, limit, listed)
        prompts.append(ids)
        if cut:
            truncated.append(item.id)
    return prompts, truncated


def fitted_cloze_requests(
    items: Sequence[MCItem],
    cfg: ScoringConfig,
    tokenizer: Any,
    limit: int | None,
) -> tuple[list[list[tuple[list[int], list[int]]]], list[str]]:
    """`cloze_requests` cut to fit `limit` (`fit_cloze_item`), and the ids of the items cut."""
    requests, truncated = [], []
    for item in items:
        context = cloze_context(item, cfg, tokenizer)
        pairs = [split_context_continuation(tokenizer, context, c) for c in cloze_continuations(item, cfg)]
        pairs, cut = fit_cloze_item(item.id, pairs, limit)
        requests.append(pairs)
        if cut:
            truncated.append(item.id)
    return requests, truncated


def truncated_item_ids(items: Sequence[MCItem], cfg: ScoringConfig, tokenizer: Any, limit: int | None) -> list[str]:
    """The ids of the items that scoring under `cfg` cuts to fit `limit` tokens; DataError
    for one that cannot fit. Tokenizes only: a trainer can check its sets before the first
    step instead of failing on the batch that draws such an item."""
    fitted = fitted_cloze_requests if cfg.is_cloze else fitted_letter_prompts
    return fitted(items, cfg, tokenizer, limit)[1]


def warn_truncated(truncated: Sequence[str], n_items: int, limit: int | None, dataset: str | None = None) -> None:
    """One stderr line when items were cut to fit the context, once per dataset and process:
    a trainer's periodic evaluation scores the same set many times and should say it once."""
    key = (dataset, limit, tuple(truncated))
    if not truncated or key in _WARNED:
        return
    _WARNED.add(key)
    of = f" of {dataset}" if dataset else ""
    print(
        f"calm: warning: {len(truncated)} of {n_items} items{of} were longer than the model's context "
        f"({limit} tokens) and were cut from the left, as lm-evaluation-harness does",
        file=sys.stderr,
        flush=True,
    )


def _reduce(logprobs: torch.Tensor, rule: str) -> float:
    total = float(logprobs.double().sum())
    return total / len(logprobs) if rule == "cloze_norm" else total


def shared_prefix_logprobs(
    model: Any,
    groups: Sequence[tuple[list[int], list[list[int]]]],
    pad_id: int,
    device: torch.device,
    transform: LogitsTransform | None = None,
) -> list[list[torch.Tensor]]:
    """Like `continuation_logprobs`, but each context is run once for all its continuations.

    groups: [(context ids, [continuation ids, ...]), ...]. Pass 1 runs the left-padded
    contexts with a KV cache and keeps the last logits (they predict every
    continuation's first token); pass 2 runs all continuations (minus their last token)
    right-padded on a copy of their context's cache, with positions that carry on from
    the context. Same numbers as the straightforward path (tested to 1e-4), about
    (context + K * choice) / (K * (context + choice)) of the tokens.
    """
    from transformers import DynamicCache

    batch = left_pad_batch([ctx for ctx, _ in groups], pad_id, device)
    cache = DynamicCache(config=model.config)
    first = model(**batch, **{cache_kwarg(model): cache}, logits_to_keep=1, use_cache=True)
    first_logits = first.logits[:, -1].float()  # (G, V)
    first_logprobs = torch.log_softmax(transform(first_logits) if transform else first_logits, dim=-1)
    owners = [g for g, (_, conts) in enumerate(groups) for _ in conts]
    conts = [cont for _, cs in groups for cont in cs]
    rest = _continue_from_cache(model, cache, batch, owners, conts, pad_id, device, transform)
    out: list[list[torch.Tensor]] = [[] for _ in groups]
    for row, (owner, cont) in enumerate(zip(owners, conts, strict=True)):
        out[owner].append(torch.cat([first_logprobs[owner, cont[0]].reshape(1), rest[row]]))
    return out


def _continue_from_cache(
    model: Any,
    cache: Any,
    ctx_batch: dict[str, torch.Tensor],
    owners: list[int],
    conts: list[list[int]],
    pad_id: int,
    device: torch.device,
    transform: LogitsTransform | None = None,
) -> list[torch.Tensor]:
    """Per row, log p of its continuation tokens 2.. given its cached context, (c - 1,).

    Rows go in runs of similar length (`length_runs`), each on its own copy of its
    contexts' cache: answers of 1 to 15 tokens padded to the longest would double the work."""
    out = [torch.zeros(0, device=device) for _ in conts]
    todo = [r for r, cont in enumerate(conts) if len(cont) > 1]
    for run in length_runs([len(conts[r]) - 1 for r in todo]):
        rows = [todo[i] for i in run]
        index = torch.tensor([owners[r] for r in rows], device=device)
        width = max(len(conts[r]) for r in rows) - 1
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(conts[r]) - 1] = torch.tensor(conts[r][:-1])
            mask[i, : len(conts[r]) - 1] = 1
        ctx_mask = ctx_batch["attention_mask"][index]  # (R, L)
        positions = ctx_mask.sum(dim=1, keepdim=True) + torch.arange(width, device=device)[None, :]  # (R, W)
        inputs = dict(
            input_ids=ids.to(device),
            attention_mask=torch.cat([ctx_mask, mask.to(device)], dim=1),
            position_ids=positions,
            use_cache=True,
            **{cache_kwarg(model): select_cache(cache, index, model.config)},
        )
        logits = logits_at(model, inputs, mask.bool().to(device))  # (sum (c - 1), V): real positions only
        logprobs = torch.log_softmax(transform(logits) if transform else logits, dim=-1)
        targets = torch.tensor([t for r in rows for t in conts[r][1:]], device=device)
        picked = logprobs.gather(-1, targets[:, None])[:, 0]
        for r, lp in zip(rows, picked.split([len(conts[r]) - 1 for r in rows]), strict=True):
            out[r] = lp
    return out


def logits_at(model: Any, inputs: dict[str, Any], keep: torch.Tensor) -> torch.Tensor:
    """fp32 logits at the positions `keep` marks among the last keep.shape[1] of each row,
    in row order: (keep.sum(), V). Where the model allows (frozen_prefix.hidden_path),
    the LM head runs on those positions only. `inputs`: forward() keywords (a KV cache
    included, except for a FrozenPrefixModel)."""
    n_last = keep.shape[1]
    if hidden_path(model):
        hidden = last_hidden(model, inputs, n_last)  # (B, n_last, d)
        return head_on_distinct_rows(output_head(model), hidden[keep]).float()
    return model(**inputs, logits_to_keep=n_last).logits[keep].float()


def head_on_distinct_rows(head: Any, hidden: torch.Tensor) -> torch.Tensor:
    """head(hidden) for (N, d) states, running the head once per distinct row: the K
    options of a question predict their first token from the same prompt position, and
    the vocabulary projection is the largest matmul of a small model. Rows are merged
    only when bit-identical, so the logits are head(hidden) up to the last bit (a matmul's
    rounding depends on its row count); gradients reach the first row of each set, the
    same function of the weights as the others."""
    distinct, inverse = torch.unique(hidden.detach(), dim=0, return_inverse=True)
    if len(distinct) == len(hidden):
        return head(hidden)
    rows = torch.arange(len(hidden), device=hidden.device)
    first = torch.full((len(distinct),), len(hidden), device=hidden.device).scatter_reduce(0, inverse, rows, "amin")
    return head(hidden[first])[inverse]


def _cloze_scores(
    lm: Any,
    items: Sequence[MCItem],
    requests: list[list[tuple[list[int], list[int]]]],
    cfg: ScoringConfig,
    batch_size: int,
    progress: bool | ProgressFn,
    share_prefix: bool = True,
    transform: LogitsTransform | None = None,
) -> list[np.ndarray]:
    """Option scores for cloze rules from `cloze_requests`. `batch_size` counts sequences (continuations)."""
    runner = isinstance(lm.model, HiddenStateRunner)  # no KV cache, but it shares prefixes inside a batch
    if not share_prefix or runner or any(len({tuple(ctx) for ctx, _ in reqs}) > 1 for reqs in requests):
        return _cloze_scores_flat(lm, requests, cfg, batch_size, progress, transform, by_item=share_prefix)
    order = sorted(range(len(items)), key=lambda i: -len(requests[i][0][0]))
    rows = [np.zeros(item.n_choices) for item in items]
    update, close = progress_callback(progress, len(items), f"scoring ({cfg.name})")
    done, items_per_batch = 0, max(1, batch_size // max(it.n_choices for it in items))
    with torch.inference_mode():
        for batch in _batches(order, items_per_batch):
            groups = [(requests[i][0][0], [cont for _, cont in requests[i]]) for i in batch]
            scored = shared_prefix_logprobs(lm.model, groups, lm.tokenizer.pad_token_id, lm.device, transform)
            for i, per_choice in zip(batch, scored, strict=True):
                rows[i] = np.array([_reduce(lp, cfg.rule) for lp in per_choice])
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
) -> list[np.ndarray]:
    """The straightforward path: every (context + choice) sequence runs in full, longest
    first; `by_item` keeps each item's sequences together (items longest first), so a
    model that shares prefixes within a batch (a FrozenPrefixModel) finds them."""
    flat = [(i, k, ctx, cont) for i, reqs in enumerate(requests) for k, (ctx, cont) in enumerate(reqs)]
    longest = [max(len(ctx) + len(cont) for ctx, cont in reqs) for reqs in requests]
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
            scored = continuation_logprobs(lm.model, pairs, lm.tokenizer.pad_token_id, lm.device, transform)
            for r, logprobs in zip(batch, scored, strict=True):
                rows[flat[r][0]][flat[r][1]] = _reduce(logprobs, cfg.rule)
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
) -> list[np.ndarray]:
    """Option scores for the letter rule from `letter_prompt_ids`. `batch_size` counts prompts."""
    tokenizer = lm.tokenizer
    letters = letter_token_ids(tokenizer, max(it.n_choices for it in items), cfg)
    order = sorted(range(len(items)), key=lambda i: -len(prompts[i]))
    rows = [np.zeros(item.n_choices) for item in items]
    update, close = progress_callback(progress, len(items), f"scoring ({cfg.name})")
    done = 0
    with torch.inference_mode():
        for batch in _batches(order, batch_size):
            logits = last_logits(
                lm.model, left_pad_batch([prompts[i] for i in batch], tokenizer.pad_token_id, lm.device), 1
            )
            gathered = logits[:, -1, letters]  # (B, K_max)
            if head is not None:  # a head acting on tokens: each letter's own row of (l, tau)
                gathered = head.on_tokens(gathered, index=torch.tensor(letters, device=gathered.device))
            for row, i in enumerate(batch):
                rows[i] = gathered[row, : items[i].n_choices].double().cpu().numpy()
            done += len(batch)
            update(done, len(items))
    close()
    return rows


def apply_option_head(logits: np.ndarray, head: Any) -> np.ndarray:
    """`head.on_options` on option scores (N, K_max) already computed, float64 out: the
    same numbers as scoring with a head that acts on options, without another forward
    pass. The identity (a copy) without a head or for one that acts on tokens. The
    scores go to the head's device and back, so a head on the GPU works too."""
    if head is None:
        return logits.astype(np.float64)  # a copy, as with a head
    with torch.inference_mode():
        z = torch.from_numpy(logits).to(head.log_temperature.device)  # (N, K_max)
        return head.on_options(z).double().cpu().numpy().copy()


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
    """
    if not items:
        raise ValueError("Expected at least one item to score, but got none")
    if batch_size < 1:
        raise ValueError(f"Expected `batch_size` to be a positive int, but got {batch_size}")
    cfg = cfg or ScoringConfig()
    lm = _Scorer(model, tokenizer, next(model.parameters()).device)
    limit = context_limit(lm.model, lm.tokenizer)
    if cfg.is_cloze:
        requests, cut = fitted_cloze_requests(items, cfg, lm.tokenizer, limit)
        transform = head.on_tokens if head is not None else None
        rows = _cloze_scores(lm, items, requests, cfg, batch_size, progress, share_prefix, transform)
    else:
        prompts, cut = fitted_letter_prompts(items, cfg, lm.tokenizer, limit)
        rows = _letter_scores(lm, items, prompts, cfg, batch_size, progress, head)
    warn_truncated(cut, len(items), limit, dataset)
    logits = apply_option_head(pad_ragged(rows), head)
    return OptionScores(
        ids=[it.id for it in items],
        logits=logits,
        gold=np.array([it.answer for it in items], dtype=np.int64),
        scoring=cfg.to_dict(),
        model=model_info or {},
        truncated=len(cut),
        context_length=limit,
    )
