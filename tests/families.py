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


# --- the matrix's cases, its known breaks, and the record of what passed ------------------------

# case -> (family, build_family keywords): every family, and the tokenizers other families ship
CASES: dict[str, tuple[str, dict[str, bool]]] = {
    **{family: (family, {}) for family in FAMILIES},
    "llama-nopad": ("llama", {"pad_token": False}),
    "gpt2-bare": ("gpt2", {"pad_token": False, "chat_template": False}),
}

# (case, column) -> why it fails today, marked xfail(strict=False) so that the cell says so
# the moment it passes again. Empty since the Gemma 2 and 3 fixes of the fast-path probe
# (the frozen prefix's per-layer-type rotary and masks, sliding-window KV caches).
KNOWN_BREAKS: dict[tuple[str, str], str] = {}  # (case, column) -> why it fails today: none since issue 39


def case_marks(case: str, column: str) -> list[Any]:
    """pytest marks of one cell: xfail(strict=False) with its reason where KNOWN_BREAKS has it."""
    import pytest

    reason = KNOWN_BREAKS.get((case, column))
    return [pytest.mark.xfail(strict=False, reason=reason)] if reason else []


def build_case(case: str, target: Path) -> Path:
    """`build_family` for a case of CASES (a family, or one with a tokenizer variant)."""
    family, variant = CASES[case]
    return build_family(family, target, **variant)


# test function -> the column it fills in the table (its parameter appended: `scoring cloze`)
COLUMNS = {
    "test_lora_targets_are_found_in_the_familys_own_layers": "LoRA targets",
    "test_scores_equal_a_plain_forward": "scoring",
    "test_features_equal_output_hidden_states": "features",
    "test_ts_and_ats_fit_on_the_familys_scores": "TS, ATS",
    "test_calm_trains_under_the_scope": "CALM",
    "test_every_export_variant_loads_without_calm_core": "exports",
}


def cell_of(item: Any) -> tuple[str, str] | None:
    """(case, column) of a collected test item of the matrix, or None for any other test."""
    name = getattr(item, "originalname", None)
    params = getattr(getattr(item, "callspec", None), "params", {})
    if name not in COLUMNS or not params:
        return None
    case = params.get("case") or params.get("family")
    extra = params.get("rule") or params.get("scope") or ""
    return case, f"{COLUMNS[name]} {extra}".strip()


def outcome_word(report: Any) -> str:
    """pass, FAIL, xfail (a known break, with its reason in the table's notes) or skip."""
    if hasattr(report, "wasxfail"):
        return "xpass" if report.passed else "xfail"
    return {"passed": "pass", "failed": "FAIL", "skipped": "skip"}[report.outcome]


def matrix_markdown(cells: dict[tuple[str, str], str], notes: dict[str, dict[str, str]] | None = None) -> str:
    """The recorded cells as a Markdown table, a row per case, a column per path, then a
    column per kind of note a cell recorded (record_property: the LoRA targets found, the
    CALM run's frozen-prefix choice), and the reasons of the known breaks below it."""
    notes = notes or {}
    cases = [c for c in CASES if any(k[0] == c for k in cells)]
    order = list(COLUMNS.values())
    columns = sorted({k[1] for k in cells}, key=lambda c: (next(i for i, o in enumerate(order) if c.startswith(o)), c))
    extra = sorted({key for per_case in notes.values() for key in per_case})
    lines = ["| case | " + " | ".join(columns + extra) + " |", "|---" * (len(columns) + len(extra) + 1) + "|"]
    for case in cases:
        row = [cells.get((case, c), "") for c in columns]
        row += [notes.get(case, {}).get(key, "").replace("|", "/") for key in extra]
        lines.append(f"| {case} | " + " | ".join(row) + " |")
    reasons = sorted({r for (case, column), r in KNOWN_BREAKS.items() if cells.get((case, _column_label(column)))})
    return "\n".join(lines + [""] + [f"- xfail: {reason}" for reason in reasons]) + "\n"


def _column_label(column: str) -> str:
    """The table's column of a KNOWN_BREAKS column (`cloze` -> `scoring cloze`)."""
    if column in ("cloze", "letter"):
        return f"scoring {column}"
    if column in ("scalar", "adaptive"):
        return f"CALM {column}"
    return {"posthoc": "TS, ATS"}.get(column, column)
