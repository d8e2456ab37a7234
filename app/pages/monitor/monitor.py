"""Monitor: one run, live. The page polls the run directory (status.json, metrics.jsonl)
every few seconds; closing it changes nothing for the job."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Sequence
from typing import Any

import pandas as pd
import streamlit as st

from app.pages.monitor.charts import chart_tabs
from app.server.gate import studio_access, this_browser, this_session
from app.widgets.keys import MONITOR_METRICS_TAILS, MONITOR_RUN
from app.widgets.state import code, describe_error
from app.widgets.verdict_view import column_meanings, heldout_evidence, verdict_block, verdict_caption, whole_cells
from app.widgets.words import column_help, helps, named
from calm_core.access.rules import OWNER_ONLY, may_cancel
from calm_core.calibration.metrics.columns import help_texts, table_columns
from calm_core.estimate.remaining import FINAL, MEASURED_STEPS, Remaining, remaining, remaining_text, schedule_of
from calm_core.glossary import tooltip
from calm_core.launch import resume_refusal_for, resume_run
from calm_core.results import advice, verdict
from calm_core.results import run_facts as run_facts
from calm_core.results import tables as run_tables
from calm_core.results.fast_path_view import fast_path_rows, setting_choice_lines
from calm_core.runs.choices_record import RunChoices
from calm_core.runs.listing import list_runs, run_label
from calm_core.runs.metrics_lines import MetricsTail
from calm_core.runs.queue import cancel
from calm_core.runs.records import RunConfig, RunResults, RunStatus
from calm_core.runs.rundir import RunDir
from calm_core.runs.state import DAMAGED, WAITING_OR_ACTIVE, RunState, ShownState
from calm_core.training.bilevel_health import Health, bome_health, health_summary
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


ACTIVE = WAITING_OR_ACTIVE


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
        st.page_link("../pages/train/train.py", label="Go to Train", icon=":material/model_training:")
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


def _header(records: list[dict[str, Any]], view: ShownState, status: RunStatus, config: RunConfig) -> None:
    """What the run is, its progress and state, the calibrated stop so far and its data
    notes; from the status and config this poll read (passed in, never read again)."""
    total, step = status.total_steps, status.step
    left = remaining(records, status, config.estimate, time.time(), schedule_of(config.train))
    train = config.train
    method = config.train_method or "?"
    scope = run_facts.head_scope(train) if train else "?"
    st.markdown(
        f"**{verdict.variant_label(method)}** on {code(config.label('train_data') or '?')} "
        f"(head scope {code(scope)}, model {code(config.label('model') or '?')})",
        help=helps(method, "head scope", scope, "S_T"),
    )
    reason = view.reason if view.reason.startswith(view.state) else f"{view.state}: {view.reason}"
    _progress(view, left, min(1.0, step / total) if total else 0.0, reason)
    if view.state == RunState.FAILED and status.error:
        st.error(status.error)
    selection = status.selection
    line = advice.selection_status_line(selection)
    if line and selection is not None:  # the calibrated stop (training/selection.py): the step so far
        rule = selection.rule_text
        terms = ("selected step", "calibrated stop", f"rule {selection.rule or 'best'}")
        st.caption(line, help=(helps(*terms) or "") + (f"\n\nThe rule: {rule}" if rule else ""))
    _data_notes(status.choices)
    _setting_choices(status.choices)
    _fast_paths(status.choices)
    for name, n in status.items_cut_to_context.items():
        st.caption(
            f"{n} items of {name} were longer than the model's context and were cut from the left "
            "(as lm-evaluation-harness does)."
        )


def _progress(view: ShownState, left: Remaining, fraction: float, reason: str) -> None:
    """The progress bar and its line: the steps done, or during the final evaluation its own
    passes; the time left from the launch estimate until the run's pace is measured
    (estimate/remaining.py), with what it rests on and the heartbeat in the tooltip."""
    said = remaining_text(left) if view.state == RunState.RUNNING else ""
    if left.basis == FINAL and left.total and view.state == RunState.RUNNING:
        fraction = left.done / left.total
    st.progress(fraction, text=reason + (f" · {said}" if said else ""))
    if view.state == RunState.RUNNING:
        st.caption(
            "Time left: the launch estimate until the run's own pace is measured "
            f"({MEASURED_STEPS} steps after step 1), then that pace to where the calibrated stop would end the run, "
            "plus the final evaluation as estimated; the final evaluation then counts each stage's passes.",
            help=tooltip("heartbeat", "frozen-layer cache"),
        )


def _going(view: ShownState, step: int, total: int | None, health: dict[str, Health]) -> None:
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
    elif view.state == RunState.FINISHED:
        text = "**Finished**: which model to use, and why, is under *Final evaluation* below" + (
            f"; {checks}" if checks else ""
        )
    elif view.state == RunState.CANCELLED:
        text = f"**Cancelled** at {where}: **Resume** continues the same curves"
    else:
        text = f"**{view.state.capitalize()}** at {where}"
    st.markdown(text, help=tooltip("BOME", "healthy") if health else None)


def _health(records: list[dict[str, Any]], config: RunConfig) -> dict[str, Health]:
    """Each BOME chart's health line from the run's log and its eta ({} for a method without BOME)."""
    bome = recorded_bilevel(config.train)
    return bome_health(records, bome.eta if bome else None)


def _data_notes(choices: RunChoices) -> None:
    """Rows the run's loaders rejected and items cut to the model's context: said, not hidden."""
    for name, record in choices.rejected_rows.items():
        with st.expander(f"{record.n_rejected} of {record.n_rows} rows of {name} were rejected"):
            st.dataframe(pd.DataFrame(list(record.rejected)), hide_index=True)


def _setting_choices(choices: RunChoices) -> None:
    """The scoring rule and the model's precision the job settled on, each with its reason."""
    lines = [f"**{what}**: {text}" for what, text in setting_choice_lines(choices)]
    if lines:
        st.caption(" · ".join(lines))


def _fast_paths(choices: RunChoices) -> None:
    """Which fast paths the run used and why (measured against the model's own forward)."""
    rows = fast_path_rows(choices.fast_paths)
    if rows:
        used = ", ".join(row["fast path"] for row in rows if row["used"] == "yes") or "none"
        with st.expander(f"Fast paths used: {used}"):
            st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")


def _controls(run: RunDir, view: ShownState, launched_by: str | None) -> None:
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
        rows = run_tables.compare_rows([run])
        for note in run_tables.posthoc_lines(results, notes_only=True):
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
        st.page_link("../pages/compare/compare.py", label="Compare reliability diagrams", icon=":material/compare:")


def _fitting_columns(columns: Sequence[str]) -> list[str]:
    """The metrics table's columns that fit at 1280 px (Compare's first choice); every
    column is on Compare, in its CSV and in its wide table."""
    keys = [c for c in columns if c in ("dataset", "variant")]
    return keys + run_tables.default_columns([c for c in columns if c not in keys])


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


def _records(run: RunDir) -> list[dict[str, Any]]:
    """The run's metrics through this session's MetricsTail: each poll parses only the lines
    appended since the last one (one run's records kept per session)."""
    tails: dict[str, MetricsTail] = st.session_state.setdefault(MONITOR_METRICS_TAILS, {})
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
    chart_tabs(run, _records(run), active=state in ACTIVE, selection=files.status.selection, train=train)
    _results(run, files.config.train_method, train.task)


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
