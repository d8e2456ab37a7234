"""Option scores from a model behind an OpenAI-compatible `/v1/completions` endpoint (vLLM,
llama.cpp's server, any server that returns prompt log-probabilities), as
lm-evaluation-harness's `local-completions` reads them:

    served = load_served("openai:http://127.0.0.1:8000/v1", tokenizer="Qwen/Qwen2.5-7B")
    scores = ServedScorer(served).score(items, ScoringConfig(rule="cloze"))   # OptionScores

Each scored sequence is sent as token ids with `echo: true, logprobs: 1, max_tokens: 1`:
the server returns the log-probability of every prompt token given the ones before it,
and a continuation's are the positions after its context (the harness cuts
`token_logprobs[ctxlen:-1]`; the one generated token is dropped). Sending token ids, not
text, keeps the split between question and option exactly the studio's
(`prompts.split_context_continuation`) and keeps the server from adding its own special
tokens, so the numbers are those of `Scorer` on the same weights.

Under the letter rule option k's score is the log-probability of letter k's token at the
answer position, read the same way (the prompt followed by that letter), so any server
that can score cloze can score letters. These are log-softmax values, the logits less a
constant per question: every softmax over a question's options, and temperature
scaling, are unchanged.

The tokenizer is local (the served model's id or `--tokenizer`): the prompts, the chat
template and the letters' token ids are built here, as for a loaded model. A served model
has no hidden states to read, so features (ATS, thermometers, `--features`) and heads
are not available.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Sequence
from urllib.parse import urlsplit

import numpy as np

from calm_core.data.schema import MCItem
from calm_core.scoring.options import OptionScores, pad_ragged
from calm_core.scoring.progress import ProgressFn, progress_callback
from calm_core.scoring.prompts import ScoringConfig, letter_token_ids
from calm_core.scoring.served_client import CompletionsClient, ServedModelError
from calm_core.scoring.truncation import context_limit, fitted_cloze_requests, fitted_letter_prompts, warn_truncated

PREFIX = "openai:"  # `--model openai:URL[#served-name]`
NO_PROMPT_LOGPROBS = (
    "does not return prompt log-probabilities (`echo: true` with `logprobs`), which scoring reads. vLLM, "
    "llama.cpp's server (`--model` a GGUF, OpenAI routes) and OpenAI's own legacy completions for "
    "babbage-002 / davinci-002 return them; chat-only endpoints and TGI's /v1/completions do not"
)


@dataclass
class ServedModel:
    """A model behind a completions endpoint: its client, the name its requests carry, a
    local tokenizer, its context length where the server says it, and what is recorded."""

    client: CompletionsClient
    name: str  # the served model's id, sent as `model` in every request
    tokenizer: Any
    context_length: int | None = None
    info: dict[str, Any] = field(default_factory=dict)


def is_served(name: str | None) -> bool:
    """Whether a `--model` value names a served model (`openai:URL`)."""
    return bool(name) and str(name).startswith(PREFIX)


def split_served(name: str) -> tuple[str, str | None]:
    """(base URL, served model name or None) of `openai:URL[#name]`; the fragment is never sent."""
    url, _, wanted = name.removeprefix(PREFIX).partition("#")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ServedModelError(f"Expected `openai:http(s)://host:port/v1`, but got {name!r}")
    return url.rstrip("/").removesuffix("/completions"), wanted or None


def load_served(name: str, tokenizer: str | None = None, timeout: float = 120.0) -> ServedModel:
    """The served model of `openai:URL[#served-name]`: the server's model list read once
    (the name to send, its context length), and the tokenizer of `tokenizer` (default: the
    served id, a local folder or hub id as the server was started with)."""
    from calm_core.scoring.models import load_tokenizer

    url, wanted = split_served(name)
    client = CompletionsClient(url, timeout=timeout, api_key=os.environ.get("OPENAI_API_KEY"))
    served = client.served_models()
    chosen = [row for row in served if wanted is None or row[0] == wanted]
    if len(chosen) != 1:
        listed = ", ".join(model for model, _ in served) or "none"
        raise ServedModelError(
            f"Expected one served model at {url} to score, but it serves: {listed}; name one as {PREFIX}{url}#NAME"
        )
    model, length = chosen[0]
    source = tokenizer or model
    try:
        tok = load_tokenizer(source)
    except Exception as exc:  # noqa: BLE001 (any loader failure: the way out is the same flag)
        raise ServedModelError(
            f"Expected a tokenizer for the served model {model!r}, but {source!r} does not load ({exc}): "
            "give the served model's tokenizer with --tokenizer (a local folder or a hub id)"
        ) from None
    info = {
        "name": name,
        "kind": "served",
        "served_model": model,
        "url": url,
        "tokenizer": source,
        "device": "server",
        "dtype": "server's",
        "context_length": length,
    }
    return ServedModel(client, model, tok, length or context_limit(None, tok), info)


class ServedScorer:
    """Option scores of a served model: `Scorer.score`'s results from the server's
    prompt log-probabilities, `batch_size` sequences per request."""

    def __init__(self, served: ServedModel, *, batch_size: int = 32, progress: bool | ProgressFn = True) -> None:
        if batch_size < 1:
            raise ValueError(f"Expected `batch_size` to be a positive int, but got {batch_size}")
        self.served, self.batch_size, self.progress = served, batch_size, progress

    def score(
        self,
        items: Sequence[MCItem],
        rule: ScoringConfig | None = None,
        head: Any = None,
        capture: Any = None,
        dataset: str | None = None,
    ) -> OptionScores:
        """Every option of every item under `rule`; `capture` is ignored (no hidden states
        come back: the scores carry no features). A head cannot act inside a server."""
        if not items:
            raise ValueError("Expected at least one item to score, but got none")
        if head is not None:
            raise ServedModelError("Expected no calibration head: a served model's forward pass is the server's")
        rule = rule or ScoringConfig()
        pairs, cut = self._pairs(items, rule)
        logprobs = self.continuation_logprobs([pair for row in pairs for pair in row], rule.name)
        rows, start = [], 0
        for row in pairs:
            rows.append(np.array([_reduce(lp, rule.rule) for lp in logprobs[start : start + len(row)]]))
            start += len(row)
        warn_truncated(cut, len(items), self.served.context_length, dataset)
        return OptionScores(
            ids=[it.id for it in items],
            logits=pad_ragged(rows),
            gold=np.array([it.answer for it in items], dtype=np.int64),
            scoring=rule.to_dict(),
            model={k: self.served.info[k] for k in ("name", "kind", "served_model", "url")},
            truncated=len(cut),
            context_length=self.served.context_length,
        )

    def _pairs(
        self, items: Sequence[MCItem], rule: ScoringConfig
    ) -> tuple[list[list[tuple[list[int], list[int]]]], list[str]]:
        """Per item, per option: (context ids, continuation ids); a letter is a one-token continuation."""
        tok, limit = self.served.tokenizer, self.served.context_length
        if rule.is_cloze:
            return fitted_cloze_requests(items, rule, tok, limit)
        prompts, cut = fitted_letter_prompts(items, rule, tok, None if limit is None else limit - 1)
        letters = letter_token_ids(tok, max(it.n_choices for it in items), rule)
        return [[(p, [letters[k]]) for k in range(it.n_choices)] for p, it in zip(prompts, items, strict=True)], cut

    def continuation_logprobs(self, pairs: list[tuple[list[int], list[int]]], label: str = "") -> list[list[float]]:
        """Per (context, continuation): log p of each continuation token, from `echo`ed prompts."""
        out: list[list[float]] = []
        update, close = progress_callback(self.progress, len(pairs), f"scoring ({label}, served)")
        for start in range(0, len(pairs), self.batch_size):
            batch = pairs[start : start + self.batch_size]
            echoed = echo_logprobs(self.served, [context + cont for context, cont in batch])
            out += [
                lp[len(context) : len(context) + len(cont)] for lp, (context, cont) in zip(echoed, batch, strict=True)
            ]
            update(len(out), len(pairs))
        close()
        return out


def echo_request(model: str, prompts: list[list[int]]) -> dict[str, Any]:
    """The request that returns every prompt token's log-probability: the harness's
    `local-completions` loglikelihood request (one token generated, then ignored)."""
    return {"model": model, "prompt": prompts, "echo": True, "logprobs": 1, "max_tokens": 1, "temperature": 0}


def echo_logprobs(served: ServedModel, prompts: list[list[int]]) -> list[list[float]]:
    """Per prompt, log p(token t | tokens before t) for t = 1..len - 1 at its own index
    (index 0, which nothing predicts, is 0.0): one request for the whole batch."""
    answer = served.client.complete(echo_request(served.name, prompts))
    choices = sorted(answer["choices"], key=lambda c: c.get("index", 0))
    if len(choices) != len(prompts):
        raise ServedModelError(f"Expected {len(prompts)} choices, one per prompt, but the server gave {len(choices)}")
    return [_prompt_logprobs(served, choice, len(ids)) for choice, ids in zip(choices, prompts, strict=True)]


def _prompt_logprobs(served: ServedModel, choice: dict[str, Any], length: int) -> list[float]:
    """A choice's first `length` token log-probabilities, or the error that names what is missing."""
    values = (choice.get("logprobs") or {}).get("token_logprobs")
    if not isinstance(values, list) or len(values) < length or any(v is None for v in values[1:length]):
        raise ServedModelError(f"{served.info['url']} (model {served.name!r}) {NO_PROMPT_LOGPROBS}")
    return [0.0] + [float(v) for v in values[1:length]]


def scorer_of(lm: Any, **settings: Any) -> Any:
    """The scorer of a loaded or a served model, with the same `score` (`Scorer.of`'s settings)."""
    if isinstance(lm, ServedModel):
        return ServedScorer(lm, batch_size=settings.get("batch_size", 32), progress=settings.get("progress", True))
    from calm_core.scoring.scorer import Scorer

    return Scorer.of(lm, **settings)


def _reduce(logprobs: list[float], rule: str) -> float:
    total = float(np.sum(np.asarray(logprobs, dtype=np.float64)))
    return total / len(logprobs) if rule == "cloze_norm" else total
