"""Decoder layers called the way the model's own forward calls them: one attention mask
per attention type and one rotary embedding per layer type.

Why this exists: `FrozenPrefixModel` runs a slice of a model's layers itself (the bottom
ones once, the top ones every step), so it must reproduce what the model's forward does
around each layer. Families differ there: Llama has one mask and one rotary embedding;
Gemma 2 and 3, Qwen 2/3 (optionally) and Ministral alternate sliding-window and full
attention layers (`config.layer_types`, masks from `create_sliding_window_causal_mask`);
Gemma 3 has one rotary embedding per layer type (`rotary_emb(x, position_ids, layer_type)`);
Mistral and Phi-3 slide every layer when `config.sliding_window` is set. Reading those
facts from the config and the rotary module's signature keeps this generic: no branch
per family, and `scoring.fast_paths` proves the result against the model's own forward.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch

FULL, SLIDING = "full_attention", "sliding_attention"


def layer_types(config: Any, n_layers: int) -> list[str]:
    """The attention type of each decoder layer, as the model's forward picks its mask:
    `config.layer_types` where the config has them, else every layer sliding when
    `config.sliding_window` is set (Mistral, Phi-3), else every layer full (Llama)."""
    types = getattr(config, "layer_types", None)
    if types:
        return list(types)[:n_layers]
    return [SLIDING if getattr(config, "sliding_window", None) else FULL] * n_layers


def attention_masks(
    config: Any,
    hidden: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    cache: Any,
    types: dict[str, int],
) -> dict[str, Any]:
    """The model's own mask (eager, sdpa or flex: its choice) for each attention type in
    `types` (type -> the first layer index of that type that will run, which sizes the
    mask against that layer of `cache`). With a KV cache, `attention_mask` covers the
    cached positions and the new ones."""
    from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask

    makers = {FULL: create_causal_mask, SLIDING: create_sliding_window_causal_mask}
    masks: dict[str, Any] = {}
    for kind, layer_idx in types.items():
        if kind not in makers:
            raise ValueError(f"Expected attention types {sorted(makers)}, but the model has a layer of type {kind!r}")
        masks[kind] = makers[kind](
            config=config,
            inputs_embeds=hidden,
            attention_mask=attention_mask,
            cache=cache,
            position_ids=position_ids,
            layer_idx=layer_idx if cache is not None else None,
        )
    return masks


def position_embeddings(
    rotary: Any, hidden: torch.Tensor, position_ids: torch.Tensor, kinds: set[str]
) -> dict[str, Any]:
    """(cos, sin) for each layer type in `kinds`: one call per type where the rotary
    module takes a `layer_type` (Gemma 3: local and global bases), else one call shared."""
    if "layer_type" in inspect.signature(rotary.forward).parameters:
        return {kind: rotary(hidden, position_ids, layer_type=kind) for kind in kinds}
    shared = rotary(hidden, position_ids=position_ids)
    return {kind: shared for kind in kinds}


@dataclass(frozen=True)
class LayerRun:
    """What `run_layers` runs: (B, W, d) states with their attention mask and positions,
    the layers span[0]..span[1]-1, and a KV cache to continue (passed to the layers as
    `cache_keyword`, `forward.cache_kwarg`; None: no cache)."""

    hidden: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    span: tuple[int, int]
    cache: Any = None
    cache_keyword: str = "cache"


def run_layers(inner: Any, config: Any, run: LayerRun) -> torch.Tensor:
    """The decoder layers of `run.span` of `inner` (the base model: `layers`,
    `rotary_emb`) on `run.hidden`, each with its type's mask and rotary embedding; with a
    KV cache, the rows continue what those layers cached."""
    hidden, attention_mask, position_ids, cache = run.hidden, run.attention_mask, run.position_ids, run.cache
    start, stop = run.span
    extra = {} if cache is None else {run.cache_keyword: cache, "use_cache": True}
    types = layer_types(config, len(inner.layers))
    first: dict[str, int] = {}
    for i in range(start, stop):
        first.setdefault(types[i], i)
    masks = attention_masks(config, hidden, attention_mask, position_ids, cache, first)
    rotary = position_embeddings(inner.rotary_emb, hidden, position_ids, set(first))
    for i in range(start, stop):
        hidden = inner.layers[i](
            hidden,
            attention_mask=masks[types[i]],
            position_embeddings=rotary[types[i]],
            position_ids=position_ids,
            **extra,
        )
    return hidden
