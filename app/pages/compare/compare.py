"""Compare: reliability diagrams of base, TS and calibrated variants of finished runs,
in and out of domain, with the metrics table and downloads. It opens with the verdict
row of each evaluation set (verdict.verdict_table); a variant a run could not make says
why where its diagram and its row would be. Open-answer runs add a
confidence histogram and a table of their sampled answers."""

from __future__ import annotations

from typing import Any, NamedTuple

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from app.pages.compare.group_view import group_section
from app.pages.compare.selective_view import selective_section
from app.server.gate import studio_access, this_browser, this_session
from app.widgets.charts import confidence_histogram, figure_png, open_answers_table
from app.widgets.keys import COMPARE_MORE_DONE
from app.widgets.reliability_view import BIN_CHOICES, bins_label, compare_diagrams, ece_bins
from app.widgets.state import code, describe_error
from app.widgets.verdict_view import heldout_evidence, verdict_block, verdict_caption
from app.widgets.words import column_help, helps, label_of, named, variant_help, variant_names
from calm_core.access.rules import Access, write_refusal
from calm_core.calibration.metrics.columns import metric_names, table_columns
from calm_core.data.entries import list_datasets
from calm_core.export.folder import export_zip, recommended_export
from calm_core.glossary import tooltip
from calm_core.launch import launch_evaluation
from calm_core.results import advice, verdict
from calm_core.results import predictions as run_predictions
from calm_core.results import tables as run_tables
from calm_core.results.added import evaluate_run, run_eval_limit
from calm_core.results.report import run_report_html
from calm_core.runs.lifecycle import RunState
from calm_core.runs.listing import list_runs, run_label
from calm_core.runs.records import RunResults
from calm_core.runs.rundir import RunDir
from calm_core.scoring.evaluate import wide_table

OPEN_MEANING = (
    "Open answers: **confidence** is Sem1, the share of the n sampled answers that fall in the most "
    "common meaning cluster, and **correct** means that cluster's answer matches an accepted alias "
    "(normalised exact match)."
)


class Chosen(NamedTuple):
    """The finished runs the reader chose, read once: every section below draws from these."""

    ids: list[str]  # as chosen, in the multiselect's order
    labels: dict[str, str]  # run id -> label, for every finished run
    runs: list[RunDir]
    rows: list[dict[str, Any]]  # run_tables.compare_rows: every run's result rows, added sets included
    tasks: dict[str, str]  # run id -> mcqa | openqa
    results: dict[str, RunResults]  # run id -> results.json
    methods: dict[str, str]  # run id -> the trained method

    @property
    def any_open(self) -> bool:
        """Some run gives open answers: its captions say what confidence means there."""
        return "openqa" in self.tasks.values()

    @property
    def all_open(self) -> bool:
        """Every run gives open answers: the wide table takes the open-answer columns."""
        return all(t == "openqa" for t in self.tasks.values())


class DiagramView(NamedTuple):
    """The diagrams' controls: which evaluation set, which variants, how many bins, which layout."""

    datasets: list[str]
    dataset: str
    shown: list[str]
    n_bins: int  # the ECE's
    layout: str
    diagram_bins: int  # reliability_view.BIN_CHOICES: AUTO (equal-mass, from the item count), 10 or 15


Owners = dict[tuple[str, str], tuple[RunDir, dict[str, Any]]]  # (dataset, variant) -> its run and row


def choose_runs() -> tuple[list[str], dict[str, str]]:
    """The runs to compare, newest finished first; the page stops when there is none, or
    none is chosen. Returns the chosen ids and every finished run's label."""
    finished = [r for r in list_runs() if r.state == RunState.FINISHED and RunDir(r.path).has_results()]
    if not finished:
        st.info("No finished runs yet. Launch one on the **Train** page; its final evaluation lands here.")
        st.stop()
    labels = {r.run_id: run_label(r) for r in finished}
    chosen = st.multiselect(
        "Runs", list(labels), default=[finished[0].run_id], format_func=label_of(labels), key="compare_runs"
    )
    if not chosen:
        st.stop()
    return chosen, labels


def read_chosen(ids: list[str], labels: dict[str, str]) -> Chosen:
    """Each chosen run's rows, task, results and method, read once; a run that cannot be
    read is said in one line and stops the page."""
    try:
        runs = [RunDir.at(run_id) for run_id in ids]
        rows = run_tables.compare_rows(runs)
        tasks = {run.run_id: run.config.train.task for run in runs}
    except Exception as exc:
        st.error(describe_error(exc))
        st.stop()
    try:
        results = {run.run_id: run.results() for run in runs}
        methods = {run.run_id: run.config.train_method for run in runs}
    except Exception as exc:
        st.error(describe_error(exc))
        st.stop()
    return Chosen(ids, labels, runs, rows, tasks, results, methods)


def verdicts(chosen: Chosen) -> None:
    """The verdict row, one line per evaluation set and run: the answer before the evidence."""
    with st.container(key="compare_verdict"):
        for run in chosen.runs:
            verdict_block(chosen.results[run.run_id], chosen.labels[run.run_id] if len(chosen.runs) > 1 else None)
        verdict_caption()


def recommended_variants(chosen: Chosen) -> list[str]:
    """What each chosen run recommends (its variant name; "base" when it keeps the model)."""
    return [chosen.results[run.run_id].recommended or "" for run in chosen.runs]


def diagram_controls(chosen: Chosen) -> DiagramView:
    """The evaluation set, variants, bins and layout of the reliability diagrams; with open
    answers, what confidence and correctness mean there."""
    datasets = list(dict.fromkeys(r["dataset"] for r in chosen.rows))
    variants = list(dict.fromkeys(r["variant"] for r in chosen.rows))
    c1, c2, c3 = st.columns([6, 2, 2])  # Bins: wide enough for "15 equal-width"
    dataset = c1.selectbox("Evaluation set", datasets, key="compare_dataset")
    shown = st.multiselect(  # a row of its own: the chips of four variants named in full fit side by side
        "Variants",
        variants,
        default=run_tables.default_variants(variants, recommended_variants(chosen)),
        key="compare_variants",
        format_func=label_of(variant_names(variants)),
        help=variant_help(variants),
    )
    diagram_bins = c2.selectbox(
        "Bins",
        BIN_CHOICES,
        key="compare_bins",
        format_func=bins_label,
        help="The diagrams' confidence bins: equal-mass, as many as the item count supports (about its square "
        "root, 3 to 15), or the ECE's own equal-width bins (15 the project's, 10 the paper's).",
    )
    layout = c3.radio("Layout", ["overlay", "side by side"], key="compare_layout")
    if chosen.any_open:
        st.caption(
            OPEN_MEANING
            + " The diagrams plot Sem1 confidence against that correctness."
            + ("" if chosen.all_open else " Multiple-choice runs: confidence is the top option's probability.")
        )
    return DiagramView(datasets, dataset, shown, ece_bins(diagram_bins), layout, diagram_bins)


def owners(rows: list[dict[str, Any]]) -> Owners:
    """Which run and row each (evaluation set, variant) comes from: its predictions' owner."""
    return {(r["dataset"], r["variant"]): (RunDir.at(r["run"]), r) for r in rows}


def diagrams(chosen: Chosen, view: DiagramView, owner: Owners) -> tuple[list[go.Figure], dict[str, Any]]:
    """The reliability diagrams of the shown variants on the chosen set (a variant whose
    predictions cannot be read is a warning, not a failure), then why a variant is missing.
    Returns the figures (for the downloads) and each variant's confidences (for open answers)."""
    curves = {}
    for variant in view.shown:
        if (view.dataset, variant) not in owner:
            continue
        try:
            curves[variant] = run_predictions.row_predictions(*owner[(view.dataset, variant)])
        except Exception as exc:
            st.warning(describe_error(exc))
    figures = compare_diagrams(curves, view.dataset, view.diagram_bins, view.layout) if curves else []
    for run in chosen.runs:  # a variant the run could not make: why, where its diagram would be
        for note in advice.missing_variant_notes(chosen.results[run.run_id]).values():
            st.info(note)
    return figures, {variant: confidence for variant, (confidence, _) in curves.items()}


def open_answers(chosen: Chosen, view: DiagramView, owner: Owners, confidences: dict[str, Any]) -> None:
    """Open-answer variants on the chosen set: their Sem1 confidence histogram and one
    variant's sampled answers, grouped by meaning."""
    dataset = view.dataset
    open_variants = [
        v for v in view.shown if (dataset, v) in owner and chosen.tasks.get(owner[(dataset, v)][0].run_id) == "openqa"
    ]
    if not open_variants:
        return
    st.subheader("Open answers")
    st.plotly_chart(
        confidence_histogram(
            {v: confidences[v] for v in open_variants if v in confidences},
            f"{dataset}: Sem1 confidence per variant",
            n_bins=view.n_bins,
            names=variant_names(open_variants),
        ),
        key="compare_confidence_histogram",
    )
    st.caption("Sem1 takes the values k / n for n samples: a spike at 1.0 is a model whose samples all agree.")
    variant = st.selectbox(
        "Sampled answers of",
        open_variants,
        key="compare_open_variant",
        format_func=label_of(variant_names(open_variants)),
    )
    try:
        run, row = owner[(dataset, variant)]
        frame = run_predictions.row_open_answers(run, row)
    except Exception as exc:
        st.warning(describe_error(exc))
        return
    if frame is not None:  # a DataFrame shows model text literally (no Markdown)
        st.dataframe(open_answers_table(frame), hide_index=True, width="stretch", key="compare_open_table")
        st.caption(
            "Samples by cluster: each meaning cluster's first answer and how many samples it holds, "
            "largest first (the first is the Sem1 answer); `correct` judges that answer."
        )


def which_model(chosen: Chosen) -> None:
    """Per run: the selected step and why, and the recommendation (chosen on S_V)."""
    st.subheader("Which model to use")
    for run in chosen.runs:
        results, method = chosen.results[run.run_id], chosen.methods[run.run_id]
        if len(chosen.runs) > 1:
            st.markdown(code(chosen.labels[run.run_id]))
        line = advice.selection_line(results)
        st.markdown(line or "This run has no calibrated stop (its model is from its last step).")
        said = advice.recommendation_line(results, method)
        if said:
            (st.success if advice.method_recommended(results, method) else st.warning)(said)
            heldout_evidence(results)


def metrics_table(chosen: Chosen, view: DiagramView) -> pd.DataFrame:
    """Every variant's metrics on one evaluation set, the columns the reader picks, the notes
    that say what a figure means or why a row is missing, and the paper's wide layout.
    Returns the full table (every set, every column) for the CSV download."""
    st.subheader("Metrics")
    rows, datasets = chosen.rows, view.datasets
    # both kinds of run: the union of their columns, in one order
    all_columns = [*table_columns(*dict.fromkeys(chosen.tasks.values())), "run"]
    frame = pd.DataFrame([{k: r.get(k) for k in all_columns} for r in rows])
    c1, c2 = st.columns([1, 3])
    table_set = c1.selectbox(
        "Evaluation set", datasets, index=datasets.index(view.dataset), key="compare_table_dataset"
    )
    metric_choices = [c for c in all_columns if c not in ("dataset", "variant", "run")]
    picked = c2.multiselect(
        "Columns",
        metric_choices,
        default=run_tables.default_columns(metric_choices),
        key="compare_columns",
        help="The full table is in the CSV and in the expander below. Each column's header says what it "
        "measures.\n\n" + (helps(*metric_choices) or ""),
    )
    keys = ["variant", *picked, *(["run"] if len(chosen.runs) > 1 else [])]
    shown = frame[frame["dataset"] == table_set][keys]
    with st.container(key="compare_metrics"):  # a keyed box: the browser test measures the table's width in it
        st.dataframe(
            named(shown),
            hide_index=True,
            width="stretch",
            column_config=column_help(keys, shown["variant"]),
            key="compare_metrics_table",
        )
    st.caption(
        "ECE: 15 equal-width bins; ece_10: the paper's 10. The first evaluation set of a run is its in-domain set."
    )
    for run in chosen.runs:
        for name, note in advice.missing_variant_notes(chosen.results[run.run_id]).items():
            st.caption(f"No `{name}` row: {note}")  # where the variant's row would be
    if chosen.any_open:
        st.caption(
            "Open answers: acc is the greedy answer's exact match, sem_acc the Sem1 (modal) answer's; ece, ece_10 "
            "and auroc are on (Sem1 confidence, modal answer correct); sem2_ece_10 on the split-half Sem2 "
            "confidence; seq_ece_10 on the greedy answer's sequence probability."
        )
    with st.expander("Every evaluation set side by side (the paper's layout)"):
        wide = [r for r in rows if r["variant"] in view.shown] or rows
        st.markdown(
            wide_table(
                [{**r, "variant": verdict.variant_label(r["variant"])} for r in wide],  # named in full
                metric_names=metric_names("paper_openqa" if chosen.all_open else "paper_mcqa"),
            )
        )
    return frame


def downloads(frame: pd.DataFrame, figures: list[go.Figure], dataset: str) -> None:
    """The table as CSV and the first diagram as HTML or PNG. The figure's files are built
    when clicked (plotly.js inline, ~5 MB, so the file opens offline; PNG through kaleido)."""
    c1, c2 = st.columns(2)
    c1.download_button(
        "Download the table (CSV)",
        frame.to_csv(index=False),
        file_name="calm_compare.csv",
        mime="text/csv",
        key="compare_csv",
    )
    if not figures:
        return
    stem, figure = f"reliability_{dataset.replace('/', '_')}", figures[0]
    # Built when clicked; see on_click="ignore" in share() for why.
    c2.download_button(
        "Download the figure (HTML)",
        lambda: figure.to_html(include_plotlyjs=True),
        file_name=f"{stem}.html",
        mime="text/html",
        key="compare_html",
        on_click="ignore",
    )
    if c2.checkbox("Also as PNG (renders with kaleido, a few seconds)", key="compare_png"):
        png, why = figure_png(figure)
        if png is None:
            c2.caption(why)
        else:
            c2.download_button(
                "Download the figure (PNG)", png, file_name=f"{stem}.png", mime="image/png", key="compare_png_download"
            )


def evaluate_more(chosen: Chosen) -> None:
    """A finished run on more sets after training (`calm eval --run`): its rows are stored
    with the run and come back in every table above as `<set> (added)`."""
    st.subheader("Evaluate on more data")
    st.caption(
        "A finished run on any set, after training: base, its post-hoc calibrators as fitted on S_V and the "
        "trained model at its selected step, scored as its final evaluation scores (`calm eval --run` does the "
        "same). The rows are stored with the run and show above as `<set> (added)`, with their data's fingerprint."
    )
    more_run = st.selectbox("Run", chosen.ids, format_func=label_of(chosen.labels), key="compare_more_run")
    more_kind = "open" if chosen.tasks[more_run] == "openqa" else "mc"
    more_sets = st.multiselect("Datasets", [e.name for e in list_datasets(kind=more_kind)], key="compare_more_sets")
    more_limit = st.number_input(
        "Items per set (0: all)",
        min_value=0,
        value=run_eval_limit(RunDir.at(more_run)) or 0,
        help="the run's own evaluation sets had this many; training questions are left out",
        key="compare_more_limit",
    )
    access, session = studio_access(), this_session()
    refusal = write_refusal(access, session, RunDir.at(more_run).config.launched_by)
    if refusal:
        st.caption(refusal)
    if st.button("Evaluate", key="compare_more_go", disabled=not more_sets or refusal is not None, help=refusal):
        try:
            done = _evaluate(RunDir.at(more_run), more_sets, int(more_limit) or None, access, session)
        except Exception as exc:
            st.error(describe_error(exc))
        else:
            st.session_state[COMPARE_MORE_DONE] = done
            st.rerun()
    if st.session_state.get(COMPARE_MORE_DONE):
        st.success(st.session_state.pop(COMPARE_MORE_DONE))
    for line in run_tables.added_lines(chosen.rows):
        st.caption(code(line))


def _evaluate(run: RunDir, sets: list[str], limit: int | None, access: Access, session: str | None) -> str:
    """Evaluate `run` on `sets` and say what happened. A shared studio (not the admin's) queues
    it as a job under the training quotas (launch.launch_evaluation), so no click runs a
    model in the server's process for everyone; a local studio scores here, as it waits."""
    if access.shared and not access.admin:
        job, started = launch_evaluation(run, sets, limit, access, session, this_browser())
        return (
            f"Queued as job {job.run_id} ({'started' if started else 'it starts when a job slot frees up'}); "
            "its rows show in the table above, marked (added), once it finishes (the Monitor page follows it)."
        )
    with st.spinner("Loading the run's model and scoring (minutes for a large model or set)"):
        added = evaluate_run(run, sets, limit)
    return f"Added {len(added)} rows on {', '.join(sets)} to {run.run_id}; they are in the table above, marked (added)."


def share(chosen: Chosen) -> None:
    """One run's HTML report and its calibrated model as a zip (and the recommended variant's)."""
    st.subheader("Share a run")
    run_id = st.selectbox("Run", chosen.ids, format_func=label_of(chosen.labels), key="compare_share_run")
    c1, c2 = st.columns(2)
    # Callables: the report and the zip are built when clicked, not on every rerun of the page.
    # on_click="ignore": a rerun would give every download button a new file id, and a second
    # click that still holds the old one then downloads nothing.
    c1.download_button(
        "Report (HTML)",
        lambda: run_report_html(RunDir.at(run_id)),
        file_name=f"{run_id}.html",
        mime="text/html",
        key="compare_report",
        on_click="ignore",
    )
    c2.download_button(
        "Calibrated model (zip)",
        lambda: export_zip(RunDir.at(run_id)),
        file_name=f"{run_id}-calibrated.zip",
        mime="application/zip",
        key="compare_export",
        on_click="ignore",
    )
    recommended = recommended_export(RunDir.at(run_id))
    if recommended is not None and not verdict.keeps_model(chosen.results[run_id]):  # "keep": nothing to download
        st.download_button(
            f"Recommended model: {verdict.variant_label(recommended)} (zip)",
            lambda: export_zip(RunDir.at(run_id), "recommended"),
            file_name=f"{run_id}-{recommended}.zip",
            mime="application/zip",
            key="compare_export_recommended",
            on_click="ignore",
        )
    st.caption(
        "The report is one HTML file (settings, this table, reliability diagrams, alpha) that opens offline. "
        "The zip loads with transformers + peft alone: the adapter, the head as `calm_head.py`, and a README "
        "with the code (`calm export RUN DIR` writes the same folder)."
    )


st.title("Compare")
st.markdown(
    "Finished runs side by side on each evaluation set. It opens with the answer: the verdict row says which "
    "variant is best calibrated, flags anything that went wrong, and what to use (chosen on S_V); the "
    "reliability diagrams and the metrics below are the evidence.",
    help=tooltip("variant", "S_V", "evaluation set"),
)
chosen = read_chosen(*choose_runs())
verdicts(chosen)
view = diagram_controls(chosen)
owner = owners(chosen.rows)
figures, confidences = diagrams(chosen, view, owner)
open_answers(chosen, view, owner, confidences)
which_model(chosen)
group_section(view.dataset, view.shown, owner, view.n_bins, view.diagram_bins)
frame = metrics_table(chosen, view)
downloads(frame, figures, view.dataset)
evaluate_more(chosen)
with st.container(key="compare_selective"):  # keyed: the story walk reads its threshold and table
    selective_section(chosen.ids, chosen.labels)
share(chosen)
