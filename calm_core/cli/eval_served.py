"""`calm eval --model openai:URL --export DIR`: does a server that serves a merged export
(`calm export RUN DIR --merged`, then e.g. `vllm serve DIR`) give the studio's calibrated
probabilities through the requests its model card prints?

    calm eval --model openai:http://127.0.0.1:8000/v1 --export DIR [--json check.json]

The fixed check questions are scored through the server in every form the card offers
(`export.served_request`: `echo` + `logprobs` with the card's formula, and under the letter
rule `logit_bias` carrying the shifts) and compared with the probabilities the export
recorded from the studio's own scoring. The tokenizer is the export's own. Exit 0 when a
form matches and none gives other numbers; a form the server cannot answer (`logit_bias`
left out of its log-probabilities) is said, not failed; 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from calm_core.cli.usage import UsageError
from calm_core.export.record import EXPORT_FILE
from calm_core.io import atomic_write_json


def check_served_export(args: argparse.Namespace) -> int:
    """Score the check questions through the served export, print each form's gap, and
    return the exit status (module docstring)."""
    from calm_core.export.merged import CHECK_TOLERANCE
    from calm_core.export.served_request import check_forms, served_forms
    from calm_core.scoring.served import is_served, load_served

    if not is_served(args.model):
        raise UsageError("--export checks a served export: give --model openai:URL, the server that serves DIR")
    record = _merged_record(args.export / EXPORT_FILE)
    served = load_served(args.model, str(args.tokenizer or args.export))
    report = check_forms(served_forms(served, record, args.export), record)
    print(
        f"served export: {args.export}  at {served.info['url']} (model {served.name!r})  "
        f"rule: {record['scoring']['rule']}  fold: {record['merged']['fold']}  tolerance: {CHECK_TOLERANCE}"
    )
    for form, result in report.items():
        if "why" in result:
            print(f"  {form:<10} no numbers: {result['why']}")
        else:
            verdict = "matches" if result["ok"] else "DIFFERS from"
            print(f"  {form:<10} {verdict} the studio's probabilities (max |diff| {result['max_abs_diff']:.2e})")
    if args.json:
        atomic_write_json(args.json, {"export": str(args.export), "model": served.info, "forms": report})
    differs = any("why" not in result and not result["ok"] for result in report.values())
    return 0 if any(result["ok"] for result in report.values()) and not differs else 1


def _merged_record(path: Path) -> dict[str, Any]:
    """calm_export.json of a merged multiple-choice export, or the refusal that says why not."""
    if not path.is_file():
        raise UsageError(
            f"no {path.name} in {path.parent}: --export takes the folder `calm export RUN DIR --merged` wrote"
        )
    record: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    if "merged" not in record or record.get("task", "mcqa") != "mcqa":
        raise UsageError(f"{path.parent} is not a merged multiple-choice export (`calm export RUN DIR --merged`)")
    return record
