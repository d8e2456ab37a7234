"""Log-probabilities from a forward pass: fp32 logits at the positions a caller needs, and
per-token log p(continuation | context) for (context, continuation) pairs.

Two ways to score continuations, with the same numbers (tested to 1e-4): each sequence
in full (`continuation_logprobs`), or each context once with its KV cache shared by all
its continuations (`shared_prefix_logprobs`). Where the model allows (`forward.hidden_path`)
the LM head runs only on the positions needed (`logits_at`), once per distinct row
(`head_on_distinct_rows`). Given a `states` list, the scoring functions also hand back
the final-norm states the head read at those positions, from the same pass
(`logits_and_states_at`): the features a calibrator reads (`scoring.features`).
Option scoring (`options`) and the training objectives
(`calm_core.training.objectives`, `calm_core.generative.objectives`) read the model
through these; the batch and cache mechanics are `forward`'s.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

import torch

from calm_core.scoring.forward import (
    cache_kwarg,
    head_inputs_if,
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
    logits: torch.Tensor = out.logits.float()
    return logits


def continuation_logprobs(
    model: Any,
    contexts_and_conts: Sequence[tuple[list[int], list[int]]],
    pad_id: int,
    device: torch.device,
    transform: LogitsTransform | None = None,
    states: list[torch.Tensor] | None = None,
) -> list[torch.Tensor]:
    """Per-token log p(continuation token | prefix) for each (context, continuation) pair.

    The model reads (context + continuation)[:-1]; with left padding the logits that
    predict a continuation of length c are the row's last c positions. `states` (a list)
    receives, per pair, the final-norm states at those positions, (c, d): the first is
    the context's last token.
    """
    lengths = [len(cont) for _, cont in contexts_and_conts]
    batch = left_pad_batch(continuation_inputs(contexts_and_conts), pad_id, device)
    if states is None:
        logits = needed_logits(model, batch, lengths)
    else:
        logits, kept = logits_and_states_at(model, {**batch, "use_cache": False}, _last_positions(batch, lengths))
        states.extend(kept.split(lengths))
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
    return logits_at(model, {**batch, "use_cache": False}, _last_positions(batch, lengths))  # (sum c, V)


def _last_positions(batch: dict[str, torch.Tensor], lengths: Sequence[int]) -> torch.Tensor:
    """(B, max(lengths)) mask of each left-padded row r's last lengths[r] positions."""
    longest = max(lengths)
    device = batch["input_ids"].device
    return torch.arange(longest, device=device)[None, :] >= (longest - torch.tensor(lengths, device=device)[:, None])


def shared_prefix_logprobs(
    model: Any,
    groups: Sequence[tuple[list[int], list[list[int]]]],
    pad_id: int,
    device: torch.device,
    transform: LogitsTransform | None = None,
    states: list[list[torch.Tensor]] | None = None,
) -> list[list[torch.Tensor]]:
    """Like `continuation_logprobs`, but each context is run once for all its continuations.

    groups: [(context ids, [continuation ids, ...]), ...]. Pass 1 runs the left-padded
    contexts with a KV cache and keeps the last logits (they predict every
    continuation's first token); pass 2 runs all continuations (minus their last token)
    right-padded on a copy of their context's cache, with positions that carry on from
    the context. Same numbers as the straightforward path (tested to 1e-4), about
    (context + K * choice) / (K * (context + choice)) of the tokens.
    `states` (a list) receives, per group, per continuation, the final-norm states at the
    positions that predict its tokens, (c, d), as `continuation_logprobs` gives them: the
    context's last token (pass 1, read by a hook on the head: `forward.head_inputs`), then
    the continuation's own tokens but its last (pass 2).
    """
    from transformers import DynamicCache

    batch = left_pad_batch([context for context, _ in groups], pad_id, device)
    cache = DynamicCache(config=model.config)
    with head_inputs_if(model, states is not None) as seen:
        first = model(**batch, **{cache_kwarg(model): cache}, logits_to_keep=1, use_cache=True)
    first_logits = first.logits[:, -1].float()  # (G, V)
    first_logprobs = torch.log_softmax(transform(first_logits) if transform else first_logits, dim=-1)
    owners = [g for g, (_, conts) in enumerate(groups) for _ in conts]
    conts = [cont for _, cs in groups for cont in cs]
    context_states = seen[-1][:, -1] if states is not None else None  # (G, d)
    rest_states = None if context_states is None else [context_states[:0]] * len(conts)  # (0, d) until filled
    rest = _continue_from_cache(model, _Contexts(cache, batch, owners), conts, pad_id, transform, rest_states)
    out: list[list[torch.Tensor]] = [[] for _ in groups]
    for row, (owner, cont) in enumerate(zip(owners, conts, strict=True)):
        out[owner].append(torch.cat([first_logprobs[owner, cont[0]].reshape(1), rest[row]]))
    if states is not None and context_states is not None and rest_states is not None:
        states.extend(_states_by_group(len(groups), owners, context_states, rest_states))
    return out


def _states_by_group(
    n_groups: int, owners: list[int], context_states: torch.Tensor, rest_states: list[torch.Tensor]
) -> list[list[torch.Tensor]]:
    """Per group, per continuation: its context's last state, then its own, (c, d)."""
    per_group: list[list[torch.Tensor]] = [[] for _ in range(n_groups)]
    for row, owner in enumerate(owners):
        per_group[owner].append(torch.cat([context_states[owner, None], rest_states[row]]))
    return per_group


class _Contexts(NamedTuple):
    """The contexts' pass that continuations go on from: its KV cache, its left-padded
    batch (the mask and the device), and, per continuation, the context it continues."""

    cache: Any
    batch: dict[str, torch.Tensor]
    owners: list[int]


def _continue_from_cache(
    model: Any,
    contexts: _Contexts,
    conts: list[list[int]],
    pad_id: int,
    transform: LogitsTransform | None = None,
    states: list[torch.Tensor] | None = None,
) -> list[torch.Tensor]:
    """Per row, log p of its continuation tokens 2.. given its cached context, (c - 1,).
    `states` (one entry per row, (0, d) for a row of one token) receives each row's
    final-norm states at those positions, (c - 1, d).

    Rows go in runs of similar length (`length_runs`), each on its own copy of its
    contexts' cache: answers of 1 to 15 tokens padded to the longest would double the work."""
    cache, ctx_batch, owners = contexts
    device = ctx_batch["attention_mask"].device
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
        keep = mask.bool().to(device)  # real positions only
        if states is None:
            logits = logits_at(model, inputs, keep)  # (sum (c - 1), V)
        else:
            logits, kept = logits_and_states_at(model, inputs, keep)
            for r, row_states in zip(rows, kept.split([len(conts[r]) - 1 for r in rows]), strict=True):
                states[r] = row_states
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
    return _head_at(model, inputs, keep, capture=False)[0]


def logits_and_states_at(model: Any, inputs: dict[str, Any], keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`logits_at`, and the final-norm states the LM head turned into them, (keep.sum(), d)
    in the same order: from the same pass, so the logits are those of `logits_at` to the
    last bit (the hidden path computes the states anyway; otherwise a hook reads the
    head's input, `forward.head_inputs`)."""
    logits, states = _head_at(model, inputs, keep, capture=True)
    assert states is not None  # capture=True always gives them
    return logits, states


def _head_at(
    model: Any, inputs: dict[str, Any], keep: torch.Tensor, capture: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(logits, states or None) at the `keep` positions: the one body of `logits_at` and
    `logits_and_states_at`, so both compute the logits by the same operations."""
    n_last = keep.shape[1]
    if hidden_path(model):
        states = last_hidden(model, inputs, n_last)[keep]  # (N, d)
        return head_on_distinct_rows(output_head(model), states).float(), states
    with head_inputs_if(model, capture) as seen:
        logits = model(**inputs, logits_to_keep=n_last).logits[keep].float()
    return logits, seen[-1][keep] if capture else None


def head_on_distinct_rows(head: LogitsTransform, hidden: torch.Tensor) -> torch.Tensor:
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
