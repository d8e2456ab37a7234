"""Log-probabilities from a forward pass: fp32 logits at the positions a caller needs, and
per-token log p(continuation | context) for (context, continuation) pairs.

Two ways to score continuations, with the same numbers (tested to 1e-4): each sequence
in full (`continuation_logprobs`), or each context once with its KV cache shared by all
its continuations (`shared_prefix_logprobs`). Where the model allows (`forward.hidden_path`)
the LM head runs only on the positions needed (`logits_at`), once per distinct row
(`head_on_distinct_rows`). Option scoring (`options`) and the training objectives
(`calm_core.training.objectives`, `calm_core.generative.objectives`) read the model
through these; the batch and cache mechanics are `forward`'s.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from calm_core.scoring.forward import (
    cache_kwarg,
    hidden_path,
    last_hidden,
    left_pad_batch,
    length_runs,
    output_head,
    select_cache,
)

LogitsTransform = Callable[[torch.Tensor], torch.Tensor]  # (..., V) -> (..., V), e.g. a calibration head


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
    return [(context + cont)[:-1] for context, cont in contexts_and_conts]


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

    batch = left_pad_batch([context for context, _ in groups], pad_id, device)
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
