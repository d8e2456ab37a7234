"""Tiny random-weight models of every family a user may bring, built from configs (no download).

    folder = build_family("gemma3", tmp_path)     # a saved model + tokenizer, loadable by path
    FAMILIES                                      # the names, in the order the matrix runs them

Why here and not in each test: the family matrix (peft tests its tuners the same way)
needs one definition of "a tiny Gemma 3" that every path is checked on. Each model has
FAMILY_LAYERS decoder layers, enough that a frozen prefix exists below the LoRA layers
(`lora.layers` of 2 leaves 2 layers frozen): a 2-layer model never uses the prefix and
proves nothing about it. Gemma 3's layers alternate sliding and full attention with a
window shorter than the prompts, so a path that ignores the window differs.

Every model uses the embedded model's tokenizer, so prompts tokenize as in production.
Two variants of it cover what other families ship: `chat_template=False` (a base model
without a chat template) and `pad_token=False` (a tokenizer without a pad token).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch

FAMILY_LAYERS = 4
_WIDTH = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, max_position_embeddings=512)


def _llama_like(kind: str, **extra: Any) -> Callable[[int], Any]:
    def make(vocab: int, **ids: Any) -> Any:
        import transformers

        config_class = getattr(transformers, kind)
        return config_class(
            vocab_size=vocab, num_hidden_layers=FAMILY_LAYERS, num_key_value_heads=2, **_WIDTH, **{**ids, **extra}
        )

    return make


def _gpt2(vocab: int, **ids: Any) -> Any:
    from transformers import GPT2Config

    return GPT2Config(vocab_size=vocab, n_embd=64, n_layer=FAMILY_LAYERS, n_head=4, n_positions=512, **ids)


def _neox(vocab: int, **ids: Any) -> Any:
    from transformers import GPTNeoXConfig

    return GPTNeoXConfig(vocab_size=vocab, num_hidden_layers=FAMILY_LAYERS, **_WIDTH, rotary_pct=0.25, **ids)


def _opt(vocab: int, **ids: Any) -> Any:
    from transformers import OPTConfig

    return OPTConfig(
        vocab_size=vocab, hidden_size=64, ffn_dim=128, num_hidden_layers=FAMILY_LAYERS, num_attention_heads=4,
        max_position_embeddings=512, word_embed_proj_dim=64, **ids,
    )


CONFIGS: dict[str, Callable[..., Any]] = {
    "llama": _llama_like("LlamaConfig", tie_word_embeddings=True),
    "mistral": _llama_like("MistralConfig", sliding_window=None),
    "qwen2": _llama_like("Qwen2Config"),
    "qwen3": _llama_like("Qwen3Config", head_dim=16),
    "gemma2": _llama_like(
        "Gemma2Config", head_dim=16, sliding_window=8, final_logit_softcapping=30.0, attn_logit_softcapping=50.0
    ),
    "gemma3": _llama_like(
        "Gemma3TextConfig", head_dim=16, sliding_window=8, layer_types=None, sliding_window_pattern=2,
        rope_local_base_freq=10000.0,
    ),
    "phi3": _llama_like("Phi3Config"),
    "olmo2": _llama_like("Olmo2Config"),
    "gpt_neox": _neox,
    "gpt2": _gpt2,
    "opt": _opt,
}
FAMILIES = tuple(CONFIGS)


def embedded_tokenizer(chat_template: bool = True, pad_token: bool = True) -> Any:
    """The embedded model's tokenizer, optionally without its chat template or pad token."""
    from transformers import AutoTokenizer

    from calm_core.scoring.models import embedded_model_dir

    tokenizer = AutoTokenizer.from_pretrained(embedded_model_dir())
    if not chat_template:
        tokenizer.chat_template = None
    if not pad_token:
        tokenizer.pad_token = None
    return tokenizer


def build_family(
    family: str, target: Path, seed: int = 0, chat_template: bool = True, pad_token: bool = True
) -> Path:
    """Save a tiny random `family` model with the embedded tokenizer in `target`; returns it."""
    tokenizer = embedded_tokenizer(chat_template=chat_template, pad_token=pad_token)
    ids = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id}
    if pad_token:
        ids["pad_token_id"] = tokenizer.pad_token_id
    config = CONFIGS[family](len(tokenizer), **ids)
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    target.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    return target
