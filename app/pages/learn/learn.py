"""Learn: what overconfidence looks like, live on the embedded model (or, where it is
installed, on Qwen2.5-Coder-1.5B-Instruct, which knows many answers and is under-confident).

Score a built-in dataset, compare accuracy with mean confidence, and move a
temperature slider to watch ECE and the reliability diagram respond.
"""

from __future__ import annotations

from typing import NamedTuple

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from app.pages.learn.temperature import T_MAX, T_MIN, T_STEP, fitted_sentence, on_slider
from app.widgets.charts import accuracy_confidence_figure
from app.widgets.keys import LEARN_TEMPERATURE
from app.widgets.reliability_view import learn_diagram
from app.widgets.state import describe_error, get_scores
from calm_core.calibration import metrics
from calm_core.calibration.posthoc import TemperatureScaler
from calm_core.data.entries import list_datasets
from calm_core.glossary import define, tooltip
from calm_core.scoring.named_models import EMBEDDED_NAME, NAMED_MODELS, installed_models
from calm_core.scoring.options import OptionScores
from calm_core.scoring.score_cache import LEARN_QUIZ

N_BINS = 15  # the project's ECE bins (the diagram's bins come from the item count)
LETTER_MODELS = ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")  # aligned models that answer by letter: letter+chat first
RULES = ["cloze", "cloze_norm", "letter", "letter+chat"]


class Scored(NamedTuple):
    """A model's option scores on the chosen questions, and what they are of."""

    scores: OptionScores
    dataset: str
    rule: str
    model: str = EMBEDDED_NAME


def _fit_temperature(value: float) -> None:
    """The slider to the fitted temperature (a callback: it runs before the slider is drawn)."""
    st.session_state[LEARN_TEMPERATURE] = on_slider(value)


def intro() -> DeltaGenerator:
    """The title and the claim the page demonstrates (sure more often than right), and a
    slot under it for the verdict on the chosen questions, filled once they are scored."""
    st.title("Overconfidence, live")
    st.markdown(
        "Aligned language models tend to say they are **more sure than they are right**. "
        "Below, the embedded model (SmolLM2-135M-Instruct, DPO-aligned) answers multiple-choice questions "
        "(where Qwen2.5-Coder-1.5B-Instruct is installed, it can answer instead: a model that knows many of "
        "them and is less sure than it is right). "
        "Its *confidence* is the probability it puts on its chosen option; a calibrated model is right "
        "70% of the time when it is 70% sure. Move the temperature to see what one number can fix, then "
        "**Train** to calibrate while fine-tuning.",
        help=tooltip("confidence", "ECE", "temperature"),
    )
    return st.empty()


def verdict_line(base: dict[str, float], n: int) -> str:
    """Whether the untouched model is over- or under-confident on these questions, in one line."""
    gap = base["confidence"] - base["acc"]
    if abs(gap) < 0.05:
        how = "about as sure as it is right: well calibrated here"
    elif gap > 0:
        how = f"overconfident by {gap * 100:.0f} points"
    else:
        how = f"under-confident by {-gap * 100:.0f} points"
    return (
        f"On these {n} questions the model is **{base['confidence']:.0%} sure** on average and **{base['acc']:.0%} "
        f"right**: {how} (ECE {base['ece']:.3f})."
    )


def score_questions() -> Scored:
    """The dataset, how many questions and the scoring rule, and the embedded model's scores
    on them (the default quiz was scored at set-up; others once, then kept on disk); a
    failure is a message that stops the page."""
    names = [e.name for e in list_datasets(kind="mc")]
    default = names.index(LEARN_QUIZ.dataset) if LEARN_QUIZ.dataset in names else 0
    model = choose_model()
    rule_default = "letter+chat" if model in LETTER_MODELS else LEARN_QUIZ.rule
    col1, col2, col3 = st.columns([3, 1, 1])
    dataset = col1.selectbox("Dataset", names, index=default, key="learn_dataset")
    limit = col2.number_input(
        "Questions", min_value=10, max_value=500, value=LEARN_QUIZ.limit, step=10, key="learn_limit"
    )
    rule = col3.selectbox(
        "Scoring rule",
        RULES,
        index=RULES.index(rule_default),
        key=f"learn_rule_{model}",
        help=tooltip("cloze", "letter scoring") + "\n\nletter+chat: letter answers under the model's chat template.",
    )
    try:
        return Scored(get_scores(model, dataset, rule, int(limit)), dataset, rule, model)
    except Exception as exc:  # shown as a message, never a stack trace
        st.error(describe_error(exc))
        st.stop()


def choose_model() -> str:
    """The embedded model, or an installed model that answers by letter (the radio appears
    only when there is a choice): a teacher can show under-confidence beside over-confidence."""
    offered = [name for name in installed_models() if name == EMBEDDED_NAME or name in LETTER_MODELS]
    if len(offered) == 1:
        return EMBEDDED_NAME
    return st.radio(
        "Model",
        offered,
        horizontal=True,
        key="learn_model",
        format_func=lambda name: NAMED_MODELS[name].label.split(" (")[0],
        help="The first load of a larger model takes a minute; its scores are kept on disk for the next time.",
    )


def accuracy_against_confidence(scores: OptionScores) -> dict[str, float]:
    """Step 1: the untouched model's accuracy beside its mean confidence, and its ECE.
    Returns those figures: step 2 measures the temperature's effect against them."""
    st.subheader("1. Accuracy against confidence")
    base = metrics.summarize(scores.probs(), scores.gold, n_bins=N_BINS)
    left, right = st.columns(2)
    left.plotly_chart(accuracy_confidence_figure(base["acc"], base["confidence"], "Untouched model"), key="learn_bars")
    right.metric("Accuracy", f"{base['acc']:.1%}", help=define("accuracy"))
    right.metric(
        "Mean confidence",
        f"{base['confidence']:.1%}",
        delta=f"{base['confidence'] - base['acc']:+.1%} against accuracy",
        delta_color="inverse",
        help=define("confidence"),
    )
    right.metric(f"ECE ({N_BINS} bins)", f"{base['ece']:.3f}", help=define("ECE"))
    return base


def temperature_section(scored: Scored, base: dict[str, float]) -> None:
    """Step 2: a temperature slider (and a button to the NLL-optimal T) that moves ECE,
    confidence and the reliability diagram while accuracy stays where it is."""
    scores = scored.scores
    st.subheader("2. Move the temperature")
    st.markdown(
        "Dividing the scores by a temperature T > 1 softens every answer; T < 1 sharpens it. "
        "Temperature scaling picks the T that fits held-out labels best, and keeps every prediction the same.",
        help=tooltip("temperature", "TS"),
    )
    fitted = TemperatureScaler.fit(scores.logits, scores.gold) if len(scores) >= 10 else None
    # The slider's value lives in session state only: Fit T writes it there, and a slider
    # given a default as well makes Streamlit log a warning with a stack trace.
    st.session_state.setdefault(LEARN_TEMPERATURE, 1.0)
    temperature = st.slider(
        "Temperature T", T_MIN, T_MAX, step=T_STEP, key=LEARN_TEMPERATURE, help=define("temperature")
    )
    if fitted is not None:
        left, right = st.columns([3, 1])
        left.caption(fitted_sentence(fitted.temperature_), help=tooltip("NLL"))
        right.button(
            "Fit T",
            key="learn_fit",
            on_click=_fit_temperature,
            args=(fitted.temperature_,),
            help="Move the slider to the temperature with the lowest NLL (what temperature scaling picks).\n\n"
            + tooltip("NLL"),
        )
    probs = scores.probs(temperature)
    now = metrics.summarize(probs, scores.gold, n_bins=N_BINS)
    c1, c2, c3 = st.columns(3)
    c1.metric(
        "ECE",
        f"{now['ece']:.3f}",
        delta=f"{now['ece'] - base['ece']:+.3f}" if temperature != 1.0 else None,
        delta_color="inverse",
        help=define("ECE"),
    )
    c2.metric("Mean confidence", f"{now['confidence']:.1%}", help=define("confidence"))
    c3.metric("Accuracy (unchanged)", f"{now['acc']:.1%}", help="A temperature never changes which option is picked.")
    learn_diagram(
        metrics.top_label(probs, scores.gold),
        f"Reliability diagram at T = {temperature:.2f}",
        f"Bars below the diagonal: more sure than right. Scoring rule: {scored.rule}; {len(scores)} questions "
        f"from {scored.dataset}.",
        "under-confident",
        "scoring rule",
        scored.rule,
    )


def why_not_stop() -> None:
    """Step 3: why one temperature is not the end, and the way to Train."""
    st.subheader("3. Why not stop here")
    st.markdown(
        "A temperature fitted on one dataset is often wrong for the next one (see `docs/results.md`). "
        "**CALM** learns the calibration *while* fine-tuning: LoRA weights for the task and a calibration head "
        "(per-option temperatures and shifts) chosen to keep held-out predictions uncertain where the model is not "
        "sure, without giving up the training fit. Try it: **Train** launches a run in the background, **Monitor** "
        "follows it, **Compare** puts its reliability diagrams next to the untouched model and temperature scaling.",
        help=tooltip("CALM", "LoRA", "calibration head"),
    )
    st.page_link("../pages/train/train.py", label="Train a calibrated model", icon=":material/model_training:")


lead = intro()
scored = score_questions()
base = accuracy_against_confidence(scored.scores)
lead.markdown(verdict_line(base, len(scored.scores)), help=tooltip("ECE"))
temperature_section(scored, base)
why_not_stop()
