"""The metric columns of every results table, declared once.

A result row (`calm eval --json`, results.json) holds many keys; a table shows some of
them. Each `Column` says what a key is (label, format, direction) and which tables show
it; a table's columns are the identity columns then, in the order of COLUMNS below,
every metric column that names it:

    table_columns("mcqa")            # ("dataset", "variant", "n", "acc", "ece", "ece_10", ...)
    table_columns("mcqa", "openqa")  # a Compare of both kinds of run: the union, same order
    cell("acc", 0.51234)             # "0.5123"

Tables (TABLES says which screen each is): "mcqa" and "openqa" are the results of runs
(Monitor, Compare, the HTML report, `calm compare`, the export's README) and of `calm
eval --task openqa`; "mcqa_eval" is what `calm eval` prints (mce in place of ece_10 and
aurc, as it always has); "paper_mcqa" / "paper_openqa" are the metrics of the wide
Markdown table in the paper's shape (`calm compare --wide`, Compare). Adding a column
is one entry here (its key must be in the rows: `summarize`'s METRICS, `result_row` or
`generative.judge.summarize_open`) and its test in tests/test_calibrators.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

KEY_COLUMNS = ("dataset", "variant")  # every table starts with these: which set, which variant

TABLES: dict[str, str] = {
    "mcqa": "multiple-choice results of runs: Monitor, Compare, the HTML report, `calm compare`",
    "mcqa_eval": "what `calm eval` prints for multiple-choice sets",
    "openqa": "open-answer results: runs and `calm eval --task openqa`",
    "paper_mcqa": "metrics per dataset of the wide Markdown table (`calm compare --wide`, Compare)",
    "paper_openqa": "the same for open-answer runs",
}

MC = ("mcqa", "mcqa_eval")
ALL = ("mcqa", "mcqa_eval", "openqa")


@dataclass(frozen=True)
class Column:
    """A result row's key as a table column.

    name: the row key; label: what it means, for tooltips and captions; fmt: format of
    a float cell (ints and text are shown as they are); higher_is_better: True, False,
    or None (a count or a description: no direction); tables: the TABLES showing it."""

    name: str
    label: str
    higher_is_better: bool | None
    tables: tuple[str, ...]
    fmt: str = ".4f"

    @property
    def help(self) -> str:
        """The label with its direction: "ECE, 15 equal-width bins (lower is better)"."""
        if self.higher_is_better is None:
            return self.label
        return f"{self.label} ({'higher' if self.higher_is_better else 'lower'} is better)"


COLUMNS: tuple[Column, ...] = (
    Column("n", "items evaluated", None, ALL, fmt="d"),
    Column(
        "acc", "accuracy (open answers: the greedy answer's exact match)", True, (*ALL, "paper_mcqa", "paper_openqa")
    ),
    Column("sem_acc", "accuracy of the Sem1 (modal) answer", True, ("openqa", "paper_openqa")),
    Column("ece", "ECE, 15 equal-width bins", False, (*ALL, "paper_mcqa")),
    Column("ece_10", "ECE, 10 equal-width bins (the paper's)", False, ("mcqa", "openqa", "paper_mcqa", "paper_openqa")),
    Column("mce", "maximum calibration error, 15 bins", False, ("mcqa_eval",)),
    Column("sem2_ece_10", "ECE of the split-half Sem2 confidence, 10 bins", False, ("openqa",)),
    Column("seq_ece_10", "ECE of the greedy answer's sequence probability, 10 bins", False, ("openqa",)),
    Column("brier", "Brier score", False, MC),
    Column("nll", "negative log-likelihood of the gold option", False, MC),
    Column("auroc", "AUROC of confidence against correctness (0.5: no separation)", True, ALL),
    Column("aurc", "area under the risk-coverage curve", False, ("mcqa",)),
    Column("confidence", "mean confidence", None, ALL),
)
BY_NAME = {c.name: c for c in COLUMNS}


def metric_names(*tables: str) -> tuple[str, ...]:
    """The metric columns shown by any of `tables`, in COLUMNS order."""
    unknown = [t for t in tables if t not in TABLES]
    if unknown or not tables:
        raise ValueError(f"Expected table names in {sorted(TABLES)}, but got {list(tables)}")
    return tuple(c.name for c in COLUMNS if any(t in c.tables for t in tables))


def table_columns(*tables: str) -> tuple[str, ...]:
    """KEY_COLUMNS then `metric_names(*tables)`: the header of a results table."""
    return (*KEY_COLUMNS, *metric_names(*tables))


def task_table(rows: list[dict[str, Any]]) -> str:
    """The runs' table for these rows: "openqa" when every row is an open-answer row."""
    return "openqa" if rows and all(r.get("task") == "openqa" for r in rows) else "mcqa"


def help_texts(names: tuple[str, ...] | list[str]) -> dict[str, str]:
    """{column: its label and direction} for the declared ones among `names` (tooltips)."""
    return {n: BY_NAME[n].help for n in names if n in BY_NAME}


def cell(name: str, value: Any) -> str:
    """A table cell: a float in its column's format (4 decimals for keys not declared
    here), anything else as str."""
    if isinstance(value, float):
        column = BY_NAME.get(name)
        return format(value, column.fmt if column and column.fmt != "d" else ".4f")
    return str(value)


def is_missing(value: Any) -> bool:
    """None or nan: a cell a table shows as a dash."""
    return value is None or (isinstance(value, float) and math.isnan(value))
