"""Which fast paths a model got and why, in words, for the Train page, the Monitor and the
report (and the scoring rule and precision a run settled on, `setting_choice_lines`): from
a run's recorded choices (`RunChoices.fast_paths`, runs/choices_record.py) or, before any
run, from the checks measured on this machine (`scoring.path_checks.known_fast_paths`).

    rows = fast_path_rows(run.status.choices.fast_paths)   # [{"fast path", "used", "why"}]
    record = model_fast_paths("embedded")                     # None until it was measured
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from calm_core.provenance import model_fingerprint
from calm_core.runs.choices_record import PathChoice, RunChoices

_REMEASURE = "delete it (scoring.path_checks.checks_folder): the next run or evaluation measures it again"

LABELS = {
    "frozen_prefix": "frozen prefix",
    "hidden_path": "hidden path",
    "feature_capture": "feature capture",
    "prefix_sharing": "prefix sharing",
}
MEANINGS = {
    "frozen_prefix": "the layers below LoRA run once per sequence, not every step",
    "hidden_path": "the LM head runs only on the positions a score needs",
    "feature_capture": "the calibrator's features come from the scoring pass itself",
    "prefix_sharing": "a question runs once for all its options (KV cache)",
}


def fast_path_rows(record: Mapping[str, PathChoice] | None) -> list[dict[str, str]]:
    """One row per recorded fast path: its name, used or not, and the measured reason."""
    return [
        {
            "fast path": LABELS.get(name, name),
            "used": "yes" if check.on else "no",
            "why": check.reason,
            "what it does": MEANINGS.get(name, ""),
        }
        for name, check in (record or {}).items()
    ]


def fast_path_items(record: Mapping[str, PathChoice] | None) -> list[tuple[str, str]]:
    """(label, "used: why" / "not used: why") pairs: the report's settings table rows."""
    return [
        (f"fast path: {row['fast path']}", ("used: " if row["used"] == "yes" else "not used: ") + row["why"])
        for row in fast_path_rows(record)
    ]


def setting_choice_lines(choices: RunChoices) -> list[tuple[str, str]]:
    """(label, words) for the scoring rule and the precision a run settled on, each with its
    reason (status.json choices.scoring / choices.precision): the Monitor's caption and the
    report's settings rows. [] for a run recorded before either was."""
    lines = []
    scoring = choices.scoring
    if scoring is not None and scoring.rule:
        rule = scoring.rule + (" under the chat template" if scoring.chat_template else "")
        lines.append(("scoring", f"{rule}: {scoring.reason}"))
    precision = choices.precision
    if precision is not None and precision.dtype:
        lines.append(("precision", f"{precision.dtype}: {precision.reason}"))
    return lines


def model_fast_paths(model: str) -> dict[str, PathChoice] | None:
    """The checks measured on this machine for `model` (a name as the Train page takes
    it: "embedded", a local directory or .gguf file), shaped as a run records them; the
    frozen prefix's per split ("frozen_prefix (below layer k)"). None for a hub id or a
    model never loaded here: the probe runs when a run or an evaluation first loads it."""
    from calm_core.scoring.path_checks import known_fast_paths

    folder = _model_folder(model)
    known = known_fast_paths(model_fingerprint(folder)) if folder is not None else None
    if known is None:
        return None
    where = "the fast-path checks measured on this machine"
    checks: dict[str, Any] = dict(known.get("scoring") or {})
    for split, check in sorted((known.get("frozen_prefix") or {}).items()):
        checks[f"frozen prefix (below layer {split})"] = check
    return {name: PathChoice.from_json(check, where, _REMEASURE, where=name) for name, check in checks.items()}


def _model_folder(model: str) -> Path | None:
    from calm_core.scoring.models import converted_dir, embedded_model_dir, named_model

    if model == "embedded":
        return embedded_model_dir()
    if named_model(model):  # gemma3-270m: its converted folder, once converted (never converting here)
        return converted_dir(model.strip())
    path = Path(model).expanduser()
    return path if path.exists() else None
