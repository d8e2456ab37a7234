"""The requests that give a merged export's calibrated probabilities from an OpenAI-compatible
server, and the check that a served export gives the studio's figures.

    forms = served_forms(served, record, folder)     # {form: probabilities (N, K)} on CHECK_ITEMS
    report = check_forms(forms, record)              # per form: the worst gap to the studio's numbers

Two forms, both plain `/v1/completions` requests (the model card prints them, `served_card`):
    logit_bias  letter rule: one request per question at the answer position, `max_tokens: 1`,
                `logprobs: K`, and `logit_bias` {letter k: LIFT + l_k}: the per-letter shifts the
                LM head has no bias for ride in the request, and the common LIFT (`served_card`) puts the K
                letters at the top, so the returned top log-probabilities are theirs. A
                constant common to the letters does not change their softmax. Needs a server
                whose returned log-probabilities include `logit_bias` (vLLM: `--logprobs-mode
                processed_logprobs`).
    echo        any rule: `echo: true` with `logprobs`, the prompt's own log-probabilities
                (`scoring.served`): an option's summed log-likelihood under cloze, or the
                letter's at the answer position; the card's formula is then applied by the
                reader (the shifts l_k added, or softmax(S / T) under cloze).
The studio's figures are those the merged export recorded when it was written
(calm_export.json `merged.check.probabilities`, the adapted model with its head).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from calm_core.export.merged import CHECK_ITEMS, CHECK_TOLERANCE, SHIFT_FILE, Fold, served_scores
from calm_core.export.served_card import LIFT
from calm_core.scoring.prompts import ScoringConfig, letter_token_ids
from calm_core.scoring.served import ServedModel, ServedScorer
from calm_core.scoring.served_client import ServedModelError
from calm_core.scoring.truncation import letter_prompt_ids


def record_fold(record: dict[str, Any], folder: Path) -> Fold:
    """The fold calm_export.json describes, with the shift file's l where it ships one."""
    merged = record["merged"]
    shift = None
    if merged["fold"] == "temperature":
        from safetensors.torch import load_file

        shift = load_file(str(folder / SHIFT_FILE))["shift"].double()
    return Fold(
        merged["fold"],
        shift=shift,
        centred=bool(merged.get("centred")),
        tau=merged.get("tau"),
        shift_k=merged.get("shift"),
    )


def letter_bias(fold: Fold, letters: list[int]) -> dict[str, float]:
    """`logit_bias` of the letter request: LIFT + l_k where the shifts are shipped, else LIFT."""
    shifts = (
        fold.shift[letters].tolist() if fold.kind == "temperature" and fold.shift is not None else [0.0] * len(letters)
    )
    return {str(token): LIFT + float(shift) for token, shift in zip(letters, shifts, strict=True)}


def letter_request(model: str, prompt: list[int], bias: dict[str, float]) -> dict[str, Any]:
    """One question's letter request: the answer position's top K log-probabilities under `bias`."""
    return {
        "model": model,
        "prompt": prompt,
        "max_tokens": 1,
        "temperature": 1.0,
        "logprobs": len(bias),
        "logit_bias": bias,
    }


def letter_logprobs(served: ServedModel, prompt: list[int], letters: list[int], bias: dict[str, float]) -> np.ndarray:
    """The K letters' returned log-probabilities at the answer position (K,), or the error
    that says the server's top log-probabilities did not hold them."""
    answer = served.client.complete(letter_request(served.name, prompt, bias))
    tops = ((answer["choices"][0].get("logprobs") or {}).get("top_logprobs") or [None])[0] or {}
    found = [next((key for key in token_keys(served.tokenizer, token) if key in tops), None) for token in letters]
    missing = [served.tokenizer.decode([token]) for token, key in zip(letters, found, strict=True) if key is None]
    if missing:
        raise ServedModelError(
            f"Expected every letter among the answer position's top log-probabilities under logit_bias, but "
            f"{missing} are not: the server ignores `logit_bias` in the log-probabilities it returns "
            "(vLLM: start it with --logprobs-mode processed_logprobs), or caps `logprobs` below K"
        )
    return np.array([float(tops[key]) for key in found if key is not None])


def token_keys(tokenizer: Any, token: int) -> list[str]:
    """The names a server may give a token in `top_logprobs`: its decoded text (vLLM,
    OpenAI), its vocabulary entry (older vLLM: "ĠA"), or vLLM's `token_id:N`."""
    return [tokenizer.decode([token]), tokenizer.convert_ids_to_tokens(token), f"token_id:{token}"]


def served_forms(served: ServedModel, record: dict[str, Any], folder: Path) -> dict[str, np.ndarray | str]:
    """Per form, the calibrated probabilities of CHECK_ITEMS (N, K_max), -inf-padded rows
    softmaxed, or the reason the form gave none."""
    cfg = ScoringConfig(**record["scoring"])
    fold = record_fold(record, folder)
    k_max = max(it.n_choices for it in CHECK_ITEMS)
    letters = [] if cfg.is_cloze else letter_token_ids(served.tokenizer, k_max, cfg)
    z = ServedScorer(served, progress=False).score(list(CHECK_ITEMS), cfg).logits
    forms: dict[str, np.ndarray | str] = {"echo": _softmax(served_scores(z, fold, letters))}
    if not cfg.is_cloze:
        try:
            forms["logit_bias"] = _softmax(_biased_scores(served, cfg, fold, letters))
        except ServedModelError as exc:
            forms["logit_bias"] = str(exc)
    return forms


def _biased_scores(served: ServedModel, cfg: ScoringConfig, fold: Fold, letters: list[int]) -> np.ndarray:
    """The letter requests' scores (N, K_max): the shifts came with the request, so only a
    `formula` fold (a centred per-position head) has the formula left to apply."""
    prompts = letter_prompt_ids(list(CHECK_ITEMS), cfg, served.tokenizer, served.context_length)
    z = np.full((len(CHECK_ITEMS), len(letters)), -np.inf)
    for i, (item, prompt) in enumerate(zip(CHECK_ITEMS, prompts, strict=True)):
        mine = letters[: item.n_choices]
        z[i, : item.n_choices] = letter_logprobs(served, prompt, mine, letter_bias(fold, mine))
    if fold.kind != "formula":
        return z
    return served_scores(z, fold, letters)


def check_forms(forms: dict[str, np.ndarray | str], record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per form: the worst absolute gap to the studio's probabilities and whether it is
    within CHECK_TOLERANCE, or the reason it gave none."""
    reference = record["merged"]["check"]["probabilities"]
    out: dict[str, dict[str, Any]] = {}
    for form, probs in forms.items():
        if isinstance(probs, str):
            out[form] = {"ok": False, "why": probs}
            continue
        gaps = [np.abs(probs[i, : len(row)] - np.asarray(row)).max() for i, row in enumerate(reference)]
        worst = float(max(gaps))
        out[form] = {
            "ok": worst <= CHECK_TOLERANCE,
            "max_abs_diff": worst,
            "probabilities": [round(float(p), 6) for p in probs[0, : len(reference[0])]],
        }
    return out


def _softmax(z: np.ndarray) -> np.ndarray:
    return torch.softmax(torch.from_numpy(np.asarray(z, dtype=np.float64)), -1).numpy()
