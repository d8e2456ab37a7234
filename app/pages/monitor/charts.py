"""The Monitor's four tabs of curves (losses and the bilevel diagnostics, evaluation,
alpha, trade-off), drawn from a run's metrics.jsonl records. A module of its own so the
page (app/pages/monitor/monitor.py) stays a short script of what it shows and when."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st

from app.widgets.charts import alpha_bars, alpha_heatmap, line_figure, reference_key, tradeoff_figure
from app.widgets.words import explained, variant_names
from calm_core.calibration.metrics.columns import curves
from calm_core.glossary import define, tooltip
from calm_core.results import advice
from calm_core.results import curves as run_curves
from calm_core.results import tables as run_tables
from calm_core.runs.rundir import RunDir
from calm_core.runs.selection_record import SelectionSummary
from calm_core.runs.train_record import TrainRecord
from calm_core.training.bilevel_health import RULES, bome_health, health_summary
from calm_core.training.config import recorded_bilevel

# What marks the selected step on the line charts (app/widgets/charts.line_figure draws a dashed line
# labelled "selected"); the trade-off chart marks it with a star and says so in its own caption.
SELECTED_LINE = "The dashed line marks the selected step."


@st.cache_data(ttl=600, show_spinner=False)
def _uniform_entropy(path: str) -> float | None:
    """ln K of the run's S_V (run_curves.uniform_entropy), once per run and ten minutes."""
    return run_curves.uniform_entropy(RunDir(Path(path)))


def _eval_curves(records: list[dict[str, Any]], metric: str) -> dict[str, tuple[list[int], list[float]]]:
    """One curve per evaluation set of `eval/<set>/<metric>`: a chart's lines."""
    return {name: run_curves.series(records, f"eval/{name}/{metric}") for name in run_curves.eval_sets(records)}


def chart_tabs(
    run: RunDir, records: list[dict[str, Any]], active: bool, selection: SelectionSummary | None, train: TrainRecord
) -> None:
    """The four tabs of curves. Every curve marks the selected step (status.json's
    `selection`); `train` is config.json's record: both read once per poll, passed in."""
    if not records:
        explained(
            "No steps logged yet (loading the model and data, and filling the frozen-layer cache, come first).",
            "frozen-layer cache",
        )
        return
    selected = advice.selected_step(selection)
    task = train.task
    losses, evaluation, alpha, tradeoff = st.tabs(["Losses", "Evaluation", "alpha", "Trade-off"])
    with losses:
        _losses(run, records, selected, selection)
        _bome(records, selected, train)
    with evaluation:
        _evaluation(records, selected, openqa=task == "openqa")
    with alpha:
        _alpha(run.run_id, records, active, selected)
    with tradeoff:
        _tradeoff(run, records, selected, task)


def _losses(
    run: RunDir, records: list[dict[str, Any]], selected: int | None, selection: SelectionSummary | None
) -> None:
    """The training loss, S_V's entropy under its ln K ceiling and, when logged, theta's S_T
    cross-entropy against the tolerance that keeps a step from being selected."""
    lower = run_curves.series(records, "lower/st_nll")
    c1, c2, *c3 = st.columns(3 if lower[0] else 2)
    c1.plotly_chart(
        line_figure(
            {"training loss (S_T)": run_curves.series(records, "train/lower_loss")},
            "Training loss",
            selected_step=selected,
            columns=len(c3) + 2,
        ),
        key="monitor_loss",
    )
    entropy = run_curves.series(records, "train/upper_loss")
    ceiling = _uniform_entropy(str(run.path))  # ln K: the entropy of a uniform forecast, its maximum
    c2.plotly_chart(
        line_figure(
            {
                "S_V batch": (entropy[0], [-v for v in entropy[1]]),
                "S_V (eval)": run_curves.series(records, "eval/heldout/entropy"),
            },
            "Entropy on S_V (nats)",
            selected_step=selected,
            threshold=(ceiling, f"ln K = {ceiling:.3f} (uniform)") if ceiling else None,
            columns=len(c3) + 2,
        ),
        key="monitor_entropy",
    )
    explained(
        "Training loss: how badly the model fits its training batches (lower is better). Entropy on S_V: how "
        "unsure it is on the held-out questions; CALM raises it from overconfident, and ln K is its ceiling. "
        f"{SELECTED_LINE}",
        "S_T",
        "S_V",
        "entropy",
        "ln K",
        "selected step",
    )
    if lower[0]:
        limit = advice.lower_threshold(selection)
        c3[0].plotly_chart(
            line_figure(
                {"S_T cross-entropy": lower},
                "S_T cross-entropy of theta (lower level)",
                selected_step=selected,
                threshold=(limit, "tolerance") if limit is not None else None,
                columns=3,
            ),
            key="monitor_lower",
        )
        c3[0].caption(
            "How well the fine-tuned model (theta: adapter on, no head) still fits S_T, the lower level: a step "
            "above the tolerance line has lost that fit and is never selected.",
            help=tooltip("theta", "lower level", "tolerance"),
        )


def _evaluation(records: list[dict[str, Any]], selected: int | None, openqa: bool) -> None:
    """The periodic evaluation's curves per evaluation set, three to a row: a multiple-choice
    run's are the metrics declared as curves; open answers say what their greedy-only
    figures mean and have accuracy, sequence-probability ECE and token entropy."""
    if not run_curves.eval_sets(records):
        st.caption("No evaluation yet: it runs every `eval_every` steps and at the end.")
        return
    explained(
        f"One line per evaluation set (S_V is `heldout`), measured every few steps. {SELECTED_LINE}",
        "evaluation set",
        "S_V",
        *(("accuracy", "ECE", "Sem1") if openqa else ("accuracy", "ECE", "NLL", "AUROC", "AURC", "entropy")),
        "confidence",
    )
    if openqa:
        st.caption(
            "Open answers: the periodic evaluation is greedy only, so accuracy is greedy exact "
            "match and ECE is the greedy answer's sequence probability against its correctness "
            "(10 bins); Semantic ECE comes with the final evaluation (sampled answers)."
        )
    if openqa:
        wanted = [("acc", "Accuracy"), ("ece", "Sequence-probability ECE (10 bins)"), ("entropy", "Mean token entropy")]
    else:  # every metric declared as a curve (calibration/metrics/columns.py), in its order
        wanted = list(curves())
    drawn = [(name, title, _eval_curves(records, name)) for name, title in wanted]
    drawn = [(name, title, curve) for name, title, curve in drawn if any(steps for steps, _ in curve.values())]
    for row in range(0, len(drawn), 3):
        for cell, (name, title, curve) in zip(st.columns(3), drawn[row : row + 3], strict=False):
            cell.plotly_chart(line_figure(curve, title, selected_step=selected, columns=3), key=f"monitor_curve_{name}")


def _tradeoff(run: RunDir, records: list[dict[str, Any]], selected: int | None, task: str) -> None:
    """Each evaluation set's path in (ECE, accuracy) over the steps, with the base model and
    the post-hoc calibrators as reference points once the final evaluation is written."""
    paths = {}
    for name in run_curves.eval_sets(records):
        steps, acc = run_curves.series(records, f"eval/{name}/acc")
        paths[name] = (steps, acc, run_curves.series(records, f"eval/{name}/ece")[1])
    if not paths:
        st.caption("The path appears after the first evaluation.")
        return
    references = run_tables.reference_points(run) if task == "mcqa" else {}
    names = variant_names(v for points in references.values() for v in points)
    st.plotly_chart(tradeoff_figure(paths, references, selected_step=selected, names=names), key="monitor_tradeoff")
    key = f"; {reference_key(names)} (after the final evaluation)" if names else ""
    st.caption(
        f"star: the selected step (where the run's model is from){key}. "
        "A low ECE far below the base model's accuracy, or with AUROC near 0.5 in the table, is "
        "a near-uniform forecast, not a calibrated one."
    )


def _bome(records: list[dict[str, Any]], selected: int | None, train: TrainRecord) -> None:
    """BOME's diagnostics: a health line per chart (training/bilevel_health.py: a declared
    rule over its last logged values, said in the line's tooltip), then the charts
    themselves behind one expander, each with what it means in words; a warning when the
    coupling never acted (then the run is alternating updates in disguise)."""
    if not run_curves.series(records, "bome/q")[0]:
        return
    bome = recorded_bilevel(train)
    eta = bome.eta if bome else None
    if run_curves.bome_summary(records, eta).get("inert"):
        st.warning(
            "The BOME coupling is inert in this run: the inner solve barely moves theta~ and lambda sits at eta, "
            "so the head ignores the training fit and only raises entropy (like `iterate`). Raise the inner steps "
            "T or the inner step size.",
            icon=":material/link_off:",
        )
    health = bome_health(records, eta)
    st.markdown(f"**Algorithm diagnostics (BOME)**: {health_summary(health)}", help=tooltip("BOME", "healthy"))
    for key, judged in health.items():
        st.markdown(
            f"- **{RULES[key].title}**: {judged.line}",
            help=f"{define(key)}\n\n**The rule**: {RULES[key].rule}.",
        )
    with st.expander(f"The {len(health)} diagnostic charts", icon=":material/query_stats:"):
        log_scale = st.toggle("log scale", value=False, key="monitor_log", help="for q and lambda (values > 0)")
        shown = [key for key in RULES if key in health]
        for row in range(0, len(shown), 2):
            for col, key in zip(st.columns(2), shown[row : row + 2], strict=False):
                title = RULES[key].title
                col.plotly_chart(
                    line_figure(
                        {title: run_curves.series(records, f"bome/{key}")},
                        title,
                        log_y=log_scale and key in ("q", "lambda"),
                        selected_step=selected,
                        columns=2,
                    ),
                    key=f"monitor_bome_{key}",
                )
                col.caption(f"{define(key)} ({health[key].line})")


def _alpha(run_id: str, records: list[dict[str, Any]], active: bool, selected: int | None) -> None:
    """The head's tau per option over the steps, and tau and l at a chosen step; a vocab
    head shows statistics over the vocabulary instead. `run_id` names the step slider."""
    steps, taus = run_curves.alpha_vectors(records, "tau")
    explained(
        "The calibration head (alpha) over the steps: tau, its temperature per option (above 1: less sure), and l, "
        "its shift per option.",
        "alpha",
        "tau",
        "l",
        "head scope",
    )
    if not steps:
        summary = {
            k: run_curves.series(records, f"alpha/{k}") for k in ("tau_mean", "tau_min", "tau_max", "l_abs_mean")
        }
        summary = {k: v for k, v in summary.items() if v[0]}
        if summary:
            st.plotly_chart(
                line_figure(
                    summary, "alpha summary (vocab scope: statistics over the vocabulary)", selected_step=selected
                ),
                key="monitor_alpha_summary",
            )
        else:
            st.caption("This method has no calibration head.")
        return
    labels = [f"option {chr(65 + k)}" for k in range(taus.shape[1])] if taus.shape[1] > 1 else ["tau"]
    st.plotly_chart(
        line_figure(
            {lab: (steps, taus[:, k]) for k, lab in enumerate(labels)}, "tau per option", selected_step=selected
        ),
        key="monitor_tau_lines",
    )
    if taus.shape[1] > 1:  # one tau (scalar scope): the line above says it all
        st.plotly_chart(alpha_heatmap(steps, taus, labels, "tau: step x option"), key="monitor_tau_heat")
    # While the run moves, a new step is a new slider (it follows the latest step); once it
    # stops, the key is stable and the slider stays where the reader puts it.
    live_suffix = f"-{len(steps)}" if active else ""
    chosen = st.select_slider("Step", options=steps, value=steps[-1], key=f"monitor_alpha_step-{run_id}{live_suffix}")
    row = steps.index(chosen)
    c1, c2 = st.columns(2)
    c1.plotly_chart(alpha_bars(taus[row], labels, chosen, "tau"), key="monitor_tau_bars")
    l_steps, shifts = run_curves.alpha_vectors(records, "l")
    if l_steps:
        c2.plotly_chart(alpha_bars(shifts[l_steps.index(chosen)], labels, chosen, "l"), key="monitor_l_bars")
