"""Differentiable option scores and the two CALM objectives, for training.

    z = option_logits(model, tokenizer, items, cfg, head)   # (B, K_max), -inf padding, grad flows
    lower = option_cross_entropy(z, gold)                   # L_tr: CE at the gold option
    upper = negative_entropy(z)                             # F: minus mean entropy of p(options | x)

The head says where it acts (`CalibrationHead.acts_on`, docs/architecture.md); both
transforms are applied to every batch and each is the identity unless the head acts there:
- `head.on_tokens`, inside the forward pass: under `letter` the answer-position logits
  of the letter tokens, each scaled by its own vocabulary row of (l, tau) (`index` = the
  letter ids); under `cloze` every choice token's log-probability is taken from
  softmax(z / tau + l) over the whole vocabulary at its position.
- `head.on_options`: the K option scores of either rule. A head that reads the
  question's hidden state (`reads_features`, the adaptive scope) gets h from the same
  forward pass (letter: the answer position; cloze: the context's last token), detached:
  the temperature is alpha's to set, not theta's (calibration.adaptive_head).
These are the same numbers `scoring.scorer.Scorer` computes at evaluation time (a test
checks it), with gradients; that includes items longer than the model's context, cut
from the left the same way (`scoring.truncation.fit_cloze_item`; one that cannot fit raises DataError).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from calm_core.calibration.head_base import Head
from calm_core.data.schema import MCItem
from calm_core.scoring.forward import head_inputs_if, left_pad_batch
from calm_core.scoring.logprobs import continuation_inputs, continuation_logprobs, last_logits
from calm_core.scoring.prompts import ScoringConfig, letter_token_ids
from calm_core.scoring.truncation import cloze_requests, context_limit, letter_prompt_ids


def _pad_rows(rows: Sequence[torch.Tensor]) -> torch.Tensor:
    """Stack option-score rows of different lengths into (B, K_max), -inf padded."""
    k_max = max(len(r) for r in rows)
    out = []
    for row in rows:
        pad = torch.full((k_max - len(row),), -torch.inf, dtype=row.dtype, device=row.device)
        out.append(torch.cat([row, pad]))
    return torch.stack(out)  # (B, K_max)


def _reads_features(head: Head | None) -> bool:
    return head is not None and head.reads_features


def _letter_logits(
    model: Any, tokenizer: Any, items: Sequence[MCItem], cfg: ScoringConfig, head: Head | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    device = next(model.parameters()).device
    prompts = letter_prompt_ids(items, cfg, tokenizer, context_limit(model, tokenizer))
    letters = torch.tensor(letter_token_ids(tokenizer, max(it.n_choices for it in items), cfg), device=device)
    with head_inputs_if(model, _reads_features(head)) as seen:
        z = last_logits(model, left_pad_batch(prompts, tokenizer.pad_token_id, device), 1)[:, -1]  # (B, V)
    states = seen[-1][:, -1].detach() if seen else None  # (B, d): the answer position's state
    gathered = z[:, letters]  # (B, K_max)
    if head is not None:
        gathered = head.on_tokens(gathered, index=letters)
    k = torch.tensor([it.n_choices for it in items], device=device)
    valid = torch.arange(len(letters), device=device)[None, :] < k[:, None]  # (B, K_max)
    return torch.where(valid, gathered, torch.full_like(gathered, -torch.inf)), states


def _cloze_logits(
    model: Any, tokenizer: Any, items: Sequence[MCItem], cfg: ScoringConfig, head: Head | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    device = next(model.parameters()).device
    requests = cloze_requests(items, cfg, tokenizer, context_limit(model, tokenizer))
    pairs = [pair for reqs in requests for pair in reqs]
    transform = head.on_tokens if head is not None else None
    kept: list[torch.Tensor] | None = [] if _reads_features(head) else None
    logprobs = continuation_logprobs(model, pairs, tokenizer.pad_token_id, device, transform=transform, states=kept)
    totals = [lp.sum() / (len(lp) if cfg.rule == "cloze_norm" else 1) for lp in logprobs]
    rows, firsts, start = [], [], 0
    for reqs in requests:
        rows.append(torch.stack(totals[start : start + len(reqs)]))
        firsts.append(start)  # every option of an item follows the same (cut) context
        start += len(reqs)
    states = torch.stack([kept[i][0] for i in firsts]).detach() if kept is not None else None  # (B, d)
    return _pad_rows(rows), states


def option_logits(
    model: Any, tokenizer: Any, items: Sequence[MCItem], cfg: ScoringConfig, head: Head | None = None
) -> torch.Tensor:
    """Calibrated option scores (B, K_max) with gradients to the model and the head."""
    scores, states = (_cloze_logits if cfg.is_cloze else _letter_logits)(model, tokenizer, items, cfg, head)
    return head.on_options(scores, features=states) if head is not None else scores


def forward_sequences(
    tokenizer: Any, items: Sequence[MCItem], cfg: ScoringConfig, max_length: int | None = None
) -> list[list[list[int]]]:
    """Per item, the token sequences `option_logits` runs through the model (one per
    choice for cloze rules, the prompt for `letter`): what a frozen-prefix cache holds.
    Pass the model's `scoring.truncation.context_limit` as `max_length`, so that long items are cut
    as `option_logits` cuts them; without it, their cached keys are never read."""
    if cfg.is_cloze:
        return [continuation_inputs(reqs) for reqs in cloze_requests(items, cfg, tokenizer, max_length)]
    return [[prompt] for prompt in letter_prompt_ids(items, cfg, tokenizer, max_length)]


def option_cross_entropy(z: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
    """Mean -log softmax(z)[gold]; -inf padding contributes nothing."""
    return torch.nn.functional.cross_entropy(z, gold)


def option_entropy(z: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of softmax(z) per row, (B,). log p is zeroed at padding *before*
    the product: masking p * log p afterwards would still give nan gradients."""
    logp = torch.log_softmax(z, dim=-1)  # (B, K)
    pad = torch.isneginf(z)
    logp = torch.where(pad, torch.zeros_like(logp), logp)
    return -(logp.exp() * logp).sum(dim=-1)


def negative_entropy(z: torch.Tensor) -> torch.Tensor:
    """F = - mean entropy: minimising it maximises predictive entropy on held-out inputs."""
    return -option_entropy(z).mean()
