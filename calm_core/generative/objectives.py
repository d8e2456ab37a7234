"""CALM's two objectives for free-form answers, over every answer token.

    reqs = gold_requests(items, tokenizer, prompt)              # (context ids, ' answer\\n' ids)
    z, targets = answer_logits(net, tokenizer, reqs, head)      # (sum c, V), calibrated, with grad
    lower = token_cross_entropy(z, targets)                     # L_tr: gold-answer tokens
    upper = -mean_token_entropy(z_heldout)                      # F: held-out continuations

The lower level is the cross-entropy of the gold answer (the item's first alias,
then the newline that ends an answer) under softmax(z / tau + l) at every answer
position: the head acts on tokens (`head.on_tokens`; a vocab head's rows cover the
whole vocabulary, a scalar head is one temperature). Free-form answers have no option
scores, so a head that acts on options is refused (`token_transform`). The upper level
is minus the mean entropy of that distribution over the positions of a held-out
prompt's continuation. Held-out labels are never used: the continuation is the base
model's own greedy answer (adapter off, no head), generated once per item and kept,
so the positions F looks at do not drift as theta moves.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from calm_core.calibration.head import CalibrationHead
from calm_core.data.schema import OpenItem
from calm_core.generative.sampling import GenerationConfig, generate_tokens, question_prompt
from calm_core.scoring.adapters import evaluating
from calm_core.scoring.forward import left_pad_batch
from calm_core.scoring.logprobs import needed_logits
from calm_core.scoring.prompts import split_context_continuation

Request = tuple[list[int], list[int]]  # (context ids, continuation ids)


def gold_requests(items: Sequence[OpenItem], tokenizer: Any, prompt: str) -> list[Request]:
    """(prompt ids, ' <first alias>\\n' ids) per item, tokenized jointly at the boundary."""
    return [
        split_context_continuation(tokenizer, question_prompt(it.question, tokenizer, prompt), f" {it.answers[0]}\n")
        for it in items
    ]


def token_transform(head: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    """A calibration head's `on_tokens`, or any other logits transform (z / T) as it is.
    Free-form answers have no option scores, so a head that acts on them is refused
    rather than silently left out."""
    if not isinstance(head, CalibrationHead):
        transform: Callable[[torch.Tensor], torch.Tensor] = head  # z / T, or another transform
        return transform
    if head.acts_on != "tokens":
        raise ValueError(
            f"Expected a head that acts on tokens for free-form answers (they have no option scores), "
            f"but this {head.scope}-scope head acts on {head.acts_on!r}: build it with "
            f"acts_on=acts_on_for(scope, 'openqa')"
        )
    return head.on_tokens


def answer_logits(
    net: Any, requests: Sequence[Request], pad_id: int, head: Any = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits predicting each continuation token, (sum c, V) fp32, through `head` if given
    (a CalibrationHead that acts on tokens, or a logits transform: `token_transform`), and
    the continuation ids (sum c,). Gradients flow to the model and the head."""
    device = next(net.parameters()).device
    inputs = [(context + cont)[:-1] for context, cont in requests]
    lengths = [len(cont) for _, cont in requests]
    logits = needed_logits(net, left_pad_batch(inputs, pad_id, device), lengths)  # (sum c, V)
    if head is not None:
        logits = token_transform(head)(logits)
    targets = torch.tensor([t for _, cont in requests for t in cont], device=logits.device)
    return logits, targets


def token_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean -log p(target token) over every answer token of the batch."""
    return torch.nn.functional.cross_entropy(logits, targets)


def mean_token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Mean entropy (nats) of softmax(logits) over positions: (sum c, V) -> ()."""
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(-1).mean()


def heldout_requests(
    model: Any, tokenizer: Any, items: Sequence[OpenItem], cfg: GenerationConfig, cache: dict[str, Request]
) -> list[Request]:
    """(prompt ids, base model's greedy continuation ids) per held-out item; computed
    once per item (adapter disabled, no head) and kept in `cache` (keyed by item id)."""
    missing = [it for it in items if it.id not in cache]
    if missing:
        with evaluating(model, adapter=False):
            continuations = generate_tokens(model, tokenizer, missing, cfg)
        for item, (prompt_ids, tokens) in zip(missing, continuations, strict=True):
            cache[item.id] = (prompt_ids, tokens)
    return [cache[it.id] for it in items]
