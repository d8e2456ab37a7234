"""results.json's `recommendation` as a typed record: which variant to use, chosen on S_V,
and the evidence its sentence reads.

    rec = results.recommendation                 # Recommendation | None (runs/records.py)
    rec.variant, rec.decision, rec.heldout["ts"].nll
    rec.comparison.against_reference["ts"].hi    # a PairedDifference
    rec.stages["S_V"]                            # calibrate_on = all: the second stage, a Recommendation

calibration/recommend.py writes it (`recommend` returns one), training/tasks/mcqa.py stores
`to_json()`, and every reader (the sentence, the evidence table, the export, the card) reads
these attributes instead of walking the JSON. `from_json` is the runs' one decoder
(record_fields.decode), so a damaged recommendation is refused by name like any run file.
Fields that older runs did not record take the default their readers assumed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from calm_core.calibration.metrics.paired import PairedDifference
from calm_core.runs.record_fields import decode, encode

# What the compared items are, in words (Comparison.items): S_V, or with calibrate_on = all
# every labelled item's out-of-fold prediction.
HELDOUT_ITEMS, LABELLED_ITEMS = "held-out items", "labelled items (S_T + S_V, out of fold)"
_ADVICE = "rerun the final evaluation (`calm train --resume RUN_ID`) to write it again"


@dataclass(frozen=True)
class VariantFigures:
    """One variant's figures on the compared items, and whether it could be chosen."""

    nll: float | None = None
    acc: float | None = None
    ece: float | None = None
    confidence: float | None = None
    kept_accuracy: bool = True  # within accuracy_slack of the reference's accuracy
    evidence: bool = True  # False: fitted in-sample where any sharper fit scores better
    extra: Mapping[str, Any] = field(default_factory=dict)  # keys a newer writer added: kept on rewrite


@dataclass(frozen=True)
class Comparison:
    """The paired evidence behind a recommendation: each candidate's per-item score
    difference to the reference, and the chosen one's to its runner-up."""

    score: str | None = None  # what is compared, in words ("per-item NLL on S_V")
    n: int = 0
    level: float | None = None
    reference: str = "base"
    candidates: tuple[str, ...] = ()
    against_reference: Mapping[str, PairedDifference] = field(default_factory=dict)  # candidate - reference
    runner_up: str | None = None
    against_runner_up: PairedDifference | None = None  # chosen - runner-up
    simpler: str | None = None
    items: str = HELDOUT_ITEMS
    extra: Mapping[str, Any] = field(default_factory=dict)  # keys a newer writer added: kept on rewrite


@dataclass(frozen=True)
class Recommendation:
    """The chosen variant, why, and every candidate's figures (see the module docstring).

    decision: "keep" (the reference, the model as it is) or "change"; with calibrate_on =
    all, `stages` holds both decisions ("all labelled", "S_V") and `calibrate_on` says so."""

    variant: str | None = None  # None: nothing could be recommended (`reason` says why)
    reason: str | None = None
    heldout: Mapping[str, VariantFigures] = field(default_factory=dict)
    rule: str | None = None
    posthoc_fit: str | None = None  # how the post-hoc calibrators' figures were made (recommend.cross_fitted)
    decision: str | None = None
    comparison: Comparison | None = None
    calibrate_on: str | None = None
    stages: Mapping[str, Recommendation] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)  # keys a newer writer added: kept on rewrite

    @classmethod
    def from_json(
        cls, data: Any, path: str | Path = "results.json", advice: str = _ADVICE, where: str = "recommendation"
    ) -> Recommendation:
        """The record of a recommendation object; RunFileError names the file and the wrong
        key by its dotted `where`. An empty `comparison` (a recommendation made with nothing
        to compare) is None."""
        if isinstance(data, Mapping) and data.get("comparison") == {}:
            data = {**data, "comparison": None}
        return decode(cls, data, path, advice, where=where)

    def to_json(self) -> dict[str, Any]:
        """What results.json stores: every field that holds something."""
        return encode(self)

    @property
    def reference(self) -> str:
        """The variant that means "keep the model as it is"."""
        return self.comparison.reference if self.comparison else "base"

    @property
    def pooled(self) -> bool:
        """Decided on every labelled item, out of fold (calibrate_on = all)."""
        return self.comparison is not None and self.comparison.items == LABELLED_ITEMS
