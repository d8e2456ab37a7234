"""The README.md of a merged export (`calm export --merged`): a model card whose code is
plain transformers, and whose formula is the calibration the weights do not hold.

The card's Python defines `calibrated(question, options)`, the run's calibrated option
probabilities from the folder alone: the softmax of the letters' logits where the head is
folded into the weights, else the one-line formula (a shift added, or a temperature on
summed log-likelihoods). Tests run that code in a Python without calm_core against the
run's own probabilities, so the card cannot drift from the maths.
"""

from __future__ import annotations

from typing import Any

from calm_core.export.card_prompt import context_code, letter_prompt_lines, template_line
from calm_core.export.served_card import served_section
from calm_core.runs.rundir import RunDir
from calm_core.scoring.prompts import ScoringConfig


def merged_card(run: RunDir, record: dict[str, Any]) -> str:
    """README.md of a merged folder: metadata (huggingface_hub's ModelCardData, library
    transformers), what the weights hold, the code, the check and the results table."""
    from calm_core.export.model_card import (
        card_body_rows,
        card_text,
        results_section,
        selective_section,
        trained_line,
    )

    rows = card_body_rows(run)
    merged = record["merged"]
    body = (
        f"# {run.run_id}\n\n{merged_words(record)}: a plain transformers model that vLLM "
        "(`vllm serve path/to/this/folder`), TGI and `AutoModelForCausalLM.from_pretrained` load with no "
        "other code.\n\n"
        + trained_line(run, record)
        + "\n\n## Calibration in the weights\n\n"
        + fold_words(record)
        + "\n\n"
        + check_words(merged)
        + "\n\n## Load it (transformers alone)\n\n"
        + (f"```python\n{merged_snippet(record)}```\n\n" if record["task"] == "mcqa" else _open_snippet())
        + (served_section(record) if record["task"] == "mcqa" else "")
        + selective_section(record)
        + results_section(rows)
    )
    return card_text(run, record, rows, body, library="transformers")


def merged_words(record: dict[str, Any]) -> str:
    """What was merged, from calm_export.json: the trained adapter, or a zero one (`adapter_zero`:
    a post-hoc variant zeroes the trained adapter; step 0's never moved), whose merge leaves
    the base model's weights as they were."""
    variant, step = record.get("variant", record["method"]), record["step"]
    if not record.get("adapter_zero"):
        return (
            f"The run's model (`{variant}`, step {step}) with its LoRA adapter merged into the weights "
            "(peft `merge_and_unload`)"
        )
    why = (
        f"the `{variant}` variant zeroes the trained adapter's B matrices"
        if variant != record["method"]
        else f"step {step}, the selected one, is the untrained start: its B matrices are still zero"
    )
    return (
        f"`{variant}` over the untouched base model. The weights are the base model's own weights: the adapter is "
        f"zero ({why}), so merging it changed none of them; the calibration is below"
    )


def fold_words(record: dict[str, Any]) -> str:
    """What the merged weights hold of the head, and the formula for what they do not."""
    merged, method = record["merged"], record.get("variant", record["method"])
    kind, tau = merged["fold"], merged.get("temperature")
    untied = " (the input embeddings are untied first: `tie_word_embeddings: false`)" if merged["tied_untied"] else ""
    which = (
        f"T = {tau!r}"
        if tau is not None
        else "their own temperatures tau_v (the head's, one per vocabulary id)"
        if record["head_scope"] == "vocab"
        else "the option letters' temperatures tau_k (the rows of A, B, ...; the other rows are unchanged)"
    )
    if kind == "none":
        return f"The run has no calibration head: the weights are the adapted model (`{method}`), nothing to fold."
    if kind == "exact":
        bias = " and the shifts l added to its bias" if merged["bias_folded"] else ""
        served = (
            "under the run's letter rule the softmax of the answer position's logits at the option letters is the "
            "run's calibrated probability"
            if record["task"] == "mcqa"
            else "sampling from them samples the calibrated model"
        )
        return (
            f"The head's temperature is folded into the LM head: its rows are divided by {which}{bias}{untied}. "
            f"The served log-probabilities are the calibrated ones, with no extra code: {served}."
        )
    if kind == "temperature":
        return (
            f"The head's temperature is folded into the LM head: its rows are divided by {which}{untied}. "
            f"Its shifts l are **not** folded: this architecture's LM head takes no bias. Add them to the logits, "
            f"`log p = log_softmax(logits + l)`, with l in `{merged['shift_file']}` (key `shift`, one per "
            f"vocabulary id; at the letters A, B, ...: {_numbers(merged['letter_shifts'])})."
        )
    rule = record["scoring"]["rule"]
    if rule.startswith("cloze"):
        score = "summed" if rule == "cloze" else "mean per-token (`cloze_norm`)"
        return (
            "The calibration acts on option scores, so it is not folded: no row of the LM head holds a temperature "
            "on a sum of log-likelihoods. The weights are the adapted model's, and the served log-probabilities "
            f"are uncalibrated. The calibrated probability of option k is\n\n    {cloze_formula(merged)}\n\n"
            f"where S_k is the {score} log-likelihood of option k's tokens after the question, under the run's "
            "scoring rule (`scoring` in calm_export.json)."
        )
    return (
        "The head scales each option position about the question's mean letter logit, which no row can hold: "
        "the weights are the adapted model's. The calibrated probability of option k is\n\n"
        "    p_k = softmax_k((z_k - m) / tau_k + m + l_k)\n\nwhere z_k is the logit of option k's letter at the "
        f"answer position and m the mean of z over the question's options; tau = {_numbers(merged['tau'])}, "
        f"l = {_numbers(merged['shift'] or [])}."
    )


def cloze_formula(merged: dict[str, Any]) -> str:
    """The one line: one T (a scalar head, TS), or a temperature and shift per option
    position (vector scaling, an uncentred head)."""
    if merged["temperature"] is not None:
        return f"p_k = softmax_k(S_k / T),   T = {merged['temperature']!r}"
    return f"p_k = softmax_k(S_k / tau_k + l_k),   tau = {merged['tau']!r}, l = {merged['shift']!r}"


def check_words(merged: dict[str, Any]) -> str:
    """The check `export_merged.check_fold` made when the folder was written."""
    check = merged["check"]
    parts = []
    if "max_abs_diff" in check:
        parts.append(
            f"on {len(check['items'])} fixed questions the code below gives the studio's calibrated option "
            f"probabilities of the adapted model with its head to {check['max_abs_diff']:.1e} "
            f'("{check["items"][0]}": {_numbers(check["probabilities"][0])})'
        )
    if "max_abs_diff_vocab" in check:
        vocab = check["max_abs_diff_vocab"]
        parts.append(f"over the whole vocabulary, the served log-probabilities are the studio's to {vocab:.1e}")
    return f"Checked when the folder was written (tolerance {check['tolerance']}): " + "; ".join(parts) + "."


def _numbers(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.6g}" for v in values) + "]"


def merged_snippet(record: dict[str, Any]) -> str:
    """Plain transformers code defining `calibrated(question, options)` under the run's
    scoring rule and the fold's formula, ending with the check question."""
    scoring, merged = record["scoring"], record["merged"]
    cfg = ScoringConfig(**scoring)
    lines = [
        "import torch",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "",
        'folder = "path/to/this/folder"',
        "model = AutoModelForCausalLM.from_pretrained(folder).eval()",
        "tokenizer = AutoTokenizer.from_pretrained(folder)",
        template_line(cfg),
        "",
    ]
    lines += _cloze_lines(cfg, merged) if cfg.is_cloze else _letter_lines(cfg, merged)
    lines.append('print(calibrated("What is the capital of France?", ["Paris", "Rome", "Madrid", "Berlin"]))')
    return "\n".join(lines) + "\n"


def _letter_lines(cfg: ScoringConfig, merged: dict[str, Any]) -> list[str]:
    prefix = '""' if cfg.chat_template else "DELIMITER"
    lines = [
        *letter_prompt_lines(cfg),
        "",
        "@torch.no_grad()",
        "def calibrated(question, options):",
        "    ids = tokenizer(prompt(question, options), add_special_tokens=False, return_tensors='pt').input_ids",
        f"    letters = [tokenizer({prefix} + chr(65 + k), add_special_tokens=False).input_ids[0] "
        "for k in range(len(options))]",
        "    z = model(input_ids=ids).logits[0, -1, letters].double()  # (K,) the letters' logits",
    ]
    kind = merged["fold"]
    if kind == "temperature":
        lines.insert(0, "from safetensors.torch import load_file")
        lines.insert(1, f'shift = load_file(f"{{folder}}/{merged["shift_file"]}")["shift"].double()  # l')
        lines.insert(2, "")
        lines.append("    z = z + shift[letters]  # the shifts the LM head has no bias for")
    elif kind == "formula":
        lines += [
            f"    tau = torch.tensor({merged['tau']!r}, dtype=torch.float64)[: len(options)]",
            f"    l = torch.tensor({merged['shift'] or [0.0]!r}, dtype=torch.float64)[: len(options)]",
            "    m = z.mean()",
            "    z = (z - m) / tau + m + l  # the formula: no row of the LM head holds it",
        ]
    else:
        lines.append("    # the temperature is in the weights: the plain softmax is calibrated")
    return lines + ["    return torch.softmax(z, -1)", ""]


def _cloze_lines(cfg: ScoringConfig, merged: dict[str, Any]) -> list[str]:
    context = context_code(cfg)
    delimiter = '""' if cfg.chat_template else "DELIMITER"
    mean = cfg.rule == "cloze_norm"
    return [
        "def option_score(context, option):",
        "    spaces = len(context) - len(context.rstrip(' '))  # trailing spaces join the option",
        "    if spaces:",
        "        context, option = context[:-spaces], context[-spaces:] + option",
        "    ids = tokenizer(context + option, add_special_tokens=False).input_ids",
        "    start = len(tokenizer(context, add_special_tokens=False).input_ids)",
        "    logp = torch.log_softmax(model(input_ids=torch.tensor([ids[:-1]])).logits[0].double(), -1)",
        "    picked = logp[torch.arange(start - 1, len(ids) - 1), torch.tensor(ids[start:])]",
        f"    return picked.{'mean' if mean else 'sum'}()  # S_k: the option's {'mean' if mean else 'summed'} "
        "log-likelihood",
        "",
        "@torch.no_grad()",
        "def calibrated(question, options):",
        f"    context = {context}",
        f"    scores = torch.stack([option_score(context, {delimiter} + option) for option in options])",
        *_cloze_return(merged),
        "",
    ]


def _cloze_return(merged: dict[str, Any]) -> list[str]:
    if merged["temperature"] is not None:
        return [f"    return torch.softmax(scores / {merged['temperature']!r}, -1)  # p_k = softmax_k(S_k / T)"]
    return [
        f"    tau = torch.tensor({merged['tau']!r}, dtype=torch.float64)[: len(options)]",
        f"    l = torch.tensor({merged['shift']!r}, dtype=torch.float64)[: len(options)]",
        "    return torch.softmax(scores / tau + l, -1)  # p_k = softmax_k(S_k / tau_k + l_k)",
    ]


def _open_snippet() -> str:
    return (
        "```python\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
        'folder = "path/to/this/folder"\nmodel = AutoModelForCausalLM.from_pretrained(folder)\n'
        "tokenizer = AutoTokenizer.from_pretrained(folder)\n"
        'inputs = tokenizer("What is the capital of France?", return_tensors="pt")\n'
        "out = model.generate(**inputs, do_sample=True)  # sampled from the calibrated distribution\n```\n\n"
    )
