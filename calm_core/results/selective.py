"""Selective answering on a finished run: above which confidence may a variant answer
alone, how often is it then wrong, and which options must a person still check.

    request = SelectiveRequest("calm", target_error=0.1)          # rule crc, sets at 90% coverage
    report = selective_report(RunDir.at(run_id), request)          # thresholds on S_V, rows per evaluation set
    save_choice(RunDir.at(run_id), report)                         # selective.json, for the export

The threshold and the LAC sets are chosen on S_V only (the run's `heldout/<variant>.parquet`,
written by the final evaluation beside the recommendation: post-hoc calibrators out of
fold), never on an evaluation set, then measured on every evaluation set with 90% intervals
(calibration/selective_answerer.py's `SelectiveAnswerer` over calibration/selective.py,
selective_summary.py), beside the untouched model under its own
threshold. `calm selective` and Compare's section both read this module.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from calm_core.access.rules import Access, Refused, write_refusal
from calm_core.calibration import selective
from calm_core.calibration.recommend import ALL_LABELLED, HELDOUT_ONLY
from calm_core.calibration.selective import (
    CRC,
    DEFAULT_DELTA,
    DEFAULT_RULE,
    DEFAULT_TARGET,
    LTT,
    LTT_ANSWERED,
    RULES,
    Threshold,
    TooFewItems,
)
from calm_core.calibration.selective_answerer import SelectiveAnswerer
from calm_core.calibration.selective_summary import LEVEL, Estimate, SelectiveSummary, summarize_selective
from calm_core.results.verdict import variant_label
from calm_core.runs.layout import HELDOUT, heldout_path, predictions_path
from calm_core.runs.rundir import RunDir

# The summary's columns, as every table (CLI, Compare) heads them; each is in the glossary.
COLUMNS = ("answered", "error among answered", "error among all", "coverage", "set size")
# The section's other words a page shows (tests/test_glossary.py reads both lists).
WORDS = ("threshold", "answers nothing", "target error", "conformal risk control", "Learn then Test", "LAC")
ALMOST_NOTHING = 0.1  # a guarantee met by answering under this share of S_V is met by abstaining: said
KEYS = dict(zip(COLUMNS, ("answered", "error_answered", "error_all", "coverage", "set_size"), strict=True))
ASSUMPTION = (
    "It assumes the held-out items and the new questions are exchangeable: drawn from the same source, "
    "in no particular order. It says nothing about questions from another domain."
)


@dataclass(frozen=True)
class SelectiveRequest:
    """What to choose: for `variant`, a threshold under `rule` at `target_error` (`delta`:
    ltt's chance of a misleading S_V), and LAC sets at `coverage` (None: 1 - target_error)."""

    variant: str
    target_error: float = DEFAULT_TARGET
    rule: str = DEFAULT_RULE
    delta: float = DEFAULT_DELTA
    coverage: float | None = None

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"Expected `rule` to be one of {', '.join(RULES)}, but got {self.rule!r}")
        for name in ("target_error", "delta", "coverage"):
            value = getattr(self, name)
            if value is not None and not 0.0 < float(value) < 1.0:
                raise ValueError(f"Expected `{name}` to be in (0, 1), but got {value}")

    def answerer(self) -> SelectiveAnswerer:
        """The unfitted answerer of this request: its rule, the target error as its
        `target_level`, 1 - delta as its `confidence_level`."""
        return SelectiveAnswerer(self.rule, target_level=self.target_error, confidence_level=1.0 - self.delta)

    @property
    def set_coverage(self) -> float:
        return 1.0 - self.target_error if self.coverage is None else float(self.coverage)


@dataclass(frozen=True)
class Choice:
    """One variant's threshold and LAC quantile on S_V, or why each was refused."""

    variant: str
    n_heldout: int
    fit: str  # how its S_V probabilities depend on S_V's labels (heldout/<variant>.parquet)
    threshold: Threshold | None
    qhat: float | None
    refusal: str | None = None  # the threshold's
    set_refusal: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "threshold": self.threshold.to_dict() if self.threshold else None}


@dataclass(frozen=True)
class SelectiveReport:
    """The request, each variant's choice (the asked one, then base) and one row per
    (evaluation set, variant) with its summary."""

    run_id: str
    request: SelectiveRequest
    choices: dict[str, Choice]
    rows: list[dict[str, Any]] = field(default_factory=list)
    calibrate_on: str = HELDOUT_ONLY  # the run's setting: with ALL_LABELLED, why only S_V counts is said

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": self.run_id,
            "request": dict(self.request.__dict__, coverage=self.request.set_coverage),
            "guarantee": guarantee_text(self.request),
            "assumption": ASSUMPTION,
            "choices": {name: choice.to_dict() for name, choice in self.choices.items()},
            "rows": [{**row, "summary": row["summary"].to_dict()} for row in self.rows],
        }


def guarantee_text(request: SelectiveRequest) -> str:
    """The guarantee of the request's rule in plain words, with its target and its set rule."""
    target, sets, sure = f"{request.target_error:.0%}", f"{request.set_coverage:.0%}", f"{1 - request.delta:.0%}"
    all_items = "This is the error among all questions, not among the answered ones, which is measured below."
    said = {
        CRC: f"On a new question, the chance that the model answers it alone and is wrong is at most {target}, "
        f"on average over held-out draws (conformal risk control). {all_items}",
        LTT: f"On a new question, the chance that the model answers it alone and is wrong is at most {target}, "
        f"with {sure} probability over the held-out draw (Learn then Test). {all_items}",
        LTT_ANSWERED: f"Among the questions the model answers alone, at most {target} are wrong, with {sure} "
        "probability over the held-out draw (Learn then Test).",
    }[request.rule]
    return f"{said} The option sets hold the right answer for at least {sets} of questions (LAC)."


def heldout_variants(run: RunDir) -> list[str]:
    """The variants whose S_V probabilities the run stored (selective answering can use them)."""
    folder = run.path / HELDOUT
    return sorted(p.stem for p in folder.glob("*.parquet")) if folder.is_dir() else []


def _probs_matrix(rows: Any) -> np.ndarray:
    """Ragged per-item probability lists -> (N, K), NaN where an item has fewer options."""
    width = max(len(row) for row in rows)
    out = np.full((len(rows), width), np.nan)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def heldout_probs(run: RunDir, variant: str) -> tuple[np.ndarray, np.ndarray, str]:
    """(probs (N, K), gold (N,), how they were fitted) of `variant` on S_V; a run without them
    is refused with the way out."""
    path = heldout_path(run.path, variant)
    if not path.is_file():
        stored = ", ".join(heldout_variants(run)) or "none"
        raise ValueError(
            f"Expected S_V probabilities of `{variant}` in run {run.run_id} ({path}), but found none "
            f"(stored: {stored}); runs finished before selective answering, or with eval_baselines off, lack "
            "them: a new run of the same settings writes them"
        )
    frame = run.read_predictions(path)
    fit = str(frame["fit"].iloc[0]) if "fit" in frame and len(frame) else "unknown"
    return _probs_matrix(list(frame["probs"])), frame["gold"].to_numpy(dtype=np.int64), fit


def choose(run: RunDir, request: SelectiveRequest, variant: str) -> Choice:
    """`variant`'s threshold and LAC quantile on S_V; each refusal kept as its reason."""
    probs, gold, fit = heldout_probs(run, variant)
    threshold = qhat = refusal = set_refusal = None
    try:
        threshold = request.answerer().calibrate(probs, gold).record_
    except TooFewItems as exc:
        refusal = str(exc)
    try:
        qhat = selective.lac_quantile(probs, gold, request.set_coverage)
    except TooFewItems as exc:
        set_refusal = str(exc)
    return Choice(variant, len(gold), fit, threshold, qhat, refusal, set_refusal)


def evaluation_sets(run: RunDir, variant: str) -> list[tuple[str, str, bool]]:
    """(label, dataset as stored, added after training) of every set `variant` was evaluated on."""
    rows = [*run.results().rows, *run.added_results()]
    out = []
    for row in rows:
        if row["variant"] == variant:
            added = bool(row.get("added_after_training"))
            out.append((row["dataset"] + (" (added)" if added else ""), row["dataset"], added))
    return list(dict.fromkeys(out))


def set_probs(run: RunDir, variant: str, dataset: str, added: bool) -> tuple[np.ndarray, np.ndarray]:
    """(probs (N, K), gold (N,)) of `variant` on one evaluation set, from its predictions."""
    frame = run.read_predictions(predictions_path(run.added_dir if added else run.path, variant, dataset))
    if "probs" not in frame:
        raise ValueError(f"Expected option probabilities of `{variant}` on {dataset}, but its predictions have none")
    return _probs_matrix(list(frame["probs"])), frame["gold"].to_numpy(dtype=np.int64)


def summary_rows(run: RunDir, choice: Choice) -> list[dict[str, Any]]:
    """One row per evaluation set of `choice.variant`: its summary under the chosen threshold."""
    if choice.threshold is None:
        return []
    rows = []
    for label, dataset, added in evaluation_sets(run, choice.variant):
        probs, gold = set_probs(run, choice.variant, dataset, added)
        summary = summarize_selective(probs, gold, choice.threshold.threshold, choice.qhat)
        rows.append({"dataset": label, "variant": choice.variant, "summary": summary})
    return rows


def selective_report(run: RunDir, request: SelectiveRequest) -> SelectiveReport:
    """The request's variant and the untouched model, each under its own S_V choice, on
    every evaluation set (rows grouped by set: the variant, then base)."""
    names = list(dict.fromkeys([request.variant, *(["base"] if "base" in heldout_variants(run) else [])]))
    choices = {name: choose(run, request, name) for name in names}
    rows = [row for name in names for row in summary_rows(run, choices[name])]
    order = list(dict.fromkeys(row["dataset"] for row in rows))
    rows.sort(key=lambda row: (order.index(row["dataset"]), names.index(row["variant"])))
    calibrate_on = run.config.train.calibrate_on or HELDOUT_ONLY
    return SelectiveReport(run.run_id, request, choices, rows, calibrate_on)


def cell(estimate: Estimate | None, percent: bool = True) -> str:
    """ "42% (35%-49%)" or "1.80 (1.60-2.00)"; "-" when nothing was measured."""
    if estimate is None or math.isnan(estimate.value):
        return "-"
    if percent:
        return f"{estimate.value:.0%} ({estimate.low:.0%}-{estimate.high:.0%})"
    return f"{estimate.value:.2f} ({estimate.low:.2f}-{estimate.high:.2f})"


def table_rows(report: SelectiveReport) -> list[dict[str, str]]:
    """The report's rows as text cells under COLUMNS (and set, variant, threshold, items)."""
    out = []
    for row in report.rows:
        summary: SelectiveSummary = row["summary"]
        threshold = report.choices[row["variant"]].threshold
        cells = {name: cell(getattr(summary, KEYS[name]), name != "set size") for name in COLUMNS}
        out.append(
            {
                "evaluation set": row["dataset"],
                "variant": variant_label(row["variant"]),
                "threshold": threshold_text(threshold),
                "items": str(summary.n),
                **cells,
            }
        )
    return out


def threshold_text(threshold: Threshold | None) -> str:
    if threshold is None:
        return "-"
    return "answers nothing" if math.isinf(threshold.threshold) else f"{threshold.threshold:.3f}"


def choice_line(choice: Choice) -> str:
    """One sentence per variant: its threshold on S_V, or why there is none; a guarantee
    met by answering (almost) nothing says so in a second sentence."""
    who = variant_label(choice.variant)
    if choice.threshold is None:
        return f"{who}: no threshold. {choice.refusal}"
    t = choice.threshold
    answered = f"answers {t.heldout_answered} of {t.n_heldout} held-out items ({t.heldout_errors} wrong)"
    sets = f"option sets: 1 - p <= {choice.qhat:.3f}" if choice.qhat is not None else f"no sets: {choice.set_refusal}"
    said = f"{who}: threshold {threshold_text(t)}, {answered}; {sets}; {fit_words(choice.fit)}."
    abstains = abstention_words(t)
    return f"{said} {abstains}" if abstains else said


def abstention_words(t: Threshold) -> str | None:
    """A sentence when the guarantee is met by answering under ALMOST_NOTHING of S_V: a
    threshold that answers nothing meets every target, so meeting it tells nothing by itself."""
    if t.n_heldout and t.heldout_answered >= ALMOST_NOTHING * t.n_heldout:
        return None
    if t.heldout_answered == 0:
        return (
            f"The guarantee is met by answering none of the {t.n_heldout} held-out items: at this target the model "
            "never answers alone."
        )
    return (
        f"The guarantee is met by answering {t.heldout_answered} of {t.n_heldout} held-out items: at this target "
        "the model answers almost nothing alone."
    )


def crc_way_out(report: SelectiveReport) -> str | None:
    """Where the asked rule refused for too few items and conformal risk control can choose
    on them, the command that does, naming the guarantee it gives (another error for
    `ltt-answered`: the error among all questions, on average, not among answered ones)."""
    request = report.request
    choice = report.choices[request.variant]
    if choice.threshold is not None or request.rule == CRC:
        return None
    if choice.n_heldout < selective.crc_min_items(request.target_error):
        return None
    changed = " (another error than the one asked: among all questions, not among answered)" * (
        request.rule == LTT_ANSWERED
    )
    return (
        f"calm selective {report.run_id} --variant {request.variant} --target-error {request.target_error:g} "
        f"--rule crc: {RULES[CRC]}{changed}"
    )


def coverage_note(report: SelectiveReport) -> str | None:
    """The sets where the chosen variant's option sets covered less than promised, with what
    a marginal promise means for one small set: LAC's coverage holds over many draws of held-out
    and new questions, and one set of n lands at `marginal_low` or under at least one time in ten
    while it holds. None when every set is at or over the promise."""
    request, level = report.request, report.request.set_coverage
    below = [
        row
        for row in report.rows
        if row["variant"] == request.variant
        and row["summary"].coverage is not None
        and row["summary"].coverage.value < level
    ]
    if not below:
        return None
    named = ", ".join(f"{row['dataset']} ({cell(row['summary'].coverage)})" for row in below)
    n = min(row["summary"].n for row in below)
    low = selective.marginal_low(n, level)
    return (
        f"Under the promised {level:.0%} coverage here: {named}. The promise is marginal: at least {level:.0%} over "
        f"many draws of held-out and new questions, not on each set. Even when it holds exactly, one set of {n} "
        f"questions comes out at {low} of {n} ({low / n:.0%}) or fewer at least one time in ten."
    )


def sv_only_note(report: SelectiveReport) -> str | None:
    """Why a run that fitted its calibrators k-fold on S_T + S_V still chooses thresholds
    on S_V alone (None for a run calibrated on S_V): the trained model learned from S_T, so
    its S_T answers are better than on new questions, and a calibrator's out-of-fold S_T
    predictions come from the fold fits, not the exported one, so they are exchangeable
    with new questions only approximately; the untouched model's would count, but every
    variant is chosen on the same items, so that their thresholds compare."""
    if report.calibrate_on != ALL_LABELLED:
        return None
    n = next(iter(report.choices.values())).n_heldout if report.choices else 0
    return (
        f"Only the {n} S_V items choose the thresholds, though this run fitted its calibrators k-fold on S_T + S_V "
        "(calibrate_on = all): the trained model learned from S_T, so its answers there are better than on new "
        "questions, and a calibrator's out-of-fold S_T predictions come from the fold fits, not the exported one, "
        "so neither keeps the guarantee exact, and every variant is chosen on the same items."
    )


def fit_words(fit: str) -> str:
    """How the variant's S_V probabilities depend on S_V's labels (runs/layout.py), as a clause."""
    return "its S_V probabilities used no S_V label" if fit == "no S_V label" else f"its S_V probabilities: {fit}"


def above_target_note(report: SelectiveReport) -> str | None:
    """The sets where the chosen variant's guaranteed error came out above the target, said
    with why that can happen: the guarantee holds over draws of held-out and new questions
    (on average, or with probability 1 - delta), not on every test split, and a small set's
    interval is wide. None when every set is at or under the target."""
    request = report.request
    key = "error among answered" if request.rule == LTT_ANSWERED else "error among all"
    above = [
        f"{row['dataset']} ({cell(getattr(row['summary'], KEYS[key]))})"
        for row in report.rows
        if row["variant"] == request.variant
        and report.choices[request.variant].threshold is not None
        and getattr(row["summary"], KEYS[key]).value > request.target_error
    ]
    if not above:
        return None
    return (
        f"Above the {request.target_error:.0%} target here, the {key}: {', '.join(above)}. The guarantee holds over "
        "draws of held-out and new questions, not on every set: one set can land above it, more often the fewer "
        "its items (its interval says how far)."
    )


def save_refusal(run: RunDir, access: Access | None, session: str | None) -> str | None:
    """Why `session` may not save a threshold with `run` (None: it may, or no `access` given:
    the command line): a shared studio's owner rule (access.write_refusal)."""
    return None if access is None else write_refusal(access, session, run.config.launched_by)


def save_choice(
    run: RunDir, report: SelectiveReport, access: Access | None = None, session: str | None = None
) -> dict[str, Any]:
    """Write the report's choice for its variant to the run's selective.json (what an export
    reads: the threshold, its rule and target, the guarantee) and return the record. With
    the studio's `access`, Refused unless `session` may write into the run (save_refusal)."""
    refusal = save_refusal(run, access, session)
    if refusal:
        raise Refused(refusal)
    choice = report.choices[report.request.variant]
    if choice.threshold is None:
        raise ValueError(f"Expected a threshold to save, but {choice.refusal}")
    record = {
        "variant": choice.variant,
        "rule": report.request.rule,
        "rule_text": RULES[report.request.rule],
        "target_error": report.request.target_error,
        "delta": None if report.request.rule == CRC else report.request.delta,
        "threshold": choice.threshold.to_dict()["threshold"],  # None: answer nothing
        "coverage": report.request.set_coverage,
        "qhat": choice.qhat,
        "n_heldout": choice.n_heldout,
        "heldout_fit": choice.fit,
        "guarantee": guarantee_text(report.request),
        "assumption": ASSUMPTION,
        "level": LEVEL,
        "saved_at": time.time(),
    }
    run.write_selective(record)
    return record


def default_variant(run: RunDir) -> str:
    """The variant to start from: the run's recommendation when it stored its S_V
    probabilities, else its trained method, else base."""
    stored = heldout_variants(run)
    recommended = run.results().recommended or ""
    method = run.config.train_method
    for name in (recommended, method):
        if name in stored:
            return name
    return "base"
