"""The merged card's "Serve it" section: the request that gives the run's calibrated option
probabilities from an OpenAI-compatible server serving the folder, with a self-check.

Under the letter rule the request carries the per-letter shifts as `logit_bias` (plus a
common lift, LIFT, that puts the letters at the top); under cloze it asks
for the prompt's own log-probabilities (`echo` + `logprobs`) and the reader divides the
summed scores by the temperature. The code is the standard library and the folder's
tokenizer; tests run it against a stand-in server, so it cannot drift from the maths.
"""

from __future__ import annotations

from typing import Any

from calm_core.export.card_prompt import context_code, letter_prompt_lines, template_line
from calm_core.scoring.prompts import ScoringConfig

LIFT = 80.0  # added to every letter's bias: above any other token, within the +-100 servers accept
CHECK_OPTIONS = ["Paris", "Rome", "Madrid", "Berlin"]  # of the check's first question (merged.CHECK_ITEMS)

SERVERS = (
    "Meant for vLLM (`vllm serve path/to/this/folder`); any server whose `/v1/completions` answers the same "
    "request shape works (llama.cpp's server, TGI where they return what the request asks for)"
)


def served_section(record: dict[str, Any]) -> str:
    """Markdown: the servers, the request's shape, the code with its self-check, the CLI check."""
    cfg = ScoringConfig(**record["scoring"])
    tolerance = record["merged"]["check"]["tolerance"]
    if cfg.is_cloze:
        shape = (
            "Under the run's cloze rule each option is one request with `echo: true, logprobs: 1, max_tokens: 1`: "
            "the server returns every prompt token's log-probability, the option's are those after the question "
            "(the prompt goes as token ids, so the split is the studio's), and the calibration is applied to "
            "their sum as the formula above says."
        )
    else:
        shape = (
            "Under the run's letter rule each question is one request at the answer position: `max_tokens: 1`, "
            f"`logprobs: K` and `logit_bias` {{letter k: {LIFT:g} + l_k}}. The shifts l_k ride in the request (the "
            f"LM head has no bias for them; zero where the weights hold them); the common {LIFT:g} puts the K "
            "letters at the top, so the returned top log-probabilities are theirs, and a constant common to the "
            "letters leaves their softmax unchanged. The server must return log-probabilities after `logit_bias` "
            "(vLLM: `--logprobs-mode processed_logprobs`); where it does not, `echo` the prompt followed by each "
            "letter and add l_k yourself: the check below says which your server does."
        )
    return (
        "## Serve it (an OpenAI-compatible server)\n\n"
        f"{SERVERS}. {shape}\n\n"
        f"```python\n{served_snippet(record)}```\n\n"
        "The last lines are the self-check: the studio's own calibrated probabilities of that question, "
        f"which the server must give to {tolerance}. The same check in every form, from a machine with "
        "CALM Studio: `calm eval --model openai:http://HOST:PORT/v1 --export path/to/this/folder`.\n\n"
    )


def served_snippet(record: dict[str, Any]) -> str:
    """`calibrated(question, options)` through the server, then the self-check."""
    cfg = ScoringConfig(**record["scoring"])
    check = record["merged"]["check"]
    lines = [
        "import json, math, urllib.request",
        "from transformers import AutoTokenizer",
        "",
        'URL, MODEL = "http://127.0.0.1:8000/v1", "path/to/this/folder"  # the server, the name it serves',
        'tokenizer = AutoTokenizer.from_pretrained("path/to/this/folder")  # the tokenizer alone',
        template_line(cfg),
        "",
        "def post(payload):",
        '    body = json.dumps({"model": MODEL, **payload}).encode()',
        '    request = urllib.request.Request(URL + "/completions", body, {"Content-Type": "application/json"})',
        "    with urllib.request.urlopen(request, timeout=60) as response:",
        "        return json.load(response)",
        "",
        "def softmax(z):",
        "    e = [math.exp(v - max(z)) for v in z]",
        "    return [v / sum(e) for v in e]",
        "",
        *(_cloze_lines(cfg, record["merged"]) if cfg.is_cloze else _letter_lines(cfg, record["merged"])),
        f"EXPECTED = {check['probabilities'][0]!r}  # the studio's calibrated probabilities",
        f"got = calibrated({check['items'][0]!r}, {CHECK_OPTIONS!r})",
        f"assert max(abs(a - b) for a, b in zip(got, EXPECTED)) < {check['tolerance']}, (got, EXPECTED)",
        'print("served export OK:", got)',
    ]
    return "\n".join(lines) + "\n"


def _letter_lines(cfg: ScoringConfig, merged: dict[str, Any]) -> list[str]:
    shifts = merged.get("letter_shifts") if merged["fold"] == "temperature" else None
    prefix = '""' if cfg.chat_template else "DELIMITER"
    lines = [
        f"SHIFTS = {shifts or [0.0] * 26!r}  # l_k of letters A, B, ... (the LM head has no bias for them)",
        "",
        *letter_prompt_lines(cfg),
        "",
        "def calibrated(question, options):",
        "    ids = tokenizer(prompt(question, options), add_special_tokens=False).input_ids",
        f"    letters = [tokenizer({prefix} + chr(65 + k), add_special_tokens=False).input_ids[0] "
        "for k in range(len(options))]",
        f"    bias = {{str(t): {LIFT!r} + SHIFTS[k] for k, t in enumerate(letters)}}  # the shifts, and a common lift",
        '    answer = post({"prompt": ids, "max_tokens": 1, "temperature": 1.0, "logprobs": len(options), '
        '"logit_bias": bias})',
        '    top = answer["choices"][0]["logprobs"]["top_logprobs"][0]',
        "    names = [[tokenizer.decode([t]), tokenizer.convert_ids_to_tokens(t), f'token_id:{t}'] for t in letters]",
        "    z = [next(top[n] for n in ns if n in top) for ns in names]  # the letters' log-probabilities",
    ]
    if merged["fold"] == "formula":
        lines += [
            f"    tau, l = {merged['tau']!r}, {merged['shift'] or [0.0] * 26!r}",
            "    m = sum(z) / len(z)",
            "    z = [(v - m) / tau[k % len(tau)] + m + l[k] for k, v in enumerate(z)]  # the card's formula",
        ]
    return lines + ["    return softmax(z)", ""]


def _cloze_lines(cfg: ScoringConfig, merged: dict[str, Any]) -> list[str]:
    delimiter = "" if cfg.chat_template else "DELIMITER + "
    reduce = "sum(picked) / len(picked)" if cfg.rule == "cloze_norm" else "sum(picked)"
    if merged["temperature"] is not None:
        formula = f"    return softmax([s / {merged['temperature']!r} for s in scores])  # softmax(S_k / T)"
    else:
        formula = (
            f"    tau, l = {merged['tau']!r}, {merged['shift']!r}\n"
            "    return softmax([s / tau[k] + l[k] for k, s in enumerate(scores)])  # softmax(S_k / tau_k + l_k)"
        )
    return [
        "def option_score(context, option):",
        "    spaces = len(context) - len(context.rstrip(' '))  # trailing spaces join the option",
        "    if spaces:",
        "        context, option = context[:-spaces], context[-spaces:] + option",
        "    ids = tokenizer(context + option, add_special_tokens=False).input_ids",
        "    start = len(tokenizer(context, add_special_tokens=False).input_ids)",
        '    answer = post({"prompt": ids, "echo": True, "logprobs": 1, "max_tokens": 1, "temperature": 0})',
        '    picked = answer["choices"][0]["logprobs"]["token_logprobs"][start : len(ids)]',
        f"    return {reduce}  # S_k",
        "",
        "def calibrated(question, options):",
        f"    context = {context_code(cfg)}",
        f"    scores = [option_score(context, {delimiter}option) for option in options]",
        formula,
        "",
    ]
