"""Monitor: one run, live. The page polls the run directory (status.json, metrics.jsonl)
every few seconds; closing it changes nothing for the job."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pandas as pd
import streamlit as st

from app.charts import alpha_bars, alpha_heatmap, line_figure, reference_key, tradeoff_figure
from app.gate import studio_access, this_browser, this_session
from app.keys import MONITOR_METRICS_TAILS, MONITOR_RUN
from app.state import code, describe_error
from app.verdict_view import column_meanings, heldout_evidence, verdict_block, verdict_caption, whole_cells
from app.words import column_help, explained, helps, named, variant_names
from calm_core.access.rules import OWNER_ONLY, may_cancel
from calm_core.calibration.metrics.columns import curves, help_texts, table_columns
from calm_core.estimate.remaining import FINAL, MEASURED_STEPS, Remaining, remaining, remaining_text
from calm_core.glossary import define, tooltip
from calm_core.launch import resume_refusal_for, resume_run
from calm_core.results import advice, verdict
from calm_core.results import view as run_view
from calm_core.results.fast_path_view import fast_path_rows
from calm_core.runs.jobs import cancel
from calm_core.runs.listing import list_runs, run_label
from calm_core.runs.metrics_lines import MetricsTail
from calm_core.runs.records import RunConfig, RunResults, RunStatus
from calm_core.runs.rundir import RunDir
from calm_core.runs.state import DAMAGED, RunState
from calm_core.training.bilevel_health import RULES, Health, bome_health, health_summary
from calm_core.training.config import recorded_bilevel

POLL_SECONDS = 3.0  # the progress line, state, selection and controls: cheap to redraw
# The curves redraw less often: each redraw rebuilds every figure on the server and re-renders
# it in every watching browser, which is what slowed a training job on the same cores most
# (bench/studio_load.py, docs/performance.md "The studio under load").
CHART_SECONDS_ENV, CHART_SECONDS_DEFAULT = "CALM_MONITOR_CHART_SECONDS", 15.0


def chart_seconds() -> float:
    """The charts' redraw interval: CALM_MONITOR_CHART_SECONDS (at least POLL_SECONDS), else
    the default; a value that is not a number is said once on the page and ignored."""
    raw = os.environ.get(CHART_SECONDS_ENV, "").strip()
    if not raw:
        return CHART_SECONDS_DEFAULT
    try:
        return max(POLL_SECONDS, float(raw))
    except ValueError:
        st.caption(
            f"{CHART_SECONDS_ENV}={raw!r} is not a number of seconds: the charts redraw every "
            f"{CHART_SECONDS_DEFAULT:.0f} s."
        )
        return CHART_SECONDS_DEFAULT


ACTIVE = ("queued", "running", "stopping")
# What marks the selected step on the line charts (app/charts.line_figure draws a dashed line
# labelled "selected"); the trade-off chart marks it with a star and says so in its own caption.
SELECTED_LINE = "The dashed line marks the selected step."


def _picker_key(labels: dict[str, str]) -> str:
    """The run picker's key follows its labels. Streamlit keeps a keyed selectbox's shown
    text across reruns, so a run's label kept the state it had when the page opened ("queued"
    on a finished run); a new key draws a fresh picker, on the run kept in `monitor_run`."""
    digest = hashlib.sha1("\n".join(labels.values()).encode()).hexdigest()[:10]
    return f"monitor_pick_{digest}"


def pick_run() -> RunDir:
    """The run picker, newest first, on this session's last launch or look (`monitor_run`);
    the page stops with a link to Train when there is no run yet."""
    runs = list_runs()
    if not runs:
        st.info("No runs yet: launch one on the **Train** page.")
        st.page_link("views/train.py", label="Go to Train", icon=":material/model_training:")
        st.stop()
    ids = [r.run_id for r in runs]  # newest first
    labels = {r.run_id: run_label(r) for r in runs}
    wanted = st.session_state.get(MONITOR_RUN)  # this session's last launch (Train) or last look; else the newest
    with st.container(key="monitor_select"):  # a stable name for the picker's box (the browser tests find it)
        run_id = st.selectbox(
            "Run",
            ids,
            index=ids.index(wanted) if wanted in ids else 0,
            key=_picker_key(labels),
            format_func=lambda r: labels.get(r, r),
        )
    st.session_state[MONITOR_RUN] = run_id
    return RunDir.at(run_id)


@st.cache_data(ttl=600, show_spinner=False)
def _uniform_entropy(path: str) -> float | None:
    """ln K of the run's S_V (run_view.uniform_entropy), once per run and ten minutes."""
    return run_view.uniform_entropy(RunDir(Path(path)))


def _eval_curves(records: list[dict], metric: str) -> dict:
    """One curve per evaluation set of `eval/<set>/<metric>`: a chart's lines."""
    return {name: run_view.series(records, f"eval/{name}/{metric}") for name in run_view.eval_sets(records)}


def _header(records: list[dict], view: RunState, status: RunStatus, config: RunConfig) -> None:
    """What the run is, its progress and state, the calibrated stop so far and its data
    notes; from the status and config this poll read (passed in, never read again)."""
    total, step = status.total_steps, status.step
    left = remaining(records, status, config.estimate, time.time())
    train = config.train
    method = config.train_method or "?"
    scope = run_view.head_scope(train) if train else "?"
    st.markdown(
        f"**{verdict.variant_label(method)}** on {code(config.label('train_data') or '?')} "
        f"(head scope {code(scope)}, model {code(config.label('model') or '?')})",
        help=helps(method, "head scope", scope, "S_T"),
    )
    reason = view.reason if view.reason.startswith(view.state) else f"{view.state}: {view.reason}"
    _progress(view, left, min(1.0, step / total) if total else 0.0, reason)
    if view.state == "failed" and status.error:
        st.error(status.error)
    selection = status.selection or {}
    line = advice.selection_status_line(selection)
    if line:  # the calibrated stop (training/selection.py): which step the model is from so far
        rule = selection.get("rule_text")
        terms = ("selected step", "calibrated stop", f"rule {selection.get('rule', 'best')}")
        st.caption(line, help=(helps(*terms) or "") + (f"\n\nThe rule: {rule}" if rule else ""))
    _data_notes(status.choices)
    _fast_paths(status.choices)
    for name, n in status.items_cut_to_context.items():
        st.caption(
            f"{n} items of {name} were longer than the model's context and were cut from the left "
            "(as lm-evaluation-harness does)."
        )


def _progress(view: RunState, left: Remaining, fraction: float, reason: str) -> None:
    """The progress bar and its line: the steps done, or during the final evaluation its own
    passes; the time left from the launch estimate until the run's pace is measured
    (estimate/remaining.py), with what it rests on and the heartbeat in the tooltip."""
    said = remaining_text(left) if view.state == "running" else ""
    if left.basis == FINAL and left.total and view.state == "running":
        fraction = left.done / left.total
    st.progress(fraction, text=reason + (f" · {said}" if said else ""))
    if view.state == "running":
        st.caption(
            "Time left: the launch estimate until the run's own pace is measured "
            f"({MEASURED_STEPS} steps after step 1), then that pace; the final evaluation counts its passes.",
            help=tooltip("heartbeat", "frozen-layer cache"),
        )


def _going(view: RunState, step: int, total: int | None, health: dict[str, Health]) -> None:
    """The page's answer to "is it going well": the state in words, and whether the BOME
    diagnostics (Losses tab) are healthy, by their declared rules (training/bilevel_health.py)."""
    where = f"step {step} of {total}" if total else f"step {step}"
    summary = health_summary(health) if health else ""
    checks = f"algorithm diagnostics: {summary}" if health else ""
    if view.state in ACTIVE:
        # "Going well" only on evidence: every chart judged healthy; "Watch" when one is not
        judged = "Watch" if "to watch" in summary else "Going well" if summary.startswith("all") else None
        head = f"**{judged}**: {view.state}, {where}" if judged else f"**{view.state.capitalize()}**: {where}"
        text = head + (f"; {checks}" if checks else "")
    elif view.state == "finished":
        text = "**Finished**: which model to use, and why, is under *Final evaluation* below" + (
            f"; {checks}" if checks else ""
        )
    elif view.state == "cancelled":
        text = f"**Cancelled** at {where}: **Resume** continues the same curves"
    else:
        text = f"**{view.state.capitalize()}** at {where}"
    st.markdown(text, help=tooltip("BOME", "healthy") if health else None)


def _health(records: list[dict], config: RunConfig) -> dict[str, Health]:
    """Each BOME chart's health line from the run's log and its eta ({} for a method without BOME)."""
    bome = recorded_bilevel(config.train)
    return bome_health(records, bome.eta if bome else None)


def _data_notes(choices: dict) -> None:
    """Rows the run's loaders rejected and items cut to the model's context: said, not hidden."""
    for name, record in (choices.get("rejected_rows") or {}).items():
        with st.expander(f"{record.get('n_rejected')} of {record.get('n_rows')} rows of {name} were rejected"):
            st.dataframe(pd.DataFrame(record.get("rejected") or []), hide_index=True)


def _fast_paths(choices: dict) -> None:
    """Which fast paths the run used and why (measured against the model's own forward)."""
    rows = fast_path_rows(choices.get("fast_paths"))
    if rows:
        used = ", ".join(row["fast path"] for row in rows if row["used"] == "yes") or "none"
        with st.expander(f"Fast paths used: {used}"):
            st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")


def _controls(run: RunDir, view: RunState, launched_by: str | None) -> None:
    """Cancel and resume; a shared studio lets a session change only its own runs (or
    every run, for the admin: CALM_STUDIO_ADMIN=1), and a resume counts toward the
    session's quota as a launch does (launch.py resume_refusal_for)."""
    c1, c2, c3 = st.columns([1, 1, 4])
    access, session, browser = studio_access(), this_session(), this_browser()
    allowed = may_cancel(access, session, launched_by)
    no_resume = resume_refusal_for(access, session, launched_by, run.path.parent, browser) if view.resumable else None
    if not allowed:
        c3.caption(OWNER_ONLY)
    elif no_resume:
        c3.caption(no_resume)
    if c1.button(
        "Cancel",
        disabled=view.state not in ACTIVE or not allowed,
        key="monitor_cancel",
        help="Stops after the current step with a checkpoint; resume continues the same curves.",
    ):
        try:
            st.toast(f"{run.run_id}: {cancel(run).state}")
        except Exception as exc:
            st.error(describe_error(exc))
    if c2.button("Resume", disabled=not view.resumable or no_resume is not None, key="monitor_resume", help=no_resume):
        try:
            resume_run(run, access, session, browser)
            st.toast(f"{run.run_id}: queued to resume")
        except Exception as exc:
            st.error(describe_error(exc))


def _charts(run: RunDir, records: list[dict], active: bool, selection: dict, train: dict) -> None:
    """The four tabs of curves. Every curve marks the selected step (status.json's
    `selection`); `train` is config.json's record: both read once per poll, passed in."""
    if not records:
        explained(
            "No steps logged yet (loading the model and data, and filling the frozen-layer cache, come first).",
            "frozen-layer cache",
        )
        return
    selected = advice.selected_step(selection)
    task = run_view.task_in(train)
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


def _losses(run: RunDir, records: list[dict], selected: int | None, selection: dict) -> None:
    """The training loss, S_V's entropy under its ln K ceiling and, when logged, theta's S_T
    cross-entropy against the tolerance that keeps a step from being selected."""
    lower = run_view.series(records, "lower/st_nll")
    c1, c2, *c3 = st.columns(3 if lower[0] else 2)
    c1.plotly_chart(
        line_figure(
            {"training loss (S_T)": run_view.series(records, "train/lower_loss")},
            "Training loss",
            selected_step=selected,
            columns=len(c3) + 2,
        ),
        key="monitor_loss",
    )
    entropy = run_view.series(records, "train/upper_loss")
    ceiling = _uniform_entropy(str(run.path))  # ln K: the entropy of a uniform forecast, its maximum
    c2.plotly_chart(
        line_figure(
            {
                "S_V batch": (entropy[0], [-v for v in entropy[1]]),
                "S_V (eval)": run_view.series(records, "eval/heldout/entropy"),
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


def _evaluation(records: list[dict], selected: int | None, openqa: bool) -> None:
    """The periodic evaluation's curves per evaluation set, three to a row: a multiple-choice
    run's are the metrics declared as curves; open answers say what their greedy-only
    figures mean and have accuracy, sequence-probability ECE and token entropy."""
    if not run_view.eval_sets(records):
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


def _tradeoff(run: RunDir, records: list[dict], selected: int | None, task: str) -> None:
    """Each evaluation set's path in (ECE, accuracy) over the steps, with the base model and
    the post-hoc calibrators as reference points once the final evaluation is written."""
    paths = {}
    for name in run_view.eval_sets(records):
        steps, acc = run_view.series(records, f"eval/{name}/acc")
        paths[name] = (steps, acc, run_view.series(records, f"eval/{name}/ece")[1])
    if not paths:
        st.caption("The path appears after the first evaluation.")
        return
    references = run_view.reference_points(run) if task == "mcqa" else {}
    names = variant_names(v for points in references.values() for v in points)
    st.plotly_chart(tradeoff_figure(paths, references, selected_step=selected, names=names), key="monitor_tradeoff")
    key = f"; {reference_key(names)} (after the final evaluation)" if names else ""
    st.caption(
        f"star: the selected step (where the run's model is from){key}. "
        "A low ECE far below the base model's accuracy, or with AUROC near 0.5 in the table, is "
        "a near-uniform forecast, not a calibrated one."
    )


def _bome(records: list[dict], selected: int | None, train: dict) -> None:
    """BOME's diagnostics: a health line per chart (training/bilevel_health.py: a declared
    rule over its last logged values, said in the line's tooltip), then the charts
    themselves behind one expander, each with what it means in words; a warning when the
    coupling never acted (then the run is alternating updates in disguise)."""
    if not run_view.series(records, "bome/q")[0]:
        return
    bome = recorded_bilevel(train)
    eta = bome.eta if bome else None
    if run_view.bome_summary(records, eta).get("inert"):
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
                        {title: run_view.series(records, f"bome/{key}")},
                        title,
                        log_y=log_scale and key in ("q", "lambda"),
                        selected_step=selected,
                        columns=2,
                    ),
                    key=f"monitor_bome_{key}",
                )
                col.caption(f"{define(key)} ({health[key].line})")


def _alpha(run_id: str, records: list[dict], active: bool, selected: int | None) -> None:
    """The head's tau per option over the steps, and tau and l at a chosen step; a vocab
    head shows statistics over the vocabulary instead. `run_id` names the step slider."""
    steps, taus = run_view.alpha_vectors(records, "tau")
    explained(
        "The calibration head (alpha) over the steps: tau, its temperature per option (above 1: less sure), and l, "
        "its shift per option.",
        "alpha",
        "tau",
        "l",
        "head scope",
    )
    if not steps:
        summary = {k: run_view.series(records, f"alpha/{k}") for k in ("tau_mean", "tau_min", "tau_max", "l_abs_mean")}
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
    l_steps, shifts = run_view.alpha_vectors(records, "l")
    if l_steps:
        c2.plotly_chart(alpha_bars(shifts[l_steps.index(chosen)], labels, chosen, "l"), key="monitor_l_bars")


def _results(run: RunDir, method: str, task: str) -> None:
    """The final evaluation, once results.json is written: the verdict row, which model to
    use and why, the post-hoc notes and every variant's metrics."""
    if run.has_results():
        st.subheader("Final evaluation")

        results = run.results()
        with st.container(key="monitor_verdict"):  # one line per evaluation set, before the rest
            verdict_block(results)
            verdict_caption()
        _verdict(results, method)
        rows = run_view.compare_rows([run])
        for note in run_view.posthoc_lines(results, notes_only=True):
            st.caption(note)  # e.g. too few S_V items to fit a temperature: say why the TS row is missing
        columns = _fitting_columns(table_columns(task))
        frame = pd.DataFrame([{k: r.get(k) for k in columns} for r in rows])
        with st.container(key="monitor_results"):  # a keyed box: the browser test measures the table's width in it
            st.dataframe(
                named(frame),
                hide_index=True,
                width="stretch",
                column_config=column_help(columns, frame["variant"] if len(frame) else ()),
                key="monitor_results_table",
            )
        if task == "mcqa":
            st.caption(
                "auroc: how well confidence separates right from wrong answers (0.5: not at all); aurc: "
                "area under the risk-coverage curve, the mean error rate when answering only the most "
                "confident questions (lower is better). ECE alone rewards a near-uniform forecast."
            )
        st.page_link("views/compare.py", label="Compare reliability diagrams", icon=":material/compare:")


def _fitting_columns(columns: list[str]) -> list[str]:
    """The metrics table's columns that fit at 1280 px (Compare's first choice); every
    column is on Compare, in its CSV and in its wide table."""
    keys = [c for c in columns if c in ("dataset", "variant")]
    return keys + run_view.default_columns([c for c in columns if c not in keys])


def _verdict(results: RunResults, method: str) -> None:
    """Which step the model is from and why, which calibrator to use (chosen on S_V, said
    plainly when the trained model does not win), and the evidence with 90% intervals."""
    line = advice.selection_line(results)
    if line:
        st.markdown(line)
    said = advice.recommendation_line(results, method)
    if said:
        (st.success if advice.method_recommended(results, method) else st.warning)(said)
        heldout_evidence(results)  # the recommendation's S_V evidence, with paired intervals
    rows = advice.evidence_rows(results, method)
    if rows and (line or said):
        frame = pd.DataFrame(rows)
        frame["recommended"] = frame["recommended"].map({True: "yes", False: ""})
        whole_cells(named(frame).to_dict("records"))  # "0.800 [0.600, 1.000]" cells: whole, not cut
        st.caption(
            "Evidence on the evaluation sets: each figure with its 90% bootstrap interval; `recommended` "
            "is the variant chosen on S_V.",
            help=column_meanings(help_texts(list(frame.columns))),
        )


def _records(run: RunDir) -> list[dict]:
    """The run's metrics through this session's MetricsTail: each poll parses only the lines
    appended since the last one (one run's records kept per session)."""
    tails = st.session_state.setdefault(MONITOR_METRICS_TAILS, {})
    tail = tails.get(run.run_id)
    if tail is None or tail.path != run.metrics_path:  # another run (or workspace): start afresh
        tails.clear()
        tail = tails[run.run_id] = MetricsTail(run.metrics_path)
    return tail.read()


def live_status(run: RunDir, started_active: bool) -> None:
    """The progress line, the selection so far and the controls, every POLL_SECONDS. When
    the run stops being active the whole page is drawn once more (charts, final results)."""
    files = run.read_files()  # status.json and config.json: one read of each per poll, passed on
    records, view = _records(run), run.state(files=files)
    if started_active and view.state not in ACTIVE:
        st.rerun()  # finished, failed or cancelled: one last full draw, then no more polling
    if view.state == DAMAGED:  # a file the page needs is unreadable: say which, offer what helps
        st.error(view.reason)
        _controls(run, view, files.config.launched_by if files.config is not None else None)
        return
    status, config = files.status, files.config
    if status is None or config is None:  # not damaged, so both were read: this is for the type checker
        return
    _header(records, view, status, config)
    _going(view, status.step, status.total_steps, _health(records, config))
    _controls(run, view, config.launched_by)


def live_charts(run: RunDir, started_active: bool, charts_every: float) -> None:
    """The curves and, once written, the final evaluation, every `charts_every` seconds;
    status.json and config.json read once and passed on."""
    files = run.read_files()
    state = run.state(files=files).state
    if state == DAMAGED:
        return
    if started_active:
        st.button(
            "Refresh the charts",
            key="monitor_refresh_charts",
            icon=":material/refresh:",
            help="A click redraws the charts now (it reruns only this part of the page).",
        )
        st.caption(
            f"While the run is active the charts redraw every {charts_every:.0f} s, the progress line "
            f"every {POLL_SECONDS:.0f} s."
        )
    if files.status is None or files.config is None:  # not damaged, so both were read
        return
    train = files.config.train
    _charts(run, _records(run), active=state in ACTIVE, selection=files.status.selection or {}, train=train)
    _results(run, files.config.train_method, run_view.task_in(train))


st.title("Monitor")
st.markdown(
    "One training run, live: how far it is, whether the algorithm is healthy, and, once it finishes, which model "
    "to use. Closing the page changes nothing for the run.",
    help=tooltip("calibrated stop", "selected step"),
)
run = pick_run()
# Poll while the job can still change; a finished run is drawn once.
started_active, charts_every = run.state().state in ACTIVE, chart_seconds()
st.fragment(run_every=POLL_SECONDS if started_active else None)(live_status)(run, started_active)
st.fragment(run_every=charts_every if started_active else None)(live_charts)(run, started_active, charts_every)
