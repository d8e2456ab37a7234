"""Every metric and every results-table column, declared once.

A `Column` is one key of a result row (`calm eval --json`, results.json). The one
declaration says everything the project does with it:

- `compute`: the function over (probs, labels) that `summarize` calls for it (None: the
  key comes from elsewhere: `result_row`'s `ece_10`, `generative.judge.summarize_open`);
- `label`, `higher_is_better`, `fmt`: a table's tooltip, direction and cell format;
- `tables`: which results tables show it (TABLES says which screen each is);
- `curve`: the title of its Monitor curve. A multiple-choice run then logs it per set at
  every evaluation (`eval/<set>/<name>` in metrics.jsonl) and the Monitor draws it;
- `interval`: every result row carries its 90% bootstrap interval (`ci90`), and the
  verdict's evidence table shows it.

    table_columns("mcqa")            # ("dataset", "variant", "n", "acc", "ece", "ece_10", ...)
    table_columns("mcqa", "openqa")  # a Compare of both kinds of run: the union, same order
    curve_names()                    # ("acc", "ece", ...): what an evaluation logs per set
    cell("acc", 0.51234)             # "0.5123"

Tables: "mcqa" and "openqa" are the results of runs (Monitor, Compare, the HTML report,
`calm compare`, the export's README) and of `calm eval --task openqa`; "mcqa_eval" is
what `calm eval` prints; "paper_mcqa" / "paper_openqa" are the metrics of the wide
Markdown table in the paper's shape (`calm compare --wide`, Compare). Adding a metric is
one entry in COLUMNS (docs/architecture.md, "Adding a metric"). Every reader takes
COLUMNS at call time, so a test may swap it.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from calm_core.calibration.metrics.calibration import adaptive_ece, classwise_ece, ece, mce, rms_ce
from calm_core.calibration.metrics.scores import accuracy, aurc, auroc, brier, mean_confidence, mean_entropy, nll
from calm_core.calibration.metrics.smooth import smooth_ece
from calm_core.glossary import lookup

Compute = Callable[..., float]  # (probs (N, K), labels (N,)[, n_bins]) -> float

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
    """A result row's key: a metric, a column, a curve, or all three.

    name: the row key; label: what it means, for tooltips and captions; higher_is_better:
    True, False, or None (a count or a description: no direction); tables: the TABLES
    showing it; fmt: format of a float cell (ints and text are shown as they are);
    compute: the metric over (probs, labels) that `summarize` adds to every row, None for
    a key made elsewhere; binned: compute also takes n_bins; curve: its Monitor curve's
    title (None: not logged per evaluation); interval: its 90% bootstrap interval goes
    into every row's `ci90`; bounds: the values it can take, which its interval keeps to."""

    name: str
    label: str
    higher_is_better: bool | None
    tables: tuple[str, ...] = ()
    fmt: str = ".4f"
    compute: Compute | None = None
    binned: bool = False
    curve: str | None = None
    interval: bool = False
    bounds: tuple[float, float] = (-math.inf, math.inf)  # the values it can take: an interval is clipped to them

    def metric(self) -> Compute:
        """`compute`, for a column `computed()` returned: a key made elsewhere has none."""
        if self.compute is None:
            raise ValueError(f"Expected a computed metric, but `{self.name}` is made outside summarize")
        return self.compute

    @property
    def help(self) -> str:
        """The label with its direction: "ECE, 15 equal-width bins (lower is better)"."""
        if self.higher_is_better is None:
            return self.label
        return f"{self.label} ({'higher' if self.higher_is_better else 'lower'} is better)"


def _mean_entropy(probs: np.ndarray, labels: np.ndarray) -> float:
    return mean_entropy(probs)


def _mean_confidence(probs: np.ndarray, labels: np.ndarray) -> float:
    return mean_confidence(probs)


PAPER = ("paper_mcqa", "paper_openqa")
UNIT = (0.0, 1.0)  # a share, a gap between two shares, or a probability
# In table order: a table shows its columns in this order, after KEY_COLUMNS.
COLUMNS: tuple[Column, ...] = (
    Column("n", "items evaluated", None, ALL, fmt="d"),
    Column(
        "acc",
        "accuracy (open answers: the greedy answer's exact match)",
        True,
        (*ALL, *PAPER),
        compute=accuracy,
        curve="Accuracy",
        interval=True,
        bounds=UNIT,
    ),
    Column("sem_acc", "accuracy of the Sem1 (modal) answer", True, ("openqa", "paper_openqa")),
    Column(
        "ece",
        "ECE, 15 equal-width bins",
        False,
        (*ALL, "paper_mcqa"),
        compute=ece,
        binned=True,
        curve="ECE (15 bins)",
        interval=True,
        bounds=UNIT,
    ),
    Column("ece_10", "ECE, 10 equal-width bins (the paper's)", False, ("mcqa", "openqa", *PAPER)),
    Column("mce", "maximum calibration error, 15 bins", False, ("mcqa_eval",), compute=mce, binned=True, bounds=UNIT),
    Column(
        "rms_ce",
        "RMS calibration error: root of the bin-weighted mean squared gap, the same 15 bins as ECE",
        False,
        ("mcqa_eval",),
        compute=rms_ce,
        binned=True,
        bounds=UNIT,
    ),
    Column("adaptive_ece", "ECE over 15 equal-mass bins", False, compute=adaptive_ece, binned=True, bounds=UNIT),
    Column("classwise_ece", "classwise ECE, 15 bins", False, compute=classwise_ece, binned=True, bounds=UNIT),
    Column("sem2_ece_10", "ECE of the split-half Sem2 confidence, 10 bins", False, ("openqa",)),
    Column("seq_ece_10", "ECE of the greedy answer's sequence probability, 10 bins", False, ("openqa",)),
    Column("brier", "Brier score", False, MC, compute=brier, bounds=(0.0, 2.0)),
    Column(
        "nll",
        "negative log-likelihood of the gold option",
        False,
        MC,
        compute=nll,
        curve="NLL (the selection's score on S_V)",
        bounds=(0.0, math.inf),
    ),
    Column(
        "auroc",
        "AUROC of confidence against correctness (0.5: no separation)",
        True,
        ALL,
        compute=auroc,
        curve="AUROC (confidence against correctness)",
        interval=True,
        bounds=UNIT,
    ),
    Column(
        "aurc",
        "area under the risk-coverage curve",
        False,
        ("mcqa",),
        compute=aurc,
        curve="AURC (risk-coverage)",
        bounds=UNIT,
    ),
    Column(
        "entropy",
        "mean entropy of the forecast, nats",
        None,
        compute=_mean_entropy,
        curve="Mean entropy",
        bounds=(0.0, math.inf),
    ),
    Column(
        "confidence",
        "mean confidence",
        None,
        ALL,
        compute=_mean_confidence,
        curve="Mean confidence",
        interval=True,
        bounds=UNIT,
    ),
    Column("smooth_ece", "smooth ECE (Błasiok & Nakkiran 2023)", False, compute=smooth_ece, bounds=UNIT),
)


def by_name() -> dict[str, Column]:
    """name -> its Column (built once per COLUMNS: `cell` asks for every table cell)."""
    return _index(COLUMNS)


@functools.lru_cache(maxsize=4)
def _index(columns: tuple[Column, ...]) -> dict[str, Column]:
    return {c.name: c for c in columns}


def computed() -> tuple[Column, ...]:
    """The metrics `summarize` computes for every row."""
    return tuple(c for c in COLUMNS if c.compute is not None)


def curves() -> tuple[tuple[str, str], ...]:
    """(name, title) of each metric a multiple-choice evaluation logs per set
    (`eval/<set>/<name>`), which the Monitor draws as a curve with that title."""
    return tuple((c.name, c.curve) for c in COLUMNS if c.curve)


def curve_names() -> tuple[str, ...]:
    """The names of `curves()`."""
    return tuple(name for name, _ in curves())


def interval_names() -> tuple[str, ...]:
    """The metrics with a 90% bootstrap interval in every result row (`ci90`)."""
    return tuple(c.name for c in COLUMNS if c.interval)


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
    """{column: its tooltip} for the declared ones among `names`: the plain definition from
    the glossary (calm_core.glossary), then the column's own label and direction, so a
    table's header and docs/glossary.md say the same thing."""
    declared = by_name()
    out = {}
    for n in names:
        if n in declared:
            term = lookup(n)
            out[n] = f"{term.definition}\n\n`{n}`: {declared[n].help}" if term else declared[n].help
    return out


def cell(name: str, value: Any) -> str:
    """A table cell: a float in its column's format (4 decimals for keys not declared
    here), anything else as str."""
    if isinstance(value, float):
        column = by_name().get(name)
        return format(value, column.fmt if column and column.fmt != "d" else ".4f")
    return str(value)


def is_missing(value: Any) -> bool:
    """None or nan: a cell a table shows as a dash."""
    return value is None or (isinstance(value, float) and math.isnan(value))
