"""Compare's section on selective answering: above which confidence may a variant answer
alone, how often is it then wrong, and which options must a person still check.

The reader picks a run, a variant, a target error (10% by default), the guarantee and the
sets' coverage; the threshold and the sets are chosen on S_V (results/selective.py, the
same call as `calm selective`) and measured on every evaluation set beside the model as it
is. A held-out set too small for the target is refused with its reason. The threshold can be
saved with the run (selective.json) for the export.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from app.server.gate import studio_access, this_session
from app.widgets.state import describe_error, plain
from app.widgets.verdict_view import whole_cells
from app.widgets.words import label_of
from calm_core.calibration.selective import CRC, DEFAULT_DELTA, LTT, LTT_ANSWERED
from calm_core.glossary import tooltip
from calm_core.results import selective as sel
from calm_core.results.verdict import variant_label
from calm_core.runs.rundir import RunDir

TERMS = ("selective answering", "threshold", "target error", "exchangeable", "conformal risk control", "LAC")
RULE_TERMS = ("conformal risk control", "Learn then Test", "error among all", "error among answered")
SURE = f"{1 - DEFAULT_DELTA:.0%}"  # the ltt rules' probability; `calm selective --delta` changes it
RULE_NAMES = {
    LTT: f"error among all, with {SURE} probability (Learn then Test)",
    CRC: "error among all, on average (conformal risk control)",
    LTT_ANSWERED: f"error among answered, with {SURE} probability (Learn then Test)",
}


def request_form(run: RunDir, stored: list[str]) -> sel.SelectiveRequest:
    """The reader's variant, target error, guarantee and coverage, as a request."""
    c1, c2, c3, c4 = st.columns(4)
    first = sel.default_variant(run)
    variant = c1.selectbox(
        "Variant",
        stored,
        index=stored.index(first) if first in stored else 0,
        format_func=variant_label,
        key="selective_variant",
    )
    target = c2.number_input(
        "Target error (%)",
        min_value=1,
        max_value=50,
        value=10,
        step=1,
        key="selective_target",
        help=tooltip("target error"),
    )
    rule = c3.radio(
        "Guarantee", list(RULE_NAMES), format_func=RULE_NAMES.get, key="selective_rule", help=tooltip(*RULE_TERMS)
    )
    coverage = c4.number_input(
        "Sets' coverage (%)",
        min_value=50,
        max_value=99,
        value=None,  # empty: 1 - target error, the library's default (SelectiveRequest.set_coverage)
        placeholder=f"{100 - int(target)} (100 - target)",
        step=1,
        key="selective_coverage",
        help=tooltip("LAC", "coverage"),
    )
    share = None if coverage is None else coverage / 100.0
    return sel.SelectiveRequest(variant, target / 100.0, rule, DEFAULT_DELTA, share)


def show_report(report: sel.SelectiveReport) -> None:
    """The guarantee and its assumption, each variant's threshold on S_V, and the table."""
    st.markdown(plain(sel.guarantee_text(report.request)), help=tooltip(*TERMS))
    st.caption(plain(sel.ASSUMPTION))
    for choice in report.choices.values():
        said = sel.choice_line(choice)  # it opens with the variant's name: "the model as it is: ..."
        line = plain(said[:1].upper() + said[1:])
        if choice.threshold is None:
            st.warning(line)
        else:
            st.markdown(line)
    rows = sel.table_rows(report)
    if rows:
        whole_cells(rows)
        st.caption(
            "Each figure with its 90% interval (Wilson for shares, bootstrap for set size), on items the threshold "
            "was not chosen on. The model as it is gets its own threshold, chosen the same way.",
            help=tooltip(*sel.COLUMNS, "threshold", "answers nothing", "evaluation set"),
        )
        for note in (sel.above_target_note(report), sel.coverage_note(report), sel.sv_only_note(report)):
            if note is not None:
                st.caption(plain(note))


def save_button(run: RunDir, report: sel.SelectiveReport) -> None:
    """Store the variant's threshold with the run: the export reads selective.json."""
    choice = report.choices[report.request.variant]
    access, session = studio_access(), this_session()
    refusal = sel.save_refusal(run, access, session)  # another session's run: its export is not ours to change
    if refusal:
        st.caption(refusal)
    if st.button(
        "Use this threshold in the export",
        key="selective_save",
        disabled=choice.threshold is None or refusal is not None,
        help=refusal,
    ):
        try:
            record = sel.save_choice(run, report, access, session)
        except Exception as exc:
            st.error(describe_error(exc))
        else:
            st.success(f"Saved with the run: threshold {sel.threshold_text(choice.threshold)} ({record['rule']}).")


def selective_section(ids: list[str], labels: dict[str, Any]) -> None:
    """The section: one run at a time, its stored S_V probabilities or why there are none."""
    st.subheader("Answer alone above a confidence threshold")
    st.caption(
        "Which questions can the model answer alone, and how often is it then wrong? A threshold chosen on S_V "
        "with a guarantee, and sets of options that hold the right answer, measured on every evaluation set.",
        help=tooltip(*TERMS),
    )
    run = RunDir.at(st.selectbox("Run", ids, format_func=label_of(labels), key="selective_run"))
    stored = sel.heldout_variants(run)
    if not stored:
        st.caption("This run stored no S_V probabilities (it finished before selective answering, or without S_V).")
        return
    try:
        report = sel.selective_report(run, request_form(run, stored))
    except Exception as exc:
        st.error(describe_error(exc))
        return
    show_report(report)
    save_button(run, report)
