"""The forward pass that scoring and frozen-prefix caching share: left-padded batches
with explicit positions (a row computes what it would alone), KV-cache plumbing, runs of
similar length, and the "hidden path" (final-norm states + LM head on chosen positions,
with the model's own final soft-cap). Whether a model gets the hidden path and feature
capture is measured, never read off its shape: `scoring.fast_paths` measures it before a
model runs and keeps the check on the model (`scoring.path_checks`), which is all this
module reads; a model nobody measured runs the plain forward.

It sits below both `logprobs` (the log-probabilities option scores are made of) and
`frozen_prefix` (cached bottom layers): a `HiddenStateRunner` (what FrozenPrefixModel is)
is recognised by its shape, so neither module imports the other's internals.
"""

from __future__ import annotations

import inspect
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Iterator, Protocol, Sequence, runtime_checkable

import torch

from calm_core.scoring.path_checks import NOT_MEASURED, FastPathSupport, kept_support

_PARTS = ("embed_tokens", "layers", "rotary_emb", "norm")
STRUCTURE = "model.layers, model.embed_tokens, model.rotary_emb, model.norm and lm_head"  # what the fast paths call


@runtime_checkable
class HiddenStateRunner(Protocol):
    """A model wrapper that computes final-norm hidden states itself (frozen_prefix.
    FrozenPrefixModel): `model` is the wrapped causal LM, `last_hidden` runs the rest."""

    model: Any

    def last_hidden(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor, n_last: int
    ) -> torch.Tensor: ...


def left_pad_batch(sequences: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> dict[str, torch.Tensor]:
    """Left-padded input_ids, attention_mask and position ids that skip the padding.

    Explicit position ids make a left-padded row compute exactly what it would alone.
    """
    width = max(len(s) for s in sequences)
    input_ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, seq in enumerate(sequences):
        input_ids[row, width - len(seq) :] = torch.tensor(seq, dtype=torch.long)
        mask[row, width - len(seq) :] = 1
    return {
        "input_ids": input_ids.to(device),
        "attention_mask": mask.to(device),
        "position_ids": left_pad_positions(mask).to(device),
    }


def left_pad_positions(mask: torch.Tensor) -> torch.Tensor:
    """Position ids (B, W) of a left-padded batch from its mask: 0, 1, ... from each row's
    first real token (padding gets 0; the mask hides it)."""
    return (mask.cumsum(dim=1) - 1).clamp(min=0)


def cache_kwarg(model: Any) -> str:
    """The forward() keyword for a KV cache: `cache` from transformers 5.2x on,
    `past_key_values` before (deprecated, removed in 5.40)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(type(base).forward).parameters else "past_key_values"


def select_cache(cache: Any, index: torch.Tensor, config: Any) -> Any:
    """A new KV cache holding rows `index` of `cache` (a row may repeat): one context's
    keys and values for each of its continuations. Differentiable: indexing, not copy_.
    Sliding-window layers carry their count of tokens seen: rebuilt from the kept keys
    alone, the count would be the window's, and the mask would slide over the wrong keys
    (prefix sharing on Gemma 2/3 differed by 8e-3 until the probe caught it)."""
    from transformers import DynamicCache

    data = [(k[index], v[index]) if k is not None else (None, None) for k, v, *_ in cache]
    selected = DynamicCache(ddp_cache_data=data, config=config)
    for source, layer in zip(cache.layers, selected.layers, strict=True):
        if hasattr(source, "cumulative_length"):  # a sliding-window layer keeps only its last window - 1 keys:
            layer.cumulative_length = source.cumulative_length  # how many it has seen sizes its mask (Gemma 2/3)
    return selected


RUN_COST = 16  # token rows: what one more batched pass costs beyond its tokens (calls, small matmuls)


def length_runs(lengths: Sequence[int], run_cost: int = RUN_COST) -> list[list[int]]:
    """Indices split into runs of similar length, each padded to its longest: sorted by
    length, the cut points minimise sum (rows x longest) + run_cost per run (dynamic
    programming; O(n^2) for n rows of one batch)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    n = len(order)
    best = [0] * (n + 1)  # best[j]: cost of order[:j]
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        longest = lengths[order[j - 1]]
        best[j], cut[j] = min((best[i] + (j - i) * longest + run_cost, i) for i in range(j))
    runs: list[list[int]] = []
    j = n
    while j > 0:
        runs.append(order[cut[j] : j])
        j = cut[j]
    return runs[::-1]


def causal_lm(model: Any) -> Any:
    """The transformers CausalLM inside a PEFT wrapper (or the model itself)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def supports_frozen_prefix(model: Any) -> bool:
    """Whether the model has the parts a FrozenPrefixModel and the hidden path call
    (`model.model.layers`, `embed_tokens`, `rotary_emb`, `norm`, `lm_head`): the shape
    needed to try them, never proof that they compute the model's forward. That is
    `scoring.fast_paths`' measurement."""
    causal = causal_lm(model)
    inner = getattr(causal, "model", None)
    return inner is not None and hasattr(causal, "lm_head") and all(hasattr(inner, p) for p in _PARTS)


def hidden_path(model: Any) -> bool:
    """True when `last_hidden` + `output_head` reproduce the model's logits, as measured
    once for the model (`scoring.fast_paths`) on a decoder with the parts to try it (or a
    FrozenPrefixModel over one, whose own equality is the frozen prefix's check)."""
    base = model.model if isinstance(model, HiddenStateRunner) else model
    return supports_frozen_prefix(base) and measured(base).hidden_path.on


def measured(model: Any) -> FastPathSupport:
    """The scoring checks kept on `model`'s CausalLM by whatever measured them
    (`scoring.fast_paths`), every path off where nothing has: unproven, a path is not used."""
    return kept_support(causal_lm(model)) or NOT_MEASURED


def last_hidden(model: Any, inputs: dict[str, Any], n_last: int) -> torch.Tensor:
    """Final-norm hidden states (B, n_last, d): what the LM head would turn into the last
    n_last positions' logits. `inputs` are forward() keywords (input_ids, attention_mask,
    position_ids, use_cache, a KV cache); adapters stay active."""
    if isinstance(model, HiddenStateRunner):
        if inputs.get("use_cache"):
            raise ValueError(
                "FrozenPrefixModel takes no KV cache: it shares prefixes itself (scoring passes it whole sequences)"
            )
        return model.last_hidden(inputs["input_ids"], inputs["attention_mask"], inputs["position_ids"], n_last)
    states: torch.Tensor = causal_lm(model).model(**inputs).last_hidden_state[:, -n_last:]
    return states


def output_head(model: Any) -> Any:
    """What turns final-norm states into the model's logits: the LM head, followed by the
    model's own final logit soft-cap where its config has one (Gemma 2 and 3), so that a
    temperature calibrated on these logits is one on the model's own."""
    base = model.model if isinstance(model, HiddenStateRunner) else model
    lm = causal_lm(base)
    cap = getattr(lm.config, "final_logit_softcapping", None)
    return SoftCappedHead(lm.lm_head, float(cap)) if cap else lm.lm_head


class SoftCappedHead(torch.nn.Module):
    """lm_head, then cap * tanh(logits / cap): the soft-cap of Gemma's CausalLM forward."""

    def __init__(self, head: torch.nn.Module, cap: float) -> None:
        super().__init__()
        self.head = head
        self.cap = cap

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.head(hidden) / self.cap) * self.cap


@contextmanager
def head_inputs(model: Any) -> Iterator[list[torch.Tensor]]:
    """Record what the LM head reads in the forward passes run inside the block: one
    (B, n_last, d) tensor per call, the final-norm hidden states already cut to
    `logits_to_keep`. A forward pre-hook only reads its input, so the logits are those of
    the same call without it, to the last bit (`head_input_hook`): feature capture
    (`logprobs.logits_and_states_at`, `scoring.features`) without a second pass. Where
    the measurement says the head's input is not the final-norm state, or nothing has
    measured it (`measured(model).feature_capture`), the base model's `last_hidden_state` is
    recorded instead, cut the same way (a FrozenPrefixModel computes that state itself
    and hands it to the head, so it keeps the hook)."""
    base = model.model if isinstance(model, HiddenStateRunner) else model
    if isinstance(model, HiddenStateRunner) or measured(base).feature_capture.on:
        with head_input_hook(model) as seen:
            yield seen
        return
    with _final_state_hook(base) as seen:
        yield seen


def head_inputs_if(model: Any, wanted: bool) -> AbstractContextManager[list[torch.Tensor]]:
    """`head_inputs(model)` when `wanted`, else a block that records nothing (an empty list)."""
    return head_inputs(model) if wanted else nullcontext([])


@contextmanager
def head_input_hook(model: Any) -> Iterator[list[torch.Tensor]]:
    """A forward pre-hook on the LM head recording its input, one tensor per call."""
    base = model.model if isinstance(model, HiddenStateRunner) else model
    lm = causal_lm(base)
    head = lm.get_output_embeddings() if hasattr(lm, "get_output_embeddings") else lm.lm_head
    seen: list[torch.Tensor] = []
    handle = head.register_forward_pre_hook(lambda _module, args: seen.append(args[0]))
    try:
        yield seen
    finally:
        handle.remove()


@contextmanager
def _final_state_hook(model: Any) -> Iterator[list[torch.Tensor]]:
    """The base model's `last_hidden_state` per call, cut to the call's `logits_to_keep`
    (read from the CausalLM's keywords): feature capture's fallback."""
    lm = causal_lm(model)
    keep: list[int] = []
    seen: list[torch.Tensor] = []

    def read_keep(_module: Any, _args: Any, kwargs: dict[str, Any]) -> None:
        keep.append(int(kwargs.get("logits_to_keep") or 0))

    def record(_module: Any, _args: Any, output: Any) -> None:
        states = output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0]
        n = keep[-1] if keep else 0
        seen.append(states[:, -n:] if n else states)

    handles = [lm.register_forward_pre_hook(read_keep, with_kwargs=True), lm.model.register_forward_hook(record)]
    try:
        yield seen
    finally:
        for handle in handles:
            handle.remove()
