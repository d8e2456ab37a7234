"""The Data page's "Results of lm-evaluation-harness": a model evaluated elsewhere, brought
in as its `--log_samples` files (calm_core/scoring/lm_eval_samples.py).

A local studio reads a folder on this machine (the harness's --output_path) or an uploaded
samples file. A shared studio opens no path a user types (access/rules.py): it takes the
upload only, which the upload route's budgets bound (app/server/upload_quota.py: one file a
session, so it replaces a dataset upload in progress), and whose lines the readers'
budgets bound (data/limits.py `MAX_ROW_BYTES`). The section shows what each task holds
under both of the harness's forms and the `calm eval --from-lm-eval` line that calibrates it.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from app.pages.data.upload_cache import once
from app.pages.data.upload_cache import problem as _problem
from app.server.gate import studio_access
from app.widgets.state import plain
from calm_core.glossary import tooltip
from calm_core.scoring.evaluate import result_row
from calm_core.scoring.lm_eval_samples import FORMS, HarnessTask, read_harness_folder, read_samples_bytes

PARSED = "data_lm_eval_parsed"  # session state: the samples read, keyed by the path or the upload's file id
SUMMARY_COLUMNS = ("task", "form", "scoring", "n", "rejected", "acc", "harness acc", "ece", "confidence", "subjects")


def summary_rows(tasks: dict[str, HarnessTask]) -> list[dict[str, Any]]:
    """Per task and per form (acc, acc_norm): its items, accuracy beside the harness's own,
    ECE and mean confidence of the untouched scores. A task with no readable row shows its count only."""
    rows = []
    for name, task in tasks.items():
        for metric, form in FORMS.items():
            row: dict[str, Any] = {"task": name, "form": metric, "scoring": form.rule, "n": len(task)}
            row["rejected"] = len(task.rejected)
            row["harness acc"] = task.reported.get(metric)
            row["subjects"] = len({s for s in task.subjects if s})
            if len(task):
                summary = result_row(task.scores(metric), name, "base")
                row.update({key: summary[key] for key in ("acc", "ece", "confidence")})
            rows.append(row)
    return rows


def _read_folder(path: str) -> dict[str, HarnessTask] | None:
    """A local studio's folder of harness output, read once per path (None: nothing typed or an error shown)."""
    if not path.strip():
        return None
    tasks, error = once(PARSED, ("path", path), lambda: _safely(lambda: read_harness_folder(path.strip())))
    if error:
        st.error(error)
    return tasks


def _read_upload(upload: Any) -> dict[str, HarnessTask] | None:
    """An uploaded samples file, read once per file."""

    def read() -> dict[str, HarnessTask]:
        task = read_samples_bytes(upload.getvalue(), upload.name)
        return {task.task: task}

    tasks, error = once(PARSED, ("upload", upload.file_id), lambda: _safely(read))
    if error:
        st.error(error)
    return tasks


def _safely(read: Any) -> tuple[dict[str, HarnessTask] | None, str | None]:
    try:
        return read(), None
    except Exception as exc:  # shown in the reader's words, never a traceback
        return None, _problem(exc)


def _show(tasks: dict[str, HarnessTask], where: str) -> None:
    """The summary table, rejected rows, and the command that calibrates these samples."""
    table = pd.DataFrame(summary_rows(tasks), columns=list(SUMMARY_COLUMNS))
    st.caption(
        "Each task under both forms, the untouched scores: accuracy beside the one the harness wrote, ECE, "
        "mean confidence.",
        help=tooltip("acc", "ECE", "confidence", "TS", "vector scaling"),
    )
    st.dataframe(table, hide_index=True, width="stretch", key="data_lm_eval_table")
    rejected = [error for task in tasks.values() for error in task.rejected]
    if rejected:
        with st.expander(f"Why {len(rejected)} sample line{'s were' if len(rejected) != 1 else ' was'} rejected"):
            st.table(pd.DataFrame({"row": [plain(e) for e in rejected[:200]]}), hide_index=True)
    for task in tasks.values():
        for metric in FORMS:
            why = task.disagreement(metric)
            if why:
                st.warning(plain(why))
    names = list(tasks)
    fit = f" --fit-ts-on {names[0]}" if len(names) > 1 else ""
    st.caption(
        "Calibrate them: temperature scaling and vector scaling fitted on one task, every other task "
        "evaluated, `--save-preds` for the reliability diagrams and selective thresholds:"
    )
    st.code(f"calm eval --from-lm-eval {where}{fit} --json results.json --save-preds preds", language=None)


def lm_eval_section() -> None:
    """Bring lm-evaluation-harness samples: a folder (local studio) or a samples file."""
    st.subheader("Results of lm-evaluation-harness")
    st.caption(
        "A model too large for this machine: run `lm_eval ... --log_samples --output_path DIR` where the model "
        "runs, then bring DIR here. Each multiple-choice question's per-choice log-likelihoods become the "
        "studio's option scores in both of the harness's forms: their sum (our cloze rule) and the sum divided "
        "by each choice's length in characters (the harness's acc_norm)."
    )
    shared = studio_access().shared
    tasks, where = None, "DIR"
    if not shared:
        path = st.text_input("Folder on this machine (the harness's --output_path)", key="data_lm_eval_dir")
        tasks, where = _read_folder(path), path.strip() or "DIR"
    else:
        st.caption("A shared studio opens no folder on the server: upload a samples_<task>_<date>.jsonl file.")
    upload = st.file_uploader("or a samples file", type=["jsonl"], key="data_lm_eval_upload")
    if upload is not None:
        tasks, where = _read_upload(upload), "DIR"
    if tasks:
        _show(tasks, where)
