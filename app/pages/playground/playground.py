"""Playground: ask your own question. Option probabilities under base, TS and the
calibrated model side by side (open-answer runs: each variant's greedy answer and its
sampled answers grouped by meaning), and free generation with the calibration head."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import streamlit as st

from app.widgets.charts import answer_groups, cluster_summary, option_probability_figure
from app.widgets.state import describe_error, get_model, get_trained
from app.widgets.words import explained, named, variant_help, variant_names
from calm_core.calibration import metrics
from calm_core.data.entries import list_datasets
from calm_core.data.schema import MCItem
from calm_core.generative.sampling import GenerationConfig
from calm_core.glossary import define, tooltip
from calm_core.results.playground import (
    TrainedModel,
    generate,
    generated_text,
    head_acts_on_tokens,
    open_answers_for,
    option_probabilities,
    untrained,
)
from calm_core.runs.lifecycle import RunState
from calm_core.runs.listing import list_runs, run_label
from calm_core.scoring.evaluate import load_mc_items

NO_RUN = "(none: the embedded model alone)"
# Scoring one question under every variant is a forward pass each: seconds on a CPU, so
# the page says so instead of leaving the last answer greyed out.
SCORING = "Scoring the options under every variant (a few seconds on a CPU)..."


def open_answer(trained: TrainedModel) -> None:
    """An open-answer run: a typed question, each variant's greedy and sampled answers,
    grouped by meaning (the run's prompt and grouping; the reader sets how many and how long)."""
    st.subheader("Open answer")
    cfg = trained.generation or GenerationConfig()
    question = st.text_input("Question", "What is the capital of Peru?", key="play_open_question")
    c1, c2 = st.columns(2)
    n_samples = c1.slider("Sampled answers", 2, 20, max(2, min(20, cfg.n_samples)), key="play_open_samples")
    max_new = c2.slider("Max new tokens", 1, 64, min(64, cfg.max_new_tokens), key="play_open_max_new")
    st.caption(
        f"Prompt `{cfg.prompt}`, answers grouped by `{cfg.grouping}` (the run's settings). Confidence is "
        "Sem1: the share of the samples in the most common meaning cluster."
        + (
            f" Temperature scaling divides every step's logits by {trained.temperature:.3g} (fitted on the run's S_V)."
            if trained.temperature
            else ""
        )
    )
    if not question.strip():
        st.warning("Type a question.")
        return
    if not st.button("Answer", key="play_open_answer"):
        return
    try:
        with st.spinner("Generating greedy and sampled answers for every variant..."):
            answers = open_answers_for(
                trained, question, replace(cfg, n_samples=int(n_samples), max_new_tokens=int(max_new))
            )
    except Exception as exc:
        st.error(describe_error(exc))
        return
    # a DataFrame shows model text literally (no Markdown)
    st.dataframe(
        named(
            pd.DataFrame(
                [
                    {
                        "variant": name,
                        "greedy answer": a["greedy"],
                        "sequence probability": a["seq_prob"],
                        "Sem1 answer": a["answer"],
                        "Sem1 confidence": a["confidence"],
                        "samples by cluster": cluster_summary(a["samples"], a["clusters"]),
                    }
                    for name, a in answers.items()
                ]
            )
        ),
        hide_index=True,
        width="stretch",
        key="play_open_table",
    )
    for name, a in answers.items():
        with st.expander(
            f"{variant_names([name])[name]}: {len(answer_groups(a['samples'], a['clusters']))} meaning clusters"
        ):
            st.text(
                "\n".join(
                    f"{count} ×  {text or '(empty)'}" for text, count in answer_groups(a["samples"], a["clusters"])
                )
            )


def choose_model() -> TrainedModel:
    """A finished (or cancelled) run's model, the newest finished one first, or the embedded
    model alone; one that cannot be loaded is said and stops the page."""
    usable = [r for r in list_runs() if r.state in (RunState.FINISHED, RunState.CANCELLED)]  # newest first
    finished = [r.run_id for r in usable]
    labels = {r.run_id: run_label(r) for r in usable}
    newest = next((i + 1 for i, r in enumerate(usable) if r.state == RunState.FINISHED), 0)  # the newest finished run
    run_id = st.selectbox(
        "Calibrated model",
        [NO_RUN] + finished,
        index=newest,
        key="play_run",
        format_func=lambda r: labels.get(r, r),
        help="A finished run brings its adapter, its calibration head and the temperature that temperature scaling "
        "fitted on its S_V.\n\n" + tooltip("calibration head", "TS"),
    )
    try:
        return get_trained(run_id) if run_id in finished else untrained(get_model("embedded"))
    except Exception as exc:
        st.error(describe_error(exc))
        st.stop()


def _dataset_item() -> MCItem:
    """An item of a multiple-choice dataset, by index, shown literally with its gold option;
    a dataset that cannot be read is said and stops the page."""
    names = [e.name for e in list_datasets(kind="mc")]
    c1, c2 = st.columns([3, 1])
    dataset = c1.selectbox("Dataset", names, key="play_dataset")
    index = c2.number_input("Item", 0, 10_000, 0, key="play_index")
    try:
        with st.spinner(f"Reading {dataset}..."):
            items = load_mc_items(dataset, limit=int(index) + 1)
        item = items[min(int(index), len(items) - 1)]
    except Exception as exc:
        st.error(describe_error(exc))
        st.stop()
    st.caption("Question")
    st.text(item.question)  # dataset text, shown literally
    st.caption("Options (gold: " + str(item.answer + 1) + ")")
    st.text("\n".join(f"{k + 1}. {c}" for k, c in enumerate(item.choices)))
    return item


def _typed_item() -> MCItem:
    """A typed question and its options, the first one right; the page stops until there
    are a question and at least two different options."""
    question = st.text_input("Question", "Which planet is known as the red planet?", key="play_question")
    options_text = st.text_area(
        "Options, one per line (the first is the right one)", "Mars\nVenus\nJupiter\nSaturn", key="play_options"
    )
    options = [line.strip() for line in options_text.splitlines() if line.strip()]
    if not question.strip() or len(options) < 2 or len(set(options)) != len(options):
        st.warning("Give a question and at least two different options.")
        st.stop()
    return MCItem("playground", question.strip(), tuple(options), 0)


def multiple_choice(trained: TrainedModel) -> None:
    """One question's option probabilities under base, TS and the trained model, side by
    side: which answer each picks, how sure it is, and its entropy."""
    st.subheader("Multiple choice")
    source = st.radio("Question", ["type one", "from a dataset"], horizontal=True, key="play_source")
    item = _dataset_item() if source == "from a dataset" else _typed_item()
    try:
        with st.spinner(SCORING):
            probs = option_probabilities(trained, item)
    except Exception as exc:
        st.error(describe_error(exc))
        st.stop()
    st.plotly_chart(option_probability_figure(list(item.choices), probs, names=variant_names(probs)), key="play_probs")
    gold = item.choices[item.answer]  # typed: the first option; from a dataset: its gold
    rows = named(
        pd.DataFrame(
            [
                {
                    "variant": name,
                    "answer": item.choices[int(p.argmax())],
                    "right": "✓ right" if int(p.argmax()) == item.answer else "✗ wrong",
                    "confidence": float(p.max()),
                    f"p({gold})": float(p[item.answer]),
                    "entropy (nats)": float(metrics.entropy(p[None, :])[0]),
                }
                for name, p in probs.items()
            ]
        )
    )
    st.dataframe(
        rows,
        hide_index=True,
        width="stretch",
        column_config={
            "variant": st.column_config.Column(help=variant_help(probs)),
            "confidence": st.column_config.Column(help=define("confidence")),
            "entropy (nats)": st.column_config.Column(help=define("entropy")),
        },
    )
    explained(
        f"Scoring rule `{trained.scoring.rule}`"
        + (
            f"; temperature scaling divides the scores by {trained.temperature:.2f} (fitted on the run's S_V)"
            if trained.temperature
            else ""
        )
        + ". A calibrated model is less sure where it is wrong.",
        "scoring rule",
        trained.scoring.rule,
        "TS",
        "S_V",
    )


def free_generation(trained: TrainedModel) -> None:
    """Next tokens from a prompt with the head applied, each token's probability with and
    without it; says when this run's head cannot change generation."""
    st.subheader("Free generation")
    prompt = st.text_input("Prompt", "What is the chemical symbol of gold?", key="play_prompt")
    max_new = st.slider("New tokens", 1, 64, 16, key="play_max_new")
    if not st.button("Generate", key="play_generate"):
        return
    try:
        with st.spinner("Generating..."):
            rows = generate(trained, prompt, max_new_tokens=max_new)
    except Exception as exc:
        st.error(describe_error(exc))
        return
    st.text(generated_text(rows))  # st.text shows model text literally; special tokens left out
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    if not head_acts_on_tokens(trained):
        scope = f"{trained.head.scope} head" if trained.head is not None else "no head"
        st.caption(
            f"p_calibrated equals p_without_head here: this run has {scope} on `{trained.scoring.rule}` "
            "option scores, which acts on a question's options (above), not on the next token. "
            "Only a vocab head, or an open-answer run's head, changes generation."
        )


st.title("Playground")
st.markdown(
    "Ask your own question and see how sure each variant is: the model as it is, temperature scaling, the "
    "calibrated model and its adapter alone. A well-calibrated variant is sure when it is right and unsure when "
    "it is wrong; the newest finished run is chosen for you.",
    help=tooltip("variant", "base", "TS", "CALM, adapter only"),
)
trained = choose_model()
if trained.task == "openqa":
    open_answer(trained)
else:
    multiple_choice(trained)
free_generation(trained)
