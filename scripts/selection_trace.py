"""The calibrated stop's trace of one run: every S_V evaluation and what the stop made of it.

    .venv/bin/python scripts/selection_trace.py RUN_ID [--json out.json]

One Markdown row per evaluated step (S_V accuracy, ECE and confidence; for open answers
the Semantic ECE; the lower-level probe; whether the step was eligible and which step was
selected after it), then status.json's `selection` (the rule, the selected step and
step 0's figures). Pure reading of the run directory; works on a run that is still
going or was stopped before its final evaluation.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

COLUMNS = ("eval/heldout/acc", "eval/heldout/ece", "eval/heldout/sem_ece", "eval/heldout/confidence",
           "lower/st_nll", "select/eligible", "select/selected_step")


def trace(records: list[dict]) -> list[dict]:
    """The evaluated steps' S_V and selection figures, in step order."""
    return [{"step": r["step"], **{c: r[c] for c in COLUMNS if c in r}} for r in records if "eval/heldout/acc" in r]


def markdown(rows: list[dict]) -> str:
    shown = [c for c in COLUMNS if any(c in r for r in rows)]
    lines = ["| step | " + " | ".join(shown) + " |", "|" + "---|" * (len(shown) + 1)]
    for r in rows:
        cells = [f"{r[c]:.3f}" if isinstance(r.get(c), float) else str(r.get(c, "-")) for c in shown]
        lines.append(f"| {r['step']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    from calm_core.runs.rundir import RunDir

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_id")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    run = RunDir.at(args.run_id)
    rows = trace(run.read_metrics())
    selection = {k: v for k, v in (run.status.selection or {}).items() if k != "state"}
    print(markdown(rows))
    print("\nselection:", json.dumps(selection, indent=2))
    if args.json:
        args.json.write_text(json.dumps({"run": run.run_id, "evaluations": rows, "selection": selection}, indent=2))


if __name__ == "__main__":
    main()
